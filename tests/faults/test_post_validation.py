#!/usr/bin/python3
"""Optimizer post-validation (issue 16, item 1; schedule.post_validation): each rank steps its optimizer before
the global gradient norm and non-finite check are back and starts the next step at once; a step that needed
clipping or had a non-finite value is rolled back and redone, and the next step, already running, is dropped and
run again. Proof of exactness: over 5 steps at p=2 and p=4, the losses and the final weights and AdamW moments
are bit-identical to the synchronous path, when every step is clipped (a tiny optim.grad_clip: 5 rollbacks, 4
reruns), when one step's gradients read as NaN (CONDUCTOR_INJECT_NAN, skipped by optim.skip_nonfinite_steps)
and when one step alone is clipped (CONDUCTOR_INJECT_CLIP): 1 rollback and 1 rerun each; the rollbacks and
reruns are counted, so a path that never rolls back fails. Overlap, from the trace: where no rollback came, some
op of step k+1 starts before the last op of step k ends; a rerun step never overlaps the step before it. The
size guard counts the rollback copy."""
import json
import os
import re

import h5py
import numpy as np

from faultlib import RAW_DUMP, FaultCase, mpirun
from test_skip import losses, state

STEPS = 5
ROLLBACK = re.compile(r"step (\d+): post-validation rolled back the optimistic update")
RERUN = re.compile(r"step (\d+): rerun after the rollback of step (\d+); its dropped attempt had begun (\d+) ops")


def compute_events(out):
    with h5py.File(os.path.join(out, "trace.h5"), "r") as t:
        e = t["events"][...]
    return e[e["kind"] <= 3]


def overlaps(out):
    """Per step boundary k -> k+1 (0-based k): whether an op of step k+1 began before step k's last op ended."""
    e = compute_events(out)
    first = {k: e["start_ns"][e["step"] == k].min() for k in range(STEPS)}
    last = {k: e["end_ns"][e["step"] == k].max() for k in range(STEPS)}
    return [bool(first[k + 1] < last[k]) for k in range(STEPS - 1)]


