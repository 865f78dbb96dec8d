#!/usr/bin/python3
"""`conductor run` end to end under mpiexec: outputs, wrong rank count, failures on one rank, a killed run's
trace, SIGTERM, and the emulated backend against the simulator's prediction for the same deck and seed."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import h5py

BIN = os.environ["CONDUCTOR_BINARY"]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")

TINY = """\
run: {name: tiny, steps: %(steps)d, output: %(out)s}
parallel: {pipeline: 4, microbatches: 8, microbatch_size: 2}
model: {n_layers: 4, d_model: 32, n_heads: 2, seq_len: 16}
schedule: {kind: zb-h1, execution: readiness}
"""


def mpirun(np, *args, env=None, timeout=120):
    cmd = [MPIEXEC, "-n", str(np), "--oversubscribe", BIN, *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.monotonic() - start


def open_trace(path):
    try:
        return h5py.File(path, "r")
    except OSError:
        return h5py.File(path, "r", swmr=True)  # a writer killed mid-run leaves the SWMR flag set


class RuntimeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.out = os.path.join(self.tmp.name, "out")

    def deck(self, steps=3, text=None):
        path = os.path.join(self.tmp.name, "deck.yaml")
        with open(path, "w") as f:
            f.write(text if text is not None else TINY % {"steps": steps, "out": self.out})
        return path

    def test_run_writes_outputs(self):
        proc, _ = mpirun(4, "run", self.deck(steps=3))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(len([l for l in proc.stdout.splitlines() if l.startswith("step ")]), 3, proc.stdout)
        self.assertIn("summary:", proc.stdout)
        with open(os.path.join(self.out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(len(summary["losses"]), 3)
        self.assertEqual(summary["final_loss"], summary["losses"][-1])
        self.assertEqual(len(summary["steps"]), 3)
        self.assertTrue(os.path.exists(os.path.join(self.out, "resolved.yaml")))
        with open_trace(os.path.join(self.out, "trace.h5")) as t:
            ev = t["events"][:]
            steps = t["steps"][:]
            self.assertEqual(t.attrs["world_size"], 4)
            self.assertEqual(t.attrs["execution"], b"readiness" if isinstance(t.attrs["execution"], bytes)
                             else "readiness")
        compute = ev[ev["kind"] <= 3]
        # Every op of every rank at every step: zb-h1 has F, B, W per (stage, microbatch).
        self.assertEqual(len(compute), 3 * 4 * 8 * 3)
        self.assertEqual(sorted(set(compute["rank"].tolist())), [0, 1, 2, 3])
        self.assertTrue((compute["start_ns"] >= compute["ready_ns"]).all())
        self.assertTrue((compute["end_ns"] >= compute["start_ns"]).all())
        self.assertEqual(steps["step"].tolist(), [0, 1, 2])
        for k in range(3):
            self.assertAlmostEqual(float(steps["loss"][k]), summary["losses"][k], places=5)
            # Both bubble measures reach summary.json and /steps; the per-stage one, recomputed here from the
            # events (mean over ranks of 1 - busy / own span), never exceeds the global one.
            mine = compute[compute["step"] == k]
            per_rank = [1 - (r["end_ns"] - r["start_ns"]).sum() / float(r["end_ns"].max() - r["start_ns"].min())
                        for r in (mine[mine["rank"] == q] for q in range(4))]
            self.assertAlmostEqual(float(steps["stage_bubble_ratio"][k]), sum(per_rank) / 4, places=9)
            self.assertAlmostEqual(summary["steps"][k]["stage_bubble_ratio"], float(steps["stage_bubble_ratio"][k]),
                                   places=9)
            self.assertLessEqual(summary["steps"][k]["stage_bubble_ratio"], summary["steps"][k]["bubble_ratio"])

    def test_checkpoint_restart_is_bit_identical(self):
        # The learning-rate schedule is pinned to 4 steps, so the 2-step run trains exactly as the first half.
        deck = self.deck(text=TINY % {"steps": 4, "out": self.out} + "optim: {decay_steps: 4}\n")
        ck = os.path.join(self.tmp.name, "ck")
        straight, _ = mpirun(4, "run", deck, "run.output=" + os.path.join(self.tmp.name, "a"))
        first, _ = mpirun(4, "run", deck, "run.steps=2", "checkpoint.path=" + ck,
                          "run.output=" + os.path.join(self.tmp.name, "b"))
        second, _ = mpirun(4, "run", deck, "checkpoint.resume=" + ck, "run.output=" + os.path.join(self.tmp.name, "c"))
        for proc in (straight, first, second):
            self.assertEqual(proc.returncode, 0, proc.stderr)
        load = lambda d: json.load(open(os.path.join(self.tmp.name, d, "summary.json")))
        a, b, c = load("a"), load("b"), load("c")
        self.assertEqual(c["first_step"], 2)
        self.assertEqual(b["losses"] + c["losses"], a["losses"])  # bit for bit (exact doubles)

    def test_cuda_backend_without_a_gpu_fails_on_every_rank(self):
        # This machine has no GPU: a CUDA build fails GPU selection collectively (exit 1), a CPU-only build
        # rejects the deck (exit 2); either way every rank ends promptly with one clear message.
        proc, elapsed = mpirun(4, "run", self.deck(), "backend=cuda")
        self.assertIn(proc.returncode, (1, 2), proc.stderr)
        self.assertLess(elapsed, 60)
        self.assertRegex(proc.stderr, r"sees no CUDA device|built without CUDA")
        self.assertNotIn("step ", proc.stdout)

    def test_wrong_rank_count(self):
        proc, elapsed = mpirun(3, "run", self.deck())
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(proc.stderr.count("parallel.pipeline = 4 but the job has 3 MPI ranks"), 1, proc.stderr)
        self.assertLess(elapsed, 30)

    def test_error_on_one_rank_ends_all(self):
        env = dict(os.environ, CONDUCTOR_INJECT_FAILURE="2:1")
        cmd = [MPIEXEC, "-n", "4", "--oversubscribe", "-x", "CONDUCTOR_INJECT_FAILURE", BIN, "run",
               self.deck(steps=5)]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        elapsed = time.monotonic() - start
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("[rank 2] conductor: error: injected failure on rank 2 at step 1", proc.stderr)
        self.assertLess(elapsed, 60)

    def test_killed_rank_leaves_readable_trace(self):
        env = dict(os.environ, CONDUCTOR_INJECT_FAILURE="0:3:kill")
        cmd = [MPIEXEC, "-n", "4", "--oversubscribe", "-x", "CONDUCTOR_INJECT_FAILURE", BIN, "run",
               self.deck(steps=8)]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        self.assertNotEqual(proc.returncode, 0)
        self.assertLess(time.monotonic() - start, 60)
        with open_trace(os.path.join(self.out, "trace.h5")) as t:
            steps = t["steps"][:]
            ev = t["events"][:]
        done = [int(s) for s in steps["step"] if s >= 0]
        self.assertEqual(done, [0, 1, 2])  # every completed step, nothing of the step that died
        ev = ev[ev["step"] >= 0]
        self.assertEqual(sorted(set(ev["step"].tolist())), [0, 1, 2])

    def test_sigterm_stops_after_current_step(self):
        # mpirun sends the ranks SIGTERM one second after its own and SIGKILL one second later, and forwards no
        # output in between: with a step line per step (5-10 ms steps) rank 0 filled the pipe and blocked in its
        # write before it could stop. A line every 10 steps keeps the test on the stop itself.
        text = TINY.replace("output: %(out)s}", "output: %(out)s, log_every: 10}")
        cmd = [MPIEXEC, "-n", "4", "--oversubscribe", BIN, "run", self.deck(text=text % {"steps": 100000, "out": self.out})]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Wait until a few steps ran.
        lines = []
        while len([l for l in lines if l.startswith("step ")]) < 2:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        self.assertNotEqual(proc.returncode, 0, err)
        self.assertIn("stop requested", err)
        with open(os.path.join(self.out, "summary.json")) as f:
            summary = json.load(f)
        with open_trace(os.path.join(self.out, "trace.h5")) as t:
            steps = t["steps"][:]
        self.assertGreaterEqual(len(summary["losses"]), 2)
        self.assertEqual(len(steps), len(summary["losses"]))


class AnalysisOfRealRunsTest(unittest.TestCase):
    """analysis/ on traces of 4-rank CPU runs: strict vs readiness of the same deck, compared."""

    def test_compare_strict_and_readiness(self):
        src = os.environ["CONDUCTOR_SOURCE_DIR"]
        with tempfile.TemporaryDirectory() as tmp:
            deck = os.path.join(tmp, "deck.yaml")
            with open(deck, "w") as f:
                f.write(TINY % {"steps": 3, "out": os.path.join(tmp, "unused")})
            traces = {}
            for mode in ("strict", "readiness"):
                out = os.path.join(tmp, mode)
                proc, _ = mpirun(4, "run", deck, "schedule.execution=" + mode, "run.output=" + out)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                traces[mode] = os.path.join(out, "trace.h5")
            report = os.path.join(tmp, "report.md")
            proc = subprocess.run(["/usr/bin/python3", os.path.join(src, "analysis", "compare.py"),
                                   traces["strict"], traces["readiness"], "-o", report, "--baseline", "strict"],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(report) as f:
                text = f.read()
            self.assertIn("speedup vs strict", text)
            self.assertRegex(text, r"\| readiness \|.*\| [0-9.]+x \|")
            self.assertTrue(os.path.getsize(report[:-3] + ".png") > 0)
            proc = subprocess.run(["/usr/bin/python3", os.path.join(src, "analysis", "bubbles.py"), "--json",
                                   traces["readiness"]], capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertIn("bubble", proc.stdout)
            png = os.path.join(tmp, "timeline.png")
            proc = subprocess.run(["/usr/bin/python3", os.path.join(src, "analysis", "timeline.py"),
                                   traces["readiness"], "-o", png, "--step", "1"],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertTrue(os.path.getsize(png) > 0)


class GlobalTierTest(unittest.TestCase):
    """scheduler.kind: ppo at run time: rank 0 computes each next order from the measured step and broadcasts it."""

    def test_simulate_json_with_the_global_tier_is_json(self):
        # The module's "global tier: PATH" line (now a debug line, on stderr) came before the JSON on stdout.
        with tempfile.TemporaryDirectory() as tmp:
            deck = os.path.join(tmp, "ppo.yaml")
            with open(deck, "w") as f:
                f.write("run: {steps: 2, output: %s}\nparallel: {pipeline: 2, microbatches: 4}\n"
                        "scheduler: {kind: ppo}\n" % os.path.join(tmp, "sim"))
            proc = subprocess.run([BIN, "simulate", deck, "--json"], capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            summary = json.loads(proc.stdout)
            self.assertEqual(summary["steps"][0]["step"], 0)

    def test_ppo_scheduler_emulated_p4(self):
        with tempfile.TemporaryDirectory() as tmp:
            deck = os.path.join(tmp, "ppo.yaml")
            with open(deck, "w") as f:
                f.write("""\
