"""A data server's /metrics scraped by a real Prometheus (Debian's
`prometheus` package): after a run, what Prometheus stored is exactly what
the server's own statistics (`heterodl status --json`) and the loader say.

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
            self.assertIsNone(server.poll(), open(log_path).read())
            self.assertLess(time.time(), deadline, "serve did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            address = f"127.0.0.1:{int(f.read())}"
        marker = "Prometheus metrics at http://127.0.0.1:"
        line = next(line for line in open(log_path) if marker in line)
        return address, int(line.split(marker, 1)[1].split("/", 1)[0])

    def prometheus(self, metrics_port):
        """Prometheus scraping 127.0.0.1:`metrics_port` every second; its
        HTTP API's base URL."""
        config = os.path.join(self.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n"
                    "scrape_configs:\n  - job_name: heterodl-data\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n")
        port = free_port()
        self.start([PROMETHEUS, f"--config.file={config}",
                    f"--storage.tsdb.path={os.path.join(self.tmp, 'tsdb')}",
                    f"--web.listen-address=127.0.0.1:{port}"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return f"http://127.0.0.1:{port}/api/v1"

    def query(self, api, expression):
        """{labels' status (or ""): value} of an instant query; {} before
        Prometheus answers or has scraped."""
        try:
            answer = get_json(f"{api}/query?" + urllib.parse.urlencode({"query": expression}))
        except OSError:
            return {}
        return {sample["metric"].get("status", ""): float(sample["value"][1])
                for sample in answer["data"]["result"]}

    def test_prometheus_stores_exactly_the_servers_counts(self):
        address, metrics_port = self.serve()
        api = self.prometheus(metrics_port)
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
