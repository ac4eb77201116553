"""Hugging Face's trainers on a RemoteDataLoader, from the wheel installed into
a venv with accelerate and transformers over the project's torch
(tests/python/make_framework_venvs.sh), two processes under torchrun:

- Accelerate: prepare() passes the loader through, register_for_checkpointing
  saves its position with save_state(); a job killed mid-epoch and resumed
  with load_state() trains on each sample of every epoch exactly once.
- transformers' Trainer with a get_train_dataloader override and
  heterodl.huggingface.LoaderState: stopped mid-epoch by max_steps, resumed
  from its checkpoint, each sample of every epoch once.

Run by ctest: python huggingface_test.py BUILD_DIR (the project's Python).
"""

import glob
import json
import os
import sys
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
VENV = os.path.join(ROOT, ".venv-frameworks", "huggingface")
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import processes  # noqa: E402
from processes import (install_built_wheel, sample_dataset, scratch_dir, start_server,  # noqa: E402
                       stop_servers)

SKIPPED = VENV + ".skipped"
SAMPLES = 64  # 8 steps per epoch of 2 processes x 4


@unittest.skipIf(os.path.exists(SKIPPED), open(SKIPPED).read() if os.path.exists(SKIPPED) else "")
class HuggingFaceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.python = install_built_wheel(ROOT, "huggingface", folder=".venv-frameworks")
        dataset = sample_dataset(HETERODL, SAMPLES)
        cls.server, cls.address = start_server(
            HETERODL, dataset, os.path.join(os.path.dirname(dataset), "port"))
        cls.tmp = scratch_dir("heterodl-huggingface-")

    @classmethod
    def tearDownClass(cls):
        stop_servers(cls.server)

    def torchrun(self, script, *args):
        processes.torchrun(self.python, 2, os.path.join(HERE, script), self.address, *args,
                           env={"PYTHONPATH": ""})  # the wheel, not the build tree

    def assert_each_sample_once(self, records):
        seen = []
        for path in glob.glob(records + ".*"):
            with open(path) as f:
                seen.extend(json.loads(line) for line in f)
        for epoch in (0, 1):
            indices = sorted(i for r in seen if r["epoch"] == epoch for i in r["indices"])
            self.assertEqual(indices, list(range(SAMPLES)), f"epoch {epoch}")

    def test_accelerate_save_state_resumes_at_the_next_batch(self):
        folder, records = os.path.join(self.tmp, "accelerate"), os.path.join(self.tmp, "acc")
        self.torchrun("accelerate_worker.py", folder, records, "--die-after", "5")
        self.torchrun("accelerate_worker.py", folder, records, "--resume")
        self.assert_each_sample_once(records)

    def test_the_trainer_resumes_from_its_checkpoint_at_the_next_batch(self):
        output, records = os.path.join(self.tmp, "trainer"), os.path.join(self.tmp, "trainer")
        self.torchrun("hf_trainer_worker.py", output, records, "--max-steps", "5")
        with open(os.path.join(output, "checkpoint-5", "heterodl_loader.json")) as f:
            self.assertEqual(json.load(f)["next_batch"], 5)
        self.torchrun("hf_trainer_worker.py", output, records, "--resume")
        self.assert_each_sample_once(records)


if __name__ == "__main__":
    unittest.main(verbosity=2)
