"""heterodl beside TensorFlow, from the wheel installed into a venv with
tensorflow-cpu (tests/python/make_framework_venvs.sh): the loader in every
import order (TensorFlow carries its own gRPC, protobuf and Abseil), every
batch kind as a tf.data.Dataset with the right element_spec and the same
batches as NumPy, Keras fit over several epochs in the planned order, a
fit killed mid-epoch and restarted by heterodl.tf.Checkpoint at the exact
next batch, records TensorFlow wrote read as the folder they came from, and
examples/tensorflow/train_resnet.py end to end.

Run by ctest: python tensorflow_test.py BUILD_DIR (the project's Python:
it starts the servers; the checks run in the TensorFlow venv).
"""

import json
import os
import subprocess
import sys
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
VENV = os.path.join(ROOT, ".venv-frameworks", "tensorflow")
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
from processes import (install_built_wheel, sample_dataset, scratch_dir, start_server,  # noqa: E402
                       stop_servers)

SKIPPED = VENV + ".skipped"
# A user's own dataset whose samples are dicts with a field of varying length.
RAGGED_MODULE = '''
import numpy

class Tokens:
    ragged_fields = ("tokens",)
    classes = ["a", "b"]

    def __len__(self):
        return 12

    def __getitem__(self, index):
        rng = numpy.random.default_rng(index)
        return {"image": rng.integers(0, 256, (8, 8, 3), dtype=numpy.uint8),
                "tokens": rng.integers(0, 100, index % 4), "label": index % 2}

def tokens():
    return Tokens()
'''


