#!/usr/bin/python3
"""Computation migration in `conductor run` on the emulated backend (docs/migration.md, "In the runtime"): with a
slow stage set by the deck's costs (20 ms ops, 40 ms on the straggler), p = 2 and p = 4, the straggler's ops are
shared with idle peers, the helpers' slice work is in the trace as HELP_* rows naming the owner, every op of every
step completes with the watchdog quiet. Whether it is faster is a speed claim: bench/bench_runtime.py --migration
(a timed assertion here failed when other builds loaded the cores: the ranks poll while they wait). A deck asking
for vocabulary groups on the cpu backend with more slices than vocabulary columns is refused naming both; a
helper that stops mid-help ends the run through the owner's watchdog; a busy helper declines a forced request at
once and the owner computes those slices itself. Status messages go only to ranks that decide
(none with migration.force but the Finished of each step)."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import h5py
import numpy as np

BIN = os.environ["CONDUCTOR_BINARY"]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")

STEPS, MICROBATCHES = 3, 8
CLOCK_ALIGNMENT_NS = 1_000_000  # docs/trace.md: a fraction of a millisecond on a loaded node
HELP_F = 7  # HELP_F, HELP_B, HELP_W, HELP_BW = 7..10: the owner's op kind + 7


def deck(out, p, straggler, backend="emulated"):
    costs = ", ".join("40.0" if r == straggler else "20.0" for r in range(p))
    return f"""\
backend: {backend}
run: {{name: mig, steps: {STEPS}, output: {out}}}
parallel: {{pipeline: {p}, microbatches: {MICROBATCHES}}}
model: {{n_layers: 4, d_model: 64, n_heads: 4, seq_len: 32}}
schedule: {{kind: 1f1b, execution: strict}}
cost: {{forward: [{costs}], backward_input: [{costs}], backward_weight: [{costs}], comm: 0.5}}
migration: {{enabled: true, slices: 4, link: nvlink}}
runtime: {{watchdog_s: 30}}
"""


def status_messages(line):
    """The status messages counted in conductor run's line 'migration: ..., N status messages (...)'."""
    return int(line.split(" status messages")[0].rsplit(", ", 1)[1])


def forced_cpu_deck(out, steps, watchdog_s, force="W,BW"):
    return f"""\
backend: cpu
run: {{name: forced, steps: {steps}, output: {out}}}
parallel: {{pipeline: 2, microbatches: 4, microbatch_size: 2}}
model: {{n_layers: 2, d_model: 32, n_heads: 2, seq_len: 16}}
schedule: {{kind: zb-h1, execution: strict}}
migration: {{enabled: true, units: [mlp], slices: 4, force: ["1->0:{force}:2"]}}
runtime: {{watchdog_s: {watchdog_s}}}
"""


class EmulatedMigrationTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def run_deck(self, p, text, *overrides):
        path = os.path.join(self.tmp.name, "deck.yaml")
        with open(path, "w") as f:
            f.write(text)
        return subprocess.run([MPIEXEC, "-n", str(p), "--oversubscribe", BIN, "run", path, *overrides],
                              capture_output=True, text=True, timeout=240)

    def run_emulated(self, p, straggler, migration):
        out = os.path.join(self.tmp.name, f"p{p}-{'on' if migration else 'off'}")
        proc = self.run_deck(p, deck(out, p, straggler), "migration.enabled=" + ("true" if migration else "false"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertNotIn("watchdog", proc.stderr.lower())
        with h5py.File(os.path.join(out, "trace.h5"), "r") as t:
            events = t["events"][:]
        with open(os.path.join(out, "summary.json")) as f:
            return events, proc.stdout, json.load(f)

    def check(self, p, straggler):
        events, stdout, summary = self.run_emulated(p, straggler, True)
        ops = events[events["kind"] <= 3]
        helps = events[(events["kind"] >= HELP_F) & (events["kind"] <= HELP_F + 3)]
        # Every op of every step ran, exactly once (1F1B: F and BW per stage and microbatch).
        keys = {(int(e["step"]), int(e["stage"]), int(e["microbatch"]), int(e["kind"])) for e in ops}
        self.assertEqual(len(ops), STEPS * p * MICROBATCHES * 2)
        self.assertEqual(len(keys), len(ops))
        # Migrations happened, the straggler's among them (idle ranks share theirs too); each is one HELP row on another rank naming its owner,
        # with the owner's slice count, and each HELP row belongs to a migrated op of its owner.
        migrated = ops[ops["migrated"] > 0]
        self.assertGreater(len(migrated), STEPS, "the straggler's ops should be shared")
        self.assertGreaterEqual(int(np.sum(migrated["rank"] == straggler)), STEPS)
        self.assertEqual(len(helps), len(migrated))
        owner_rows = {(int(e["step"]), int(e["stage"]), int(e["microbatch"]), int(e["kind"])): e for e in migrated}
        for h in helps:
            key = (int(h["step"]), int(h["stage"]), int(h["microbatch"]), int(h["kind"]) - HELP_F)
            self.assertIn(key, owner_rows)
            owner = owner_rows[key]
            self.assertEqual(int(h["peer"]), int(owner["rank"]))
            self.assertNotEqual(int(h["rank"]), int(h["peer"]))
            self.assertEqual(int(h["migrated"]), int(owner["migrated"]))
            self.assertGreater(int(h["bytes"]), 0)
            # The help runs within the owner's op (from its decision until both parts are in), up to the
            # alignment of two ranks' clocks.
            self.assertGreaterEqual(int(h["start_ns"]), int(owner["start_ns"]) - CLOCK_ALIGNMENT_NS)
            self.assertLessEqual(int(h["end_ns"]), int(owner["end_ns"]) + CLOCK_ALIGNMENT_NS)
        # summary.json's migration block is the trace's: per step the ops that gave slices and the bytes of the
        # helps, and per link (owner, helper) the bytes, means over the steps.
        m = summary["migration"]
        for s, row in enumerate(m["steps"]):
            self.assertEqual(row["migrated_ops"], int(np.sum(migrated["step"] == s)))
            self.assertEqual(row["bytes"], int(np.sum(helps[helps["step"] == s]["bytes"])))
        self.assertEqual(len(m["steps"]), STEPS)
        self.assertAlmostEqual(m["bytes_per_step"], float(np.sum(helps["bytes"])) / STEPS, delta=1e-6 * m["bytes_per_step"])
        self.assertAlmostEqual(m["migrated_ops_per_step"], len(migrated) / STEPS)
        links = {(l["owner"], l["helper"]): l["bytes_per_step"] for l in m["links"]}
        pairs = {(int(h["peer"]), int(h["rank"])) for h in helps}
        self.assertEqual(set(links), pairs)
        for (owner, helper), b in links.items():
            mine = helps[(helps["peer"] == owner) & (helps["rank"] == helper)]
            self.assertAlmostEqual(b, float(np.sum(mine["bytes"])) / STEPS, delta=1e-6 * b)
        # The run's control-overhead line counts the slices the owner rows say moved (its time is bench material).
        line = [l for l in stdout.splitlines() if l.startswith("migration: ")]
        self.assertEqual(len(line), 1, stdout)
        self.assertIn("migration: %d slices moved in " % int(np.sum(migrated["migrated"])), line[0])
        # Every rank decides, so statuses flow beyond the Finished each rank sends each peer per step.
        self.assertGreater(status_messages(line[0]), STEPS * p * (p - 1))

    def test_p2_straggler_first_stage(self):
        self.check(2, 0)

    def test_a_helper_without_memory_room_is_not_offered(self):
        # GPipe holds every microbatch's activations on rank 0 until its backwards (its memory limit, m M_F, is
        # full), so the simulator's offers from rank 0 carry no room and it never helps. The runtime's offers
        # carried no memory at all: rank 0 took 1-2 of rank 1's ops per step that the simulator never gives it.
        text = f"""\
backend: emulated
run: {{name: room, steps: 3, output: OUT}}
parallel: {{pipeline: 2, microbatches: 8}}
schedule: {{kind: gpipe, execution: strict}}
cost: {{forward: [30.0, 15.0], backward_input: [30.0, 15.0], backward_weight: [30.0, 15.0], comm: 1.0}}
migration: {{enabled: true, link: nvlink}}
runtime: {{watchdog_s: 30}}
"""
        pairs = {}
        for command in ("run", "simulate"):
            out = os.path.join(self.tmp.name, command)
            path = os.path.join(self.tmp.name, command + ".yaml")
            with open(path, "w") as f:
                f.write(text.replace("OUT", out))
            cmd = [MPIEXEC, "-n", "2", "--oversubscribe", BIN, "run", path] if command == "run" else [BIN, "simulate", path]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with h5py.File(os.path.join(out, "trace.h5"), "r") as t:
                events = t["events"][:]
            helps = events[(events["kind"] >= HELP_F) & (events["kind"] <= HELP_F + 3)]
            self.assertGreater(len(helps), 0, command)
            pairs[command] = {(int(h["peer"]), int(h["rank"])) for h in helps}  # (owner, helper)
        self.assertEqual(pairs["simulate"], {(0, 1)})
        self.assertEqual(pairs["run"], pairs["simulate"])

    def test_p4_straggler_second_stage(self):
        self.check(4, 1)

    def test_busy_helper_declines_and_the_owner_computes_the_slices(self):
        """Rank 0's F ops are forced to give 2 of 4 slices to rank 1, which is often running its own op when a
        request comes: it declines at once, and its reply says so (the verdict travels in the reply itself, so the
        owner cannot end its op before it learns). A declined op keeps its slices: migrated 0, no HELP row, and it
        lasts its whole modelled time; a served one has exactly one HELP row. The run's line counts the declines."""
        out = os.path.join(self.tmp.name, "declined")
        proc = self.run_deck(2, deck(out, 2, -1), "migration.force=[0->1:F:2]", "run.steps=2")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with h5py.File(os.path.join(out, "trace.h5"), "r") as t:
            events = t["events"][:]
        forwards = events[(events["rank"] == 0) & (events["kind"] == 0)]
        helps = events[events["kind"] == HELP_F]
        served, declined = forwards[forwards["migrated"] == 2], forwards[forwards["migrated"] == 0]
        self.assertEqual(len(served) + len(declined), 2 * MICROBATCHES)
        self.assertEqual(len(helps), len(served))
        self.assertTrue(np.all(helps["rank"] == 1) and np.all(helps["peer"] == 0))
        self.assertEqual({(int(h["step"]), int(h["microbatch"])) for h in helps},
                         {(int(f["step"]), int(f["microbatch"])) for f in served})
        self.assertGreater(len(declined), 0, "rank 1 runs its own ops most of the step: some requests find it busy")
        self.assertTrue(np.all(declined["end_ns"] - declined["start_ns"] >= 19_000_000))  # 20 ms alone
        line = [l for l in proc.stdout.splitlines() if l.startswith("migration: ")]
        self.assertEqual(len(line), 1, proc.stdout)
        self.assertIn("decisions (%d declined by a busy helper)" % len(declined), line[0])

    def test_every_slice_forced_and_declined(self):
        """Forced to give all 4 of 4 slices away, the owner keeps no share: a declined op's slices took 1/0 of its
        kept time, the owner slept for ever and the pipeline deadlocked (the watchdog's message after 8 s). A
        declined op now lasts its modelled time, as with a share."""
        out = os.path.join(self.tmp.name, "all")
        proc = self.run_deck(2, deck(out, 2, -1), "migration.force=[0->1:F:4]", "run.steps=2",
                             "runtime.watchdog_s=8")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with h5py.File(os.path.join(out, "trace.h5"), "r") as t:
            events = t["events"][:]
        forwards = events[(events["rank"] == 0) & (events["kind"] == 0)]
        declined = forwards[forwards["migrated"] == 0]
        self.assertEqual(len(forwards), 2 * MICROBATCHES)
        self.assertGreater(len(declined), 0, "rank 1 runs its own ops most of the step: some requests find it busy")
        self.assertTrue(np.all(declined["end_ns"] - declined["start_ns"] >= 19_000_000))  # 20 ms alone

    def test_cpu_backend_refuses_more_vocab_groups_than_columns(self):
        out = os.path.join(self.tmp.name, "cpu")
        proc = self.run_deck(2, deck(out, 2, 0, backend="cpu"), "migration.units=[vocab]", "model.vocab=8",
                             "migration.slices=16")
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("migration.slices = 16 exceeds model.vocab = 8 (unit 'vocab')", proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "trace.h5")))


