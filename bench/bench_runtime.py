#!/usr/bin/python3
"""Runtime benchmark on the emulated backend (the runtime's real MPI, arbitration and trace; ops sleep their
cost-model time), all figures as ratios measured side by side in this one run:
  - dispatch + arbitration overhead per op, with zero-cost ops;
  - readiness over strict speedup at p=4 and p=8 under 0, 10, 20% jitter and one straggler;
  - runtime makespan over the simulator's prediction for the same deck and seed;
  - trace overhead (trace on vs off).
With --backfill: only issue 13's runtime rows: backfill over strict at p=2 and p=4 (--ranks; 20 ms ops (--op-ms),
10% jitter, a straggler, congestion of 2F on half the transfers), measured (--repeat runs of each, side by side, with the machine's load) and as the simulator predicts
for the same deck and seed (steps after the first: the runtime has no measured estimates in its first step), with
the backfills each made (from the traces) and how many delayed the list; then backfill's own cost per cross-rank
transfer (announcements, dispatch) with zero-cost ops.
With --migration: only issue 15's emulated rows: migration on over off at p=2 and p=4 (--ranks; 1F1B strict and
readiness, without and with 10% jitter, 20 ms ops (--op-ms), twice that on a straggling stage, NVLink link, 4
slices), measured and as the simulator predicts for the same deck, with the bytes moved per step (summary.json) and
the control cost per slice.
With --cpu-migration: issue 15's cpu rows: migration on over off with the trainer's real kernels (quickstart model,
zb-h1 readiness, a 3x straggler, MLP groups, NVLink), p=2 (ranks <= cores) and p=4 (4 ranks on this machine's
cores: oversubscribed where it has fewer), --repeat alternating off/on pairs of --steps steps each (step 0 not
counted), with the simulator's prediction for the same deck.
Usage: bench/bench_runtime.py [--backfill [--repeat N] [--steps S] [--ranks P,..] [--op-ms MS]|
--migration [--ranks P,..] [--op-ms MS]|--cpu-migration [--repeat N] [--steps S]] [BUILD_DIR]
(make bench runs it without any)"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PARSER = argparse.ArgumentParser(description=__doc__.split("\n")[0])
PARSER.add_argument("build", nargs="?", default="build")
PARSER.add_argument("--backfill", action="store_true")
PARSER.add_argument("--migration", action="store_true")
PARSER.add_argument("--cpu-migration", action="store_true")
PARSER.add_argument("--repeat", type=int, default=3, help="--backfill: runtime runs per case")
PARSER.add_argument("--steps", type=int, default=None,
                    help="--backfill (default 6), --cpu-migration (default 30): steps per run (the first is not counted)")
PARSER.add_argument("--ranks", type=lambda x: [int(p) for p in x.split(",")], default=[2, 4],
                    help="--backfill, --migration: pipeline sizes, comma-separated (default 2,4)")
PARSER.add_argument("--op-ms", type=float, default=20.0,
                    help="--backfill, --migration: the ops' time in ms (default 20; --migration: twice that on the "
                         "straggler; --backfill: comm is 1/20 of it). With more ranks than cores, long ops keep the "
                         "ranks' turns on the cores small against the ops")
OPTS = PARSER.parse_args()
BUILD = OPTS.build
BIN = os.path.join(BUILD, "conductor")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMP_NUM_THREADS="1")

DECK = """\
backend: emulated
run: {name: bench, steps: %(steps)d, output: %(out)s}
parallel: {pipeline: %(p)d, microbatches: %(m)d}
schedule: {kind: %(kind)s, execution: %(execution)s, hint: %(hint)s}
cost: {forward: %(f)g, backward_input: %(f)g, backward_weight: %(f)g, comm: %(comm)g}
noise: {kind: %(noise)s, level: %(level)g, seed: 11, straggler_rank: %(srank)d, straggler_factor: 1.5, straggler_start: 0, straggler_steps: 1000, congestion_prob: %(cprob)g, congestion_delay: -1}
trace: {enabled: %(trace)s}
"""


def run(tmp, name, simulate=False, **kw):
    params = dict(steps=4, p=4, m=16, kind="1f1b", execution="strict", hint="schedule", f=5.0, comm=0.5,
                  noise="none", level=0.0, trace="true", srank=0, cprob=0.1)
    params.update(kw)
    out = os.path.join(tmp, name + ("-sim" if simulate else ""))
    params["out"] = out
    deck = os.path.join(tmp, name + ".yaml")
    with open(deck, "w") as f:
        f.write(DECK % params)
    if simulate:
        cmd = [BIN, "simulate", deck, "--json"]
    else:
        cmd = ["mpiexec", "-n", str(params["p"]), "--oversubscribe", BIN, "run", deck]
    return summary_of(cmd, out)[0]


def summary_of(cmd, out):
    """Runs `cmd` (a conductor run or simulate writing to `out`); its summary.json and stdout. Exits on failure."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    if proc.returncode != 0:
        sys.exit("bench_runtime: %s failed:\n%s" % (" ".join(cmd), proc.stderr))
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f), proc.stdout


