"""Shared helpers of the fault suite (label `faults`): run conductor under mpiexec with a deadline, time how long
each rank takes to exit, and check what a user sees (exit code, one clear message, no raw library dump) and what
is left on disk. Each tests/faults/test_<area>.py imports this; every case states its expected exit code."""
import os
import re
import resource
import signal
import subprocess
import tempfile
import threading
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
    def __init__(self, proc, seconds, cpu_seconds=None):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.seconds = seconds  # wall time: for the exit deadline
        # CPU time (user + system) of the process and what it waited for: how much work a command did, which a
        # loaded machine (ctest -j2 on 2 cores) does not stretch as it stretches wall time.
        self.cpu_seconds = cpu_seconds

    @property
    def text(self):
        return self.out + self.err


class Background:
    """A command (mpiexec ... conductor run, or a launcher around it) in the background, its output collected line
    by line; new_session puts it in a process group of its own (as a shell starts a foreground job)."""

    def __init__(self, cmd, env=None, new_session=False):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=new_session)
        self.new_session = new_session
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=self._read, args=(s, l), daemon=True)
                        for s, l in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self.readers:
            r.start()

    @staticmethod
    def _read(stream, lines):
        for line in stream:
            lines.append(line)

    def wait_steps(self, n, timeout=120):
        deadline = time.monotonic() + timeout
        while sum(l.startswith("step ") for l in self.out) < n:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError("run ended or stalled before step %d:\n%s" % (n, "".join(self.out + self.err)))
            time.sleep(0.02)

    def rank_pids(self):
        """{rank: pid} of the MPI ranks among the command's descendants (told apart by OMPI_COMM_WORLD_RANK)."""
        ranks, todo = {}, [self.proc.pid]
        while todo:
            out = subprocess.run(["pgrep", "-P", str(todo.pop())], capture_output=True, text=True).stdout
            for pid in map(int, out.split()):
                todo.append(pid)
                try:
                    with open("/proc/%d/environ" % pid, "rb") as f:
                        m = re.search(rb"(?:^|\0)OMPI_COMM_WORLD_RANK=(\d+)\0", f.read())
                except OSError:
                    continue
                if m:
                    ranks[int(m.group(1))] = pid
        return ranks

    def kill(self):
        if self.proc.poll() is None:
            if self.new_session:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.kill()
            self.proc.wait()

    def result(self, since):
        """Joins the output readers; the Result with the seconds since `since`."""
        for r in self.readers:
            r.join(timeout=5)
        return Result(subprocess.CompletedProcess([], self.proc.returncode, "".join(self.out), "".join(self.err)),
                      time.monotonic() - since)


def children_cpu_seconds():
    """CPU seconds of every finished child process of this one (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def mpirun(np, *args, env=None, timeout=EXIT_DEADLINE_S + 60, cwd=None):
    """Runs `conductor ARGS` on np ranks; returns a Result with the wall time of the whole job."""
    cmd = [MPIEXEC, "-n", str(np), "--oversubscribe", BIN, *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    return Result(proc, time.monotonic() - start)


def run1(*args, env=None, timeout=60, cwd=None):
    """Runs `conductor ARGS` as one process (validate, simulate)."""
    start, cpu = time.monotonic(), children_cpu_seconds()
    proc = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    return Result(proc, time.monotonic() - start, children_cpu_seconds() - cpu)


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
