"""RemoteDataLoader.load_state_dict's check of a state against the loader's
own epoch plan (heterodl.loader._check_state), without a server:
remote_loader_test.py resumes real loaders from states.

Run by ctest: python loader_state_test.py (PYTHONPATH=BUILD_DIR/python).
"""

import json
import unittest

from heterodl import loader

MINE = {"version": 1, "epoch": 2, "next_batch": 5, "batches_per_epoch": 16,
        "num_samples": 128, "fingerprint": "00ff00ff00ff00ff", "seed": 5, "world_size": 1,
        "batch_size": 8, "drop_last": True, "shuffle": True, "shuffle_block_shards": 0}


class CheckStateTest(unittest.TestCase):
    def test_a_state_of_the_same_plan_is_taken_at_any_position(self):
        for epoch, next_batch in ((0, 0), (7, 3), (2, 16)):
            loader._check_state({**MINE, "epoch": epoch, "next_batch": next_batch}, MINE)

    def test_each_key_of_another_plan_is_named_with_both_values(self):
        for key, value in (("seed", 6), ("batch_size", 4), ("world_size", 2),
                           ("fingerprint", "0123456789abcdef"), ("num_samples", 129),
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
        with self.assertRaisesRegex(ValueError, "seed 6 .*, batch_size 4"):
            loader._check_state({**MINE, "seed": 6, "batch_size": 4}, MINE)

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


if __name__ == "__main__":
    unittest.main(verbosity=2)
