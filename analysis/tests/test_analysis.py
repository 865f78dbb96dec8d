"""Tests of analysis/: figures against hand-computed values, agreement with the stored per-step figures,
the outputs of every tool, and clear errors for malformed or truncated traces.

Traces are built here with h5py following docs/trace.md (tracegen.py); with CONDUCTOR_BINARY set and a
working `simulate`, a simulator trace written by the C++ TraceWriter is checked too."""
import contextlib
import csv
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import unittest.mock

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ANALYSIS = os.path.dirname(HERE)
SOURCE = os.path.dirname(ANALYSIS)
PY = "/usr/bin/python3"
sys.path.insert(0, ANALYSIS)
sys.path.insert(0, HERE)

import conductor_trace as ct  # noqa: E402
import tracegen  # noqa: E402


def tool(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ANALYSIS, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bubbles, timeline, compare, perfetto = (tool(n) for n in ("bubbles", "timeline", "compare", "perfetto"))


def load_json(path):
    with open(path) as f:
        return json.load(f)


def run(script, *args):
    return subprocess.run([os.path.join(ANALYSIS, script)] + list(args), capture_output=True, text=True, timeout=60)


def check_profiler_export(case, trace, doc):
    """The Chrome JSON of perfetto.py against the trace and HolisticTraceAnalysis's documented loader schema
    (hta/configs/parser_config.py DEFAULT_MIN_REQUIRED_COLS; hta/common/trace.py: GPU events have args.stream
    > 0, host events none, a kernel's iteration comes from the host event with its args.correlation inside a
    ProfilerStep#N span; hta/utils/utils.py: "ncclKernel" in a name marks communication)."""
    ev = doc["traceEvents"]
    case.assertIsInstance(doc["distributedInfo"]["rank"], int)
    xs = [e for e in ev if e["ph"] == "X"]
    for e in xs:
        for col in ("ts", "dur", "name", "cat", "pid", "tid"):
            case.assertIn(col, e)
    kernels = [e for e in xs if e["cat"] == "kernel"]
    launches = {}
    for e in xs:
        if e["cat"] == "cuda_runtime":
            case.assertNotIn("stream", e["args"])
            launches.setdefault(e["args"]["correlation"], []).append(e)
    spans = {}
    for e in xs:
        if e["cat"] == "user_annotation":
            m = re.match(r"ProfilerStep\s*#\s*(\d+)$", e["name"])
            case.assertIsNotNone(m, e["name"])
            case.assertNotIn((e["pid"], int(m.group(1))), spans)
            spans[(e["pid"], int(m.group(1)))] = e
    case.assertEqual(len(kernels), len(trace.events))
    eps = 1e-6
    for k in kernels:
        a = k["args"]
        case.assertGreater(a["stream"], 0)
        case.assertEqual(k["tid"], a["stream"])
        (launch,) = launches[a["correlation"]]
        case.assertEqual((launch["pid"], launch["ts"]), (k["pid"], k["ts"]))
        span = spans[(k["pid"], a["step"])]  # ProfilerStep#step covers every op of the step on its rank
        case.assertLessEqual(span["ts"] - eps, k["ts"])
        case.assertLessEqual(k["ts"] + k["dur"], span["ts"] + span["dur"] + eps)
        case.assertEqual("ncclKernel" in k["name"], a["stream"] >= perfetto.STREAM_COMM)
    case.assertEqual(len(spans), sum(len(np.unique(trace.step_events(s)["rank"])) for s in trace.step_ids))
    check_tracks_nest(case, xs)
    # Flow events: one per SEND, "s" on the SEND's slice, "f" (bp e) inside the matching RECV's slice.
    kinds = [trace.kind_name(k) for k in trace.events["kind"]]
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    case.assertEqual(len(starts), sum(1 for k in kinds if k == "SEND"))
    case.assertEqual(len(starts), len([e for e in ev if e["ph"] == "s"]))  # ids unique
    case.assertEqual(set(starts), set(ends))
    by_slot = {}
    for k in kernels:
        by_slot.setdefault((k["pid"], k["tid"]), []).append(k)
    for i, s in starts.items():
        f = ends[i]
        case.assertEqual(f["bp"], "e")
        send = [k for k in by_slot[(s["pid"], s["tid"])] if k["ts"] == s["ts"] and " SEND " in k["name"]]
        case.assertTrue(send, s)
        recv = [k for k in by_slot[(f["pid"], f["tid"])] if " RECV " in k["name"] and
                k["ts"] - eps <= f["ts"] <= k["ts"] + k["dur"] + eps and k["args"]["peer"] == s["pid"] and
                k["args"]["microbatch"] == s["args"]["microbatch"] and k["args"]["step"] == s["args"]["step"]]
        case.assertTrue(recv, f)
        case.assertEqual(send[0]["args"]["peer"], f["pid"])


def check_tracks_nest(case, xs):
    """Perfetto shows the complete (X) events of one track only where they nest: on every (pid, tid), any two
    slices are disjoint or one lies within the other."""
    by_track = {}
    for e in xs:
        by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    eps = 1e-6
    for track, slices in by_track.items():
        slices.sort(key=lambda x: (x[0], -x[1]))
        open_ = []  # enclosing slices
        for start, end, name in slices:
            while open_ and open_[-1][1] <= start + eps:
                open_.pop()
            if open_:
                case.assertLessEqual(end, open_[-1][1] + eps, "track %s: %s [%g, %g] overlaps %s [%g, %g] without "
                                     "nesting" % (track, name, start, end, open_[-1][2], open_[-1][0], open_[-1][1]))
            open_.append((start, end, name))


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="conductor_analysis_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def example(self, name="example.h5", steps=1, **kw):
        p = self.path(name)
        tracegen.example_trace(p, steps=steps, **kw)
        return p


class StepTexts(unittest.TestCase):
    def test_steps_present_show_their_gaps(self):
        # "0..19" hid that steps 3, 4 and 7 were missing, in the very message about a missing step.
        self.assertEqual(ct._ranges([0, 1, 2, 5, 6] + list(range(8, 20))), "0..2, 5..6, 8..19")
        self.assertEqual(ct._ranges([4]), "4")
        self.assertEqual(ct._ranges([]), "none")
        self.assertEqual(ct._ranges(list(range(0, 40, 2)), most=3), "0, 2, 4, and 17 more runs")

    def test_step_range_reads_n_or_a_to_b_and_nothing_else(self):
        import argparse
        self.assertEqual(ct.step_range("3"), (3, 3))
        self.assertEqual(ct.step_range("1..4"), (1, 4))
        for bad in ("3..", "..3", "3_0", " 3", "5..2", "-1", "a", ""):
            with self.assertRaises(argparse.ArgumentTypeError, msg=bad):
                ct.step_range(bad)


class HandComputed(TempDirCase):
    """The example of tracegen.example_events, worked out by hand:
    rank 0: F0 [0,100) F1 [100,200) B0 [300,400) ready 300, B1 [500,600) ready 450 (migrated): busy 400
    rank 1: F0 [120,220) ready 110, B0 [220,290), F1 [290,390) ready 210, B1 [390,440), W0 [440,470),
            W1 [470,500): busy 380
    makespan 600; bubble 1 - 780/1200 = 0.35; lower bound 400.
    rank 0 idle 200, all steady: gap [200,300) nothing ready (B0 ready at 300) -> waiting 100;
            gap [400,500) B1 ready at 450 -> waiting 50, not picked 50.
    rank 1 idle 220: warm-up [0,120) with F0 ready at 110 -> waiting 110, not picked 10;
            cool-down [500,600) -> waiting 100.
    critical path: r0 F0 -> (data, transfer 10, slack 10) r1 F0 -> r1 B0 -> r1 F1 -> r1 B1
            -> (data, transfer 10, slack 50) r0 B1: compute 520 + transfer 20 + slack 60 = 600."""

    def setUp(self):
        super().setUp()
        self.trace = ct.load(self.example())

    def test_step_figures(self):
        f = ct.step_figures(self.trace, 0)
        self.assertEqual(f["makespan_ns"], 600)
        self.assertAlmostEqual(f["bubble_ratio"], 0.35, places=12)
        self.assertEqual(list(f["busy_ns"]), [400, 380])
        self.assertEqual(f["lower_bound_ns"], 400.0)
        # Per-stage (Zero Bubble paper): rank 0 spans [0,600) with 400 busy, rank 1 [120,500) all busy.
        self.assertEqual(list(f["span_ns"]), [600, 380])
        self.assertAlmostEqual(f["stage_bubble_ratio"], (1 / 3 + 0) / 2, places=12)

    def test_stage_bubble_with_and_without_the_stored_column(self):
        want = tracegen.EXAMPLE["stage_bubble_ratio"]
        old = bubbles.analyze(ct.load(self.example("old.h5", steps=2)))  # written before the column existed
        self.assertEqual([s["stored_stage_bubble_ratio"] for s in old["per_step"]], [None, None])
        self.assertEqual(old["stored_mismatch_steps"], [])
        self.assertAlmostEqual(old["overall"]["stage_bubble_ratio"], want, places=12)
        self.assertAlmostEqual(old["per_rank"][0]["stage_bubble_ratio"], 1 / 3, places=12)
        self.assertAlmostEqual(old["per_rank"][1]["stage_bubble_ratio"], 0.0, places=12)
        self.assertIsNone(ct.run_totals(ct.load(self.path("old.h5")))["stage_bubble_ratio"])
        new = bubbles.analyze(ct.load(self.example("new.h5", steps=2, stage_bubble=want)))
        self.assertEqual([s["stored_stage_bubble_ratio"] for s in new["per_step"]], [want, want])
        self.assertEqual(new["stored_mismatch_steps"], [])
        self.assertAlmostEqual(ct.run_totals(ct.load(self.path("new.h5")))["stage_bubble_ratio"], want, places=12)
        wrong = bubbles.analyze(ct.load(self.example("wrong.h5", steps=1, stage_bubble=0.5)))
        self.assertEqual(wrong["stored_mismatch_steps"], [0])
        rows = list(csv.DictReader(io.StringIO(self._csv(self.path("new.h5")))))
        self.assertAlmostEqual(float(rows[0]["stage_bubble_ratio"]), want)
        self.assertAlmostEqual(float(rows[-3]["stored_stage_bubble_ratio"]), want)  # step 1, rank all

    def _csv(self, path):
        out = self.path("out.csv")
        self.assertEqual(bubbles.main(["--csv", "-o", out, path]), 0)
        with open(out) as f:
            return f.read()

    def test_idle_split(self):
        r0, r1 = ct.idle_split(self.trace, 0)
        self.assertEqual((r0["idle_ns"], r0["warmup_ns"], r0["steady_ns"], r0["cooldown_ns"]), (200, 0, 200, 0))
        self.assertEqual((r0["waiting_ns"], r0["not_picked_ns"]), (150, 50))
        self.assertEqual((r1["idle_ns"], r1["warmup_ns"], r1["steady_ns"], r1["cooldown_ns"]), (220, 120, 0, 100))
        self.assertEqual((r1["waiting_ns"], r1["not_picked_ns"]), (210, 10))

    def test_critical_path(self):
        cp = ct.critical_path(self.trace, 0)
        self.assertEqual([(o["rank"], o["kind"], o["microbatch"]) for o in cp["ops"]],
                         [(0, "F", 0), (1, "F", 0), (1, "B", 0), (1, "F", 1), (1, "B", 1), (0, "B", 1)])
        self.assertEqual([o["via"] for o in cp["ops"]], ["start", "data", "rank", "rank", "rank", "data"])
        self.assertEqual((cp["length_ns"], cp["compute_ns"], cp["transfer_ns"], cp["slack_ns"]), (600, 520, 20, 60))

    def test_bubbles_overall_and_per_rank(self):
        res = bubbles.analyze(ct.load(self.example("three.h5", steps=3)))
        o = res["overall"]
        self.assertEqual(o["steps"], 3)
        self.assertAlmostEqual(o["bubble_ratio"], 0.35, places=12)
        self.assertEqual((o["warmup_ns"], o["steady_ns"], o["cooldown_ns"]), (360, 600, 300))
        self.assertEqual((o["waiting_ns"], o["not_picked_ns"]), (1080, 180))
        self.assertAlmostEqual(res["per_rank"][0]["bubble_ratio"], 200 / 600, places=12)
        self.assertAlmostEqual(res["per_rank"][1]["bubble_ratio"], 220 / 600, places=12)
        self.assertEqual(res["critical_path"]["step"], 2)  # default: the last step


class Aggregation(TempDirCase):
    def two_steps(self):
        """Step 0: the example (makespan 600, bubble 0.35, per-stage 1/6); step 1: both ranks busy [1000,2000)
        (makespan 1000, bubble 0). Mean of the steps 0.175; time-weighted 0.35 x 600 / 1600 = 0.13125."""
        p = self.path("two.h5")
        ev = tracegen.ev
        rows = tracegen.example_events() + [ev(1, 0, "F", 0, 1000, 1000, 2000), ev(1, 1, "F", 0, 1000, 1000, 2000)]
        tracegen.write_trace(p, rows, [tracegen.step_row(0, 600, 0.35, 400.0) + (1 / 6,),
                                       tracegen.step_row(1, 1000, 0.0, 1000.0, start=1000) + (0.0,)])
        return p

    def test_overall_bubble_is_the_mean_of_the_step_values(self):
        """docs/trace.md: over steps, summary.json, bubbles.py and compare.py take the mean of the per-step values."""
        p = self.two_steps()
        res = bubbles.analyze(ct.load(p))
        self.assertEqual(res["stored_mismatch_steps"], [])
        self.assertAlmostEqual(res["overall"]["bubble_ratio"], 0.175, places=12)
        self.assertAlmostEqual(res["overall"]["time_weighted_bubble_ratio"], 0.13125, places=12)
        self.assertAlmostEqual(res["overall"]["stage_bubble_ratio"], 1 / 12, places=12)
        table = io.StringIO()
        bubbles.print_table(res, table)
        self.assertIn("overall bubble ratio 17.5% (per-stage, Zero Bubble paper: 8.3%; both the mean over steps)",
                      table.getvalue())
        self.assertIn("time-weighted bubble ratio 13.1% (", table.getvalue())
        self.assertAlmostEqual(ct.run_totals(ct.load(p))["bubble_ratio"], 0.175, places=12)
        out = self.path("r.md")
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(compare.main([p, "-o", out, "--include-warmup"]), 0)
        with open(out) as f:
            self.assertIn("| 17.5 | 1.000x |", f.read())

    def test_rank_without_ops_has_no_stage_bubble(self):
        """A third rank with no op in any step: its per-stage bubble is blank over all steps, as in each step."""
        p = self.path("idle_rank.h5")
        tracegen.write_trace(p, tracegen.example_events(), [tracegen.step_row(0, 600, 1 - 780 / 1800, 400.0)],
                             world_size=3)
        res = bubbles.analyze(ct.load(p))
        self.assertIsNone(res["per_step"][0]["ranks"][2]["stage_bubble_ratio"])
        self.assertIsNone(res["per_rank"][2]["stage_bubble_ratio"])
        self.assertAlmostEqual(res["per_rank"][0]["stage_bubble_ratio"], 1 / 3, places=12)
        out = self.path("b.csv")
        self.assertEqual(bubbles.main(["--csv", "-o", out, p]), 0)
        with open(out) as f:
            rows = {(r["step"], r["rank"]): r for r in csv.DictReader(f)}
        self.assertEqual(rows[("all", "2")]["stage_bubble_ratio"], "")
        self.assertEqual(rows[("0", "2")]["stage_bubble_ratio"], "")
        self.assertEqual(bubbles.main(["-o", out, p]), 0)
        with open(out) as f:
            self.assertRegex(f.read(), r"\n +2 +0\.000 +0\.600 +100\.0% +- ")  # rank 2, all steps (us)


class AgreesWithStoredFigures(TempDirCase):
    def test_recomputed_equals_stored(self):
        res = bubbles.analyze(ct.load(self.example(steps=2)))
        self.assertEqual(res["stored_mismatch_steps"], [])
        for s in res["per_step"]:
            self.assertTrue(s["agrees"])
            self.assertEqual(s["bubble_ratio"], s["stored_bubble_ratio"])
            self.assertEqual(s["makespan_ns"], s["stored_makespan_ns"])

    def test_disagreement_is_reported(self):
        p = self.path("wrong.h5")
        tracegen.write_trace(p, tracegen.example_events(), [tracegen.step_row(0, 600, 0.30, 400.0)])
        res = bubbles.analyze(ct.load(p))
        self.assertEqual(res["stored_mismatch_steps"], [0])
        r = run("bubbles.py", p)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("differ from /steps at steps [0]", r.stderr)
        self.assertIn("MISMATCH", r.stdout)
        r = run("bubbles.py", "--json", p)
        self.assertEqual(r.returncode, 0, r.stderr)
        # Strict JSON: a trace without losses (the simulator's) wrote "loss": NaN, which JSON has not.
        out = json.loads(r.stdout, parse_constant=lambda c: self.fail("not JSON: " + c))["traces"][0]
        self.assertEqual(out["stored_mismatch_steps"], [0])
        self.assertIs(out["per_step"][0]["agrees"], False)
        self.assertIsNone(out["per_step"][0]["loss"])

    def test_compare_uses_stored_figures(self):
        # run "fast": every time scaled by 2/3 -> makespan 400 (stored), speedup 600/400 = 1.5
        base = self.example("base.h5")
        fast = self.path("fast.h5")
        ev = [e[:6] + tuple(v * 2 // 3 for v in e[6:9]) + e[9:] for e in tracegen.example_events()]
        tracegen.write_trace(fast, ev, [tracegen.step_row(0, 400, 0.35, 400 * 2 / 3)], execution="readiness")
        out = self.path("report.md")
        rc = compare.main(["strict=" + base, "readiness=" + fast, "-o", out, "--baseline", "strict", "--include-warmup"])
        self.assertEqual(rc, 0)
        with open(out) as f:
            text = f.read()
        self.assertIn("| run | execution | repeats | steps |", text)  # the axis that varies, no other
        self.assertIn("| readiness | readiness:schedule | 1 | 1 | 1e+07 | 0.0004 | 35.0 | 1.500x |", text)
        self.assertIn("| strict | strict | 1 | 1 | 6.667e+06 | 0.0006 | 35.0 | 1.000x |", text)
        self.assertIn("![comparison](report.png)", text)
        with open(self.path("report.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # -o - : the report on standard output once, the chart where --png says (it was ./-.png, and the report
        # printed twice).
        r = subprocess.run([os.path.join(ANALYSIS, "compare.py"), base, "-o", "-", "--include-warmup"],
                           capture_output=True, text=True, timeout=60, cwd=self.dir)
        self.assertEqual(r.returncode, 2)
        self.assertIn("name the chart with --png FILE", r.stderr)
        self.assertFalse(os.path.exists(self.path("-.png")))
        r = run("compare.py", base, "-o", "-", "--png", self.path("c.png"), "--include-warmup")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count("| run |"), 1, r.stdout)
        self.assertTrue(os.path.exists(self.path("c.png")))
        # -o a device: the chart's default name beside it made /dev/null.png; now --png is asked for.
        existed = os.path.exists("/dev/null.png")
        r = run("compare.py", base, "-o", "/dev/null", "--include-warmup")
        made = not existed and os.path.exists("/dev/null.png")
        if made:
            os.remove("/dev/null.png")
        self.assertFalse(made, "compare.py made /dev/null.png")
        self.assertEqual(r.returncode, 2)
        self.assertIn("-o /dev/null is not a regular file (a device or a pipe)", r.stderr)
        r = run("compare.py", base, "-o", "/dev/null", "--png", self.path("d.png"), "--include-warmup")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(self.path("d.png")))
        # Without --include-warmup step 0 is left out: a one-step run has nothing left, said clearly.
        r = run("compare.py", base, "-o", out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("leaving out 1 warm-up step(s) leaves none (use --include-warmup", r.stderr)


class Outputs(TempDirCase):
    def test_bubbles_csv_json_table(self):
        p = self.example(steps=2)
        out = self.path("b.out")

        def bubbles_out(*args):
            self.assertEqual(bubbles.main(list(args) + ["-o", out, p]), 0)
            with open(out) as f:
                return f.read()

        rows = list(csv.DictReader(io.StringIO(bubbles_out("--csv"))))
        self.assertEqual(len(rows), 1 + 2 + 2 * (1 + 2))  # overall, per rank, per step x (all + ranks)
        self.assertEqual(rows[0]["step"], "all")
        self.assertAlmostEqual(float(rows[0]["bubble_ratio"]), 0.35)
        d = json.loads(bubbles_out("--json", "--step", "0"))["traces"][0]
        self.assertEqual(d["critical_path"]["step"], 0)
        self.assertEqual(len(d["per_step"]), 2)
        table = bubbles_out()
        self.assertIn("critical path of step 1", table)
        self.assertIn("35.0%", table)

    def test_timeline_png(self):
        p = self.example(steps=2)
        out = self.path("tl.png")
        self.assertEqual(timeline.main([p, "-o", out, "--step", "1", "--comm"]), 0)
        import matplotlib.image
        img = matplotlib.image.imread(out)
        self.assertGreater(img.shape[0], 50)
        self.assertGreater(img.shape[1], 200)

    def test_perfetto_json(self):
        p = self.example(steps=2)
        out, per = self.path("trace.json"), self.path("ranks")
        self.assertEqual(perfetto.main([p, "-o", out, "--per-rank", per]), 0)
        d = load_json(out)
        self.assertEqual(d["distributedInfo"]["world_size"], 2)
        names = {e["pid"]: e["args"]["name"] for e in d["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(names[0], "rank 0 (simulator)")
        self.assertEqual(names[1], "rank 1 (simulator)")
        ops = [e for e in d["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"]
        self.assertEqual(len(ops), 2 * len(tracegen.example_events()))
        b1 = [e for e in ops if e["name"] == "B1" and e["pid"] == 0 and e["args"]["step"] == 0][0]
        self.assertEqual((b1["ts"], b1["dur"], b1["args"]["migrated"]), (0.5, 0.1, 1))  # us
        for r in (0, 1):
            dr = load_json(os.path.join(per, "rank%d.json" % r))
            self.assertEqual(dr["distributedInfo"]["rank"], r)
            self.assertTrue(all(e["pid"] == r for e in dr["traceEvents"]))
        self.assertNotIn("baseTimeNanoseconds", d)  # the simulator's clock has no epoch

    def test_perfetto_steps_writes_those_steps_alone(self):
        p = self.example(steps=3)
        out = self.path("one.json")
        self.assertEqual(perfetto.main([p, "-o", out, "--steps", "1"]), 0)
        ops = [e for e in load_json(out)["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"]
        self.assertEqual({e["args"]["step"] for e in ops}, {1})
        self.assertEqual(len(ops), len(tracegen.example_events()))
        self.assertEqual(perfetto.main([p, "-o", out, "--steps", "1..2"]), 0)
        ops = [e for e in load_json(out)["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"]
        self.assertEqual({e["args"]["step"] for e in ops}, {1, 2})
        r = run("perfetto.py", p, "-o", out, "--steps", "7")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no step of 7 in /steps (steps present: 0..2)", r.stderr)

    def test_every_tool_has_help(self):
        for script in ("bubbles.py", "timeline.py", "compare.py", "perfetto.py"):
            self.assertTrue(os.access(os.path.join(ANALYSIS, script), os.X_OK), script)
            r = run(script, "--help")
            self.assertEqual(r.returncode, 0, script + r.stderr)
            self.assertIn("usage:", r.stdout)


class OutputPaths(TempDirCase):
    def refused(self, script, args, expected):
        """Exit 2 with one line 'SCRIPT: error: ...' containing `expected`."""
        r = run(script, *args)
        self.assertEqual(r.returncode, 2, script + ": " + r.stderr)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith(script + ": error: "), lines[0])
        self.assertIn(expected, lines[0])
        return lines[0]

    def test_output_naming_an_input_or_another_output_is_refused(self):
        p = self.example(steps=2)
        with open(p, "rb") as f:
            before = f.read()
        os.symlink(p, self.path("link.h5"))
        same = os.path.join(self.dir, ".", "example.h5")  # another spelling of the input
        for script, args in (("bubbles.py", [p, "-o", same]), ("perfetto.py", [p, "-o", self.path("link.h5")]),
                             ("compare.py", [p, "-o", p, "--include-warmup"]),
                             ("compare.py", [p, "-o", self.path("r.md"), "--png", p, "--include-warmup"]),
                             ("timeline.py", [p, "-o", p])):
            self.refused(script, args, "is the input trace %s; writing it would overwrite the trace" % p)
        with self.assertRaisesRegex(ct.TraceError, r"^%s: the output \(-o\) is the input trace" % re.escape(same)):
            ct.check_outputs([p], [("-o", same)])
        q = self.path("trace.png")  # an image-named trace: the extension passes, the path does not
        shutil.copyfile(p, q)
        self.refused("timeline.py", [q, "-o", q], "is the input trace")
        with open(p, "rb") as f:
            self.assertEqual(f.read(), before)
        # two outputs of one command: compare's report and chart, perfetto's -o and a --per-rank file
        line = self.refused("compare.py", [p, "-o", self.path("r.png"), "--include-warmup"], "are the same file")
        self.assertIn("the outputs -o and the chart", line)
        self.refused("compare.py", [p, "-o", self.path("r.md"), "--png", self.path("r.md"), "--include-warmup"],
                     "the outputs -o and --png are the same file")
        self.refused("perfetto.py", [p, "-o", self.path("ranks/rank1.json"), "--per-rank", self.path("ranks")],
                     "the outputs -o and --per-rank are the same file")
        self.assertFalse(os.path.exists(self.path("r.png")))
        self.assertFalse(os.path.exists(self.path("r.md")))

    def test_unwritable_output_and_bad_image_options(self):
        p = self.example()
        missing = self.path("no/such/folder")
        for script, out, extra in (("timeline.py", "t.png", []), ("bubbles.py", "b.txt", []),
                                   ("perfetto.py", "p.json", []), ("compare.py", "r.md", ["--include-warmup"])):
            self.refused(script, [p, "-o", os.path.join(missing, out)] + extra,
                         "%s/%s: cannot write the output file (No such file or directory)" % (missing, out))
        # compare.py writes its chart before the report: the report's folder is checked first, the file named is
        # the -o the user gave (not the chart derived from it), and nothing is written.
        line = self.refused("compare.py", [p, "-o", os.path.join(missing, "c.md"), "--png", self.path("c.png")],
                            "%s/c.md: cannot write the output file (No such file or directory)" % missing)
        self.assertNotIn("c.png", line)
        self.assertFalse(os.path.exists(self.path("c.png")))
        self.refused("compare.py", [p, "-o", p + "/c.md", "--png", self.path("c.png"), "--include-warmup"],
                     "%s/c.md: cannot write the output file (Not a directory)" % p)
        self.refused("compare.py", [p, "-o", self.dir, "--png", self.path("c.png"), "--include-warmup"],
                     "%s: cannot write the output file (Is a directory)" % self.dir)
        self.assertFalse(os.path.exists(self.path("c.png")))
        self.refused("perfetto.py", [p, "-o", self.path("p.json"), "--per-rank", os.path.join(p, "x")],
                     "%s/x: cannot write the output file" % p)
        self.refused("timeline.py", [p, "-o", self.path("x.txt")],
                     "%s: -o must name an image file ending in .png, .svg or .pdf ('.txt' is not an image format"
                     % self.path("x.txt"))
        self.refused("compare.py", [p, "-o", self.path("r.md"), "--png", self.path("r.txt"), "--include-warmup"],
                     "r.txt: --png must name an image file")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
            timeline.main([p, "-o", self.path("t.png"), "--dpi", "0"])
        self.assertEqual(cm.exception.code, 2)
        self.assertIn("--dpi must be > 0 (got 0)", err.getvalue())
        self.assertFalse(os.path.exists(self.path("t.png")))
        # A bitmap past matplotlib's 2^16 pixels a side: named with --dpi and the largest that fits (a ValueError
        # with exit 1 before); the same figure as SVG (no pixels) is written.
        line = self.refused("timeline.py", [p, "-o", self.path("t.png"), "--dpi", "100000"],
                            "%s: at --dpi 100000 the image would be " % self.path("t.png"))
        self.assertRegex(line, r"over the 65536 a side matplotlib draws; use --dpi \d+ or less, or a vector format")
        self.assertFalse(os.path.exists(self.path("t.png")))
        self.assertEqual(run("timeline.py", p, "-o", self.path("t.svg"), "--dpi", "100000").returncode, 0)

    def test_an_existing_hdf5_file_is_never_overwritten(self):
        """An output that is already an HDF5 file (another run's trace, a checkpoint) is refused, whatever the tool
        and option, by its signature (at offset 0, or after a user block) and not its name; other existing files
        are overwritten as before."""
        import h5py
        os.mkdir(self.path("A"))
        os.mkdir(self.path("B"))
        a = self.example("A/trace.h5")
        b = self.path("B/trace.h5")
        tracegen.example_trace(b, steps=2)
        ckpt = self.path("B/ckpt.json")  # an HDF5 file whatever its name says, behind a 512-byte user block
        with h5py.File(ckpt, "w", userblock_size=512) as f:
            f["x"] = np.arange(3)
        os.symlink(b, self.path("B/link.png"))
        os.mkdir(self.path("ranks"))
        shutil.copyfile(b, self.path("ranks/rank1.json"))
        shutil.copyfile(b, self.path("r.png"))  # compare.py's default chart for -o r.md
        before = {}
        for q in (b, ckpt, self.path("ranks/rank1.json"), self.path("r.png")):
            with open(q, "rb") as f:
                before[q] = f.read()
        for script, args, path, what in (
                ("perfetto.py", [a, "-o", b], b, "-o"),
                ("perfetto.py", [a, "-o", ckpt], ckpt, "-o"),
                ("perfetto.py", [a, "-o", self.path("p.json"), "--per-rank", self.path("ranks")],
                 self.path("ranks/rank1.json"), "--per-rank"),
                ("bubbles.py", [a, "--json", "-o", b], b, "-o"),
                ("timeline.py", [a, "-o", self.path("B/link.png")], self.path("B/link.png"), "-o"),
                ("compare.py", [a, "-o", b, "--include-warmup"], b, "-o"),
                ("compare.py", [a, "-o", self.path("x.md"), "--png", self.path("B/link.png"), "--include-warmup"],
                 self.path("B/link.png"), "--png"),
                ("compare.py", [a, "-o", self.path("r.md"), "--include-warmup"], self.path("r.png"), "the chart")):
            line = self.refused(script, args, "%s: the output (%s" % (path, what))
            self.assertIn("is an HDF5 file (a trace?); refusing to overwrite it, choose another output file", line)
        for q, data in before.items():
            with open(q, "rb") as f:
                self.assertEqual(f.read(), data, q)
        for q in ("p.json", "x.md", "r.md", "ranks/rank0.json"):
            self.assertFalse(os.path.exists(self.path(q)), q)
        self.assertTrue(ct.is_hdf5(b) and ct.is_hdf5(ckpt))
        # Not HDF5: overwritten as before (a text file, a file shorter than the signature, a file whose HDF5-like
        # bytes are not where HDF5 looks); a named pipe is not opened (it would block) and not refused.
        for name, data in (("old.json", b"{}"), ("short.json", b"\x89HD"), ("late.json", b"x" + ct.HDF5_SIGNATURE)):
            with open(self.path(name), "wb") as f:
                f.write(data)
            self.assertFalse(ct.is_hdf5(self.path(name)))
            r = run("perfetto.py", a, "-o", self.path(name))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("traceEvents", load_json(self.path(name)))
        os.mkfifo(self.path("fifo"))
        ct.check_outputs([a], [("-o", self.path("fifo"))])

    def test_a_run_folders_records_are_never_overwritten(self):
        """summary.json, resolved.yaml ... in a folder holding a run's resolved deck are the run's records: refused
        as outputs by every tool (bubbles.py -o summary.json replaced a run's summary); the same names elsewhere,
        and other files in a run folder (a tool's earlier report), are written."""
        a = self.example("trace.h5")
        os.mkdir(self.path("run"))
        with open(self.path("run/resolved.yaml"), "w") as f:
            f.write("run: {name: x}\n")
        with open(self.path("run/summary.json"), "w") as f:
            f.write("{}")
        for script, args, path in (
                ("bubbles.py", [a, "-o", self.path("run/summary.json")], self.path("run/summary.json")),
                ("perfetto.py", [a, "-o", self.path("run/resolved.yaml")], self.path("run/resolved.yaml")),
                ("compare.py", [a, "-o", self.path("run/resolved.yaml"), "--include-warmup"],
                 self.path("run/resolved.yaml"))):
            line = self.refused(script, args, "%s: the output (-o) is a record of the run in %s" %
                                (path, self.path("run")))
            self.assertIn("refusing to overwrite it", line)
        with open(self.path("run/summary.json")) as f:
            self.assertEqual(f.read(), "{}")
        with open(self.path("run/resolved.yaml")) as f:
            self.assertEqual(f.read(), "run: {name: x}\n")
        self.assertFalse(os.path.exists(self.path("run/resolved.png")))
        for out in ("run/bubbles.txt", "summary.json"):  # not a record / not in a run folder
            for _ in range(2):
                self.assertEqual(run("bubbles.py", a, "-o", self.path(out)).returncode, 0)

    def test_perfetto_checks_every_output_before_writing_one(self):
        """A per-rank file that cannot be written left -o replaced and the lower ranks' files written; a
        --per-rank naming a file is said as such; -o - is standard output (it made a file named '-')."""
        a = self.example("trace.h5")
        with open(self.path("p.json"), "w") as f:
            f.write("precious")
        os.makedirs(self.path("pr/rank1.json"))
        self.refused("perfetto.py", [a, "-o", self.path("p.json"), "--per-rank", self.path("pr")],
                     "%s: cannot write the output file (Is a directory)" % self.path("pr/rank1.json"))
        with open(self.path("p.json")) as f:
            self.assertEqual(f.read(), "precious")
        self.assertFalse(os.path.exists(self.path("pr/rank0.json")))
        self.refused("perfetto.py", [a, "-o", self.path("q.json"), "--per-rank", self.path("p.json")],
                     "%s: --per-rank names a folder (it gets rank<R>.json files), and this is a file" %
                     self.path("p.json"))
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            r = run("perfetto.py", a, "-o", "-")
        finally:
            os.chdir(cwd)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("traceEvents", json.loads(r.stdout))
        self.assertIn("wrote standard output:", r.stderr)
        self.assertFalse(os.path.exists(self.path("-")))
        self.assertFalse(ct.is_hdf5(self.path("fifo")) or ct.is_hdf5(self.dir) or ct.is_hdf5(self.path("none")))


def temporaries(folder):
    """The temporary files an OutputSet leaves in `folder` (none, once a tool has ended)."""
    return [n for n in os.listdir(folder) if n.startswith(".") and n.endswith(".tmp")]


def limit_file_size(nbytes):
    """preexec_fn: files of the child may not grow past nbytes (writes fail with EFBIG, 'File too large', as on a
    full disk; Python ignores SIGXFSZ)."""
    import resource
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))


class WholeOutputs(TempDirCase):
    """Every output is written to a temporary file beside it and renamed into place when complete: a write that
    fails (a full disk) or a signal leaves the earlier file as it was and no partial or temporary file."""

    EARLIER = "the earlier report\n"

    def earlier(self, *names):
        for name in names:
            with open(self.path(name), "w") as f:
                f.write(self.EARLIER)

    def check_earlier(self, *names):
        for name in names:
            with open(self.path(name)) as f:
                self.assertEqual(f.read(), self.EARLIER, name)
        self.assertEqual(temporaries(self.dir), [])

    def test_a_failed_write_keeps_the_earlier_output(self):
        p = self.example(steps=2)
        os.mkdir(self.path("ranks"))
        for script, args, outs, failing in (
                ("bubbles.py", ["-o", self.path("b.txt")], ["b.txt"], "b.txt"),
                ("bubbles.py", ["--json", "-o", self.path("b.json")], ["b.json"], "b.json"),
                ("timeline.py", ["-o", self.path("t.png")], ["t.png"], "t.png"),
                ("timeline.py", ["-o", self.path("t.svg")], ["t.svg"], "t.svg"),
                ("perfetto.py", ["-o", self.path("p.json"), "--per-rank", self.path("ranks")],
                 ["p.json", "ranks/rank0.json", "ranks/rank1.json"], "p.json"),
                ("compare.py", ["-o", self.path("c.md"), "--include-warmup"], ["c.md", "c.png"], "c.png")):
            self.earlier(*outs)
            r = subprocess.run([os.path.join(ANALYSIS, script), p] + args, capture_output=True, text=True,
                               timeout=60, preexec_fn=limit_file_size(512))
            self.assertEqual(r.returncode, 2, "%s: %s" % (script, r.stderr))
            self.assertEqual(r.stderr, "%s: error: %s: cannot write the output file (File too large)\n" %
                             (script, self.path(failing)))
            self.check_earlier(*outs)
            self.assertEqual(temporaries(self.path("ranks")), [])

    def test_compare_replaces_its_chart_and_report_together(self):
        """The report failing after the chart was drawn (a full disk) keeps the earlier chart too."""
        p = self.example(steps=2)
        self.earlier("c.md", "c.png")
        class FullDisk:  # a file whose writes fail as on a full disk
            def __init__(self, f):
                self.f = f

            def write(self, text):
                raise OSError(28, "No space left on device")

            def __getattr__(self, name):
                return getattr(self.f, name)

        real_init = ct._Output.__init__

        def init(out, f, name, owned=True):
            real_init(out, FullDisk(f) if owned else f, name, owned)
        with unittest.mock.patch.object(ct._Output, "__init__", init), \
                self.assertRaisesRegex(ct.TraceError, r"^%s: cannot write the output file \(No space left on device\)$"
                                       % re.escape(self.path("c.md"))):
            compare.main([p, "-o", self.path("c.md"), "--include-warmup"])
        self.check_earlier("c.md", "c.png")
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(compare.main([p, "-o", self.path("c.md"), "--include-warmup"]), 0)
        with open(self.path("c.md")) as f:
            self.assertIn("# Run comparison", f.read())
        self.assertTrue(ct.is_hdf5(p) is True and os.path.getsize(self.path("c.png")) > 1000)

    def test_a_replaced_output_keeps_its_mode_and_links(self):
        """The renamed file has the mode the earlier one had (new files: the umask's); an output that is a symbolic
        link replaces the file it points at; a device (/dev/null) is written in place."""
        p = self.example()
        self.earlier("b.txt")
        os.chmod(self.path("b.txt"), 0o640)
        os.symlink("b.txt", self.path("link.txt"))
        for out in ("b.txt", "link.txt", "new.txt"):
            self.assertEqual(run("bubbles.py", p, "-o", self.path(out)).returncode, 0)
        self.assertEqual(os.stat(self.path("b.txt")).st_mode & 0o777, 0o640)
        self.assertTrue(os.path.islink(self.path("link.txt")))
        with open(self.path("b.txt")) as f:
            self.assertIn("== %s" % p, f.read())
        mask = os.umask(0)
        os.umask(mask)
        self.assertEqual(os.stat(self.path("new.txt")).st_mode & 0o777, 0o666 & ~mask)
        self.assertEqual(run("perfetto.py", p, "-o", os.devnull).returncode, 0)
        self.assertEqual(temporaries(self.dir), [])

    def test_an_output_that_is_an_open_stream_is_written_in_place(self):
        """-o /dev/stdout in a job whose output is appended to a log (slurm-N.out): the log was replaced by the
        report, its earlier lines gone and what the job printed next written to the unlinked file."""
        p = self.example()
        log = self.path("job.log")
        self.earlier("job.log")
        script = '"$0" "$1" -o /dev/stdout; echo after'
        with open(log, "a") as out:
            proc = subprocess.run(["/bin/sh", "-c", script, os.path.join(ANALYSIS, "bubbles.py"), p], stdout=out,
                                  stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(log) as f:
            text = f.read()
        self.assertTrue(text.startswith(self.EARLIER), text[:200])
        self.assertIn("== %s" % p, text)
        self.assertTrue(text.endswith("after\n"), text[-200:])
        self.assertEqual(temporaries(self.dir), [])

    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv"), "needs root and setpriv to drop to nobody")
    def test_a_writable_file_in_a_folder_not_writable_is_written_in_place(self):
        """The temporary file cannot be made beside it: the file is written in place, as before (it was refused)."""
        p = self.example()
        folder = self.path("ro")
        os.mkdir(folder)
        out = os.path.join(folder, "out.txt")
        with open(out, "w") as f:
            f.write(self.EARLIER)
        os.chmod(out, 0o666)
        os.chmod(p, 0o644)
        os.chmod(folder, 0o555)
        os.chmod(self.dir, 0o755)
        try:
            proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                                   os.path.join(ANALYSIS, "bubbles.py"), p, "-o", out], capture_output=True, text=True,
                                  timeout=60, env=dict(os.environ, HOME="/nonexistent"))
        finally:
            os.chmod(folder, 0o755)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(out) as f:
            self.assertIn("== %s" % p, f.read())

    def test_a_signal_leaves_the_earlier_output(self):
        """SIGTERM, SIGHUP and SIGINT while perfetto.py writes: one line, exit 128 + the signal's number, the earlier
        file intact, no temporary file."""
        import signal
        rows = [tracegen.ev(0, r, "F", n, 10 * n, 10 * n, 10 * n + 10) for r in range(4) for n in range(40000)]
        p = self.path("big.h5")
        tracegen.write_trace(p, rows, [tracegen.step_row(0, 400000, 0.1, 1.0)], world_size=4)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            self.earlier("p.json")
            proc = subprocess.Popen([os.path.join(ANALYSIS, "perfetto.py"), p, "-o", self.path("p.json")],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                deadline = time.monotonic() + 60
                while not temporaries(self.dir) and os.path.getsize(self.path("p.json")) == len(self.EARLIER):
                    self.assertIsNone(proc.poll(), "perfetto.py ended before it was signalled")
                    self.assertLess(time.monotonic(), deadline)
                    time.sleep(0.002)
                proc.send_signal(sig)
                _, err = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
            self.assertEqual(proc.returncode, 128 + sig, err)
            self.assertEqual(err, "perfetto.py: stopped by %s; no output file is left half-written\n" %
                             signal.Signals(sig).name)
            self.check_earlier("p.json")


class Names(TempDirCase):
    """A trace path that is not UTF-8 (a byte such as 0xff in a folder or file name) or holds characters that do not
    print: shown escaped (\\xff, \\n) in reports, figures and messages, never a UnicodeEncodeError (which had
    emptied compare.py's earlier report) or matplotlib's missing-glyph warnings."""

    def test_printable(self):
        self.assertEqual(ct.printable("u/r\udcff.h5"), "u/r\\xff.h5")
        self.assertEqual(ct.printable("a\nb\tc\x1b"), "a\\nb\\tc\\x1b")
        self.assertEqual(ct.printable("runs/実験 1/trace.h5"), "runs/実験 1/trace.h5")

    def test_a_library_warning_is_one_line(self):
        import signal
        import warnings

        def tool_main():
            warnings.warn("something odd\nsecond line of r\udcff", RuntimeWarning)
            return 0
        err = io.StringIO()
        handlers = {s: signal.getsignal(s) for s in ct.STOP_SIGNALS}
        try:
            with unittest.mock.patch.object(sys, "argv", ["bubbles.py"]), unittest.mock.patch.object(
                    warnings, "showwarning"), warnings.catch_warnings(), contextlib.redirect_stderr(err), \
                    self.assertRaises(SystemExit) as cm:
                warnings.simplefilter("always")
                ct.main_guard(tool_main)
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)
        self.assertEqual(cm.exception.code, 0)
        self.assertEqual(err.getvalue(), "bubbles.py: warning: something odd second line of r\\xff\n")

    def test_a_trace_path_that_is_not_utf8(self):
        os.mkdir(self.path("u"))
        p = os.fsdecode(os.fsencode(self.path("u")) + b"/r\xff.h5")
        shown = self.path("u") + "/r\\xff.h5"
        tracegen.example_trace(p, steps=2)
        with open(self.path("c.md"), "w") as f:
            f.write("the earlier report\n")
        r = run("compare.py", p, "-o", self.path("c.md"), "--include-warmup")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        with open(self.path("c.md"), encoding="utf-8") as f:
            report = f.read()
        self.assertIn("| r\\xff | 1 | 2 | ", report)
        self.assertIn("- r\\xff (r\\xff): `%s`" % shown, report)
        self.assertEqual(r.stdout, report)
        r = run("bubbles.py", p)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertTrue(r.stdout.startswith("== %s  (" % shown), r.stdout)
        r = run("bubbles.py", "--json", p)
        self.assertEqual(json.loads(r.stdout)["traces"][0]["trace"], shown)
        r = run("timeline.py", p, "-o", self.path("t.png"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        out = os.fsdecode(os.fsencode(self.path("p")) + b"\xfe.json")
        r = run("perfetto.py", p, "-o", out)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertTrue(r.stdout.startswith("wrote %s\\xfe.json: " % self.path("p")), r.stdout)
        self.assertEqual(load_json(out)["otherData"]["trace"], shown)
        missing = os.fsdecode(os.fsencode(self.path("u")) + b"/r\xfe\n.h5")
        r = run("bubbles.py", missing)
        self.assertEqual((r.returncode, r.stderr), (2, "bubbles.py: error: %s/r\\xfe\\n.h5: no such file\n" %
                                                   self.path("u")))


class Launcher(TempDirCase):
    """scripts/conductor-analysis: CONDUCTOR_PYTHON names an interpreter by path or by a command name on PATH (a
    name was refused: the launcher tested it with [[ -x ]]); only an executable that runs Python counts."""

    def launch(self, python, *args):
        bin_dir = self.path("bin")
        os.makedirs(bin_dir, exist_ok=True)
        if not os.path.exists(os.path.join(bin_dir, "py")):
            os.symlink(PY, os.path.join(bin_dir, "py"))
        env = dict(os.environ, PATH=bin_dir + ":/usr/bin:/bin", CONDUCTOR_PYTHON=python)
        return subprocess.run([os.path.join(SOURCE, "scripts", "conductor-analysis")] + list(args),
                              capture_output=True, text=True, timeout=60, env=env)

    def test_conductor_python_by_name_or_path(self):
        p = self.example()
        for python in ("py", self.path("bin/py"), PY):
            r = self.launch(python, "bubbles", p)
            self.assertEqual(r.returncode, 0, "%s: %s" % (python, r.stderr))
            self.assertTrue(r.stdout.startswith("== %s" % p), r.stdout)
        for python, tried in (("echo", "echo = /usr/bin/echo"), ("nosuchpython", "nosuchpython (not found on PATH)"),
                              (self.path("none"), self.path("none") + " (not an executable file)"),
                              ("true", "true = /usr/bin/true")):
            r = self.launch(python, "bubbles", p)
            self.assertEqual((r.returncode, r.stdout), (2, ""), python)
            self.assertTrue(r.stderr.startswith("conductor-analysis: no Python interpreter that imports h5py and "
                                                "numpy: tried %s (CONDUCTOR_PYTHON). " % tried), r.stderr)


class StandardOutput(TempDirCase):
    """A standard output that is closed (`TOOL >&-`) or cannot be written (/dev/full): one line naming standard
    output and exit 2 (it was an AttributeError on None, or an OSError that did not say which file); a reader that
    left (`TOOL | head`): exit 1 without a message, as before."""

    def run_with_stdout(self, stdout, script, *args):
        """Runs the tool with standard output closed (stdout None) or going to file object `stdout`."""
        if stdout is None:
            cmd = ["bash", "-c", 'exec "$@" >&-', "bash", os.path.join(ANALYSIS, script)] + list(args)
            return subprocess.run(cmd, stderr=subprocess.PIPE, text=True, timeout=60)
        return subprocess.run([os.path.join(ANALYSIS, script)] + list(args), stdout=stdout, stderr=subprocess.PIPE,
                              text=True, timeout=60)

    def test_closed_or_full_standard_output(self):
        p = self.example()
        for script, args in (("bubbles.py", []), ("bubbles.py", ["--json"]), ("perfetto.py", ["-o", "-"])):
            r = self.run_with_stdout(None, script, p, *args)
            self.assertEqual((r.returncode, r.stderr), (2, "%s: error: standard output is closed: nowhere to write "
                                                           "the output (-o -); give -o FILE\n" % script))
        with open("/dev/full", "w") as full:
            for script, args in (("bubbles.py", []), ("bubbles.py", ["--csv"]), ("perfetto.py", ["-o", "-"]),
                                 ("timeline.py", ["-o", self.path("t.png")]),
                                 ("compare.py", ["-o", self.path("c.md"), "--include-warmup"])):
                r = self.run_with_stdout(full, script, p, *args)
                self.assertEqual((r.returncode, r.stderr),
                                 (2, "%s: error: cannot write to standard output (No space left on device)\n" % script))
        # Where standard output only says what was written, a closed one takes nothing and the output is written.
        r = self.run_with_stdout(None, "timeline.py", p, "-o", self.path("t2.png"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertTrue(os.path.getsize(self.path("t2.png")) > 1000)

    def test_a_reader_that_left(self):
        p = self.example()
        proc = subprocess.Popen([os.path.join(ANALYSIS, "bubbles.py"), p], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        proc.stdout.close()
        _, err = proc.communicate(timeout=60)
        self.assertEqual((proc.returncode, err), (1, ""))


class UnwritableHome(TempDirCase):
    def test_no_matplotlib_config_warning(self):
        """HOME that cannot hold matplotlib's config and cache folders (here a file): the figures are drawn without
        matplotlib's warning about it (a temporary MPLCONFIGDIR, removed at exit)."""
        p = self.example()
        os.mkdir(self.path("tmp"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "MPL"))}
        env.update(HOME=p, TMPDIR=self.path("tmp"))
        for script, out in (("timeline.py", "t.png"), ("compare.py", "c.md")):
            r = subprocess.run([os.path.join(ANALYSIS, script), p, "-o", self.path(out), "--include-warmup"
                                if script == "compare.py" else "--comm"],
                               capture_output=True, text=True, timeout=120, env=env)
            self.assertEqual((r.returncode, r.stderr), (0, ""), script)
            self.assertEqual(os.listdir(self.path("tmp")), [])


class MissingModules(TempDirCase):
    """A Python without numpy or h5py (a virtual environment first on PATH): one line naming the module and how to
    run the tools with one that has them (README.md, "Read the results"), exit 1 (as a missing matplotlib); no
    traceback."""

    def check(self, env_path, missing, python_args=("-S",)):
        p = self.example()
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        if env_path:
            env["PYTHONPATH"] = env_path
        for script, out in TOOLS:
            args = [p] + (["-o", self.path(out)] if out else [])
            r = subprocess.run([PY] + list(python_args) + [os.path.join(ANALYSIS, script)] + args,
                               capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(r.returncode, 1, "%s: %s" % (script, r.stderr))
            self.assertEqual(r.stdout, "", script)
            lines = r.stderr.splitlines()
            self.assertEqual(len(lines), 1, "%s printed:\n%s" % (script, r.stderr))
            self.assertTrue(lines[0].startswith("%s: error: this Python (%s) cannot import %s (" %
                                                (script, PY, missing)), lines[0])
            self.assertIn("run them as scripts/conductor-analysis %s ... (bin/conductor-analysis when installed)"
                          % script[:-3], lines[0])
            self.assertIn("set CONDUCTOR_PYTHON to an interpreter that imports them", lines[0])
            if out:
                self.assertFalse(os.path.exists(self.path(out)), script)

    def test_no_numpy(self):
        self.check(None, "numpy")  # -S: no site-packages, neither numpy nor h5py

    def test_numpy_without_h5py(self):
        import numpy
        only = self.path("only_numpy")
        os.mkdir(only)
        os.symlink(os.path.dirname(numpy.__file__), os.path.join(only, "numpy"))
        self.check(only, "h5py")

    def test_h5py_that_fails_to_import(self):
        broken = self.path("broken")  # found, but its import fails (e.g. its HDF5 library is missing)
        os.mkdir(broken)
        with open(os.path.join(broken, "h5py.py"), "w") as f:
            f.write("raise ImportError('libhdf5_serial.so.103: cannot open shared object file', name='h5py')\n")
        self.check(broken, "h5py", python_args=())


TOOLS = (("bubbles.py", None), ("timeline.py", "t.png"), ("perfetto.py", "p.json"), ("compare.py", "r.md"))


def run_every_tool(case, path):
    """Runs the four tools on trace `path` at once (compare.py with --include-warmup, outputs in case.dir); returns
    [(script, output path or None, CompletedProcess)]."""
    procs = []
    for script, out in TOOLS:
        extra = ["-o", os.path.join(case.dir, out)] if out else []
        extra += ["--include-warmup"] if script == "compare.py" else []
        procs.append((script, out and os.path.join(case.dir, out),
                      subprocess.Popen([os.path.join(ANALYSIS, script), path] + extra, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)))
    done = []
    for script, out, proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        done.append((script, out, subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)))
    return done


def check_every_tool_refuses(case, path, expected):
    """Every tool that takes a trace: exit 2, nothing on stdout, no output file, and on stderr exactly one line
    'TOOL: error: PATH: ...' that contains `expected` (no traceback, no HDF5 error stack or low-level dump).
    Returns that line (the same from every tool)."""
    messages = set()
    for script, out, r in run_every_tool(case, path):
        case.assertEqual(r.returncode, 2, script + ": " + r.stderr)
        case.assertEqual(r.stdout, "", script)
        lines = r.stderr.splitlines()
        case.assertEqual(len(lines), 1, "%s printed:\n%s" % (script, r.stderr))
        case.assertTrue(lines[0].startswith("%s: error: %s: " % (script, path)), lines[0])
        case.assertIn(expected, lines[0])
        messages.add(lines[0].split(": error: ", 1)[1])
        if out:
            case.assertFalse(os.path.exists(out), script)
    case.assertEqual(len(messages), 1, messages)  # the shared loader's message, word for word
    return messages.pop()


def check_every_tool_accepts(case, path):
    """Every tool exits 0 on trace `path` and writes its output, with no error or warning on stderr; the outputs are
    removed after."""
    for script, out, r in run_every_tool(case, path):
        case.assertEqual(r.returncode, 0, "%s: %s" % (script, r.stderr))
        case.assertNotIn("error", r.stderr, script)
        case.assertNotIn("warning", r.stderr, script)
        if out:
            case.assertTrue(os.path.exists(out), script)
            os.remove(out)
        else:
            case.assertIn("== %s" % path, r.stdout)  # bubbles.py's table
    os.remove(os.path.join(case.dir, "r.png"))  # compare.py's chart


def damaged_copy(case, source, name, obj):
    """A copy of trace `source` whose object `obj` has a damaged header (tracegen.damage_object_header), checked
    to be unreadable by h5py itself."""
    import h5py
    p = case.path(name)
    shutil.copyfile(source, p)
    tracegen.damage_object_header(p, obj)
    with case.assertRaises((KeyError, OSError)):
        with h5py.File(p, "r") as f:
            f[obj]
    return p


class Malformed(TempDirCase):
    def check_error(self, path, expected, script="bubbles.py", *extra):
        r = run(script, path, *extra)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertNotIn("Traceback", r.stderr)
        self.assertIn(expected, r.stderr)
        return r

    def test_damaged_metadata(self):
        """A trace as the C++ writer lays it out (version 2 object headers, checksummed) whose root group or
        /steps header no longer matches its checksum: h5py raises KeyError, which must not escape as one."""
        good = self.example("good.h5", steps=2, libver=("v110", "v110"))
        for obj in ("/", "steps", "events"):
            p = damaged_copy(self, good, "damaged_%s.h5" % obj.strip("/"), obj)
            check_every_tool_refuses(self, p, "damaged HDF5 trace (")
            check_every_tool_refuses(self, p, "incorrect metadata checksum")

    def test_folder_named_like_a_trace(self):
        p = self.path("run.h5")
        os.mkdir(p)
        check_every_tool_refuses(self, p, "is a folder, not a trace file")

    def test_named_pipe(self):
        """A trace path that is a named pipe: refused at once (HDF5 waited for a writer for ever)."""
        fifo = self.path("fifo.h5")
        os.mkfifo(fifo)
        r = subprocess.run([os.path.join(ANALYSIS, "bubbles.py"), fifo], capture_output=True, text=True, timeout=20)
        self.assertEqual((r.returncode, r.stderr), (2, "bubbles.py: error: %s: is not a regular file (a named pipe or "
                                                       "a device); a trace is an HDF5 file\n" % fifo))
        with self.assertRaisesRegex(ct.TraceError, r"^%s: is not a regular file \(a named pipe or a device\); a trace "
                                    r"is an HDF5 file$" % re.escape(fifo)):
            ct.load(fifo)

    def test_missing_dataset(self):
        p = self.path("nosteps.h5")
        tracegen.write_trace(p, tracegen.example_events(), [], drop={"steps"})
        self.check_error(p, "missing dataset '/steps'")

    def test_missing_field(self):
        p = self.path("noready.h5")
        tracegen.write_trace(p, tracegen.example_events(), [tracegen.step_row(0, 600, 0.35, 400.0)],
                             drop={"events.ready_ns"})
        self.check_error(p, "dataset '/events' has no field 'ready_ns'")
        self.check_error(p, "no field 'ready_ns'", "perfetto.py", "-o", self.path("x.json"))

    def test_missing_attribute(self):
        p = self.path("noworld.h5")
        tracegen.write_trace(p, tracegen.example_events(), [tracegen.step_row(0, 600, 0.35, 400.0)],
                             drop={"@world_size"})
        self.check_error(p, "missing root attribute 'world_size'")

    def test_world_size_outside_the_range_or_not_the_pipeline(self):
        """A world_size no writer produces is refused before anything is sized by it (1e9 took every tool past the
        machine's memory)."""
        import h5py
        p = self.path("world.h5")
        for world, pipeline, expected in ((10 ** 9, 2, "world_size 1000000000 is outside 1..65536"),
                                          (2, 7, "world_size 2 differs from pipeline 7; allowed: one rank per")):
            tracegen.write_trace(p, tracegen.example_events(), [tracegen.step_row(0, 600, 0.35, 400.0)])
            with h5py.File(p, "r+") as f:
                f.attrs["world_size"] = np.int32(world)
                f.attrs["pipeline"] = np.int32(pipeline)
            self.check_error(p, expected)

    def test_a_step_completed_between_the_reads_is_not_damage(self):
        """A running writer appends a step's ops to /events, then its /steps row. load() reads /steps first: a step
        that completes between its two reads leaves only ops of a step it does not keep (dropped as incomplete), never
        a step without its ops (reading /events first called a healthy trace damaged, now and then)."""
        import h5py
        before, after = self.path("live1.h5"), self.path("live2.h5")
        tracegen.example_trace(before, steps=1)
        tracegen.example_trace(after, steps=2)
        real, reads = ct._table, []

        def table(f, path, name, fields):  # the second read sees the file one step later
            reads.append(name)
            if len(reads) == 1:
                return real(f, path, name, fields)
            with h5py.File(after, "r") as later:
                return real(later, path, name, fields)
        ct._table = table
        try:
            t = ct.load(before)
        finally:
            ct._table = real
        self.assertEqual(reads, ["steps", "events"])
        self.assertEqual(list(t.step_ids), [0])
        self.assertGreater(t.dropped_events, 0)

    def test_not_hdf5_and_absent(self):
        p = self.path("junk.h5")
        with open(p, "w") as f:
            f.write("not hdf5\n")
        self.check_error(p, "not a readable HDF5 file")
        self.check_error(self.path("absent.h5"), "no such file", "timeline.py", "-o", self.path("t.png"))

    def test_truncated(self):
        p = self.example("full.h5", steps=30)
        with open(p, "rb") as f:
            data = f.read()
        cut = self.path("cut.h5")
        with open(cut, "wb") as f:
            f.write(data[: len(data) // 2])
        r = self.check_error(cut, cut)
        self.assertIn("error:", r.stderr)

    def test_no_completed_step(self):
        p = self.path("empty.h5")
        tracegen.write_trace(p, [], [])
        self.check_error(p, "no step completed")

    def test_unknown_step_and_baseline(self):
        p = self.example()
        self.check_error(p, "step 7 is not in /steps", "bubbles.py", "--step", "7")
        r = self.check_error(p, "baseline 'nope' is not one of the runs", "compare.py", "-o", self.path("r.md"),
                             "--baseline", "nope", "--include-warmup")
        listed = r.stderr.split("not one of the runs: ")[1].strip().split(", ")
        self.assertEqual(len(listed), len(set(listed)), r.stderr)  # each run named once


def edited_copy(case, source, name, dataset, rows=None, **fields):
    """A copy of trace `source` with fields of /`dataset` overwritten through h5py, as a fault-injection probe
    edits a trace: fields={field: value} at `rows` (an index, a list or a slice; None: every row), or, with a
    callable value, field = value(the table) on every row."""
    import h5py
    p = case.path(name)
    shutil.copyfile(source, p)
    with h5py.File(p, "r+") as f:
        data = f[dataset][...]
        original = data.copy()
        for field, value in fields.items():
            if callable(value):
                data[field] = value(original)
            else:
                data[field][slice(None) if rows is None else rows] = value
        f[dataset][...] = data
    return p


class CorruptValues(TempDirCase):
    """Traces whose values no writer produces (a fault-injection probe's edits): the shared loader refuses them, so
    every tool exits 2 with the same line naming the file, the dataset, the row (step, rank), the field, the value
    and what is allowed. Valid traces, with everything docs/trace.md allows (helps, transfers, an ANNOUNCE ending
    before it starts, a RECV posted before the step's first op, a NaN loss), pass."""

    # rows: 0-11 the example (0 F r0 mb0, 2 SEND, 4 B r0 mb1, 5 RECV, 6 F r1 mb0, ...), then 12 HELP_B on rank 1,
    # 13 SEND mb1, 14 RECV mb1 posted at 950 (before the step's first op at 1000), 15 ANNOUNCE ending 60 ns before
    # it starts (two ranks' clocks).
    def setUp(self):
        super().setUp()
        ev = tracegen.ev
        rows = tracegen.example_events(0, 1000) + [
            ev(0, 1, "HELP_B", 1, 1505, 1510, 1560, stage=0, peer=0, migrated=1, bytes_=2048),
            ev(0, 0, "SEND", 1, 1105, 1105, 1300, peer=1, bytes_=4096),
            ev(0, 1, "RECV", 1, 950, 950, 1300, peer=0, bytes_=4096),
            ev(0, 1, "ANNOUNCE", 1, 1250, 1260, 1200, peer=0)]
        step = tracegen.step_row(0, 600, 1 - 830 / 1200, 430.0, start=1000) + ((1 - 400 / 600 + 1 - 430 / 440) / 2,)
        self.good = self.path("good.h5")
        tracegen.write_trace(self.good, rows, [step], libver=("v110", "v110"))

    def refused(self, path, expected):
        """ct.load(path) raises TraceError with exactly 'PATH: expected'."""
        with self.assertRaises(ct.TraceError) as cm:
            ct.load(path)
        self.assertEqual(str(cm.exception), "%s: %s" % (path, expected))

    def check_every_tool(self, path, expected):
        """Every tool refuses `path` with exactly 'PATH: expected'."""
        self.assertEqual(check_every_tool_refuses(self, path, expected), "%s: %s" % (path, expected))

    def test_valid_trace_passes(self):
        check_every_tool_accepts(self, self.good)
        trace = ct.load(self.good)
        self.assertEqual(len(trace.events), 16)
        self.assertEqual(bubbles.analyze(trace)["stored_mismatch_steps"], [])

    def test_not_computed_stage_bubble_is_accepted(self):
        """NaN in stage_bubble_ratio is "not computed" (docs/trace.md): accepted and reported as absent, as for a
        trace without the column; a NaN loss is "no loss"."""
        p = edited_copy(self, self.good, "nan_stage.h5", "steps", stage_bubble_ratio=float("nan"))
        trace = ct.load(p)
        res = bubbles.analyze(trace)
        self.assertEqual(res["stored_mismatch_steps"], [])
        self.assertIsNone(res["per_step"][0]["stored_stage_bubble_ratio"])
        self.assertIsNone(ct.run_totals(trace)["stage_bubble_ratio"])
        self.assertTrue(np.isnan(trace.steps["loss"][0]))
        self.refused(edited_copy(self, self.good, "inf_stage.h5", "steps", stage_bubble_ratio=float("inf")),
                     "/steps row 0 (step 0): stage_bubble_ratio inf is not a finite ratio in 0..1, or NaN (not computed) "
                     "(docs/trace.md)")

    def test_unknown_kind(self):
        p = edited_copy(self, self.good, "kind99.h5", "events", [6, 13], kind=99)
        self.check_every_tool(p, "/events row 6 (step 0, rank 1): kind 99 is not one of the event kinds 0..10 "
                                 "(docs/trace.md) (and 1 more row)")

    def test_end_before_start(self):
        p = edited_copy(self, self.good, "swapped.h5", "events", start_ns=lambda d: d["end_ns"],
                        end_ns=lambda d: d["start_ns"])
        self.check_every_tool(p, "/events row 0 (step 0, rank 0): end_ns 1000 < start_ns 1100 of a compute op (F); "
                                 "allowed: end_ns >= start_ns (docs/trace.md) (and 10 more rows)")
        # A transfer may end a little before it starts (the ranks' clocks), not by seconds.
        self.refused(edited_copy(self, self.good, "send_back.h5", "events", 13, end_ns=1105 - 2 * 10 ** 9),
                     "/events row 13 (step 0, rank 0): end_ns -1999998895 < start_ns 1105 of a SEND row; allowed: "
                     "end_ns >= start_ns - 1000000000 (the ranks' clock alignment; docs/trace.md)")

    def test_times_beyond_bounds(self):
        p = edited_copy(self, self.good, "far_end.h5", "events", 4, end_ns=2 ** 62)
        self.check_every_tool(p, "/events row 4 (step 0, rank 0): end_ns 4611686018427387904 of a compute op (B) is "
                                 "after its step's end in /steps (start_ns 1000 + makespan_ns 600 = 1600); allowed: "
                                 "within its step's [start_ns, start_ns + makespan_ns] (docs/trace.md)")
        self.refused(edited_copy(self, self.good, "early.h5", "events", 0, start_ns=999),
                     "/events row 0 (step 0, rank 0): start_ns 999 of a compute op (F) is before its step's start_ns "
                     "1000 in /steps; allowed: within its step's [start_ns, start_ns + makespan_ns] (docs/trace.md)")
        self.refused(edited_copy(self, self.good, "far_send.h5", "events", 13, end_ns=2 ** 62),
                     "/events row 13 (step 0, rank 0): end_ns 4611686018427387904 of a SEND row is outside the run's "
                     "steps in /steps [1000, 1600] by more than max(the run's length, 3600000000000 ns); allowed: "
                     "-3599999999000..3600000001600 (docs/trace.md)")
        self.refused(edited_copy(self, self.good, "far_ready.h5", "events", 0, ready_ns=2 ** 63 - 1),
                     "/events row 0 (step 0, rank 0): ready_ns 9223372036854775807 is beyond the trace clock's range "
                     "of +-9200000000000000000 ns (docs/trace.md)")

    def test_bad_step_values(self):
        p = edited_copy(self, self.good, "nan_bubble.h5", "steps", bubble_ratio=float("nan"))
        self.check_every_tool(p, "/steps row 0 (step 0): bubble_ratio nan is not a finite ratio in 0..1 (docs/trace.md)")
        p = edited_copy(self, self.good, "zero_makespan.h5", "steps", makespan_ns=0)
        self.check_every_tool(p, "/steps row 0 (step 0): samples_per_s %r with makespan_ns 0; allowed: 0 exactly when "
                                 "makespan_ns is 0 (the writers write samples / makespan; docs/trace.md)" %
                              (4.0 / (600 * 1e-9)))
        p = edited_copy(self, self.good, "negative_bound.h5", "steps", lower_bound_ns=-1.0)
        self.check_every_tool(p, "/steps row 0 (step 0): lower_bound_ns -1.0 is not finite and >= 0 (docs/trace.md)")
        for name, field, value, expected in (
                ("inf_rate", "samples_per_s", float("inf"), "samples_per_s inf is not finite and >= 0"),
                ("zero_rate", "samples_per_s", 0.0, "samples_per_s 0.0 with makespan_ns 600; allowed: 0 exactly when "
                                                    "makespan_ns is 0 (the writers write samples / makespan"),
                ("big_ratio", "bubble_ratio", 1.5, "bubble_ratio 1.5 is not a finite ratio in 0..1"),
                ("minus_inf_ratio", "bubble_ratio", float("-inf"), "bubble_ratio -inf is not a finite ratio in 0..1"),
                ("negative_ratio", "bubble_ratio", -0.5, "bubble_ratio -0.5 is not a finite ratio in 0..1"),
                ("negative_makespan", "makespan_ns", -5, "makespan_ns -5 is outside 0..9199999999999999000 (>= 0, and "
                                                         "start_ns + makespan_ns within the clock's"),
                ("negative_start", "start_ns", -1, "start_ns -1 is outside 0..9200000000000000000 (ns on the run's "
                                                   "clock, docs/trace.md)")):
            with self.assertRaises(ct.TraceError) as cm:
                ct.load(edited_copy(self, self.good, name + ".h5", "steps", **{field: value}))
            self.assertIn(": /steps row 0 (step 0): " + expected, str(cm.exception))
        dup = self.path("dup.h5")
        tracegen.write_trace(dup, tracegen.example_events(), [tracegen.step_row(0, 600, 0.35, 400.0)] * 2)
        self.refused(dup, "/steps row 1 (step 0): step 0 is also in /steps row 0; each step appears once "
                          "(docs/trace.md)")

    def test_steps_without_their_events(self):
        p = self.path("no_events.h5")
        shutil.copyfile(self.good, p)
        import h5py
        with h5py.File(p, "r+") as f:
            f["events"].resize((0,))
        self.check_every_tool(p, "/events has no rows, but /steps has 1 step (0): every step in /steps has its ops "
                                 "in /events (docs/trace.md)")
        # A step whose only rows are transfers.
        ev = tracegen.ev
        p = self.path("no_ops.h5")
        tracegen.write_trace(p, tracegen.example_events() + [ev(1, 0, "SEND", 0, 1100, 1100, 1110, peer=1),
                                                             ev(1, 1, "RECV", 0, 1000, 1000, 1110, peer=0)],
                             [tracegen.step_row(0, 600, 0.35, 400.0),
                              tracegen.step_row(1, 600, 0.35, 400.0, start=1000)])
        self.refused(p, "/steps row 1 (step 1): the step has no compute op (F, B, W, BW or HELP_*) in /events: every "
                        "step in /steps has its ops there (docs/trace.md)")

    def test_rank_and_peer_outside_the_world(self):
        self.refused(edited_copy(self, self.good, "rank.h5", "events", 3, rank=5),
                     "/events row 3 (step 0, rank 5): rank 5 is outside [0, world_size=2)")
        self.refused(edited_copy(self, self.good, "peer.h5", "events", 13, peer=7),
                     "/events row 13 (step 0, rank 0): peer 7 of a SEND row is outside [0, world_size=2) (the other "
                     "rank; docs/trace.md)")
        self.refused(edited_copy(self, self.good, "owner.h5", "events", 12, peer=-1),
                     "/events row 12 (step 0, rank 1): peer -1 of a HELP_B row is outside [0, world_size=2) (the "
                     "other rank; docs/trace.md)")

    def test_deck_is_refused_only_by_the_tool_that_parses_it(self):
        """compare.py groups runs by their decks: it refuses a deck that is not YAML, naming the attribute; the
        other tools do not read the deck and accept the trace."""
        import h5py
        for name, deck, expected in (
                ("unclosed.h5", "run: [unclosed", "root attribute 'deck' is not valid YAML (expected ',' or ']', but "
                                                  "got '<stream end>' at line 1, column 15); compare.py groups runs by "
                                                  "their resolved decks"),
                ("list.h5", "- run\n- schedule\n", "root attribute 'deck' is YAML but not a mapping of deck keys (a "
                                                  "list); compare.py groups runs by their resolved decks")):
            p = self.path(name)
            shutil.copyfile(self.good, p)
            with h5py.File(p, "r+") as f:
                f.attrs["deck"] = deck
            results = {script: r for script, _, r in run_every_tool(self, p)}
            for script in ("bubbles.py", "timeline.py", "perfetto.py"):
                self.assertEqual(results[script].returncode, 0, script + ": " + results[script].stderr)
            r = results["compare.py"]
            self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
            self.assertEqual(r.stderr, "compare.py: error: %s: %s\n" % (p, expected))
            self.assertFalse(os.path.exists(self.path("r.md")))
            self.assertFalse(os.path.exists(self.path("r.png")))


class KilledRun(TempDirCase):
    def test_swmr_marked_file_with_incomplete_step(self):
        """A writer killed mid-run: the file is marked open for SWMR write and /events holds a prefix of a
        step that is not in /steps. The tools open it and use only the complete step."""
        p = self.path("killed.h5")
        pid = os.fork()
        if pid == 0:
            try:
                events = tracegen.example_events(0) + tracegen.example_events(1, 1000)[:3]
                keep = tracegen.write_trace(p, events, [tracegen.step_row(0, 600, 0.35, 400.0)], swmr_kill=True)
                assert keep is not None  # held open: h5py must not close (and unmark) it before the exit
            finally:
                os._exit(0)  # no close: the SWMR mark stays, as after SIGKILL
        os.waitpid(pid, 0)
        import h5py
        with self.assertRaises(OSError):
            h5py.File(p, "r")  # a plain open refuses it: the case the fallback exists for
        r = run("bubbles.py", "--json", p)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ignored 3 events of an incomplete step", r.stderr)
        d = json.loads(r.stdout)["traces"][0]
        self.assertEqual(len(d["per_step"]), 1)
        self.assertAlmostEqual(d["overall"]["bubble_ratio"], 0.35)

    def test_plain_marked_file_names_h5clear(self):
        """A run killed while it reopened its trace to continue it leaves the plain 'open for write' mark, which
        h5py's SWMR reader refuses too ("not a readable HDF5 file" before): the message says how to clear it."""
        import h5py
        src, p = self.example("plain.h5"), self.path("reopened.h5")
        with h5py.File(src, "r") as a, h5py.File(p, "w", libver="latest") as b:  # the mark needs the 1.10 format
            for k in a:
                a.copy(a[k], b, k)
            for k, v in a.attrs.items():
                b.attrs[k] = v
        self.assertEqual(run("bubbles.py", p).returncode, 0)
        pid = os.fork()
        if pid == 0:
            keep = h5py.File(p, "r+", locking=False)
            assert keep is not None
            os._exit(0)  # no close: the plain mark stays
        os.waitpid(pid, 0)
        r = run("bubbles.py", p)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("%s: marked open for writing by a killed run (not in SWMR mode, which h5py can read); clear "
                      "the mark with `h5clear -s %s` (package hdf5-tools)" % (p, p), r.stderr)


class ProfilerExport(TempDirCase):
    def test_flows_profiler_steps_hta_fields_and_counters(self):
        trace = ct.load(self.example(steps=3))
        events, origin = perfetto.convert(trace)
        doc = perfetto.document(trace, events, origin, 0)
        check_profiler_export(self, trace, doc)
        flows = [e for e in events if e["ph"] == "s"]
        self.assertEqual([(e["pid"], e["ts"]) for e in flows], [(0, 0.1), (0, 1.1), (0, 2.1)])
        # Counters of rank 1 in step 0 (hand-computed from tracegen.example_events): F0 ends 220, F1 390,
        # W0 470, W1 500; ready but not started: F0 [110,120), F1 [210,290), W0 [290,440), B1 none, W1 [440,470).
        held = [(e["ts"], e["args"]["microbatches"]) for e in events
                if e["ph"] == "C" and e["pid"] == 1 and e["name"] == "in-flight activations" and e["ts"] < 1]
        self.assertEqual(held, [(0.22, 1), (0.39, 2), (0.47, 1), (0.5, 0)])
        ready = [(e["ts"], e["args"]["ops"]) for e in events
                 if e["ph"] == "C" and e["pid"] == 1 and e["name"] == "ready ops" and e["ts"] < 1]
        self.assertEqual(ready, [(0.11, 1), (0.12, 0), (0.21, 1), (0.29, 1), (0.44, 1), (0.47, 0)])

    def test_overlapping_transfers_get_tracks_that_nest(self):
        """Runtime transfers overlap without nesting (a SEND posted before the previous one completed): the example
        plus rank 0's SEND mb1 [105,300) (overlaps SEND mb0 [100,110)), rank 1's RECV mb1 [50,300) (overlaps RECV mb0
        [0,110)) and an ANNOUNCE [60,200). Every track's slices nest; transfers sit on their own streams, apart from
        the compute ops and the ANNOUNCE; the flows bind to their SEND's and RECV's streams."""
        ev = tracegen.ev
        rows = tracegen.example_events() + [ev(0, 0, "SEND", 1, 105, 105, 300, peer=1, bytes_=4096),
                                            ev(0, 1, "RECV", 1, 50, 50, 300, peer=0, bytes_=4096),
                                            ev(0, 1, "ANNOUNCE", 1, 250, 60, 200, peer=0)]
        p = self.path("overlap.h5")
        tracegen.write_trace(p, rows, [tracegen.step_row(0, 600, 0.35, 400.0)])
        trace = ct.load(p)
        events, origin = perfetto.convert(trace)
        check_profiler_export(self, trace, perfetto.document(trace, events, origin, 0))  # nesting, flows' tids
        tid = {(e["pid"], e["name"].split(" ", 1)[1] if e["name"].startswith("ncclKernel") else e["name"]): e["tid"]
               for e in events if e["ph"] == "X" and e["cat"] == "kernel"}
        self.assertEqual(tid[(0, "SEND to r1 mb0")], perfetto.STREAM_COMM)
        self.assertEqual(tid[(0, "SEND to r1 mb1")], perfetto.STREAM_COMM + 1)
        self.assertEqual(tid[(1, "RECV from r0 mb0")], perfetto.STREAM_COMM)
        self.assertEqual(tid[(1, "RECV from r0 mb1")], perfetto.STREAM_COMM + 1)
        self.assertEqual(tid[(1, "ANNOUNCE from r0 mb1")], perfetto.STREAM_COMM + 2)
        self.assertEqual(tid[(0, "F0")], perfetto.STREAM_COMPUTE)
        threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
        self.assertEqual(threads[(1, 10)], "stream 10 (announce)")
        self.assertEqual(threads[(0, 9)], "stream 9 (comm)")
        self.assertNotIn((0, 10), threads)
        self.assertEqual(perfetto.lanes([(0, 10), (5, 20), (10, 15), (20, 30), (12, 12)]), [0, 1, 0, 0, 2])

    def test_interleaved_transfers_pair_by_stage_and_order(self):
        """Two ranks, two chunks: rank 0 sends microbatch 0 forward (stage 0 -> 1) and, from stage 2, both forward
        (-> 3) and backward (-> 1); each SEND gets the RECV of an adjacent stage, earliest first."""
        ev = tracegen.ev
        rows = [ev(0, 0, "F", 0, 0, 0, 10, stage=0), ev(0, 0, "SEND", 0, 10, 10, 12, stage=0, peer=1),
                ev(0, 1, "RECV", 0, 0, 0, 12, stage=1, peer=0), ev(0, 0, "SEND", 0, 30, 30, 32, stage=2, peer=1),
                ev(0, 1, "RECV", 0, 0, 0, 32, stage=3, peer=0), ev(0, 0, "SEND", 0, 50, 50, 52, stage=2, peer=1),
                ev(0, 1, "RECV", 0, 0, 0, 52, stage=1, peer=0)]
        p = self.path("interleaved.h5")
        tracegen.write_trace(p, rows, [tracegen.step_row(0, 10, 0.5, 10.0)])
        trace = ct.load(p)
        self.assertEqual(perfetto.pair_transfers(trace), [(1, 2), (3, 4), (5, 6)])
        tracegen.write_trace(p, rows[:-1], [tracegen.step_row(0, 10, 0.5, 10.0)])
        r = run("perfetto.py", p, "-o", self.path("x.json"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("SEND of step 0 from rank 0 (stage 2) to rank 1, microbatch 0, has no matching RECV", r.stderr)

    def test_old_trace_has_no_units_and_no_epoch(self):
        trace = ct.load(self.example())
        self.assertEqual(trace.units("events"), {})
        self.assertIsNone(trace.epoch_unix_ns)


class MigrationRows(TempDirCase):
    """The hand-computed example plus one help: rank 0's B1 [500,600) gave 1 slice to rank 1, which computed it
    in its cool-down as HELP_B [510,560) (stage 0, microbatch 1, peer 0). Busy 400 + 380 + 50 = 830 of 2 x 600:
    bubble 1 - 830/1200; rank 1's span grows to [120,560): per-stage (1 - 400/600 + 1 - 430/440) / 2."""

    def setUp(self):
        super().setUp()
        self.p = self.path("migration.h5")
        rows = tracegen.example_events() + [tracegen.ev(0, 1, "HELP_B", 1, 505, 510, 560, stage=0, peer=0,
                                                        migrated=1, bytes_=2048)]
        step = tracegen.step_row(0, 600, 1 - 830 / 1200, 430.0) + ((1 - 400 / 600 + 1 - 430 / 440) / 2,)
        tracegen.write_trace(self.p, rows, [step])
        self.trace = ct.load(self.p)
        self.help = len(rows) - 1
        self.owner = [i for i, r in enumerate(rows) if r[1] == 0 and r[5] == tracegen.KINDS["B"] and r[4] == 1][0]

    def test_links_and_figures(self):
        self.assertEqual(ct.help_links(self.trace, self.trace.events), [(self.help, self.owner)])
        res = bubbles.analyze(self.trace)
        self.assertEqual(res["stored_mismatch_steps"], [])  # a help is busy time of its rank, as /steps counts it
        helped = [(t["helped_ns"], t["recovered_ns"]) for t in res["per_rank"]]
        self.assertEqual(helped, [(0, 50), (50, 0)])
        out = self.path("b.csv")
        self.assertEqual(bubbles.main(["--csv", "-o", out, self.p]), 0)
        with open(out) as f:
            by_rank = {(r["step"], r["rank"]): r for r in csv.DictReader(f)}
        self.assertEqual((by_rank[("0", "0")]["recovered_ns"], by_rank[("0", "1")]["helped_ns"]), ("50", "50"))
        self.assertEqual(bubbles.main(["-o", out, self.p]), 0)
        with open(out) as f:
            self.assertRegex(f.read(), r"\n +1 .* 0\.050 +0\.000\n")  # rank 1: helped 50 ns, recovered 0 (us)

    def test_links_of_helps_without_their_owner_op(self):
        """A help whose owner's op is not in the rows (another stage, or the owner's op of another kind) has no
        link; two helps of one op both link to it."""
        ev = tracegen.ev
        rows = tracegen.example_events() + [ev(0, 1, "HELP_B", 1, 505, 510, 530, stage=0, peer=0, migrated=1),
                                            ev(0, 1, "HELP_B", 1, 505, 530, 560, stage=0, peer=0, migrated=1),
                                            ev(0, 1, "HELP_W", 1, 505, 560, 570, stage=0, peer=0, migrated=1),
                                            ev(0, 0, "HELP_F", 0, 0, 200, 210, stage=1, peer=1, migrated=1),
                                            ev(0, 0, "HELP_F", 0, 0, 210, 220, stage=0, peer=1, migrated=1)]
        tracegen.write_trace(self.p, rows, [tracegen.step_row(0, 600, 0.3, 430.0)])
        trace = ct.load(self.p)
        f0_rank1 = [i for i, r in enumerate(rows) if r[1] == 1 and r[5] == tracegen.KINDS["F"] and r[4] == 0][0]
        n = len(tracegen.example_events())
        self.assertEqual(ct.help_links(trace, trace.events),
                         [(n, self.owner), (n + 1, self.owner), (n + 2, None), (n + 3, f0_rank1), (n + 4, None)])

    def test_perfetto_flows_out_and_back(self):
        events, origin = perfetto.convert(self.trace)
        flows = [(e["ph"], e["pid"], e["ts"]) for e in events if e.get("cat") == "migration"]
        # request: rank 0's B1 start -> the help's start; answer: the help's last ns -> B1's last ns (us)
        self.assertEqual(flows, [("s", 0, 0.5), ("f", 1, 0.51), ("s", 1, 0.559), ("f", 0, 0.599)])
        ids = [e["id"] for e in events if e["ph"] in "sf" and e.get("cat") in ("migration", "transfer")]
        self.assertEqual(len(set(ids)), len(ids) // 2)  # each id names one flow's two ends
        help_op = [e for e in events if e["ph"] == "X" and e["name"] == "HELP_B1 for r0"]
        self.assertEqual([(e["pid"], e["args"]["owner"]) for e in help_op], [(1, 0)])

    def test_perfetto_counts_transfers_and_migration_flows_apart(self):
        out = self.path("m.json")
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            self.assertEqual(perfetto.main([self.p, "-o", out]), 0)
        # one SEND/RECV pair; the help's two migration flows are no transfers
        self.assertIn(": 13 events, 1 transfers, 2 migration flows, 2 ranks, 1 steps", stdout.getvalue())

    def test_timeline_draws_the_help(self):
        out = self.path("tl.png")
        self.assertEqual(timeline.main([self.p, "-o", out]), 0)
        self.assertGreater(os.path.getsize(out), 1000)


class LargeTraces(TempDirCase):
    """What keeps the tools fast on a 64-rank trace (10^6 rows), checked without timing anything (speed is
    measured by bench/bench_analysis.py): timeline draws a bounded number of artists whatever the number of ops,
    and perfetto streams its events into the file, a batch at a time, with the bytes json.dump wrote from one list
    of every event (the events of the test trace below, as that version wrote them, are pinned here)."""

    def many_ops_trace(self, ops_per_rank=1500, world=4):
        """One step of `world` ranks, each running ops_per_rank 10 ns ops back to back (every 50th migrated) and
        one wide op (wide enough for a label), a SEND/RECV per op, and two helps with their owners' ops."""
        ev, rows = tracegen.ev, []
        kinds = ("F", "B", "W")
        for r in range(world):
            t = 0
            for n in range(ops_per_rank):
                rows.append(ev(0, r, kinds[n % 3], n, t, t, t + 10, migrated=int(n % 50 == 7)))
                t += 10
            rows.append(ev(0, r, "F", ops_per_rank, t, t, t + 1000))
            for n in range(ops_per_rank // 3):
                peer = (r + 1) % world
                rows.append(ev(0, r, "SEND", n, 30 * n, 30 * n, 30 * n + 5, peer=peer, stage=r, bytes_=64))
                rows.append(ev(0, peer, "RECV", n, 30 * n, 30 * n, 30 * n + 5, peer=r, stage=r + 1, bytes_=64))
        rows.append(ev(0, 1, "HELP_F", 3, 0, 20, 25, stage=0, peer=0, migrated=1))  # owner: rank 0's F3
        rows.append(ev(0, 2, "HELP_W", 5, 0, 20, 25, stage=1, peer=1, migrated=1))  # owner: rank 1's W5
        p = self.path("many.h5")
        tracegen.write_trace(p, rows, [tracegen.step_row(0, 10 * ops_per_rank + 1000, 0.1, 1.0)], world_size=world)
        return ct.load(p), len(rows)

    def test_timeline_draws_many_ops_with_few_artists(self):
        import matplotlib.pyplot as plt
        trace, n_rows = self.many_ops_trace()
        fig = timeline.figure(trace, 0, comm=True)
        try:
            ax = fig.axes[0]
            # one collection per hatch (plain, gave slices, helps) and one for the transfers; a bar is a path
            self.assertEqual(len(ax.collections), 4)
            self.assertEqual([c.get_hatch() for c in ax.collections[:3]], [None, "///", "xx"])
            self.assertEqual(sum(len(c.get_paths()) for c in ax.collections), n_rows)
            self.assertEqual(len(ax.patches), 0)
            # a label on each rank's wide op, none on the narrow ones; one dotted line per help
            labels = [t for t in ax.texts if t.get_text()]
            self.assertEqual(sorted(t.get_text() for t in labels), ["1500"] * trace.world_size)
            self.assertEqual(len(ax.texts) - len(labels), 2)
        finally:
            plt.close(fig)

    def golden_trace(self):
        """MigrationRows' trace plus two overlapping transfers and an ANNOUNCE (ProfilerExport's)."""
        ev = tracegen.ev
        rows = tracegen.example_events() + [ev(0, 1, "HELP_B", 1, 505, 510, 560, stage=0, peer=0, migrated=1,
                                               bytes_=2048),
                                            ev(0, 0, "SEND", 1, 105, 105, 300, peer=1, bytes_=4096),
                                            ev(0, 1, "RECV", 1, 50, 50, 300, peer=0, bytes_=4096),
                                            ev(0, 1, "ANNOUNCE", 1, 250, 60, 200, peer=0)]
        step = tracegen.step_row(0, 600, 1 - 830 / 1200, 430.0, loss=2.5) + ((1 - 400 / 600 + 1 - 430 / 440) / 2,)
        p = self.path("golden.h5")
        tracegen.write_trace(p, rows, [step])
        return p

    # Events of golden_trace() as perfetto.py wrote them before it streamed (json.dump of one list): key order,
    # number formatting, ids, streams. The whole file: 13 M, 32 X (16 rows), 2 X (ProfilerStep), 4 s/f pairs,
    # 18 C, M M X (the steps process).
    GOLDEN = (
        '{"ph": "M", "name": "thread_name", "pid": 1, "tid": 10, "args": {"name": "stream 10 (announce)"}}',
        '{"ph": "X", "name": "F0", "cat": "kernel", "pid": 0, "tid": 7, "ts": 0.0, "dur": 0.1, "args": {"step": 0, '
        '"stage": 0, "chunk": 0, "microbatch": 0, "ready_ns": 0, "wait_ns": 0, "bytes": 0, "correlation": 1, '
        '"device": 0, "stream": 7, "migrated": 0}}',
        '{"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": 0, "tid": 0, "ts": 0.0, "dur": 0, '
        '"args": {"correlation": 1, "op": "F0"}}',
        '{"ph": "X", "name": "HELP_B1 for r0", "cat": "kernel", "pid": 1, "tid": 7, "ts": 0.51, "dur": 0.05, "args": '
        '{"step": 0, "stage": 0, "chunk": 0, "microbatch": 1, "ready_ns": 505, "wait_ns": 0, "bytes": 2048, '
        '"correlation": 13, "device": 1, "stream": 7, "migrated": 1, "owner": 0}}',
        '{"ph": "X", "name": "ncclKernel_SendRecv SEND to r1 mb1", "cat": "kernel", "pid": 0, "tid": 9, "ts": 0.105, '
        '"dur": 0.195, "args": {"step": 0, "stage": 0, "chunk": 0, "microbatch": 1, "ready_ns": 105, "wait_ns": 0, '
        '"bytes": 4096, "correlation": 14, "device": 0, "stream": 9, "peer": 1}}',
        '{"ph": "X", "name": "ProfilerStep#0", "cat": "user_annotation", "pid": 1, "tid": 0, "ts": 0.0, "dur": 0.56, '
        '"args": {"step": 0}}',
        '{"ph": "f", "bp": "e", "id": 2, "name": "transfer", "cat": "transfer", "pid": 1, "tid": 9, "ts": 0.299, '
        '"args": {"step": 0, "microbatch": 1, "bytes": 4096}}',
        '{"ph": "s", "id": 4, "name": "migration", "cat": "migration", "pid": 1, "tid": 7, "ts": 0.559, "args": '
        '{"step": 0, "microbatch": 1, "slices": 1, "bytes": 2048}}',
        '{"ph": "C", "name": "ready ops", "pid": 1, "ts": 0.505, "args": {"ops": 1}}',
        '{"ph": "X", "name": "step 0", "cat": "step", "pid": 2, "tid": 0, "ts": 0.0, "dur": 0.6, "args": '
        '{"makespan_ns": 600, "bubble_ratio": 0.30833333333333335, "samples_per_s": 6666666.666666666, "loss": 2.5}}',
    )

    def test_perfetto_streams_the_same_json(self):
        p = self.golden_trace()
        trace = ct.load(p)
        events, origin = perfetto.convert(trace)
        self.assertEqual("".join(e["ph"] for e in events), "M" * 13 + "X" * 34 + "sf" * 4 + "C" * 18 + "MMX")
        out, per = self.path("g.json"), self.path("ranks")
        made, written = [], []  # made[k]: events written to the main file when event k was made
        real_iter, real_add = perfetto.iter_events, perfetto._JsonDocument.add

        def counting_iter(*args):
            for e in real_iter(*args):
                made.append(len(written))
                yield e

        def counting_add(doc, batch):
            if doc.f.name == out:
                written.extend(batch)
            real_add(doc, batch)
        with unittest.mock.patch.object(perfetto, "CHUNK", 4), \
                unittest.mock.patch.object(perfetto, "MAX_OPEN_FILES", 1), \
                unittest.mock.patch.object(perfetto, "iter_events", counting_iter), \
                unittest.mock.patch.object(perfetto._JsonDocument, "add", counting_add), \
                contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(perfetto.main([p, "-o", out, "--per-rank", per]), 0)
        # streamed: the first pass (the main file, rank 0's) wrote every batch of 4 before it made the next event
        self.assertEqual(made[:len(events)], [n - n % 4 for n in range(len(events))])
        self.assertEqual(written, [json.dumps(e) for e in events])
        with open(out) as f:
            text = f.read()
        self.assertEqual(text, json.dumps(perfetto.document(trace, events, origin, 0)))  # what json.dump wrote
        for line in self.GOLDEN:
            self.assertIn(line, text)
        for r in range(trace.world_size):  # one pass per rank (MAX_OPEN_FILES = 1): each file as json.dump wrote
            with open(os.path.join(per, "rank%d.json" % r)) as f:
                self.assertEqual(f.read(), json.dumps(perfetto.document(trace, [e for e in events if e["pid"] == r],
                                                                        origin, r)))


def sweep_trace(path, name, schedule, noise, makespans, seed=0, run_keys=""):
    """A trace whose deck names its source fragments as conductor's resolved deck does (run_keys: more lines of
    its run: section)."""
    deck = ("# conductor resolved deck (every key, defaults included), composed in this order:\n"
            "#   deck inputs/quickstart.yaml\n" +
            ("#   fragment inputs/noise/%s.yaml\n" % noise if noise != "none" else "") +
            "run:\n  name: %s\n  steps: %d\n%sschedule:\n  kind: %s\nnoise:\n  kind: [%s]\n  seed: %d\n" %
            (name, len(makespans), run_keys, schedule, "gaussian" if noise != "none" else "none", seed))
    events, rows, t = [], [], 0
    for s, mk in enumerate(makespans):  # the example's step (makespan 600) stretched to mk, steps back to back
        events += [e[:6] + tuple(t + v * mk // 600 for v in e[6:9]) + e[9:] for e in tracegen.example_events(s)]
        rows.append(tracegen.step_row(s, mk, 0.35, 400.0, start=t))
        t += mk
    tracegen.write_trace(path, events, rows, schedule=schedule, deck=deck)
    return path


class SweepReport(TempDirCase):
    def test_groups_repeats_skip_warmup_and_spread(self):
        specs = []
        for sched in ("1f1b", "zb-h1"):
            for noise in ("none", "jitter10"):
                for rep, tail in enumerate((500, 700)):
                    name = "q-%s-%s-r%d" % (sched, noise, rep)
                    # step 0 (warm-up) is 10x slower: it must not count by default
                    sweep_trace(self.path(name + ".h5"), name, sched, noise, [6000, tail, tail], seed=rep)
                    specs.append("%s=%s" % (name, self.path(name + ".h5")))
        runs = [compare.run_figures(n, t, 1) for n, t in compare.parse_runs(specs)]
        groups, varying, other = compare.group(runs)
        self.assertEqual(varying, ["schedule", "noise"])
        self.assertFalse(other)
        self.assertEqual([g["label"] for g in groups], ["q-1f1b-none", "q-1f1b-jitter10", "q-zb-h1-none",
                                                        "q-zb-h1-jitter10"])
        self.assertEqual([len(g["runs"]) for g in groups], [2, 2, 2, 2])
        compare.stats(groups, "q-1f1b-none")
        mean, sd = groups[0]["mean_makespan_ms"]
        self.assertAlmostEqual(mean, 600e-6)
        self.assertAlmostEqual(sd, np.std([500e-6, 700e-6], ddof=1))
        self.assertAlmostEqual(groups[0]["speedup"][0], (600 / 500 + 600 / 700) / 2)
        out = self.path("report.md")
        self.assertEqual(compare.main(specs + ["-o", out, "--baseline", "q-1f1b-none"]), 0)
        with open(out) as f:
            text = f.read()
        self.assertIn("8 runs in 4 configurations; step 0 (warm-up) left out", text)
        self.assertIn("| q-zb-h1-jitter10 | zb-h1 | jitter10 | 2 | 2 |", text)
        self.assertIn("0.0006 ± 0.0001414", text)
        self.assertIn("Same for every run: deck **quickstart**, execution **strict**", text)
        self.assertEqual(compare.main(specs + ["-o", out, "--include-warmup"]), 0)
        with open(out) as f:
            self.assertIn("| q-1f1b-none | 1f1b | none | 2 | 3 | ", f.read())

    def test_names_paths_and_sources_in_the_report(self):
        # A '|' in a run's name split its table cells (the header had a cell more than the delimiter row); a chart
        # path with a blank ended its link there; a measured run and a simulation of one deck were averaged as two
        # repeats of one configuration.
        import h5py
        a = sweep_trace(self.path("x-r0.h5"), "x-r0", "1f1b", "none", [600, 500])
        b = sweep_trace(self.path("x-r1.h5"), "x-r1", "1f1b", "none", [600, 700])
        with h5py.File(b, "r+") as f:
            f.attrs["source"], f.attrs["backend"] = "runtime", "cpu"
        out = self.path("rep x.md")
        self.assertEqual(compare.main(["a|b=" + a, b, "-o", out]), 0)
        with open(out) as f:
            text = f.read()
        table = [line for line in text.splitlines() if line.startswith("|")]
        cells = [len(re.split(r"(?<!\\)\|", line)) for line in table]
        self.assertEqual(len(set(cells)), 1, table)
        self.assertIn("speedup vs a\\|b", table[0])
        self.assertIn("| source |", table[0])
        self.assertTrue(any("simulator" in line for line in table) and any("measured (cpu)" in line for line in table))
        self.assertIn("2 runs in 2 configurations", text)
        self.assertIn("![comparison](<rep x.png>)", text)

    def test_chart_title_says_the_steps_left_out(self):
        # The report said "first 2 steps left out" where the chart's title said "step 0 left out".
        specs = []
        for rep in range(2):
            name = "q-zb-h1-none-r%d" % rep
            sweep_trace(self.path(name + ".h5"), name, "zb-h1", "none", [6000, 900, 600, 600], seed=rep)
            specs.append("%s=%s" % (name, self.path(name + ".h5")))
        titles = []
        real = compare.ct.save_figure
        compare.ct.save_figure = lambda fig, path, dpi, outs=None: titles.append(fig._suptitle.get_text())
        try:
            for skip, said in (("2", "first 2 steps left out"), ("1", "step 0 (warm-up) left out")):
                out = self.path("report-%s.md" % skip)
                self.assertEqual(compare.main(specs + ["-o", out, "--skip", skip]), 0)
                with open(out) as f:
                    self.assertIn(said, f.read())
                self.assertTrue(titles[-1].endswith("; " + said), titles[-1])
        finally:
            compare.ct.save_figure = real

    def test_bookkeeping_keys_do_not_split_configurations(self):
        # `make run` passes run.overwrite=true, a measured run may log every step: neither changes what a run
        # measures, so such repeats are one configuration (they made an "other" column and two groups).
        a = sweep_trace(self.path("a.h5"), "q-r0", "zb-h1", "none", [600, 500], run_keys="  overwrite: true\n")
        b = sweep_trace(self.path("b.h5"), "q-r1", "zb-h1", "none", [600, 700], seed=1,
                        run_keys="  log_every: 5\n  memory_limit_gb: 2\n")
        runs = [compare.run_figures(n, t, 1) for n, t in compare.parse_runs(["q-r0=" + a, "q-r1=" + b])]
        groups, varying, other = compare.group(runs)
        self.assertFalse(other)
        self.assertEqual([(g["label"], len(g["runs"])) for g in groups], [("q", 2)])
        c = sweep_trace(self.path("c.h5"), "q-r2", "zb-h1", "none", [600, 700], run_keys="  steps_x: 1\n")
        runs.append(compare.run_figures("q-r2", ct.load(c), 1))
        groups, varying, other = compare.group(runs)  # any other key still splits them, shown under "other"
        self.assertTrue(other)
        self.assertEqual([len(g["runs"]) for g in groups], [2, 1])

    def test_every_differing_deck_key_is_shown(self):
        """noise.* overrides after a preset and schedule.* keys the schedule column does not show are not hidden;
        values print as YAML."""
        def deck(name, noise_level, memory_limit=2, post_validation=False, override=True):
            return ("# conductor resolved deck (every key, defaults included), composed in this order:\n"
                    "#   deck inputs/quickstart.yaml\n#   fragment inputs/noise/jitter10.yaml\n" +
                    ("#   override noise.level=%s\n" % noise_level if override else "") +
                    "run:\n  name: %s\nschedule:\n  kind: zb-h1\n  execution: strict\n  hint: schedule\n"
                    "  post_validation: %s\n  memory_limit: %d\n  stages: [1]\nnoise:\n  kind: [gaussian]\n"
                    "  level: %s\n  seed: 0\n" % (name, "true" if post_validation else "false", memory_limit,
                                                  noise_level))

        def report(*decks):
            specs = []
            for i, text in enumerate(decks):
                p = self.example("run%d.h5" % i, steps=2, deck=text)
                specs.append("run%d=%s" % (i, p))
            out = self.path("r.md")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(compare.main(specs + ["-o", out]), 0)
            with open(out) as f:
                return f.read()

        text = report(deck("a", 0.1), deck("b", 0.5))  # the same preset, overridden differently
        self.assertIn("| run | noise | repeats |", text)
        self.assertIn("| run0 | jitter10 level=0.1 | 1 |", text)
        self.assertIn("| run1 | jitter10 level=0.5 | 1 |", text)
        self.assertNotIn("noise **", text)
        text = report(deck("a", 0.1, override=False), deck("b", 0.5, override=False))  # no override to name it
        self.assertIn("| run | other | repeats |", text)
        self.assertIn("| run0 | noise.level=0.1 | 1 |", text)
        self.assertIn("execution **strict**, noise **jitter10**, source **simulator**.", text)
        text = report(deck("a", 0.1), deck("b", 0.1, memory_limit=3, post_validation=True))
        self.assertIn("| run0 | schedule.memory_limit=2, schedule.post_validation=false | 1 |", text)
        self.assertIn("| run1 | schedule.memory_limit=3, schedule.post_validation=true | 1 |", text)
        # a key the schedule column tells apart stays out of "other" (zb-h1 derives its own memory_limit)
        paths = [sweep_trace(self.path("s%d.h5" % i), "s%d" % i, k, "none", [600, 600])
                 for i, k in enumerate(("1f1b", "zb-h1"))]
        runs = [compare.run_figures(n, t, 1) for n, t in compare.parse_runs(paths)]
        runs[1]["deck"]["schedule.memory_limit"] = "2"
        groups, varying, other = compare.group(runs)
        self.assertEqual((varying, other), (["schedule"], False))
        self.assertEqual(compare._yaml({"a": [1, False, None], "b": "x"}), "{a: [1, false, null], b: x}")

    def test_a_trace_given_twice_is_refused(self):
        p = sweep_trace(self.path("q.h5"), "q", "1f1b", "none", [600, 600])
        for specs in ([p, p], [p, os.path.join(self.dir, ".", "q.h5")], ["a=" + p, "b=" + p]):
            with self.assertRaisesRegex(ct.TraceError, "given twice .*; pass each run once"):
                compare.parse_runs(specs)
        r = run("compare.py", p, p, "-o", self.path("r.md"))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "compare.py: error: %s: given twice (also as %s); pass each run once\n" % (p, p))
        self.assertFalse(os.path.exists(self.path("r.md")))

    def test_run_names_are_given_and_unique(self):
        """NAME=TRACE: nothing before or after the '=' is refused, and so is a NAME given to two runs (--baseline
        NAME could not tell them apart), as one line naming the argument or the name; names from the run folders
        alike are told apart as NAME, NAME#2."""
        os.mkdir(self.path("x"))
        os.mkdir(self.path("y"))
        p = sweep_trace(self.path("x/trace.h5"), "q", "1f1b", "none", [600, 600])
        q = sweep_trace(self.path("y/trace.h5"), "q", "1f1b", "none", [600, 700])
        out = self.path("r.md")
        for args, expected in (
                (["measured=", "-o", out], "compare.py: error: 'measured=': no trace after the '=' (NAME=TRACE"),
                (["a=" + p, "measured=", "-o", out], "compare.py: error: 'measured=': no trace after the '='"),
                (["=" + p, "-o", out], "compare.py: error: '=%s': no name before the '=' (NAME=TRACE" % p),
                (["a=" + p, "a=" + q, "-o", out, "--baseline", "a"],
                 "compare.py: error: name 'a' is given to two runs (a=%s and a=%s); give each run its own NAME" %
                 (p, q)),
                (["y=" + p, q, "-o", out],
                 "compare.py: error: name 'y' is given to two runs (y=%s, and %s by its run folder); give each run "
                 "its own NAME" % (p, q))):
            r = run("compare.py", *args)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
            self.assertTrue(r.stderr.startswith(expected), r.stderr)
            self.assertFalse(os.path.exists(out))
            self.assertFalse(os.path.exists(self.path("r.png")))
        self.assertEqual([n for n, _ in compare.parse_runs(["a=" + p, "b=" + q])], ["a", "b"])
        self.assertEqual([n for n, _ in compare.parse_runs(["x#2=" + p, self.path("x/../y/trace.h5")])],
                         ["x#2", "y"])
        shutil.copyfile(q, self.path("x/q.h5"))
        os.mkdir(self.path("z"))
        shutil.copyfile(q, self.path("z/q.h5"))
        self.assertEqual([n for n, _ in compare.parse_runs([self.path("x/q.h5"), self.path("z/q.h5"), "q#2=" + p])],
                         ["q", "q#3", "q#2"])
        r = run("compare.py", "a=" + p, "b=" + q, "-o", out, "--baseline", "a")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_zero_makespan_speedup_is_not_a_number(self):
        """All-zero costs: makespan 0, the speedup is undefined: n/a, not nanx or 0.000x."""
        zero = self.path("zero.h5")
        rows = [e[:6] + (0, 0, 0) + e[9:] for e in tracegen.example_events()]
        tracegen.write_trace(zero, rows, [(0, float("nan"), 0, 0, 0.0, 0.0, 0.0)])
        base = self.example("base.h5")
        zero_row, base_row = "| zero | 1 | 1 | 0 | 0 | 0.0 | n/a |", "| base | 1 | 1 | 6.667e+06 | 0.0006 | 35.0 | "
        for specs, want in ((["zero=" + zero, "base=" + base], [zero_row, base_row + "n/a |"]),
                            (["base=" + base, "zero=" + zero], [zero_row, base_row + "1.000x |"])):
            out = self.path("r.md")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(compare.main(specs + ["-o", out, "--include-warmup"]), 0)
            with open(out) as f:
                text = f.read()
            for line in want:
                self.assertIn(line, text)
            self.assertNotIn("nan", text)

    def test_eighteen_configurations_make_a_bounded_figure(self):
        specs = []
        for sched in ("1f1b", "zb-h1", "gpipe"):
            for noise in ("none", "jitter10", "straggler", "congestion", "a", "b"):
                name = "q-%s-%s" % (sched, noise)
                specs.append("%s=%s" % (name, sweep_trace(self.path(name + ".h5"), name, sched, noise, [600, 600])))
        out = self.path("r.md")
        self.assertEqual(compare.main(specs + ["-o", out]), 0)
        import matplotlib.image
        h, w = matplotlib.image.imread(self.path("r.png")).shape[:2]
        self.assertLessEqual(w, 1200)  # was 7776 x 432 with one bar group per run in a strip
        self.assertLessEqual(h, 700)
        self.assertGreaterEqual(h, 18 * 20)  # every configuration gets a readable row


class SimulatorTrace(TempDirCase):
    """A trace written by the C++ TraceWriter through `conductor simulate` (skipped without it)."""

    def setUp(self):
        super().setUp()
        binary = os.environ.get("CONDUCTOR_BINARY")
        if not binary or not os.access(binary, os.X_OK):
            self.skipTest("CONDUCTOR_BINARY is not set to the conductor executable")
        deck = os.path.join(SOURCE, "inputs", "quickstart.yaml")
        out = self.path("sim")
        try:
            r = subprocess.run([binary, "simulate", deck, "run.output=" + out, "trace.enabled=true"],
                               capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            self.skipTest("conductor simulate did not finish in 60 s")
        self.trace_path = os.path.join(out, "trace.h5")
        if r.returncode < 0:  # killed by a signal: a crash is a bug, not "not available"
            self.fail("conductor simulate crashed (signal %d): %s" % (-r.returncode, r.stderr.strip()[-300:]))
        if r.returncode != 0 or not os.path.exists(self.trace_path):
            self.skipTest("conductor simulate is not available yet (rc %d): %s" %
                          (r.returncode, (r.stderr or r.stdout).strip()[-300:]))

    def test_figures_agree_and_tools_run(self):
        trace = ct.load(self.trace_path)
        self.assertEqual(trace.attrs["source"], "simulator")
        res = bubbles.analyze(trace)
        self.assertEqual(res["stored_mismatch_steps"], [])
        for s in res["per_step"]:
            self.assertAlmostEqual(s["bubble_ratio"], s["stored_bubble_ratio"], places=9)
            self.assertEqual(s["makespan_ns"], s["stored_makespan_ns"])
            busy = sum(d["busy_ns"] for d in s["ranks"])
            self.assertEqual(s["idle_ns"], trace.world_size * s["makespan_ns"] - busy)
        cp = res["critical_path"]
        self.assertEqual(cp["compute_ns"] + cp["transfer_ns"] + cp["slack_ns"], cp["length_ns"])
        self.assertEqual(timeline.main([self.trace_path, "-o", self.path("t.png")]), 0)
        self.assertEqual(perfetto.main([self.trace_path, "-o", self.path("t.json")]), 0)
        d = load_json(self.path("t.json"))
        self.assertEqual(sum(1 for e in d["traceEvents"] if e.get("cat") == "kernel"), len(trace.events))
        check_profiler_export(self, trace, d)
        units = trace.units("events")  # dataset attributes written by the C++ writer
        self.assertEqual((units["start_ns"], units["bytes"], units["step"]), ("ns", "B", ""))
        self.assertEqual(trace.units("steps")["samples_per_s"], "samples/s")
        self.assertIn("simulated", trace.dataset_attrs["events"]["clock"])
        self.assertIsNone(trace.epoch_unix_ns)

    def test_valid_traces_pass_and_edited_ones_are_refused(self):
        """What the C++ writer writes passes the loader's checks in every tool, with migration's HELP_* rows too; the
        same file with an unknown kind on one row is refused by every tool, naming the row."""
        check_every_tool_accepts(self, self.trace_path)
        out = self.path("migration")
        deck = os.path.join(SOURCE, "inputs", "quickstart.yaml")
        r = subprocess.run([os.environ["CONDUCTOR_BINARY"], "simulate", deck,
                            "run.output=" + out, "trace.enabled=true", "run.steps=3", "migration.enabled=true",
                            "noise.kind=gaussian", "noise.level=0.3"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        migration = os.path.join(out, "trace.h5")
        trace = ct.load(migration)
        helps = [trace.kind_code(k) for k in ct.HELP_OF]
        self.assertGreater(int(np.isin(trace.events["kind"], helps).sum()), 0)
        check_every_tool_accepts(self, migration)
        row = ct.load(self.trace_path).events[17]
        p = edited_copy(self, self.trace_path, "kind99.h5", "events", 17, kind=99)
        check_every_tool_refuses(self, p, "/events row 17 (step %d, rank %d): kind 99 is not one of the event kinds "
                                          "0..10 (docs/trace.md)" % (row["step"], row["rank"]))

    def test_damaged_metadata_and_folder(self):
        for obj in ("/", "steps"):
            p = damaged_copy(self, self.trace_path, "damaged_%s.h5" % obj.strip("/"), obj)
            check_every_tool_refuses(self, p, "damaged HDF5 trace (")
        check_every_tool_refuses(self, os.path.dirname(self.trace_path), "is a folder, not a trace file")

    def test_damage_that_crashes_or_stalls_hdf5(self):
        """Damage that h5py cannot survive: the length of a dataset attribute's text overwritten (HDF5 reads
        past its buffer: a segmentation fault inside h5py with this Debian's HDF5), and the superblock's
        addresses overwritten (a SWMR open retries its checksum with sleeps for minutes). Every tool still
        gives one line and exit 2, within the test's 60 s per tool."""
        with open(self.trace_path, "rb") as fp:
            data = fp.read()
        text = data.find(b"idle time on this rank")  # /events' doc attribute for wait_ns (trace_writer.cpp)
        self.assertGreater(text, 8)
        cases = {"length.h5": text - 8, "superblock.h5": 24}
        for name, offset in cases.items():
            p = self.path(name)
            with open(p, "wb") as fp:
                fp.write(data[:offset] + b"\xde\xad\xbe\xef" * 2 + data[offset + 8:])
            plain = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r); import conductor_trace as ct;"
                                    "ct._read(ct._open(%r), %r)" % (ANALYSIS, p, p)],
                                   capture_output=True, text=True, timeout=60)
            check_every_tool_refuses(self, p, "not a readable HDF5 file" if name == "superblock.h5" else "damaged HDF5 trace (")
            if plain.returncode < 0:  # h5py crashed reading it here: the tools must say so
                check_every_tool_refuses(self, p, "reading it crashed the HDF5 library: SIG")

    def test_timeline_title_names_the_run_and_its_noise(self):
        # A sweep draws one timeline.png per run, every trace named trace.h5: the title named the file, not the run.
        out = self.path("sweep-run-7")
        r = subprocess.run([os.environ["CONDUCTOR_BINARY"], "simulate", os.path.join(SOURCE, "inputs", "quickstart.yaml"),
                            os.path.join(SOURCE, "inputs", "noise", "jitter10.yaml"), "run.output=" + out,
                            "run.steps=2"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        fig = timeline.figure(ct.load(os.path.join(out, "trace.h5")), 1)
        title = fig.axes[0].get_title()
        self.assertTrue(title.startswith("sweep-run-7, noise jitter10  step 1: zb-h1,"), title)

    def test_interleaved_transfers_pair_exactly(self):
        """Two chunks per rank send both ways between the same ranks; in the simulator a SEND and its RECV
        share their times, so every pair perfetto.py makes can be checked exactly."""
        out = self.path("interleaved")
        r = subprocess.run([os.environ["CONDUCTOR_BINARY"], "simulate", os.path.join(SOURCE, "inputs", "quickstart.yaml"),
                            "run.output=" + out, "trace.enabled=true", "run.steps=2", "schedule.kind=1f1b-interleaved",
                            "parallel.virtual=2", "noise.kind=gaussian", "noise.level=0.3"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        trace = ct.load(os.path.join(out, "trace.h5"))
        ev = trace.events
        pairs = perfetto.pair_transfers(trace)
        self.assertEqual(len(pairs), int((ev["kind"] == trace.kind_code("SEND")).sum()))
        for s, q in pairs:
            self.assertEqual((ev["start_ns"][s], ev["end_ns"][s]), (ev["start_ns"][q], ev["end_ns"][q]))
            self.assertEqual(abs(int(ev["stage"][s]) - int(ev["stage"][q])), 1)
        events, origin = perfetto.convert(trace)
        check_profiler_export(self, trace, perfetto.document(trace, events, origin, 0))


if __name__ == "__main__":
    unittest.main()
