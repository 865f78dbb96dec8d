#!/usr/bin/python3
"""Fault suite: output protection and size guards. A run never writes over another run's results unless told to
(run.overwrite) or resuming; nothing in the folder changes before every input passed its checks; unwritable
folders and decks too large for the machine are refused at start with exit 2."""
import hashlib
import os
import time
import unittest

from faultlib import FaultCase, mpirun, run1


def digests(folder):
    """name -> sha256 of every file in folder (the run's results)."""
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


class Outputs(FaultCase):
    def first_run(self, **kw):
        deck = self.deck(steps=1, **kw)
        r = mpirun(2, "run", deck)
        self.assertEqual(r.code, 0, r.text)
        before = digests(self.out)
        self.assertIn("trace.h5", before)
        return deck, before

    def test_existing_results_refused_and_kept(self):
        deck, before = self.first_run()
        r = mpirun(2, "run", deck, "run.steps=2")
        self.assertFault(r, 2, r"run\.output = '%s' already holds the results of another run \(trace\.h5, "
                         r"summary\.json, metrics\.jsonl, resolved\.yaml\).*run\.overwrite=true" % self.out)
        self.assertEqual(digests(self.out), before, "a refused run changed the old results")

    def test_failed_input_check_writes_nothing(self):
        # run.overwrite allows replacing, but only after every input passed: the missing checkpoint fails on
        # every rank, and the old trace and resolved.yaml must still be the first run's.
        deck, before = self.first_run()
        r = mpirun(2, "run", deck, "run.steps=2", "run.overwrite=true",
                   "checkpoint.resume=" + os.path.join(self.tmp.name, "no-such-checkpoint"))
        self.assertFault(r, 2, r"checkpoint\.resume")
        self.assertEqual(digests(self.out), before, "a run that failed its input checks changed the old results")

    def test_overwrite_replaces(self):
        deck, before = self.first_run()
        r = mpirun(2, "run", deck, "run.steps=2", "run.overwrite=true")
        self.assertEqual(r.code, 0, r.text)
        self.assertNotEqual(digests(self.out)["resolved.yaml"], before["resolved.yaml"])

    def test_simulate_has_its_own_folder(self):
        deck = os.path.join(self.tmp.name, "sim.yaml")
        with open(deck, "w") as f:
            f.write("run: {name: tiny, steps: 2}\nparallel: {pipeline: 2, microbatches: 4}\n")
        r = run1("simulate", deck, cwd=self.tmp.name)
        self.assertEqual(r.code, 0, r.text)
        sim = os.path.join(self.tmp.name, "runs", "tiny-sim")
        self.assertTrue(os.path.isfile(os.path.join(sim, "summary.json")), r.text)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "runs", "tiny")))
        # The same deck again reproduces the same results (allowed); another deck there is refused.
        self.assertEqual(run1("simulate", deck, cwd=self.tmp.name).code, 0)
        before = digests(sim)
        r = run1("simulate", deck, "run.steps=3", cwd=self.tmp.name)
        self.assertFault(r, 2, r"run\.output = 'runs/tiny-sim' already holds the results of another run")
        self.assertEqual(digests(sim), before)

    def test_unwritable_output_found_at_start(self):
        blocker = os.path.join(self.tmp.name, "a-file")
        open(blocker, "w").close()
        r = mpirun(2, "run", self.deck(steps=1), "run.output=" + blocker + "/out")
        self.assertFault(r, 2, r"run\.output = '.*a-file/out': '.*a-file' is not a folder")
        self.assertNotRegex(r.text, r"step +1/")
        r = run1("simulate", self.deck(steps=1), "run.output=" + blocker + "/out")
        self.assertFault(r, 2, r"run\.output = '.*a-file/out'")

    def test_unwritable_checkpoint_path_found_before_training(self):
        # /proc refuses new files even to root, which passes every permission check.
        r = mpirun(2, "run", self.deck(steps=1), "checkpoint.path=/proc/conductor-checkpoints")
        self.assertFault(r, 2, r"checkpoint\.path = '/proc/conductor-checkpoints': cannot write in '/proc'")
        self.assertNotRegex(r.text, r"step +1/")
        self.assertFalse(os.path.exists(self.out), "a refused run created its folder")

    def test_simulate_size_guard_refuses_at_once(self):
        start = time.monotonic()
        self.assertEqual(run1("--version").code, 0)
        startup = time.monotonic() - start  # loading the binary (LibTorch) on a busy machine
        r = run1("simulate", self.deck(), "parallel.pipeline=65536", "parallel.microbatches=1048576")
        self.assertFault(r, 2, r"the simulation needs about [0-9.e+]+ GB of memory \(\d+ ops per step: parallel\.pipeline 65536 x "
                         r"microbatches 1048576.*"
                         r"above the limit of [0-9.e+]+ GB")
        self.assertLess(r.seconds, 2 * startup + 1.0, "the size guard took too long")
        self.assertFalse(os.path.exists(self.out))

    def test_run_size_guard(self):
        r = mpirun(2, "run", self.deck(steps=1), "run.memory_limit_gb=0.001")
        self.assertFault(r, 2, r"the run needs about [0-9.e+]+ GB of memory on this node \(2 ranks; rank 0: .* "
                         r"parameters .*above the limit of 0\.001 GB set by run\.memory_limit_gb")
        self.assertFalse(os.path.exists(self.out))


if __name__ == "__main__":
    unittest.main()
