"""The captioned dataset batched by a collate_fn of its own, run on the data
group: each batch's tokens padded with zeros to its longest caption, as a
text model takes them. A module-level `collate_fn` is what `heterodl serve
--python-dataset` runs on each batch's samples (as DataLoader runs the one
it is given): the loader returns its dict as it is, `tokens` int64
[B, longest caption of this batch], `lengths` int64 [B].

    CUSTOM_DATASET_ROOT=data/sample heterodl serve \\
        --python-dataset padded_captions:train_set \\
        --python-path examples/pytorch/custom_dataset --port 50053 &
    python examples/pytorch/custom_dataset/read_captioned.py --servers 127.0.0.1:50053
"""

import torch
from torch.nn.utils.rnn import pad_sequence

import captioned_dataset


class Padded(captioned_dataset.Captioned):
    # The collate_fn makes the batch: no field is declared ragged.
    ragged_fields = ()


def collate_fn(samples: list) -> dict:
    """Stacks the images and labels, pads the tokens (characters, never 0)
    with 0 to the batch's longest caption."""
    return {
        "image": torch.stack([sample["image"] for sample in samples]),
        "tokens": pad_sequence([sample["tokens"] for sample in samples], batch_first=True),
        "lengths": torch.tensor([len(sample["tokens"]) for sample in samples]),
        "label": torch.tensor([sample["label"] for sample in samples]),
    }


def train_set() -> Padded:
    return Padded(*captioned_dataset.options())
