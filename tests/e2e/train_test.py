"""End-to-end tests of the trainer: resume, TorchScript models, optimizers.

Run by ctest as `python train_test.py BUILD_DIR` with the project's venv
Python (torch and torchvision make the TorchScript model).
"""

import glob
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from processes import read_until, scratch_dir  # noqa: E402

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")


def read_metrics(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [row for row in rows if "summary" not in row]


class TrainerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch_dir("heterodl-train-")
        cls.dataset = os.path.join(cls.tmp, "sample")
        subprocess.run([HETERODL, "dataset", "sample", cls.dataset, "--images", "96",
                        "--seed", "5"], check=True, timeout=120)

    def local_arguments(self, *extra, ranks=2):
        return [HETERODL, "local", "--dataset", self.dataset, "--servers", "1",
                "--ranks", str(ranks), "--batch-size", "4", *extra]

    def test_an_interrupted_run_resumes_at_the_exact_next_batch(self):
        # ResNet-18 on 64x64 crops: slow enough to be stopped mid-run, and
        # 30 steps of 12 per epoch cross two epoch boundaries.
        common = ["--model", "resnet18", "--steps", "30", "--pipeline",
                  "random_resized_crop(64)|hflip(0.5)", "--lr", "0.02", "--warmup-steps", "4"]
        whole = os.path.join(self.tmp, "whole")
        result = subprocess.run(
            self.local_arguments(*common, "--sample-log-dir", os.path.join(whole, "samples"),
                                 "--metrics-file", os.path.join(whole, "metrics.jsonl")),
            capture_output=True, text=True, timeout=600)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])

        parts = os.path.join(self.tmp, "parts")
        resumed = common + ["--sample-log-dir", os.path.join(parts, "samples"),
                            "--metrics-file", os.path.join(parts, "metrics.jsonl"),
                            "--checkpoint-dir", os.path.join(parts, "checkpoints")]
        first = subprocess.Popen(self.local_arguments(*resumed), stderr=subprocess.PIPE,
                                 text=True)
        read_until(first, "step 5/")
        first.send_signal(signal.SIGTERM)
        rest = first.communicate(timeout=120)[1]
        self.assertIn("stopped on request", rest)
        self.assertIn("checkpoint at step", rest)
        self.assertTrue(os.path.exists(os.path.join(parts, "checkpoints", "checkpoint.pt")))

        second = subprocess.run(self.local_arguments(*resumed, "--resume"),
                                capture_output=True, text=True, timeout=600)
        self.assertEqual(second.returncode, 0, second.stderr[-4000:])
        self.assertIn("resuming from", second.stderr)

        for rank in (0, 1):
            name = f"rank{rank}.samples"
            with open(os.path.join(whole, "samples", name)) as f:
                expected = f.read()
            with open(os.path.join(parts, "samples", name)) as f:
                actual = f.read()
            self.assertEqual(len(expected.splitlines()), 30 * 4)
            self.assertEqual(actual, expected, f"rank {rank} saw another sample sequence")
        # Same weights, optimizer state and schedule: the same losses.
        expected = read_metrics(os.path.join(whole, "metrics.jsonl"))
        actual = read_metrics(os.path.join(parts, "metrics.jsonl"))
        self.assertEqual([row["step"] for row in actual], list(range(1, 31)))
        for want, got in zip(expected, actual):
            self.assertAlmostEqual(want["loss"], got["loss"], places=4, msg=f"step {want['step']}")
            self.assertAlmostEqual(want["learning_rate"], got["learning_rate"], places=12)

    def test_a_run_resumes_on_another_number_of_ranks(self):
        # 2 ranks stopped mid-epoch, resumed on 3: the rest of the epoch is
        # split over the 3 and each sample is trained on once (but for the
        # padding that divides the rest evenly), then the 3 ranks' epochs.
        root = os.path.join(self.tmp, "resized")
        common = ["--model", "resnet18", "--epochs", "3", "--pipeline",
                  "random_resized_crop(64)", "--sample-log-dir", os.path.join(root, "samples"),
                  "--checkpoint-dir", os.path.join(root, "checkpoints"),
                  "--metrics-file", os.path.join(root, "metrics.jsonl")]
        first = subprocess.Popen(self.local_arguments(*common), stderr=subprocess.PIPE, text=True)
        read_until(first, "step 3/")
        first.send_signal(signal.SIGTERM)
        self.assertIn("checkpoint at step", first.communicate(timeout=120)[1])
        second = subprocess.run(self.local_arguments(*common, "--resume", ranks=3),
                                capture_output=True, text=True, timeout=600)
        self.assertEqual(second.returncode, 0, second.stderr[-4000:])
        resumed = re.search(r"resuming from .* at step (\d+) \(epoch (\d+), batch (\d+)\)",
                            second.stderr)
        step, epoch, batch = map(int, resumed.groups())
        self.assertTrue(0 < batch < 12 and step == epoch * 12 + batch, resumed.group(0))
        self.assertIn("the checkpoint was written by 2 rank(s) of batch 4", second.stderr)
        lines = []
        for rank in (0, 1, 2):
            with open(os.path.join(root, "samples", f"rank{rank}.samples")) as f:
                lines.extend(tuple(map(int, line.split())) for line in f)
        for e in range(3):
            samples = [sample for line_epoch, _, sample in lines if line_epoch == e]
            self.assertEqual(set(samples), set(range(96)), f"epoch {e}")
            # 2 ranks' epochs and 3 ranks' divide evenly; the rest pads.
            repeated = len(samples) - 96
            self.assertLess(repeated, 3, f"epoch {e}")
            if e != epoch:
                self.assertEqual(repeated, 0, f"epoch {e}")
        # The rest's batches are numbered on from the checkpoint's.
        self.assertEqual(min(b for e, b, _ in lines if e == epoch and b >= batch), batch)
        steps = [row["step"] for row in read_metrics(os.path.join(root, "metrics.jsonl"))]
        self.assertEqual(steps, list(range(1, len(steps) + 1)))

    def test_a_checkpoint_of_another_seed_is_refused(self):
        root = os.path.join(self.tmp, "seeded")
        common = ["--pipeline", "random_resized_crop(32)",
                  "--checkpoint-dir", os.path.join(root, "checkpoints")]
        first = subprocess.run(self.local_arguments(*common, "--steps", "2"),
                               capture_output=True, text=True, timeout=300)
        self.assertEqual(first.returncode, 0, first.stderr[-4000:])
        second = subprocess.run(self.local_arguments(*common, "--steps", "4", "--resume",
                                                     "--seed", "9"),
                                capture_output=True, text=True, timeout=300)
        self.assertNotEqual(second.returncode, 0)
        self.assertIn("is a position in other epochs: --seed 0 (this run: 9)", second.stderr)

    def test_a_checkpoint_of_another_block_shuffle_is_refused(self):
        # WebDataset shards of the sample photos: a block shuffle's order
        # depends on its window of shards, so a position in one is no
        # position in another.
        shards = os.path.join(self.tmp, "shards")
        os.makedirs(shards)
        photos = sorted(glob.glob(os.path.join(self.dataset, "*", "*.jpg")))
        classes = sorted(os.listdir(self.dataset))
        for shard in range(4):
            with tarfile.open(os.path.join(shards, f"shard-{shard}.tar"), "w") as tar:
                for i, photo in enumerate(photos[shard::4]):
                    key = f"{shard:02d}{i:04d}"
                    tar.add(photo, arcname=f"{key}.jpg")
                    label = str(classes.index(os.path.basename(os.path.dirname(photo))))
                    info = tarfile.TarInfo(f"{key}.cls")
                    info.size = len(label)
                    tar.addfile(info, io.BytesIO(label.encode()))
        root = os.path.join(self.tmp, "blocks")
        common = [HETERODL, "local", "--dataset", shards, "--servers", "1", "--ranks", "1",
                  "--batch-size", "4", "--pipeline", "random_resized_crop(32)",
                  "--checkpoint-dir", os.path.join(root, "checkpoints")]
        first = subprocess.run(common + ["--steps", "2", "--shuffle-block-shards", "2"],
                               capture_output=True, text=True, timeout=300)
        self.assertEqual(first.returncode, 0, first.stderr[-4000:])
        second = subprocess.run(common + ["--steps", "4", "--resume", "--shuffle-block-shards",
                                          "3"], capture_output=True, text=True, timeout=300)
        self.assertNotEqual(second.returncode, 0)
        self.assertIn("is a position in other epochs: --shuffle-block-shards 2 (this run: 3)",
                      second.stderr)
        same = subprocess.run(common + ["--steps", "4", "--resume", "--shuffle-block-shards",
                                        "2"], capture_output=True, text=True, timeout=300)
        self.assertEqual(same.returncode, 0, same.stderr[-4000:])
        self.assertRegex(same.stderr, r"resuming from .* at step 2 ")

    def test_a_torchscript_model_from_python_trains(self):
        path = os.path.join(self.tmp, "scripted_resnet18.pt")
        subprocess.run([sys.executable, "-c",
                        "import sys, torch, torchvision\n"
                        "model = torchvision.models.resnet18(num_classes=32)\n"
                        "torch.jit.script(model).save(sys.argv[1])\n", path],
                       check=True, timeout=300)
        result = subprocess.run(
            self.local_arguments("--model", path, "--steps", "2", "--pipeline",
                                 "random_resized_crop(64)", "--optimizer", "adamw", "--lr",
                                 "0.001"),
            capture_output=True, text=True, timeout=600)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        self.assertIn(f"training {path}", result.stderr)
        self.assertIn("step 2/2", result.stderr)

    def test_warmup_and_schedule_reach_the_metrics(self):
        metrics = os.path.join(self.tmp, "warmup.jsonl")
        result = subprocess.run(
            self.local_arguments("--steps", "6", "--lr", "0.3", "--warmup-steps", "3",
                                 "--lr-schedule", "constant", "--optimizer", "adamw",
                                 "--metrics-file", metrics),
            capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        rates = [row["learning_rate"] for row in read_metrics(metrics)]
        for got, want in zip(rates, [0.1, 0.2, 0.3, 0.3, 0.3, 0.3]):
            self.assertAlmostEqual(got, want)

    def test_channels_last_trains_the_same_model(self):
        losses = {}
        for memory_format in ("contiguous", "channels_last"):
            metrics = os.path.join(self.tmp, f"{memory_format}.jsonl")
            result = subprocess.run(
                self.local_arguments("--steps", "3", "--model", "resnet18", "--pipeline",
                                     "random_resized_crop(48)", "--memory-format", memory_format,
                                     "--metrics-file", metrics),
                capture_output=True, text=True, timeout=300)
            self.assertEqual(result.returncode, 0, result.stderr[-4000:])
            losses[memory_format] = [row["loss"] for row in read_metrics(metrics)]
        self.assertEqual(len(losses["channels_last"]), 3)
        for a, b in zip(losses["contiguous"], losses["channels_last"]):
            self.assertAlmostEqual(a, b, delta=1e-3 * max(1.0, abs(a)))

    def test_bad_training_settings_fail_with_a_clear_message(self):
        # Refused before any server or rank starts, as usage errors (exit 2).
        for flags, message in ((["--optimizer", "lamb"], "--optimizer must be one of sgd, adamw"),
                               (["--model", "/nonexistent/model.pt"], "is none of them"),
                               (["--device", "tpu"], "--device must be one of auto, cpu, cuda")):
            result = subprocess.run(self.local_arguments("--steps", "1", *flags),
                                    capture_output=True, text=True, timeout=300)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(message, result.stderr)
            self.assertNotIn("data server(s) up", result.stderr)
        # A file that is not a TorchScript model is found by the rank that loads it.
        not_a_model = os.path.join(self.tmp, "not-a-model.pt")
        with open(not_a_model, "w") as f:
            f.write("not a model")
        result = subprocess.run(self.local_arguments("--steps", "1", "--model", not_a_model),
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 1, result.stderr[-4000:])
        self.assertIn("is not a loadable TorchScript file", result.stderr)

    def test_a_segmentation_dataset_is_refused_rather_than_trained_as_classes(self):
        # The trainer classifies: a dataset whose batches hold masks would
        # lose them; it says so and points at the Python loops.
        segmentation = os.path.join(self.tmp, "segmentation")
        subprocess.run([HETERODL, "dataset", "sample", segmentation, "--task", "segmentation",
                        "--images", "8"], check=True, timeout=120, capture_output=True)
        result = subprocess.run([HETERODL, "local", "--dataset", segmentation, "--servers", "1",
                                 "--ranks", "1", "--batch-size", "4", "--steps", "1"],
                                capture_output=True, text=True, timeout=300)
        self.assertNotEqual(result.returncode, 0, result.stderr[-4000:])
        self.assertIn("heterodl train trains classifiers", result.stderr)
        self.assertIn("images, masks", result.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
