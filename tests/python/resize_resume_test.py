"""A job that changes its number of GPUs: torchrun runs 4 CPU ranks that die
mid-epoch right after a checkpoint, and the job resumes from that checkpoint
with 3 ranks (the same global batch) and, separately, with 6 (the same
per-rank batch). Across the dead run and each resumed one, every sample of
the interrupted epoch is trained on exactly once (plus the padding that
makes the rest divide over the new ranks, as DistributedSampler pads), every
rank runs the same number of steps, and the next epoch is the new world's
own plan. A checkpoint of another dataset or seed is still refused.

Run by ctest: python resize_resume_test.py BUILD_DIR (the venv's Python,
PYTHONPATH=BUILD_DIR/python).
"""

import collections
import glob
import json
import os
import sys
import unittest

BUILD_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build")
HETERODL = os.path.join(BUILD_DIR, "heterodl")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import processes  # noqa: E402
from processes import sample_dataset, scratch_dir, start_server, stop_servers  # noqa: E402

import torch  # noqa: E402

import heterodl  # noqa: E402

SAMPLES = 203  # pads under 4 ranks (51 each) and under the rests' splits
BATCH = 6      # per rank in the first run: a global batch of 24
EPOCHS = 2
DIE_AFTER = 5  # steps: batch 5 of epoch 0 (120 samples read) is next


def torchrun(world, servers, records, checkpoint, batch_size, *extra):
    processes.torchrun(sys.executable, world, os.path.join(HERE, "resize_worker.py"), servers,
                       records, checkpoint, "--batch-size", str(batch_size), "--epochs",
                       str(EPOCHS), *extra, timeout=300)


def read_records(folder):
    records = []
    for path in glob.glob(os.path.join(folder, "rank*.jsonl")):
        with open(path) as f:
            records.extend(json.loads(line) for line in f)
    return records


class ResizeResumeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        dataset = sample_dataset(HETERODL, SAMPLES)
        cls.server, cls.address = start_server(
            HETERODL, dataset, os.path.join(os.path.dirname(dataset), "port"))
        cls.work = scratch_dir("heterodl-resize-")
        cls.first = os.path.join(cls.work, "four")
        cls.checkpoint = os.path.join(cls.work, "four.pt")
        torchrun(4, cls.address, cls.first, cls.checkpoint, BATCH, "--die-after",
                 str(DIE_AFTER))

    @classmethod
    def tearDownClass(cls):
        stop_servers(cls.server)

    def check_resumed(self, world, batch_size):
        state = torch.load(self.checkpoint)["loader"]
        self.assertEqual((state["epoch"], state["next_batch"], state["samples_consumed"]),
                         (0, DIE_AFTER, DIE_AFTER * BATCH * 4))
        folder = os.path.join(self.work, f"resumed-{world}")
        torchrun(world, self.address, folder, os.path.join(self.work, f"resumed-{world}.pt"),
                 batch_size, "--resume-from", self.checkpoint)
        before = [r for r in read_records(self.first) if r["epoch"] == 0]
        after = read_records(folder)
        self.assertEqual(sorted({r["index"] for r in before}), list(range(DIE_AFTER)))

        # The interrupted epoch: what the 4 ranks read, then the rest split
        # over the new ranks, each sample once but for the padding.
        rest = [r for r in after if r["epoch"] == 0]
        read = [i for r in before + rest for i in r["indices"]]
        counts = collections.Counter(read)
        self.assertEqual(set(counts), set(range(SAMPLES)))
        left = SAMPLES - DIE_AFTER * BATCH * 4
        per_rank = -(-left // world)
        padding = per_rank * world - left  # the 4 ranks had read none of theirs yet
        self.assertEqual(len(read) - SAMPLES, padding)
        self.assertEqual(sorted(counts.values()).count(2), padding)
        steps = collections.Counter(r["rank"] for r in rest)
        self.assertEqual(set(steps), set(range(world)))
        self.assertEqual(len(set(steps.values())), 1, steps)  # every rank steps alike
        self.assertEqual(set(steps.values()), {-(-per_rank // batch_size)})
        self.assertTrue(all(len(r["indices"]) <= batch_size for r in rest))
        # The rest's batches are numbered on from the steps taken, and the
        # epoch's length is the steps taken plus the rest's.
        rest_steps = -(-per_rank // batch_size)
        self.assertEqual({r["index"] for r in rest}, set(range(DIE_AFTER, DIE_AFTER + rest_steps)))
        self.assertEqual({r["batches"] for r in rest}, {DIE_AFTER + rest_steps})

        # The next epoch: the new world's own plan, whole.
        nxt = [r for r in after if r["epoch"] == 1]
        reference = heterodl.RemoteDataLoader(self.address, batch_size=batch_size, rank=0,
                                              world_size=world, seed=11,
                                              pipeline="random_resized_crop(16)",
                                              pin_memory=False)
        self.assertEqual({r["batches"] for r in nxt}, {len(reference)})
        reference.sampler.set_epoch(1)
        self.assertEqual([i for r in sorted((r for r in nxt if r["rank"] == 0),
                                            key=lambda r: r["index"]) for i in r["indices"]],
                         [i for b in reference for i in b.indices.tolist()])
        whole = collections.Counter(i for r in nxt for i in r["indices"])
        self.assertEqual(set(whole), set(range(SAMPLES)))
        del reference  # its connections close before the server does

    def test_resumed_on_three_ranks_with_the_same_global_batch(self):
        self.check_resumed(3, BATCH * 4 // 3)

    def test_resumed_on_six_ranks_with_the_same_per_rank_batch(self):
        self.check_resumed(6, BATCH)

    def test_a_rest_checkpointed_and_resumed_again_on_another_world(self):
        # 4 ranks die at step 5; 3 ranks resume and die 2 steps into the
        # rest; 6 ranks resume from the 3 ranks' checkpoint.
        three = os.path.join(self.work, "three-died")
        torchrun(3, self.address, three, three + ".pt", 8, "--resume-from", self.checkpoint,
                 "--die-after", "2")
        state = torch.load(three + ".pt")["loader"]
        self.assertEqual((state["first_batch"], state["next_batch"], state["samples_consumed"]),
                         (DIE_AFTER, DIE_AFTER + 2, DIE_AFTER * BATCH * 4 + 2 * 8 * 3))
        six = os.path.join(self.work, "six-after-three")
        torchrun(6, self.address, six, six + ".pt", 4, "--resume-from", three + ".pt")
        read = [i for r in read_records(self.first) + read_records(three) + read_records(six)
                if r["epoch"] == 0 for i in r["indices"]]
        left = SAMPLES - state["samples_consumed"]
        self.assertEqual(set(read), set(range(SAMPLES)))
        self.assertEqual(len(read) - SAMPLES, -(-left // 6) * 6 - left)

    def test_a_checkpoint_of_another_permutation_is_refused(self):
        state = torch.load(self.checkpoint)["loader"]
        loader = heterodl.RemoteDataLoader(self.address, batch_size=BATCH, rank=0, world_size=3,
                                           seed=12, pin_memory=False)
        with self.assertRaisesRegex(ValueError, r"another epoch plan: seed 11 \(this loader: 12"):
            loader.load_state_dict(state)


if __name__ == "__main__":
    unittest.main(verbosity=2)
