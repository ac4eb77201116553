"""A data server's and a trainer's /metrics scraped by a real Prometheus
(Debian's `prometheus` package): after a run, what Prometheus stored is
exactly what the server's own statistics (`heterodl status --json`), the
loader and the trainer's metrics file say.

Run by ctest: python prometheus_scrape_test.py BUILD_DIR (PYTHONPATH=
BUILD_DIR/python). Skips, saying so, where the prometheus server is not
installed; scripts/setup.sh installs it.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import unittest
import urllib.parse
import urllib.request

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from processes import free_port, sample_dataset, scratch_dir  # noqa: E402

import heterodl  # noqa: E402

IMAGES = 24
PROMETHEUS = shutil.which("prometheus")


def read_text(path):
    with open(path) as f:
        return f.read()


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


@unittest.skipUnless(PROMETHEUS, "the prometheus server is not installed "
                                 "(apt-get install prometheus; scripts/setup.sh does)")
class PrometheusScrapeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = scratch_dir("heterodl-prometheus-")
        self.dataset = sample_dataset(HETERODL, IMAGES)
        # One file that is not an image: a failed sample, replaced.
        first_class = sorted(d for d in os.listdir(self.dataset) if not d.startswith("."))[0]
        with open(os.path.join(self.dataset, first_class, "broken.jpg"), "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 not a jpeg at all")
        self.processes = []

    def tearDown(self):
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def start(self, argv, **kwargs):
        process = subprocess.Popen(argv, **kwargs)
        self.processes.append(process)
        return process

    def serve(self):
        """`heterodl serve --metrics-port 0`: (address, metrics port)."""
        port_file = os.path.join(self.tmp, "port")
        log_path = os.path.join(self.tmp, "serve.log")
        log = open(log_path, "w")
        self.addCleanup(log.close)
        server = self.start([HETERODL, "serve", "--dataset", self.dataset, "--address",
                             "127.0.0.1:0", "--port-file", port_file, "--threads", "1",
                             "--metrics-port", "0"], stderr=log)
        deadline = time.time() + 60
        while not (os.path.exists(port_file) and os.path.getsize(port_file) > 0):
            self.assertIsNone(server.poll(), read_text(log_path))
            self.assertLess(time.time(), deadline, "serve did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            address = f"127.0.0.1:{int(f.read())}"
        marker = "Prometheus metrics at http://127.0.0.1:"
        line = next(line for line in read_text(log_path).splitlines() if marker in line)
        return address, int(line.split(marker, 1)[1].split("/", 1)[0])

    def prometheus(self, **jobs):
        """Prometheus scraping each job's 127.0.0.1:port every second (the
        job name with heterodl- before it and - for _); its HTTP API's base
        URL."""
        config = os.path.join(self.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n")
            for job, port in jobs.items():
                f.write(f"  - job_name: heterodl-{job.replace('_', '-')}\n"
                        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
        port = free_port()
        self.start([PROMETHEUS, f"--config.file={config}",
                    f"--storage.tsdb.path={os.path.join(self.tmp, 'tsdb')}",
                    f"--web.listen-address=127.0.0.1:{port}"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Ready before anything it should see starts.
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5):
                    break
            except OSError:
                self.assertLess(time.time(), deadline, "prometheus did not become ready")
                time.sleep(0.2)
        return f"http://127.0.0.1:{port}/api/v1"

    def query(self, api, expression, key="status"):
        """{the `key` label's value (or ""): value} of an instant query; {}
        before Prometheus answers or has scraped."""
        try:
            answer = get_json(f"{api}/query?" + urllib.parse.urlencode({"query": expression}))
        except OSError:
            return {}
        return {sample["metric"].get(key, ""): float(sample["value"][1])
                for sample in answer["data"]["result"]}

    def last_scrape(self, api, job):
        """{name[,status=..][,le=..]: value} of the last scrape Prometheus
        stored of `job` (every series of a scrape has its timestamp)."""
        query = urllib.parse.urlencode({"query": f'last_over_time({{job="{job}"}}[10m])'})
        deadline = time.time() + 30
        while True:
            series = get_json(f"{api}/query?{query}")["data"]["result"]
            if series or time.time() > deadline:
                break
            time.sleep(0.5)
        value = {}
        for sample in series:
            labels = sample["metric"]
            name = labels["__name__"] + "".join(
                f",{key}={labels[key]}" for key in ("status", "le") if key in labels)
            value[name] = float(sample["value"][1])
        return value

    def test_prometheus_stores_exactly_the_servers_counts(self):
        address, metrics_port = self.serve()
        api = self.prometheus(data=metrics_port)
        loader = heterodl.RemoteDataLoader(address, batch_size=5, seed=1, format="numpy")
        delivered = 0
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            delivered += sum(len(labels) for _, labels in loader)
        samples = IMAGES + 1
        self.assertEqual(delivered, 2 * samples)
        self.assertEqual(loader.stats()["samples_failed"], 2)  # broken.jpg, each epoch

        # The server built what the loader fetched ahead too: its counts,
        # once they stand still, are what Prometheus must hold.
        del loader
        stats, previous = None, None
        deadline = time.time() + 60
        while time.time() < deadline:
            status = subprocess.run([HETERODL, "status", address, "--json"],
                                    capture_output=True, text=True, timeout=60, check=True)
            stats = json.loads(status.stdout)["servers"][0]["stats"]
            if previous is not None and stats["samples_sent"] == previous["samples_sent"]:
                break
            previous = stats
            time.sleep(1)
        expected = {"ok": int(stats["samples_sent"]) - int(stats["samples_failed"]),
                    "replaced": int(stats["samples_replaced"]),
                    "failed": int(stats["samples_failed"]) - int(stats["samples_replaced"])}
        self.assertGreaterEqual(expected["ok"], 2 * samples - 2)
        self.assertGreaterEqual(expected["replaced"], 2)
        self.assertEqual(expected["failed"], 0)
        # Prometheus scrapes every second.
        deadline = time.time() + 60
        stored = {}
        while time.time() < deadline:
            stored = self.query(api, "heterodl_samples_total")
            if stored == expected:
                break
            time.sleep(0.5)
        self.assertEqual(stored, expected)
        batches = self.query(api, "heterodl_batches_total")
        self.assertEqual(batches, {"": float(stats["batches_sent"])})
        self.assertEqual(self.query(api, 'up{job="heterodl-data"}'), {"": 1.0})
        info = get_json(f"{api}/query?query=heterodl_build_info")["data"]["result"][0]["metric"]
        self.assertEqual(info["role"], "data")
        self.assertTrue(info["version"])

    @unittest.skipUnless(os.path.exists(os.path.join(BUILD_DIR, "heterodl-trainer")),
                         "built without LibTorch: no trainer")
    def test_prometheus_stores_exactly_the_trainers_steps(self):
        address, data_port = self.serve()
        train_port = free_port()
        api = self.prometheus(data=data_port, train=train_port)
        metrics_file = os.path.join(self.tmp, "steps.jsonl")
        log_path = os.path.join(self.tmp, "train.log")
        with open(log_path, "w") as log:
            # A modelled 150 ms accelerator: long enough for several scrapes.
            trainer = self.start(
                [HETERODL, "train", "--data-servers", address, "--ranks", "1", "--device",
                 "cpu", "--device-step-ms", "150", "--batch-size", "2", "--epochs", "4",
                 "--metrics-file", metrics_file, "--metrics-port", str(train_port),
                 "--master-port", str(free_port())],
                stderr=log)
            self.assertEqual(trainer.wait(timeout=240), 0, read_text(log_path))
        rows = [json.loads(line) for line in read_text(metrics_file).splitlines()]
        steps = [row for row in rows if "summary" not in row]
        self.assertEqual(len(steps), 4 * 13)  # 25 samples in batches of 2, 4 epochs

        # The last scrape Prometheus holds of the trainer, every series from
        # the same scrape: its counts are those of the metrics file's rows up
        # to the step it counted.
        value = self.last_scrape(api, "heterodl-train")
        counted = int(value["heterodl_steps_total"])
        self.assertGreater(counted, 0)
        upto = steps[:counted]
        self.assertEqual(value["heterodl_delivered_samples_total,status=ok"],
                         sum(row["batch_size"] - row.get("failed_samples", 0) for row in upto))
        self.assertEqual(value["heterodl_delivered_samples_total,status=failed"],
                         sum(row.get("failed_samples", 0) for row in upto))
        self.assertEqual(value["heterodl_step_seconds_count"], counted)
        self.assertEqual(value["heterodl_data_wait_seconds_count"], counted)
        self.assertAlmostEqual(value["heterodl_step_seconds_sum"],
                               sum(row["step_ms"] for row in upto) / 1000, places=6)
        self.assertAlmostEqual(value["heterodl_data_wait_seconds_sum"],
                               sum(row.get("data_wait_ms", 0) for row in upto) / 1000, places=6)
        self.assertEqual(value["heterodl_world_size"], 1)
        self.assertGreaterEqual(value["heterodl_data_stall_ratio"], 0)
        self.assertLessEqual(value["heterodl_data_stall_ratio"], 1)
        # The leader watched the data group: one server, and what it needs.
        self.assertEqual(value["heterodl_data_hosts"], 1)
        self.assertGreaterEqual(value["heterodl_data_hosts_needed"], 1)
        self.assertGreater(value["heterodl_data_capacity_per_host_samples_per_second"], 0)
        info = get_json(f"{api}/query?" + urllib.parse.urlencode(
            {"query": 'last_over_time(heterodl_build_info{job="heterodl-train"}[10m])'}))
        self.assertEqual(info["data"]["result"][0]["metric"]["role"], "train")


if __name__ == "__main__":
    unittest.main(verbosity=2)
