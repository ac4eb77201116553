"""Datasets read straight from an S3 server the test starts: moto's (with
IAM, so signatures are checked), nothing from the internet.

- every dataset form (image folder, tar shards, file list, segmentation
  folder, COCO file) uploaded as the same files it is on disk: the same
  samples, fingerprint and batches, bit for bit;
- a listing of more than 1,000 keys (ListObjectsV2's pages);
- what cannot be read at start (no bucket, no key, a wrong secret) stops
  serve with exit 2 naming the URL and S3's code;
- credentials from a web identity token, exchanged with moto's STS;
- two ranks read an epoch exactly once through a proxy that answers 10% of
  requests with 503 SlowDown and cuts 2% short, while one of the two
  servers is SIGKILLed mid-epoch.

Run by ctest: python object_storage_test.py BUILD_DIR (the venv's Python,
with moto and boto3, and PYTHONPATH=BUILD_DIR/python).
"""

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")

import boto3  # noqa: E402
import numpy  # noqa: E402
from PIL import Image  # noqa: E402
from tfrecord.writer import TFRecordWriter  # noqa: E402

import heterodl  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from fault_proxy import FaultProxy  # noqa: E402
from processes import free_port, scratch_dir  # noqa: E402

REGION = "us-east-1"
ALLOW_ALL = json.dumps({"Version": "2012-10-17",
                        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


class Moto:
    """moto's server on a free loopback port. With `auth`, every request
    after the first three (which make the IAM user whose key the test
    uses) must be signed with a key IAM knows."""

    def __init__(self, tmp, auth):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environment = dict(os.environ)
        if auth:
            environment["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
        self.log = open(os.path.join(tmp, f"moto-{self.port}.log"), "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.log, stderr=subprocess.STDOUT, env=environment)
        deadline = time.time() + 60
        while True:
            try:
                boto3.client("s3", endpoint_url=self.url, region_name=REGION,
                             aws_access_key_id="x", aws_secret_access_key="x") \
                    .list_buckets() if not auth else self._probe()
                break
            except Exception:  # noqa: BLE001 (not up yet)
                if time.time() > deadline or self.process.poll() is not None:
                    raise RuntimeError("moto's server did not start")
                time.sleep(0.2)
        self.key, self.secret = "x", "x"
        if auth:
            iam = boto3.client("iam", endpoint_url=self.url, region_name=REGION,
                               aws_access_key_id="x", aws_secret_access_key="x")
            iam.create_user(UserName="trainer")
            iam.put_user_policy(UserName="trainer", PolicyName="all", PolicyDocument=ALLOW_ALL)
            key = iam.create_access_key(UserName="trainer")["AccessKey"]
            self.key, self.secret = key["AccessKeyId"], key["SecretAccessKey"]
        self.s3 = boto3.client("s3", endpoint_url=self.url, region_name=REGION,
                               aws_access_key_id=self.key, aws_secret_access_key=self.secret)

    def _probe(self):
        # Unsigned and spending none of the unauthenticated actions.
        import urllib.request
        urllib.request.urlopen(self.url + "/moto-api/", timeout=2).read()

    def upload(self, bucket, root, prefix):
        """Every file below `root` as `prefix` + its relative path."""
        paths = [os.path.join(folder, name) for folder, _, names in os.walk(root)
                 for name in names]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda path: self.s3.upload_file(
                path, bucket, prefix + os.path.relpath(path, root)), paths))

    def environment(self, **extra):
        """What a data server needs to read this server's buckets."""
        environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        environment.update(AWS_ACCESS_KEY_ID=self.key, AWS_SECRET_ACCESS_KEY=self.secret,
                           AWS_ENDPOINT_URL=self.url, AWS_REGION=REGION,
                           AWS_EC2_METADATA_DISABLED="true")
        environment.update(extra)
        return environment

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


class Server:
    """`heterodl serve` of `dataset` on a free loopback port."""

    def __init__(self, tmp, dataset, environment=None, *extra):
        port_file = os.path.join(tmp, f"port-{time.monotonic_ns()}")
        self.log_path = port_file + ".log"
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [HETERODL, "serve", "--dataset", dataset, "--address", "127.0.0.1:0",
                 "--port-file", port_file, "--threads", "1", *extra],
                stderr=log, env=environment)
        deadline = time.time() + 60
        while not os.path.exists(port_file):
            if self.process.poll() is not None or time.time() > deadline:
                self.process.kill()
                raise RuntimeError(f"serve {dataset} did not start: {self.log()}")
            time.sleep(0.05)
        with open(port_file) as f:
            self.address = f"127.0.0.1:{int(f.read())}"

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)


