"""A 3-host heterogeneous cluster on one machine: network namespaces joined by
a bridge (as root), 2 data hosts and 1 dnn host running 2 ranks. Each host
gets its own SageMaker-format resourceconfig.json and /etc/hosts, and runs the
same command, the plain `heterodl` launcher, as SageMaker would.

Without namespaces (not root, no `ip`, or HETERODL_CLUSTER_TEST_LOOPBACK set),
the hosts are loopback addresses 127.0.0.11-13 instead, and the test says so.

    python netns_cluster_test.py BUILD_DIR
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
HOSTS = ["algo-1", "algo-2", "algo-3"]  # data, data, dnn
DATA, DNN = HOSTS[:2], HOSTS[2]
STEPS_PER_EPOCH = 12  # 96 images, 2 ranks, batch 4


def run(*command):
    subprocess.run(command, check=True, capture_output=True, timeout=60)


class Cluster:
    """The hosts, their configs, and how to start a command on one."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.namespaces = self._make_namespaces()
        if self.namespaces:
            self.address = {host: f"10.77.0.{i + 1}" for i, host in enumerate(HOSTS)}
            self.name = {host: host for host in HOSTS}
        else:
            print("netns_cluster_test: network namespaces unavailable; the hosts are "
                  "loopback addresses 127.0.0.11-13", file=sys.stderr)
            self.address = {host: f"127.0.0.{11 + i}" for i, host in enumerate(HOSTS)}
            self.name = dict(self.address)  # no per-host /etc/hosts: names are addresses
        for host in HOSTS:
            groups = [{"instance_group_name": "data_group", "instance_type": "ml.c5.9xlarge",
                       "hosts": [self.name[h] for h in DATA]},
                      {"instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge",
                       "hosts": [self.name[DNN]]}]
            with open(self.config(host), "w") as f:
                json.dump({"current_host": self.name[host],
                           "hosts": [self.name[h] for h in HOSTS],
                           "current_group_name": "data_group" if host in DATA else "dnn_group",
                           "instance_groups": groups, "network_interface_name": "eth0"}, f)

    def _make_namespaces(self):
        if (os.geteuid() != 0 or shutil.which("ip") is None
                or os.environ.get("HETERODL_CLUSTER_TEST_LOOPBACK")):
            return False
        try:
            self.teardown()
            run("ip", "link", "add", "hdbr0", "type", "bridge")
            run("ip", "link", "set", "hdbr0", "up")
            for i, host in enumerate(HOSTS):
                ns = f"hd-{host}"
                run("ip", "netns", "add", ns)
                run("ip", "link", "add", f"hdv{i}", "type", "veth", "peer", "name", "eth0",
                    "netns", ns)
                run("ip", "link", "set", f"hdv{i}", "master", "hdbr0", "up")
                run("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.77.0.{i + 1}/24",
                    "dev", "eth0")
                run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
                run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
                # `ip netns exec` bind-mounts /etc/netns/NS/hosts over /etc/hosts.
                os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
                with open(f"/etc/netns/{ns}/hosts", "w") as f:
                    f.write("127.0.0.1 localhost\n")
                    for j, other in enumerate(HOSTS):
                        f.write(f"10.77.0.{j + 1} {other}\n")
            return True
        except (subprocess.CalledProcessError, OSError) as error:
            print(f"netns_cluster_test: cannot make namespaces ({error})", file=sys.stderr)
            self.teardown()
            return False

    @staticmethod
    def teardown():
        for host in HOSTS:
            ns = f"hd-{host}"
            subprocess.run(["ip", "netns", "pids", ns], capture_output=True)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        subprocess.run(["ip", "link", "del", "hdbr0"], capture_output=True)

    def config(self, host):
        return os.path.join(self.tmp, f"{host}-resourceconfig.json")

    def start(self, host, dataset, *train_flags):
        """The same command on every host; only the environment differs."""
        env = {"PATH": os.environ["PATH"], "HOME": self.tmp,
               "HETERODL_RESOURCE_CONFIG": self.config(host),
               "SM_CHANNEL_TRAIN": dataset, "HETERODL_RANKS_PER_HOST": "2"}
        command = [HETERODL, "--idle-timeout=6s", "--startup-timeout=60s",
                   "--connect-timeout=60s", "--", *train_flags]
        if self.namespaces:
            command = ["ip", "netns", "exec", f"hd-{host}", *command]
        process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        process.log = []
        process.reader = threading.Thread(target=lambda: process.log.extend(process.stderr),
                                          daemon=True)
        process.reader.start()
        return process

    def kill_host(self, host, process):
        """SIGKILL every process of the host, as a lost instance."""
        if self.namespaces:
            pids = subprocess.run(["ip", "netns", "pids", f"hd-{host}"], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                os.kill(int(pid), signal.SIGKILL)
        else:
            # Without namespaces the host's processes are the launcher's tree.
            subprocess.run(["pkill", "-KILL", "-P", str(process.pid)], capture_output=True)
            for child in subprocess.run(["pgrep", "-f", self.config(host)], capture_output=True,
                                        text=True).stdout.split():
                os.kill(int(child), signal.SIGKILL)
            process.kill()


def wait_for(process, text, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(text in line for line in process.log):
            return True
        if process.poll() is not None:
            time.sleep(0.2)
            return any(text in line for line in process.log)
        time.sleep(0.05)
    return False


def finish(process, timeout=120):
    code = process.wait(timeout=timeout)
    process.reader.join(timeout=10)
    process.stderr.close()
    return code, "".join(process.log)


class NetnsClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="heterodl-cluster-")
        cls.dataset = os.path.join(cls.tmp, "sample")
        subprocess.run([HETERODL, "dataset", "sample", cls.dataset, "--images", "96", "--seed",
                        "4"], check=True, capture_output=True, timeout=120)
        os.chmod(cls.tmp, 0o755)
        cls.cluster = Cluster(cls.tmp)

    @classmethod
    def tearDownClass(cls):
        if cls.cluster.namespaces:
            Cluster.teardown()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def train_flags(self, name, steps, step_ms=60):
        out = os.path.join(self.tmp, name)
        # A modelled accelerator step keeps the run long enough to act on.
        return out, ["--steps", str(steps), "--batch-size", "4", "--device-step-ms",
                     str(step_ms), "--pipeline", "random_resized_crop(32)",
                     "--sample-log-dir", os.path.join(out, "samples"),
                     "--checkpoint-dir", os.path.join(out, "checkpoints")]

    def assert_exactly_once(self, out, epochs):
        seen = {}
        for rank in (0, 1):
            with open(os.path.join(out, "samples", f"rank{rank}.samples")) as f:
                for line in f:
                    epoch, _, index = map(int, line.split())
                    seen.setdefault(epoch, []).append(index)
        self.assertEqual(sorted(seen), list(range(epochs)))
        for epoch, indices in seen.items():
            self.assertEqual(sorted(indices), list(range(96)), f"epoch {epoch}")

    def start_all(self, flags, data_delay=0.0):
        dnn = self.cluster.start(DNN, self.dataset, *flags)
        if data_delay:
            time.sleep(data_delay)
        data = {host: self.cluster.start(host, self.dataset, *flags) for host in DATA}
        return dnn, data

    def test_a_normal_run_ends_everywhere_with_every_sample_once(self):
        out, flags = self.train_flags("normal", 2 * STEPS_PER_EPOCH)
        dnn, data = self.start_all(flags)
        code, log = finish(dnn)
        self.assertEqual(code, 0, log[-3000:])
        for host, process in data.items():
            code, data_log = finish(process, timeout=30)
            self.assertEqual(code, 0, f"{host}: {data_log[-2000:]}")
            self.assertIn("shutdown requested", data_log)
            # The pixels crossed the hosts on pixel channels, not in gRPC.
            served = re.search(r"over (\d+) streams \((\d+) with a pixel channel\)", data_log)
            self.assertIsNotNone(served, f"{host}: {data_log[-2000:]}")
            self.assertGreater(int(served.group(1)), 0)
            self.assertEqual(served.group(1), served.group(2))
        self.assertNotIn("pixels go through gRPC", log)
        self.assert_exactly_once(out, 2)

    def test_a_data_host_killed_mid_epoch(self):
        out, flags = self.train_flags("data_killed", 2 * STEPS_PER_EPOCH, step_ms=150)
        dnn, data = self.start_all(flags)
        self.assertTrue(wait_for(dnn, "step 4/"), "".join(dnn.log)[-3000:])
        self.cluster.kill_host(DATA[0], data[DATA[0]])
        code, log = finish(dnn)
        self.assertEqual(code, 0, log[-3000:])
        code, survivor = finish(data[DATA[1]], timeout=30)
        self.assertEqual(code, 0, survivor[-2000:])
        self.assert_exactly_once(out, 2)

    def test_the_dnn_host_killed_data_hosts_leave_on_their_idle_timeout(self):
        _, flags = self.train_flags("dnn_killed", 10 * STEPS_PER_EPOCH)
        dnn, data = self.start_all(flags)
        self.assertTrue(wait_for(dnn, "step 3/"), "".join(dnn.log)[-3000:])
        self.cluster.kill_host(DNN, dnn)
        for host, process in data.items():
            code, log = finish(process, timeout=60)
            self.assertEqual(code, 0, f"{host}: {log[-2000:]}")
            self.assertIn("idle timeout", log)

    def test_sigterm_on_the_dnn_host_checkpoints_and_everything_exits(self):
        out, flags = self.train_flags("sigterm", 10 * STEPS_PER_EPOCH)
        dnn, data = self.start_all(flags)
        self.assertTrue(wait_for(dnn, "step 3/"), "".join(dnn.log)[-3000:])
        dnn.send_signal(signal.SIGTERM)
        code, log = finish(dnn)
        self.assertEqual(code, 0, log[-3000:])
        self.assertIn("checkpoint at step", log)
        self.assertTrue(os.path.exists(os.path.join(out, "checkpoints", "checkpoint.pt")))
        for host, process in data.items():
            code, data_log = finish(process, timeout=30)
            self.assertEqual(code, 0, f"{host}: {data_log[-2000:]}")

    def test_data_hosts_that_start_20_seconds_late(self):
        out, flags = self.train_flags("late", STEPS_PER_EPOCH)
        dnn, data = self.start_all(flags, data_delay=20)
        code, log = finish(dnn, timeout=180)
        self.assertEqual(code, 0, log[-3000:])
        for host, process in data.items():
            code, data_log = finish(process, timeout=30)
            self.assertEqual(code, 0, f"{host}: {data_log[-2000:]}")
        self.assert_exactly_once(out, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
