"""Reads the captioned dataset's batches from its servers and trains a
small bag-of-characters caption classifier on them: a batch is a dict, its
tokens either a list of tensors of different lengths (captioned_dataset.py,
ragged), packed here as `nn.EmbeddingBag` takes them, or one tensor padded
with zeros to the batch's longest caption (padded_captions.py's collate_fn).

    python examples/pytorch/custom_dataset/read_captioned.py \\
        --servers 127.0.0.1:50052 --steps 20
"""

import argparse

import torch
import torch.nn.functional as F

import heterodl


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--servers", required=True, help="host:port,host:port")
    parser.add_argument("--batch-size", type=int, default=16,
                        help="samples per batch, per rank")
    parser.add_argument("--steps", type=int, default=20,
                        help="batches to read")
    parser.add_argument("--keep-servers", action="store_true",
                        help="leave the data servers running at the end")
    args = parser.parse_args()

    loader = heterodl.RemoteDataLoader(servers=args.servers, batch_size=args.batch_size, seed=0)
    # Tokens are characters, never 0: 0 is padding, left out of each mean.
    model = torch.nn.EmbeddingBag(256, len(loader.dataset.classes), mode="mean", padding_idx=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    step = 0
    epoch = 0
    while step < args.steps:
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            tokens = batch["tokens"]
            if isinstance(tokens, list):  # ragged: B tensors, each as long as its caption
                lengths = [len(t) for t in tokens]
                offsets = torch.tensor([0] + lengths[:-1]).cumsum(0)
                logits = model(torch.cat(tokens), offsets)
            else:  # collated: [B, longest caption], padded with 0
                lengths = batch["lengths"].tolist()
                logits = model(tokens)
            loss = F.cross_entropy(logits, batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            print(f"step {step} images {tuple(batch['image'].shape)} tokens "
                  f"{min(lengths)}..{max(lengths)} as {type(tokens).__name__} "
                  f"loss {loss.item():.4f}", flush=True)
            if step >= args.steps:
                break
        epoch += 1
    if not args.keep_servers:
        loader.shutdown_servers()


if __name__ == "__main__":
    main()