@unittest.skipIf(os.path.exists(SKIPPED), open(SKIPPED).read() if os.path.exists(SKIPPED) else "")
class TensorFlowTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.python = install_built_wheel(ROOT, "tensorflow", folder=".venv-frameworks")
        cls.tmp = scratch_dir("heterodl-tensorflow-")
        cls.servers = []
        photos = sample_dataset(HETERODL, 32)
        cls.address = cls.serve(photos)
        segmentation, detection = (os.path.join(cls.tmp, name) for name in ("seg", "det"))
        for path, task in ((segmentation, "segmentation"), (detection, "detection")):
            subprocess.run([HETERODL, "dataset", "sample", path, "--task", task, "--images", "12"],
                           check=True, timeout=120, capture_output=True)
        cls.segmentation = cls.serve(segmentation)
        cls.detection = cls.serve(os.path.join(detection, "annotations.json"))
        with open(os.path.join(cls.tmp, "ragged.py"), "w") as f:
            f.write(RAGGED_MODULE)
        cls.ragged = cls.serve(None, "--python-dataset", "ragged:tokens", "--python-path",
                               cls.tmp, "--python", sys.executable, "--python-workers", "1")

    @classmethod
    def serve(cls, dataset, *extra):
        port_file = os.path.join(cls.tmp, f"port{len(cls.servers)}")
        # A Python dataset's workers import heterodl from the build tree.
        env = {**os.environ, "PYTHONPATH": os.path.join(BUILD_DIR, "python")}
        process, address = start_server(HETERODL, dataset, port_file, *extra, timeout=120,
                                        env=env)
        cls.servers.append(process)
        return address

    @classmethod
    def tearDownClass(cls):
        stop_servers(*cls.servers)

    def check(self, *args, timeout=300):
        result = subprocess.run([self.python, os.path.join(HERE, "tensorflow_check.py"), *args],
                                capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                                     "PYTHONPATH": ""})
        self.assertEqual(result.returncode, 0, f"{args[0]}: exit {result.returncode}\n"
                                               f"{result.stderr[-4000:]}")
        return json.loads(result.stdout.strip().splitlines()[-1])

    def test_the_loader_works_in_every_import_order(self):
        # TensorFlow first used to crash the first RPC: the wheel's gRPC,
        # protobuf and Abseil bound to TensorFlow's copies.
        for order in ("tensorflow,heterodl,loader", "heterodl,tensorflow,loader",
                      "heterodl,loader,tensorflow,loader", "keras,heterodl.tf,dataset,loader"):
            with self.subTest(order=order):
                self.assertEqual(self.check("import", order, self.address)["samples"],
                                 [32] * order.count("loader") + [32] * order.count("dataset"))

    def test_every_batch_kind_has_its_element_spec_and_numpy_s_batches(self):
        kinds = {"images": [self.address, {}],
                 "masks": [self.segmentation, {}],
                 "boxes": [self.detection, {}],
                 "views": [self.address, {"pipeline": "", "views": [
                     [2, "random_resized_crop(32)"], [3, "random_resized_crop(16)"]]}],
                 "python": [self.ragged, {"pipeline": ""}]}
        result = self.check("spec", json.dumps(kinds))
        specs = {kind: result[kind]["spec"] for kind in kinds}
        self.assertEqual(specs["images"], "(TensorSpec(shape=(None, 32, 32, 3), dtype=tf.uint8, "
                         "name=None), TensorSpec(shape=(None,), dtype=tf.int64, name=None))")
        self.assertEqual(specs["masks"], "(TensorSpec(shape=(None, 32, 32, 3), dtype=tf.uint8, "
                         "name=None), TensorSpec(shape=(None, 32, 32), dtype=tf.uint8, "
                         "name=None))")
        self.assertIn("'boxes': RaggedTensorSpec(TensorShape([None, None, 4]), tf.float32, 1, "
                      "tf.int64)", specs["boxes"])
        self.assertIn("'labels': RaggedTensorSpec(TensorShape([None, None]), tf.int64",
                      specs["boxes"])
        self.assertIn("'iscrowd': RaggedTensorSpec(TensorShape([None, None]), tf.uint8",
                      specs["boxes"])
        self.assertEqual(specs["views"], "((TensorSpec(shape=(None, 2, 32, 32, 3), "
                         "dtype=tf.uint8, name=None), TensorSpec(shape=(None, 3, 16, 16, 3), "
                         "dtype=tf.uint8, name=None)), TensorSpec(shape=(None,), dtype=tf.int64, "
                         "name=None))")
        self.assertIn("'image': TensorSpec(shape=(None, 8, 8, 3), dtype=tf.uint8",
                      specs["python"])
        self.assertIn("'tokens': RaggedTensorSpec(TensorShape([None, None]), tf.int64",
                      specs["python"])
        self.assertIn("'label': TensorSpec(shape=(None,), dtype=tf.int64", specs["python"])
        for kind in kinds:
            self.assertTrue(result[kind]["same"], kind)
            self.assertGreater(result[kind]["batches"], 0, kind)
        self.assertEqual(result["boxes"]["ragged"], [False, True, True, True])

    def test_keras_fit_reads_each_epoch_in_its_planned_order(self):
        result = self.check("fit", self.address)
        self.assertEqual(result["steps"], 3 * 8)
        self.assertTrue(result["same"])  # epochs 0, 1, 2 as a NumPy loop reads them
        self.assertEqual(result["position"], [2, 8])

    def test_a_killed_fit_resumes_at_the_exact_next_batch(self):
        whole_records = os.path.join(self.tmp, "whole.records")
        whole = self.check("resume", self.address, os.path.join(self.tmp, "whole"),
                           whole_records, "0")
        parts_dir = os.path.join(self.tmp, "parts")
        parts_records = os.path.join(self.tmp, "parts.records")
        died = subprocess.run([self.python, os.path.join(HERE, "tensorflow_check.py"), "resume",
                               self.address, parts_dir, parts_records, "11"],
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""})
        self.assertEqual(died.returncode, 0, died.stderr[-4000:])
        resumed = self.check("resume", self.address, parts_dir, parts_records, "0")
        self.assertEqual(resumed["steps"], 3 * 8 - 11)  # batch 3 of epoch 1 onwards
        with open(whole_records) as f:
            expected = f.read().splitlines()
        with open(parts_records) as f:
            actual = f.read().splitlines()
        self.assertEqual(len(expected), 24)
        self.assertEqual(actual, expected)
        # The same weights as the uninterrupted run (the weights and the
        # optimizer's momentum came back), up to the order of float sums.
        self.assertEqual(len(resumed["weights"]), len(whole["weights"]))
        for got, want in zip(resumed["weights"], whole["weights"]):
            self.assertAlmostEqual(got, want, places=4)

    def test_records_tensorflow_wrote_read_as_the_image_folder(self):
        # TensorFlow's own TFRecordWriter and tf.train.Example, against the
        # folder they were written from (the object-storage tests write
        # theirs with the tfrecord package).
        folder = sample_dataset(HETERODL, 32, "heterodl-tf-records-")
        result = subprocess.run(
            [sys.executable, os.path.join(ROOT, "bench", "object_storage", "tensorflow_records.py"),
             "--tf-python", self.python, "--dataset", folder, "--heterodl", HETERODL,
             "--per-file", "10"],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONPATH": os.path.join(BUILD_DIR, "python")})
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr[-4000:])
        self.assertIn("wrote 32 records in 4 files; heterodl read 32 samples", result.stdout)
        self.assertIn("the image folder's batches, pixel for pixel", result.stdout)

    def test_the_keras_example_trains(self):
        result = subprocess.run(
            [self.python, os.path.join(ROOT, "examples", "tensorflow", "train_resnet.py"),
             "--servers", self.address, "--epochs", "2", "--batch-size", "8", "--image-size",
             "32", "--checkpoint-dir", os.path.join(self.tmp, "example")],
            capture_output=True, text=True, timeout=600,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""})
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        self.assertIn("epoch 2/2", result.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
