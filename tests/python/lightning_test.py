"""A real PyTorch Lightning Trainer on a RemoteDataLoader: trained, stopped
after a mid-epoch checkpoint, resumed from it by Lightning itself, and every
sample of every epoch seen exactly once over the two runs.

Lightning saves the loader's state_dict() in its checkpoints and restores it
with load_state_dict() (torchdata's StatefulDataLoader protocol); nothing
here is heterodl-specific but the loader's constructor.

Run by ctest: python lightning_test.py BUILD_DIR (with the venv's Python and
PYTHONPATH=BUILD_DIR/python). Skips, saying so, when lightning is missing
(scripts/setup.sh installs it).
"""

import glob
import json
import os
import sys
import tempfile
import unittest
import warnings

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")

import torch  # noqa: E402

try:
    import lightning
except ImportError:  # pragma: no cover - setup.sh installs it
    lightning = None

import heterodl  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from processes import sample_dataset, start_server, stop_servers, torchrun  # noqa: E402

SAMPLES = 96
BATCH = 8  # 12 batches per epoch
CHECKPOINT_EVERY = 5  # steps: 15 is batch 3 of epoch 1
STOP_AFTER = 17  # steps of the first run: two past its last checkpoint


def make_module(seen):
    class Tiny(lightning.LightningModule):
        """A linear classifier over 16 x 16 crops; records what it trained on."""

        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(16 * 16 * 3, 14)

        def training_step(self, batch, batch_idx):
            images, labels = batch
            seen.append((self.current_epoch, batch_idx, self.global_step,
                         batch.indices.tolist()))
            x = images.flatten(1).float() / 255
            return torch.nn.functional.cross_entropy(self.layer(x), labels)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Tiny()


@unittest.skipIf(lightning is None, "lightning is not installed (scripts/setup.sh installs it)")
class LightningTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dataset = sample_dataset(HETERODL, SAMPLES, "heterodl-lightning-")
        cls.tmp = os.path.dirname(cls.dataset)
        cls.server, cls.address = start_server(HETERODL, cls.dataset,
                                               os.path.join(cls.tmp, "port"))

    @classmethod
    def tearDownClass(cls):
        stop_servers(cls.server)

    def loader(self):
        return heterodl.RemoteDataLoader(servers=self.address, batch_size=BATCH,
                                         pipeline="random_resized_crop(16)", seed=3)

    def trainer(self, root, **options):
        return lightning.Trainer(
            accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=root, num_sanity_val_steps=0,
            callbacks=[lightning.pytorch.callbacks.ModelCheckpoint(
                dirpath=os.path.join(root, "checkpoints"), every_n_train_steps=CHECKPOINT_EVERY,
                save_top_k=-1, filename="{epoch}-{step}")],
            **options)

    def test_a_mid_epoch_checkpoint_resumes_at_the_next_batch(self):
        root = tempfile.mkdtemp(prefix="heterodl-lightning-run-", dir=self.tmp)
        first = []
        self.trainer(root, max_steps=STOP_AFTER).fit(make_module(first),
                                                     train_dataloaders=self.loader())
        self.assertEqual(len(first), STOP_AFTER)
        checkpoints = glob.glob(os.path.join(root, "checkpoints", "*step=15.ckpt"))
        self.assertEqual(len(checkpoints), 1, os.listdir(os.path.join(root, "checkpoints")))
        saved = torch.load(checkpoints[0], weights_only=False)
        self.assertEqual(saved["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
                         ["next_batch"], 3)  # Lightning saved the loader's state_dict()

        second = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.trainer(root).fit(make_module(second), train_dataloaders=self.loader(),
                                   ckpt_path=checkpoints[0])
        # Lightning finds the loader resumable (it warns about loaders that
        # are not), and the loader drops no resume position.
        messages = [str(w.message) for w in caught]
        self.assertFalse([m for m in messages if "not resumable" in m or "resume position" in m],
                         messages)
        # What the checkpoint covers of the first run, then the second run.
        trained = [s for s in first if s[2] < 15] + second
        for epoch in (0, 1):
            indices = sorted(i for e, _, _, batch in trained if e == epoch for i in batch)
            self.assertEqual(indices, list(range(SAMPLES)), f"epoch {epoch}")
        self.assertEqual([s[1] for s in second], list(range(3, 12)))  # batch_idx goes on


@unittest.skipIf(lightning is None, "lightning is not installed (scripts/setup.sh installs it)")
class LightningResizeTest(unittest.TestCase):
    """DDP on 2 CPU devices under torchrun, stopped after a checkpoint at
    step 5 (batch 5 of 8 of epoch 0), resumed by Lightning on 3 devices with
    the same per-device batch: the rest of epoch 0 is 2 batches per device
    on top of the 5 counted, longer than the 3-device epoch of 6 that
    Lightning measured before loading the checkpoint."""

    SAMPLES, BATCH = 96, 6

    @classmethod
    def setUpClass(cls):
        cls.dataset = sample_dataset(HETERODL, cls.SAMPLES, "heterodl-lightning-resize-")
        cls.tmp = os.path.dirname(cls.dataset)
        cls.server, cls.address = start_server(HETERODL, cls.dataset,
                                               os.path.join(cls.tmp, "port"))
        cls.first = os.path.join(cls.tmp, "two")
        cls.fit_on(2, cls.first, "--max-steps", "6")
        cls.checkpoint = os.path.join(cls.first, "checkpoints", "epoch=0-step=5.ckpt")

    @classmethod
    def tearDownClass(cls):
        stop_servers(cls.server)

    @classmethod
    def fit_on(cls, devices, root, *extra):
        return torchrun(sys.executable, devices,
                        os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     "lightning_resize_worker.py"),
                        cls.address, root, "--batch-size", str(cls.BATCH), *extra)

    def records(self, root):
        records = []
        for path in glob.glob(os.path.join(root, "records", "rank*.jsonl")):
            with open(path) as f:
                records.extend(json.loads(line) for line in f)
        return records

    def test_resumed_on_three_devices_every_sample_once(self):
        root = os.path.join(self.tmp, "three")
        self.fit_on(3, root, "--ckpt-path", self.checkpoint, "--epoch-length")
        before = [r for r in self.records(self.first) if r["step"] < 5]
        after = self.records(root)
        for epoch in (0, 1):
            read = [i for r in before + after if r["epoch"] == epoch for i in r["indices"]]
            self.assertEqual(sorted(read), list(range(self.SAMPLES)), f"epoch {epoch}")
        rest = [r for r in after if r["epoch"] == 0]
        self.assertEqual(sorted({r["batch_idx"] for r in rest}), [5, 6])  # counted on
        self.assertEqual(sorted({r["batch_idx"] for r in after if r["epoch"] == 1}),
                         list(range(6)))  # then the 3-device epoch

    def test_without_the_callback_the_loader_says_what_was_missed(self):
        stderr = self.fit_on(3, os.path.join(self.tmp, "three-bare"), "--ckpt-path",
                          self.checkpoint, "--max-steps", "7")
        self.assertIn("1 of its batches not read", stderr)
        self.assertIn("heterodl.lightning.EpochLength()", stderr)


if __name__ == "__main__":
    unittest.main()