class StatusMessagesTest(unittest.TestCase):
    """Statuses go only to ranks that decide: with migration.force nobody does, so a rank tells its peers only
    that it finished each step (slices still move, as forced)."""

    def test_forced_run_sends_only_finished(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "forced")
            path = os.path.join(tmp, "deck.yaml")
            with open(path, "w") as f:
                f.write(forced_cpu_deck(out, 2, 30))
            proc = subprocess.run([MPIEXEC, "-n", "2", "--oversubscribe", BIN, "run", path], capture_output=True,
                                  text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            line = [l for l in proc.stdout.splitlines() if l.startswith("migration: ")]
            self.assertEqual(len(line), 1, proc.stdout)
            self.assertNotIn("migration: 0 slices", line[0])
            self.assertEqual(status_messages(line[0]), 2 * 2 * 1, line[0])  # steps x ranks x peers


class HelperFaultTest(unittest.TestCase):
    """A helper that stops in the middle of a help (SIGSTOP, injected): its answer never comes; the owner's watchdog
    ends the run promptly with one message naming the helper, the owner, the op and the step."""

    def hang(self, force, op):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "hang")
            path = os.path.join(tmp, "deck.yaml")
            with open(path, "w") as f:
                f.write(forced_cpu_deck(out, 4, 2, force))
            env = dict(os.environ, CONDUCTOR_INJECT_FAILURE="0:1:hang-help")
            start = time.monotonic()
            proc = subprocess.run([MPIEXEC, "-n", "2", "--oversubscribe", BIN, "run", path], capture_output=True,
                                  text=True, timeout=120, env=env)
            elapsed = time.monotonic() - start
            self.assertNotEqual(proc.returncode, 0)
            lines = [l for l in proc.stderr.splitlines() if "watchdog:" in l]
            self.assertEqual(len(lines), 1, proc.stderr)
            self.assertIn("rank 1 waited", lines[0])
            self.assertIn(f"the answer of helper rank 0 to its {op} of microbatch 0 (stage 1, 2 slices)", lines[0])
            self.assertIn("in step 2", lines[0])  # injected at index 1; steps counted from 1, as the step lines
            self.assertLess(elapsed, 60, proc.stderr)

    def test_answer_that_never_comes(self):
        self.hang("W,BW", "W")

    def test_layer_answer_that_never_comes(self):
        """F waits for each layer's answer inside the op: the same watchdog, from inside it."""
        self.hang("F,B", "F")


if __name__ == "__main__":
    unittest.main(verbosity=2)
