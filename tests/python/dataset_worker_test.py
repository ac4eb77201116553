"""heterodl.dataset_worker: a user's dataset loaded, its samples seeded from
(seed, epoch, index), and collated into caller-owned buffers exactly as
torch.utils.data.default_collate collates them.

Run by ctest: python dataset_worker_test.py (with the venv's Python and
PYTHONPATH=BUILD_DIR/python).
"""

import collections
import hashlib
import os
import shutil
import sys
import tempfile
import textwrap
import unittest

import numpy
import torch
from torch.utils.data import default_collate

from heterodl import dataset_worker as worker

Pair = collections.namedtuple("Pair", "image label")


def collate(samples):
    """heterodl's collation of `samples` into fresh buffers, rebuilt."""
    fields = worker.describe(samples[0])
    buffers = {f.name: numpy.empty((len(samples),) + f.shape, f.dtype) for f in fields}
    worker.collate_into(samples, fields, buffers)
    return worker.rebuild(samples[0], buffers)


class DatasetWorkerTest(unittest.TestCase):
    def assert_collates_like_torch(self, samples):
        ours = collate(samples)
        theirs = default_collate(samples)
        self.assert_structure(ours, theirs, "batch")

    def assert_structure(self, ours, theirs, where):
        if isinstance(theirs, torch.Tensor):
            self.assertIsInstance(ours, numpy.ndarray, where)
            expected = theirs.numpy()
            self.assertEqual(ours.dtype, expected.dtype, where)
            numpy.testing.assert_array_equal(ours, expected, err_msg=where)
            return
        self.assertIs(type(ours), type(theirs), where)
        if isinstance(theirs, dict):
            self.assertEqual(list(ours), list(theirs), where)
            for key in theirs:
                self.assert_structure(ours[key], theirs[key], f"{where}[{key!r}]")
        else:
            self.assertEqual(len(ours), len(theirs), where)
            for i, (a, b) in enumerate(zip(ours, theirs)):
                self.assert_structure(a, b, f"{where}[{i}]")

    def test_samples_collate_as_default_collate_does(self):
        generator = numpy.random.default_rng(3)
        images = [generator.integers(0, 256, (4, 5, 3), dtype=numpy.uint8) for _ in range(3)]
        self.assert_collates_like_torch([(image, i) for i, image in enumerate(images)])
        self.assert_collates_like_torch([[image, 0.5 * i, i % 2 == 0]
                                         for i, image in enumerate(images)])
        self.assert_collates_like_torch([Pair(image, numpy.int16(i))
                                         for i, image in enumerate(images)])
        self.assert_collates_like_torch([
            {"image": torch.from_numpy(image), "meta": {"boxes": numpy.ones((2, 4), numpy.float32),
                                                        "id": i}, "views": [image, image[:2]]}
            for i, image in enumerate(images)])
        self.assert_collates_like_torch([numpy.float32(i) for i in range(3)])

    def test_a_torch_tensor_needing_grad_is_read_without_it(self):
        tensor = torch.ones(3, requires_grad=True)
        batch = collate([tensor, tensor * 2])
        numpy.testing.assert_array_equal(batch, [[1, 1, 1], [2, 2, 2]])

    def test_unsupported_samples_name_the_type_and_the_field(self):
        cases = [
            ({"name": "cat"}, "['name']", "str"),
            ((numpy.zeros(2), object()), "[1]", "object"),
            ({"boxes": [numpy.array(["a"])]}, "['boxes'][0]", "<U1"),
            ({1: 2}, "the sample", "key 1"),
            ([], "the sample", "empty"),
            (2**70, "the sample", "int64"),
        ]
        for sample, where, what in cases:
            with self.assertRaises(worker.SampleError) as raised:
                worker.describe(sample)
            self.assertIn(where, str(raised.exception))
            self.assertIn(what, str(raised.exception))

    def test_samples_that_disagree_are_refused_naming_the_field(self):
        first = {"image": numpy.zeros((4, 4, 3), numpy.uint8), "label": 1}
        cases = [
            ({"image": numpy.zeros((5, 4, 3), numpy.uint8), "label": 1},
             ["['image']", "(5, 4, 3)", "(4, 4, 3)", "ragged_fields"]),
            ({"image": numpy.zeros((4, 4, 3), numpy.float32), "label": 1},
             ["['image']", "float32", "uint8"]),
            ({"image": numpy.zeros((4, 4, 3), numpy.uint8)}, ["sample 1", "['label']"]),
        ]
        for second, words in cases:
            fields = worker.describe(first)
            buffers = {f.name: numpy.empty((2,) + f.shape, f.dtype) for f in fields}
            with self.assertRaises(worker.SampleError) as raised:
                worker.collate_into([first, second], fields, buffers)
            for word in words:
                self.assertIn(word, str(raised.exception))

    def test_seeds_are_a_function_of_seed_epoch_and_index_alone(self):
        seeds = {worker.sample_seed(s, e, i) for s in (0, 1) for e in (0, 1) for i in (0, 1, 2)}
        self.assertEqual(len(seeds), 12)
        self.assertEqual(worker.sample_seed(7, 3, 11), worker.sample_seed(7, 3, 11))
        # Fixed across releases and machines: a server elsewhere must agree.
        expected = hashlib.blake2b(bytes(24), digest_size=8).digest()
        self.assertEqual(worker.sample_seed(0, 0, 0), int.from_bytes(expected, "little"))


