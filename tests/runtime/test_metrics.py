#!/usr/bin/python3
"""Progress and metrics (issue 18): `conductor run`'s metrics.jsonl against summary.json and the trace, its step
lines and run.log_every, a bad log_every; the progress lines of `conductor simulate`."""
import json
import os
import re
import subprocess
import tempfile
import unittest

import h5py

BIN = os.environ["CONDUCTOR_BINARY"]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")

DECK = """\
run: {name: metrics, steps: 5, output: %(out)s, log_every: %(log_every)d}
parallel: {pipeline: 2, microbatches: 4, microbatch_size: 2}
model: {n_layers: 2, d_model: 32, n_heads: 2, seq_len: 16}
optim: {warmup_steps: 2}
schedule: {kind: 1f1b, execution: readiness}
runtime: {peak_tflops: 0.5}
"""
FIELDS = ["step", "time", "elapsed_s", "eta_s", "loss", "step_time_ms", "tokens_per_s", "samples_per_s", "mfu", "lr",
          "grad_norm", "bubble_ratio", "peak_memory_gb", "peak_activations"]


class MetricsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.out = os.path.join(self.tmp.name, "out")

    def run_deck(self, log_every, *overrides):
        deck = os.path.join(self.tmp.name, "deck.yaml")
        with open(deck, "w") as f:
            f.write(DECK % {"out": self.out, "log_every": log_every})
        cmd = [MPIEXEC, "-n", "2", "--oversubscribe", BIN, "run", deck, *overrides]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    def test_metrics_match_summary_and_trace(self):
        proc = self.run_deck(2)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        with open(os.path.join(self.out, "summary.json")) as f:
            summary = json.load(f)
        with h5py.File(os.path.join(self.out, "trace.h5"), "r") as t:
            makespan_ms = [ns * 1e-6 for ns in t["steps"]["makespan_ns"]]
            trace_loss = list(t["steps"]["loss"])
        self.assertEqual([r["step"] for r in rows], list(range(5)))  # every step, whatever log_every
        for r in rows:
            self.assertEqual(list(r), FIELDS)
        self.assertEqual([r["loss"] for r in rows], summary["losses"])  # exactly: the same doubles
        self.assertEqual([r["loss"] for r in rows], trace_loss)
        tokens = 4 * 2 * 16  # microbatches x microbatch_size x seq_len
        # llm.c's count: 6 N + 6 L C T per token, N the parameters the matmuls multiply by (V 256, T 16, C 32, L 2,
        # MLP 4C): the model's less the token embedding table; the untied LM head's V C is counted.
        C, T, L, V = 32, 16, 2, 256
        n_params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
        flops = tokens * (6 * n_params + 6 * L * C * T)
        for r, ms, s in zip(rows, makespan_ms, summary["steps"]):
            self.assertAlmostEqual(r["step_time_ms"], ms, places=6)
            self.assertAlmostEqual(r["step_time_ms"], s["makespan_ms"], places=6)
            self.assertAlmostEqual(r["tokens_per_s"], tokens / (ms * 1e-3), delta=1e-6 * r["tokens_per_s"])
            self.assertAlmostEqual(r["samples_per_s"], 8 / (ms * 1e-3), delta=1e-6 * r["samples_per_s"])
            self.assertAlmostEqual(r["mfu"], flops / (ms * 1e-3) / (2 * 0.5e12), delta=1e-9)
            self.assertGreater(r["grad_norm"], 0)
            self.assertGreater(r["peak_memory_gb"], 0)
            self.assertGreater(r["peak_activations"], 0)
        # Warm-up over two steps, then cosine decay from 6e-3 to its floor at the last step.
        self.assertAlmostEqual(rows[0]["lr"], 3e-3)
        self.assertAlmostEqual(rows[1]["lr"], 6e-3)
        self.assertGreater(rows[2]["lr"], rows[4]["lr"])
        self.assertEqual([r["time"] for r in rows], sorted(r["time"] for r in rows))
        self.assertEqual(rows[-1]["eta_s"], 0)
        # Step lines: steps 2 and 4 (log_every 2) and the last one, the loss in a fixed-width column.
        lines = [l for l in proc.stdout.splitlines() if l.startswith("step ")]
        self.assertEqual([int(re.match(r"step +(\d+)/", l).group(1)) for l in lines], [2, 4, 5], proc.stdout)
        for line, row in zip(lines, [rows[1], rows[3], rows[4]]):
            m = re.search(r"loss (.{11})  time", line)
            self.assertIsNotNone(m, line)
            self.assertEqual(m.group(1), "%11.8f" % row["loss"])
            for key in ("tokens/s", "MFU", "lr", "gnorm", "mem", "elapsed", "ETA"):
                self.assertIn(key + " ", line)
            self.assertRegex(line, r"\| \d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")
        self.assertEqual(len({line.index("tokens/s") for line in lines}), 1, "columns move")

    def test_no_mfu_without_the_models_math(self):
        # The emulated backend's op times are the deck's costs, not the model's FLOPs: MFU is null and the step
        # line shows "-" (a large model with short emulated ops read billions of percent).
        proc = self.run_deck(1, "backend=emulated", "run.steps=2", "model.d_model=4096", "model.n_heads=32")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual([r["mfu"] for r in rows], [None, None])
        lines = [l for l in proc.stdout.splitlines() if l.startswith("step ")]
        self.assertEqual(len(lines), 2, proc.stdout)
        for line in lines:
            self.assertIn("  MFU       -  lr", line)
        # Timed from the model (cost.device_tflops), emulated ops do follow its FLOPs: MFU is the model's.
        proc = self.run_deck(1, "backend=emulated", "run.steps=1", "cost.device_tflops=2", "run.overwrite=true")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            self.assertGreater(json.loads(f.readline())["mfu"], 0)

    def test_bad_log_every_is_refused(self):
        proc = self.run_deck(1, "run.log_every=0")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("run.log_every", proc.stderr)
        self.assertIn("run.log_every: value 0 is out of range (allowed: 1 ..", proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "metrics.jsonl")))

    def test_simulate_progress(self):
        deck = os.path.join(self.tmp.name, "deck.yaml")
        with open(deck, "w") as f:
            f.write(DECK % {"out": self.out, "log_every": 1})
        env = dict(os.environ, CONDUCTOR_PROGRESS_S="0")
        proc = subprocess.run([BIN, "simulate", deck, "run.steps=4"], capture_output=True, text=True, env=env,
                              timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = [l for l in proc.stderr.splitlines() if l.startswith("simulate: ")]
        self.assertEqual(len(lines), 4, proc.stderr)
        self.assertRegex(lines[0], r"^simulate: 1/4 steps \( +25%\), elapsed [0-9.]+ s, ETA [0-9.]+ s$")
        self.assertRegex(lines[-1], r"^simulate: 4/4 steps \(100%\), elapsed .*, ETA 0\.0 s$")
        # Rate-limited by default: a short simulation prints none.
        quiet = subprocess.run([BIN, "simulate", deck, "run.steps=4", "run.overwrite=true"], capture_output=True,
                               text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                           if k != "CONDUCTOR_PROGRESS_S"})
        self.assertEqual(quiet.returncode, 0, quiet.stderr)
        self.assertNotIn("simulate: ", quiet.stderr)


if __name__ == "__main__":
    unittest.main()
