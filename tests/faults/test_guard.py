#!/usr/bin/python3
"""Fault suite, area guard (issue 17): a stopped rank ends the run through the watchdog, a non-finite loss stops
the run without a checkpoint of NaNs, and a double SIGTERM keeps the graceful stop. Each case checks the exit
code, the time every rank took to exit, the one message and what is on disk afterwards."""
import glob
import os
import re
import signal
import subprocess
import time
import unittest

import h5py
import numpy as np

from faultlib import BIN, EXIT_DEADLINE_S, MPIEXEC, RAW_DUMP, Background, FaultCase, mpirun

WATCHDOG_S = 3
EXIT_STOPPED = 3  # a clean stop by SIGTERM/SIGINT (README, exit codes)


class Running(Background):
    """`conductor run` under mpiexec in the background."""

    def __init__(self, np_, *args):
        super().__init__([MPIEXEC, "-n", str(np_), "--oversubscribe", BIN, "run", *args])

    def rank_pid(self, rank):
        pid = self.rank_pids().get(rank)
        if pid is None:
            raise AssertionError("no process for rank %d" % rank)
        return pid

    def finish(self, since, timeout=EXIT_DEADLINE_S + 60):
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.kill()
        return self.result(since)


class Guard(FaultCase):
    def tiny(self, p, steps, extra=""):
        return self.deck(steps=steps, p=p, m=2 * p, extra="runtime: {watchdog_s: %d}\n" % WATCHDOG_S + extra)

    def assertTraceReadable(self, min_steps):
        path = os.path.join(self.out, "trace.h5")
        try:
            t = h5py.File(path, "r")
        except OSError:
            t = h5py.File(path, "r", swmr=True)  # rank 0 ended by the watchdog: flushed every step, SWMR flag left
        with t:
            steps = t["steps"][:]
        self.assertGreaterEqual(len(steps), min_steps)
        return steps

    def stopped_rank(self, p, victim):
        run = Running(p, self.tiny(p, steps=100000))
        run.wait_steps(2)
        pid = run.rank_pid(victim)
        os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        try:
            res = run.finish(start)
        finally:
            try:
                os.kill(pid, signal.SIGKILL)  # never leave a stopped process behind
            except ProcessLookupError:
                pass
        self.assertNotEqual(res.code, 0, res.text)
        self.assertLessEqual(res.seconds, WATCHDOG_S + 10, "ranks took too long to exit:\n" + res.text)
        messages = [l for l in res.err.splitlines() if "watchdog:" in l]
        # One message: the ranks that timed out agree that a rank waiting on the stopped one reports, naming it.
        self.assertEqual(len(messages), 1, res.text)
        named = [m for m in messages if re.search(
            r"rank \d+ waited \d+\.\d s for .*rank %d\b.*no message arrived; aborting" % victim, m)]
        self.assertTrue(named, res.text)
        self.assertIsNone(RAW_DUMP.search(res.text), "raw diagnostics reached the user:\n" + res.text)
        # Every rank is gone, the stopped one included (mpiexec ended them).
        self.assertEqual(subprocess.run(["pgrep", "-P", str(run.proc.pid)], capture_output=True).stdout, b"")
        self.assertTraceReadable(2)

    def test_stopped_rank_p2_watchdog(self):
        self.stopped_rank(2, 1)

    def test_stopped_rank_with_the_default_watchdog(self):
        # runtime.watchdog_s left at 300: a stopped rank held the job 300 s. Once steps have run, a wait is bounded
        # by 10 x the slowest step, at least 30 s: every rank is gone about 30 s after the stop.
        run = Running(2, self.deck(steps=100000, p=2, m=4))
        run.wait_steps(2)
        pid = run.rank_pid(1)
        os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        try:
            res = run.finish(start, timeout=120)
        finally:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.assertNotEqual(res.code, 0, res.text)
        self.assertLessEqual(res.seconds, 30 + 10, "ranks took too long to exit:\n" + res.text)
        self.assertGreaterEqual(res.seconds, 29, "fired before the 30 s floor:\n" + res.text)
        messages = [l for l in res.err.splitlines() if "watchdog:" in l]
        self.assertEqual(len(messages), 1, res.text)
        self.assertRegex(messages[0], r"rank 0 waited 30\.\d s for .*rank 1\b.*\(runtime\.watchdog_s = 300; 30 s here: "
                                      r"runtime\.watchdog_steps = 10 x the slowest step so far, at least 30 s\)")

    def test_stopped_rank_p4_watchdog(self):
        self.stopped_rank(4, 1)

    def hung_by_injection(self, how, steps, *args):
        """Runs a 2-rank tiny deck with CONDUCTOR_INJECT_FAILURE=`how` (a rank that hangs at some point), which
        must end with exit 1 within the watchdog's limit and leave no process behind; returns the result and its
        watchdog lines."""
        deck = self.tiny(2, steps=steps)
        env = dict(os.environ, CONDUCTOR_INJECT_FAILURE=how)
        self.addCleanup(subprocess.run, ["pkill", "-KILL", "-f", deck], capture_output=True)  # never left stopped
        res = mpirun(2, "run", deck, *args, env=env, timeout=60)
        self.assertEqual(res.code, 1, res.text)
        self.assertLessEqual(res.seconds, WATCHDOG_S + 10, "ranks took too long to exit:\n" + res.text)
        self.assertEqual(subprocess.run(["pgrep", "-f", deck], capture_output=True).stdout, b"")
        return res, [l for l in res.err.splitlines() if "watchdog:" in l]

    def test_rank_hung_while_writing_a_checkpoint(self):
        # A rank stopped once it wrote its files of a checkpoint (a file system that hangs): the others waited in
        # the checkpoint's agreement (a blocking MPI_Allreduce) for ever, with no message, whatever watchdog_s said.
        ckpt = os.path.join(self.tmp.name, "ckpt")
        res, messages = self.hung_by_injection("0:2:hang-checkpoint", 6, "checkpoint.path=" + ckpt,
                                               "checkpoint.every=1")
        self.assertEqual(len(messages), 1, res.text)
        self.assertRegex(messages[0], r"rank 1 waited \d+\.\d s for every rank's part of checkpoint step 2; no "
                                      r"message arrived; aborting \(runtime\.watchdog_s = 3\)")
        # The step before stays the latest, whole; the abandoned one is a partial folder a resume ignores.
        with open(os.path.join(ckpt, "latest")) as f:
            self.assertEqual(f.read().strip(), "step-000001")
        self.assertFalse(os.path.exists(os.path.join(ckpt, "step-000002")))

    def test_rank_stopped_in_its_set_up(self):
        # A rank stopped while it loaded its model and data files (a file system that hangs, a signal): the others
        # waited in the set-up's agreement (a blocking MPI_Allreduce) for ever, whatever watchdog_s said; nothing
        # may be written before every rank's set-up passed.
        res, messages = self.hung_by_injection("1:0:hang-setup", 3)
        self.assertEqual(len(messages), 1, res.text)
        self.assertRegex(messages[0], r"rank 0 waited \d+\.\d s for every rank's set-up \(its model and data files\); "
                                      r"no message arrived; aborting \(runtime\.watchdog_s = 3\)")
        self.assertFalse(os.path.exists(self.out))

    def test_rank_stopped_after_the_last_step(self):
        # The other rank waited in MPI_Finalize for ever (its results written, no message).
        res, _ = self.hung_by_injection("1:3:hang-end", 3)
        self.assertRegex(res.err, r"watchdog: rank 0 waited \d+\.\d s for every rank to end the run \(the results "
                                  r"are written\); no message arrived")
        self.assertTrue(os.path.exists(os.path.join(self.out, "summary.json")))
        self.assertEqual(len(self.assertTraceReadable(3)), 3)

    def test_rank_stopped_before_mpi_init(self):
        # A rank that never reaches MPI start-up (stopped, or a node that never launched it) held the others in
        # MPI_Init for ever, before any watchdog: now each waits CONDUCTOR_INIT_TIMEOUT_S, rank 0 says so first
        # and the launcher ends the job. Rank 1 stops itself before it execs conductor.
        wrapper = os.path.join(self.tmp.name, "stop-first.sh")
        with open(wrapper, "w") as f:
            f.write('#!/bin/bash\nkill -STOP $$\nexec "$@"\n')
        os.chmod(wrapper, 0o755)
        deck = self.tiny(2, steps=3)
        self.addCleanup(subprocess.run, ["pkill", "-KILL", "-f", wrapper], capture_output=True)  # never left stopped
        env = dict(os.environ, CONDUCTOR_INIT_TIMEOUT_S="5")
        start = time.monotonic()
        proc = subprocess.run([MPIEXEC, "-n", "1", BIN, "run", deck, ":", "-n", "1", wrapper, BIN, "run", deck],
                              capture_output=True, text=True, env=env, timeout=60)
        seconds = time.monotonic() - start
        text = proc.stdout + proc.stderr
        self.assertEqual(proc.returncode, 1, text)
        self.assertLessEqual(seconds, 5 + 10, "ranks took too long to exit:\n" + text)
        messages = [l for l in proc.stderr.splitlines() if "MPI start-up" in l]
        self.assertEqual(len(messages), 1, text)
        self.assertRegex(messages[0], r"^\[rank 0\] conductor: error: MPI start-up \(MPI_Init\) did not complete "
                                      r"within 5 s on host .* \(pid \d+\): a rank of the job never started, was "
                                      r"stopped or cannot reach this one; aborting \(CONDUCTOR_INIT_TIMEOUT_S = 5; "
                                      r"unset: 300\)$")
        self.assertIsNone(RAW_DUMP.search(text), "raw diagnostics reached the user:\n" + text)
        self.assertEqual(subprocess.run(["pgrep", "-f", wrapper], capture_output=True).stdout, b"")

    def test_nonfinite_weights_stop_before_the_checkpoint(self):
        # An update that leaves a NaN weight (optim.eps = 0 did, dividing 0 by 0; now refused) stops the run at
        # that step's checkpoint, which is not written.
        ckpt = os.path.join(self.tmp.name, "ckpt")
        env = dict(os.environ, CONDUCTOR_INJECT_NAN_WEIGHTS="0:1")
        res = mpirun(2, "run", self.tiny(2, steps=6), "checkpoint.path=" + ckpt, "checkpoint.every=1", env=env)
        self.assertFault(res, 1, r"step 2: non-finite weights of .* after the update; stopping without writing the "
                                 r"checkpoint")
        self.assertFalse(os.path.exists(os.path.join(ckpt, "step-000002")))
        self.assertTrue(os.path.exists(os.path.join(ckpt, "step-000001")))
        self.assertNotIn("loss null", res.text)
        steps = self.assertTraceReadable(1)
        self.assertLess(len(steps), 6)  # stopped early
        # No checkpoint holds a non-finite number.
        for path in glob.glob(os.path.join(ckpt, "**", "*.h5"), recursive=True):
            with h5py.File(path, "r") as f:
                def visit(name, obj):
                    if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f":
                        self.assertTrue(np.all(np.isfinite(obj[()])), path + ":" + name)
                f.visititems(visit)

    def test_double_sigterm_keeps_graceful_stop(self):
        ckpt = os.path.join(self.tmp.name, "ckpt")
        run = Running(2, self.tiny(2, steps=100000), "checkpoint.path=" + ckpt)
        run.wait_steps(2)
        # Both signals to every rank, as a double Ctrl-C to a process group holding the ranks does. (Signals to
        # the launcher itself: scripts/conductor-launch, tests/faults/test_signals.py.)
        pids = [run.rank_pid(r) for r in range(2)]
        for _ in range(2):
            for pid in pids:
                os.kill(pid, signal.SIGTERM)
            time.sleep(0.05)
        start = time.monotonic()
        res = run.finish(start)
        self.assertEqual(res.code, EXIT_STOPPED, res.text)
        self.assertLessEqual(res.seconds, EXIT_DEADLINE_S, res.text)
        self.assertIn("stop requested", res.text)
        self.assertIn("summary:", res.out)
        self.assertIsNone(RAW_DUMP.search(res.text), "raw diagnostics reached the user:\n" + res.text)
        steps = self.assertTraceReadable(2)
        self.assertTrue(os.path.exists(os.path.join(self.out, "summary.json")))
        self.assertTrue(glob.glob(os.path.join(ckpt, "**", "*.h5"), recursive=True), "no checkpoint written")
        self.assertEqual(len(steps), sum(l.startswith("step ") for l in res.out.splitlines()))


if __name__ == "__main__":
    unittest.main()
