#!/usr/bin/python3
"""Fault suite, optim.skip_nonfinite_steps (issue 17, item 4): a step whose gradients are not finite
(CONDUCTOR_INJECT_NAN=RANK:STEP[,...] makes one rank's gradients read as NaN) is really skipped: the run goes on,
no update of weights or AdamW moments is applied, while data and step count advance. Proof: a reference built
without the skip mechanism (an uninterrupted run's checkpoint after step k-1, relabelled as step k, resumed)
gives the same losses and bit-identical weights and moments at the end. The counter counts and the limit
holds: one more non-finite step than allowed stops the run (exit 1, one message, no checkpoint of that step)."""
import glob
import os
import re
import shutil
import zlib

import h5py
import numpy as np

from faultlib import RAW_DUMP, FaultCase, mpirun

SKIPPED = 2  # 0-based index of the step whose gradients are NaN (printed as step 3)
STEPS = 6


def losses(out):
    with h5py.File(os.path.join(out, "trace.h5"), "r") as t:
        steps = t["steps"][...]
    return list(steps["step"]), steps["loss"]


def relabel(src, dst_root, step):
    """Copies checkpoint step folder `src` to dst_root/step-<step> as if it were taken after `step` steps: the
    step and the data stream's position in every file's meta, the manifest's step and CRCs, and `latest`."""
    dst = os.path.join(dst_root, "step-%06d" % step)
    shutil.copytree(src, dst)
    manifest = open(os.path.join(dst, "manifest.txt")).read()
    for name in re.findall(r"^file (\S+) ", manifest, re.M):
        path = os.path.join(dst, name)
        with h5py.File(path, "r+") as f:
            f["meta/step"][()] = step
            rng = f["meta/rng_state"][()]
            rng[1] = step
            f["meta/rng_state"][...] = rng
        with open(path, "rb") as fh:
            data = fh.read()
        manifest = re.sub(r"^file %s crc32 0x[0-9a-f]+ bytes \d+$" % re.escape(name),
                          "file %s crc32 0x%08x bytes %d" % (name, zlib.crc32(data), len(data)), manifest,
                          flags=re.M)
    manifest = re.sub(r"^step \d+$", "step %d" % step, manifest, flags=re.M)
    with open(os.path.join(dst, "manifest.txt"), "w") as f:
        f.write(manifest)
    with open(os.path.join(dst_root, "latest"), "w") as f:
        f.write("step-%06d\n" % step)


