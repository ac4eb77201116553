"""Helpers for tests that start real heterodl processes (standard library only)."""

import atexit
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def scratch_dir(prefix):
    """A new temporary folder that is removed, with whatever the test left
    in it, when the test process exits: a suite run leaves nothing in /tmp."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def sample_dataset(heterodl, images, prefix="heterodl-test-", formats="jpeg"):
    """Writes `images` of the built-in sample dataset (encoded as `formats`,
    see `heterodl dataset sample --formats`) into a new temporary folder;
    returns the dataset's path (its parent is the folder, for a test's other
    files)."""
    dataset = os.path.join(scratch_dir(prefix), "data")
    subprocess.run([heterodl, "dataset", "sample", dataset, "--images", str(images),
                    "--formats", formats], check=True, timeout=120, capture_output=True)
    return dataset


def start_server(heterodl, dataset, port_file, *extra, timeout=60, env=None):
    """Starts `heterodl serve` on a free loopback port; returns (process, "host:port").
    `dataset` None serves what `extra` says (--python-dataset ...); `env` is
    the server's environment (default: this process's)."""
    dataset_flags = [] if dataset is None else ["--dataset", dataset]
    process = subprocess.Popen(
        [heterodl, "serve", *dataset_flags, "--address", "127.0.0.1:0",
         "--port-file", port_file, "--threads", "1", *extra], stderr=subprocess.DEVNULL,
        env=env)
    # A server outlives no test: one a failed setUpClass never reaches its
    # tearDownClass for would hold ctest's output pipe open until the
    # test's timeout.
    atexit.register(_stop, process)
    deadline = time.time() + timeout
    while not os.path.exists(port_file):
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            raise RuntimeError(f"heterodl serve did not start (exit {process.poll()})")
        time.sleep(0.05)
    with open(port_file) as f:
        return process, f"127.0.0.1:{int(f.read())}"


def stop_servers(*servers, timeout=30):
    """Asks each server to leave (SIGTERM, as an orchestrator would), all at
    once, then waits for each: a test class's tearDownClass."""
    for server in servers:
        server.send_signal(signal.SIGTERM)
    for server in servers:
        server.wait(timeout=timeout)


def _stop(process):
    if process.poll() is None:
        process.kill()
        process.wait()


def read_until(process, text, timeout=120):
    """Reads `process`'s stderr line by line until a line holds `text`; returns what was read."""
    seen = ""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = process.stderr.readline()
        seen += line
        if text in line or not line:
            break
    return seen


def free_port():
    """A TCP port free on loopback right now (for a process told its port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def install_built_wheel(root, venv, folder=".venv-wheel"):
    """Installs the repaired wheel in `root`/dist (scripts/build_wheel.sh)
    into the virtualenv `root`/`folder`/`venv` (tests/python/
    make_wheel_venvs.sh, make_framework_venvs.sh), offline; returns the
    venv's python. scripts/test.sh makes both before the tests run."""
    python = os.path.join(root, folder, venv, "bin", "python")
    wheels = glob.glob(os.path.join(root, "dist", "heterodl-*-cp311-abi3-manylinux_*.whl"))
    if len(wheels) != 1 or not os.path.exists(python):
        raise RuntimeError(f"expected one repaired wheel in dist/ (found {wheels}) and {python}: "
                           "run scripts/build_wheel.sh and tests/python/make_wheel_venvs.sh or "
                           "make_framework_venvs.sh "
                           "(scripts/test.sh does)")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--force-reinstall", wheels[0]], check=True, timeout=300)
    return python


def torchrun(python, processes, script, *args, env=None, timeout=600):
    """Runs `script` `args` as `processes` processes of one job on this
    machine (`python -m torch.distributed.run --standalone`), one OpenMP
    thread each (they share a few cores); returns its stderr. AssertionError
    when the job fails, with the processes' own error lines first (torchrun's
    traceback comes after them and says only which one failed)."""
    result = subprocess.run(
        [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         str(processes), script, *args],
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines()
                  if "Error" in line or "error" in line or "Exception" in line]
        raise AssertionError(f"{os.path.basename(script)} on {processes} processes failed "
                             f"(exit {result.returncode}):\n" + "\n".join(errors[:40])
                             + "\n...\n" + result.stderr[-3000:])
    return result.stderr
