"""One process of a transformers Trainer run that torchrun starts, for
huggingface_test.py: get_train_dataloader returns a RemoteDataLoader,
heterodl.huggingface.LoaderState checkpoints its position every 3 steps,
and each process records the dataset indices it trains on.

    torchrun --nproc-per-node 2 hf_trainer_worker.py SERVERS OUTPUT RECORDS \
        [--max-steps N] [--resume]
"""

import argparse
import json

import torch
import transformers

import heterodl
import heterodl.huggingface

parser = argparse.ArgumentParser()
parser.add_argument("servers")
parser.add_argument("output")
parser.add_argument("records")
parser.add_argument("--max-steps", type=int, default=-1)
parser.add_argument("--resume", action="store_true")
args = parser.parse_args()

loader = heterodl.RemoteDataLoader(args.servers, batch_size=4, seed=7, pin_memory=False,
                                   pipeline="random_resized_crop(16)")


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16 * 16 * 3, 14)

    def forward(self, images):
        return self.layer(images.flatten(1).float() / 255)


class ImageTrainer(transformers.Trainer):
    def get_train_dataloader(self):
        return loader

    def compute_loss(self, model, batch, return_outputs=False, num_items_in_batch=None):
        images, labels = batch
        with open(f"{args.records}.{self.args.process_index}", "a") as f:
            f.write(json.dumps({"epoch": loader.epoch,
                                "indices": batch.indices.tolist()}) + "\n")
        logits = model(images)
        loss = torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100)
        return (loss, logits) if return_outputs else loss


training = transformers.TrainingArguments(
    output_dir=args.output, per_device_train_batch_size=4, num_train_epochs=2,
    max_steps=args.max_steps, save_steps=3, ignore_data_skip=True, report_to=[],
    use_cpu=True, logging_steps=100, disable_tqdm=True)
trainer = ImageTrainer(model=Classifier(), args=training,
                       callbacks=[heterodl.huggingface.LoaderState(loader)])
trainer.train(resume_from_checkpoint=True if args.resume else None)
# The Trainer leaves the process group to the interpreter's exit, where
# torch's gloo threads can outlive what they use (an abort, one run in a
# few): end it here, as a script of one's own would.
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
