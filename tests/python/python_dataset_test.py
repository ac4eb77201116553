"""A user's own PyTorch Dataset served by `heterodl serve --python-dataset`:
batches as default_collate makes them, bit-identical from any server,
exactly once through a server's death, and bad user code contained.

Run by ctest: python python_dataset_test.py BUILD_DIR (with the venv's
Python, which has torch and torchvision, and PYTHONPATH=BUILD_DIR/python;
the servers' workers run the same interpreter).
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import unittest

import numpy
import torch
from torch.utils.data import default_collate

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from processes import scratch_dir  # noqa: E402

import heterodl  # noqa: E402
from heterodl import dataset_worker  # noqa: E402

SAMPLES = 40

# The user's module: an ImageFolder-like dataset whose transforms draw from
# torch's, NumPy's and Python's generators, and the ways user code goes wrong.
MODULE = '''
import os
import random
import time

import numpy
import torch
from torchvision.transforms import v2


class Photos:
    def __init__(self, bad=(), crash=(), hang=(), small=()):
        self.bad, self.crash, self.hang, self.small = set(bad), set(crash), set(hang), set(small)
        self.transform = v2.Compose([v2.RandomResizedCrop(32, antialias=True),
                                     v2.RandomHorizontalFlip(), v2.ColorJitter(0.4, 0.4)])
        self.classes = ["a", "b", "c", "d", "e"]  # as ImageFolder names its

    def __len__(self):
        return 40

    def __getitem__(self, index):
        if index in self.bad:
            raise ValueError("this sample is corrupt")
        if index in self.crash:
            os._exit(3)
        if index in self.hang:
            time.sleep(3600)
        pixels = numpy.random.default_rng(index).integers(0, 256, (3, 48, 48), dtype=numpy.uint8)
        image = self.transform(torch.from_numpy(pixels))
        if index in self.small:
            image = image[:, :30, :30]
        return image, {"label": index % 5, "index": index, "noise": random.random(),
                       "jitter": numpy.float32(numpy.random.rand())}


class Labelled:
    """Classification samples as heterodl's own batches hold them:
    (uint8 [H, W, 3], int)."""

    classes = ["a", "b", "c", "d", "e"]

    def __len__(self):
        return 40

    def __getitem__(self, index):
        pixels = numpy.random.default_rng(index).integers(0, 256, (24, 24, 3), dtype=numpy.uint8)
        return pixels, index % 5


class Tokens:
    """Samples whose tokens and boxes vary in number (sample 0's tokens
    take more than one record to send), declared ragged."""

    ragged_fields = ("tokens", "boxes")

    def __init__(self, declared=True):
        if not declared:
            self.ragged_fields = ()
        self.least_boxes = 0 if declared else 1  # a field of none is refused undeclared

    def __len__(self):
        return 40

    def __getitem__(self, index):
        rng = numpy.random.default_rng(index)
        count = 30000 if index == 0 else index % 7  # some samples have none
        return {"tokens": torch.from_numpy(rng.integers(0, 1000, count)),
                "boxes": rng.random((self.least_boxes + index % 3, 4), dtype=numpy.float32),
                "index": index}


def plain():
    return Photos()


def tokens():
    return Tokens()


def tokens_undeclared():
    return Tokens(declared=False)


def tokens_misnamed():
    dataset = Tokens()
    dataset.ragged_fields = ("words",)
    return dataset


def labelled():
    return Labelled()


def with_bad():
    return Photos(bad={3, 17})


def with_crash():
    return Photos(crash={5})


def with_hang():
    return Photos(hang={7})


def with_small():
    return Photos(small={4})


def raises():
    raise RuntimeError("no data here")


def not_a_dataset():
    return 42


def strings():
    return [("a", 1)]
'''


# A module with a collate_fn: captions padded to each batch's longest, the
# ways a collating dataset goes wrong, and one whose collate_fn never works.
CAPTIONS = '''
import os

import numpy
import torch
from torch.nn.utils.rnn import pad_sequence


class Captions:
    def __init__(self, bad=(), crash=(), empty=()):
        self.bad, self.crash, self.empty = set(bad), set(crash), set(empty)

    def __len__(self):
        return 40

    def __getitem__(self, index):
        if index in self.bad:
            raise ValueError("this caption is corrupt")
        if index in self.crash:
            os._exit(3)
        length = 0 if index in self.empty else 1 + index % 9
        tokens = torch.from_numpy(numpy.random.default_rng(index).integers(1, 1000, length))
        return {"tokens": tokens, "index": index, "noise": torch.rand(2)}


def collate_fn(samples):
    if any(len(sample["tokens"]) == 0 for sample in samples):
        raise ValueError("an empty caption")
    return {"tokens": pad_sequence([s["tokens"] for s in samples], batch_first=True),
            "lengths": torch.tensor([len(s["tokens"]) for s in samples]),
            "index": torch.tensor([s["index"] for s in samples]),
            "noise": torch.stack([s["noise"] for s in samples])}


def captions():
    return Captions()


def with_trouble():
    return Captions(bad={3}, crash={21}, empty={30})
'''

BROKEN_COLLATE = '''
def collate_fn(samples):
    return {"words": ["a"] * len(samples)}


def make():
    return [1, 2, 3]
'''


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def read(path):
    with open(path) as f:
        return f.read()


class PythonDatasetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch_dir("heterodl-pydataset-")
        for name, text in (("photos", MODULE), ("captions", CAPTIONS),
                           ("broken_collate", BROKEN_COLLATE)):
            with open(os.path.join(cls.tmp, f"{name}.py"), "w") as f:
                f.write(textwrap.dedent(text))
        cls.local = dataset_worker.load_dataset("photos:plain", [cls.tmp])
        cls.started = []

    @classmethod
    def tearDownClass(cls):
        for process, log in cls.started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)
            log.close()

    def serve(self, factory, *extra, workers=2, module="photos"):
        """Starts `heterodl serve --python-dataset MODULE:FACTORY`; returns
        (process, address, log path)."""
        name = f"{module}-{factory}-{len(self.started)}"
        port_file = os.path.join(self.tmp, f"{name}.port")
        log_path = os.path.join(self.tmp, f"{name}.log")
        log = open(log_path, "w")
        process = subprocess.Popen(
            [HETERODL, "serve", "--python-dataset", f"{module}:{factory}", "--python-path",
             self.tmp, "--python", sys.executable, "--python-workers", str(workers),
             "--address", "127.0.0.1:0", "--port-file", port_file, "--idle-timeout", "60s",
             *extra], stderr=log)
        self.started.append((process, log))
        deadline = time.time() + 120  # the workers import torch first
        while time.time() < deadline and process.poll() is None:
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                with open(port_file) as f:
                    return process, f"127.0.0.1:{int(f.read())}", log_path
            time.sleep(0.05)
        with open(log_path) as f:
            self.fail(f"serve did not start (exit {process.poll()}): {f.read()}")

    def read_epoch(self, loader, epoch=0):
        loader.set_epoch(epoch)
        return list(loader)

    def test_batches_are_default_collate_of_the_samples_and_each_comes_once(self):
        _, address, _ = self.serve("plain")
        loader = heterodl.RemoteDataLoader(address, batch_size=6, seed=11, format="torch")
        self.assertEqual(loader.num_samples, SAMPLES)
        self.assertEqual(loader.class_names, ["a", "b", "c", "d", "e"])
        batches = self.read_epoch(loader, epoch=1)
        indices = []
        for batch in batches:
            images, targets = batch  # default_collate makes the tuple a list
            self.assertIsInstance(batch, list)
            self.assertEqual(images.dtype, torch.uint8)
            self.assertEqual(tuple(images.shape[1:]), (3, 32, 32))
            self.assertEqual(sorted(targets), ["index", "jitter", "label", "noise"])
            self.assertEqual(targets["noise"].dtype, torch.float64)
            self.assertEqual(targets["jitter"].dtype, torch.float32)
            # What DataLoader would make of the same samples, drawn as the
            # workers draw them.
            expected = default_collate([self.local.sample(11, 1, int(i))
                                        for i in targets["index"]])
            self.assertTrue(torch.equal(images, expected[0]))
            for key in expected[1]:
                self.assertTrue(torch.equal(targets[key], expected[1][key]), key)
            indices += targets["index"].tolist()
        self.assertEqual(sorted(indices), list(range(SAMPLES)))
        self.assertEqual(loader.stats()["samples_failed"], 0)

    def test_images_and_labels_keep_their_structure_and_fill_the_batch_labels(self):
        _, address, _ = self.serve("labelled")
        loader = heterodl.RemoteDataLoader(address, batch_size=8, seed=3, format="torch")
        self.assertEqual(loader.class_names, ["a", "b", "c", "d", "e"])
        labelled = dataset_worker.load_dataset("photos:labelled", [self.tmp])
        seen = 0
        loader.set_epoch(0)
        for batch in loader:
            self.assertIsInstance(batch, list)  # as default_collate makes it
            images, labels = batch
            # Beside the structure, the batch it came from: what heterodl
            # train reads (the labels in the header too), and per slot which
            # sample it holds.
            last = loader.last_batch
            self.assertTrue(torch.equal(last.labels, labels))
            self.assertTrue(torch.equal(list(last.fields.values())[0], images))
            self.assertEqual(last.status.tolist(), [0] * len(labels))
            self.assertTrue(torch.equal(last.sources, last.indices))
            self.assertEqual(tuple(images.shape), (8, 24, 24, 3))
            self.assertEqual(labels.dtype, torch.int64)
            for image, label in zip(images, labels):
                # The label says which sample: sample i's label is i % 5.
                candidates = [i for i in range(SAMPLES) if i % 5 == int(label)
                              and numpy.array_equal(image.numpy(), labelled.sample(3, 0, i)[0])]
                self.assertEqual(len(candidates), 1)
            seen += len(labels)
        self.assertEqual(seen, SAMPLES)

    @unittest.skipUnless(os.path.exists(os.path.join(BUILD_DIR, "heterodl-trainer")),
                         "built without LibTorch: no trainer")
    def test_local_trains_on_a_dataset_of_images_and_labels(self):
        result = subprocess.run(
            [HETERODL, "local", "--python-dataset", "photos:labelled", "--python-path", self.tmp,
             "--python", sys.executable, "--python-workers", "1", "--servers", "2", "--ranks",
             "2", "--epochs", "2", "--batch-size", "4"],
            capture_output=True, text=True, timeout=600)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        summary = [line for line in result.stderr.splitlines() if " summary {" in line]
        self.assertEqual(len(summary), 1, result.stderr[-4000:])
        totals = json.loads(summary[0].split(" summary ", 1)[1])
        # Two ranks, two epochs, every sample once per epoch.
        self.assertEqual(totals["images"], 2 * SAMPLES)
        self.assertEqual(totals["failed_samples"], 0)

    def test_a_declared_ragged_field_is_a_list_of_each_samples_array(self):
        _, address, log = self.serve("tokens")
        made = dataset_worker.load_dataset("photos:tokens", [self.tmp])
        for format, array_type in (("torch", torch.Tensor), ("numpy", numpy.ndarray)):
            loader = heterodl.RemoteDataLoader(address, batch_size=6, seed=9, format=format)
            seen = []
            for batch in self.read_epoch(loader):
                self.assertEqual(sorted(batch), ["boxes", "index", "tokens"])
                self.assertEqual(len(batch["tokens"]), len(batch["index"]))
                for i, index in enumerate(batch["index"].tolist()):
                    expected = made.sample(9, 0, index)
                    self.assertIsInstance(batch["tokens"][i], array_type)
                    numpy.testing.assert_array_equal(numpy.asarray(batch["tokens"][i]),
                                                     expected["tokens"].numpy())
                    numpy.testing.assert_array_equal(numpy.asarray(batch["boxes"][i]),
                                                     expected["boxes"])
                    seen.append(index)
            self.assertEqual(sorted(seen), list(range(SAMPLES)))
            self.assertEqual(loader.stats()["samples_failed"], 0)
        self.assertNotIn("was lost", read(log))  # no worker died on the way

    def test_a_varying_field_not_declared_ragged_fails_saying_how_to_declare_it(self):
        _, address, log = self.serve("tokens_undeclared")
        loader = heterodl.RemoteDataLoader(address, batch_size=8, format="numpy",
                                           max_failed_fraction=1.0)
        batches = self.read_epoch(loader)
        self.assertEqual(sum(len(b["index"]) for b in batches), SAMPLES)
        self.assertGreater(loader.stats()["samples_failed"], 0)
        self.assertIn("declare the field ragged (ragged_fields = (NAME, ...)", read(log))

    def test_ragged_fields_naming_no_field_stops_serve(self):
        result = subprocess.run(
            [HETERODL, "serve", "--python-dataset", "photos:tokens_misnamed", "--python-path",
             self.tmp, "--python", sys.executable, "--python-workers", "1", "--address",
             "127.0.0.1:0"], capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("ragged_fields names ['words'], which are not fields of its samples",
                      result.stderr)

    def test_the_modules_collate_fn_makes_each_batch_on_the_data_group(self):
        _, first, _ = self.serve("captions", module="captions")
        _, second, _ = self.serve("captions", module="captions", workers=1)
        made = dataset_worker.load_dataset("captions:captions", [self.tmp])
        got = []
        for address, format in ((first, "torch"), (second, "numpy")):
            loader = heterodl.RemoteDataLoader(address, batch_size=6, seed=4, format=format)
            got.append(self.read_epoch(loader, epoch=1))
            self.assertEqual(loader.stats()["samples_failed"], 0)
        widths, indices = set(), []
        for batch, same in zip(*got):
            self.assertEqual(list(batch), ["tokens", "lengths", "index", "noise"])
            self.assertIsInstance(batch["tokens"], torch.Tensor)
            # What the module's collate_fn makes of the same samples, drawn as
            # the workers draw them: padded to this batch's longest caption.
            expected = made.collate_fn([made.sample(4, 1, i) for i in batch["index"].tolist()])
            for key, value in expected.items():
                self.assertTrue(torch.equal(batch[key], value), key)
                numpy.testing.assert_array_equal(same[key], value.numpy())  # the other server's
            widths.add(batch["tokens"].shape[1])
            indices += batch["index"].tolist()
        self.assertGreater(len(widths), 1)  # each batch has a shape of its own
        self.assertEqual(sorted(indices), list(range(SAMPLES)))

    def test_a_collating_dataset_replaces_failed_samples_and_contains_failed_batches(self):
        server, address, log = self.serve("with_trouble", module="captions")
        # 9 of 40 samples fail: over the default budget, so it is raised.
        loader = heterodl.RemoteDataLoader(address, batch_size=4, seed=2, format="numpy",
                                           max_failed_fraction=1.0)
        loader.set_epoch(0)
        batches, slots = [], []
        for batch in loader:
            batches.append(batch)
            last = loader.last_batch
            slots.append((last.indices.tolist(), last.sources.tolist(), last.status.tolist(),
                          last.failures))
        self.assertEqual(len(batches), SAMPLES // 4)
        delivered = [i for batch in batches for i in batch["index"].tolist()]
        # Sample 3 raises and is replaced. The batches of sample 21 (whose
        # worker dies, twice) and of sample 30 (that collate_fn refuses)
        # arrive empty, each of their samples counted as failed.
        empty = [batch for batch in batches if batch["tokens"].shape == (0, 0)]
        self.assertEqual(len(empty), 2)
        for batch in empty:
            self.assertEqual(batch["index"].shape, (0,))
            self.assertEqual(batch["noise"].shape, (0, 0))
        self.assertEqual(len(delivered), SAMPLES - 8)
        self.assertFalse({3, 21, 30} & set(delivered))
        self.assertEqual(loader.stats()["samples_failed"], 1 + 8)
        # Per slot: sample 3's slot names its replacement; the empty
        # batches' slots are unfilled, each with the reason.
        for indices, sources, status, failures in slots:
            if 21 in indices or 30 in indices:
                self.assertEqual(status, [2] * 4)
                self.assertEqual(sources, [-1] * 4)
                self.assertEqual(len(failures), 4)
            elif 3 in indices:
                slot = indices.index(3)
                self.assertEqual(status[slot], 1)
                self.assertNotIn(sources[slot], (3, -1))
                self.assertIn("this caption is corrupt", failures[0])
            else:
                self.assertEqual((sources, status), (indices, [0] * 4))
        # An empty batch travels whole in its header, not on a pixel channel
        # (where it once broke the stream, and its batches were asked again).
        self.assertEqual(loader.stats()["reassigned"], 0)
        self.assertIsNone(server.poll())
        text = read(log)
        self.assertEqual(text.count("ValueError: this caption is corrupt"), 1, text)
        self.assertIn("collate_fn raised ValueError: an empty caption", text)
        self.assertIn("another worker makes the batch again", text)
        self.assertIn("the batch's samples count as failed", text)

    def test_a_collate_fn_that_cannot_make_a_batch_stops_serve(self):
        done = subprocess.run(
            [HETERODL, "serve", "--python-dataset", "broken_collate:make", "--python-path",
             self.tmp, "--python", sys.executable, "--python-workers", "1", "--address",
             "127.0.0.1:0"], capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("collate_fn's batch: ['words'][0]: a str is not supported", done.stderr)

    def test_two_servers_make_the_same_batches(self):
        _, first, _ = self.serve("plain")
        _, second, _ = self.serve("plain", workers=1)
        got = []
        for address in (first, second):
            loader = heterodl.RemoteDataLoader(address, batch_size=8, seed=5, format="numpy")
            got.append(self.read_epoch(loader, epoch=2))
        for a, b in zip(*got):
            numpy.testing.assert_array_equal(a[0], b[0])
            for key in a[1]:
                numpy.testing.assert_array_equal(a[1][key], b[1][key])

    def test_exactly_once_across_two_servers_and_two_ranks_with_one_killed(self):
        victim, first, _ = self.serve("plain")
        _, second, _ = self.serve("plain")
        workers = subprocess.run(["pgrep", "-P", str(victim.pid)], capture_output=True,
                                 text=True).stdout.split()
        self.assertEqual(len(workers), 2)
        indices = []
        for rank in (0, 1):
            loader = heterodl.RemoteDataLoader([first, second], batch_size=4, rank=rank,
                                               world_size=2, seed=3, format="numpy")
            loader.set_epoch(0)
            for k, (_, targets) in enumerate(loader):
                indices += targets["index"].tolist()
                if rank == 0 and k == 1:
                    victim.send_signal(signal.SIGKILL)
        self.assertEqual(sorted(indices), list(range(SAMPLES)))
        # Its workers died with it (no orphans left computing).
        deadline = time.time() + 10
        while time.time() < deadline and any(alive(int(pid)) for pid in workers):
            time.sleep(0.1)
        self.assertFalse([pid for pid in workers if alive(int(pid))])

    def test_a_failing_sample_is_replaced_and_its_error_logged_once(self):
        _, address, log = self.serve("with_bad")
        loader = heterodl.RemoteDataLoader(address, batch_size=8, format="numpy")
        for epoch in (0, 1):
            indices = [i for _, targets in self.read_epoch(loader, epoch)
                       for i in targets["index"].tolist()]
            self.assertEqual(len(indices), SAMPLES)
            self.assertFalse({3, 17} & set(indices))  # replacements fill their slots
        self.assertEqual(loader.stats()["samples_failed"], 4)
        text = read(log)
        self.assertEqual(text.count("ValueError: this sample is corrupt"), 1, text)
        self.assertIn("in __getitem__", text)

    def test_a_sample_of_another_shape_fails_naming_the_field(self):
        _, address, log = self.serve("with_small")
        loader = heterodl.RemoteDataLoader(address, batch_size=8, format="numpy")
        self.assertEqual(sum(len(t["index"]) for _, t in self.read_epoch(loader)), SAMPLES)
        self.assertEqual(loader.stats()["samples_failed"], 1)
        self.assertIn("[0]: shape (3, 30, 30), (3, 32, 32) in the dataset's first sample",
                      read(log))

    def test_a_worker_that_dies_is_replaced_and_the_server_goes_on(self):
        server, address, log = self.serve("with_crash")
        loader = heterodl.RemoteDataLoader(address, batch_size=8, format="numpy")
        indices = [i for _, t in self.read_epoch(loader) for i in t["index"].tolist()]
        self.assertEqual(len(indices), SAMPLES)
        self.assertNotIn(5, indices)
        self.assertEqual(loader.stats()["samples_failed"], 1)
        self.assertIsNone(server.poll())
        text = read(log)
        self.assertIn("was lost making sample 5", text)
        self.assertIn("tries the sample again", text)
        self.assertIn("started in place of one lost", text)

    def test_a_hung_worker_is_replaced_after_the_sample_timeout(self):
        _, address, log = self.serve("with_hang", "--python-sample-timeout", "2s")
        loader = heterodl.RemoteDataLoader(address, batch_size=8, format="numpy")
        indices = [i for _, t in self.read_epoch(loader) for i in t["index"].tolist()]
        self.assertEqual(len(indices), SAMPLES)
        self.assertEqual(loader.stats()["samples_failed"], 1)
        self.assertIn("no answer within 2s", read(log))

    def test_a_server_stops_promptly_while_a_sample_hangs(self):
        server, address, log = self.serve("with_hang")  # the default timeout: minutes
        reader = subprocess.Popen(
            [sys.executable, "-c", "import heterodl, sys\n"
             "loader = heterodl.RemoteDataLoader(sys.argv[1], batch_size=8, format='numpy', "
             "stall_timeout=600)\nfor batch in loader: pass", address],
            stderr=subprocess.DEVNULL)
        try:
            # The loader asks for the whole epoch at once: by now a worker
            # is in sample 7's endless __getitem__.
            time.sleep(5)
            server.send_signal(signal.SIGTERM)
            self.assertEqual(server.wait(timeout=30), 0, read(log))
        finally:
            reader.kill()
            reader.wait()

    def test_a_dataset_that_cannot_be_loaded_stops_serve_with_exit_code_2(self):
        cases = {
            "no_such_module:make": "No module named 'no_such_module'",
            "photos:missing": "has no callable 'missing'",
            "photos:raises": "RuntimeError: no data here",
            "photos:not_a_dataset": "which has no __len__",
            "photos:strings": "[0]: a str is not supported",
            "photos": "expected MODULE:CALLABLE",
        }
        for spec, message in cases.items():
            with self.subTest(spec=spec):
                done = subprocess.run(
                    [HETERODL, "serve", "--python-dataset", spec, "--python-path", self.tmp,
                     "--python", sys.executable, "--python-workers", "1",
                     "--address", "127.0.0.1:0"],
                    capture_output=True, text=True, timeout=120)
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertIn(message, done.stderr)
        # An interpreter without NumPy (its site-packages left out: -S) is
        # named as what is missing, not as a heterodl not installed.
        no_numpy = os.path.join(self.tmp, "python-without-numpy")
        with open(no_numpy, "w") as f:
            f.write(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
        os.chmod(no_numpy, 0o755)
        done = subprocess.run(
            [HETERODL, "serve", "--python-dataset", "photos:plain", "--python-path", self.tmp,
             "--python", no_numpy, "--python-workers", "1", "--address", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("cannot import NumPy (No module named 'numpy')", done.stderr)
        self.assertNotIn("is heterodl installed", done.stderr)

    def test_bench_feed_compares_it_with_the_dataloader(self):
        done = subprocess.run(
            [HETERODL, "bench", "feed", "--python-dataset", "python_datasets:ready",
             "--python", sys.executable, "--python-workers", "1", "--batch-size", "16",
             "--seconds", "1"], capture_output=True, text=True, timeout=300)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        report = json.loads(done.stdout.strip().splitlines()[-1])
        for side in ("dataloader", "heterodl"):
            self.assertGreater(report[side]["images"], 0)
            self.assertGreater(report[side]["trainer_host_cpu_seconds_per_batch"], 0)
        self.assertGreater(report["ratio"], 0)
        self.assertIn("heterodl / DataLoader", done.stderr)

    def test_a_pipeline_does_not_apply(self):
        _, address, _ = self.serve("plain", workers=1)
        with self.assertRaisesRegex(ValueError, "does not apply"):
            heterodl.RemoteDataLoader(address, batch_size=4, pipeline="hflip", format="numpy")
        # Nor does serve take one, and status shows none.
        done = subprocess.run(
            [HETERODL, "serve", "--python-dataset", "photos:plain", "--python-path", self.tmp,
             "--python", sys.executable, "--pipeline", "hflip(0.5)", "--address",
             "127.0.0.1:0"], capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("--pipeline does not apply to --python-dataset", done.stderr)
        status = subprocess.run([HETERODL, "status", address], capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn("pipeline none: a Python dataset", status.stdout)
        self.assertNotIn("random_resized_crop", status.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