backend: emulated
run: {name: ppo, steps: 4, output: %s}
parallel: {pipeline: 4, microbatches: 8}
schedule: {kind: zb-2p, execution: readiness, hint: bfw}
scheduler: {kind: ppo}
cost: {forward: 2.0, backward_input: 2.0, backward_weight: 1.0, comm: 0.2}
noise: {kind: straggler, straggler_rank: 2, straggler_factor: 1.5}
""" % os.path.join(tmp, "run"))
            proc = subprocess.run([MPIEXEC, "-n", "4", "--oversubscribe", BIN, "run", deck],
                                  capture_output=True, text=True, timeout=240)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(os.path.join(tmp, "run", "summary.json")) as f:
                summary = json.load(f, parse_constant=lambda c: self.fail("not JSON: " + c))  # NaN, Infinity
            self.assertEqual(len(summary["steps"]), 4)
            # The emulated backend has no math: its losses are NaN, written as null.
            self.assertEqual(summary["losses"], [None] * 4)
            self.assertIsNone(summary["final_loss"])
            # Planned one step ahead on rank 0's planner thread: steps 2 and 3 ran orders the policy computed
            # from the timings of steps 0 and 1; the latency of each plan is recorded.
            self.assertEqual(summary["scheduler"]["kind"], "ppo")
            self.assertEqual(summary["scheduler"]["orders_from_policy"], 2)
            self.assertEqual(len(summary["scheduler"]["latency_ms"]), 2)
            self.assertTrue(all(0 < x < 1000 for x in summary["scheduler"]["latency_ms"]))
            self.assertIn("global tier: 2 steps ran its orders", proc.stderr + proc.stdout)
            self.assertNotIn("warning: global tier", proc.stderr)  # planning ~1 ms against a step of tens
            with open_trace(os.path.join(tmp, "run", "trace.h5")) as t:
                ev = t["events"][:]
            compute = ev[ev["kind"] <= 3]
            self.assertEqual(len(compute), 4 * 4 * 8 * 3)  # every F, B, W of every step ran
            # One SEND and one RECV per cross-rank transfer: 3 boundaries x 8 microbatches x 2 directions x 4 steps.
            self.assertEqual(int((ev["kind"] == 4).sum()), 3 * 8 * 2 * 4)
            self.assertEqual(int((ev["kind"] == 5).sum()), 3 * 8 * 2 * 4)
            recv = ev[ev["kind"] == 5]
            self.assertTrue((recv["end_ns"] >= recv["start_ns"]).all())

    def test_missing_policy_file_is_an_error_on_every_rank(self):
        with tempfile.TemporaryDirectory() as tmp:
            deck = os.path.join(tmp, "ppo.yaml")
            with open(deck, "w") as f:
                f.write("backend: emulated\nrun: {output: %s}\nparallel: {pipeline: 2, microbatches: 4}\n"
                        "scheduler: {kind: ppo, policy: %s}\n" % (os.path.join(tmp, "run"),
                                                                   os.path.join(tmp, "nope.pt")))
            proc = subprocess.run([MPIEXEC, "-n", "2", "--oversubscribe", BIN, "run", deck],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn("nope.pt", proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)


class EmulatedAgreementTest(unittest.TestCase):
    """The emulated backend runs the runtime's real logic with ops that take their cost-model time, noise drawn
    as the simulator draws it. How close the runtime's makespan comes to the simulator's is a speed figure
    (bench/bench_runtime.py reports it); what a test can hold on any machine load is that every op lasted at
    least the duration the simulator gave that same op (a sleep is never shorter; a different noise draw would
    make about half the ops shorter), and that the run did every op the simulator did."""

    def emulated_against_simulator(self, text, np_):
        """Runs the emulated deck `text` (its run.output: %s) on np_ ranks and simulates it; returns the measured and
        predicted duration of every op, keyed by (step, stage, microbatch, kind), once the sets of ops agree and no
        op ran shorter than its predicted duration."""
        with tempfile.TemporaryDirectory() as tmp:
            deck = os.path.join(tmp, "emu.yaml")
            with open(deck, "w") as f:
                f.write(text % os.path.join(tmp, "run"))
            proc = subprocess.run([MPIEXEC, "-n", str(np_), "--oversubscribe", BIN, "run", deck],
                                  capture_output=True, text=True, timeout=240)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            sim_dir = os.path.join(tmp, "sim")
            sim = subprocess.run([BIN, "simulate", deck, "run.output=" + sim_dir],
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(sim.returncode, 0, sim.stderr)

            def durations(path):
                with open_trace(path) as t:
                    ev = t["events"][:]
                ev = ev[ev["kind"] <= 3]
                return {(int(e["step"]), int(e["stage"]), int(e["microbatch"]), int(e["kind"])):
                        (int(e["end_ns"]) - int(e["start_ns"])) * 1e-6 for e in ev}

            measured = durations(os.path.join(tmp, "run", "trace.h5"))
            predicted = durations(os.path.join(sim_dir, "trace.h5"))
            self.assertEqual(sorted(measured), sorted(predicted))
            short = [(k, measured[k], predicted[k]) for k in predicted if measured[k] < predicted[k] - 0.01]
            self.assertEqual(short, [], "ops shorter than the simulator's duration for the same op")
            return measured, predicted

    def test_an_input_is_seen_by_the_next_decision(self):
        # One poll after an op often returned the rank's own finished sends and left an input that came during the
        # op unseen (MPI_Testsome progresses arrivals only when none of its requests is complete): readiness ran W
        # ahead of the F it fed for several ops in a row (inputs seen 60-80 ms late; 0.97x of strict under
        # congestion where the simulator gives 1.016x). A rank now notices an input at its first poll after the op
        # it was in: within one op (20 ms) and the transfer (1 ms) of the send's start, with room for the load.
        with tempfile.TemporaryDirectory() as tmp:
            deck = os.path.join(tmp, "emu.yaml")
            with open(deck, "w") as f:
                f.write("backend: emulated\nrun: {name: seen, steps: 3, output: %s}\n"
                        "parallel: {pipeline: 2, microbatches: 4}\n"
                        "schedule: {kind: zb-2p, execution: readiness, hint: critical}\n"
                        "cost: {forward: 20.0, backward_input: 20.0, backward_weight: 20.0, comm: 1.0}\n"
                        % os.path.join(tmp, "run"))
            proc = subprocess.run([MPIEXEC, "-n", "2", "--oversubscribe", BIN, "run", deck], capture_output=True,
                                  text=True, timeout=240)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open_trace(os.path.join(tmp, "run", "trace.h5")) as t:
                ev = t["events"][:]
                kinds = h5py.check_enum_dtype(t["events"].dtype["kind"])
            sent = {(int(e["step"]), int(e["microbatch"]), int(e["rank"]), int(e["peer"])): int(e["start_ns"])
                    for e in ev[ev["kind"] == kinds["SEND"]]}
            late = []
            for e in ev[ev["kind"] == kinds["RECV"]]:
                key = (int(e["step"]), int(e["microbatch"]), int(e["peer"]), int(e["rank"]))
                seen_ms = (int(e["end_ns"]) - sent[key]) * 1e-6
                if seen_ms > 30.0:
                    late.append((key, round(seen_ms, 1)))
            self.assertEqual(late, [], "inputs (step, microbatch, from, to) seen more than an op after their send")

    def test_emulated_ops_take_the_simulators_durations(self):
        _, predicted = self.emulated_against_simulator("""\
