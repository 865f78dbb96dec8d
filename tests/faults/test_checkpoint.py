#!/usr/bin/python3
"""Fault suite, checkpoints and policy files (issue 17, items 1, 2, 5, 9): a full disk while writing, files from
different steps, flipped bytes, a missing manifest, an unwritable checkpoint.path, resuming past run.steps and
a policy file with a bad checksum. Each: exit code, every rank out within the deadline, one clear message, and
the checkpoint that was there before still intact (byte for byte, and resumable)."""
import hashlib
import os
import shutil
import subprocess
import tempfile
import unittest

from faultlib import FaultCase, mpirun, run1

CPU = "backend: cpu\n"
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def snapshot(root):
    """{relative path: sha256} of every file under root: what 'intact' is compared against."""
    out = {}
    for folder, _, files in os.walk(root):
        for f in files:
            p = os.path.join(folder, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


class Checkpoints(FaultCase):
    @classmethod
    def setUpClass(cls):
        # One good checkpoint root (steps 2 and 3 kept, latest = 3), copied by every case that damages it.
        cls.base = tempfile.TemporaryDirectory()
        cls.good = os.path.join(cls.base.name, "ck")
        deck = os.path.join(cls.base.name, "deck.yaml")
        with open(deck, "w") as f:
            f.write("run: {name: tiny, steps: 3, output: %s}\n" % os.path.join(cls.base.name, "out") +
                    "parallel: {pipeline: 2, microbatches: 4, microbatch_size: 2}\n"
                    "model: {n_layers: 2, d_model: 32, n_heads: 2, seq_len: 16}\n"
                    "schedule: {kind: zb-h1, execution: readiness}\n" + CPU)
        r = mpirun(2, "run", deck, "checkpoint.path=" + cls.good, "checkpoint.every=1", "checkpoint.keep=2")
        if r.code != 0:
            raise RuntimeError("the base run failed:\n" + r.text)
        cls.step_bytes = sum(os.path.getsize(os.path.join(cls.good, "step-000003", f))
                             for f in os.listdir(os.path.join(cls.good, "step-000003")))

    @classmethod
    def tearDownClass(cls):
        cls.base.cleanup()

    def copy_good(self):
        root = os.path.join(self.tmp.name, "ck")
        shutil.copytree(self.good, root)
        return root

    def resume(self, root, steps=3):
        return mpirun(2, "run", self.deck(steps=steps, extra=CPU), "checkpoint.resume=" + root)

    def assertRefusedIntact(self, root, message, steps=3):
        before = snapshot(root)
        r = self.resume(root, steps)
        self.assertFault(r, 2, message)
        self.assertNotRegex(r.text, r"step +\d+/", "a step ran before the checkpoint was checked")
        self.assertEqual(snapshot(root), before)

    def test_layout_after_a_run(self):
        self.assertEqual(sorted(os.listdir(self.good)), [".conductor.lock", "latest", "step-000002", "step-000003"])
        with open(os.path.join(self.good, "latest")) as f:
            self.assertEqual(f.read(), "step-000003\n")

    def test_files_from_different_steps(self):
        root = self.copy_good()
        shutil.copy(os.path.join(root, "step-000002", "vstage_1.h5"), os.path.join(root, "step-000003", "vstage_1.h5"))
        self.assertRefusedIntact(root, r"step-000003/vstage_1\.h5.*another step")

    def test_flipped_bytes(self):
        root = self.copy_good()
        path = os.path.join(root, "step-000003", "vstage_0.h5")
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            data = f.read(256)
            f.seek(os.path.getsize(path) // 2)
            f.write(bytes(b ^ 0xFF for b in data))
        self.assertRefusedIntact(root, r"vstage_0\.h5' is corrupt: its CRC-32")

    def test_missing_manifest(self):
        root = self.copy_good()
        os.remove(os.path.join(root, "step-000003", "manifest.txt"))
        self.assertRefusedIntact(root, r"step-000003.*manifest\.txt")

    def test_negative_step_in_the_manifest(self):
        # Steps count from 0: a tampered step -3 resumed "steps -3..3" and ran into lr inf and NaN.
        root = self.copy_good()
        manifest = os.path.join(root, "step-000003", "manifest.txt")
        with open(manifest) as f:
            text = f.read()
        with open(manifest, "w") as f:
            f.write(text.replace("\nstep 3\n", "\nstep -3\n"))
        self.assertRefusedIntact(root, r"step-000003/manifest\.txt' line \d+: step -3 is below 0")

    def test_resume_past_run_steps(self):
        root = self.copy_good()
        self.assertRefusedIntact(root, r"at step 3, not below run\.steps = 2", steps=2)
        # One message: not also a warning that the learning rate of a resume that never runs would differ.
        self.assertNotIn("warning", self.resume(root, 2).text)

    def test_unwritable_checkpoint_path(self):
        blocker = os.path.join(self.tmp.name, "a-file")
        open(blocker, "w").close()
        r = mpirun(2, "run", self.deck(extra=CPU), "checkpoint.path=" + os.path.join(blocker, "ck"))
        self.assertFault(r, 2, r"checkpoint\.path = '.*a-file/ck'")
        self.assertNotRegex(r.text, r"step +\d+/", "training ran before checkpoint.path was checked")

    def test_step_folder_as_checkpoint_path(self):
        # A step folder given as checkpoint.path (with the same folder as checkpoint.resume) was told to pass
        # checkpoint.resume=<that folder>, what it had done: now it is told to name the root.
        root = self.copy_good()
        step = os.path.join(root, "step-000002")
        before = snapshot(root)
        r = mpirun(2, "run", self.deck(extra=CPU), "checkpoint.resume=" + step, "checkpoint.path=" + step)
        self.assertFault(r, 2, r"checkpoint\.path = '.*step-000002' is one step of a checkpoint root; "
                               r"checkpoint\.path names the root new steps go into \('.*ck' to continue that run")
        self.assertEqual(snapshot(root), before)

    def test_every_without_a_path_is_said(self):
        # checkpoint.every with checkpoint.path empty wrote no checkpoint and said nothing (a warning, not a
        # refusal: the Slurm scripts validate a train job's deck before they add its checkpoint.path).
        r = mpirun(2, "run", self.deck(steps=1, extra=CPU), "checkpoint.every=1")
        self.assertEqual(r.code, 0, r.text)
        self.assertEqual(r.text.count("checkpoint.every = 1 is set but checkpoint.path is empty: this run writes no "
                                      "checkpoint"), 1, r.text)

    def test_disk_full_keeps_the_previous_step(self):
        mnt = os.path.join(self.tmp.name, "small")
        os.mkdir(mnt)
        # Room for one step and a half: step 1 fits, step 2 runs out of space half-way.
        size = (self.step_bytes * 3 // 2 // 4096 + 1) * 4096
        mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", mnt], capture_output=True)
        if mount.returncode != 0:
            self.skipTest("cannot mount a tmpfs here (%s)" % mount.stderr.decode().strip())
        self.addCleanup(subprocess.run, ["umount", mnt])
        root = os.path.join(mnt, "ck")
        r = mpirun(2, "run", self.deck(steps=3, extra=CPU), "checkpoint.path=" + root, "checkpoint.every=1",
                   "checkpoint.keep=1")
        self.assertFault(r, 1, r"checkpoint step 2: cannot write '.*vstage_\d\.h5': No space left on device")
        # The partial step is gone.
        self.assertEqual(sorted(os.listdir(root)), [".conductor.lock", "latest", "step-000001"])
        # The step before is intact: it resumes and trains on.
        shutil.copytree(root, os.path.join(self.tmp.name, "saved"))
        self.out = os.path.join(self.tmp.name, "out2")
        again = self.resume(os.path.join(self.tmp.name, "saved"), steps=2)
        self.assertEqual(again.code, 0, again.text)
        self.assertRegex(again.text, r"step +2/2")

    def test_resume_with_a_damaged_trace_refused(self):
        # The folder's trace cannot be continued: refused before anything in the folder changes (resolved.yaml,
        # the metrics, the trace itself), with one line; no HDF5 dump, also not at the process's exit.
        import sys
        sys.path.insert(0, os.path.join(SOURCE, "analysis", "tests"))
        from tracegen import damage_object_header
        root = self.copy_good()
        shutil.copytree(os.path.join(self.base.name, "out"), self.out)
        trace = os.path.join(self.out, "trace.h5")
        for damage in ("header", "chunk index", "empty", "truncated"):
            shutil.copy(os.path.join(self.base.name, "out", "trace.h5"), trace)
            if damage == "header":
                damage_object_header(trace, "events")
                why = r"/events: incorrect metadata checksum"
            elif damage == "chunk index":
                # The tables' chunk indexes (extensible arrays, signature EAHD): the objects open, their rows
                # cannot be read. It failed after the open, as an internal "H5Dread failed" with exit 1.
                with open(trace, "r+b") as fp:
                    data = fp.read()
                    at = data.find(b"EAHD")
                    self.assertGreater(at, 0)
                    fp.seek(at + 8)
                    fp.write(b"\xde\xad\xbe\xef" * 2)
                why = r"/(events|steps) rows: "
            elif damage == "empty":
                open(trace, "w").close()
                why = r"not an HDF5 file: file signature not found"
            else:
                os.truncate(trace, os.path.getsize(trace) // 2)
                why = r"not an HDF5 file: truncated file"
            before = snapshot(self.out)
            r = mpirun(2, "run", self.deck(steps=3, extra=CPU), "checkpoint.resume=" + os.path.join(root, "step-000002"))
            self.assertFault(r, 2, r"the trace to continue, '%s', cannot be read \(%s.*\); move it away" % (trace, why))
            self.assertNotRegex(r.text, r"HDF5:|HDF5-DIAG|T_top")
            self.assertEqual(snapshot(self.out), before, damage)

    def test_resume_continues_the_trace(self):
        # A requeued job resumes from step 2 into its own output folder, whose trace already holds step 3 (index
        # 2) from the first attempt: that row is dropped and rewritten, the earlier ones kept, none doubled.
        import h5py
        root = self.copy_good()
        shutil.copytree(os.path.join(self.base.name, "out"), self.out)
        with h5py.File(os.path.join(self.out, "trace.h5"), "r") as f:
            before = f["steps"][:]
        r = mpirun(2, "run", self.deck(steps=3, extra=CPU), "checkpoint.resume=" + os.path.join(root, "step-000002"))
        self.assertEqual(r.code, 0, r.text)
        self.assertRegex(r.text, r"continuing the trace .*trace\.h5 at step 3")
        with h5py.File(os.path.join(self.out, "trace.h5"), "r") as f:
            steps = f["steps"][:]
            events = f["events"][:]
        self.assertEqual(list(steps["step"]), [0, 1, 2])
        self.assertEqual(list(steps["loss"][:2]), list(before["loss"][:2]))
        self.assertEqual(steps["loss"][2], before["loss"][2])  # the same loss as the uninterrupted run
        self.assertEqual(sorted(set(events["step"].tolist())), [0, 1, 2])


    def test_resume_checks_the_checkpoints_own_deck(self):
        # The checkpoint records its run's deck. Into a folder holding another run, a checkpoint of a different
        # model (model.init_seed) was continued with exit 0, splicing two models' losses in one trace and metrics.
        # Into a new folder, a different batch shape (the data stream) ran on; optimizer changes run, with a
        # warning naming them.
        other = os.path.join(self.tmp.name, "other-ck")
        r = mpirun(2, "run", self.deck(steps=3, extra=CPU, name="other.yaml"), "model.init_seed=7",
                   "run.output=" + os.path.join(self.tmp.name, "other"), "checkpoint.path=" + other,
                   "checkpoint.every=2")
        self.assertEqual(r.code, 0, r.text)
        shutil.copytree(os.path.join(self.base.name, "out"), self.out)
        before = snapshot(self.out)
        r = mpirun(2, "run", self.deck(steps=3, extra=CPU), "checkpoint.resume=" + os.path.join(other, "step-000002"),
                   "checkpoint.path=" + os.path.join(self.tmp.name, "ck3"))
        self.assertFault(r, 2, r"checkpoint\.resume = '.*step-000002' was written by another run than the one in "
                               r"run\.output = '.*' \(the checkpoint's deck differs: model\.init_seed = 42 here, 7 "
                               r"there")
        self.assertEqual(snapshot(self.out), before)
        fresh = os.path.join(self.tmp.name, "fresh")
        r = mpirun(2, "run", self.deck(steps=3, extra=CPU), "checkpoint.resume=" + self.good,
                   "run.output=" + fresh, "parallel.microbatches=8")
        self.assertFault(r, 2, r"the data stream would not continue: parallel\.microbatches = 8 here, 4 there")
        self.assertFalse(os.path.exists(fresh))
        r = mpirun(2, "run", self.deck(steps=4, extra=CPU), "checkpoint.resume=" + self.good,
                   "run.output=" + fresh, "optim.lr=0.001")
        self.assertEqual(r.code, 0, r.text)
        self.assertRegex(r.text, r"warning: checkpoint\.resume = .*resuming with optim\.lr = 0\.001 here, .* there")
        # Migration's groups are another order of addition (README's one exception): turning it on is said too;
        # its link only moves work.
        r = mpirun(2, "run", self.deck(steps=4, extra=CPU), "checkpoint.resume=" + self.good,
                   "run.output=" + os.path.join(self.tmp.name, "migrating"), "migration.enabled=true")
        self.assertEqual(r.code, 0, r.text)
        self.assertRegex(r.text, r"warning: checkpoint\.resume = .*resuming with migration\.enabled = true here, "
                                 r"false there;.*migration's order of addition\) differ from an uninterrupted run")
        r = mpirun(2, "run", self.deck(steps=4, extra=CPU), "checkpoint.resume=" + self.good,
                   "run.output=" + os.path.join(self.tmp.name, "linked"), "migration.link=nvlink")
        self.assertEqual(r.code, 0, r.text)
        self.assertNotIn("migration.link", r.text)  # the warning names only the decay's run.steps
        self.assertIn("resuming with run.steps = 4", r.text)
        # The same units in another order are the same groups: no warning for them, from a checkpoint with
        # migration on.
        ordered = os.path.join(self.tmp.name, "ordered-ck")
        r = mpirun(2, "run", self.deck(steps=2, extra=CPU, name="units.yaml"), "migration.enabled=true",
                   "migration.units=[heads, mlp]", "run.output=" + os.path.join(self.tmp.name, "units"),
                   "checkpoint.path=" + ordered, "optim.decay_steps=3")
        self.assertEqual(r.code, 0, r.text)
        r = mpirun(2, "run", self.deck(steps=2, extra=CPU, name="units.yaml"), "migration.enabled=true",
                   "migration.units=[mlp, heads]", "run.output=" + os.path.join(self.tmp.name, "units2"),
                   "checkpoint.resume=" + ordered, "run.steps=3", "optim.decay_steps=3")
        self.assertEqual(r.code, 0, r.text)
        self.assertNotIn("warning", r.text)
        # The decay's horizon kept by another pair of optim.decay_steps and run.steps changes no step: said before
        # ("resuming with optim.decay_steps = 0 here, 3 there"), though the losses are those of an uninterrupted run.
        r = mpirun(2, "run", self.deck(steps=2, extra=CPU, name="units.yaml"), "migration.enabled=true",
                   "migration.units=[heads, mlp]", "run.output=" + os.path.join(self.tmp.name, "units3"),
                   "checkpoint.resume=" + ordered, "run.steps=3", "optim.decay_steps=0")
        self.assertEqual(r.code, 0, r.text)
        self.assertNotIn("warning", r.text)
        r = mpirun(2, "run", self.deck(steps=4, extra=CPU), "checkpoint.resume=" + self.good,
                   "run.output=" + os.path.join(self.tmp.name, "horizon"), "optim.decay_steps=3")
        self.assertEqual(r.code, 0, r.text)
        self.assertNotIn("warning", r.text)
        r = mpirun(2, "run", self.deck(steps=4, extra=CPU), "checkpoint.resume=" + self.good,
                   "run.output=" + os.path.join(self.tmp.name, "horizon2"), "optim.decay_steps=4")
        self.assertEqual(r.code, 0, r.text)
        self.assertIn("resuming with optim.decay_steps = 4 here, 0 there", r.text)

    def test_refused_resume_creates_no_checkpoint_path(self):
        # The new checkpoint.path was probed and locked before the resume's checks: a refused resume left it
        # created, holding .conductor.lock.
        ck = os.path.join(self.tmp.name, "new-ck")
        r = mpirun(2, "run", self.deck(steps=6, extra=CPU), "checkpoint.resume=" + os.path.join(self.good, "step-000009"),
                   "checkpoint.path=" + ck, "run.output=" + os.path.join(self.tmp.name, "new-out"))
        self.assertFault(r, 2, r"step-000009")
        self.assertFalse(os.path.exists(ck))

    def test_resume_with_other_layers_names_the_keys(self):
        # A checkpoint of 2 layers resumed with model.n_layers = 3: the stage files' layer ranges differ, and the
        # message said only "layers 0..0" against "0..1" (or "2..1" for a stage of none), not which keys to check.
        r = mpirun(2, "run", self.deck(steps=3, extra=CPU), "checkpoint.resume=" + self.good, "model.n_layers=3",
                   "run.output=" + os.path.join(self.tmp.name, "fresh"))
        self.assertFault(r, 2, r"vstage_0\.h5' holds layers 0\.\.0 of a 2-virtual-stage split; this model's virtual "
                               r"stage 0 holds layers 0\.\.1 of 2 \(model\.n_layers or model\.layers_per_stage differ")

    def test_validate_checks_the_resumed_checkpoint_as_the_loader_does(self):
        # validate answered 0 for resumes every run refused when its ranks loaded the checkpoint: another model
        # shape, another run.seed, a batch shape the data stream cannot continue over, a truncated or missing stage
        # file; and, with --output-for run, a trace in run.output the run could not continue. The bytes' CRC-32
        # stays the run's check (it reads every weight).
        deck = self.deck(steps=4, extra=CPU)
        fresh = "run.output=" + os.path.join(self.tmp.name, "fresh")
        self.assertEqual(run1("validate", deck, "checkpoint.resume=" + self.good, fresh).code, 0)
        for override, message in [
                ("model.d_model=64", r"vstage_0\.h5': dataset /params/wte has shape \[\d+, 32\] but this model needs "
                                     r"\[\d+, 64\]"),
                ("run.seed=7", r"was written with run\.seed = \d+ but the deck has run\.seed = 7"),
                ("parallel.microbatches=8", r"the data stream would not continue: parallel\.microbatches = 8 here, 4 "
                                            r"there")]:
            self.assertFault(run1("validate", deck, "checkpoint.resume=" + self.good, fresh, override), 2, message)
        root = self.copy_good()
        with open(os.path.join(root, "step-000003", "vstage_1.h5"), "r+b") as f:
            f.truncate(5000)
        self.assertFault(run1("validate", deck, "checkpoint.resume=" + root, fresh), 2,
                         r"vstage_1\.h5' has 5000 bytes but '.*manifest\.txt' says \d+ \(truncated")
        os.remove(os.path.join(root, "step-000003", "vstage_1.h5"))
        self.assertFault(run1("validate", deck, "checkpoint.resume=" + root, fresh), 2,
                         r"vstage_1\.h5' is missing \(listed in")
        ck = os.path.join(self.tmp.name, "own-ck")
        r = mpirun(2, "run", self.deck(steps=2, extra=CPU), "checkpoint.path=" + ck)
        self.assertEqual(r.code, 0, r.text)
        with open(os.path.join(self.out, "trace.h5"), "r+b") as f:
            f.truncate(3000)
        self.assertFault(run1("validate", "--output-for", "run", deck, "checkpoint.path=" + ck,
                              "checkpoint.resume=" + ck), 2, r"the trace to continue, '.*trace\.h5', cannot be read")

    def resume_a_longer_run_from_step_2(self, copy_out):
        """A run of 5 steps (checkpoints 1..5), resumed into its own folder from step 2 (in its root, or copied
        out of it) with run.steps = 3 and another checkpoint.path; returns the result and whether the folder
        stayed as it was."""
        ck = os.path.join(self.tmp.name, "long-ck")
        r = mpirun(2, "run", self.deck(steps=5, extra=CPU), "checkpoint.path=" + ck, "checkpoint.every=1",
                   "checkpoint.keep=0")
        self.assertEqual(r.code, 0, r.text)
        step = os.path.join(ck, "step-000002")
        if copy_out:
            step = os.path.join(self.tmp.name, "snap", "step-000002")
            shutil.copytree(os.path.join(ck, "step-000002"), step)
        before = snapshot(self.out)
        r = mpirun(2, "run", self.deck(steps=3, extra=CPU), "checkpoint.resume=" + step,
                   "checkpoint.path=" + os.path.join(self.tmp.name, "ck2"))
        return r, snapshot(self.out) == before

    def test_resume_from_an_older_step_keeps_a_longer_runs_rows(self):
        # The run's steps 3 and 4 were dropped from the trace and metrics, exit 0.
        r, kept = self.resume_a_longer_run_from_step_2(copy_out=False)
        self.assertFault(r, 2, r"is step 2, but the run in run\.output = '.*' went on to step 5 \(complete "
                               r"checkpoints 3 \.\. 5\): continuing its trace to run\.steps = 3 would drop")
        self.assertTrue(kept)

    def test_resume_from_a_copied_older_step_keeps_a_longer_runs_rows(self):
        # With the step copied out of the root (which then holds no later step), the folder's trace and metrics
        # alone tell that the run there went on to step 5; its rows 4 and 5 were dropped, exit 0.
        r, kept = self.resume_a_longer_run_from_step_2(copy_out=True)
        self.assertFault(r, 2, r"is step 2, but the run in run\.output = '.*' went on to step 5 \('.*trace\.h5' holds "
                               r"its rows\): continuing it to run\.steps = 3 would drop the rows")
        self.assertTrue(kept)

    def test_resume_from_a_step_past_the_folders_rows_is_refused(self):
        # A run of 2 steps, continued to step 4 by another run into another folder through the same checkpoint
        # root; resuming the first folder from that root's latest (step 4) appended steps 5 .. 6 after its rows
        # 1 .. 2: trace and metrics without steps 3 and 4, exit 0.
        ck = os.path.join(self.tmp.name, "shared-ck")
        r = mpirun(2, "run", self.deck(steps=2, extra=CPU), "checkpoint.path=" + ck)
        self.assertEqual(r.code, 0, r.text)
        other = os.path.join(self.tmp.name, "other")
        r = mpirun(2, "run", self.deck(steps=4, extra=CPU), "checkpoint.path=" + ck, "checkpoint.resume=" + ck,
                   "run.output=" + other)
        self.assertEqual(r.code, 0, r.text)
        before = snapshot(self.out)
        r = mpirun(2, "run", self.deck(steps=6, extra=CPU), "checkpoint.path=" + ck, "checkpoint.resume=" + ck)
        self.assertFault(r, 2, r"is step 4, but '.*trace\.h5' ends at step 2: continuing it would leave out the steps "
                               r"3 \.\. 4 .*Resume into a new run\.output, or from a checkpoint of step 2 or earlier")
        self.assertEqual(snapshot(self.out), before)

    def test_resume_after_a_killed_attempt(self):
        # The first attempt dies at step 4 (an injected failure: MPI_Abort, as after SIGKILL or a lost node), after
        # its checkpoint of step 3, leaving trace.h5 marked open for writing and metrics.jsonl with rows past the
        # checkpoint. Resuming into the same folder continued nothing before: "the trace to continue cannot be read
        # (... already open for write)", exit 2, on every requeue. Now it continues: every step once in the trace
        # and the metrics, the losses those of an uninterrupted run.
        import h5py
        import json
        ck = os.path.join(self.tmp.name, "killed-ck")
        deck = self.deck(steps=5, extra=CPU)
        env = dict(os.environ, CONDUCTOR_INJECT_FAILURE="1:4")
        first = mpirun(2, "run", deck, "checkpoint.path=" + ck, "checkpoint.every=3", env=env)
        self.assertNotEqual(first.code, 0, first.text)
        r = mpirun(2, "run", deck, "checkpoint.path=" + ck, "checkpoint.every=3", "checkpoint.resume=" + ck)
        self.assertEqual(r.code, 0, r.text)
        self.assertRegex(r.text, r"continuing the trace .*trace\.h5 at step 4")
        with h5py.File(os.path.join(self.out, "trace.h5"), "r") as f:
            self.assertEqual(list(f["steps"]["step"]), [0, 1, 2, 3, 4])
            resumed = list(f["steps"]["loss"])
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            self.assertEqual([json.loads(line)["step"] for line in f], [0, 1, 2, 3, 4])
        whole = os.path.join(self.tmp.name, "whole")
        r = mpirun(2, "run", deck, "run.output=" + whole)
        self.assertEqual(r.code, 0, r.text)
        with h5py.File(os.path.join(whole, "trace.h5"), "r") as f:
            self.assertEqual(resumed, list(f["steps"]["loss"]))


    def test_resume_from_an_older_step_into_its_root(self):
        # The root holds steps 2 and 3 (latest 3). Resuming from step 2 with checkpoint.path = that root wrote step 3
        # again, replacing the complete one (with run.steps changed, with other weights). Refused, naming the steps;
        # from the root (its latest) it resumes; run.overwrite=true allows it. A trailing '/' names the same folder.
        root = self.copy_good()
        before = snapshot(root)
        for resume in ("step-000002", "step-000002/"):
            r = mpirun(2, "run", self.deck(steps=5, extra=CPU), "checkpoint.path=" + root,
                       "checkpoint.resume=" + os.path.join(root, resume))
            self.assertFault(r, 2, r"checkpoint\.resume = '.*step-000002' is step 2, but checkpoint\.path holds later "
                                   r"complete steps \(3\) that this run would write again; nothing was written")
            self.assertEqual(snapshot(root), before)
        r = mpirun(2, "run", self.deck(steps=4, extra=CPU), "checkpoint.path=" + root, "checkpoint.resume=" + root)
        self.assertEqual(r.code, 0, r.text)


    def test_skipped_nonfinite_steps_count_across_a_resume(self):
        # optim.skip_nonfinite_steps = 1 allows one skipped step per run. Uninterrupted, a second non-finite step
        # stops the run; resumed after the first skip, the count started again at 0, so the resumed run skipped the
        # second one too and finished (exit 0). The manifest now carries the count.
        deck = self.deck(steps=6, extra=CPU)
        env = dict(os.environ, CONDUCTOR_INJECT_NAN="1:1,0:3")
        ck = os.path.join(self.tmp.name, "skip-ck")
        keys = ("optim.skip_nonfinite_steps=1", "checkpoint.every=1", "checkpoint.keep=0")
        whole = mpirun(2, "run", deck, "checkpoint.path=" + ck, *keys, env=env)
        self.assertFault(whole, 1, r"1 steps already skipped, the limit of optim\.skip_nonfinite_steps")
        with open(os.path.join(ck, "step-000002", "manifest.txt")) as f:
            self.assertIn("skipped_nonfinite 1\n", f.read())
        self.out = os.path.join(self.tmp.name, "resumed")
        resumed = mpirun(2, "run", deck, "run.output=" + self.out, "checkpoint.path=" + ck + "2", *keys,
                         "checkpoint.resume=" + os.path.join(ck, "step-000002"), env=env)
        self.assertFault(resumed, 1, r"1 steps already skipped, the limit of optim\.skip_nonfinite_steps")


class PolicyFiles(FaultCase):
    @unittest.skipIf(os.environ.get("CONDUCTOR_HAVE_POLICY") == "0", "built with -DCONDUCTOR_POLICY=OFF: no policy files")
    def test_bad_policy_checksum(self):
        bad = os.path.join(self.tmp.name, "bad.pt")
        with open(os.path.join(SOURCE, "inputs", "policies", "default.pt"), "rb") as f:
            data = bytearray(f.read())
        data[len(data) // 2] ^= 0x01
        with open(bad, "wb") as f:
            f.write(data)
        r = run1("simulate", self.deck(), "scheduler.kind=ppo", "scheduler.policy=" + bad)
        self.assertFault(r, 2, r"policy file '.*bad\.pt' is corrupt: its body's CRC-32")


if __name__ == "__main__":
    unittest.main()