class StructureTest(unittest.TestCase):
    def test_names_follow_dict_keys_and_positions_and_stay_unique(self):
        Pair = collections.namedtuple("Pair", ["left", "right"])
        sample = ({"Image-RGB": numpy.zeros(2), "label": 1},
                  Pair(numpy.zeros(1), [2.0, 3.0]), {"image_rgb": 4})
        node, names = worker.structure(sample)
        self.assertEqual(names, ["field_0_image_rgb", "field_0_label", "field_1_0",
                                 "field_1_1_0", "field_1_1_1", "field_2_image_rgb"])
        self.assertEqual(node["kind"], "LIST")
        self.assertEqual(node["items"][0], {"kind": "DICT", "keys": ["Image-RGB", "label"],
                                            "items": [{"kind": "FIELD", "field": 0},
                                                      {"kind": "FIELD", "field": 1}]})
        self.assertEqual(node["items"][1]["kind"], "NAMEDTUPLE")
        self.assertEqual(node["items"][1]["type_name"], "Pair")
        self.assertEqual(worker.structure(numpy.zeros(3))[1], ["sample"])
        self.assertEqual(worker.structure({"a b": 1, "a_b": 2})[1], ["a_b", "a_b_1"])

    def test_only_wire_dtypes_are_accepted(self):
        for dtype in ("uint16", "complex64", "uint64"):
            field = worker.describe({"x": numpy.zeros(2, dtype)})[0]
            with self.assertRaisesRegex(worker.SampleError, rf"\['x'\]: dtype {dtype}"):
                worker.check_dtype(field)
        for dtype in worker.DTYPES:
            worker.check_dtype(worker.describe(numpy.zeros(2, dtype))[0])

    def test_write_sample_fills_the_destinations_or_names_the_mismatch(self):
        first = (numpy.arange(6, dtype=numpy.int16).reshape(2, 3), 1.5)
        fields = worker.describe(first)
        out = [numpy.zeros(f.shape, f.dtype) for f in fields]
        worker.write_sample(first, fields, out)
        numpy.testing.assert_array_equal(out[0], first[0])
        self.assertEqual(out[1], 1.5)
        with self.assertRaisesRegex(worker.SampleError, r"\[0\]: shape \(3, 2\)"):
            worker.write_sample((numpy.zeros((3, 2), numpy.int16), 1.0), fields, out)
        with self.assertRaisesRegex(worker.SampleError, r"\[1\]: dtype int64"):
            worker.write_sample((first[0], 2), fields, out)

    def test_a_ragged_field_keeps_its_element_shape_and_comes_back_whole(self):
        first = {"tokens": numpy.arange(5, dtype=numpy.int32), "boxes": numpy.zeros((2, 4)),
                 "label": 3}
        fields = worker.describe(first, ragged={0, 1})
        self.assertEqual([(f.shape, f.ragged) for f in fields],
                         [((), True), ((4,), True), ((), False)])
        out = [numpy.zeros((), numpy.int64)]
        second = {"tokens": numpy.arange(9, dtype=numpy.int32), "boxes": numpy.ones((0, 4)),
                  "label": 7}
        ragged = worker.write_sample(second, fields, out)
        self.assertEqual(out[0], 7)
        numpy.testing.assert_array_equal(ragged[0], second["tokens"])
        self.assertEqual(ragged[1].shape, (0, 4))
        # Its elements must keep their shape, and a scalar has no elements.
        with self.assertRaisesRegex(worker.SampleError, r"\['boxes'\]: shape \(2, 5\)"):
            worker.write_sample({**second, "boxes": numpy.zeros((2, 5))}, fields, out)
        with self.assertRaisesRegex(worker.SampleError, "needs a first dimension"):
            worker.describe(first, ragged={2})
        buffers = {"['tokens']": [], "['boxes']": [], "['label']": numpy.zeros(2, numpy.int64)}
        worker.collate_into([first, second], fields, buffers)
        self.assertEqual([len(t) for t in buffers["['tokens']"]], [5, 9])

    def test_a_collated_batch_may_change_its_shape_but_not_its_fields(self):
        first = {"tokens": torch.zeros((2, 5), dtype=torch.int64), "count": 2}
        fields = [worker.Field(path, array.dtype, array.shape, collated=True)
                  for path, array in worker.leaves(first)]
        arrays = worker.collated_arrays({"tokens": torch.ones((7, 12), dtype=torch.int64),
                                         "count": 7}, fields)
        self.assertEqual([a.shape for a in arrays], [(7, 12), ()])
        with self.assertRaisesRegex(worker.SampleError, r"\['tokens'\]: shape \(84,\).*"
                                                        "number of dimensions"):
            worker.collated_arrays({"tokens": torch.ones(84, dtype=torch.int64), "count": 7},
                                   fields)
        with self.assertRaisesRegex(worker.SampleError, r"\['tokens'\]: dtype int32"):
            worker.collated_arrays({"tokens": torch.ones((7, 12), dtype=torch.int32),
                                    "count": 7}, fields)
        with self.assertRaisesRegex(worker.SampleError, "returned fields"):
            worker.collated_arrays({"tokens": torch.ones((7, 12), dtype=torch.int64)}, fields)

    def test_describe_error_names_the_innermost_frame(self):
        def inner():
            raise KeyError("missing")
        try:
            inner()
        except KeyError as error:
            text = worker.describe_error(error)
        self.assertTrue(text.startswith("KeyError: 'missing' (at dataset_worker_test.py:"), text)
        self.assertTrue(text.endswith("in inner)"), text)


