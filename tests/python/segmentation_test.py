"""Segmentation batches in Python: masks beside their images, and every
geometric operation on a mask against torchvision.transforms.v2 on a
`tv_tensors.Mask` with the same parameters.

A real `heterodl serve` reads a folder of lossless PNGs whose pixels say
where they are, each with a mask whose ids do too (8-bit, and a second
folder of 16-bit ones). Masks are sampled nearest-neighbour on both sides,
so the comparison is exact. Random operations are checked as in
transforms_test.py: heterodl's (image, mask) pair must be one that
torchvision's class makes for some seed, the image and its mask together.

Run by ctest: python segmentation_test.py BUILD_DIR (with the venv's Python
and PYTHONPATH=BUILD_DIR/python).
"""

import os
import signal
import subprocess
import sys
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")

import numpy  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

import heterodl  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from pixels import coordinates  # noqa: E402
from processes import scratch_dir, start_server, stop_servers  # noqa: E402

# (width, height) of the test images.
SIZES = [(30, 20), (50, 40), (64, 48)]


def mask_ids(width, height, scale):
    """Ids that say where they are too, below 255 (the ignore index) when
    `scale` is 1; times `scale` (16-bit) otherwise."""
    y, x = numpy.mgrid[0:height, 0:width]
    return ((x * 7 + y * 3) % 250) * scale


def write_folder(root, scale):
    """ROOT/images/iN.png + ROOT/masks/iN.png; returns [(image CHW, mask HW)]."""
    os.makedirs(os.path.join(root, "images"))
    os.makedirs(os.path.join(root, "masks"))
    pairs = []
    for i, (width, height) in enumerate(SIZES):
        pixels = coordinates(width, height)
        ids = mask_ids(width, height, scale).astype(numpy.uint8 if scale == 1 else numpy.uint16)
        Image.fromarray(pixels).save(os.path.join(root, "images", f"i{i}.png"))
        Image.fromarray(ids).save(os.path.join(root, "masks", f"i{i}.png"))
        pairs.append((torch.from_numpy(pixels).permute(2, 0, 1),
                      tv_tensors.Mask(torch.from_numpy(ids.astype(numpy.int32)))))
    return pairs


class SegmentationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch_dir("heterodl-segmentation-")
        cls.pairs = write_folder(os.path.join(cls.tmp, "eight"), 1)
        cls.server, cls.address = start_server(HETERODL, os.path.join(cls.tmp, "eight"),
                                               os.path.join(cls.tmp, "port"))
        cls.wide_pairs = write_folder(os.path.join(cls.tmp, "sixteen"), 200)
        cls.wide_server, cls.wide_address = start_server(
            HETERODL, os.path.join(cls.tmp, "sixteen"), os.path.join(cls.tmp, "port16"))

    @classmethod
    def tearDownClass(cls):
        stop_servers(cls.server, cls.wide_server)

    def outputs(self, spec, epochs=1, address=None):
        """Each pair through `spec`, in dataset order: [(HWC image, HW mask)] per pair."""
        loader = heterodl.RemoteDataLoader(servers=address or self.address, batch_size=1,
                                           pipeline=spec, shuffle=False, seed=3)
        outputs = [[] for _ in SIZES]
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for i, batch in enumerate(loader):
                outputs[i].append((batch.images[0].clone(), batch.masks[0].clone()))
        return outputs

    def test_a_batch_holds_masks_beside_its_images(self):
        loader = heterodl.RemoteDataLoader(servers=self.address, batch_size=3,
                                           pipeline="resize(16x24)", shuffle=False)
        [batch] = list(loader)
        self.assertEqual(sorted(batch.fields), ["images", "masks"])
        self.assertIs(batch.fields["masks"], batch.masks)
        self.assertEqual(tuple(batch.images.shape), (3, 16, 24, 3))
        self.assertEqual(tuple(batch.masks.shape), (3, 16, 24))
        self.assertEqual(batch.masks.dtype, torch.uint8)
        images, masks = batch  # a segmentation batch unpacks as (images, masks)
        self.assertIs(masks, batch.masks)
        # NumPy as well, without a copy of their own.
        numpy_loader = heterodl.RemoteDataLoader(servers=self.address, batch_size=3,
                                                 pipeline="resize(16x24)", shuffle=False,
                                                 format="numpy")
        [as_numpy] = list(numpy_loader)
        self.assertEqual(as_numpy.masks.dtype, numpy.uint8)
        numpy.testing.assert_array_equal(as_numpy.masks, batch.masks.numpy())

    def test_the_classes_are_the_masks_ids_named_by_classes_txt(self):
        # The sample writes classes.txt: its four classes by name, so the
        # README's num_classes=len(loader.dataset.classes) is right.
        sample = os.path.join(self.tmp, "sample")
        subprocess.run([HETERODL, "dataset", "sample", sample, "--task", "segmentation",
                        "--images", "12"], check=True, timeout=120, capture_output=True)
        for named in (True, False):
            if not named:
                os.remove(os.path.join(sample, "classes.txt"))
            server, address = start_server(HETERODL, sample,
                                           os.path.join(self.tmp, f"port-classes-{named}"))
            try:
                loader = heterodl.RemoteDataLoader(servers=address, batch_size=4)
                self.assertEqual(loader.dataset.classes,
                                 ["background", "rectangle", "ellipse", "triangle"] if named
                                 else ["0", "1", "2", "3"])
                self.assertLess(int(next(iter(loader)).masks.max()), len(loader.dataset.classes))
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=30)

    def test_sixteen_bit_masks_arrive_as_int32(self):
        loader = heterodl.RemoteDataLoader(servers=self.wide_address, batch_size=3,
                                           pipeline="center_crop(20x30)", shuffle=False)
        [batch] = list(loader)
        self.assertEqual(batch.masks.dtype, torch.int32)
        for (image, mask), out in zip(self.wide_pairs, batch.masks):
            self.assertTrue(torch.equal(out, v2.CenterCrop((20, 30))(mask)))
        self.assertGreater(int(batch.masks.max()), 255)

    def assert_pairs_equal(self, spec, transform):
        for (image, mask), [(out, out_mask)] in zip(self.pairs, self.outputs(spec)):
            theirs, their_mask = transform(image, mask)
            what = f"{spec} on {tuple(image.shape)}"
            self.assertTrue(torch.equal(out_mask.int(), their_mask), what)
            self.assertLessEqual((out.int() - theirs.permute(1, 2, 0).int()).abs().max().item(),
                                 1, what)

    def test_an_exact_resize_samples_the_mask_as_torchvision_does(self):
        self.assert_pairs_equal("resize(60x90)", v2.Resize((60, 90)))

    def test_a_downscale_samples_the_mask_as_torchvision_does(self):
        # The images differ (torchvision antialiases): the masks must not.
        for (image, mask), [(_, out_mask)] in zip(self.pairs, self.outputs("resize(13x17)")):
            self.assertTrue(torch.equal(out_mask.int(), v2.Resize((13, 17))(mask)))

    def test_center_crop_and_hflip_move_the_mask_as_torchvision_does(self):
        self.assert_pairs_equal("center_crop(16x22)|hflip(1)",
                                v2.Compose([v2.CenterCrop((16, 22)),
                                            v2.RandomHorizontalFlip(p=1)]))

    def assert_among_torchvision_s(self, spec, transform, epochs, seeds):
        """Every (image, mask) of `spec` is one `transform` makes for one of `seeds` seeds."""
        ours = self.outputs(spec, epochs=epochs)
        for (image, mask), outputs in zip(self.pairs, ours):
            candidates = set()
            for seed in range(seeds):
                torch.manual_seed(seed)
                theirs, their_mask = transform(image, mask)
                candidates.add(theirs.permute(1, 2, 0).numpy().tobytes() +
                               their_mask.numpy().astype(numpy.uint8).tobytes())
            for out, out_mask in outputs:
                self.assertIn(out.numpy().tobytes() + out_mask.numpy().tobytes(), candidates,
                              f"{spec} on {tuple(image.shape)}: no pair torchvision makes")

    def test_a_random_crop_pads_the_mask_with_the_ignore_index_as_torchvision_does(self):
        self.assert_among_torchvision_s(
            "random_crop(44x36,pad_if_needed=true)|hflip(0.5)",
            v2.Compose([v2.RandomCrop((44, 36), pad_if_needed=True,
                                      fill={tv_tensors.Image: 0, tv_tensors.Mask: 255,
                                            "others": 0}),
                        v2.RandomHorizontalFlip()]),
            4, 6000)


if __name__ == "__main__":
    unittest.main(verbosity=2)
