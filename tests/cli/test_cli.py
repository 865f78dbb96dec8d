#!/usr/bin/python3
"""The conductor command line: subcommands, --help, --version, usage errors, deck errors (exit 2)."""
import os
import subprocess
import tempfile
import unittest

BIN = os.environ["CONDUCTOR_BINARY"]
SRC = os.environ["CONDUCTOR_SOURCE_DIR"]


def conductor(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60)


class CliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def deck(self, text, name="deck.yaml"):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_version(self):
        proc = conductor("--version")
        self.assertEqual(proc.returncode, 0)
        self.assertRegex(proc.stdout, r"^conductor \d+\.\d+\.\d+ \(git ")

    def test_help_lists_commands(self):
        proc = conductor("--help")
        self.assertEqual(proc.returncode, 0)
        for command in ("run", "simulate", "validate", "train-policy"):
            self.assertIn(command, proc.stdout)
            sub = conductor(command, "--help")
            self.assertEqual(sub.returncode, 0, command)
            self.assertIn("usage: conductor " + command, sub.stdout)

    def test_unknown_command_is_usage_error(self):
        proc = conductor("simulte", "x.yaml")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("unknown command 'simulte'", proc.stderr)
        self.assertIn("usage:", proc.stderr)

    def test_unknown_flag_is_usage_error(self):
        proc = conductor("validate", self.deck("run: {}\n"), "--bogus")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("unknown flag '--bogus'", proc.stderr)

    def test_missing_deck_argument(self):
        self.assertEqual(conductor("validate").returncode, 2)
        self.assertEqual(conductor().returncode, 2)

    def test_missing_deck_file(self):
        proc = conductor("validate", os.path.join(self.tmp.name, "nope.yaml"))
        self.assertEqual(proc.returncode, 2)
        self.assertIn("nope.yaml: cannot open file", proc.stderr)

    def test_validate_prints_resolved_deck(self):
        proc = conductor("validate", self.deck("run: {steps: 3}\n"), "parallel.microbatches=12")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("steps: 3", proc.stdout)
        self.assertIn("microbatches: 12", proc.stdout)
        self.assertIn("backend: cpu", proc.stdout)  # a default, printed
        # The resolved deck is itself a valid deck that resolves to the same text.
        again = conductor("validate", self.deck(proc.stdout, "resolved.yaml"))
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stdout, proc.stdout)

    def test_resolved_numbers_are_shortest_text(self):
        # A double prints as the shortest text that reads back the same: 0.006, not 0.0060000000000000001.
        proc = conductor("validate", self.deck("optim: {lr: 0.006, beta2: 0.95}\n"), "noise.level=1e-7")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("  lr: 0.006\n", proc.stdout)
        self.assertIn("  beta2: 0.95\n", proc.stdout)
        self.assertIn("  level: 1e-07\n", proc.stdout)

    def test_train_policy_curve_is_exact(self):
        # curve.csv holds one row per PPO iteration, every number written exactly (shortest round-trip text),
        # not cut to 6 decimals.
        out = os.path.join(self.tmp.name, "tp")
        deck = self.deck("run: {output: %s}\nparallel: {pipeline: 2, microbatches: 4}\n"
                         "ppo: {iterations: 2, episodes: 2, eval_steps: 2}\n" % out)
        proc = conductor("train-policy", deck)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(os.path.join(out, "curve.csv")) as f:
            header, *rows = [line.rstrip("\n").split(",") for line in f]
        self.assertEqual(header[2], "sampled_makespan_ms")
        self.assertEqual(len(rows), 2)
        for row in rows:
            self.assertEqual(len(row), len(header))
            float(row[-1])  # seconds: wall time, a number of any size
            for text in row[2:-1]:
                if text != "0":
                    self.assertEqual(repr(float(text)), text)  # shortest text of that double
            self.assertGreater(len(row[2].split(".")[1]), 6, row[2])  # this seed's makespan is not a round number

    def test_misspelled_section(self):
        path = self.deck("run:\n  steps: 2\nschedul:\n  kind: 1f1b\n")
        proc = conductor("validate", path)
        self.assertEqual(proc.returncode, 2)
        self.assertIn(path + ":3:1: unknown key 'schedul'; did you mean 'schedule'?", proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)

    def test_override_type_error(self):
        proc = conductor("validate", self.deck("run: {}\n"), "parallel.pipeline=abc")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("parallel.pipeline: expected an integer, got 'abc'", proc.stderr)

    def test_unknown_override_path(self):
        proc = conductor("validate", self.deck("run: {}\n"), "parallel.pipe=4")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("unknown key 'parallel.pipe'", proc.stderr)

    def test_stray_argument(self):
        proc = conductor("validate", self.deck("run: {}\n"), "extra")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("unexpected argument 'extra'", proc.stderr)

    def test_keys_documented(self):
        proc = conductor("validate", "--keys")
        self.assertEqual(proc.returncode, 0)
        with open(os.path.join(SRC, "docs", "deck.md")) as f:
            doc = f.read()
        for line in proc.stdout.splitlines():
            if line.startswith("| `"):
                key = line.split("`")[1]
                self.assertIn("`" + key + "`", doc, "docs/deck.md misses " + key)


if __name__ == "__main__":
    unittest.main(verbosity=2)
