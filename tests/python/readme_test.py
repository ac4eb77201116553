"""The README's Python blocks, run as they are written, against real servers.

Every ```python block of README.md is executed, in order, in one namespace
(later blocks continue earlier ones, as a reader's session would), with
HETERODL_DATA_SERVERS naming a `heterodl serve` started here: the blocks
read their servers from it. A block that no longer runs fails this test.

Run by ctest: python readme_test.py BUILD_DIR (with the venv's Python and
PYTHONPATH=BUILD_DIR/python).
"""

import os
import re
import signal
import subprocess
import sys
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
from processes import sample_dataset, scratch_dir, start_server  # noqa: E402


def python_blocks(markdown):
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)


class ReadmeTest(unittest.TestCase):
    def test_every_python_block_runs_against_a_real_server(self):
        with open(os.path.join(ROOT, "README.md")) as f:
            blocks = python_blocks(f.read())
        self.assertGreaterEqual(len(blocks), 2)
        # One batch per epoch of the README's batch size: a CPU step of
        # ResNet-18 at 224 x 224 takes seconds here.
        dataset = sample_dataset(HETERODL, 24, "heterodl-readme-")
        workdir = scratch_dir("heterodl-readme-run-")
        server, address = start_server(HETERODL, dataset, os.path.join(workdir, "port"))
        # The segmentation block's: one batch of its 4.
        segmentation_dataset = os.path.join(workdir, "segmentation")
        subprocess.run([HETERODL, "dataset", "sample", segmentation_dataset, "--task",
                        "segmentation", "--images", "4"], check=True, timeout=120,
                       capture_output=True)
        segmentation_server, segmentation_address = start_server(
            HETERODL, segmentation_dataset, os.path.join(workdir, "port-segmentation"))
        saved_directory = os.getcwd()
        os.environ["HETERODL_DATA_SERVERS"] = address
        os.environ["HETERODL_SEGMENTATION_SERVERS"] = segmentation_address
        namespace = {"__name__": "__readme__"}
        try:
            os.chdir(workdir)  # the blocks write checkpoint.pt where they run
            for number, block in enumerate(blocks, 1):
                with self.subTest(block=number):
                    exec(compile(block, f"README.md python block {number}", "exec"), namespace)
            loader = namespace["loader"]
            stats = loader.stats()
            # Two epochs of one batch each; the resumed run found its
            # checkpoint at the end of the last epoch and trained nothing twice.
            self.assertEqual(stats["delivered"], 2)
            self.assertTrue(os.path.exists(os.path.join(workdir, "checkpoint.pt")))
            # The resuming block told the server to shut down: it exits at once.
            self.assertEqual(server.wait(timeout=30), 0)
            # The segmentation block trained on its batch of images and masks.
            self.assertEqual(namespace["segmentation"].stats()["delivered"], 1)
            self.assertEqual(tuple(namespace["y"].shape), (4, 240, 240))
        finally:
            os.chdir(saved_directory)
            os.environ.pop("HETERODL_DATA_SERVERS", None)
            os.environ.pop("HETERODL_SEGMENTATION_SERVERS", None)
            for process in (server, segmentation_server):
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=30)


if __name__ == "__main__":
    unittest.main()