def epoch(address, **options):
    """One epoch's batches, every field as NumPy, with their indices."""
    loader = heterodl.RemoteDataLoader(servers=address, batch_size=4, seed=7, format="numpy",
                                       **options)
    loader.set_epoch(1)
    batches = [({name: numpy.array(value) for name, value in batch.fields.items()},
                numpy.array(batch.labels) if batch.labels is not None else None,
                numpy.array(batch.indices))
               for batch in loader]
    return loader.state_dict()["fingerprint"], len(loader.dataset), batches


def class_folders(root):
    return sorted(name for name in os.listdir(root) if os.path.isdir(os.path.join(root, name)))


def write_shards(images_root, shards_root, per_shard):
    """The image folder's samples as WebDataset shards (KEY.jpg + KEY.cls),
    in the folder's order."""
    classes = class_folders(images_root)
    samples = [(os.path.join(images_root, name, file), label)
               for label, name in enumerate(classes)
               for file in sorted(os.listdir(os.path.join(images_root, name)))]
    os.makedirs(shards_root)
    for shard in range(0, len(samples), per_shard):
        with tarfile.open(os.path.join(shards_root, f"train-{shard // per_shard:04d}.tar"),
                          "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (path, label) in enumerate(samples[shard:shard + per_shard], start=shard):
                extension = os.path.splitext(path)[1]
                tar.add(path, arcname=f"s{i:05d}{extension}")
                label_path = os.path.join(shards_root, "label")
                with open(label_path, "w") as f:
                    f.write(str(label))
                tar.add(label_path, arcname=f"s{i:05d}.cls")
                os.remove(label_path)


def write_tfrecords(images_root, records_root, per_file, label_offset=0):
    """The image folder's samples as tf.train.Example records, written by the
    `tfrecord` package (TensorFlow's format, its own CRC32C): TensorFlow's
    ImageNet keys, files named as TensorFlow names them."""
    samples = [(os.path.join(images_root, name, file), label)
               for label, name in enumerate(class_folders(images_root))
               for file in sorted(os.listdir(os.path.join(images_root, name)))]
    os.makedirs(records_root)
    count = (len(samples) + per_file - 1) // per_file
    for i in range(count):
        writer = TFRecordWriter(os.path.join(records_root, f"train-{i:05d}-of-{count:05d}"))
        for path, label in samples[i * per_file:(i + 1) * per_file]:
            with open(path, "rb") as f:
                writer.write({"image/encoded": (f.read(), "byte"),
                              "image/class/label": (label + label_offset, "int"),
                              "image/format": (b"JPEG", "byte")})
        writer.close()


class ObjectStorageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch_dir("heterodl-s3-")
        cls.moto = Moto(cls.tmp, auth=True)
        cls.moto.s3.create_bucket(Bucket="data")
        local = os.path.join(cls.tmp, "local")
        cls.local = local
        sample = [HETERODL, "dataset", "sample"]
        run = dict(check=True, timeout=120, capture_output=True)
        subprocess.run(sample + [f"{local}/folder", "--images", "24", "--formats", "mixed"], **run)
        write_shards(f"{local}/folder", f"{local}/shards", per_shard=10)
        write_tfrecords(f"{local}/folder", f"{local}/tfrecords", per_file=10, label_offset=1)
        subprocess.run(sample + [f"{local}/seg", "--images", "8", "--task", "segmentation"],
                       **run)
        subprocess.run(sample + [f"{local}/det", "--images", "8", "--task", "detection"], **run)
        # A file list whose paths are relative to it, in a folder of its own.
        os.makedirs(f"{local}/list")
        subprocess.run(["cp", "-r", f"{local}/folder", f"{local}/list/images"], check=True)
        with open(f"{local}/list/train.txt", "w") as f:
            for label, name in enumerate(class_folders(f"{local}/folder")):
                for file in sorted(os.listdir(f"{local}/folder/{name}"))[::2]:
                    f.write(f"images/{name}/{file}\t{label}\n")
        cls.moto.upload("data", local, "")
        cls.environment = cls.moto.environment()

    @classmethod
    def tearDownClass(cls):
        cls.moto.stop()

    def serve(self, dataset, *extra, environment=None):
        server = Server(self.tmp, dataset, environment or self.environment, *extra)
        self.addCleanup(server.stop)
        return server

    def assert_same_epochs(self, local_path, url, *extra, **options):
        on_disk = self.serve(local_path, *extra)
        in_bucket = self.serve(url, *extra)
        fingerprint, size, batches = epoch(on_disk.address, **options)
        bucket_fingerprint, bucket_size, bucket_batches = epoch(in_bucket.address, **options)
        self.assertEqual(bucket_fingerprint, fingerprint, url)
        self.assertEqual(bucket_size, size, url)
        self.assertEqual(len(bucket_batches), len(batches), url)
        for (fields, labels, indices), (bucket_fields, bucket_labels, bucket_indices) in zip(
                batches, bucket_batches):
            numpy.testing.assert_array_equal(bucket_indices, indices)
            if labels is not None:
                numpy.testing.assert_array_equal(bucket_labels, labels)
            self.assertEqual(sorted(bucket_fields), sorted(fields))
            for name in fields:
                numpy.testing.assert_array_equal(bucket_fields[name], fields[name], f"{url} {name}")
        return in_bucket

    def test_every_form_reads_the_same_from_the_bucket_as_from_disk(self):
        crop = dict(pipeline="random_resized_crop(48)|hflip(0.5)")
        for name, local, url in [
                ("image folder", "folder", "s3://data/folder"),
                ("image folder, prefix with a slash", "folder", "s3://data/folder/"),
                ("tar shards", "shards", "s3://data/shards/"),
                ("one tar shard", "shards/train-0001.tar", "s3://data/shards/train-0001.tar"),
                ("file list", "list/train.txt", "s3://data/list/train.txt")]:
            with self.subTest(name):
                server = self.assert_same_epochs(os.path.join(self.local, local), url, **crop)
                self.assertIn("AWS credentials from environment", server.log())
        for name, local, url in [
                ("TFRecord files", "tfrecords", "s3://data/tfrecords/"),
                ("one TFRecord file", "tfrecords/train-00001-of-00003",
                 "s3://data/tfrecords/train-00001-of-00003")]:
            with self.subTest(name):
                self.assert_same_epochs(os.path.join(self.local, local), url,
                                        "--tfrecord-label-offset", "1", **crop)

    def test_a_block_shuffled_plan_reads_whole_chunks_each_sample_once(self):
        crop = dict(pipeline="random_resized_crop(48)|hflip(0.5)", shuffle_block_shards=2)
        chunked = ("--read-chunk-mb", "1", "--chunk-memory-mb", "64")
        # The same batches from the bucket, read in chunks, as from disk.
        for url, local, extra in [("s3://data/shards/", "shards", chunked),
                                  ("s3://data/tfrecords/", "tfrecords",
                                   chunked + ("--tfrecord-label-offset", "1"))]:
            with self.subTest(url):
                server = self.assert_same_epochs(os.path.join(self.local, local), url, *extra,
                                                 **crop)
                server.stop()
                # Three shards of under 1 MiB, each read once, whole: one
                # GET each instead of one per sample.
                read = re.search(r"block plans: (\d+) chunks read", server.log())
                self.assertIsNotNone(read, server.log())
                self.assertLessEqual(int(read.group(1)), 3, server.log())
        # Two ranks of a block-shuffled plan: each sample of the epoch once,
        # each rank's batches from the same windows of shards.
        server = self.serve("s3://data/shards/", *chunked)
        seen = []
        for rank in range(2):
            _, size, batches = epoch(server.address, rank=rank, world_size=2, **crop)
            seen += [int(index) for _, _, indices in batches for index in indices]
        self.assertEqual(sorted(seen), list(range(size)))
        # A dataset of no shards has nothing to permute in blocks: refused,
        # saying why.
        folder = self.serve("s3://data/folder/")
        with self.assertRaisesRegex(ValueError, "block shuffle needs a dataset of shards"):
            epoch(folder.address, **crop)

    def test_an_index_saved_beside_the_files_is_read_instead_of_them(self):
        for url, extra in [("s3://data/shards/", []),
                           ("s3://data/tfrecords/train-00002-of-00003",
                            ["--tfrecord-label-offset", "1"])]:
            with self.subTest(url):
                unindexed = self.serve(url, *extra)
                _, size, batches = epoch(unindexed.address, pipeline="resize(24x24)")
                result = subprocess.run([HETERODL, "dataset", "index", url, *extra],
                                        capture_output=True, text=True, timeout=120,
                                        env=self.environment)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn(f"saved the index of {size} samples", result.stderr)
                indexed = self.serve(url, *extra)
                self.assertIn(f"{size} samples from its saved index", indexed.log())
                _, indexed_size, indexed_batches = epoch(indexed.address, pipeline="resize(24x24)")
                self.assertEqual(indexed_size, size)
                for (fields, labels, _), (indexed_fields, indexed_labels, _) in zip(
                        batches, indexed_batches):
                    numpy.testing.assert_array_equal(indexed_labels, labels)
                    numpy.testing.assert_array_equal(indexed_fields["images"], fields["images"])
        # Other keys than the index was made with: the files are indexed.
        other = self.serve("s3://data/tfrecords/train-00002-of-00003")
        self.assertIn("its saved index is not used", other.log())

    def test_tfrecords_hold_the_image_folder_s_samples_pixel_for_pixel(self):
        # The same images and labels in the same order: the same batches,
        # whatever the files (the fingerprint names the files, so differs).
        crop = dict(pipeline="random_resized_crop(48)|hflip(0.5)", shuffle=True)
        folder = self.serve(f"{self.local}/folder")
        records = self.serve("s3://data/tfrecords/", "--tfrecord-label-offset", "1")
        _, size, batches = epoch(folder.address, **crop)
        _, record_size, record_batches = epoch(records.address, **crop)
        self.assertEqual(record_size, size)
        for (fields, labels, indices), (record_fields, record_labels, record_indices) in zip(
                batches, record_batches):
            numpy.testing.assert_array_equal(record_indices, indices)
            numpy.testing.assert_array_equal(record_labels, labels)
            numpy.testing.assert_array_equal(record_fields["images"], fields["images"])

    def test_damaged_tfrecords_are_counted_bad_samples_naming_file_and_record(self):
        root = os.path.join(self.tmp, "damaged")
        write_tfrecords(f"{self.local}/folder", root, per_file=12)
        first, second = (os.path.join(root, name) for name in sorted(os.listdir(root)))
        with open(first, "r+b") as f:
            data = bytearray(f.read())
            data[12 + 100] ^= 0x5A  # inside record 0's Example: its checksum fails
            f.seek(0)
            f.write(data)
        with open(second, "r+b") as f:
            f.truncate(os.path.getsize(second) - 500)  # the last record cut short
        self.moto.upload("data", root, "damaged/")
        server = self.serve("s3://data/damaged/")
        log = server.log()
        self.assertIn("train-00000-of-00002:0: the record's checksum does not hold", log)
        self.assertIn("train-00001-of-00002:11: the record is cut short", log)
        loader = heterodl.RemoteDataLoader(servers=server.address, batch_size=4, seed=2,
                                           pipeline="resize(16x16)", max_failed_fraction=0.2)
        batches = list(loader)
        self.assertEqual(sum(len(batch) for batch in batches), 24)
        self.assertEqual(sum(batch.failed for batch in batches), 2)
        with self.subTest("segmentation folder"):
            self.assert_same_epochs(f"{self.local}/seg", "s3://data/seg/",
                                    pipeline="random_resized_crop(64)|hflip(0.5)")
        with self.subTest("COCO file"):
            self.assert_same_epochs(f"{self.local}/det/annotations.json",
                                    "s3://data/det/annotations.json",
                                    pipeline="resize(64x64)|hflip(0.5)")

    def test_a_listing_of_more_than_a_thousand_keys(self):
        root = os.path.join(self.tmp, "many")
        for label in range(2):
            os.makedirs(f"{root}/c{label}")
            for i in range(525):
                Image.new("RGB", (4, 4), (i % 256, label * 100, 0)).save(
                    f"{root}/c{label}/{i:04d}.png")
        self.moto.upload("data", root, "many/")
        server = self.serve("s3://data/many/")
        self.assertIn("1050 samples, 2 classes", server.log())
        loader = heterodl.RemoteDataLoader(servers=server.address, batch_size=350,
                                           pipeline="resize(4x4)", seed=1)
        indices = sorted(i for batch in loader for i in batch.indices.tolist())
        self.assertEqual(indices, list(range(1050)))

    def refused(self, dataset, environment=None):
        result = subprocess.run(
            [HETERODL, "serve", "--dataset", dataset, "--address", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=120, env=environment or self.environment)
        self.assertEqual(result.returncode, 2, result.stderr)
        return result.stderr

    def test_what_cannot_be_read_at_start_stops_serve_with_exit_2(self):
        self.assertIn("NoSuchBucket", self.refused("s3://no-such-bucket/train/"))
        self.assertIn("dataset 's3://data/shards/train-9999.tar' does not exist: no object has "
                      "that key or prefix", self.refused("s3://data/shards/train-9999.tar"))
        wrong = self.moto.environment(AWS_SECRET_ACCESS_KEY="not-the-secret")
        message = self.refused("s3://data/folder/", wrong)
        self.assertIn("SignatureDoesNotMatch", message)
        self.assertIn("403", message)
        unknown = self.moto.environment(AWS_ACCESS_KEY_ID="AKIAUNKNOWN00000000")
        self.assertIn("InvalidAccessKeyId", self.refused("s3://data/folder/", unknown))
        self.assertIn("is not a bucket name", self.refused("s3://Data_Upper/x"))

    def test_credentials_from_a_web_identity_token(self):
        # moto's STS wants a signature on AssumeRoleWithWebIdentity (AWS's
        # does not) when IAM is on: a second server, without IAM.
        sts = Moto(self.tmp, auth=False)
        self.addCleanup(sts.stop)
        sts.s3.create_bucket(Bucket="data")
        sts.upload("data", f"{self.local}/folder", "folder/")
        token = os.path.join(self.tmp, "token")
        with open(token, "w") as f:
            f.write("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2ln\n")
        environment = {k: v for k, v in self.moto.environment().items()
                       if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
        environment.update(AWS_ENDPOINT_URL=sts.url,
                           AWS_ROLE_ARN="arn:aws:iam::123456789012:role/data-reader",
                           AWS_WEB_IDENTITY_TOKEN_FILE=token, HOME=self.tmp)
        server = self.serve("s3://data/folder/", environment=environment)
        self.assertIn("AWS credentials from web identity (arn:aws:iam::123456789012:role/"
                      "data-reader", server.log())
        loader = heterodl.RemoteDataLoader(servers=server.address, batch_size=8,
                                           pipeline="resize(8x8)")
        self.assertEqual(sum(len(batch) for batch in loader), 24)

    def test_a_later_epoch_reads_the_local_cache_not_the_bucket(self):
        proxy = FaultProxy(self.moto.url).start()  # no faults: it counts
        self.addCleanup(proxy.stop)
        cache = os.path.join(self.tmp, "cache")
        environment = self.moto.environment(AWS_ENDPOINT_URL=proxy.url)
        server = self.serve("s3://data/folder/", "--cache-dir", cache, "--cache-mb", "64",
                            environment=environment)
        loader = heterodl.RemoteDataLoader(servers=server.address, batch_size=4, seed=3,
                                           pipeline="resize(16x16)")
        first = [numpy.array(batch.images) for batch in loader]
        after_first = proxy.counts["requests"]
        loader.set_epoch(0)  # the same epoch again: the same samples
        second = [numpy.array(batch.images) for batch in loader]
        self.assertEqual(proxy.counts["requests"], after_first)  # nothing fetched
        for a, b in zip(first, second):
            numpy.testing.assert_array_equal(a, b)
        server.stop()
        # Each sample fetched once (a miss); every later read from the cache.
        [(hits, misses, entries)] = re.findall(r"cache: (\d+) hits, (\d+) misses, (\d+) entries",
                                               server.log())
        self.assertEqual((int(misses), int(entries)), (24, 24))
        self.assertGreaterEqual(int(hits), 24)
        # A server started later on this host takes over what is cached.
        again = self.serve("s3://data/folder/", "--cache-dir", cache, environment=environment)
        self.assertIn("24 entries", again.log())
        before = proxy.counts["requests"]
        loader = heterodl.RemoteDataLoader(servers=again.address, batch_size=4, seed=3,
                                           pipeline="resize(16x16)")
        self.assertEqual(sum(len(batch) for batch in loader), 24)
        self.assertEqual(proxy.counts["requests"] - before, 0)

    def test_sigterm_ends_a_server_whose_reads_are_stalled(self):
        proxy = FaultProxy(self.moto.url, delay_seconds=120).start()
        self.addCleanup(proxy.stop)
        server = self.serve("s3://data/folder/",
                            environment=self.moto.environment(AWS_ENDPOINT_URL=proxy.url))
        proxy.delay = 1.0  # from now on, every request stalls for two minutes

        def read():
            try:
                loader = heterodl.RemoteDataLoader(servers=server.address, batch_size=4,
                                                   pipeline="resize(8x8)", stall_timeout=5)
                list(loader)
            except Exception as error:  # noqa: BLE001 (the server left, as it should)
                print(f"the loader: {error}", file=sys.stderr)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while proxy.counts["delayed"] == 0:
            self.assertLess(time.monotonic(), deadline, "no read reached the bucket")
            time.sleep(0.05)
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        self.assertEqual(server.process.wait(timeout=60), 0)
        print(f"stopped {time.monotonic() - started:.1f} s after SIGTERM with reads stalled",
              file=sys.stderr)
        self.assertIn("stopping: SIGTERM", server.log())
        reader.join(timeout=60)  # the loader gives up on the server that left
        self.assertFalse(reader.is_alive())

    def test_two_ranks_read_exactly_once_through_faults_and_a_server_killed(self):
        proxy = FaultProxy(self.moto.url, slow_down=0.10, reset=0.02, seed=3).start()
        self.addCleanup(proxy.stop)
        environment = self.moto.environment(AWS_ENDPOINT_URL=proxy.url)
        servers = [self.serve("s3://data/folder/", environment=environment) for _ in range(2)]
        addresses = [server.address for server in servers]
        seen, failed = [], 0
        loaders = [heterodl.RemoteDataLoader(servers=addresses, batch_size=2, rank=rank,
                                             world_size=2, seed=9, pipeline="resize(16x16)")
                   for rank in range(2)]
        iterators = [iter(loader) for loader in loaders]
        step = 0
        while iterators:
            for iterator in list(iterators):
                try:
                    batch = next(iterator)
                except StopIteration:
                    iterators.remove(iterator)
                    continue
                seen.extend(batch.indices.tolist())
                failed += batch.failed
            step += 1
            if step == 1:
                servers[0].process.send_signal(signal.SIGKILL)
        self.assertEqual(sorted(seen), list(range(24)))
        self.assertEqual(failed, 0)
        self.assertGreater(proxy.counts["slow_down"], 0, proxy.counts)
        self.assertGreater(proxy.counts["reset"] + proxy.counts["slow_down"], 2, proxy.counts)


if __name__ == "__main__":
    unittest.main()