class PostValidation(FaultCase):
    def run_deck(self, name, p, post_validation, *overrides, env=None):
        out = os.path.join(self.tmp.name, name)
        ckpt = os.path.join(self.tmp.name, name + "-ck")
        deck = self.deck(steps=STEPS, p=p, m=2 * p, name=name + ".yaml", extra="backend: cpu\n")
        # The last rank is a straggler (10x its 2 ms ops, a delay that leaves the math alone): the first ranks end
        # each step well before it, so the next step starts there while the last rank still computes. One
        # sequence per microbatch keeps a tensor below Open MPI's eager limit: a larger one moves only while its
        # sender polls, which the straggler does only between its ops.
        slow = ["noise.kind=straggler", "noise.straggler_rank=%d" % (p - 1), "noise.straggler_factor=10",
                "cost.forward=[2]", "cost.backward_input=[2]", "cost.backward_weight=[2]", "parallel.microbatch_size=1"]
        res = mpirun(p, "run", deck, "run.output=" + out, "checkpoint.path=" + ckpt,
                     "schedule.post_validation=%s" % ("true" if post_validation else "false"), *slow, *overrides,
                     env=env)
        self.assertEqual(res.code, 0, res.text)
        self.assertIsNone(RAW_DUMP.search(res.text), res.text)
        return res, out, ckpt

    def check_identical(self, p, overrides, env, rolled_back):
        sync, sync_out, sync_ck = self.run_deck("sync-%d" % p, p, False, *overrides, env=env)
        post, post_out, post_ck = self.run_deck("post-%d" % p, p, True, *overrides, env=env)
        self.assertEqual(ROLLBACK.findall(sync.text), [])
        self.assertEqual([int(s) for s in ROLLBACK.findall(post.text)], rolled_back, post.text)
        # Each rollback but the last step's came while the next step ran: it was dropped (after some of its ops
        # had begun) and rerun.
        reruns = [(int(a), int(b), int(n)) for a, b, n in RERUN.findall(post.text)]
        self.assertEqual([(a, b) for a, b, _ in reruns], [(k + 1, k) for k in rolled_back if k < STEPS], post.text)
        self.assertTrue(all(n > 0 for _, _, n in reruns), post.text)
        self.assertRegex(post.text, r"post-validation: a copy of weights, AdamW moments and gradients for rollback, "
                                    r"[0-9.]+ MiB")
        # 1-based rolled back step k: the boundary k-1 -> k (0-based) is a rerun's, the others may overlap.
        over = overlaps(post_out)
        for k in rolled_back:
            if k < STEPS:
                self.assertFalse(over[k - 1], "rerun step %d overlaps the step before it: %s" % (k + 1, over))
        if len(rolled_back) < STEPS - 1:
            self.assertTrue(any(over), "no step overlapped the one before: %s" % over)
        self.assertFalse(any(overlaps(sync_out)), "synchronous steps overlap")
        for out, overlapping in ((sync_out, False), (post_out, True)):
            self.check_run_figures(out, p, overlapping)
        steps, sync_losses = losses(sync_out)
        self.assertEqual(steps, list(range(STEPS)))
        _, post_losses = losses(post_out)
        self.assertTrue(np.array_equal(sync_losses, post_losses), "sync %s vs post %s" % (sync_losses, post_losses))
        a, b = state(sync_ck, STEPS), state(post_ck, STEPS)
        self.assertTrue(a)
        self.assertEqual(sorted(a), sorted(b))
        for key in a:
            self.assertTrue(np.array_equal(a[key], b[key]), key)

    def check_run_figures(self, out, p, overlapping):
        """summary.json's `run` block, as the simulator's: the span from the first op to the last and the samples
        of all steps (m = 2p microbatches of one sequence) per second of it."""
        with open(os.path.join(out, "summary.json")) as f:
            run = json.load(f)["run"]
        e = compute_events(out)
        span_ms = (e["end_ns"].max() - e["start_ns"].min()) * 1e-6
        self.assertEqual(run["overlapping_steps"], overlapping)
        self.assertAlmostEqual(run["span_ms"], span_ms, delta=1e-6 * span_ms)
        self.assertAlmostEqual(run["throughput"], STEPS * 2 * p / (span_ms * 1e-3), delta=1e-6 * run["throughput"])

    def check_clipping(self, p):
        self.check_identical(p, ["optim.grad_clip=0.001"], None, list(range(1, STEPS + 1)))

    def check_nan(self, p):
        env = dict(os.environ, CONDUCTOR_INJECT_NAN="%d:2" % (p - 1))
        self.check_identical(p, ["optim.grad_clip=0", "optim.skip_nonfinite_steps=1"], env, [3])

    def check_one_clipped(self, p):
        # Only step 3 (1-based) is clipped: the others keep their optimistic update and overlap.
        env = dict(os.environ, CONDUCTOR_INJECT_CLIP="0:2")
        self.check_identical(p, ["optim.grad_clip=1e6"], env, [3])

    def test_one_clipped_p2(self):
        self.check_one_clipped(2)

    def test_one_clipped_p4(self):
        self.check_one_clipped(4)

    def test_clipping_p2(self):
        self.check_clipping(2)

    def test_clipping_p4(self):
        self.check_clipping(4)

    def test_nan_p2(self):
        self.check_nan(2)

    def test_nan_p4(self):
        self.check_nan(4)

    def test_size_guard_counts_the_copy(self):
        # The rollback copy (weights, m, v, gradients: the 4 fp32 copies the state already has) is in the estimate.
        state = {}
        for on in (False, True):
            r = mpirun(2, "run", self.deck(steps=1), "run.memory_limit_gb=0.001",
                       "schedule.post_validation=%s" % ("true" if on else "false"))
            copy = " and its post-validation copy" if on else ""
            m = re.search(r"rank 0: ([0-9.e+-]+) GB for (\d+) parameters with their gradients and AdamW state%s, "
                          % copy, r.text)
            self.assertIsNotNone(m, r.text)
            state[on] = float(m.group(1))
        self.assertAlmostEqual(state[True] / state[False], 8 / 4, delta=0.01)


if __name__ == "__main__":
    import unittest

    unittest.main()
