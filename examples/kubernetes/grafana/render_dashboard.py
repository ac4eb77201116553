"""Renders heterodl-dashboard.json from a real run into a PNG, without
Grafana (it is not in Debian): every panel's queries are asked of a real
Prometheus that scraped a real job, and drawn where the dashboard places
them, with gnuplot.

The run, on this machine: one data server (one thread) feeding `heterodl
train` with a modelled accelerator that wants more than it builds; Prometheus
scrapes both every second; and the loop keda.yaml describes scales the data
group: every 5 s it asks Prometheus keda.yaml's own query and starts or stops
(SIGTERM) data servers to match, as KEDA's HPA would with that trigger.

    .venv/bin/python examples/kubernetes/grafana/render_dashboard.py \\
        --build build --out docs/img/heterodl-dashboard.png

Needs the prometheus and gnuplot-nox Debian packages (scripts/setup.sh).
"""

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
from processes import free_port  # noqa: E402

DATA_JOB, TRAIN_JOB = "heterodl-data", "heterodl-train"


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


class Run:
    """The processes of the run, and Prometheus watching them."""

    def __init__(self, build, work, threads):
        self.heterodl = os.path.join(build, "heterodl")
        self.work = work
        self.threads = threads
        self.dataset = os.path.join(work, "data")
        subprocess.run([self.heterodl, "dataset", "sample", self.dataset, "--images", "600"],
                       check=True, capture_output=True, timeout=300)
        self.servers = []  # (process, service address, metrics port)
        self.servers_file = os.path.join(work, "servers")
        self.targets_file = os.path.join(work, "data-targets.json")
        self.trainer = None
        self.train_port = free_port()
        self.write_lists()
        self.prometheus_port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    {"job_name": DATA_JOB,
                     "file_sd_configs": [{"files": [self.targets_file], "refresh_interval": "1s"}]},
                    {"job_name": TRAIN_JOB,
                     "static_configs": [{"targets": [f"127.0.0.1:{self.train_port}"]}]}]}, f)
        self.prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.prometheus_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.api = f"http://127.0.0.1:{self.prometheus_port}/api/v1"
        deadline = time.time() + 60
        while True:
            try:
                get_json(f"{self.api}/status/buildinfo")
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)

    def write_lists(self):
        """The servers file the trainer re-reads, and Prometheus's targets."""
        for path, text in (
                (self.servers_file, "".join(f"{address}\n" for _, address, _ in self.servers)),
                (self.targets_file, json.dumps([{"targets": [
                    f"127.0.0.1:{port}" for _, _, port in self.servers]}]))):
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)

    def add_server(self):
        port_file = os.path.join(self.work, f"port{len(self.servers)}-{time.time()}")
        metrics_port = free_port()
        process = subprocess.Popen(
            [self.heterodl, "serve", "--dataset", self.dataset, "--address", "127.0.0.1:0",
             "--port-file", port_file, "--threads", str(self.threads),
             "--metrics-port", str(metrics_port), "--log-level", "warning"])
        deadline = time.time() + 60
        while not (os.path.exists(port_file) and os.path.getsize(port_file) > 0):
            if process.poll() is not None or time.time() > deadline:
                raise RuntimeError("a data server did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            address = f"127.0.0.1:{int(f.read())}"
        self.servers.append((process, address, metrics_port))
        self.write_lists()

    def remove_server(self):
        """The newest server goes: SIGTERM, it hands its batches back."""
        process, _, _ = self.servers.pop()
        self.write_lists()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)

    def start_training(self, step_ms, batch_size):
        self.trainer = subprocess.Popen(
            [self.heterodl, "train", "--data-servers-file", self.servers_file, "--ranks", "1",
             "--device", "cpu", "--device-step-ms", str(step_ms), "--batch-size",
             str(batch_size), "--steps", "100000000", "--metrics-port", str(self.train_port),
             "--log-level", "warning"])

    def query(self, expression):
        answer = get_json(f"{self.api}/query?" + urllib.parse.urlencode({"query": expression}))
        return [float(sample["value"][1]) for sample in answer["data"]["result"]]

    def query_range(self, expression, start, end, step):
        """[(legend labels, [(t, value)])] of a range query."""
        answer = get_json(f"{self.api}/query_range?" + urllib.parse.urlencode(
            {"query": expression, "start": start, "end": end, "step": step}))
        return [(sample["metric"], [(float(t), float(v)) for t, v in sample["values"]])
                for sample in answer["data"]["result"]]

    def stop(self):
        if self.trainer is not None and self.trainer.poll() is None:
            self.trainer.send_signal(signal.SIGINT)  # every rank stops at one step
            try:
                self.trainer.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.trainer.kill()
        for process, _, _ in self.servers:
            if process.poll() is None:
                process.terminate()
            process.wait(timeout=60)
        self.prometheus.terminate()
        self.prometheus.wait(timeout=60)


