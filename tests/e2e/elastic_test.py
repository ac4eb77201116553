"""End-to-end: an elastic data group. Real processes on loopback, the data
servers found through a servers file that this test rewrites as a scheduler
would (docs/operations.md, "An elastic data group").

The run starts with one data server; two more join mid-epoch (each then
serves batches, and the leader's data wait falls); one leaves by SIGTERM
(a spot interruption notice) and one dies by SIGKILL (no notice). Every
sample still reaches its rank exactly once in every epoch, and every process
that was not killed exits 0.

Run by ctest as `python3 elastic_test.py BUILD_DIR`. Standard library only.
"""

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from processes import free_port, read_until, scratch_dir, start_server  # noqa: E402

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")

IMAGES = 800
BATCH = 8
RANKS = 2
EPOCHS = 10  # long enough for every event below to land mid-run
STEPS_PER_EPOCH = IMAGES // (BATCH * RANKS)


def write_servers(path, servers):
    """As a script should: a new file renamed over the old one."""
    with open(path + ".new", "w") as f:
        f.write("# data servers, rewritten by the test\n" + "\n".join(servers) + "\n")
    os.replace(path + ".new", path)


def batches_sent(address):
    result = subprocess.run([HETERODL, "status", "--json", address], capture_output=True,
                            text=True, timeout=30)
    if result.returncode != 0:
        raise AssertionError(f"heterodl status {address}: {result.stderr}")
    return int(json.loads(result.stdout)["servers"][0]["stats"].get("batches_sent", 0))


class ElasticDataGroupTest(unittest.TestCase):
    def test_servers_join_leave_and_die_mid_run_and_every_sample_arrives_once(self):
        tmp = scratch_dir("heterodl-elastic-")
        dataset = os.path.join(tmp, "data")
        subprocess.run([HETERODL, "dataset", "sample", dataset, "--images", str(IMAGES)],
                       check=True, timeout=300, capture_output=True)
        servers_file = os.path.join(tmp, "servers")
        metrics = os.path.join(tmp, "metrics.jsonl")
        samples = os.path.join(tmp, "samples")
        first, first_address = start_server(HETERODL, dataset, os.path.join(tmp, "port-a"))
        processes = [first]
        try:
            write_servers(servers_file, [first_address])
            trainer = subprocess.Popen(
                [HETERODL, "train", "--data-servers-file", servers_file, "--ranks", str(RANKS),
                 "--epochs", str(EPOCHS), "--batch-size", str(BATCH), "--device-step-ms", "5",
                 "--sample-log-dir", samples, "--metrics-file", metrics,
                 "--master-port", str(free_port())], stderr=subprocess.PIPE, text=True)
            processes.append(trainer)
            # A 5 ms step wants 3,200 images/s: one host of one thread is
            # far behind, once what it fetched while the ranks started is
            # used up.
            log = until_step(trainer, 40)
            alone = last_step(log)

            # Two more hosts come up and are listed mid-epoch; the loaders
            # find them at their next look at the file.
            second, second_address = start_server(HETERODL, dataset, os.path.join(tmp, "port-b"))
            third, third_address = start_server(HETERODL, dataset, os.path.join(tmp, "port-c"))
            processes += [second, third]
            write_servers(servers_file, [first_address, second_address, third_address])
            log += read_until(trainer, "listed; checking its dataset")
            joined = last_step(log)
            first_before = batches_sent(first_address)
            log += until_step(trainer, joined + 40)
            # The joined hosts took over part of the work: a count, not a
            # time, so that a busy CI machine cannot turn the check around.
            first_share = batches_sent(first_address) - first_before
            joined_share = batches_sent(second_address) + batches_sent(third_address)
            self.assertGreater(batches_sent(second_address), 0, log[-3000:])
            self.assertGreater(batches_sent(third_address), 0, log[-3000:])
            self.assertGreater(joined_share, (first_share + joined_share) // 10,
                               (first_share, joined_share))

            # One is interrupted with notice: it drains and exits 0, and the
            # scheduler takes it off the list.
            interrupted = last_step(log)
            second.send_signal(signal.SIGTERM)
            self.assertEqual(second.wait(timeout=30), 0)
            write_servers(servers_file, [first_address, third_address])
            log += until_step(trainer, interrupted + 30)

            # One dies without notice and stays listed (no one noticed yet).
            third.send_signal(signal.SIGKILL)
            # Not communicate(): it reads the pipe itself and would lose what
            # readline() has buffered. ctest's timeout ends a hung run.
            log += trainer.stderr.read()
            trainer.wait(timeout=60)
            self.assertEqual(trainer.returncode, 0, log[-4000:])
            self.assertIn(f"step {STEPS_PER_EPOCH * EPOCHS}/{STEPS_PER_EPOCH * EPOCHS}", log)
            self.assertEqual(first.wait(timeout=30), 0)  # told to shut down by the leader
            self.assertEqual(third.wait(timeout=5), -signal.SIGKILL)
            self.assertIn(f"data server {second_address} is leaving", log)

            # Exactly once per epoch over the ranks, each rank its own share.
            per_epoch = {}
            for rank in range(RANKS):
                with open(os.path.join(samples, f"rank{rank}.samples")) as f:
                    for line in f:
                        if line.strip():
                            epoch, _, index = map(int, line.split())
                            per_epoch.setdefault(epoch, []).append(index)
            self.assertEqual(sorted(per_epoch), list(range(EPOCHS)))
            for epoch, indices in per_epoch.items():
                self.assertEqual(sorted(indices), list(range(IMAGES)), f"epoch {epoch}")

            # The leader's data wait before and after they joined, for a look.
            with open(metrics) as f:
                wait = {row["step"]: row["data_wait_ms"] for row in map(json.loads, f)
                        if "step" in row}
            alone = [wait[s] for s in range(20, alone + 1)]
            together = [wait[s] for s in range(joined + 10, interrupted + 1)]
            print(f"data wait per step: {statistics.median(alone):.1f} ms with one host, "
                  f"{statistics.median(together):.1f} ms with three", file=sys.stderr)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()


def until_step(trainer, step):
    """The trainer's output up to its line of step `step`, which must come."""
    seen = read_until(trainer, f"step {step}/")
    if f"step {step}/" not in seen:
        raise AssertionError(f"the run ended before step {step}: {seen[-3000:]}")
    return seen


def last_step(log):
    """The last step number the trainer printed ("step N/M")."""
    return int(re.findall(r"step (\d+)/", log)[-1])


if __name__ == "__main__":
    unittest.main()
