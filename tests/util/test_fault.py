#!/usr/bin/python3
"""A failure on one rank of four ends all four, non-zero, within seconds, with one clear message."""
import os
import subprocess
import sys
import time
import unittest

MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
FAULT = sys.argv.pop(1) if len(sys.argv) > 1 else "./fault_rank"


def launch(*args):
    start = time.monotonic()
    proc = subprocess.run([MPIEXEC, "-n", "4", "--oversubscribe", FAULT, *args],
                          capture_output=True, text=True, timeout=60)
    return proc, time.monotonic() - start


class FaultTest(unittest.TestCase):
    def test_control_exits_zero(self):
        proc, _ = launch("none")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("all ranks finished", proc.stdout)

    def test_error_on_one_rank_aborts_all(self):
        proc, elapsed = launch("one", "2")
        self.assertNotEqual(proc.returncode, 0)
        self.assertLess(elapsed, 15.0, "ranks did not stop promptly")
        self.assertIn("[rank 2] conductor: error: injected failure on rank 2", proc.stderr)

    def test_collective_failure_exits_all_with_code(self):
        proc, elapsed = launch("collective", "1")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertLess(elapsed, 15.0)
        self.assertEqual(proc.stderr.count("injected collective failure"), 1, proc.stderr)
        self.assertNotIn("all ranks finished", proc.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