def after_first(summary):
    """The mean makespan of the steps after the first (step 0, the start-up, is not counted)."""
    ms = [s["makespan_ms"] for s in summary["steps"][1:]]
    return sum(ms) / len(ms)


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def backfills(strict_trace, backfill_trace):
    """Backfills in a backfill run's trace (steps after the first): ops that started while an op listed before
    them had not (the strict run's order is the list), and how many of them ended after the inputs of the first
    such waiting op were in (a backfill that delayed the list)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "analysis"))
    import conductor_trace as ct
    listed, ran = ct.load(strict_trace), ct.load(backfill_trace)
    count = late = 0
    for step in ran.step_ids[1:]:
        order, times = listed.step_events(step, compute_only=True), ran.step_events(step, compute_only=True)
        for r in range(ran.world_size):
            mine = order[order["rank"] == r]
            keys = [(int(k), int(c), int(mb)) for k, c, mb in
                    zip(*(mine[mine["start_ns"].argsort(kind="stable")][f] for f in ("kind", "chunk", "microbatch")))]
            at = {(int(e["kind"]), int(e["chunk"]), int(e["microbatch"])): e for e in times[times["rank"] == r]}
            for pos, key in enumerate(keys):
                waiting = [k for k in keys[:pos] if at[k]["start_ns"] > at[key]["start_ns"]]
                if waiting:
                    count += 1
                    late += int(at[key]["end_ns"] > at[waiting[0]]["ready_ns"])
    return count, late


def backfill_rows():
    repeat, steps = OPTS.repeat, OPTS.steps or 6
    print("== backfill over strict, emulated runtime vs simulator (F=B=W=%g ms, comm %g ms, m=2p, %d steps: the "
          "mean makespan of steps 1..%d, the first has no measured estimates). runtime: %d runs of each, speedup = "
          "mean strict / mean backfill, [min, max] over runs, and the median of the paired per-step ratios; "
          "load: the 1-minute load average over the runs (%d cores); backfills per step (ops started before an "
          "op listed earlier) and how many of them ended after that op's inputs were in" %
          (OPTS.op_ms, OPTS.op_ms / 20, steps, steps - 1, repeat, os.cpu_count()))
    print("   %-3s %-6s %-16s %5s %8s %8s %24s %7s %8s %8s %9s %7s %14s %11s" %
          ("p", "kind", "noise", "load", "strict", "backfill", "speedup [min, max]", "median", "sim str", "sim bf",
           "predicted", "diff", "bf/step (late)", "sim (late)"))
    with tempfile.TemporaryDirectory() as tmp:
        for p in OPTS.ranks:
            for kind in ("1f1b", "zb-h1"):
                # Congestion: half the transfers 2F late (level 2 x mean F), which backfill's ranks measure as a wide
                # spread of arrivals and rank as critical (the simulator from its noise model).
                for case, (noise, label, level, cprob) in enumerate((
                        ("gaussian", "jitter 10%", 0.1, 0.1), ("[gaussian, straggler]", "jitter+straggler", 0.1, 0.1),
                        ("[congestion]", "congestion .5 2F", 2.0, 0.5))):
                    kw = dict(p=p, m=2 * p, kind=kind, f=OPTS.op_ms, comm=OPTS.op_ms / 20, noise=noise, level=level,
                              srank=p - 1, cprob=cprob, trace="true", steps=steps)
                    name = "bf%d%s%d" % (p, kind, case)
                    bf = dict(execution="readiness", hint="backfill")
                    sim_s = after_first(run(tmp, name + "s", simulate=True, **kw))
                    sim_b = after_first(run(tmp, name + "b", simulate=True, **bf, **kw))
                    sim_n, sim_late = backfills(*(os.path.join(tmp, name + x + "-sim", "trace.h5") for x in "sb"))
                    strict, backfill, paired, loads, n, late = [], [], [], [], 0, 0
                    for k in range(repeat):
                        # Strict and backfill side by side, so that a change in the machine's load hits both alike,
                        # in turns first.
                        loads.append(load())
                        first = "sb" if k % 2 == 0 else "bs"
                        ran = {x: run(tmp, "%s%s%d" % (name, x, k), **(bf if x == "b" else {}), **kw) for x in first}
                        runs = [ran["s"], ran["b"]]
                        strict.append(after_first(runs[0]))
                        backfill.append(after_first(runs[1]))
                        paired += [a["makespan_ms"] / b["makespan_ms"] for a, b in zip(runs[0]["steps"][1:],
                                                                                       runs[1]["steps"][1:])]
                        x = backfills(*(os.path.join(tmp, "%s%s%d" % (name, x, k), "trace.h5") for x in "sb"))
                        n, late = n + x[0], late + x[1]
                    loads.append(load())
                    speedups = [a / b for a, b in zip(strict, backfill)]
                    speedup, predicted = sum(strict) / sum(backfill), sim_s / sim_b
                    per_step = repeat * (steps - 1)
                    print("   %-3d %-6s %-16s %5.1f %8.2f %8.2f %7.3fx [%.3f, %.3f] %6.3fx %8.2f %8.2f %8.3fx %+6.1f%% "
                          "%8.1f (%.1f) %6.1f (%.1f)" %
                          (p, kind, label, sum(loads) / len(loads), sum(strict) / repeat, sum(backfill) / repeat,
                           speedup, min(speedups), max(speedups), sorted(paired)[len(paired) // 2], sim_s, sim_b,
                           predicted, 100.0 * (speedup / predicted - 1), n / per_step, late / per_step,
                           sim_n / (steps - 1), sim_late / (steps - 1)), flush=True)
        # What backfilling costs where nothing can be gained: zero-cost ops, so a step is only dispatch, messages
        # and announcements (one per cross-rank transfer), side by side with strict.
        print("== backfill's own cost: zero-cost ops (p=2, m=64, comm 0, 11 steps: the median step of 1..10, "
              "%d runs each)" % repeat)
        for kind in ("1f1b", "zb-h1"):
            kw = dict(p=2, m=64, kind=kind, f=0.0, comm=0.0, trace="false", steps=11)
            med = {}
            for x, extra in (("strict", {}), ("backfill", dict(execution="readiness", hint="backfill"))):
                steps_ms = []
                for k in range(repeat):
                    summary = run(tmp, "zero%s%s%d" % (kind, x, k), **extra, **kw)
                    steps_ms += [s["makespan_ms"] for s in summary["steps"][1:]]
                med[x] = sorted(steps_ms)[len(steps_ms) // 2]
            transfers = 2 * 64  # cross-rank transfers per step at p=2: an activation and a gradient per microbatch
            print("   %-6s strict %.3f ms, backfill %.3f ms per step: %+.2f us per cross-rank transfer (load %.1f)" %
                  (kind, med["strict"], med["backfill"], 1000.0 * (med["backfill"] - med["strict"]) / transfers,
                   load()), flush=True)


MIGRATION_DECK = """\
backend: emulated
run: {name: mig, steps: 6, output: %(out)s}
parallel: {pipeline: %(p)d, microbatches: 8}
model: {n_layers: 4, d_model: 64, n_heads: 4, seq_len: 32}
schedule: {kind: 1f1b, execution: %(execution)s}
cost: {forward: [%(costs)s], backward_input: [%(costs)s], backward_weight: [%(costs)s], comm: 0.5}
noise: {kind: %(noise)s, level: %(level)g, seed: 11}
migration: {enabled: %(enabled)s, slices: 4, link: nvlink}
trace: {enabled: false}
"""


def migration_run(tmp, p, straggler, enabled, simulate, execution="strict", jitter=0.0):
    name = "mig%d%s%s%g%s" % (p, "on" if enabled else "off", execution, jitter, "-sim" if simulate else "")
    out = os.path.join(tmp, name)
    costs = ", ".join("%g" % (OPTS.op_ms * (2 if r == straggler else 1)) for r in range(p))
    deck = os.path.join(tmp, name + ".yaml")
    with open(deck, "w") as f:
        f.write(MIGRATION_DECK % dict(out=out, p=p, costs=costs, enabled="true" if enabled else "false",
                                      execution=execution, noise="gaussian" if jitter > 0 else "none", level=jitter))
    cmd = [BIN, "simulate", deck] if simulate else ["mpiexec", "-n", str(p), "--oversubscribe", BIN, "run", deck]
    summary, stdout = summary_of(cmd, out)
    moved = [st["bytes"] for st in summary["migration"]["steps"][1:]] if enabled else [0.0]
    return after_first(summary), control_us_per_slice(stdout), sum(moved) / len(moved)


def control_us_per_slice(stdout):
    # conductor run's line "migration: N slices moved in D decisions, control X us per slice, ..."; NaN if absent.
    for line in stdout.splitlines():
        if line.startswith("migration: ") and " us per slice" in line:
            return float(line.split("control ")[1].split(" us")[0])
    return float("nan")


def migration_rows():
    print("== migration on over off, emulated runtime vs simulator (1F1B, m=8, %g ms ops, %g ms on the straggler, "
          "NVLink, 4 slices, 6 steps; mean makespan of steps 1-5; readiness: the default hint; %d cores)" %
          (OPTS.op_ms, 2 * OPTS.op_ms, os.cpu_count()))
    print("   %-3s %-9s %-10s %-7s %10s %10s %9s %9s %9s %9s %9s %12s" %
          ("p", "straggler", "execution", "jitter", "off ms", "on ms", "runtime", "sim", "run/sim", "MB/step",
           "sim MB", "ctl us/slice"))
    with tempfile.TemporaryDirectory() as tmp:
        for p, straggler in ((p, 0 if p == 2 else 1) for p in OPTS.ranks):
            for execution in ("strict", "readiness"):
                for jitter in (0.0, 0.1):
                    gain = {}
                    for sim in (False, True):
                        off, _, _ = migration_run(tmp, p, straggler, False, sim, execution, jitter)
                        on, control, moved = migration_run(tmp, p, straggler, True, sim, execution, jitter)
                        gain[sim] = (off, on, off / on, control, moved)
                    print("   %-3d %-9d %-10s %-7s %10.2f %10.2f %8.3fx %8.3fx %9.3f %9.2f %9.2f %12.2f" %
                          (p, straggler, execution, "%d%%" % round(100 * jitter), gain[False][0], gain[False][1],
                           gain[False][2], gain[True][2], gain[False][2] / gain[True][2], gain[False][4] / 1e6,
                           gain[True][4] / 1e6, gain[False][3]))


QUICKSTART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "inputs", "quickstart.yaml")


def cpu_migration_run(tmp, p, straggler, enabled, steps, simulate, k):
    name = "cpu%d%s-%d" % (p, "on" if enabled else "off", k)
    out = os.path.join(tmp, name + ("-sim" if simulate else ""))
    args = [QUICKSTART, "parallel.pipeline=%d" % p, "run.steps=%d" % steps, "noise.kind=straggler",
            "noise.straggler_rank=%d" % straggler, "noise.straggler_factor=3", "cost.forward=[3.6]",
            "cost.backward_input=[3.5]", "cost.backward_weight=[2]", "migration.units=[mlp]", "migration.link=nvlink",
            "migration.max_fraction=1", "migration.enabled=%s" % ("true" if enabled else "false"),
            "run.output=" + out, "trace.enabled=false"]
    cmd = [BIN, "simulate"] + args if simulate else ["mpiexec", "-x", "OMP_NUM_THREADS", "-n", str(p),
                                                       "--oversubscribe", BIN, "run"] + args
    return after_first(summary_of(cmd, out)[0])


def cpu_migration_rows():
    steps = OPTS.steps or 30
    print("== migration on over off, cpu backend (quickstart model, zb-h1 readiness, 3x straggler, units [mlp], "
          "NVLink; %d alternating off/on pairs of %d steps, mean makespan of steps 1-%d; %d cores)" %
          (OPTS.repeat, steps, steps - 1, os.cpu_count()))
    print("   %-3s %-9s %10s %10s %9s %7s %9s %9s" % ("p", "straggler", "off ms", "on ms", "speedup", "wins",
                                                    "sim", "range"))
    with tempfile.TemporaryDirectory() as tmp:
        for p, straggler in ((2, 0), (4, 1)):
            off, on = [], []
            for k in range(OPTS.repeat):
                off.append(cpu_migration_run(tmp, p, straggler, False, steps, False, k))
                on.append(cpu_migration_run(tmp, p, straggler, True, steps, False, k))
            sim = (cpu_migration_run(tmp, p, straggler, False, steps, True, 0) /
                   cpu_migration_run(tmp, p, straggler, True, steps, True, 0))
            ratios = [a / b for a, b in zip(off, on)]
            print("   %-3d %-9d %10.2f %10.2f %8.3fx %4d/%-2d %8.3fx %.3f-%.3f" %
                  (p, straggler, sum(off) / len(off), sum(on) / len(on), sum(off) / sum(on),
                   sum(r > 1.0 for r in ratios), len(ratios), sim, min(ratios), max(ratios)))


def main():
    if OPTS.cpu_migration:
        cpu_migration_rows()
        return
    if OPTS.backfill:
        backfill_rows()
        return
    if OPTS.migration:
        migration_rows()
        return
    with tempfile.TemporaryDirectory() as tmp:
        print("== dispatch + arbitration overhead (zero-cost ops, m=256, zb-2p readiness bfw, trace on)")
        s = run(tmp, "zero1", p=1, m=256, f=0.0, comm=0.0, kind="zb-2p", execution="readiness", hint="bfw", steps=5)
        ops = 256 * 3  # F, B, W per microbatch
        print("   p=1 (no messages): %.3f ms per step for %d ops: %.2f us per op" %
              (s["makespan_ms"], ops, 1000.0 * s["makespan_ms"] / ops))
        s = run(tmp, "zero4", p=4, m=64, f=0.0, comm=0.0, kind="zb-2p", execution="readiness", hint="bfw", steps=5)
        hops = 2 * (64 + 3)  # the critical path's cross-rank hops, roughly
        print("   p=4 (4 ranks on this machine's cores): %.3f ms per step, about %.1f us per cross-rank hop" %
              (s["makespan_ms"], 1000.0 * s["makespan_ms"] / hops))

        print("\n== readiness (bfw) over strict, zb-2p (emulated, F=B=W=5 ms, comm 0.5 ms, m=2p)")
        print("   %-3s %-22s %12s %12s %10s" % ("p", "noise", "strict ms", "ready ms", "speedup"))
        for p in (4, 8):
            for noise, level in (("none", 0.0), ("gaussian", 0.1), ("gaussian", 0.2), ("straggler", 0.0)):
                label = noise if noise != "gaussian" else "gaussian %d%%" % round(level * 100)
                a = run(tmp, "s%d%s%g" % (p, noise, level), srank=1, p=p, m=2 * p, kind="zb-2p", noise=noise, level=level,
                        trace="false")
                b = run(tmp, "r%d%s%g" % (p, noise, level), srank=1, p=p, m=2 * p, kind="zb-2p", noise=noise, level=level,
                        execution="readiness", hint="bfw", trace="false")
                print("   %-3d %-22s %12.2f %12.2f %9.3fx" % (p, label, a["makespan_ms"], b["makespan_ms"],
                                                            a["makespan_ms"] / b["makespan_ms"]))

        print("\n== runtime / simulator makespan (same deck and seed)")
        for p in (4, 8):
            kw = dict(p=p, m=16, f=10.0, comm=1.0, execution="readiness", noise="gaussian", level=0.1, trace="false")
            rt = run(tmp, "agree%d" % p, **kw)
            sim = run(tmp, "agree%d" % p, simulate=True, **kw)
            print("   p=%d: runtime %.2f ms, simulator %.2f ms, ratio %.4f" %
                  (p, rt["makespan_ms"], sim["makespan_ms"], rt["makespan_ms"] / sim["makespan_ms"]))

        print("\n== trace overhead (p=4, m=16, 1f1b readiness, F=B=W=1 ms)")
        kw = dict(p=4, m=16, f=1.0, comm=0.1, execution="readiness", steps=10)
        on = run(tmp, "trace-on", trace="true", **kw)
        off = run(tmp, "trace-off", trace="false", **kw)
        print("   step with trace %.3f ms, without %.3f ms: overhead %+.2f%%" %
              (on["makespan_ms"], off["makespan_ms"], 100.0 * (on["makespan_ms"] / off["makespan_ms"] - 1)))


if __name__ == "__main__":
    main()
