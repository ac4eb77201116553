"""The Python RemoteDataLoader against real `heterodl serve` processes.

Run by ctest: python remote_loader_test.py BUILD_DIR (with the venv's Python
and PYTHONPATH=BUILD_DIR/python).
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest
import warnings

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")

import torch  # noqa: E402
import heterodl  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from processes import sample_dataset, scratch_dir, start_server, stop_servers  # noqa: E402


class RemoteDataLoaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch_dir("heterodl-py-")
        cls.dataset = os.path.join(cls.tmp, "sample")
        subprocess.run([HETERODL, "dataset", "sample", cls.dataset, "--images", "90"],
                       check=True, timeout=120, capture_output=True)
        cls.servers, cls.addresses = [], []
        for i in range(2):
            server, address = start_server(HETERODL, cls.dataset,
                                           os.path.join(cls.tmp, f"port{i}"))
            cls.servers.append(server)
            cls.addresses.append(address)

    @classmethod
    def tearDownClass(cls):
        stop_servers(*cls.servers)

    def loader(self, **kwargs):
        options = dict(servers=self.addresses, batch_size=8, pipeline="random_resized_crop(32)",
                       seed=5)
        options.update(kwargs)
        return heterodl.RemoteDataLoader(**options)

    def test_exactly_once_over_an_epoch_for_three_ranks(self):
        seen = []
        for rank in range(3):
            loader = self.loader(rank=rank, world_size=3)
            self.assertEqual(len(loader), 4)  # 30 samples per rank, batches of 8
            loader.set_epoch(0)
            batches = list(loader)
            self.assertEqual([b.index for b in batches], [0, 1, 2, 3])
            for batch in batches:
                self.assertEqual(batch.images.dtype, torch.uint8)
                self.assertEqual(tuple(batch.images.shape[1:]), (32, 32, 3))
                self.assertEqual(batch.labels.dtype, torch.int64)
                self.assertEqual(batch.indices.dtype, torch.int64)
                self.assertEqual(len(batch), batch.images.shape[0])
                self.assertEqual(batch.failed, 0)
                seen.extend(batch.indices.tolist())
        self.assertEqual(sorted(seen), list(range(90)))

    def test_epochs_reshuffle_and_repeat_exactly(self):
        loader = self.loader()
        loader.set_epoch(0)
        first = [b.indices.tolist() for b in loader]
        again = [b.indices.tolist() for b in loader]  # the same epoch once more
        loader.set_epoch(1)
        second = [b.indices.tolist() for b in loader]
        self.assertEqual(first, again)
        self.assertNotEqual(first, second)
        self.assertEqual(sorted(sum(second, [])), list(range(90)))

    def test_tensors_own_their_memory(self):
        loader = self.loader()
        loader.set_epoch(0)
        kept = [batch.images for batch in loader]  # batches themselves are gone
        copies = [images.clone() for images in kept]
        del loader
        for images, copy in zip(kept, copies):
            self.assertTrue(torch.equal(images, copy))
        as_float = kept[0].permute(0, 3, 1, 2).float() / 255
        self.assertEqual(tuple(as_float.shape[1:]), (3, 32, 32))

    def test_resume_from_a_position(self):
        loader = self.loader()
        loader.set_epoch(2)
        full = [b.images.clone() for b in loader]
        loader.resume(2, 5)
        iterator = iter(loader)
        batch = next(iterator)
        self.assertEqual(batch.index, 5)
        self.assertTrue(torch.equal(batch.images, full[5]))
        self.assertEqual(loader.position(), (2, 6))

    def test_several_connections_per_server(self):
        loader = self.loader(connections_per_server=3)
        loader.set_epoch(0)
        indices = sorted(i for b in loader for i in b.indices.tolist())
        self.assertEqual(indices, list(range(90)))

    def test_pixels_through_grpc_are_the_same(self):
        batches = {}
        for pixel_channel in (True, False):
            loader = self.loader(pixel_channel=pixel_channel)
            loader.set_epoch(1)
            batches[pixel_channel] = list(loader)
            # The server runs on this host: with pixel channels, the pixels
            # are copied out of its shared memory.
            self.assertEqual(loader.stats()["same_host_streams"] > 0, pixel_channel)
        self.assertEqual(len(batches[True]), len(batches[False]))
        for a, b in zip(batches[True], batches[False]):
            self.assertTrue(torch.equal(a.images, b.images))
            self.assertTrue(torch.equal(a.indices, b.indices))

    def test_auth_token_is_passed_along(self):
        token_file = os.path.join(self.tmp, "token")
        with open(token_file, "w") as f:
            f.write("py-secret")
        server, address = start_server(HETERODL, self.dataset,
                                       os.path.join(self.tmp, "port-token"),
                                       "--auth-token-file", token_file)
        try:
            with self.assertRaisesRegex(PermissionError, "auth token"):
                heterodl.RemoteDataLoader(servers=[address], batch_size=8, connect_timeout=2)
            loader = heterodl.RemoteDataLoader(servers=[address], batch_size=8,
                                               auth_token="py-secret")
            loader.set_epoch(0)
            self.assertEqual(sum(len(b) for b in loader), 90)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)

    def wait_for_received(self, loader, count):
        deadline = time.time() + 10
        while loader.stats()["received"] <= count:
            self.assertLess(time.time(), deadline, loader.stats())
            time.sleep(0.01)

    def test_the_next_epoch_is_fetched_ahead_and_kept(self):
        loader = self.loader()
        loader.set_epoch(0)
        self.assertEqual(len(list(loader)), len(loader))
        self.wait_for_received(loader, len(loader))  # epoch 1 arrives meanwhile
        loader.set_epoch(1)
        ahead = [b.indices.tolist() for b in loader]
        fresh = self.loader()
        fresh.set_epoch(1)
        self.assertEqual(ahead, [b.indices.tolist() for b in fresh])
        stats = loader.stats()
        self.assertEqual(stats["dropped"], 0)
        self.assertEqual(stats["delivered"], 2 * len(loader))
        self.assertGreaterEqual(stats["window"], 2)
        self.assertTrue(all(depth >= 2 for depth in stats["depths"]))

    def test_resuming_elsewhere_drops_what_was_fetched_ahead(self):
        loader = self.loader()
        loader.set_epoch(0)
        list(loader)
        self.wait_for_received(loader, len(loader))
        loader.resume(7, 4)
        resumed = [(b.index, b.indices.tolist()) for b in loader]
        fresh = self.loader()
        fresh.set_epoch(7)
        expected = [(b.index, b.indices.tolist()) for b in fresh][4:]
        self.assertEqual(resumed, expected)
        self.assertGreater(loader.stats()["dropped"], 0)

    def test_a_server_lost_at_an_epoch_boundary_loses_nothing(self):
        servers = [start_server(HETERODL, self.dataset, os.path.join(self.tmp, f"boundary{i}"))
                   for i in range(2)]
        try:
            loader = self.loader(servers=[address for _, address in servers], batch_size=3)
            loader.set_epoch(0)
            for batch in loader:
                if batch.index == len(loader) - 2:
                    servers[0][0].kill()  # with the next epoch's batches asked of it
            loader.set_epoch(1)
            seen = [i for b in loader for i in b.indices.tolist()]
            self.assertEqual(sorted(seen), list(range(90)))
        finally:
            for process, _ in servers:
                process.kill()
                process.wait(timeout=30)

    def test_servers_listed_in_a_file_join_and_leave_while_it_runs(self):
        servers_file = os.path.join(self.tmp, "servers")

        def listed(addresses):
            with open(servers_file + ".new", "w") as f:
                f.write("\n".join(addresses) + "\n")
            os.replace(servers_file + ".new", servers_file)

        def await_servers(loader, addresses):
            deadline = time.time() + 10
            while loader.servers != sorted(addresses) and time.time() < deadline:
                time.sleep(0.02)
            self.assertEqual(loader.servers, sorted(addresses))

        listed(self.addresses[:1])
        loader = self.loader(servers=None, servers_file=servers_file, batch_size=3)
        self.assertEqual(loader.servers, self.addresses[:1])
        for epoch in range(3):
            loader.set_epoch(epoch)
            seen = []
            for batch in loader:
                seen += batch.indices.tolist()
                if epoch == 0 and batch.index == 3:
                    listed(self.addresses)  # the second one joins mid-epoch
                    await_servers(loader, self.addresses)
                if epoch == 1 and batch.index == 5:
                    listed(self.addresses[1:])  # the first one leaves mid-epoch
                    await_servers(loader, self.addresses[1:])
            self.assertEqual(sorted(seen), list(range(90)), f"epoch {epoch}")
        self.assertEqual(loader.stats()["stalled"], 0)
        with self.assertRaisesRegex(ValueError, "names no data server"):
            self.loader(servers="")
        with self.assertRaisesRegex(TypeError, "needs batch_size"):
            heterodl.RemoteDataLoader(servers_file=servers_file)

    def test_shuffle_false_reads_the_dataset_in_order(self):
        for world_size in (1, 3):
            loader = self.loader(shuffle=False, rank=world_size - 1, world_size=world_size)
            for epoch in (0, 2):
                loader.set_epoch(epoch)
                seen = [i for b in loader for i in b.indices.tolist()]
                self.assertEqual(seen, list(range(world_size - 1, 90, world_size)))
        shuffled = self.loader()
        shuffled.set_epoch(0)
        seen = [i for b in shuffled for i in b.indices.tolist()]
        self.assertNotEqual(seen, sorted(seen))

    def test_errors_are_python_exceptions(self):
        with self.assertRaisesRegex(ConnectionError, "127.0.0.1:1"):
            heterodl.RemoteDataLoader(servers=["127.0.0.1:1"], batch_size=4, connect_timeout=0.3)
        # Malformed addresses and arguments: at once, before any wait.
        for servers in ("nohost", "127.0.0.1:99999", ["127.0.0.1:0"], []):
            with self.assertRaises(ValueError, msg=servers):
                heterodl.RemoteDataLoader(servers=servers, batch_size=4, connect_timeout=300)
        with self.assertRaisesRegex(ValueError, "batch_size must be in"):
            self.loader(batch_size=0)
        with self.assertRaisesRegex(TypeError, "batch_size must be an int"):
            self.loader(batch_size="8")
        with self.assertRaisesRegex(ValueError, "rank must be in"):
            self.loader(rank=3, world_size=3)
        with self.assertRaisesRegex(ValueError, "connect_timeout must be > 0"):
            self.loader(connect_timeout=-1)
        # A pipeline the servers cannot parse: the constructor says so.
        with self.assertRaisesRegex(ValueError, "unknown operation 'hflp'"):
            self.loader(pipeline="random_resized_crop(32)|hflp(0.5)")

    def test_numpy_and_dlpack_formats_hold_the_same_pixels_without_copies(self):
        import numpy
        as_torch = next(iter(self.loader()))
        as_numpy = next(iter(self.loader(format="numpy")))
        raw = next(iter(self.loader(format="dlpack")))
        self.assertIsInstance(as_numpy.images, numpy.ndarray)
        self.assertEqual(as_numpy.images.dtype, numpy.uint8)
        self.assertEqual(as_numpy.labels.dtype, numpy.int64)
        self.assertTrue(numpy.array_equal(as_numpy.images, as_torch.images.numpy()))
        self.assertIsInstance(raw.images, heterodl.Array)
        self.assertEqual(raw.images.shape, tuple(as_torch.images.shape))
        self.assertEqual((raw.images.dtype, raw.labels.dtype), ("uint8", "int64"))
        self.assertEqual(len(raw.images), len(as_torch))
        # The buffer protocol: shape, item format and the same bytes.
        view = memoryview(raw.images)
        self.assertEqual((view.shape, view.format, view.readonly),
                         (tuple(as_torch.images.shape), "B", False))
        self.assertEqual(memoryview(raw.labels).format, "q")
        self.assertEqual(view.tobytes(), as_torch.images.numpy().tobytes())
        # DLPack: both importers view the Array's memory, not a copy of it.
        via_numpy = numpy.from_dlpack(raw.images)
        via_torch = torch.from_dlpack(raw.images)
        self.assertEqual(via_numpy.ctypes.data, via_torch.data_ptr())
        self.assertEqual(numpy.asarray(raw.images).ctypes.data, via_torch.data_ptr())
        self.assertEqual(raw.images.__dlpack_device__(), (1, 0))
        with self.assertRaises(BufferError):
            raw.images.__dlpack__(copy=True)
        with self.assertRaises(BufferError):
            raw.images.__dlpack__(dl_device=(2, 0))
        with self.assertRaisesRegex(ValueError, "format must be one of"):
            self.loader(format="jax")

    def test_code_written_for_a_dataloader_runs_unchanged(self):
        loader = self.loader(rank=1, world_size=3)
        self.assertEqual(len(loader.dataset), 90)
        self.assertEqual(loader.dataset.classes, loader.class_names)
        self.assertEqual(loader.batch_size, 8)
        self.assertIsNone(loader.batch_sampler)
        loader.sampler.set_epoch(4)  # what a DDP loop or Lightning calls
        seen = []
        for images, labels in loader:  # a DataLoader of an ImageFolder's batches
            self.assertEqual(images.shape[0], labels.shape[0])
            seen.append(labels.clone())
        direct = self.loader(rank=1, world_size=3)
        direct.set_epoch(4)
        self.assertTrue(all(torch.equal(a, b.labels) for a, b in zip(seen, direct)))

    def test_the_readme_loop_resumed_at_any_batch_sees_every_sample_once(self):
        # The loop of the README: set_epoch at the top of every epoch. A run
        # interrupted after `stop` batches of epoch 1 and a run resumed from
        # its state_dict() (or position()) see each sample of epoch 1 once.
        epochs = 3

        def readme_loop(loader, first_epoch, stop_after=None):
            seen = {}
            for epoch in range(first_epoch, epochs):
                loader.sampler.set_epoch(epoch)
                for batch in loader:
                    images, labels = batch  # as the README's loop unpacks it
                    seen.setdefault(epoch, []).append(labels.shape[0])
                    seen.setdefault(f"indices{epoch}", []).extend(batch.indices.tolist())
                    if stop_after is not None and (epoch, len(seen[epoch])) == stop_after:
                        return seen, loader.state_dict()
            return seen, None

        probe = self.loader()
        batches = len(probe)
        self.assertEqual(batches, 12)  # 90 samples, batches of 8
        for stop in range(1, batches + 1):
            with self.subTest(stop=stop):
                first, state = readme_loop(self.loader(), 0, (1, stop))
                self.assertEqual(state["epoch"], 1)
                self.assertEqual(state["next_batch"], stop)
                resumed_loader = self.loader()
                resumed_loader.load_state_dict(state)
                resumed, _ = readme_loop(resumed_loader, state["epoch"])
                epoch1 = first["indices1"] + resumed.get("indices1", [])
                self.assertEqual(sorted(epoch1), list(range(90)))
                self.assertEqual(len(resumed.get(1, [])), batches - stop)
                # The epochs after it run whole.
                self.assertEqual(sorted(resumed["indices2"]), list(range(90)))
        # resume() with position() is the same thing, spelled by hand.
        first, _ = readme_loop(self.loader(), 0, (1, 3))
        again = self.loader()
        again.resume(1, 3)
        resumed, _ = readme_loop(again, 1)
        self.assertEqual(sorted(first["indices1"] + resumed["indices1"]), list(range(90)))

    def test_an_end_of_epoch_position_continues_at_the_next_epoch(self):
        loader = self.loader()
        loader.set_epoch(0)
        for _ in loader:
            pass
        self.assertEqual(loader.position(), (0, len(loader)))
        state = loader.state_dict()
        resumed = self.loader()
        resumed.load_state_dict(state)
        resumed.sampler.set_epoch(0)  # the loop restarts at the saved epoch
        self.assertEqual(list(resumed), [])  # it is done
        resumed.sampler.set_epoch(1)
        direct = self.loader()
        direct.set_epoch(1)
        self.assertEqual([b.indices.tolist() for b in resumed],
                         [b.indices.tolist() for b in direct])
        # Or the loop starts at the next epoch: no warning, epoch 1 whole.
        resumed = self.loader()
        resumed.load_state_dict(state)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            resumed.set_epoch(1)
        self.assertEqual(sum(len(b) for b in resumed), 90)

    def test_dropping_a_mid_epoch_resume_position_warns(self):
        loader = self.loader()
        loader.resume(1, 3)
        with self.assertWarnsRegex(RuntimeWarning, r"drops the resume position \(epoch 1, "
                                                   r"batch 3\)"):
            loader.set_epoch(2)
        self.assertEqual(next(iter(loader)).index, 0)

    def test_state_of_another_plan_is_refused(self):
        # Each key's check: loader_state_test.py. Here, that a real loader's
        # state carries its plan, and load_state_dict checks it.
        state = self.loader().state_dict()
        with self.assertRaisesRegex(ValueError, "another epoch plan: seed 6"):
            self.loader().load_state_dict({**state, "seed": 6})
        # Plain values: JSON (and so torch.save) takes it as it is.
        import json
        self.assertEqual(json.loads(json.dumps(state)), state)

    def test_sampler_and_dataset_answer_as_pytorch_s_do(self):
        loader = self.loader(rank=1, world_size=2)
        sampler = loader.sampler
        self.assertEqual(len(sampler), 45)  # DistributedSampler: ceil(90 / 2)
        self.assertEqual((sampler.num_replicas, sampler.rank, sampler.num_samples,
                          sampler.total_size, sampler.shuffle, sampler.seed,
                          sampler.drop_last), (2, 1, 45, 90, True, 5, False))
        self.assertEqual(len(self.loader(world_size=4, rank=0, drop_last=True).sampler), 22)
        self.assertEqual(len(self.loader(world_size=4, rank=0).sampler), 23)
        self.assertEqual(sampler.epoch, 0)
        sampler.set_epoch(3)
        self.assertEqual((sampler.epoch, loader.epoch), (3, 3))
        self.assertEqual((loader.drop_last, loader.shuffle, loader.num_workers,
                          loader.persistent_workers, loader.collate_fn), (False, True, 0, False,
                                                                          None))
        dataset = loader.dataset
        self.assertIs(sampler.dataset, dataset)
        self.assertEqual(dataset.class_to_idx,
                         {name: i for i, name in enumerate(dataset.classes)})
        # dataset[i]: sample i through the pipeline, as a DataLoader's
        # dataset gives it; the same image the epoch plan puts in a batch.
        image, label = dataset[17]
        self.assertEqual(tuple(image.shape), (32, 32, 3))
        self.assertEqual(image.dtype, torch.uint8)
        ordered = self.loader(shuffle=False, batch_size=1)
        ordered.resume(0, 17)
        expected = next(iter(ordered))
        self.assertTrue(torch.equal(image, expected.images[0]))
        self.assertEqual(int(label), int(expected.labels[0]))
        self.assertTrue(torch.equal(dataset[-73][0], image))  # 90 - 73 = 17
        with self.assertRaises(IndexError):
            dataset[90]
        with self.assertRaises(TypeError):
            dataset["17"]

    def test_a_loader_given_a_pixel_port_names_the_service_port_at_once(self):
        import socket
        import threading
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            pixel_port = probe.getsockname()[1]
        server, address = start_server(HETERODL, self.dataset,
                                       os.path.join(self.tmp, "port-pixel"),
                                       "--pixel-port", str(pixel_port))
        try:
            started = time.monotonic()
            with self.assertRaisesRegex(ValueError, "pixel channel port, not its service "
                                        f"port; connect to {re.escape(address)} instead"):
                self.loader(servers=f"127.0.0.1:{pixel_port}", connect_timeout=30)
            self.assertLess(time.monotonic() - started, 15)  # not the 30 s timeout
            # heterodl status says the same, not gRPC's "Failed parsing HTTP/2".
            status = subprocess.run([HETERODL, "status", f"127.0.0.1:{pixel_port}"],
                                    capture_output=True, text=True, timeout=60)
            self.assertIn(f"pixel channel port, not its service port; connect to {address}",
                          status.stdout + status.stderr)
            self.assertNotIn("HTTP/2", status.stdout + status.stderr)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
        # Something that answers and is no data server at all.
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def answer():
            try:
                while True:
                    connection, _ = listener.accept()
                    connection.recv(64)
                    connection.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
                    connection.close()
            except OSError:
                return
        threading.Thread(target=answer, daemon=True).start()
        try:
            with self.assertRaisesRegex(ValueError, "not as a heterodl data server .*SSH-2.0"):
                self.loader(servers=f"127.0.0.1:{listener.getsockname()[1]}",
                            connect_timeout=30)
        finally:
            listener.close()

    def test_a_damaged_jpeg_is_kept_and_counted_unless_strict(self):
        # A JPEG whose scan ends early (at an end-of-image marker): PIL and
        # torchvision decode it, and so does heterodl, counting it; with
        # --strict-decode it is replaced and counted as failed.
        import glob
        files = sorted(glob.glob(os.path.join(self.dataset, "*", "*.jpg")))[:8]
        with open(files[3], "rb") as f:
            data = f.read()
        scan = data.index(b"\xff\xda")
        scan += 2 + int.from_bytes(data[scan + 2:scan + 4], "big")
        damaged = os.path.join(self.tmp, "damaged.jpg")
        with open(damaged, "wb") as f:
            f.write(data[:scan + (len(data) - scan) // 2] + b"\xff\xd9")
        listing = os.path.join(self.tmp, "damaged-list.txt")
        with open(listing, "w") as f:
            for i, path in enumerate(files[:3] + [damaged] + files[4:]):
                f.write(f"{path}\t{i % 2}\n")
        for strict in (False, True):
            with self.subTest(strict=strict):
                server, address = start_server(
                    HETERODL, listing, os.path.join(self.tmp, f"port-damaged-{strict}"),
                    *(["--strict-decode"] if strict else []))
                try:
                    # Every row decoded: a crop above the damage would not meet it.
                    # One bad sample in 8 is over the default budget.
                    loader = self.loader(servers=address, shuffle=False,
                                         pipeline="resize(32)|center_crop(32)",
                                         max_failed_fraction=1.0)
                    batches = list(loader)
                    stats = loader.stats()
                    self.assertEqual(sum(b.decoded_with_warnings for b in batches),
                                     0 if strict else 1)
                    self.assertEqual(sum(b.failed for b in batches), 1 if strict else 0)
                    self.assertEqual(stats["samples_decoded_with_warnings"], 0 if strict else 1)
                    self.assertEqual(stats["samples_failed"], 1 if strict else 0)
                    if not strict:  # kept: slot 3 holds the damaged image, label 1
                        self.assertEqual(batches[0].labels[3].item(), 1)
                finally:
                    server.send_signal(signal.SIGTERM)
                    server.wait(timeout=30)

    def test_paths_that_are_not_regular_files_are_bad_samples_not_a_hang(self):
        # A FIFO with no writer, a device that never ends, and a file over
        # --max-file-mb: each is refused before it is opened in a way that
        # blocks or read into memory; the epoch completes with them replaced
        # and counted, and the server still stops at once on SIGTERM.
        import glob
        files = sorted(glob.glob(os.path.join(self.dataset, "*", "*.jpg")))[:6]
        fifo = os.path.join(self.tmp, "fifo.jpg")
        os.mkfifo(fifo)
        big = os.path.join(self.tmp, "big.jpg")
        with open(big, "wb") as f:
            f.write(b"\xff" * (2 << 20))
        listing = os.path.join(self.tmp, "hostile-list.txt")
        with open(listing, "w") as f:
            for i, path in enumerate(files[:2] + [fifo, "/dev/zero", big] + files[2:]):
                f.write(f"{path}\t{i % 2}\n")
        server, address = start_server(HETERODL, listing,
                                       os.path.join(self.tmp, "port-hostile"),
                                       "--max-file-mb", "1")
        try:
            loader = self.loader(servers=address, shuffle=False, batch_size=3,
                                 pipeline="resize(32)|center_crop(32)", stall_timeout=60.0,
                                 max_failed_fraction=1.0)
            batches = list(loader)
            self.assertEqual(sum(len(b.labels) for b in batches), 9)
            self.assertEqual(sum(b.failed for b in batches), 3)
            self.assertEqual(loader.stats()["samples_failed"], 3)
        finally:
            server.send_signal(signal.SIGTERM)
            self.assertEqual(server.wait(timeout=30), 0)

    def test_failed_samples_are_loud_bounded_and_told_per_slot(self):
        # A file list whose every file is missing: the first batch stops the
        # run, naming the dataset and the server's reason, instead of
        # training on black images with real labels.
        listing = os.path.join(self.tmp, "allmissing.txt")
        with open(listing, "w") as f:
            for i in range(40):
                f.write(f"{self.tmp}/missing/img{i}.jpg\t{i % 2}\n")
        server, address = start_server(HETERODL, listing, os.path.join(self.tmp, "port-missing"))
        try:
            loader = self.loader(servers=address, pipeline="resize(16)|center_crop(16)",
                                 batch_size=4)
            with self.assertRaises(RuntimeError) as raised:
                next(iter(loader))
            message = str(raised.exception)
            self.assertIn(listing, message)
            self.assertIn("No such file or directory", message)
            self.assertIn("max_failed_fraction", message)
            # Allowed them all: every slot is unfilled, says so, and carries
            # the label a loss ignores, not its planned sample's.
            loader = self.loader(servers=address, pipeline="resize(16)|center_crop(16)",
                                 batch_size=4, max_failed_fraction=1.0, shuffle=False)
            batch = next(iter(loader))
            self.assertEqual(batch.failed, 4)
            self.assertEqual(batch.status.tolist(), [2, 2, 2, 2])
            self.assertTrue(bool(batch.unfilled.all()))
            self.assertEqual(batch.labels.tolist(), [-100] * 4)
            self.assertEqual(batch.sources.tolist(), [-1] * 4)
            self.assertEqual(batch.indices.tolist(), [0, 1, 2, 3])
            self.assertEqual(len(batch.failures), 4)
            self.assertIn("img0.jpg", batch.failures[0])
            self.assertEqual(int(batch.images.max()), 0)
            self.assertIs(loader.last_batch, batch)
            # The loss PyTorch users write skips those slots.
            logits = torch.zeros(4, 2, requires_grad=True)
            loss = torch.nn.functional.cross_entropy(logits, batch.labels, reduction="sum")
            self.assertEqual(loss.item(), 0.0)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)

        # One missing file in 12: replaced by another sample, which the slot
        # names and whose label it carries.
        import glob
        files = sorted(glob.glob(os.path.join(self.dataset, "*", "*.jpg")))[:11]
        classes = sorted(os.listdir(self.dataset))
        label_of = {path: classes.index(os.path.basename(os.path.dirname(path)))
                    for path in files}
        listing = os.path.join(self.tmp, "onemissing.txt")
        paths = files[:5] + [os.path.join(self.tmp, "gone.jpg")] + files[5:]
        with open(listing, "w") as f:
            for path in paths:
                f.write(f"{path}\t{label_of.get(path, 0)}\n")
        server, address = start_server(HETERODL, listing, os.path.join(self.tmp, "port-one"))
        try:
            loader = self.loader(servers=address, pipeline="resize(16)|center_crop(16)",
                                 batch_size=12, shuffle=False, max_failed_fraction=0.1)
            batch = next(iter(loader))
            self.assertEqual(batch.failed, 1)
            self.assertEqual(batch.status.tolist(), [0] * 5 + [1] + [0] * 6)
            self.assertEqual(batch.replaced.tolist(), [False] * 5 + [True] + [False] * 6)
            source = batch.sources[5].item()
            self.assertNotEqual(source, 5)
            self.assertEqual(batch.labels[5].item(), label_of[paths[source]])
            self.assertEqual(batch.sources.tolist()[:5], [0, 1, 2, 3, 4])
            self.assertEqual(batch.indices[5].item(), 5)  # the plan's, as before
            self.assertEqual(len(batch.failures), 1)
            self.assertIn("gone.jpg", batch.failures[0])
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)

    def test_an_epoch_of_no_batches_yields_nothing_as_a_dataloader_does(self):
        loader = self.loader(batch_size=1000, drop_last=True)
        self.assertEqual(len(loader), 0)
        for epoch in range(2):
            loader.set_epoch(epoch)
            self.assertEqual(list(loader), [])
        self.assertEqual(loader.stats()["requested"], 0)
        self.assertEqual(len(self.loader(batch_size=1000)), 1)  # without drop_last: one

    def test_the_last_epoch_fetches_nothing_past_its_end(self):
        # Without `epochs`, the next epoch's first batches are fetched as
        # this one ends, and they are counted.
        loader = self.loader(max_buffered_mb=64.0)
        loader.set_epoch(0)
        self.assertEqual(len(list(loader)), 12)
        deadline = time.time() + 10
        while time.time() < deadline:
            stats = loader.stats()
            if stats["held_ahead"] + stats["in_flight"] > 0:
                break
            time.sleep(0.05)
        self.assertGreater(stats["held_ahead"] + stats["in_flight"], 0)
        # With it, the run's last epoch ends with nothing built for nothing.
        loader = self.loader(max_buffered_mb=64.0, epochs=2)
        for epoch in range(2):
            loader.set_epoch(epoch)
            self.assertEqual(len(list(loader)), 12)
        time.sleep(0.3)
        stats = loader.stats()
        self.assertEqual((stats["held_ahead"], stats["in_flight"]), (0, 0))
        self.assertEqual(stats["requested"], 24)
        self.assertEqual(stats["dropped"], 0)

    def test_a_costly_or_greedy_client_does_not_take_the_server_down(self):
        # A real server, a hostile client and a normal one on loopback: the
        # pipeline of the issue is refused naming its costliest operation;
        # a costly one within the limit, abandoned after its first batch,
        # leaves the server's threads at once; the normal epoch completes and
        # the server's memory stays bounded throughout.
        import gc
        import json
        server, address = start_server(HETERODL, self.dataset,
                                       os.path.join(self.tmp, "port-costly"),
                                       "--threads", "2", "--max-memory-mb", "64")
        try:
            attack = ("resize(8192)|gaussian_blur(255,sigma=1000)|gaussian_blur(255,sigma=1000)|"
                      "gaussian_blur(255,sigma=1000)|gaussian_blur(255,sigma=1000)|center_crop(32)")
            with self.assertRaisesRegex(ValueError,
                                        r"too costly.*operation 2, gaussian_blur\(255"):
                self.loader(servers=address, pipeline=attack)
            # About a billion pixel operations a sample: half the limit.
            costly = self.loader(servers=address, batch_size=16,
                                 pipeline="resize(2048)|gaussian_blur(101)|center_crop(64)")
            next(iter(costly))
            del costly
            gc.collect()
            start = time.monotonic()
            normal = self.loader(servers=address, stall_timeout=120.0)
            self.assertEqual(sum(len(b.labels) for b in normal), 90)
            print(f"normal epoch after the costly client left: {time.monotonic() - start:.1f} s",
                  file=sys.stderr)
            status = json.loads(subprocess.run(
                [HETERODL, "status", address, "--json"], check=True,
                capture_output=True, text=True, timeout=60).stdout)
            stats = status["servers"][0]["stats"]
            self.assertEqual(int(stats["pipelines_refused_costly"]), 1)
            self.assertEqual(int(stats["memory_budget_bytes"]), 64 << 20)
            self.assertLessEqual(int(stats["memory_peak_reserved_bytes"]), 64 << 20)
            with open(f"/proc/{server.pid}/status") as f:
                peak_rss = int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) << 10
            print(f"server peak RSS {peak_rss >> 20} MiB", file=sys.stderr)
            self.assertLess(peak_rss, 512 << 20)
        finally:
            server.send_signal(signal.SIGTERM)
            self.assertEqual(server.wait(timeout=30), 0)

    def test_rank_and_world_size_default_to_the_job_s(self):
        saved = {k: os.environ.pop(k, None) for k in ("RANK", "WORLD_SIZE")}
        try:
            self.assertEqual((self.loader().rank, self.loader().world_size), (0, 1))
            os.environ.update(RANK="2", WORLD_SIZE="3")  # what torchrun sets
            loader = self.loader()
            self.assertEqual((loader.rank, loader.world_size), (2, 3))
            self.assertEqual(len(loader), 4)
            os.environ["RANK"] = "two"
            with self.assertRaisesRegex(ValueError, "RANK='two'"):
                self.loader()
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None)
                if value is not None:
                    os.environ[key] = value

    def test_status_sizes_the_data_group_from_measured_capacity(self):
        import json
        import math
        loader = self.loader()
        self.assertEqual(sum(len(b) for b in loader), 90)  # both servers build something

        def status(*flags):
            return subprocess.run([HETERODL, "status", *self.addresses, *flags],
                                  capture_output=True, text=True, timeout=60)
        result = status("--demand", "5000", "--max-stall", "0.1", "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        # Counts are numbers, 64-bit ones too (proto3's JSON would quote them).
        stats = report["servers"][0]["stats"]
        self.assertIsInstance(stats["samples_sent"], int)
        self.assertIsInstance(stats["peak_rss_bytes"], int)
        self.assertGreater(stats["samples_sent"], 0)
        capacities = [s["capacity_images_per_second"] for s in report["servers"]]
        self.assertTrue(all(c > 0 for c in capacities), capacities)
        sizing = report["sizing"]
        self.assertEqual(sizing["hosts"], 2)
        self.assertAlmostEqual(sizing["capacity_per_host"], sum(capacities) / 2, places=3)
        self.assertEqual(sizing["hosts_needed"],
                         max(1, math.ceil(5000 * 0.9 / sizing["capacity_per_host"] - 1e-9)))
        text = status("--demand", "5000")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertRegex(text.stdout, r"capacity \d+ images/s with every thread busy")
        self.assertRegex(text.stdout, r"data hosts needed: \d+ \(now 2\) for at most 5% data "
                                      r"stall at 5000 images/s")
        self.assertEqual(status("--demand", "-1").returncode, 2)
        self.assertEqual(status("--max-stall", "1.5").returncode, 2)
        # The servers a servers file lists, as the trainers see them (one
        # named on the command line too is asked once).
        listed = os.path.join(self.tmp, "status-servers")
        with open(listed, "w") as f:
            f.write("\n".join(self.addresses) + "\n")
        from_file = subprocess.run(
            [HETERODL, "status", self.addresses[0], "--data-servers-file", listed, "--json",
             "--demand", "5000"], capture_output=True, text=True, timeout=60)
        self.assertEqual(from_file.returncode, 0, from_file.stderr)
        report = json.loads(from_file.stdout)
        self.assertEqual(sorted(s["address"] for s in report["servers"]), sorted(self.addresses))
        self.assertEqual(report["sizing"]["hosts"], 2)
        empty = os.path.join(self.tmp, "no-servers")
        open(empty, "w").close()
        nothing = subprocess.run([HETERODL, "status", "--data-servers-file", empty],
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(nothing.returncode, 2)
        self.assertIn("lists no server", nothing.stderr)

    def test_metrics_port_serves_the_steps_the_loop_took(self):
        import urllib.request

        def scrape(port):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
                self.assertTrue(page.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
                text = page.read().decode()
            values = {}
            for line in text.splitlines():
                if line and not line.startswith("#"):
                    series, value = line.rsplit(" ", 1)
                    values[series] = float(value)
            return text, values

        self.assertIsNone(self.loader().metrics_port)
        loader = self.loader(batch_size=8, world_size=2, rank=1, metrics_port=0)
        port = loader.metrics_port
        self.assertGreater(port, 0)
        _, before = scrape(port)
        self.assertEqual(before["heterodl_steps_total"], 0)
        batches, samples, waited = 0, 0, 0.0
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            for images, _ in loader:
                batches += 1
                samples += len(images)
                time.sleep(0.02)  # the loop's own work: a step is longer than its wait
        text, after = scrape(port)
        self.assertEqual(after["heterodl_steps_total"], batches)
        self.assertEqual(after['heterodl_delivered_samples_total{status="ok"}'], samples)
        self.assertEqual(after['heterodl_delivered_samples_total{status="failed"}'], 0)
        self.assertEqual(after["heterodl_step_seconds_count"], batches)
        self.assertEqual(after["heterodl_data_wait_seconds_count"], batches)
        # Each step holds the loop's 20 ms, except each iteration's first,
        # which is its wait alone.
        self.assertGreaterEqual(after["heterodl_step_seconds_sum"], (batches - 2) * 0.02)
        self.assertLess(after["heterodl_data_wait_seconds_sum"], after["heterodl_step_seconds_sum"])
        self.assertTrue(0 <= after["heterodl_data_stall_ratio"] < 1, text)
        self.assertEqual(after["heterodl_world_size"], 2)
        self.assertIn('heterodl_build_info{version="' + heterodl.__version__ + '",role="loader"} 1',
                      text)
        # The data group's capacity, once the loader's watch has polled it.
        deadline = time.time() + 30
        while "heterodl_data_hosts_needed" not in after and time.time() < deadline:
            time.sleep(0.2)
            text, after = scrape(port)
        self.assertEqual(after["heterodl_data_hosts"], 2, text)
        self.assertGreaterEqual(after["heterodl_data_hosts_needed"], 1)
        import shutil
        if shutil.which("promtool"):
            check = subprocess.run(["promtool", "check", "metrics"], input=text,
                                   capture_output=True, text=True, timeout=60)
            self.assertEqual((check.returncode, check.stdout + check.stderr), (0, ""))
        # A second loader cannot take the same port, and says which.
        with self.assertRaisesRegex(ConnectionError, f"cannot listen for metrics on 0.0.0.0:{port}"):
            self.loader(metrics_port=port)
        with self.assertRaises(ValueError):
            self.loader(metrics_port=70000)
        del loader  # the endpoint goes with it (dataset and sampler refer back to it)
        import gc
        gc.collect()
        with self.assertRaises(OSError):
            scrape(port)

    def test_the_api_describes_itself(self):
        self.assertRegex(heterodl.__version__, r"^\d+\.\d+\.\d+$")
        doc = heterodl.RemoteDataLoader.__doc__
        for parameter in ("servers", "batch_size", "pipeline", "stall_timeout", "auth_token",
                          "servers_file", "servers_dns"):
            self.assertIn(parameter + ":", doc)
        # help() describes every public attribute, and every key stats() gives.
        import pydoc
        text = pydoc.render_doc(heterodl.RemoteDataLoader, renderer=pydoc.plaintext)
        loader = self.loader()
        public = [name for name in dir(loader) if not name.startswith("_")]
        for name in public:
            self.assertIn(name, text)
        for name in ("dataset", "sampler", "batch_size", "format", "class_names", "epoch"):
            self.assertRegex(doc, rf"\b{name}\b.*:", name)
        stats_doc = heterodl.RemoteDataLoader.stats.__doc__
        for key in loader.stats():
            self.assertIn(f"- {key}:", stats_doc.replace("; ", "\n        - "), key)
        package = os.path.dirname(heterodl.__file__)
        self.assertTrue(os.path.exists(os.path.join(package, "py.typed")))
        self.assertTrue(os.path.exists(os.path.join(package, "_heterodl.pyi")))
        loader = self.loader()
        self.assertIn("RemoteDataLoader(servers=", repr(loader))
        self.assertEqual(loader.servers, sorted(self.addresses))  # those in use now
        heterodl.set_log_level("warning")
        heterodl.set_log_level(20)  # logging.INFO
        with self.assertRaises(ValueError):
            heterodl.set_log_level("loud")


class PinnedCopyGuardTest(unittest.TestCase):
    """A pinned batch is held from the next request until the CUDA event
    recorded then has passed (a fake torch.cuda stands in for a GPU)."""

    def test_a_batch_is_held_until_its_copies_are_done(self):
        import gc
        import weakref
        from heterodl.loader import _PinnedCopyGuard

        events = []

        class Event:
            def __init__(self):
                self.done = False
                events.append(self)

            def record(self):
                pass

            def query(self):
                return self.done

        class Cuda:
            pass

        class FakeTorch:
            cuda = Cuda()

        FakeTorch.cuda.Event = Event

        class Arrays:
            pass

        guard = _PinnedCopyGuard(FakeTorch)
        guard.next_requested()
        first = Arrays()
        watch = weakref.ref(first)
        guard.delivered(first)
        del first
        guard.next_requested()  # the trainer asks for batch 2: copies of 1 are enqueued
        gc.collect()
        self.assertIsNotNone(watch(), "released while its copy may still run")
        guard.delivered(Arrays())
        guard.next_requested()
        gc.collect()
        self.assertIsNotNone(watch())
        events[0].done = True
        guard.next_requested()
        gc.collect()
        self.assertIsNone(watch(), "held after its copies were done")


class StalledServerTest(unittest.TestCase):
    """A server that stops answering (SIGSTOP): Ctrl-C interrupts a blocked
    next() and the loader goes on afterwards; a stall past stall_timeout is a
    TimeoutError."""

    def test_ctrl_c_interrupts_a_blocked_next_and_a_stall_times_out(self):
        dataset = sample_dataset(HETERODL, 32, "heterodl-stall-")
        server, address = start_server(HETERODL, dataset,
                                       os.path.join(os.path.dirname(dataset), "port"))
        try:
            loader = heterodl.RemoteDataLoader(servers=[address], batch_size=4,
                                               pipeline="random_resized_crop(32)",
                                               stall_timeout=3.0, max_buffered_mb=0.02)
            batches = iter(loader)
            next(batches)
            os.kill(server.pid, signal.SIGSTOP)
            time.sleep(0.5)
            threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            # Interrupted, not left to the stall timeout's TimeoutError 3 s on.
            with self.assertRaises(KeyboardInterrupt):
                while True:  # what was fetched ahead comes first
                    next(batches)
            with self.assertRaisesRegex(TimeoutError, "no batch from any data server"):
                while True:
                    next(batches)
        finally:
            os.kill(server.pid, signal.SIGCONT)
            server.terminate()
            server.wait(timeout=30)


class ShutdownTest(unittest.TestCase):
    def test_shutdown_servers_ends_them_now(self):
        dataset = sample_dataset(HETERODL, 8, "heterodl-end-")
        server, address = start_server(HETERODL, dataset,
                                       os.path.join(os.path.dirname(dataset), "port"))
        try:
            loader = heterodl.RemoteDataLoader(servers=address, batch_size=4)
            self.assertEqual(len(list(loader)), 2)
            loader.shutdown_servers()
            self.assertEqual(server.wait(timeout=30), 0)
            heterodl.shutdown_servers([address])  # gone already: nothing to stop
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    unittest.main(verbosity=2)
