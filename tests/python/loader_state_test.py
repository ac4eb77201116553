"""RemoteDataLoader.load_state_dict's check of a state against the loader's
own epoch plan (heterodl.loader._check_state), without a server:
remote_loader_test.py resumes real loaders from states.

Run by ctest: python loader_state_test.py (PYTHONPATH=BUILD_DIR/python).
"""

import json
import os
import unittest

from heterodl import loader

MINE = {"version": 1, "epoch": 2, "next_batch": 5, "batches_per_epoch": 16,
        "num_samples": 128, "fingerprint": "00ff00ff00ff00ff", "seed": 5, "world_size": 1,
        "batch_size": 8, "drop_last": True, "shuffle": True, "shuffle_block_shards": 0,
        "epoch_offset": 0, "first_batch": 0, "samples_consumed": 40}


class CheckStateTest(unittest.TestCase):
    def test_a_state_of_the_same_plan_is_taken_at_any_position(self):
        for epoch, next_batch in ((0, 0), (7, 3), (2, 16)):
            loader._check_state({**MINE, "epoch": epoch, "next_batch": next_batch}, MINE)

    def test_each_key_of_another_plan_is_named_with_both_values(self):
        for key, value in (("seed", 6), ("fingerprint", "0123456789abcdef"),
                           ("num_samples", 129),
                           ("drop_last", False), ("shuffle", False),
                           ("shuffle_block_shards", 4)):
            with self.subTest(key=key):
                with self.assertRaisesRegex(
                        ValueError, f"another epoch plan: {key} {value!r} "
                                    rf"\(this loader: {MINE[key]!r}\)"):
                    loader._check_state({**MINE, key: value}, MINE)

    def test_a_state_from_before_block_plans_is_one_of_the_default_plan(self):
        # States written before shuffle_block_shards existed had none: 0.
        old = {key: value for key, value in MINE.items() if key != "shuffle_block_shards"}
        loader._check_state(old, MINE)
        with self.assertRaisesRegex(ValueError, r"shuffle_block_shards 0 \(this loader: 4\)"):
            loader._check_state(old, {**MINE, "shuffle_block_shards": 4})

    def test_every_differing_key_is_named_at_once(self):
        with self.assertRaisesRegex(ValueError, "seed 6 .*, shuffle False"):
            loader._check_state({**MINE, "seed": 6, "shuffle": False}, MINE)

    def test_a_state_of_another_world_size_or_batch_size_is_taken(self):
        # Its epoch's rest is re-split over this loader's ranks.
        state = {**MINE, "world_size": 4, "batch_size": 2, "next_batch": 3}
        self.assertEqual(loader._check_state(state, MINE), state)
        self.assertEqual(loader._samples_consumed(loader._check_state(state, MINE)), 24)
        self.assertEqual(loader._samples_consumed(
            loader._check_state({**state, "epoch_offset": 100, "next_batch": 2}, MINE)), 116)
        # Inside a rest its batches are counted from its first one.
        self.assertEqual(loader._samples_consumed(loader._check_state(
            {**state, "epoch_offset": 100, "first_batch": 7, "next_batch": 9}, MINE)), 116)
        self.assertEqual(loader._samples_consumed(
            loader._check_state({**state, "epoch_offset": 100, "next_batch": 4}, MINE)), 128)
        self.assertEqual(loader._samples_consumed(
            loader._check_state({**state, "next_batch": 16}, MINE)), 128)

    def test_a_position_that_is_none_is_refused(self):
        for key, value in (("next_batch", 17), ("world_size", 0), ("batch_size", "8"),
                           ("epoch_offset", 128), ("epoch", -1), ("first_batch", 6)):
            with self.subTest(key=key):
                with self.assertRaisesRegex(ValueError, f"the state's {key}|outside"):
                    loader._check_state({**MINE, key: value}, MINE)

    def test_a_state_without_plan_keys_is_taken_as_its_position(self):
        # What state_dict() gives is checked as far as it goes: a hand-made
        # position (version, epoch, next_batch) is trusted.
        loader._check_state({"version": 1, "epoch": 1, "next_batch": 2}, MINE)

    def test_what_is_not_a_state_is_refused(self):
        with self.assertRaisesRegex(ValueError, "not a RemoteDataLoader state_dict"):
            loader._check_state({"epoch": 1}, MINE)
        with self.assertRaisesRegex(ValueError, "missing a known version"):
            loader._check_state({**MINE, "version": 2}, MINE)
        with self.assertRaisesRegex(TypeError, "must be a dict from state_dict\\(\\), not list"):
            loader._check_state([1, 2], MINE)

    def test_a_state_survives_json(self):
        self.assertEqual(json.loads(json.dumps(MINE)), MINE)
        loader._check_state(json.loads(json.dumps(MINE)), MINE)


class DistributedDefaultsTest(unittest.TestCase):
    """Where a loader's rank and world size come from without
    torch.distributed: torchrun, TF_CONFIG, Horovod, Open MPI, Slurm."""

    NAMES = ("RANK", "WORLD_SIZE", "TF_CONFIG", "HOROVOD_RANK", "HOROVOD_SIZE",
             "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")

    def setUp(self):
        self.saved = {name: os.environ.pop(name, None) for name in self.NAMES}

    def tearDown(self):
        for name, value in self.saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value

    def test_tf_config_names_the_chief_then_the_workers(self):
        cluster = {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "evaluator": ["e:1"]}
        for task, expected in ((("chief", 0), (0, 3)), (("worker", 0), (1, 3)),
                               (("worker", 1), (2, 3)), (("evaluator", 0), (0, 1))):
            os.environ["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": task[0], "index": task[1]}})
            self.assertEqual(loader._distributed_defaults(), expected, task)
        os.environ["TF_CONFIG"] = "{not json"
        with self.assertRaisesRegex(ValueError, "TF_CONFIG is not a TensorFlow cluster"):
            loader._distributed_defaults()

    def test_torchrun_then_horovod_then_open_mpi_then_slurm(self):
        self.assertEqual(loader._distributed_defaults(), (0, 1))
        os.environ.update(SLURM_PROCID="5", SLURM_NTASKS="8")
        self.assertEqual(loader._distributed_defaults(), (5, 8))
        os.environ.update(OMPI_COMM_WORLD_RANK="4", OMPI_COMM_WORLD_SIZE="7")
        self.assertEqual(loader._distributed_defaults(), (4, 7))
        os.environ.update(HOROVOD_RANK="3", HOROVOD_SIZE="6")
        self.assertEqual(loader._distributed_defaults(), (3, 6))
        os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["a:1", "b:1"]},
                                              "task": {"type": "worker", "index": 1}})
        self.assertEqual(loader._distributed_defaults(), (1, 2))
        os.environ.update(RANK="2", WORLD_SIZE="5")
        self.assertEqual(loader._distributed_defaults(), (2, 5))


if __name__ == "__main__":
    unittest.main(verbosity=2)
