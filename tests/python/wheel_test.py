"""The built wheel, installed into fresh virtualenvs (one with the project's
torch, one with another torch release, one with NumPy only), against a real
`heterodl serve`: every venv gets every sample exactly once across two
ranks, and the same pixels bit for bit. JAX takes the same batches through
DLPack, and the installed extension needs nothing from the machine beyond
what every manylinux system has.

Run by ctest: python wheel_test.py BUILD_DIR. Needs dist/heterodl-*.whl
(scripts/build_wheel.sh) and the venvs of tests/python/make_wheel_venvs.sh;
scripts/test.sh makes both.
"""

import json
import os
import subprocess
import sys
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wheel_check.py")
VENVS = {"torch-project": "torch", "torch-2.6": "torch", "numpy": "numpy", "jax": "numpy"}
# What a plain Linux machine with Python provides (the manylinux policies'
# libraries); everything else the extension links must come from the wheel.
SYSTEM_LIBRARIES = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "libstdc++.so.6",
                    "libgcc_s.so.1", "libz.so.1", "libpthread.so.0", "libdl.so.2",
                    "librt.so.1", "ld-linux-x86-64.so.2"}

sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
from processes import install_built_wheel, sample_dataset, start_server, stop_servers  # noqa: E402


class WheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.num_samples = 50
        cls.dataset = sample_dataset(HETERODL, cls.num_samples, "heterodl-wheel-")
        cls.server, cls.address = start_server(
            HETERODL, cls.dataset, os.path.join(os.path.dirname(cls.dataset), "port"))

    @classmethod
    def tearDownClass(cls):
        stop_servers(cls.server)

    def run_in(self, venv, expect_format=None):
        python = install_built_wheel(ROOT, venv)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        expect_format = expect_format or VENVS[venv]
        done = subprocess.run([python, CHECK, self.address, str(self.num_samples), expect_format,
                               *(["jax"] if venv == "jax" else [])],
                              capture_output=True, text=True, timeout=300, env=env,
                              cwd=os.path.dirname(self.dataset))
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        return json.loads(done.stdout.strip().splitlines()[-1])

    @staticmethod
    def why_no_older_torch():
        """make_wheel_venvs.sh's reason for leaving torch 2.6 out, or None."""
        marker = os.path.join(ROOT, ".venv-wheel", "torch-2.6.skipped")
        if not os.path.exists(marker):
            return None
        with open(marker) as f:
            return f.read().strip()

    def test_an_older_torch_release_is_among_the_venvs(self):
        reason = self.why_no_older_torch()
        if reason:
            self.skipTest(f"torch 2.6 venv not made: {reason}")
        self.assertTrue(os.path.exists(os.path.join(ROOT, ".venv-wheel", "torch-2.6", "bin", "python")))

    def test_every_venv_gets_every_sample_once_and_the_same_pixels(self):
        venvs = [v for v in VENVS if not (v == "torch-2.6" and self.why_no_older_torch())]
        results = {venv: self.run_in(venv) for venv in venvs}
        for venv, result in results.items():
            with self.subTest(venv=venv):
                self.assertTrue(result["indices"], result)
                self.assertTrue(result["dlpack"], result)
        self.assertEqual(results["torch-project"]["torch"].split("+")[0], "2.11.0")
        if "torch-2.6" in results:
            self.assertTrue(results["torch-2.6"]["torch"].startswith("2.6.0"))
        for venv in ("torch-project", "torch-2.6"):
            if venv in results:
                self.assertTrue(results[venv]["resume"], results[venv])
        self.assertFalse(results["numpy"]["torch_imported"])
        self.assertTrue(results["jax"]["jax_dlpack"], results["jax"])
        self.assertIn("CUDA", results["numpy"]["pin_error"])
        digests = {result["images_sha256"] for result in results.values()}
        self.assertEqual(len(digests), 1, results)

    def test_the_abi3_wheel_imports_into_newer_pythons(self):
        newer = [venv for venv in ("py3.12", "py3.13")
                 if os.path.exists(os.path.join(ROOT, ".venv-wheel", venv, "bin", "python"))]
        if not newer:
            self.skipTest("no CPython 3.12 or 3.13 on this machine")
        for venv in newer:
            with self.subTest(venv=venv):
                result = self.run_in(venv, "dlpack")
                self.assertTrue(result["python"].startswith(venv[2:]), result)
                self.assertTrue(result["indices"], result)
                self.assertEqual(result["modules"], [], result)  # no array library at all

    def test_the_extension_needs_only_what_every_linux_has(self):
        python = os.path.join(ROOT, ".venv-wheel", "numpy", "bin", "python")
        self.run_in("numpy")
        extension = subprocess.run(
            [python, "-c", "import heterodl._heterodl as m; print(m.__file__)"],
            capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        linked = subprocess.run(["ldd", extension], capture_output=True, text=True, check=True,
                                env={"PATH": os.environ["PATH"]}).stdout
        bundled, system = [], []
        for line in linked.splitlines():
            name, _, where = line.strip().partition(" => ")
            name = os.path.basename(name.split()[0])
            self.assertNotIn("not found", where, line)
            if "/heterodl.libs/" in where:
                bundled.append(name)
            else:
                system.append(name)
        self.assertTrue(any(name.startswith("libgrpc") for name in bundled), linked)
        self.assertLessEqual(set(system), SYSTEM_LIBRARIES, linked)


if __name__ == "__main__":
    unittest.main(verbosity=2)
