"""The command line as a user meets it: help, usage errors and their exit codes,
busy ports, the sample dataset's refusals, a file list with holes.

Run by ctest as `python3 cli_test.py BUILD_DIR`. Standard library only. Exit
codes are docs/operations.md's: 0 done, 1 a failure, 2 bad usage.
"""

import os
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from processes import free_port, read_until, sample_dataset, scratch_dir, start_server  # noqa: E402

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
COMMANDS = ["launch", "serve", "train", "local", "cluster", "dataset", "status", "bench", "plan"]


def heterodl(*arguments, timeout=60, env=None):
    return subprocess.run([HETERODL, *arguments], capture_output=True, text=True,
                          timeout=timeout, env=env)


def without_cluster_environment():
    """This process's environment less anything that names a cluster."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "SM_", "HETERODL_"))}


class HelpTest(unittest.TestCase):
    def test_every_command_has_help_with_its_flags_and_an_example(self):
        for command in COMMANDS:
            for form in ([command, "--help"], ["help", command], [command, "-h"]):
                result = heterodl(*form)
                self.assertEqual(result.returncode, 0, (form, result.stderr))
                self.assertIn(f"usage: heterodl {command}", result.stdout, form)
                self.assertIn("example:\n  heterodl", result.stdout, form)
                self.assertNotIn("No flags matched", result.stdout + result.stderr)
        serve = heterodl("serve", "--help").stdout
        self.assertIn("--worker-nice (default: '10')", serve)
        self.assertIn("--port (default: '50051')", serve)  # not the -1 that marks "not given"
        self.assertNotIn("(default: '-1')", serve)
        self.assertNotIn("--model", serve)  # train's, not serve's
        for form in ("image folder", "file list", "WebDataset tar shards", "TFRecord files",
                     "s3://BUCKET/KEY", "--s3-endpoint", "--tfrecord-label-offset"):
            self.assertIn(form, serve)  # every dataset --dataset takes
        self.assertIn("--servers (default: '2')", heterodl("help", "local").stdout)

    def test_help_of_an_unknown_command_suggests_the_nearest(self):
        result = heterodl("help", "serv")
        self.assertEqual(result.returncode, 2)
        self.assertIn("did you mean 'serve'", result.stderr)
        result = heterodl("trian")
        self.assertEqual(result.returncode, 2)
        self.assertIn("unknown command 'trian' (did you mean 'train'?)", result.stderr)

    def test_bare_heterodl_outside_a_cluster_prints_usage(self):
        result = heterodl(env=without_cluster_environment())
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("usage: heterodl [COMMAND]", result.stdout)
        self.assertIn("No cluster environment here", result.stdout)
        self.assertNotIn("needs --dataset", result.stderr)


class UsageErrorTest(unittest.TestCase):
    """Every one of these is refused up front with exit code 2, before any
    server or rank starts (the run directory of `local` is never made)."""

    @classmethod
    def setUpClass(cls):
        cls.dataset = sample_dataset(HETERODL, 8, "heterodl-cli-")
        cls.tmp = os.path.dirname(cls.dataset)

    def assert_usage_error(self, arguments, message):
        result = heterodl(*arguments)
        self.assertEqual(result.returncode, 2, (arguments, result.stdout, result.stderr))
        self.assertIn(message, result.stderr, arguments)
        # Nothing started: no server or rank log line.
        self.assertNotIn("listening on", result.stderr)
        self.assertNotIn("data server(s) up", result.stderr)

    def test_bad_flags_are_usage_errors_naming_the_flag(self):
        local = ["local", "--dataset", self.dataset]
        cases = [
            (["serve", "--batchsize", "3"], "unknown flag --batchsize (did you mean --batch-size?)"),
            (["serve", "--dataset", self.dataset, "--port", "-5"], "--port must be in [0, 65535]"),
            (["serve", "--dataset", self.dataset, "--port", "99999"], "--port must be in"),
            (["serve", "--dataset", self.dataset, "--threads", "-1"], "--threads must be in [0,"),
            ([*local, "--threads", "3000"], "--threads must be in [0,"),
            ([*local, "--batch-size", "-3"], "--batch-size must be in [1, 65536], got -3"),
            ([*local, "--batch-size", "0"], "--batch-size must be in [1, 65536], got 0"),
            ([*local, "--model", "nonexistent"], "'nonexistent' is none of them"),
            ([*local, "--optimizer", "adam"], "--optimizer must be one of sgd, adamw"),
            ([*local, "--data-servers", "2"], "--servers N says how many"),
            (["serve", "--dataset", self.dataset, "--address", "nohost"],
             "'nohost' is not host:port"),
            (["serve", "--threads", "abc"], "invalid value 'abc' for --threads"),
            (["serve", "--threads"], "--threads needs a value"),
            (["train", "--resume", "true"], "--resume is a switch: write --resume or --resume=true"),
            (["serve", self.dataset], "takes no arguments, got"),
            (["train", "--data-servers", "127.0.0.1:99999"], "is not host:port"),
            (["train", "--data-servers", "a:1,fe80::1:5"], "'fe80::1:5' is not host:port"),
            (["train", "--data-servers", "a:1", "--metrics-port", "70000"],
             "--metrics-port must be in [-1, 65535] (-1: off, 0: any free port)"),
            (["serve", "--log-level", "loud"], "--log-level must be one of"),
            (["dataset", "sample", os.path.join(self.tmp, "never"), "--formats", "jpg"],
             "--formats: unknown format 'jpg'"),
            (["dataset", "sample", os.path.join(self.tmp, "never"), "--formats", "png=50,jpeg=40"],
             "--formats: the percentages sum to 90, not 100"),
        ]
        for arguments, message in cases:
            self.assert_usage_error(arguments, message)

    def test_flagfile_takes_the_dashed_names_of_the_docs(self):
        flagfile = os.path.join(self.tmp, "flags")
        with open(flagfile, "w") as f:
            f.write("# a comment\n--batch-size=0\n")
        self.assert_usage_error(["local", "--dataset", self.dataset, "--flagfile", flagfile],
                                "--batch-size must be in [1, 65536], got 0")
        with open(flagfile, "w") as f:
            f.write("--images=3\n--seed 9\n")
        target = os.path.join(self.tmp, "from-flagfile")
        result = heterodl("dataset", "sample", target, f"--flagfile={flagfile}", timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sum(len(files) for _, _, files in os.walk(target)), 3 + 1)  # + stamp
        self.assert_usage_error(["serve", "--flagfile", "/nonexistent/flags"],
                                "cannot read the flag file '/nonexistent/flags'")

    def test_switches_are_written_as_the_docs_write_them(self):
        for form in ("--no-overwrite", "--nooverwrite", "--overwrite=false"):
            target = scratch_dir("heterodl-switch-")
            with open(os.path.join(target, "keep.txt"), "w") as f:
                f.write("mine")
            result = heterodl("dataset", "sample", target, "--images", "2", form, timeout=120)
            self.assertEqual(result.returncode, 2, (form, result.stderr))  # not overwritten
            self.assertIn("refusing to replace it", result.stderr)

    def test_a_flag_of_another_command_is_named(self):
        result = heterodl("cluster", "--model", "resnet18")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("--model does nothing for 'cluster'", result.stderr)


class LogLevelTest(unittest.TestCase):
    def test_log_level_quiets_info_lines(self):
        tmp = scratch_dir("heterodl-log-")
        loud = heterodl("dataset", "sample", os.path.join(tmp, "a"), "--images", "2",
                        timeout=120)
        self.assertEqual(loud.returncode, 0, loud.stderr)
        self.assertIn("wrote 2 images", loud.stderr)
        quiet = heterodl("dataset", "sample", os.path.join(tmp, "b"), "--images", "2",
                         "--log-level", "warning", timeout=120)
        self.assertEqual(quiet.returncode, 0, quiet.stderr)
        self.assertEqual(quiet.stderr, "")


@unittest.skipUnless(os.path.exists(os.path.join(BUILD_DIR, "heterodl-trainer")),
                     "built without LibTorch: no trainer")
class FailFastTest(unittest.TestCase):
    def test_a_refused_server_is_said_at_once_and_ctrl_c_ends_the_wait(self):
        port = free_port()  # nothing listens there
        trainer = subprocess.Popen(
            [HETERODL, "train", "--data-servers", f"127.0.0.1:{port}", "--ranks", "1",
             "--connect-timeout", "300s", "--device", "cpu"],
            stderr=subprocess.PIPE, text=True)
        try:
            seen = read_until(trainer, "Connection refused", timeout=60)
            self.assertIn("Connection refused", seen)
            self.assertIn("waiting up to 5m", seen)
            self.assertIsNone(trainer.poll())  # still waiting: servers may start later
            trainer.send_signal(signal.SIGINT)
            rest = trainer.communicate(timeout=30)[1]
            self.assertEqual(trainer.returncode, 0, seen + rest)
            self.assertIn("stopped on request before training began", rest)
            # Said once, not at every retry.
            self.assertEqual((seen + rest).count("Connection refused"), 1, seen + rest)
        finally:
            trainer.kill()
            trainer.wait()


class BusyPortTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dataset = sample_dataset(HETERODL, 8, "heterodl-port-")
        cls.tmp = os.path.dirname(cls.dataset)
        cls.other = sample_dataset(HETERODL, 4, "heterodl-port-other-")

    def test_a_second_server_on_a_busy_port_fails_and_the_first_keeps_it(self):
        pixel_port = free_port()
        first, address = start_server(HETERODL, self.dataset, os.path.join(self.tmp, "p1"),
                                      "--pixel-port", str(pixel_port))
        try:
            # gRPC would share the port through SO_REUSEPORT and split clients.
            result = heterodl("serve", "--dataset", self.other, "--address", address,
                              "--threads", "1", timeout=30)
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn(f"cannot listen on {address}: Address already in use", result.stderr)
            self.assertNotIn("children:[", result.stderr)  # gRPC's tree of causes, unread
            result = heterodl("serve", "--dataset", self.other, "--address", "127.0.0.1:0",
                              "--pixel-port", str(pixel_port), "--threads", "1", timeout=30)
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn("Address already in use", result.stderr)
            # The first server still answers, with its own dataset.
            status = heterodl("status", address, timeout=30)
            self.assertEqual(status.returncode, 0, status.stdout + status.stderr)
            self.assertIn(self.dataset, status.stdout)
        finally:
            first.terminate()
            first.wait(timeout=30)


class SampleDatasetTest(unittest.TestCase):
    def test_refuses_to_replace_what_is_there(self):
        tmp = scratch_dir("heterodl-sample-")
        target = os.path.join(tmp, "data")
        self.assertEqual(heterodl("dataset", "sample", target, "--images", "4",
                                  timeout=120).returncode, 0)
        # Four images, four classes: no empty class folder.
        classes = [d for d in os.listdir(target) if os.path.isdir(os.path.join(target, d))]
        self.assertEqual(len(classes), 4)
        for d in classes:
            self.assertEqual(len(os.listdir(os.path.join(target, d))), 1)
        # The same dataset again: nothing to do.
        self.assertEqual(heterodl("dataset", "sample", target, "--images", "4",
                                  timeout=120).returncode, 0)
        # Another one over it: refused, and the first is intact.
        result = heterodl("dataset", "sample", target, "--images", "6", timeout=120)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("refusing to replace it (--overwrite replaces it)", result.stderr)
        self.assertEqual(len(os.listdir(target)), 4 + 1)
        result = heterodl("dataset", "sample", target, "--images", "6", "--overwrite",
                          timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sum(len(files) for _, _, files in os.walk(target)), 6 + 1)
        # Not a dataset at all: refused too.
        other = os.path.join(tmp, "notes")
        os.makedirs(other)
        with open(os.path.join(other, "keep.txt"), "w") as f:
            f.write("mine")
        result = heterodl("dataset", "sample", other, "--images", "4", timeout=120)
        self.assertEqual(result.returncode, 2)
        self.assertTrue(os.path.exists(os.path.join(other, "keep.txt")))


class MissingFilesTest(unittest.TestCase):
    def test_a_file_list_with_missing_files_is_reported_at_start(self):
        dataset = sample_dataset(HETERODL, 4, "heterodl-holes-")
        tmp = os.path.dirname(dataset)
        files = sorted(os.path.relpath(os.path.join(d, f), tmp)
                       for d, _, fs in os.walk(dataset) for f in fs if f.endswith(".jpg"))
        listing = os.path.join(tmp, "train.tsv")
        with open(listing, "w") as f:
            for i, path in enumerate(files + ["data/gone/a.jpg", "data/gone/b.jpg"]):
                f.write(f"{path}\t{i % 2}\n")
        strict = heterodl("serve", "--dataset", listing, "--strict-dataset", "--address",
                          "127.0.0.1:0", "--threads", "1", timeout=30)
        self.assertEqual(strict.returncode, 1, strict.stderr)
        self.assertIn("2 of the 6 files", strict.stderr)
        self.assertIn("data/gone/a.jpg, data/gone/b.jpg", strict.stderr)
        server = subprocess.Popen([HETERODL, "serve", "--dataset", listing, "--address",
                                   "127.0.0.1:0", "--threads", "1"],
                                  stderr=subprocess.PIPE, text=True)
        try:
            seen = ""
            while "listening on" not in seen:
                line = server.stderr.readline()
                if not line:
                    break
                seen += line
            self.assertIn("2 of the 6 files", seen)
            self.assertIn("--strict-dataset refuses to serve", seen)
            # The port bound, not the 0 that asked for any.
            self.assertRegex(seen, r"listening on 127\.0\.0\.1:[1-9][0-9]*;")
            # And when it would leave on its own, said at once.
            self.assertIn("leaving on its own if no client comes within 30m "
                          "(--startup-timeout) or none is connected for 10m (--idle-timeout)",
                          seen)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    unittest.main()