def state(ckpt_root, step):
    """{file/dataset: array} of the weights and AdamW moments in a checkpoint step."""
    out = {}
    for path in sorted(glob.glob(os.path.join(ckpt_root, "step-%06d" % step, "*.h5"))):
        with h5py.File(path, "r") as f:
            for group in ("params", "adam_m", "adam_v"):
                f[group].visititems(lambda n, o, p=path, g=group: out.__setitem__(
                    "%s:%s/%s" % (os.path.basename(p), g, n), o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


class Skip(FaultCase):
    def run_deck(self, name, *overrides, env=None):
        out = os.path.join(self.tmp.name, name)
        deck = self.deck(steps=STEPS, p=2, m=4, name=name + ".yaml", extra="backend: cpu\n")
        res = mpirun(2, "run", deck, "run.output=" + out, *overrides, env=env)
        return res, out

    def nan_env(self, spec):
        return dict(os.environ, CONDUCTOR_INJECT_NAN=spec)

    def test_skipped_step_is_not_applied(self):
        ck_skip = os.path.join(self.tmp.name, "ck-skip")
        res, out = self.run_deck("skip", "optim.skip_nonfinite_steps=1", "checkpoint.path=" + ck_skip,
                                 env=self.nan_env("1:%d" % SKIPPED))
        self.assertEqual(res.code, 0, res.text)
        self.assertRegex(res.text, r"step %d: non-finite gradient norm \(first in stage 1, rank 1\); step skipped, "
                         r"weights and optimizer state unchanged \(1 of 1 allowed by optim.skip_nonfinite_steps\)"
                         % (SKIPPED + 1))
        self.assertIsNone(RAW_DUMP.search(res.text), res.text)
        steps, skip_losses = losses(out)
        self.assertEqual(steps, list(range(STEPS)))
        self.assertTrue(np.all(np.isfinite(skip_losses)), skip_losses)

        # The uninterrupted run: the same losses up to the skipped step (its loss comes before any update),
        # different ones after it (the skip changed something).
        ck_ref = os.path.join(self.tmp.name, "ck-ref")
        res, out = self.run_deck("ref", "checkpoint.path=" + ck_ref, "checkpoint.every=1",
                                 "checkpoint.keep=%d" % STEPS)
        self.assertEqual(res.code, 0, res.text)
        _, ref_losses = losses(out)
        self.assertTrue(np.array_equal(skip_losses[:SKIPPED + 1], ref_losses[:SKIPPED + 1]))
        self.assertNotEqual(skip_losses[SKIPPED + 1], ref_losses[SKIPPED + 1])

        # The same without the skip mechanism: the state after SKIPPED steps, relabelled as after SKIPPED + 1
        # (the data and the step count move on, nothing else), resumed to the end.
        ck_manual = os.path.join(self.tmp.name, "ck-manual")
        os.makedirs(ck_manual)
        relabel(os.path.join(ck_ref, "step-%06d" % SKIPPED), ck_manual, SKIPPED + 1)
        res, out = self.run_deck("manual", "checkpoint.resume=" + ck_manual, "checkpoint.path=" + ck_manual)
        self.assertEqual(res.code, 0, res.text)
        steps, manual_losses = losses(out)
        self.assertEqual(steps, list(range(SKIPPED + 1, STEPS)))
        self.assertTrue(np.array_equal(manual_losses, skip_losses[SKIPPED + 1:]),
                        "skip %s vs manual %s" % (skip_losses, manual_losses))
        skipped, manual = state(ck_skip, STEPS), state(ck_manual, STEPS)
        self.assertEqual(sorted(skipped), sorted(manual))
        self.assertTrue(skipped)
        for key in skipped:
            self.assertTrue(np.array_equal(skipped[key], manual[key]), key)

    def test_limit_counts_and_stops(self):
        # Two non-finite steps (index 1 on rank 1, index 3 on rank 0): a limit of 2 skips both and finishes...
        spec = "1:1,0:3"
        res, out = self.run_deck("two", "optim.skip_nonfinite_steps=2", env=self.nan_env(spec))
        self.assertEqual(res.code, 0, res.text)
        self.assertRegex(res.text, r"step 2: non-finite gradient norm \(first in stage 1, rank 1\); step skipped.*"
                         r"\(1 of 2 allowed")
        self.assertRegex(res.text, r"step 4: non-finite gradient norm \(first in stage 0, rank 0\); step skipped.*"
                         r"\(2 of 2 allowed")
        self.assertEqual(len(losses(out)[0]), STEPS)

        # ...a limit of 1 skips the first and stops at the second: exit 1, no update, no checkpoint of it.
        ckpt = os.path.join(self.tmp.name, "ck-one")
        res, out = self.run_deck("one", "optim.skip_nonfinite_steps=1", "checkpoint.path=" + ckpt,
                                 "checkpoint.every=1", env=self.nan_env(spec))
        self.assertFault(res, 1, r"step 4: non-finite gradient norm \(first in stage 0, rank 0\); stopping with no "
                         r"update and no checkpoint of this step \(1 steps already skipped, the limit of "
                         r"optim.skip_nonfinite_steps\)")
        self.assertRegex(res.text, r"step 2: .*step skipped.*\(1 of 1 allowed")
        self.assertEqual(len(losses(out)[0]), 4)  # the stopping step is in the trace
        with open(os.path.join(ckpt, "latest")) as f:
            self.assertEqual(f.read().strip(), "step-000003")
        self.assertFalse(os.path.exists(os.path.join(ckpt, "step-000004")))


if __name__ == "__main__":
    import unittest
    unittest.main()
