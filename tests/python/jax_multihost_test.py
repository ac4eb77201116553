"""JAX across hosts: two processes (jax.distributed on CPU, two local devices
each) run examples/jax/train_multihost.py on the wheel installed into the
JAX venv (tests/python/make_wheel_venvs.sh): each loads its rank's share,
the global batches are assembled with jax.make_array_from_process_local_data
over a mesh of the four devices, a jit-compiled step trains on them, and
together the processes see each sample of every epoch exactly once.

Run by ctest: python jax_multihost_test.py BUILD_DIR (the project's Python).
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
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
from processes import (free_port, install_built_wheel, sample_dataset, scratch_dir,  # noqa: E402
                       start_server, stop_servers)

SAMPLES = 64
BATCH = 8  # per process: global batches of 16 over 4 devices


class JaxMultiHostTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.python = install_built_wheel(ROOT, "jax")
        dataset = sample_dataset(HETERODL, SAMPLES)
        cls.server, cls.address = start_server(
            HETERODL, dataset, os.path.join(os.path.dirname(dataset), "port"))
        cls.tmp = scratch_dir("heterodl-jax-")

    @classmethod
    def tearDownClass(cls):
        stop_servers(cls.server)

    def test_two_processes_see_each_sample_once_in_global_batches(self):
        record = os.path.join(self.tmp, "record.json")
        coordinator = f"127.0.0.1:{free_port()}"
        env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
               "PYTHONPATH": "", "OMP_NUM_THREADS": "1"}
        processes = [subprocess.Popen(
            [self.python, os.path.join(ROOT, "examples", "jax", "train_multihost.py"),
             "--servers", self.address, "--coordinator", coordinator, "--processes", "2",
             "--process-id", str(i), "--batch-size", str(BATCH), "--epochs", "2",
             "--record", record], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env) for i in range(2)]
        outputs = [p.communicate(timeout=300) for p in processes]
        for process, (out, err) in zip(processes, outputs):
            self.assertEqual(process.returncode, 0, err[-4000:])
        self.assertIn("epoch 2/2", outputs[0][0])
        self.assertIn("global batch [16, 32, 32, 3] over 4 devices of 2 processes",
                      outputs[0][0])
        with open(record) as f:
            steps = json.load(f)
        for epoch in (0, 1):
            indices = [i for step in steps if step["epoch"] == epoch for i in step["indices"]]
            self.assertEqual(sorted(indices), list(range(SAMPLES)), f"epoch {epoch}")
        self.assertEqual(len(steps), 2 * SAMPLES // (2 * BATCH))
        # The global batch is rank 0's local batch, then rank 1's.
        self.assertTrue(all(len(step["indices"]) == 2 * BATCH for step in steps))


if __name__ == "__main__":
    unittest.main(verbosity=2)
