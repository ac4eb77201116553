"""End-to-end tests: real heterodl processes on loopback.

Run by ctest as `python3 local_test.py BUILD_DIR`. Standard library only.
"""

import glob
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from processes import free_port, read_until, sample_dataset, scratch_dir, start_server  # noqa: E402

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
# The optional Pillow-SIMD peer (bench/peers/setup_pillow_simd.sh) is not
# these tests' subject: off, so a machine that has its venv runs what CI runs.
BENCH_AUGMENT = [HETERODL, "bench", "augment", "--pillow-simd-python", ""]
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# The project's venv (torch, torchvision): what the benchmarks' peers run in.
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")


def processes_mentioning(marker):
    """PIDs of live processes whose command line contains `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().split(")")[-1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(pid))
    return found


def read_samples(sample_dir):
    """{rank: [(epoch, batch, index), ...]} from the ranks' sample logs."""
    per_rank = {}
    for name in sorted(os.listdir(sample_dir)):
        rank = int(name[len("rank"):-len(".samples")])
        with open(os.path.join(sample_dir, name)) as f:
            per_rank[rank] = [tuple(map(int, line.split())) for line in f if line.strip()]
    return per_rank


class LocalRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch_dir("heterodl-e2e-")
        cls.dataset = os.path.join(cls.tmp, "sample")
        subprocess.run([HETERODL, "dataset", "sample", cls.dataset, "--images", "96",
                        "--seed", "3"], check=True, timeout=120)

    def run_local(self, *extra, timeout=300):
        return subprocess.run([HETERODL, "local", "--dataset", self.dataset, *extra],
                              capture_output=True, text=True, timeout=timeout)

    def test_every_sample_reaches_exactly_one_rank_and_nothing_is_left_running(self):
        samples = os.path.join(self.tmp, "samples")
        metrics = os.path.join(self.tmp, "metrics.jsonl")
        result = self.run_local("--servers", "2", "--ranks", "2", "--epochs", "1",
                                "--batch-size", "8", "--sample-log-dir", samples,
                                "--metrics-file", metrics)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        per_rank = read_samples(samples)
        self.assertEqual(sorted(per_rank), [0, 1])
        indices = [index for rows in per_rank.values() for (_, _, index) in rows]
        self.assertEqual(sorted(indices), list(range(96)))  # exactly once each
        for rows in per_rank.values():
            self.assertEqual(len(rows), 48)
            batches = [batch for (_, batch, _) in rows]
            self.assertEqual(batches, sorted(batches))  # delivered in order
        self.assertEqual(processes_mentioning(self.dataset), [])
        # Step times and the data-wait share are reported.
        self.assertIn("data wait", result.stderr)
        self.assertIn("data_stall_percent", result.stderr)
        with open(metrics) as f:
            lines = [json.loads(line) for line in f]
        steps = [line for line in lines if "step" in line]
        self.assertEqual(len(steps), 6)
        for key in ("step_ms", "data_wait_ms", "loss", "images_per_sec"):
            self.assertIn(key, steps[0])
        self.assertEqual(lines[-1]["summary"]["images"], 96)
        # One definition each: the log's step N is the file's step N, with the
        # same loss and images/s; the summary's final loss is the last step's.
        self.assertEqual([line["step"] for line in steps], list(range(1, 7)))
        self.assertEqual(lines[-1]["summary"]["final_loss"], steps[-1]["loss"])
        logged = re.findall(r"step (\d+)/6  loss ([0-9.]+) .* ([0-9]+) img/s", result.stderr)
        self.assertEqual([int(step) for step, _, _ in logged], list(range(1, 7)), result.stderr)
        for (step, loss, rate), row in zip(logged, steps):
            self.assertAlmostEqual(float(loss), row["loss"], places=3)
            self.assertAlmostEqual(int(rate), row["images_per_sec"], delta=0.51)
            self.assertAlmostEqual(row["images_per_sec"],
                                   8 * 2 * 1000 / row["step_ms"], delta=1e-6)
        # Each step's line carries that step's own time: from one line's
        # stamp to the next is that step's step_ms (both are one clock read),
        # whenever the line was written.
        stamps = [3600000 * int(h) + 60000 * int(m) + 1000 * float(sec) for h, m, sec in
                  re.findall(r"^I (\d\d):(\d\d):(\d\d\.\d+) train/0\S* epoch 0 step \d+/6",
                             result.stderr, flags=re.MULTILINE)]
        self.assertEqual(len(stamps), 6, result.stderr[-4000:])
        for earlier, later, row in zip(stamps, stamps[1:], steps[1:]):
            elapsed = (later - earlier) % 86400000  # a run across midnight
            self.assertAlmostEqual(elapsed, row["step_ms"], delta=1.01)
        # Both servers were told to stop by the leader.
        self.assertEqual(result.stderr.count("shutdown requested"), 2, result.stderr[-4000:])

    def test_shared_auth_token(self):
        token_file = os.path.join(self.tmp, "token")
        with open(token_file, "w") as f:
            f.write("e2e-secret\n")
        result = self.run_local("--servers", "2", "--ranks", "2", "--steps", "2",
                                "--batch-size", "4", "--auth-token-file", token_file)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        self.assertEqual(result.stderr.count("shutdown requested"), 2, result.stderr[-4000:])
        self.assertNotIn("refused a call", result.stderr)

    def make_certificates(self):
        """A CA, and a certificate it signed for 127.0.0.1 (server and client use)."""
        tls = os.path.join(self.tmp, "tls")
        os.makedirs(tls, exist_ok=True)
        ext = os.path.join(tls, "ext.cnf")
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

        def openssl(*args):
            subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

        for name in ("ca", "node", "stranger"):
            openssl("genrsa", "-out", os.path.join(tls, f"{name}.key"), "2048")
        openssl("req", "-x509", "-new", "-key", os.path.join(tls, "ca.key"), "-days", "2",
                "-subj", "/CN=heterodl-test-ca", "-out", os.path.join(tls, "ca.pem"))
        for name, ca in (("node", "ca"), ("stranger", "stranger")):
            csr = os.path.join(tls, f"{name}.csr")
            openssl("req", "-new", "-key", os.path.join(tls, f"{name}.key"), "-subj",
                    f"/CN=heterodl-{name}", "-out", csr)
            signer = ["-CA", os.path.join(tls, "ca.pem"), "-CAkey", os.path.join(tls, "ca.key"),
                      "-CAcreateserial"] if ca == "ca" else \
                ["-signkey", os.path.join(tls, "stranger.key")]
            openssl("x509", "-req", "-in", csr, *signer, "-days", "2", "-extfile", ext,
                    "-out", os.path.join(tls, f"{name}.pem"))
        return tls

    def test_mutual_tls_end_to_end_and_every_refusal(self):
        tls = self.make_certificates()
        node = ["--tls-cert", os.path.join(tls, "node.pem"),
                "--tls-key", os.path.join(tls, "node.key"), "--tls-ca", os.path.join(tls, "ca.pem")]
        result = self.run_local("--servers", "1", "--ranks", "2", "--steps", "2",
                                "--batch-size", "4", *node)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        self.assertIn("shutdown requested", result.stderr)

        server, address = start_server(HETERODL, self.dataset, os.path.join(self.tmp, "tls.port"),
                                       *node)
        try:
            def status(*flags):
                return subprocess.run([HETERODL, "status", address, *flags],
                                      capture_output=True, text=True, timeout=60)
            self.assertEqual(status(*node).returncode, 0)
            # Plaintext, no client certificate, or one the CA did not sign: refused.
            self.assertEqual(status().returncode, 1)
            self.assertEqual(status("--tls-ca", os.path.join(tls, "ca.pem")).returncode, 1)
            stranger = status("--tls-cert", os.path.join(tls, "stranger.pem"), "--tls-key",
                              os.path.join(tls, "stranger.key"), "--tls-ca",
                              os.path.join(tls, "ca.pem"))
            self.assertEqual(stranger.returncode, 1)
            # A client that does not trust the server's CA refuses it.
            untrusting = status("--tls-cert", os.path.join(tls, "node.pem"), "--tls-key",
                                os.path.join(tls, "node.key"), "--tls-ca",
                                os.path.join(tls, "stranger.pem"))
            self.assertEqual(untrusting.returncode, 1)
        finally:
            server.terminate()
            server.wait(timeout=30)
        # Configuration mistakes are named.
        missing = subprocess.run([HETERODL, "serve", "--dataset", self.dataset, "--port", "0",
                                  "--tls-cert", os.path.join(tls, "node.pem")],
                                 capture_output=True, text=True, timeout=60)
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn("--tls-cert and --tls-key go together", missing.stderr)

    def test_the_leader_s_metrics_carry_the_data_hosts_needed(self):
        metrics = os.path.join(self.tmp, "sizing.jsonl")
        result = self.run_local("--servers", "2", "--ranks", "2", "--epochs", "4",
                                "--batch-size", "8", "--metrics-file", metrics)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        with open(metrics) as f:
            steps = [row for row in map(json.loads, f) if "step" in row]
        measured = [row for row in steps if row["data_hosts"] > 0]
        self.assertTrue(measured, steps[-1])  # the servers are measured within the run
        for row in measured:
            self.assertLessEqual(row["data_hosts"], 2)
            self.assertGreater(row["data_capacity_per_host"], 0)
            demand = row["images_per_sec"] * row["step_ms"] / row["compute_ms"]
            needed = max(1, math.ceil(demand * 0.95 / row["data_capacity_per_host"] - 1e-9))
            self.assertEqual(row["data_hosts_needed"], needed, row)
        # Not known before the first measurement: zeros, not guesses.
        for row in steps[:steps.index(measured[0])]:
            self.assertEqual((row["data_hosts"], row["data_hosts_needed"]), (0, 0))

    def test_steps_limit(self):
        result = self.run_local("--servers", "2", "--ranks", "2", "--steps", "3",
                                "--batch-size", "4")
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        self.assertIn("step 3/3", result.stderr)
        self.assertNotIn("step 4/", result.stderr)
        # Nothing built for nothing: 3 batches per rank, no more (the
        # window once asked for dozens), and no warning about local's own
        # flags.
        served = [int(n) for n in re.findall(r"stopped: (\d+) batches", result.stderr)]
        self.assertEqual(len(served), 2, result.stderr[-4000:])
        self.assertEqual(sum(served), 3 * 2)
        self.assertNotIn("not trained on", result.stderr)
        self.assertNotIn("does nothing for", result.stderr)
        # The same for a whole run: its last epoch fetches nothing beyond.
        result = self.run_local("--servers", "1", "--ranks", "2", "--epochs", "2",
                                "--batch-size", "16")
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        served = [int(n) for n in re.findall(r"stopped: (\d+) batches", result.stderr)]
        self.assertEqual(served, [2 * 2 * 3])  # 48 samples a rank: 3 batches, 2 epochs, 2 ranks

    def test_a_dataset_that_cannot_be_read_stops_the_run_naming_it(self):
        # Every file of the list is missing: the run stops at its first
        # batch, exit 1, naming the dataset and why, not training on black
        # images with their real labels.
        listing = os.path.join(self.tmp, "allmissing.txt")
        with open(listing, "w") as f:
            for i in range(64):
                f.write(f"{self.tmp}/nowhere/img{i}.jpg\t{i % 2}\n")
        result = subprocess.run([HETERODL, "local", "--dataset", listing, "--steps", "3",
                                 "--batch-size", "4"], capture_output=True, text=True,
                                timeout=300)
        self.assertEqual(result.returncode, 1, result.stderr[-4000:])
        self.assertIn(f"dataset {listing}", result.stderr)
        self.assertIn("No such file or directory", result.stderr)
        self.assertIn("max_failed_fraction", result.stderr)
        self.assertIn("local run FAILED", result.stderr)
        self.assertNotIn("step 1/", result.stderr)
        # Allowed, the failures are said as they come (the loader's own
        # lines, with the server's reason) and the run trains on.
        result = subprocess.run([HETERODL, "local", "--dataset", listing, "--steps", "2",
                                 "--batch-size", "4", "--max-failed-fraction", "1"],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        self.assertRegex(result.stderr, r"train/\d\[\d+\] \d+ samples of epoch 0 could not be "
                                        r"read or decoded \(0 replaced by other samples, \d+ "
                                        r"left unfilled")

    def test_sigterm_stops_everything(self):
        marker_dataset = self.dataset
        process = subprocess.Popen(
            [HETERODL, "local", "--dataset", marker_dataset, "--servers", "2",
             "--ranks", "2", "--epochs", "1000", "--batch-size", "4"],
            stderr=subprocess.PIPE, text=True)
        seen = read_until(process, "step 1/")  # training has started
        self.assertIn("step 1/", seen)
        process.send_signal(signal.SIGTERM)
        try:
            rest = process.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            process.kill()
            self.fail("local did not stop within 60 s of SIGTERM")
        self.assertIn("stopped on request", rest)
        time.sleep(0.5)
        self.assertEqual(processes_mentioning(marker_dataset), [])

    def test_ctrl_c_stops_everything_at_once_and_says_how_to_resume(self):
        checkpoints = scratch_dir("heterodl-ctrl-c-")
        # Its own process group, signalled as a terminal's Ctrl-C signals one:
        # every child gets SIGINT at the same time.
        process = subprocess.Popen(
            [HETERODL, "local", "--dataset", self.dataset, "--servers", "2", "--ranks", "2",
             "--epochs", "1000", "--batch-size", "4", "--checkpoint-dir", checkpoints],
            stderr=subprocess.PIPE, text=True, start_new_session=True)
        seen = read_until(process, "step 1/")
        self.assertIn("step 1/", seen)
        os.killpg(process.pid, signal.SIGINT)
        try:
            rest = process.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            # What is still running, and what it said: for the next look at
            # a run that hangs here (seen about once in six under a loaded CPU).
            tree = subprocess.run(["ps", "-o", "pid,ppid,stat,etime,args", "--forest", "-g",
                                   str(process.pid)], capture_output=True, text=True).stdout
            os.killpg(process.pid, signal.SIGKILL)
            said = process.communicate()[1]
            self.fail(f"local did not stop within 60 s of Ctrl-C; still running:\n{tree}\n"
                      f"its log:\n{(seen + said)[-6000:]}")
        self.assertEqual(process.returncode, 0, rest[-4000:])
        self.assertIn("local run interrupted", rest)
        self.assertIn("run the same command with --resume", rest)
        self.assertTrue(os.path.exists(os.path.join(checkpoints, "checkpoint.pt")))
        # The servers the signal stopped were not waited for.
        self.assertNotIn("no shutdown acknowledgment", rest)
        self.assertNotIn("still running", rest)

    def signal_at(self, command, when, sig, group, env=None):
        """Starts `command` in a session of its own, sends `sig` (to its
        whole group, as a terminal's Ctrl-C does, when `group`) `when`
        seconds in, or once its log shows `when` (a str: a step's line);
        returns (exit code, seconds from the signal to the exit, log)."""
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True, env=env)
        if isinstance(when, str):
            seen = read_until(process, when)
            self.assertIn(when, seen)
        else:
            seen = ""
            time.sleep(when)
        signalled = time.time()
        (os.killpg if group else os.kill)(process.pid, sig)
        try:
            rest = process.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            rest = process.communicate()[1]
            self.fail(f"{command[1]} did not stop within 60 s of {sig.name} at {when}: "
                      f"{(seen + rest)[-4000:]}")
        return process.returncode, time.time() - signalled, seen + rest

    def test_a_signal_at_any_moment_ends_local_train_and_launch_in_order(self):
        # Early signals land while servers start, while ranks load LibTorch
        # and join, and before the first step: none is a failure, none waits
        # for a server's grace. The 2 s the operations guide promises are
        # printed; the bound here only catches a hang (a loaded CI machine
        # is slower).
        local = [HETERODL, "local", "--dataset", self.dataset, "--servers", "2", "--ranks", "2",
                 "--epochs", "1000", "--batch-size", "4"]
        took = []
        for when, sig, group in ((0.1, signal.SIGINT, True), (0.3, signal.SIGINT, True),
                                 (0.5, signal.SIGINT, True), (1.0, signal.SIGINT, True),
                                 (3.0, signal.SIGINT, True), ("step 1/", signal.SIGINT, True),
                                 ("step 9/", signal.SIGINT, True), (0.3, signal.SIGTERM, False),
                                 (1.0, signal.SIGTERM, False), ("step 2/", signal.SIGTERM, False)):
            with self.subTest(command="local", when=when, signal=sig.name):
                code, seconds, log = self.signal_at(local, when, sig, group)
                took.append(seconds)
                self.assertEqual(code, 0, log[-4000:])
                self.assertIn("local run interrupted", log)
                self.assertNotIn("FAILED", log)
                self.assertNotIn("still running", log)
                self.assertLess(seconds, 15, log[-4000:])
                time.sleep(0.3)
                self.assertEqual(processes_mentioning(self.dataset), [])
        print(f"local stopped {min(took):.2f}-{max(took):.2f} s after the signal", file=sys.stderr)
        # train and launch against a server of their own, which the leader
        # shuts down whatever the moment.
        for name in ("train", "launch"):
            for when in (0.1, 0.4, 1.0, "step 1/"):
                with self.subTest(command=name, when=when):
                    port_file = os.path.join(self.tmp, f"port-{name}-{len(took)}")
                    took.append(0)
                    server, address = start_server(HETERODL, self.dataset, port_file)
                    env = dict(os.environ)
                    # A rendezvous port of its own: 29500 may be another
                    # test's, whose store a rank would join and wait in.
                    master_port = str(free_port())
                    if name == "train":
                        command = [HETERODL, "train", "--data-servers", address, "--ranks", "2",
                                   "--epochs", "1000", "--batch-size", "4",
                                   "--master-port", master_port]
                    else:
                        env.update(HETERODL_ROLE="dnn", HETERODL_DATA_SERVERS=address,
                                   HETERODL_MASTER_PORT=master_port)
                        command = [HETERODL, "launch", "--", "--ranks", "2", "--epochs", "1000",
                                   "--batch-size", "4"]
                    code, seconds, log = self.signal_at(command, when, signal.SIGINT, True, env)
                    self.assertEqual(code, 0, log[-4000:])
                    self.assertLess(seconds, 15, log[-4000:])
                    self.assertIn("telling 1 data server(s) to shut down", log)
                    self.assertEqual(server.wait(timeout=30), 0)

    def test_step_benchmark_prices_both_configurations_and_checks_the_planner(self):
        report_dir = os.path.join(self.tmp, "step-report")
        result = subprocess.run([HETERODL, "bench", "step", "--dataset", self.dataset, "--json",
                                 "--steps", "12", "--batch-size", "8", "--report", report_dir],
                                capture_output=True, text=True, timeout=600)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        report = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertGreater(report["measured_step_ms"], 0)
        self.assertGreater(report["predicted_step_ms"], 0)
        configurations = [run["configuration"] for run in report["runs"]]
        self.assertEqual(configurations[:2], ["homogeneous", "heterogeneous"])
        homogeneous, heterogeneous = report["runs"][0], report["runs"][1]
        self.assertEqual(homogeneous["priced"]["usd_per_hour"], 3.825)
        self.assertAlmostEqual(heterogeneous["priced"]["usd_per_hour"], 5.661)
        self.assertIn("measured: a real LibTorch step", report["accelerator"])
        with open(os.path.join(report_dir, "report.md")) as f:
            markdown = f.read()
        self.assertIn("cost per step", markdown)
        with open(os.path.join(report_dir, "step.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_plan_recommends_a_data_group_for_a_cpu_bound_gpu_instance(self):
        result = subprocess.run([HETERODL, "plan", "--device-step-ms", "184",
                                 "--images-per-sec-per-core", "120", "--batch-size", "256",
                                 "--json"], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        plan = json.loads(result.stdout)
        self.assertEqual(plan["homogeneous"]["bound"], "cpu")
        self.assertEqual(plan["recommended"]["data_instance"], "ml.c5.9xlarge")
        self.assertIn("better price-performance", plan["reason"])
        usage = subprocess.run([HETERODL, "plan"], capture_output=True, text=True, timeout=60)
        self.assertEqual(usage.returncode, 2)
        self.assertIn("--device-step-ms", usage.stderr)

    def test_augment_benchmark_reports_both_sides(self):
        missing = os.path.join(self.tmp, "no-such-venv", "bin", "python")
        result = subprocess.run([*BENCH_AUGMENT, "--dataset", self.dataset, "--json",
                                 "--seconds", "0.3", "--rounds", "1", "--threads", "2",
                                 "--pillow-simd-python", missing],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        report = json.loads(result.stdout.strip().splitlines()[-1])
        # What each side ran, as the peers reported it.
        versions = "\n".join(report["versions"])
        self.assertRegex(versions, r"heterodl: OpenCV [0-9.]+, libjpeg-turbo [0-9.]+, libpng")
        self.assertRegex(versions, r"PIL peer: Pillow [0-9.]+, libjpeg-turbo [0-9.]+, .*"
                                   r"torchvision [0-9.]+")
        self.assertRegex(versions, r"tensor peer: .*torchvision [0-9.]+")
        self.assertIn(f"Pillow-SIMD peer not run: no {missing}", "\n".join(report["peer_notes"]))
        # Where the time goes, with the entropy-only floor under it.
        row = report["formats"][0]
        for key in ("pipeline_microseconds", "decoder_microseconds",
                    "entropy_floor_microseconds"):
            self.assertGreater(row[key], 0, key)
        for key in ("heterodl_images_per_sec_per_core", "torchvision_images_per_sec_per_core",
                    "opencv_images_per_sec_per_core"):
            self.assertGreater(report[key], 0, key)
        self.assertAlmostEqual(report["ratio_vs_torchvision"],
                               report["heterodl_images_per_sec_per_core"]
                               / report["torchvision_images_per_sec_per_core"], places=3)
        self.assertEqual([row["threads"] for row in report["scaling"]], [1, 2])
        self.assertEqual(report["files"], 96)
        # All baseline JPEG: one row, all files, against both peers.
        self.assertEqual([row["format"] for row in report["formats"]], ["all"])
        self.assertGreater(report["tensor_images_per_sec_per_core"], 0)
        self.assertAlmostEqual(report["ratio_vs_tensor"],
                               report["heterodl_images_per_sec_per_core"]
                               / report["tensor_images_per_sec_per_core"], places=3)

    def test_augment_benchmark_times_image_and_mask_pairs_on_both_sides(self):
        # Street-scene-shaped pairs (--sample-size HxW), the segmentation
        # recipe: both peers run transforms.v2 on the image with its Mask.
        pairs = os.path.join(scratch_dir("heterodl-seg-bench-"), "data")
        subprocess.run([HETERODL, "dataset", "sample", pairs, "--task", "segmentation",
                        "--images", "6", "--sample-size", "256x512"], check=True, timeout=120,
                       capture_output=True)
        result = subprocess.run([*BENCH_AUGMENT, "--dataset", pairs, "--json",
                                 "--pipeline", "random_resize(128,512)|"
                                 "random_crop(128x256,pad_if_needed=true)|hflip(0.5)|"
                                 "color_jitter(0.4,0.4,0.4)",
                                 "--seconds", "0.2", "--rounds", "1", "--threads", "1"],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        report = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertTrue(report["masks"])
        self.assertEqual(report["files"], 6)
        self.assertEqual((report["mean_width"], report["mean_height"]), (512, 256))
        for key in ("heterodl_images_per_sec_per_core", "torchvision_images_per_sec_per_core",
                    "tensor_images_per_sec_per_core"):
            self.assertGreater(report[key], 0, key)
        self.assertEqual(report["opencv_images_per_sec_per_core"], 0)  # it crops images alone
        self.assertEqual(report["peer_notes"], [])  # both peers took every pair

    def test_augment_benchmark_times_images_with_their_boxes_on_both_sides(self):
        # A COCO file (the detection sample), the references' lsj recipe:
        # both peers move tv_tensors.BoundingBoxes with the image.
        images = os.path.join(scratch_dir("heterodl-det-bench-"), "data")
        subprocess.run([HETERODL, "dataset", "sample", images, "--task", "detection",
                        "--images", "6"], check=True, timeout=120, capture_output=True)
        result = subprocess.run([*BENCH_AUGMENT, "--dataset",
                                 os.path.join(images, "annotations.json"), "--json",
                                 "--pipeline", "scale_jitter(256x256,scale_range=0.1:2)|"
                                 "random_crop(256x256,pad_if_needed=true)|hflip(0.5)",
                                 "--seconds", "0.2", "--rounds", "1", "--threads", "1"],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        report = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertTrue(report["boxes"])
        self.assertFalse(report["masks"])
        self.assertEqual(report["files"], 6)
        for key in ("heterodl_images_per_sec_per_core", "torchvision_images_per_sec_per_core",
                    "tensor_images_per_sec_per_core"):
            self.assertGreater(report[key], 0, key)
        self.assertEqual(report["peer_notes"], [])

    def test_augment_benchmark_reports_each_format_against_both_peers(self):
        mixed = sample_dataset(HETERODL, 100, formats="mixed")
        result = subprocess.run([*BENCH_AUGMENT, "--dataset", mixed, "--json",
                                 "--seconds", "0.2", "--rounds", "1", "--threads", "1"],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        report = json.loads(result.stdout.strip().splitlines()[-1])
        rows = {row["format"]: row for row in report["formats"]}
        self.assertEqual(sorted(rows), ["PNG", "WebP", "all", "baseline JPEG", "grayscale JPEG",
                                        "progressive JPEG"])
        self.assertEqual(rows["baseline JPEG"]["files"], 60)
        self.assertEqual(sum(row["files"] for name, row in rows.items() if name != "all"), 100)
        for name, row in rows.items():
            for key in ("heterodl_images_per_sec", "pil_images_per_sec", "tensor_images_per_sec"):
                self.assertGreater(row[key], 0, (name, key))
            self.assertAlmostEqual(row["ratio_vs_pil"], row["heterodl_images_per_sec"]
                                   / row["pil_images_per_sec"], places=3)
            if name != "all":
                self.assertTrue(row["decode_path"], name)

    def test_benchmark_peers_leave_out_what_they_cannot_decode_and_say_so(self):
        # A real photo collection: mixed formats, a file cut short (PIL,
        # torchvision and heterodl refuse it), a file that is no image, a
        # BMP (torchvision.io has no BMP decoder). Each contender leaves out
        # what it cannot decode, says how many, and the run goes on.
        mixed = sample_dataset(HETERODL, 40, formats="mixed")
        jpegs = sorted(glob.glob(os.path.join(mixed, "*", "*.jpg")))
        with open(jpegs[0], "rb") as f:
            data = f.read()
        with open(jpegs[0], "wb") as f:
            f.write(data[:len(data) // 2])  # cut short
        with open(jpegs[1], "wb") as f:
            f.write(b"not an image at all")
        bmp = os.path.join(os.path.dirname(jpegs[2]), "as-bitmap.bmp")
        subprocess.run([VENV_PYTHON, "-c", "import sys; from PIL import Image; "
                        "Image.open(sys.argv[1]).save(sys.argv[2])", jpegs[2], bmp], check=True,
                       timeout=60)
        listing = os.path.join(os.path.dirname(mixed), "peer-files.txt")
        files = sorted(glob.glob(os.path.join(mixed, "*", "*")))
        with open(listing, "w") as f:
            f.writelines(f"{path}\t0\n" for path in files)
        peers = os.path.join(ROOT, "bench", "peers")
        expected = {"pil": (2, r"^1 other \(PIL cannot decode them\); 1 refused by its decoder$"),
                    "tensor": (3, r"^1 BMP, 1 other \(torchvision.io.decode_image cannot decode "
                                  r"them\); 1 refused by its decoder$")}
        for decoder, (skipped, note) in expected.items():
            with self.subTest(decoder=decoder):
                out = os.path.join(os.path.dirname(mixed), f"feed-{decoder}.json")
                run = subprocess.run(
                    [VENV_PYTHON, os.path.join(peers, "feed_dataloader.py"), "--files",
                     listing, "--decoder", decoder, "--workers", "1", "--batch-size", "8",
                     "--seconds", "0.1", "--out", out], capture_output=True, text=True,
                    timeout=300)
                self.assertEqual(run.returncode, 0, run.stderr[-3000:])
                with open(out) as f:
                    result = json.load(f)
                self.assertEqual(result["skipped_files"], skipped, result)
                self.assertRegex(result["skipped"], note)
                self.assertGreater(result["images_per_sec"], 0)
                self.assertRegex(result["versions"]["Pillow"], r"^[0-9]+\.[0-9]+")
                self.assertRegex(result["versions"]["torchvision"], r"^[0-9]+\.[0-9]+")
        # bench augment: nobody is given the two files heterodl cannot
        # decode; the tensor peer leaves out the BMP; every format keeps its
        # three figures.
        result = subprocess.run([*BENCH_AUGMENT, "--dataset", mixed, "--json",
                                 "--seconds", "0.2", "--rounds", "1", "--threads", "1"],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        report = json.loads(result.stdout.strip().splitlines()[-1])
        notes = report.get("peer_notes", [])
        self.assertEqual(len(notes), 2, notes)
        self.assertRegex(notes[0], r"^heterodl and the peers left out 2 files heterodl cannot "
                                   r"decode \(first: ")
        self.assertRegex(notes[1], r"^tensor peer left out 1 its decoder refused")
        self.assertEqual(report["files"], 39)
        for row in report["formats"]:
            self.assertGreater(row["pil_images_per_sec"], 0, row["format"])
            if row["format"] == "other":  # the BMP: only the tensor peer lacks it
                self.assertEqual(row.get("tensor_images_per_sec", 0), 0)
            else:
                self.assertGreater(row["tensor_images_per_sec"], 0, row["format"])

    def test_transport_benchmark_reports_every_batch_size(self):
        result = subprocess.run([HETERODL, "bench", "transport", "--json", "--seconds", "0.3"],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        report = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertEqual([row["batch_size"] for row in report["rows"]], [64, 128, 256, 512])
        for row in report["rows"]:
            self.assertGreater(row["loader_gigabytes_per_sec"], 0)
            self.assertGreater(row["grpc_only_gigabytes_per_sec"], 0)
            self.assertGreater(row["tcp_gigabytes_per_sec"], 0)
            self.assertAlmostEqual(row["ratio_vs_tcp"], row["loader_gigabytes_per_sec"]
                                   / row["tcp_gigabytes_per_sec"], places=3)
        self.assertGreater(report["ratio_vs_tcp"], 0)
        self.assertGreater(report["client_cpu_seconds_per_gigabyte"], 0)
        self.assertEqual(report["summary_batch_size"], 256)
        self.assertEqual(processes_mentioning("--synthetic"), [])

    def test_feed_benchmark_reports_the_pipe_as_a_trainer_sees_it(self):
        result = subprocess.run([HETERODL, "bench", "feed", "--dataset", self.dataset, "--json",
                                 "--seconds", "0.3", "--rounds", "1", "--batch-size", "16",
                                 "--threads", "2"],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        report = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertEqual(report["files"], 96)
        self.assertEqual(report["batch_size"], 16)
        self.assertGreater(report["engine_images_per_sec"], 0)
        long_epochs, one_batch = report["long_epochs"], report["one_batch_epochs"]
        self.assertEqual(long_epochs["batches_per_epoch"], 6)
        self.assertEqual(one_batch["batches_per_epoch"], 1)
        for run in (long_epochs, one_batch, report["without_cross_epoch_prefetch"]):
            self.assertGreaterEqual(run["epochs"], 3)
            self.assertGreater(run["images_per_sec"], 0)
            self.assertGreaterEqual(run["window"], 2)
        # One round: the ratios are those of its runs.
        self.assertAlmostEqual(report["pipeline_efficiency"],
                               long_epochs["images_per_sec"] / report["engine_images_per_sec"],
                               places=3)
        self.assertAlmostEqual(report["one_batch_ratio"],
                               one_batch["images_per_sec"] / long_epochs["images_per_sec"],
                               places=3)
        self.assertEqual(processes_mentioning(self.dataset + " "), [])

    def test_help_and_version_exit_zero(self):
        for flag in ("--help", "-h"):
            result = subprocess.run([HETERODL, flag], capture_output=True, text=True, timeout=30)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("usage: heterodl", result.stdout)
        result = subprocess.run([HETERODL, "--version"], capture_output=True, text=True,
                                timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"^heterodl \d+\.\d+\.\d+ \(")
        self.assertNotIn("NDEBUG", result.stdout)
        result = subprocess.run([HETERODL, "serve", "--helpfull"], capture_output=True, text=True,
                                timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        # Every flag, dashed and with its default, as 'help COMMAND' lists them.
        self.assertIn("--worker-nice (default: '10')", result.stdout)
        self.assertIn("--model (default:", result.stdout)

    def test_bad_pipeline_is_a_clear_error(self):
        result = subprocess.run([*BENCH_AUGMENT, "--dataset", self.dataset,
                                 "--pipeline", "random_resized_crop(224)|hflp(0.5)", "--no-peer"],
                                capture_output=True, text=True, timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("at 25: unknown operation 'hflp'", result.stderr)

    def test_missing_dataset_is_a_clear_error(self):
        result = subprocess.run([HETERODL, "local", "--dataset", "/nonexistent/data"],
                                capture_output=True, text=True, timeout=120)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("/nonexistent/data", result.stderr)
        self.assertEqual(processes_mentioning("/nonexistent/data"), [])


class FailoverTest(unittest.TestCase):
    """A data server SIGKILLed mid-epoch: training completes, every sample still
    reaches its rank exactly once, the surviving server exits 0."""

    def test_sigkill_of_a_data_server_mid_epoch(self):
        tmp = scratch_dir("heterodl-failover-")
        dataset = os.path.join(tmp, "data")
        subprocess.run([HETERODL, "dataset", "sample", dataset, "--images", "128"], check=True,
                       timeout=120, capture_output=True)
        servers, addresses = [], []
        for i in range(2):
            server, address = start_server(HETERODL, dataset, os.path.join(tmp, f"port{i}"))
            servers.append(server)
            addresses.append(address)
        samples = os.path.join(tmp, "samples")
        trainer = subprocess.Popen(
            [HETERODL, "train", "--data-servers", ",".join(addresses), "--ranks", "2",
             "--epochs", "1", "--batch-size", "4", "--sample-log-dir", samples,
             "--master-port", str(free_port())], stderr=subprocess.PIPE, text=True)
        seen = read_until(trainer, "step 3/")
        self.assertIn("step 3/", seen)
        servers[0].send_signal(signal.SIGKILL)
        rest = trainer.communicate(timeout=300)[1]
        self.assertEqual(trainer.returncode, 0, (seen + rest)[-4000:])
        self.assertIn("step 16/16", rest)
        per_rank = read_samples(samples)
        indices = [index for rows in per_rank.values() for (_, _, index) in rows]
        self.assertEqual(sorted(indices), list(range(128)))
        self.assertEqual(servers[1].wait(timeout=30), 0)  # told to shut down by the leader
        self.assertEqual(servers[0].wait(timeout=5), -signal.SIGKILL)


class ClusterCommandTest(unittest.TestCase):
    """`heterodl cluster` prints the view the launcher resolves: here only
    that the command reaches the resolution (tests/cluster/
    cluster_view_test.cc checks every source, and every bad one)."""

    def cluster(self, *args, env=None):
        return subprocess.run([HETERODL, "cluster", "--json", *args], capture_output=True,
                              text=True, timeout=30, env=env)

    def test_a_resource_config_file_is_read(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "resourceconfig.json")
            with open(path, "w") as f:
                json.dump({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"],
                           "instance_groups": [
                               {"instance_group_name": "data_group", "hosts": ["algo-2"]},
                               {"instance_group_name": "dnn_group", "hosts": ["algo-1"]}]}, f)
            result = self.cluster("--resource-config", path)
            self.assertEqual(result.returncode, 0, result.stderr)
            view = json.loads(result.stdout)
            self.assertEqual((view["role"], view["data_servers"]), ("dnn", ["algo-2:50051"]))
            result = self.cluster("--resource-config", os.path.join(tmp, "missing.json"))
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("missing.json", result.stderr)

    def test_environment_variables(self):
        env = dict(os.environ, HETERODL_ROLE="data", HETERODL_DATA_SERVERS="a:1,b:2")
        result = self.cluster(env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        view = json.loads(result.stdout)
        self.assertEqual(view["role"], "data")
        self.assertEqual(view["data_servers"], ["a:1", "b:2"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
