"""heterodl's geometric operations against torchvision.transforms.v2's.

A real `heterodl serve` runs each pipeline on lossless PNGs of known pixels;
the same images go through torchvision's transform with the same
parameters. Random draws differ between the two (heterodl's come from its
counter RNG), so a random operation is checked against every output
torchvision's own class makes over many seeds: heterodl's must be one of
them. Exact where both take the same pixels; within 1 (of 255) where
bilinear interpolation rounds differently.

Run by ctest: python transforms_test.py BUILD_DIR (with the venv's Python
and PYTHONPATH=BUILD_DIR/python).
"""

import os
import subprocess
import sys
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")

import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

import heterodl  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from pixels import coordinates  # noqa: E402
from processes import scratch_dir, start_server, stop_servers  # noqa: E402

# (width, height) of the test images.
SIZES = [(30, 20), (50, 40), (64, 48)]


class TransformsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch_dir("heterodl-transforms-")
        listing = os.path.join(cls.tmp, "list.txt")
        cls.images = []
        with open(listing, "w") as f:
            for i, (width, height) in enumerate(SIZES):
                pixels = coordinates(width, height)
                path = os.path.join(cls.tmp, f"image{i}.png")
                Image.fromarray(pixels).save(path)
                cls.images.append(torch.from_numpy(pixels).permute(2, 0, 1))  # CHW, as v2 takes
                f.write(f"{path}\t{i}\n")
        cls.server, cls.address = start_server(HETERODL, listing, os.path.join(cls.tmp, "port"))

    @classmethod
    def tearDownClass(cls):
        stop_servers(cls.server)

    def heterodl_outputs(self, spec, epochs=1):
        """Each image through `spec`, in dataset order: HWC uint8 tensors."""
        loader = heterodl.RemoteDataLoader(servers=self.address, batch_size=1, pipeline=spec,
                                           shuffle=False, seed=5)
        outputs = [[] for _ in SIZES]
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for i, batch in enumerate(loader):
                outputs[i].append(batch.images[0].clone())
        return outputs

    def assert_close(self, ours, theirs, tolerance, what):
        self.assertEqual(tuple(ours.shape), tuple(theirs.shape), what)
        difference = (ours.int() - theirs.int()).abs().max().item()
        self.assertLessEqual(difference, tolerance, what)

    def test_center_crop_of_height_by_width_is_torchvision_s(self):
        ours = self.heterodl_outputs("center_crop(20x30)")
        for image, [out] in zip(self.images, ours):
            theirs = v2.CenterCrop((20, 30))(image).permute(1, 2, 0)
            self.assert_close(out, theirs, 0, f"image {tuple(image.shape)}")

    def test_an_exact_resize_is_torchvision_s(self):
        # Upsampling, where torchvision's antialiasing does nothing: the two
        # bilinear kernels sample at the same points.
        ours = self.heterodl_outputs("resize(60x90)")
        for image, [out] in zip(self.images, ours):
            theirs = v2.Resize((60, 90))(image).permute(1, 2, 0)
            self.assert_close(out, theirs, 1, f"image {tuple(image.shape)}")

    def assert_among_torchvision_s(self, spec, transform, epochs, seeds):
        """Every output of `spec` is one `transform` makes for one of `seeds` seeds."""
        ours = self.heterodl_outputs(spec, epochs=epochs)
        for image, outputs in zip(self.images, ours):
            candidates = set()
            for seed in range(seeds):
                torch.manual_seed(seed)
                candidates.add(transform(image).permute(1, 2, 0).numpy().tobytes())
            for out in outputs:
                self.assertIn(out.numpy().tobytes(), candidates,
                              f"{spec} on image {tuple(image.shape)}: no output torchvision makes")

    def test_random_crop_with_pad_if_needed_gives_one_of_torchvision_s_outputs(self):
        self.assert_among_torchvision_s("random_crop(44x36,pad_if_needed=true)",
                                        v2.RandomCrop((44, 36), pad_if_needed=True), 4, 3000)

    def test_random_crop_with_padding_and_fill_gives_one_of_torchvision_s_outputs(self):
        self.assert_among_torchvision_s("random_crop(24x34,padding=3,fill=7)",
                                        v2.RandomCrop((24, 34), padding=3, fill=7), 3, 6000)

    def test_random_resize_draws_a_size_torchvision_could(self):
        # The shorter side uniform in [50, 54): each output is torchvision's
        # resize to one of those sizes (upsampling: within 1), then the crop.
        ours = self.heterodl_outputs("random_resize(50,54)|center_crop(40x50)", epochs=6)
        for image, outputs in zip(self.images, ours):
            candidates = [v2.CenterCrop((40, 50))(v2.Resize(size)(image)).permute(1, 2, 0)
                          for size in range(50, 54)]
            matched = set()
            for out in outputs:
                distances = [(out.int() - c.int()).abs().max().item() for c in candidates]
                self.assertLessEqual(min(distances), 1, f"image {tuple(image.shape)}")
                matched.add(distances.index(min(distances)))
            self.assertGreater(len(matched), 1, "every epoch drew the same size")

    def test_scale_jitter_fits_the_target_as_torchvision_does(self):
        # A fixed factor: target_size written HxW (40x100) is torchvision's
        # (width, height) = (100, 40).
        ours = self.heterodl_outputs("scale_jitter(40x100,scale_range=1.5:1.5)|center_crop(8)")
        for image, [out] in zip(self.images, ours):
            height, width = image.shape[1:]
            jittered = v2.ScaleJitter((100, 40), scale_range=(1.5, 1.5))(image)
            self.assertEqual(tuple(jittered.shape[1:]),
                             (int(height * min(100 / width, 40 / height) * 1.5),
                              int(width * min(100 / width, 40 / height) * 1.5)))
            theirs = v2.CenterCrop(8)(jittered).permute(1, 2, 0)
            self.assert_close(out, theirs, 1, f"image {tuple(image.shape)}")

    def test_random_resized_crop_makes_height_by_width(self):
        [[out], _, _] = self.heterodl_outputs("random_resized_crop(24x40)")
        self.assertEqual(tuple(out.shape), (24, 40, 3))


if __name__ == "__main__":
    unittest.main(verbosity=2)