def autoscale(run, keda, most):
    """One decision of keda.yaml's trigger: replicas = ceil(value /
    threshold) within its bounds (and this machine's `most`); an absent
    metric keeps the current size (ignoreNullValues "false", the fallback)."""
    spec = keda["spec"]
    [trigger] = spec["triggers"]
    values = run.query(trigger["metadata"]["query"])
    if not values:
        return len(run.servers)
    wanted = math.ceil(values[0] / float(trigger["metadata"]["threshold"]))
    return max(spec["minReplicaCount"], min(spec["maxReplicaCount"], most, wanted))


def quoted(text):
    """`text` as a gnuplot string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def legend(template, labels):
    text = template
    for key, value in labels.items():
        text = text.replace("{{" + key + "}}", value)
    return text.replace("127.0.0.1:", "data server :")


def render(run, dashboard, start, end, out):
    """Each panel's queries over [start, end], drawn in the dashboard's grid
    (24 columns; heights in its units) by gnuplot."""
    step = 2
    work = run.work
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    total = rows + 1.5  # grid units, the title's included
    width, unit_height = 1600, 36
    plots = []
    for panel in dashboard["panels"]:
        series = []
        for target in panel["targets"]:
            expression = (target["expr"].replace("$train_job", TRAIN_JOB)
                          .replace("$data_job", DATA_JOB)
                          .replace("$__rate_interval", "10s"))
            for labels, values in run.query_range(expression, start, end, step):
                path = os.path.join(work, f"panel{panel['id']}-{len(series)}.dat")
                with open(path, "w") as f:
                    for t, value in values:
                        if math.isfinite(value):
                            f.write(f"{t - start:.0f} {value:.6g}\n")
                series.append((path, legend(target["legendFormat"], labels)))
        grid = panel["gridPos"]
        unit = panel["fieldConfig"]["defaults"]["unit"]
        scale = 100 if unit == "percentunit" else 1
        ylabel = {"s": "seconds", "percentunit": "%"}.get(unit, "")
        lines = [
            f"set origin {grid['x'] / 24:.4f},{(rows - grid['y'] - grid['h']) / total:.4f}",
            f"set size {grid['w'] / 24:.4f},{grid['h'] / total:.4f}",
            f"set title {quoted(panel['title'])} font ',13'",
            f"set ylabel {quoted(ylabel)}", "set yrange [0:*]", f"set xrange [0:{end - start}]",
        ]
        if series:
            lines.append("plot " + ", ".join(
                f"{quoted(path)} using 1:($2*{scale}) with lines lw 2 title {quoted(title)}"
                for path, title in series))
        else:
            lines.append("plot NaN title 'no data'")
        plots.append("\n".join(lines))
    script = "\n".join([
        f"set terminal pngcairo size {width},{total * unit_height:.0f} font 'DejaVu Sans,10'",
        "set termoption noenhanced",  # names keep their underscores
        f"set output {quoted(out)}",
        "set multiplot title " + quoted(dashboard["title"] + " (a real run, rendered from "
                                        "Prometheus by render_dashboard.py)") + " font ',15'",
        "set key top left opaque box", "set grid", "set xlabel 'seconds into the run'",
        *plots, "unset multiplot"])
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"),
                        help="the build folder with heterodl")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "img",
                                                      "heterodl-dashboard.png"),
                        help="the picture to write")
    parser.add_argument("--seconds", type=float, default=150, help="how long the run trains")
    parser.add_argument("--step-ms", type=float, default=12,
                        help="the modelled accelerator's step (sets the demand)")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per batch")
    parser.add_argument("--most-servers", type=int, default=3,
                        help="this machine's limit on the data group")
    args = parser.parse_args()
    for tool in ("prometheus", "gnuplot"):
        if shutil.which(tool) is None:
            sys.exit(f"render_dashboard: {tool} is not installed (scripts/setup.sh installs it)")
    with open(os.path.join(HERE, "heterodl-dashboard.json")) as f:
        dashboard = json.load(f)
    with open(os.path.join(HERE, "..", "keda.yaml")) as f:
        keda = yaml.safe_load(f)
    work = tempfile.mkdtemp(prefix="heterodl-dashboard-")
    run = Run(os.path.abspath(args.build), work, threads=1)
    decisions = []
    try:
        run.add_server()
        start = time.time()
        run.start_training(args.step_ms, args.batch_size)
        while time.time() - start < args.seconds:
            time.sleep(5)
            if run.trainer.poll() is not None:
                raise RuntimeError(f"train ended early ({run.trainer.returncode})")
            wanted = autoscale(run, keda, args.most_servers)
            if wanted != len(run.servers):
                decisions.append((round(time.time() - start), len(run.servers), wanted))
                print(f"{time.time() - start:5.0f} s: {len(run.servers)} -> {wanted} data "
                      "server(s)", flush=True)
            while len(run.servers) < wanted:
                run.add_server()
            while len(run.servers) > wanted:
                run.remove_server()
        end = time.time()
        time.sleep(3)  # the last scrapes
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        render(run, dashboard, start, end, os.path.abspath(args.out))
    finally:
        run.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}; scaling decisions (s, from, to): {decisions}")


if __name__ == "__main__":
    main()
