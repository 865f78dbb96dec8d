"""Shared helpers of the fault suite (label `faults`): run conductor under mpiexec with a deadline, time how long
each rank takes to exit, and check what a user sees (exit code, one clear message, no raw library dump) and what
is left on disk. Each tests/faults/test_<area>.py imports this; every case states its expected exit code."""
import os
import re
import subprocess
import tempfile
import time
import unittest

BIN = os.environ.get("CONDUCTOR_BINARY", "build/conductor")
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
EXIT_DEADLINE_S = 30  # every rank exits within this after a fault (the project's rule)

TINY = """\
run: {name: tiny, steps: %(steps)d, output: %(out)s}
parallel: {pipeline: %(p)d, microbatches: %(m)d, microbatch_size: 2}
model: {n_layers: %(layers)d, d_model: 32, n_heads: 2, seq_len: 16}
schedule: {kind: zb-h1, execution: readiness}
"""

# What must never reach a user: raw library diagnostics, tracebacks, core dumps.
RAW_DUMP = re.compile(r"HDF5-DIAG|Traceback \(most recent call last\)|core dumped|Segmentation fault|"
                      r"terminate called|\*\*\* Process received signal|#0 0x|MPI_ABORT was invoked.*\n.*\n.*\n.*\n")


class Result:
    def __init__(self, proc, seconds):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.seconds = seconds

    @property
    def text(self):
        return self.out + self.err


def mpirun(np, *args, env=None, timeout=EXIT_DEADLINE_S + 60, cwd=None):
    """Runs `conductor ARGS` on np ranks; returns a Result with the wall time of the whole job."""
    cmd = [MPIEXEC, "-n", str(np), "--oversubscribe", BIN, *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    return Result(proc, time.monotonic() - start)


def run1(*args, env=None, timeout=60, cwd=None):
    """Runs `conductor ARGS` as one process (validate, simulate)."""
    start = time.monotonic()
    proc = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    return Result(proc, time.monotonic() - start)


class FaultCase(unittest.TestCase):
    """A temporary folder per test, a tiny deck writer and the checks every fault case makes."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.out = os.path.join(self.tmp.name, "out")

    def deck(self, steps=3, p=2, m=4, layers=None, extra="", name="deck.yaml"):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(TINY % {"steps": steps, "out": self.out, "p": p, "m": m, "layers": layers or p} + extra)
        return path

    def assertFault(self, result, code, message):
        """The run failed with `code`, within the deadline, naming `message`, without a raw dump."""
        self.assertEqual(result.code, code, result.text)
        self.assertLessEqual(result.seconds, EXIT_DEADLINE_S + 10, "ranks took too long to exit")
        self.assertRegex(result.text, message)
        self.assertIsNone(RAW_DUMP.search(result.text), "raw diagnostics reached the user:\n" + result.text)