class LoadDatasetTest(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.mkdtemp(prefix="heterodl-worker-")
        self.addCleanup(shutil.rmtree, self.directory, ignore_errors=True)

    def write_module(self, name, text):
        with open(os.path.join(self.directory, f"{name}.py"), "w") as f:
            f.write(textwrap.dedent(text))

    def tearDown(self):
        for name in list(sys.modules):
            if name.startswith("worker_test_"):
                del sys.modules[name]

    def test_random_transforms_give_the_same_sample_for_the_same_key(self):
        self.write_module("worker_test_random", """
            import random
            import numpy
            import torch
            from torchvision.transforms import v2

            class Noisy:
                def __init__(self):
                    self.transform = v2.Compose([v2.RandomResizedCrop(8), v2.ColorJitter(0.4, 0.4),
                                                 v2.RandomHorizontalFlip()])
                def __len__(self):
                    return 10
                def __getitem__(self, index):
                    image = torch.arange(3 * 16 * 16, dtype=torch.uint8).reshape(3, 16, 16)
                    return (self.transform(image), random.random(), numpy.random.rand(2))

            def make():
                return Noisy()
            collate_fn = None
        """)
        dataset = worker.load_dataset("worker_test_random:make", [self.directory])
        self.assertEqual(len(dataset), 10)
        first = dataset.sample(seed=5, epoch=1, index=3)
        for _ in range(2):
            dataset.sample(seed=5, epoch=1, index=4)  # draws in between change nothing
            again = dataset.sample(seed=5, epoch=1, index=3)
            self.assertTrue(torch.equal(first[0], again[0]))
            self.assertEqual(first[1], again[1])
            numpy.testing.assert_array_equal(first[2], again[2])
        other = dataset.sample(seed=5, epoch=2, index=3)
        self.assertNotEqual(first[1], other[1])

    def test_a_dataset_that_cannot_be_loaded_says_why(self):
        self.write_module("worker_test_broken", "raise ImportError('no codec here')\n")
        self.write_module("worker_test_raises", """
            def make():
                raise RuntimeError('bad root')
        """)
        self.write_module("worker_test_iterable", """
            def make():
                return iter([1, 2])
        """)
        cases = [
            ("worker_test_broken:make", "no codec here"),
            ("worker_test_missing:make", "cannot import 'worker_test_missing'"),
            ("worker_test_raises:nothing", "no callable 'nothing'"),
            ("worker_test_raises:make", "RuntimeError: bad root"),
            ("worker_test_iterable:make", "__len__"),
            ("no_colon", "MODULE:CALLABLE"),
        ]
        for spec, words in cases:
            with self.assertRaises(worker.DatasetLoadError) as raised:
                worker.load_dataset(spec, [self.directory])
            self.assertIn(words, str(raised.exception), spec)


if __name__ == "__main__":
    unittest.main()