backend: emulated
run: {name: emu, steps: 3, output: %s}
parallel: {pipeline: 4, microbatches: 8}
schedule: {kind: 1f1b, execution: readiness}
cost: {forward: 10.0, backward_input: 10.0, backward_weight: 10.0, comm: 1.0}
noise: {kind: gaussian, level: 0.2, seed: 5}
""", 4)
        spread = sorted(predicted.values())
        self.assertGreater(spread[-1] - spread[0], 2.0, "the noise must make durations differ")

    def test_emulated_sample_noise_is_one_factor_per_microbatch(self):
        # noise.kind: sample scales every op of a microbatch by one factor: the runtime sleeps what the simulator
        # draws (no op shorter, as above: an emulated backend without the model would run half of them shorter),
        # and with equal stage costs each microbatch's F lasts the same on both stages, not across microbatches.
        _, predicted = self.emulated_against_simulator("""\
backend: emulated
run: {name: sample, steps: 2, output: %s}
parallel: {pipeline: 2, microbatches: 6}
schedule: {kind: zb-h1, execution: readiness}
cost: {forward: 8.0, backward_input: 8.0, backward_weight: 8.0, comm: 0.5}
noise: {kind: sample, level: 0.5, seed: 5}
""", 2)
        forward = {}
        for (step, stage, mb, kind), ms in predicted.items():
            if kind == 0:
                forward.setdefault((step, mb), []).append(ms)
        self.assertEqual(len(forward), 12)
        for key, both in forward.items():
            self.assertEqual(len(both), 2, key)
            self.assertAlmostEqual(both[0], both[1], places=3, msg=key)
        per_microbatch = sorted(v[0] for v in forward.values())
        self.assertGreater(per_microbatch[-1] / per_microbatch[0], 1.5, "the microbatches must differ")

    def test_emulated_stage_without_layers(self):
        # An encoder (cost.encoder_tflop, 3.3 layers' work) and `layers_per_stage: balanced` leave stage 0 no
        # layer: [0, 3]. The emulated runtime runs that stage's ops (the encoder's time alone) as simulated.
        text = """\
backend: emulated
run: {name: enc, steps: 2, output: %s}
parallel: {pipeline: 2, microbatches: 4, microbatch_size: 2}
model: {n_layers: 3, d_model: 64, n_heads: 2, seq_len: 16, vocab: 64, layers_per_stage: balanced}
schedule: {kind: 1f1b, execution: strict}
cost: {device_tflops: 0.001, encoder_tflop: [1.0e-5, 2.0e-5, 1.0e-5]}
"""
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as deck:
            deck.write(text % "unused")
            deck.flush()
            resolved = subprocess.run([BIN, "validate", deck.name], capture_output=True, text=True, timeout=60)
        self.assertIn("layers_per_stage: [0, 3]", resolved.stdout, resolved.stderr)
        _, predicted = self.emulated_against_simulator(text, 2)
        stage0 = {k[3]: v for k, v in predicted.items() if k[1] == 0}
        self.assertAlmostEqual(stage0[0], 10.0, places=1)  # F: the encoder's 1e-5 TFLOP at 1 GFLOP/s, no layer

if __name__ == "__main__":
    unittest.main(verbosity=2)
