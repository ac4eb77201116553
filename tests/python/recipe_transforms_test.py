"""The operations of the self-supervised and DeiT recipes against
torchvision.transforms.v2's, on the same parameters.

A real `heterodl serve` runs each pipeline on lossless PNGs; the same images
go through torchvision's functional kernels with the parameters forced (p=1,
fixed magnitudes). Tolerances, per operation:
- solarize, posterize, equalize: exact;
- autocontrast, adjust_sharpness, the brightness/contrast/saturation blends:
  within 1 of 255 (float32 sums in another order);
- affine geometry (nearest neighbour): at most 1% of pixels from another
  source pixel, where a coordinate falls within rounding of a pixel edge;
- random_erasing: exactly torchvision's F.erase of the rectangle found.
The policies (rand_augment, trivial_augment_wide) draw an operation, a bin
and a sign: every heterodl output must be, within those tolerances, one of
the outputs torchvision's own policy class can make at those parameters,
and the draws must cover most of the operation list.

Run by ctest: python recipe_transforms_test.py BUILD_DIR (with the venv's
Python and PYTHONPATH=BUILD_DIR/python).
"""

import os
import sys
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")

import numpy  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402
from torchvision.transforms import v2  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

import heterodl  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from pixels import coordinates  # noqa: E402
from processes import scratch_dir, start_server, stop_servers  # noqa: E402

# (width, height): odd and even sides, wide and tall.
SIZES = [(30, 20), (33, 27), (40, 48)]
# Every output is cropped (zero-padded) to this, as heterodl's batches are
# one size: torchvision's outputs are cropped the same way.
CROP = (48, 40)  # (height, width)
NEAREST = InterpolationMode.NEAREST


def test_images():
    """Coordinates, noise, and coordinates with noise: full ranges and
    texture for the histogram and sharpness operations."""
    generator = numpy.random.default_rng(7)
    noise = generator.integers(0, 256, (SIZES[1][1], SIZES[1][0], 3), dtype=numpy.uint8)
    textured = coordinates(*SIZES[2]).astype(numpy.int32) * 3 + generator.integers(
        0, 40, (SIZES[2][1], SIZES[2][0], 3))
    return [coordinates(*SIZES[0]), noise, numpy.clip(textured, 0, 255).astype(numpy.uint8)]


class RecipeTransformsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch_dir("heterodl-recipe-")
        listing = os.path.join(cls.tmp, "list.txt")
        cls.images = []
        with open(listing, "w") as f:
            for i, pixels in enumerate(test_images()):
                path = os.path.join(cls.tmp, f"image{i}.png")
                Image.fromarray(pixels).save(path)
                cls.images.append(torch.from_numpy(pixels).permute(2, 0, 1).contiguous())
                f.write(f"{path}\t{i}\n")
        cls.server, cls.address = start_server(HETERODL, listing, os.path.join(cls.tmp, "port"))

    @classmethod
    def tearDownClass(cls):
        stop_servers(cls.server)

    def outputs(self, operation, epochs=1):
        """Each image through `operation`, then the crop: per image, a list
        of one HWC uint8 tensor per epoch."""
        spec = f"{operation}|center_crop({CROP[0]}x{CROP[1]})"
        loader = heterodl.RemoteDataLoader(servers=self.address, batch_size=len(SIZES),
                                           pipeline=spec, shuffle=False, seed=11)
        outputs = [[] for _ in SIZES]
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                for i in range(len(SIZES)):
                    outputs[i].append(batch.images[i].clone())
        return outputs

    @staticmethod
    def cropped(image):
        return v2.CenterCrop(CROP)(image).permute(1, 2, 0)

    @staticmethod
    def largest_difference(ours, theirs):
        return (ours.int() - theirs.int()).abs().max().item()

    @staticmethod
    def moved_fraction(ours, theirs):
        """The fraction of pixels whose value is not torchvision's."""
        return (ours != theirs).any(dim=-1).float().mean().item()

    def assert_forced(self, operation, kernel, tolerance):
        for image, [ours] in zip(self.images, self.outputs(operation)):
            theirs = self.cropped(kernel(image))
            self.assertLessEqual(self.largest_difference(ours, theirs), tolerance,
                                 f"{operation} on {tuple(image.shape)}")

    def test_solarize_posterize_and_equalize_are_torchvision_s_exactly(self):
        self.assert_forced("solarize(100.5,p=1)", lambda x: F.solarize(x, 100.5), 0)
        self.assert_forced("solarize(0,p=1)", lambda x: F.solarize(x, 0), 0)
        self.assert_forced("posterize(3,p=1)", lambda x: F.posterize(x, 3), 0)
        self.assert_forced("posterize(0,p=1)", lambda x: F.posterize(x, 0), 0)
        self.assert_forced("equalize(p=1)", F.equalize, 0)

    def test_autocontrast_and_sharpness_are_torchvision_s_within_one(self):
        self.assert_forced("autocontrast(p=1)", F.autocontrast, 1)
        for factor in (0.0, 0.3, 2.5):
            self.assert_forced(f"adjust_sharpness({factor},p=1)",
                               lambda x, f=factor: F.adjust_sharpness(x, f), 1)

    def test_a_forced_gaussian_blur_is_torchvision_s_within_one(self):
        # heterodl's kernel stops at 4 sigma (what lies beyond rounds away
        # on 8-bit pixels); torchvision's spans kernel_size.
        for sigma in (0.1, 0.7, 2.0, 5.0):
            self.assert_forced(f"gaussian_blur(23,sigma={sigma}:{sigma},p=1)",
                               lambda x, s=sigma: F.gaussian_blur(x, [23, 23], [s, s]), 1)

    def test_color_jitter_s_hue_is_torchvision_s_adjust_hue(self):
        # The factor is drawn on the server; find it: the best of a coarse
        # grid, then of a fine one around it. heterodl's rotation is within
        # 1 of F.adjust_hue at the factor it drew (tests/augment/
        # image_ops_test.cc, against a port); a grid factor may sit a
        # rounding away from that one, hence 2 here, and nearly every value
        # must agree.
        for image, [ours] in zip(self.images, self.outputs("color_jitter(hue=0.5)")):
            def difference(factor):
                theirs = self.cropped(F.adjust_hue(image, factor))
                return (ours.int() - theirs.int()).abs()

            best = min(numpy.linspace(-0.5, 0.5, 2001),
                       key=lambda f: difference(float(f)).float().mean().item())
            fine = numpy.linspace(max(-0.5, best - 5e-4), min(0.5, best + 5e-4), 1001)
            found = min(fine, key=lambda f: difference(float(f)).float().mean().item())
            closest = difference(float(found))
            self.assertLessEqual(closest.max().item(), 2, f"factor {found}")
            self.assertLess(closest.float().mean().item(), 0.05, f"factor {found}")

    def test_a_probability_of_zero_leaves_the_image_alone(self):
        for operation in ("solarize(0,p=0)", "equalize(p=0)", "color_jitter(0.4,0.4,0.4,0.1,p=0)",
                          "gaussian_blur(5,p=0)", "random_erasing(p=0)"):
            self.assert_forced(operation, lambda x: x, 0)

    def test_a_forced_affine_is_torchvision_s(self):
        for operation, (angle, scale, shear) in (
                ("affine(degrees=25:25,scale=0.8:0.8,shear=12:12,fill=9)", (25.0, 0.8, 12.0)),
                ("affine(degrees=-90:-90)", (-90.0, 1.0, 0.0)),
                ("affine(degrees=0,scale=1.5:1.5,shear=-30:-30)", (0.0, 1.5, -30.0))):
            fill = 9 if "fill=9" in operation else 0
            for image, [ours] in zip(self.images, self.outputs(operation)):
                theirs = self.cropped(F.affine(image, angle=angle, translate=[0, 0], scale=scale,
                                               shear=[shear, 0.0], interpolation=NEAREST,
                                               fill=fill))
                self.assertLessEqual(self.moved_fraction(ours, theirs), 0.01,
                                     f"{operation} on {tuple(image.shape)}")

    def test_a_random_affine_translation_is_one_torchvision_draws(self):
        outputs = self.outputs("affine(degrees=0,translate=0.2:0.1)", epochs=4)
        for image, ours in zip(self.images, outputs):
            height, width = image.shape[1:]
            shifts = [(tx, ty) for tx in range(-round(0.2 * width), round(0.2 * width) + 1)
                      for ty in range(-round(0.1 * height), round(0.1 * height) + 1)]
            candidates = {self.cropped(F.affine(image, angle=0.0, translate=[tx, ty], scale=1.0,
                                                shear=[0.0, 0.0])).numpy().tobytes()
                          for tx, ty in shifts}
            for out in ours:
                self.assertIn(out.numpy().tobytes(), candidates)

    def test_random_erasing_erases_a_rectangle_torchvision_could(self):
        outputs = self.outputs("random_erasing(p=1,scale=0.1:0.3,ratio=0.5:2,value=7)", epochs=3)
        for image, ours in zip(self.images, outputs):
            height, width = image.shape[1:]
            original = self.cropped(image)
            for out in ours:
                changed = (out != original).any(dim=-1).nonzero()
                self.assertGreater(len(changed), 0)
                top, left = changed.min(dim=0).values.tolist()
                bottom, right = changed.max(dim=0).values.tolist()
                # The rectangle in the image's own coordinates (the crop
                # pads the image into the middle of CROP).
                pad_top = (CROP[0] - height) // 2
                pad_left = (CROP[1] - width) // 2
                i, j = top - pad_top, left - pad_left
                h, w = bottom - top + 1, right - left + 1
                theirs = self.cropped(F.erase(image, i, j, h, w, torch.tensor(7)))
                # Pixels already 7 inside the rectangle may hide its edge:
                # equal to torchvision's erase of the rectangle that changed.
                self.assertEqual(self.largest_difference(out, theirs), 0)
                self.assertTrue(h < height and w < width)
                self.assertLessEqual(h * w, 0.3 * height * width + h + w)

    def policy_candidates(self, policy, image, bins):
        """Every output `policy` (a torchvision v2 policy object) can make of
        `image` with one operation at any of `bins`: (name, kind, HWC)."""
        height, width = image.shape[1:]
        candidates = []
        for name, (magnitudes_of, signed) in policy._AUGMENTATION_SPACE.items():
            magnitudes = magnitudes_of(policy.num_magnitude_bins, height, width)
            values = [0.0] if magnitudes is None else [float(magnitudes[b]) for b in bins]
            geometric = name in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
            for value in values:
                for sign in ((1, -1) if signed and magnitudes is not None else (1,)):
                    out = policy._apply_image_or_video_transform(
                        image, name, value * sign, interpolation=NEAREST, fill=policy._fill)
                    candidates.append((name, geometric, self.cropped(out)))
        return candidates

    def assert_policy_outputs(self, operation, policy, bins, epochs, least_operations):
        outputs = self.outputs(operation, epochs=epochs)
        seen = set()
        for image, ours in zip(self.images, outputs):
            candidates = self.policy_candidates(policy, image, bins)
            for out in ours:
                matches = [name for name, geometric, theirs in candidates
                           if (self.moved_fraction(out, theirs) <= 0.01 if geometric
                               else self.largest_difference(out, theirs) <= 1)]
                self.assertTrue(matches, f"{operation} on {tuple(image.shape)}: "
                                         "no output torchvision's policy makes")
                seen.update(matches)
        self.assertGreaterEqual(len(seen), least_operations, f"drawn: {sorted(seen)}")

    def test_rand_augment_makes_what_torchvision_s_rand_augment_makes(self):
        self.assert_policy_outputs("rand_augment(num_ops=1,magnitude=9)",
                                   v2.RandAugment(num_ops=1, magnitude=9), [9], 24, 10)
        self.assert_policy_outputs("rand_augment(num_ops=1,magnitude=27,num_magnitude_bins=31)",
                                   v2.RandAugment(num_ops=1, magnitude=27), [27], 12, 8)

    def test_trivial_augment_wide_makes_what_torchvision_s_makes(self):
        self.assert_policy_outputs("trivial_augment_wide()", v2.TrivialAugmentWide(),
                                   range(31), 24, 10)


if __name__ == "__main__":
    unittest.main()
