"""Detection batches in Python: each sample's boxes beside its image, and
every geometric operation on boxes against torchvision.transforms.v2 on a
`tv_tensors.BoundingBoxes` with the same parameters.

A real `heterodl serve` reads a COCO instances file of lossless PNGs whose
pixels say where they are. Deterministic operations are compared box for
box; random ones as in transforms_test.py: heterodl's (image, boxes) must be
a pair torchvision's class makes for some seed. Boxes are clipped to the
image after each operation, as v2's kernels clamp them, and those left under
a pixel wide or high are dropped, as v2.SanitizeBoundingBoxes drops them.

Run by ctest: python detection_test.py BUILD_DIR (with the venv's Python
and PYTHONPATH=BUILD_DIR/python).
"""

import json
import os
import sys
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")

import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

import heterodl  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from pixels import coordinates  # noqa: E402
from processes import scratch_dir, start_server, stop_servers  # noqa: E402

# (width, height) of the test images, and their objects: (xywh, category).
IMAGES = [((60, 40), [((4, 6, 20, 10), 1), ((30.5, 12, 25, 27.5), 2)]),
          ((50, 50), [((0, 0, 50, 50), 3)]),
          ((64, 48), [((40, 2, 20, 8), 1), ((1, 30, 6, 6), 2), ((20, 20, 10, 10), 1)])]


class DetectionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch_dir("heterodl-detection-")
        coco = {"images": [], "annotations": [],
                "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"},
                               {"id": 3, "name": "c"}]}
        cls.samples = []
        for i, ((width, height), objects) in enumerate(IMAGES):
            pixels = coordinates(width, height)
            Image.fromarray(pixels).save(os.path.join(cls.tmp, f"i{i}.png"))
            coco["images"].append({"id": i + 1, "file_name": f"i{i}.png", "width": width,
                                   "height": height})
            for (x, y, w, h), category in objects:
                coco["annotations"].append({"id": len(coco["annotations"]) + 1,
                                            "image_id": i + 1, "category_id": category,
                                            "bbox": [x, y, w, h], "iscrowd": 0})
            boxes = tv_tensors.BoundingBoxes(
                [[x, y, x + w, y + h] for (x, y, w, h), _ in objects], format="XYXY",
                canvas_size=(height, width), dtype=torch.float32)
            cls.samples.append((torch.from_numpy(pixels).permute(2, 0, 1), boxes,
                                torch.tensor([c for _, c in objects])))
        annotations = os.path.join(cls.tmp, "instances.json")
        with open(annotations, "w") as f:
            json.dump(coco, f)
        cls.server, cls.address = start_server(HETERODL, annotations,
                                               os.path.join(cls.tmp, "port"))

    @classmethod
    def tearDownClass(cls):
        stop_servers(cls.server)

    def outputs(self, spec, epochs=1):
        """Each sample through `spec`, in dataset order: [(HWC image, target)] per sample."""
        loader = heterodl.RemoteDataLoader(servers=self.address, batch_size=1, pipeline=spec,
                                           shuffle=False, seed=3)
        outputs = [[] for _ in IMAGES]
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for i, (images, targets) in enumerate(loader):
                outputs[i].append((images[0].clone(),
                                   {k: v.clone() for k, v in targets[0].items()}))
        return outputs

    def theirs(self, transform, image, boxes, labels):
        """torchvision's output, its boxes sanitized (under a pixel wide or high,
        or of less than a pixel's area, dropped) as SanitizeBoundingBoxes does."""
        out, out_boxes = transform(image, boxes)
        # Clamped to the image (its "soft" mode leaves float error past the
        # edge: 50 x 1.8 is a hair over 90), then sanitized.
        clamped = v2.functional.clamp_bounding_boxes(out_boxes)
        kept, valid = v2.functional.sanitize_bounding_boxes(
            clamped.as_subclass(torch.Tensor), format=out_boxes.format,
            canvas_size=out_boxes.canvas_size, min_size=1, min_area=1)
        return out, kept, labels[valid]

    def test_a_batch_holds_each_samples_objects(self):
        loader = heterodl.RemoteDataLoader(servers=self.address, batch_size=3,
                                           pipeline="resize(32x48)", shuffle=False)
        [batch] = list(loader)
        self.assertEqual(sorted(batch.fields), ["box_labels", "boxes", "images", "iscrowd"])
        self.assertEqual(batch.lengths["boxes"], (2, 1, 3))
        self.assertEqual(tuple(batch.fields["boxes"].shape), (6, 4))
        self.assertEqual(batch.fields["boxes"].dtype, torch.float32)
        images, targets = batch  # a detection batch unpacks as (images, targets)
        self.assertEqual(len(targets), 3)
        self.assertEqual(targets[2]["labels"].tolist(), [1, 2, 1])
        self.assertEqual(targets[0]["iscrowd"].tolist(), [0, 0])
        # Views of the batch's own memory, as torchvision's models take them.
        self.assertEqual(targets[1]["boxes"].data_ptr(),
                         batch.fields["boxes"].data_ptr() + 2 * 4 * 4)
        self.assertEqual(loader.dataset.classes, ["__background__", "a", "b", "c"])

    def assert_same_as_torchvision(self, spec, transform):
        for (image, boxes, labels), [(out, target)] in zip(self.samples, self.outputs(spec)):
            theirs, their_boxes, their_labels = self.theirs(transform, image, boxes, labels)
            what = f"{spec} on {tuple(image.shape)}"
            self.assertLessEqual((out.int() - theirs.permute(1, 2, 0).int()).abs().max().item(),
                                 1, what)
            torch.testing.assert_close(target["boxes"], their_boxes, atol=1e-3, rtol=0,
                                       msg=what)
            self.assertEqual(target["labels"].tolist(), their_labels.tolist(), what)

    def test_resize_crop_and_flip_move_boxes_as_torchvision_does(self):
        self.assert_same_as_torchvision("resize(60x90)", v2.Resize((60, 90)))
        self.assert_same_as_torchvision("center_crop(30x44)|hflip(1)",
                                        v2.Compose([v2.CenterCrop((30, 44)),
                                                    v2.RandomHorizontalFlip(p=1)]))
        self.assert_same_as_torchvision("resize(70)|center_crop(40x60)",
                                        v2.Compose([v2.Resize(70), v2.CenterCrop((40, 60))]))

    def test_a_random_crop_drops_and_clips_boxes_as_torchvision_does(self):
        # Few enough windows and flips for 4000 seeds to make every one.
        spec = "random_crop(36x56,padding=2,pad_if_needed=true)|hflip(0.5)"
        transform = v2.Compose([v2.RandomCrop((36, 56), padding=2, pad_if_needed=True),
                                v2.RandomHorizontalFlip()])
        ours = self.outputs(spec, epochs=4)
        for (image, boxes, labels), outputs in zip(self.samples, ours):
            candidates = {}
            for seed in range(4000):
                torch.manual_seed(seed)
                theirs, their_boxes, their_labels = self.theirs(transform, image, boxes, labels)
                candidates[theirs.permute(1, 2, 0).numpy().tobytes()] = (their_boxes,
                                                                         their_labels)
            for out, target in outputs:
                key = out.numpy().tobytes()
                # (not assertIn: its message would print every candidate)
                self.assertTrue(key in candidates, f"{spec}: an image torchvision does not make")
                their_boxes, their_labels = candidates[key]
                torch.testing.assert_close(target["boxes"], their_boxes, atol=1e-3, rtol=0)
                self.assertEqual(target["labels"].tolist(), their_labels.tolist())


if __name__ == "__main__":
    unittest.main(verbosity=2)
