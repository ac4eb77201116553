"""Every example, exercised: a short real run, the config's shape, or the
environment it gives the launcher. Run by ctest with the venv's Python:

    python examples_test.py BUILD_DIR SOURCE_DIR
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from processes import free_port, install_built_wheel, scratch_dir, start_server  # noqa: E402

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
SOURCE_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else ".")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
EXAMPLES = os.path.join(SOURCE_DIR, "examples")


def cluster_view(environment, *flags):
    """`heterodl cluster --json` under exactly `environment` (plus PATH)."""
    env = {"PATH": os.environ["PATH"], **environment}
    result = subprocess.run([HETERODL, "cluster", "--json", *flags], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def expand(pattern):
    """A one-bracket hostlist pattern, as the launcher expands it."""
    match = re.fullmatch(r"(.*)\[(\d+)-(\d+)\](.*)", pattern)
    low, high = int(match.group(2)), int(match.group(3))
    return [f"{match.group(1)}{n}{match.group(4)}" for n in range(low, high + 1)]


class ExamplesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch_dir("heterodl-examples-")
        cls.dataset = os.path.join(cls.tmp, "sample")
        # Odd, so that two ranks get a padding repeat (DistributedSampler's).
        cls.samples = 63
        subprocess.run([HETERODL, "dataset", "sample", cls.dataset, "--images",
                        str(cls.samples), "--seed", "9"], check=True, timeout=120,
                       capture_output=True)
        cls.server, cls.address = start_server(HETERODL, cls.dataset,
                                               os.path.join(cls.tmp, "port"))

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(timeout=30)

    # ---- examples/pytorch ----

    def test_every_example_s_help_shows_each_option_s_default(self):
        import ast
        python = install_built_wheel(SOURCE_DIR, "examples")
        scripts = [os.path.join(EXAMPLES, "pytorch", name) for name in
                   ("train_resnet18.py", "train_segmentation.py", "train_detection.py",
                    "train_dino.py", "train_deit.py", os.path.join("custom_dataset",
                                                                   "read_captioned.py"))]
        scripts.append(os.path.join(EXAMPLES, "sagemaker", "launch.py"))
        for script in scripts:
            with self.subTest(script=os.path.relpath(script, EXAMPLES)):
                # Every option given a default in the source shows it.
                with open(script) as f:
                    tree = ast.parse(f.read())
                defaulted = [call.args[0].value for call in ast.walk(tree)
                             if isinstance(call, ast.Call) and getattr(call.func, "attr", "")
                             == "add_argument" and any(k.arg == "default" for k in call.keywords)]
                self.assertTrue(defaulted)
                result = subprocess.run([python, script, "--help"], capture_output=True,
                                        text=True, timeout=120)
                self.assertEqual(result.returncode, 0, result.stderr)
                for option in defaulted:
                    block = result.stdout.split(f"  {option}", 1)[1].split("\n  --", 1)[0]
                    self.assertIn("(default:", " ".join(block.split()), option)
        # The README's segmentation snippet trains a model the script offers.
        with open(os.path.join(SOURCE_DIR, "README.md")) as f:
            readme_model = re.search(r"segmentation\.(\w+)\(", f.read()).group(1)
        with open(scripts[1]) as f:
            self.assertIn(f'"{readme_model}"', f.read())

    def test_the_pytorch_script_trains_on_the_remote_loader(self):
        # As a user's script runs: from a virtualenv the built wheel is
        # installed into (the project's torch), without PYTHONPATH.
        python = install_built_wheel(SOURCE_DIR, "examples")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        script = os.path.join(EXAMPLES, "pytorch", "train_resnet18.py")
        result = subprocess.run([python, script, "--servers", self.address,
                                 "--steps", "3", "--batch-size", "8", "--image-size", "64",
                                 "--eval", "--keep-servers"],
                                env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("step 3 loss", result.stdout)
        # The evaluation counted every sample once.
        self.assertRegex(result.stdout, rf"eval: \d+/{self.samples} correct")
        # The same script data-parallel under torchrun (Gloo on CPU).
        torchrun = [python, "-m", "torch.distributed.run"]
        result = subprocess.run([*torchrun, "--nproc-per-node", "2", "--master-port", str(free_port()),
                                 script, "--servers", self.address, "--steps", "2",
                                 "--batch-size", "4", "--image-size", "64", "--keep-servers"],
                                env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("step 2 loss", result.stdout)
        # Two ranks, an odd dataset: padding repeats are not counted twice.
        result = subprocess.run([*torchrun, "--nproc-per-node", "2", "--master-port", str(free_port()),
                                 script, "--servers", self.address, "--steps", "1",
                                 "--batch-size", "7", "--image-size", "64", "--eval",
                                 "--keep-servers"],
                                env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertRegex(result.stdout, rf"eval: \d+/{self.samples} correct")
        # Without --keep-servers, the job's end ends its data server.
        server, address = start_server(HETERODL, self.dataset, os.path.join(self.tmp, "port-end"))
        try:
            result = subprocess.run([python, script, "--servers", address, "--steps", "1",
                                     "--batch-size", "4", "--image-size", "32"],
                                    env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertEqual(server.wait(timeout=30), 0)
        finally:
            server.kill()
            server.wait()

    def serve_python_dataset(self, spec, python, env, name):
        """`heterodl serve --python-dataset SPEC` of examples/pytorch/
        custom_dataset, its workers run by `python`; (process, address)."""
        port_file = os.path.join(self.tmp, f"port-{name}")
        process = subprocess.Popen(
            [HETERODL, "serve", "--python-dataset", spec, "--python-path",
             os.path.join(EXAMPLES, "pytorch", "custom_dataset"), "--python", python,
             "--python-workers", "1", "--address", "127.0.0.1:0", "--port-file", port_file,
             "--idle-timeout", "120s"], env=env, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 180  # the worker imports torch and torchvision first
        while not (os.path.exists(port_file) and os.path.getsize(port_file) > 0):
            if process.poll() is not None or time.time() > deadline:
                process.kill()
                self.fail(f"serve --python-dataset {spec} did not start: "
                          f"{process.communicate()[1][-3000:]}")
            time.sleep(0.05)
        with open(port_file) as f:
            return process, f"127.0.0.1:{int(f.read())}"

    def test_your_own_dataset_is_served_and_read_by_the_same_training_script(self):
        python = install_built_wheel(SOURCE_DIR, "examples")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(CUSTOM_DATASET_ROOT=self.dataset, CUSTOM_DATASET_SIZE="48")
        # The ImageFolder with v2 transforms, read by train_resnet18.py as a
        # served folder is; at the end the script shuts the server down.
        server, address = self.serve_python_dataset("folder_dataset:train_set", python, env,
                                                    "folder")
        try:
            result = subprocess.run(
                [python, os.path.join(EXAMPLES, "pytorch", "train_resnet18.py"), "--servers",
                 address, "--pipeline", "", "--steps", "3", "--batch-size", "8",
                 "--image-size", "48"], env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertIn("step 3 loss", result.stdout)
            self.assertEqual(server.wait(timeout=30), 0)
        finally:
            server.kill()
            server.communicate()
        # Dicts with a ragged tokens field (a list of tensors per batch), and
        # the same samples padded by the module's collate_fn on the server.
        for spec, tokens in (("captioned_dataset:train_set", "list"),
                             ("padded_captions:train_set", "Tensor")):
            server, address = self.serve_python_dataset(spec, python, env, spec.split(":")[0])
            try:
                result = subprocess.run(
                    [python,
                     os.path.join(EXAMPLES, "pytorch", "custom_dataset", "read_captioned.py"),
                     "--servers", address, "--steps", "2", "--batch-size", "8"],
                    env=env, capture_output=True, text=True, timeout=600)
                self.assertEqual(result.returncode, 0, result.stderr[-3000:])
                self.assertRegex(result.stdout,
                                 rf"step 2 images \(8, 3, 48, 48\) tokens \d+\.\.\d+ as {tokens}")
                self.assertEqual(server.wait(timeout=30), 0)
            finally:
                server.kill()
                server.communicate()

    def test_the_segmentation_script_trains_on_masks(self):
        python = install_built_wheel(SOURCE_DIR, "examples")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        script = os.path.join(EXAMPLES, "pytorch", "train_segmentation.py")
        dataset = os.path.join(self.tmp, "segmentation")
        subprocess.run([HETERODL, "dataset", "sample", dataset, "--task", "segmentation",
                        "--images", "12", "--seed", "4"], check=True, timeout=120,
                       capture_output=True)
        server, address = start_server(HETERODL, dataset, os.path.join(self.tmp, "port-seg"))
        try:
            common = ["--servers", address, "--num-classes", "4", "--crop-size", "64",
                      "--batch-size", "2", "--eval"]
            result = subprocess.run([python, script, *common, "--steps", "3", "--keep-servers"],
                                    env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertIn("step 3 loss", result.stdout)
            self.assertRegex(result.stdout, r"eval: pixel accuracy [0-9.]+%, mIoU [0-9.]+%")
            # FCN, data-parallel; at the end rank 0 shuts the server down.
            result = subprocess.run([python, "-m", "torch.distributed.run", "--nproc-per-node",
                                     "2", "--master-port", str(free_port()), script, *common,
                                     "--steps", "1", "--model", "fcn_resnet50"],
                                    env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertIn("step 1 loss", result.stdout)
            self.assertEqual(server.wait(timeout=30), 0)
        finally:
            server.kill()
            server.wait()

    def test_the_dino_script_pretrains_on_multi_crop_views(self):
        python = install_built_wheel(SOURCE_DIR, "examples")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        script = os.path.join(EXAMPLES, "pytorch", "train_dino.py")
        server, address = start_server(HETERODL, self.dataset, os.path.join(self.tmp, "port-dino"))
        try:
            common = ["--servers", address, "--batch-size", "4", "--global-size", "64",
                      "--local-size", "32", "--local-crops", "4", "--patch-size", "8",
                      "--out-dim", "256"]
            result = subprocess.run([python, script, *common, "--steps", "3", "--keep-servers"],
                                    env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            # The student sees 2 global and 4 local views of each of 4 images.
            self.assertIn("step 3 loss", result.stdout)
            self.assertIn("views (8, 3, 64, 64) + (16, 3, 32, 32)", result.stdout)
            # Data-parallel; at the end rank 0 shuts the server down.
            result = subprocess.run([python, "-m", "torch.distributed.run", "--nproc-per-node",
                                     "2", "--master-port", str(free_port()), script, *common,
                                     "--steps", "2"],
                                    env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertIn("step 2 loss", result.stdout)
            self.assertEqual(server.wait(timeout=30), 0)
        finally:
            server.kill()
            server.wait()

    def test_the_deit_script_mixes_batches_on_the_device(self):
        python = install_built_wheel(SOURCE_DIR, "examples")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        script = os.path.join(EXAMPLES, "pytorch", "train_deit.py")
        server, address = start_server(HETERODL, self.dataset, os.path.join(self.tmp, "port-deit"))
        try:
            result = subprocess.run([python, script, "--servers", address, "--batch-size", "8",
                                     "--image-size", "64", "--patch-size", "8", "--steps", "3"],
                                    env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertIn("step 3 loss", result.stdout)
            # MixUp / CutMix made soft targets: some batch's every sample
            # is a mix, its largest target share under 1.
            shares = [float(s) for s in re.findall(r"mixed targets: largest ([0-9.]+)",
                                                   result.stdout)]
            self.assertEqual(len(shares), 3, result.stdout)
            self.assertLess(min(shares), 0.99)
            self.assertEqual(server.wait(timeout=30), 0)
        finally:
            server.kill()
            server.wait()

    def test_the_detection_script_trains_on_boxes(self):
        python = install_built_wheel(SOURCE_DIR, "examples")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        script = os.path.join(EXAMPLES, "pytorch", "train_detection.py")
        dataset = os.path.join(self.tmp, "detection")
        subprocess.run([HETERODL, "dataset", "sample", dataset, "--task", "detection",
                        "--images", "12", "--seed", "4"], check=True, timeout=120,
                       capture_output=True)
        server, address = start_server(HETERODL, os.path.join(dataset, "annotations.json"),
                                       os.path.join(self.tmp, "port-det"))
        try:
            common = ["--servers", address, "--model", "fasterrcnn_mobilenet_v3_large_320_fpn",
                      "--size", "128", "--batch-size", "2", "--eval"]
            result = subprocess.run([python, script, *common, "--steps", "3", "--keep-servers"],
                                    env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertIn("step 3 loss", result.stdout)
            self.assertRegex(result.stdout, r"eval: recall [0-9.]+%, precision [0-9.]+%")
            # Data-parallel; at the end rank 0 shuts the server down.
            result = subprocess.run([python, "-m", "torch.distributed.run", "--nproc-per-node",
                                     "2", "--master-port", str(free_port()), script, *common,
                                     "--steps", "1"],
                                    env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertIn("step 1 loss", result.stdout)
            self.assertEqual(server.wait(timeout=30), 0)
        finally:
            server.kill()
            server.wait()

    # ---- examples/cpp ----

    def test_the_cpp_example_builds_against_the_installed_package(self):
        prefix = os.path.join(self.tmp, "prefix")
        subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", prefix], check=True,
                       capture_output=True, timeout=300)
        self.assertTrue(os.path.exists(
            os.path.join(prefix, "lib", "cmake", "heterodl", "heterodlConfig.cmake")))
        build = os.path.join(self.tmp, "cpp-build")
        configure = subprocess.run(["cmake", "-S", os.path.join(EXAMPLES, "cpp"), "-B", build,
                                    "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}"],
                                   capture_output=True, text=True, timeout=300)
        self.assertEqual(configure.returncode, 0, configure.stderr[-3000:])
        compiled = subprocess.run(["cmake", "--build", build], capture_output=True, text=True,
                                  timeout=600)
        self.assertEqual(compiled.returncode, 0, compiled.stdout[-3000:])
        run = subprocess.run([os.path.join(build, "heterodl-cpp-example"), self.address, "2"],
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr[-3000:])
        losses = [float(m) for m in re.findall(r"mean loss ([0-9.]+)", run.stdout)]
        self.assertEqual(len(losses), 2, run.stdout)
        self.assertIn(f"{self.samples} samples", run.stdout)

    # ---- examples/kubernetes ----

    def s3_service_account(self):
        """The name of s3-access.yaml's service account, with its IAM role."""
        with open(os.path.join(EXAMPLES, "kubernetes", "s3-access.yaml")) as f:
            account = yaml.safe_load(f)
        import kubernetes_validate
        kubernetes_validate.validate(account, "1.30", strict=True)
        self.assertEqual(account["kind"], "ServiceAccount")
        self.assertRegex(account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
                         r"^arn:aws:iam::\d{12}:role/")
        return account["metadata"]["name"]

    def test_the_jobset_names_every_pod_the_launcher_needs(self):
        with open(os.path.join(EXAMPLES, "kubernetes", "jobset.yaml")) as f:
            jobset = yaml.safe_load(f)
        self.assertEqual(jobset["kind"], "JobSet")
        name = jobset["metadata"]["name"]
        network = jobset["spec"]["network"]
        self.assertTrue(network["enableDNSHostnames"])
        subdomain = network["subdomain"]
        self.assertEqual(jobset["spec"]["successPolicy"]["targetReplicatedJobs"], ["dnn"])
        jobs = {job["name"]: job for job in jobset["spec"]["replicatedJobs"]}
        self.assertEqual(sorted(jobs), ["data", "dnn"])

        def pods(job_name):
            job = jobs[job_name]
            spec = job["template"]["spec"]
            return [f"{name}-{job_name}-{j}-{p}" for j in range(job["replicas"])
                    for p in range(spec["parallelism"])]

        def container(job_name):
            return jobs[job_name]["template"]["spec"]["template"]["spec"]["containers"][0]

        self.assertEqual(container("data")["command"], container("dnn")["command"])
        # The data pods read S3 with their service account's role: no volume.
        data_pod = jobs["data"]["template"]["spec"]["template"]["spec"]
        self.assertNotIn("volumes", data_pod)
        self.assertEqual(data_pod["serviceAccountName"], self.s3_service_account())
        data_env = {e["name"]: e["value"] for e in container("data")["env"]}
        self.assertTrue(data_env["HETERODL_DATASET"].startswith("s3://"))
        self.assertEqual(container("data")["command"][:2], ["heterodl", "launch"])
        for job_name in ("data", "dnn"):
            env = {e["name"]: e["value"] for e in container(job_name)["env"]}
            # The patterns name exactly the pods JobSet creates.
            self.assertEqual(expand(env["HETERODL_DATA_SERVERS"]),
                             [f"{pod}.{subdomain}" for pod in pods("data")])
            self.assertEqual(expand(env["HETERODL_DNN_HOSTS"]),
                             [f"{pod}.{subdomain}" for pod in pods("dnn")])
            # What the launcher makes of it on the last pod of the job.
            pod = pods(job_name)[-1]
            view = cluster_view({**env, "HETERODL_CURRENT_HOST": pod})
            self.assertEqual(view["role"], job_name)
            self.assertEqual(len(view["data_servers"]), len(pods("data")))
            self.assertTrue(view["data_servers"][0].endswith(f".{subdomain}:50051"))
            if job_name == "dnn":
                self.assertEqual(view["node_rank"], len(pods("dnn")) - 1)
                self.assertEqual(view["world_size"], 8 * len(pods("dnn")))
                self.assertEqual(view["leader"], f"{pods('dnn')[0]}.{subdomain}")

    def test_the_elastic_job_finds_the_data_pods_through_their_headless_service(self):
        path = os.path.join(EXAMPLES, "kubernetes", "elastic.yaml")
        with open(path) as f:
            documents = {doc["kind"]: doc for doc in yaml.safe_load_all(f)}
        self.assertEqual(sorted(documents), ["Deployment", "JobSet", "Service"])
        service, deployment, jobset = (documents[k] for k in ("Service", "Deployment", "JobSet"))
        # Headless, over exactly the data pods, with their ports.
        self.assertEqual(service["spec"]["clusterIP"], "None")
        pod = deployment["spec"]["template"]
        self.assertEqual(service["spec"]["selector"], pod["metadata"]["labels"])
        self.assertEqual(deployment["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
        data = pod["spec"]["containers"][0]
        service_ports = sorted(p["port"] for p in service["spec"]["ports"])
        self.assertEqual(sorted(p["containerPort"] for p in data["ports"]), service_ports)
        self.assertEqual(data["readinessProbe"]["tcpSocket"]["port"], 50051)
        # Long enough for the server's drain (3 s at most) after SIGTERM.
        self.assertGreaterEqual(pod["spec"]["terminationGracePeriodSeconds"], 10)
        # The JobSet's dnn job decides success, and the trainers resolve the
        # Service's name at the data port.
        self.assertEqual(jobset["spec"]["successPolicy"]["targetReplicatedJobs"], ["dnn"])
        self.assertGreater(jobset["spec"]["ttlSecondsAfterFinished"], 0)
        [dnn] = jobset["spec"]["replicatedJobs"]
        trainer = dnn["template"]["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in trainer["env"]}
        name, port = env["HETERODL_DATA_SERVERS_DNS"].split(":")
        self.assertEqual(name, service["metadata"]["name"])
        self.assertIn(int(port), service_ports)
        # What the launcher makes of each pod's environment.
        data_env = {e["name"]: e["value"] for e in data["env"]}
        self.assertEqual(cluster_view(data_env)["role"], "data")
        # A pod the autoscaler adds serves at once: the dataset is in S3,
        # read with the service account's role, nothing to copy first.
        self.assertTrue(data_env["HETERODL_DATASET"].startswith("s3://"))
        self.assertNotIn("volumes", pod["spec"])
        self.assertEqual(pod["spec"]["serviceAccountName"], self.s3_service_account())
        subdomain = jobset["spec"]["network"]["subdomain"]
        dnn_pods = expand(env["HETERODL_DNN_HOSTS"])
        self.assertEqual(dnn_pods, [f"heterodl-train-dnn-0-{i}.{subdomain}"
                                    for i in range(dnn["template"]["spec"]["parallelism"])])
        view = cluster_view({**env, "HETERODL_CURRENT_HOST": dnn_pods[-1]})
        self.assertEqual((view["role"], view["node_rank"]), ("dnn", len(dnn_pods) - 1))
        self.assertEqual(view["data_servers_dns"], "heterodl-data:50051")
        self.assertEqual(view.get("data_servers", []), [])
        # The script that ties the data group to the JobSet is valid bash
        # naming both objects.
        script = os.path.join(EXAMPLES, "kubernetes", "elastic.sh")
        subprocess.run(["bash", "-n", script], check=True)
        with open(script) as f:
            text = f.read()
        for needed in ("deployment heterodl-data", "service heterodl-data",
                       "jobset heterodl-train", "ownerReferences"):
            self.assertIn(needed, text)

    def served_metric_names(self):
        """The metric families a data server and a Python loader's data feed
        (the families train --metrics-port serves) really expose."""
        port = free_port()
        server, address = start_server(HETERODL, self.dataset, os.path.join(self.tmp, "mport"),
                                       "--metrics-port", str(port))
        # The loader's sizing families appear once its watch has polled the
        # server and it has seen steps that computed.
        script = (
            "import sys, time, urllib.request, heterodl\n"
            "loader = heterodl.RemoteDataLoader(sys.argv[1], batch_size=4, format='numpy', "
            "metrics_port=0)\n"
            "def page(port):\n"
            "    return urllib.request.urlopen(f'http://127.0.0.1:{port}/metrics').read().decode()\n"
            "deadline = time.time() + 60\n"
            "while 'heterodl_data_hosts_needed' not in page(loader.metrics_port) "
            "and time.time() < deadline:\n"
            "    for batch in loader:\n"
            "        time.sleep(0.01)\n"
            "print(page(sys.argv[2]), page(loader.metrics_port))\n")
        try:
            result = subprocess.run(
                [sys.executable, "-c", script, address, str(port)], capture_output=True,
                text=True, timeout=120,
                env={**os.environ, "PYTHONPATH": os.path.join(BUILD_DIR, "python")})
        finally:
            server.terminate()
            server.wait(timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        return set(re.findall(r"(?m)^# TYPE (\w+) ", result.stdout))

    def test_the_data_group_scales_on_the_leaders_hosts_needed(self):
        import kubernetes_validate
        kube = os.path.join(EXAMPLES, "kubernetes")

        def documents(name):
            with open(os.path.join(kube, name)) as f:
                return {doc["kind"]: doc for doc in yaml.safe_load_all(f)}

        elastic, monitoring = documents("elastic.yaml"), documents("monitoring.yaml")
        keda, hpa = documents("keda.yaml"), documents("hpa.yaml")
        # The Kubernetes API's own schemas, for every built-in kind (the
        # operators' kinds are checked field by field below).
        for doc in [*elastic.values(), *hpa.values()]:
            if doc["kind"] != "JobSet":
                kubernetes_validate.validate(doc, "1.30", strict=True)
        service, deployment, jobset = (elastic[k] for k in ("Service", "Deployment", "JobSet"))
        data = deployment["spec"]["template"]["spec"]["containers"][0]
        trainer_pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        trainer = trainer_pod["spec"]["containers"][0]

        def metrics_port(container):
            env = {e["name"]: e["value"] for e in container["env"]}
            [port] = [p["containerPort"] for p in container["ports"] if p.get("name") == "metrics"]
            self.assertEqual(int(env["HETERODL_METRICS_PORT"]), port)
            return port

        # Each group's pods serve where the monitors look.
        service_ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
        self.assertEqual(service_ports["metrics"], metrics_port(data))
        metrics_port(trainer)
        service_monitor, pod_monitor = monitoring["ServiceMonitor"], monitoring["PodMonitor"]
        self.assertEqual(service_monitor["apiVersion"], "monitoring.coreos.com/v1")
        self.assertLessEqual(service_monitor["spec"]["selector"]["matchLabels"].items(),
                             service["metadata"]["labels"].items())
        self.assertEqual([e["port"] for e in service_monitor["spec"]["endpoints"]], ["metrics"])
        data_job = service["metadata"]["labels"][service_monitor["spec"]["jobLabel"]]
        self.assertEqual(data_job, "heterodl-data")
        selector = pod_monitor["spec"]["selector"]["matchLabels"]
        pod_labels = trainer_pod["metadata"]["labels"]
        self.assertEqual(selector["jobset.sigs.k8s.io/jobset-name"], jobset["metadata"]["name"])
        self.assertEqual(selector["app.kubernetes.io/name"], pod_labels["app.kubernetes.io/name"])
        # Global rank 0, the one that serves, runs on the first pod.
        self.assertEqual(selector["batch.kubernetes.io/job-completion-index"], "0")
        self.assertEqual([e["port"] for e in pod_monitor["spec"]["podMetricsEndpoints"]],
                         ["metrics"])
        train_job = pod_labels[pod_monitor["spec"]["jobLabel"]]
        self.assertEqual(train_job, "heterodl-train")

        # Both autoscalers scale the data Deployment to the leader's value.
        scaled = keda["ScaledObject"]
        self.assertEqual(scaled["apiVersion"], "keda.sh/v1alpha1")
        target = scaled["spec"]["scaleTargetRef"]
        self.assertEqual((target["kind"], target["name"]), ("Deployment", deployment["metadata"]["name"]))
        [trigger] = scaled["spec"]["triggers"]
        self.assertEqual((trigger["type"], trigger["metricType"]), ("prometheus", "AverageValue"))
        self.assertEqual(trigger["metadata"]["query"],
                         f'max(heterodl_data_hosts_needed{{job="{train_job}"}})')
        self.assertEqual(trigger["metadata"]["threshold"], "1")  # replicas = the value
        self.assertLessEqual(scaled["spec"]["minReplicaCount"], scaled["spec"]["fallback"]["replicas"])
        autoscaler = hpa["HorizontalPodAutoscaler"]
        self.assertEqual(autoscaler["spec"]["scaleTargetRef"]["name"], deployment["metadata"]["name"])
        [metric] = autoscaler["spec"]["metrics"]
        self.assertEqual(metric["external"]["target"], {"type": "AverageValue", "averageValue": "1"})
        self.assertEqual(metric["external"]["metric"]["selector"]["matchLabels"], {"job": train_job})
        adapter = yaml.safe_load(hpa["ConfigMap"]["data"]["config.yaml"])
        [rule] = adapter["externalRules"]
        self.assertEqual(rule["name"]["as"], metric["external"]["metric"]["name"])
        self.assertTrue(rule["seriesQuery"].startswith("heterodl_data_hosts_needed{"))
        self.assertIn("<<.LabelMatchers>>", rule["metricsQuery"])

        # The dashboard's queries: valid PromQL over families heterodl serves.
        with open(os.path.join(kube, "grafana", "heterodl-dashboard.json")) as f:
            dashboard = json.load(f)
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        self.assertEqual(variables["data_job"]["current"]["value"], data_job)
        self.assertEqual(variables["train_job"]["current"]["value"], train_job)
        expressions = [trigger["metadata"]["query"]]
        for panel in dashboard["panels"]:
            self.assertEqual(panel["datasource"]["uid"], "${datasource}")
            self.assertTrue(panel["targets"], panel["title"])
            expressions += [t["expr"] for t in panel["targets"]]
        titles = " ".join(p["title"] for p in dashboard["panels"])
        for shown in ("Data wait", "stall", "per data host", "needed and running"):
            self.assertIn(shown, titles)
        served = self.served_metric_names() | {"up"}
        for expression in expressions:
            for name in re.findall(r"\b(heterodl_\w+|up)\{", expression):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                self.assertTrue(name in served or base in served, (name, expression))
        if shutil.which("promtool"):
            rules = os.path.join(self.tmp, "dashboard-rules.yml")
            with open(rules, "w") as f:
                yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
                    {"record": f"heterodl:panel_{i}", "expr": expression
                     .replace("$train_job", train_job).replace("$data_job", data_job)
                     .replace("$__rate_interval", "1m")}
                    for i, expression in enumerate(expressions)]}]}, f)
            check = subprocess.run(["promtool", "check", "rules", rules], capture_output=True,
                                   text=True, timeout=60)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)

        # The dashboard's picture is redrawn from a real run by its script.
        if shutil.which("prometheus") and shutil.which("gnuplot"):
            picture = os.path.join(self.tmp, "dashboard.png")
            render = subprocess.run(
                [sys.executable, os.path.join(kube, "grafana", "render_dashboard.py"), "--build",
                 BUILD_DIR, "--out", picture, "--seconds", "20"],
                capture_output=True, text=True, timeout=300)
            self.assertEqual(render.returncode, 0, render.stdout + render.stderr[-3000:])
            with open(picture, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            # One data server cannot keep up: the loop keda.yaml describes
            # scaled the data group up.
            self.assertRegex(render.stdout, r"1 -> [23] data server\(s\)")

        # elastic.sh applies either autoscaler and ties it to the JobSet.
        script = os.path.join(kube, "elastic.sh")
        with open(script) as f:
            text = f.read()
        for needed in ("keda.yaml", "hpa.yaml", "scaledobject heterodl-data",
                       "horizontalpodautoscaler heterodl-data"):
            self.assertIn(needed, text)

    # ---- examples/slurm ----

    def test_the_sbatch_script_is_a_heterogeneous_job_the_launcher_reads(self):
        path = os.path.join(EXAMPLES, "slurm", "heterodl.sbatch")
        subprocess.run(["bash", "-n", path], check=True)
        with open(path) as f:
            text = f.read()
        directives = [line[len("#SBATCH"):].strip() for line in text.splitlines()
                      if line.startswith("#SBATCH")]
        split = directives.index("hetjob")
        cpu, gpu = directives[:split], directives[split + 1:]
        self.assertFalse(any("gpu" in d and "partition" not in d for d in cpu), cpu)
        self.assertTrue(any(d.startswith("--gpus-per-node") for d in gpu), gpu)
        self.assertRegex(text, r'srun --het-group=0,1 "\$HETERODL" launch --')

        # Recorded environments of a step on one node of each component.
        common = {"SLURM_JOB_ID": "4242", "SLURM_HET_SIZE": "2",
                  "SLURM_JOB_NODELIST_HET_GROUP_0": "cpu-[07-08]",
                  "SLURM_JOB_NODELIST_HET_GROUP_1": "gpu-03", "SLURM_GPUS_ON_NODE": "8"}
        data = cluster_view({**common, "SLURMD_NODENAME": "cpu-08"})
        self.assertEqual(data["role"], "data")
        self.assertEqual(data["data_servers"], ["cpu-07:50051", "cpu-08:50051"])
        dnn = cluster_view({**common, "SLURMD_NODENAME": "gpu-03"})
        self.assertEqual((dnn["role"], dnn["node_rank"], dnn["world_size"]), ("dnn", 0, 8))
        swapped = cluster_view({**common, "SLURMD_NODENAME": "gpu-03",
                                "HETERODL_SLURM_DATA_COMPONENT": "1"})
        self.assertEqual(swapped["role"], "data")

    # ---- examples/sagemaker ----

    def check_metric_definitions(self, definitions):
        """SageMaker's metric regexes over a recorded job log (recorded/
        record.sh) find exactly what the same run's metrics file says, as
        its lines print it, once per step, and nothing in other lines."""
        recorded = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recorded")
        with open(os.path.join(recorded, "sagemaker_job.log")) as f:
            lines = f.read().splitlines()
        with open(os.path.join(recorded, "sagemaker_steps.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        steps = [row for row in rows if "summary" not in row]
        summary = rows[-1]["summary"]
        self.assertGreater(len(steps), 10)
        expected = {
            "heterodl:step_ms": [f"{row['step_ms']:.1f}" for row in steps],
            "heterodl:images_per_sec": [f"{row['images_per_sec']:.0f}" for row in steps],
            "heterodl:data_wait_ms": [f"{row.get('data_wait_ms', 0):.1f}" for row in steps],
            "heterodl:data_stall_percent": [
                f"{100 * row.get('data_wait_ms', 0) / row['step_ms']:.0f}" for row in steps],
            "heterodl:loss": [f"{row.get('loss', 0):.4f}" for row in steps],
        }
        found = {}
        for definition in definitions:
            self.assertRegex(definition["Name"], r"^heterodl:[a-z_]+$")
            pattern = re.compile(definition["Regex"])
            self.assertEqual(pattern.groups, 1, definition)
            found[definition["Name"]] = [m.group(1) for m in map(pattern.search, lines) if m]
        for name, values in expected.items():
            self.assertEqual(found.pop(name), values, name)
        self.assertEqual([float(v) for v in found.pop("heterodl:run_images_per_sec")],
                         [summary["images_per_sec"]])
        self.assertEqual([float(v) for v in found.pop("heterodl:run_data_stall_percent")],
                         [summary["data_stall_percent"]])
        self.assertEqual(found, {})  # every definition checked

    def test_the_sagemaker_request_has_both_groups_and_the_launcher(self):
        result = subprocess.run(
            [sys.executable, os.path.join(EXAMPLES, "sagemaker", "launch.py"), "--dry-run",
             "--image", "123456789012.dkr.ecr.us-east-1.amazonaws.com/heterodl:latest",
             "--role", "arn:aws:iam::123456789012:role/SageMaker", "--train", "s3://b/train",
             "--output", "s3://b/heterodl", "--data-instance", "ml.c5.9xlarge",
             "--data-count", "2", "--dnn-instance", "ml.p3.2xlarge"],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "AWS_EC2_METADATA_DISABLED": "true"})
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        request = json.loads(result.stdout)
        groups = {g["InstanceGroupName"]: g for g in request["ResourceConfig"]["InstanceGroups"]}
        self.assertEqual(groups["data_group"]["InstanceType"], "ml.c5.9xlarge")
        self.assertEqual(groups["data_group"]["InstanceCount"], 2)
        self.assertEqual(groups["dnn_group"]["InstanceType"], "ml.p3.2xlarge")
        spec = request["AlgorithmSpecification"]
        self.assertEqual(spec["ContainerEntrypoint"], ["heterodl", "launch"])
        # The data servers read the prefix themselves: no channel, no copy.
        self.assertEqual(spec["ContainerArguments"][:3], ["--dataset", "s3://b/train", "--"])
        self.assertNotIn("InputDataConfig", request)
        self.assertEqual(request["Environment"]["AWS_REGION"], "us-east-1")
        self.assertIn("CheckpointConfig", request)
        self.check_metric_definitions(spec["MetricDefinitions"])

        # FastFile mode instead: a channel for the data group alone.
        fastfile = subprocess.run(
            [sys.executable, os.path.join(EXAMPLES, "sagemaker", "launch.py"), "--dry-run",
             "--image", "123456789012.dkr.ecr.us-east-1.amazonaws.com/heterodl:latest",
             "--role", "arn:aws:iam::123456789012:role/SageMaker", "--train", "s3://b/train",
             "--output", "s3://b/heterodl", "--data-access", "fastfile"],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "AWS_EC2_METADATA_DISABLED": "true"})
        self.assertEqual(fastfile.returncode, 0, fastfile.stderr[-3000:])
        fastfile_request = json.loads(fastfile.stdout)
        channel = fastfile_request["InputDataConfig"][0]
        self.assertEqual(channel["ChannelName"], "train")
        self.assertEqual(channel["InputMode"], "FastFile")
        self.assertEqual(channel["DataSource"]["S3DataSource"]["InstanceGroupNames"],
                         ["data_group"])
        self.assertEqual(fastfile_request["AlgorithmSpecification"]["ContainerArguments"][0], "--")

        with open(os.path.join(EXAMPLES, "sagemaker", "Dockerfile")) as f:
            dockerfile = f.read()
        self.assertRegex(dockerfile, r"(?m)^FROM debian:bookworm")
        self.assertIn("scripts/setup.sh", dockerfile)
        self.assertRegex(dockerfile, r'ENTRYPOINT \["/usr/local/bin/heterodl", "launch"\]')

        # What the launcher makes of such a job on the dnn host.
        config = os.path.join(self.tmp, "resourceconfig.json")
        with open(config, "w") as f:
            json.dump({"current_host": "algo-3", "hosts": ["algo-1", "algo-2", "algo-3"],
                       "current_group_name": "dnn_group",
                       "instance_groups": [
                           {"instance_group_name": "data_group",
                            "instance_type": "ml.c5.9xlarge", "hosts": ["algo-2", "algo-1"]},
                           {"instance_group_name": "dnn_group",
                            "instance_type": "ml.p3.2xlarge", "hosts": ["algo-3"]}]}, f)
        view = cluster_view({"SM_NUM_GPUS": "1", "SM_MODEL_DIR": "/opt/ml/model",
                             "SM_CHANNEL_TRAIN": "/opt/ml/input/data/train"},
                            "--resource-config", config)
        self.assertEqual(view["role"], "dnn")
        self.assertEqual(view["data_servers"], ["algo-1:50051", "algo-2:50051"])
        self.assertEqual(view["checkpoint_dir"], "/opt/ml/checkpoints")
        self.assertEqual(view["model_dir"], "/opt/ml/model")


if __name__ == "__main__":
    unittest.main(verbosity=2)
