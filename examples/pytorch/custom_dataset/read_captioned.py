"""Reads the captioned dataset's batches from its servers and trains a
small bag-of-characters caption classifier on them: a batch is a dict, its
tokens a list of tensors of different lengths, packed here as
`nn.EmbeddingBag` takes them.

    python examples/pytorch/custom_dataset/read_captioned.py \\
        --servers 127.0.0.1:50052 --steps 20
"""

import argparse

import torch
import torch.nn.functional as F

import heterodl


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", required=True, help="host:port,host:port")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--keep-servers", action="store_true")
    args = parser.parse_args()

    loader = heterodl.RemoteDataLoader(servers=args.servers, batch_size=args.batch_size, seed=0)
    model = torch.nn.EmbeddingBag(256, len(loader.dataset.classes), mode="mean")
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    step = 0
    epoch = 0
    while step < args.steps:
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            tokens = batch["tokens"]  # B tensors, each as long as its caption
            offsets = torch.tensor([0] + [len(t) for t in tokens[:-1]]).cumsum(0)
            loss = F.cross_entropy(model(torch.cat(tokens), offsets), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            print(f"step {step} images {tuple(batch['image'].shape)} tokens "
                  f"{min(map(len, tokens))}..{max(map(len, tokens))} loss {loss.item():.4f}",
                  flush=True)
            if step >= args.steps:
                break
        epoch += 1
    if not args.keep_servers:
        loader.shutdown_servers()


if __name__ == "__main__":
    main()
