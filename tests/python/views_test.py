"""Several views of each image (multi-crop recipes) through real servers:
the batches' groups of views, their labels, distinct views, the same views
from any server and over every transport, and the refusals.

Run by ctest: python views_test.py BUILD_DIR (with the venv's Python and
PYTHONPATH=BUILD_DIR/python).
"""

import os
import sys
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")

import numpy  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import heterodl  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from processes import sample_dataset, start_server, stop_servers  # noqa: E402

# A small DINO-style recipe: 2 global and 4 local views.
GLOBAL = ("random_resized_crop(64,scale=0.4:1)|hflip(0.5)|color_jitter(0.4,0.4,0.2,0.1,p=0.8)|"
          "grayscale(0.2)|gaussian_blur(9,p=1.0)")
LOCAL = "random_resized_crop(32,scale=0.05:0.4)|hflip(0.5)|solarize(128,p=0.2)"
VIEWS = [(2, GLOBAL), (4, LOCAL)]
IMAGES = 24


class ViewsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dataset = sample_dataset(HETERODL, IMAGES, prefix="heterodl-views-")
        tmp = os.path.dirname(cls.dataset)
        cls.servers = [start_server(HETERODL, cls.dataset, os.path.join(tmp, f"port{i}"))
                       for i in range(2)]
        # A segmentation dataset: views are refused there.
        segmentation = os.path.join(tmp, "segmentation")
        for folder in ("images", "masks"):
            os.makedirs(os.path.join(segmentation, folder))
        for i in range(2):
            Image.fromarray(numpy.full((16, 16, 3), 9, numpy.uint8)).save(
                os.path.join(segmentation, "images", f"s{i}.png"))
            Image.fromarray(numpy.zeros((16, 16), numpy.uint8)).save(
                os.path.join(segmentation, "masks", f"s{i}.png"))
        cls.servers.append(start_server(HETERODL, segmentation, os.path.join(tmp, "port-seg")))

    @classmethod
    def tearDownClass(cls):
        stop_servers(*(server for server, _ in cls.servers))

    def loader(self, server=0, **options):
        options.setdefault("views", VIEWS)
        return heterodl.RemoteDataLoader(servers=self.servers[server][1], batch_size=5, seed=3,
                                         **options)

    @staticmethod
    def epoch(loader, epoch=0):
        loader.set_epoch(epoch)
        return [([view.clone() for view in batch.views], batch.labels.clone(),
                 batch.indices.clone()) for batch in loader]

    def test_batches_hold_each_group_of_views_and_the_labels(self):
        plain = heterodl.RemoteDataLoader(servers=self.servers[0][1], batch_size=5, seed=3)
        plain_labels = [(b.labels.clone(), b.indices.clone()) for b in plain]
        batches = self.epoch(self.loader())
        self.assertEqual(len(batches), len(plain_labels))
        for (views, labels, indices), (expected_labels, expected_indices) in zip(batches,
                                                                                plain_labels):
            size = len(labels)
            self.assertEqual([tuple(v.shape) for v in views],
                             [(size, 2, 64, 64, 3), (size, 4, 32, 32, 3)])
            self.assertEqual([v.dtype for v in views], [torch.uint8, torch.uint8])
            self.assertTrue(torch.equal(labels, expected_labels))
            self.assertTrue(torch.equal(indices, expected_indices))
        batch = next(iter(self.loader()))
        self.assertIsNone(batch.images)
        views, labels = batch  # unpacks as (views, labels)
        self.assertEqual(len(views), 2)

    def test_every_view_of_a_sample_is_its_own(self):
        checked = 0
        for views, _, _ in self.epoch(self.loader()):
            for group in views:
                for sample in group:
                    flat = sample.reshape(sample.shape[0], -1)
                    # Crops of a flat part of a photo (a white sky) are
                    # alike whatever their place: only textured ones count.
                    if min(view.float().std().item() for view in flat) < 2.0:
                        continue
                    self.assertEqual(len({bytes(view.numpy()) for view in flat}), len(flat))
                    checked += 1
        self.assertGreater(checked, IMAGES)

    def test_any_server_and_any_transport_makes_the_same_views(self):
        reference = self.epoch(self.loader(0))
        for other in (self.epoch(self.loader(1)), self.epoch(self.loader(0, pixel_channel=False))):
            self.assertEqual(len(other), len(reference))
            for (ours, labels, _), (theirs, their_labels, _) in zip(reference, other):
                self.assertTrue(torch.equal(labels, their_labels))
                for a, b in zip(ours, theirs):
                    self.assertTrue(torch.equal(a, b))
        # Another epoch draws other views of the same samples.
        later = self.epoch(self.loader(0), epoch=1)
        self.assertFalse(torch.equal(later[0][0][0], reference[0][0][0]))

    def test_views_are_refused_where_they_cannot_be_made(self):
        with self.assertRaisesRegex(ValueError, "segmentation masks"):
            self.loader(2)
        with self.assertRaisesRegex(ValueError, "pipeline or views"):
            self.loader(pipeline="center_crop(8)")
        with self.assertRaisesRegex(TypeError, "count, pipeline"):
            self.loader(views=[GLOBAL])
        with self.assertRaisesRegex(ValueError, r"views count must be in \[1, 64\]"):
            self.loader(views=[(0, GLOBAL)])
        with self.assertRaisesRegex(ValueError, "view group 2"):
            self.loader(views=[(2, GLOBAL), (2, "hflip(0.5)")])


if __name__ == "__main__":
    unittest.main()
