#!/usr/bin/python3
"""A build without the global tier (-DCONDUCTOR_POLICY=OFF, no LibTorch): static scheduling runs as always;
`scheduler.kind: ppo` (run, simulate) and `conductor train-policy` end with one message saying why and how to
get the global tier, exit 2. Registered only in such a build."""
import os
import subprocess
import tempfile
import unittest

BIN = os.environ["CONDUCTOR_BINARY"]
SRC = os.environ["CONDUCTOR_SOURCE_DIR"]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")

DECK = """\
backend: emulated
run: {name: tier, steps: 3, output: %(out)s}
parallel: {pipeline: 2, microbatches: 4}
scheduler: {kind: %(kind)s}
cost: {forward: 0.2, backward_input: 0.2, backward_weight: 0.1, comm: 0.02}
"""


class NoGlobalTierTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def deck(self, kind):
        path = os.path.join(self.tmp.name, kind + ".yaml")
        with open(path, "w") as f:
            f.write(DECK % {"out": os.path.join(self.tmp.name, "run-" + kind), "kind": kind})
        return path

    def assert_no_global_tier(self, proc, what):
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn(what + " needs the global tier", proc.stderr)
        self.assertIn("-DCONDUCTOR_POLICY=ON", proc.stderr)
        self.assertEqual(proc.stderr.count("needs the global tier"), 1, proc.stderr)  # once, not per rank
        self.assertNotIn("Traceback", proc.stderr)

    def test_run_ppo_fails_on_every_rank_with_one_message(self):
        proc = subprocess.run([MPIEXEC, "-n", "2", "--oversubscribe", BIN, "run", self.deck("ppo")],
                              capture_output=True, text=True, timeout=120)
        self.assert_no_global_tier(proc, "scheduler.kind: ppo")

    def test_simulate_ppo_fails(self):
        proc = subprocess.run([BIN, "simulate", self.deck("ppo")], capture_output=True, text=True, timeout=60)
        self.assert_no_global_tier(proc, "scheduler.kind: ppo")

    def test_train_policy_fails_but_is_listed(self):
        deck = os.path.join(SRC, "inputs", "policies", "default.yaml")
        proc = subprocess.run([BIN, "train-policy", deck], capture_output=True, text=True, timeout=60)
        self.assert_no_global_tier(proc, "conductor train-policy")
        self.assertEqual(subprocess.run([BIN, "train-policy", "--help"], capture_output=True).returncode, 0)

    def test_static_runs_and_simulates(self):
        deck = self.deck("static")
        proc = subprocess.run([MPIEXEC, "-n", "2", "--oversubscribe", BIN, "run", deck],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        # Into its own folder: a simulation never writes over a measured run's results.
        sim = "run.output=" + os.path.join(self.tmp.name, "sim-static")
        proc = subprocess.run([BIN, "simulate", deck, sim], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
