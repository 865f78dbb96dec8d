#!/usr/bin/python3
"""Bubble analysis of conductor traces: bubble ratio per rank, per step and overall, both the global one
(1 - busy / (ranks x makespan)) and the Zero Bubble paper's per-stage one (1 - busy / the rank's own span,
averaged over ranks), the overall figures being the mean of the per-step values (as summary.json has them);
idle time split into warm-up / steady state / cool-down and into waiting-for-data-or-memory / ready-but-not-picked; the
critical path of a step; with migration, per rank the time it spent on slices of other ranks' ops (helped) and
the time other ranks spent on slices of its own ops (recovered: the work migration took off it, measured on the
helpers).
Figures are recomputed from /events and checked against the per-step figures stored in /steps.
Definitions: docs/trace.md. Output: a text table (default), --csv or --json."""
import argparse
import csv
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conductor_trace as ct  # noqa: E402

TOLERANCE = 1e-9  # stored and recomputed bubble ratios are the same formula on the same integers


def analyze(trace, step_for_path=None):
    ct.require_steps(trace)
    world = trace.world_size
    per_step, rank_tot = [], [dict(rank=r, busy_ns=0, idle_ns=0, span_ns=0, warmup_ns=0, steady_ns=0, cooldown_ns=0,
                                   waiting_ns=0, not_picked_ns=0, helped_ns=0, recovered_ns=0) for r in range(world)]
    total_span = 0
    ran = [False] * world  # whether the rank ran a compute op in some step
    mismatches = []
    for row in trace.steps:
        step = int(row["step"])
        fig = ct.step_figures(trace, step)
        split = ct.idle_split(trace, step, fig)
        helped, recovered = ct.migration_split(trace, trace.step_events(step))
        stored = float(row["bubble_ratio"])
        stored_stage = ct.stored_stage_bubble(trace, row)  # None: a trace older than the column
        agrees = bool(abs(stored - fig["bubble_ratio"]) <= TOLERANCE and int(row["makespan_ns"]) == fig["makespan_ns"]
                      and (stored_stage is None or abs(stored_stage - fig["stage_bubble_ratio"]) <= TOLERANCE))
        if not agrees:
            mismatches.append(step)
        s = {"step": step, "makespan_ns": fig["makespan_ns"], "bubble_ratio": fig["bubble_ratio"],
             "stored_bubble_ratio": stored, "stage_bubble_ratio": fig["stage_bubble_ratio"],
             "stored_stage_bubble_ratio": stored_stage, "stored_makespan_ns": int(row["makespan_ns"]), "agrees": agrees,
             "lower_bound_ns": fig["lower_bound_ns"], "samples_per_s": float(row["samples_per_s"]),
             "loss": float(row["loss"]), "ranks": []}
        for d in split:
            d = dict(d)
            d["helped_ns"], d["recovered_ns"] = int(helped[d["rank"]]), int(recovered[d["rank"]])
            d["bubble_ratio"] = d["idle_ns"] / fig["makespan_ns"] if fig["makespan_ns"] > 0 else 0.0
            span = int(fig["span_ns"][d["rank"]])
            d["stage_bubble_ratio"] = ct.stage_bubble_ratio([d["busy_ns"]], [span]) if span >= 0 else None
            s["ranks"].append(d)
            t = rank_tot[d["rank"]]
            t["span_ns"] += max(span, 0)
            ran[d["rank"]] |= span >= 0
            for k in ("busy_ns", "idle_ns", "warmup_ns", "steady_ns", "cooldown_ns", "waiting_ns", "not_picked_ns",
                      "helped_ns", "recovered_ns"):
                t[k] += d[k]
        for k in ("idle_ns", "warmup_ns", "steady_ns", "cooldown_ns", "waiting_ns", "not_picked_ns", "helped_ns",
                  "recovered_ns"):
            s[k] = sum(d[k] for d in s["ranks"])
        per_step.append(s)
        total_span += fig["makespan_ns"]
    for t in rank_tot:
        t["bubble_ratio"] = t["idle_ns"] / total_span if total_span > 0 else 0.0
    for t in rank_tot:
        # Over all steps: idle within the rank's own spans over the sum of those spans; None (as per step) for a
        # rank that ran no compute op in any step.
        t["stage_bubble_ratio"] = ((1.0 - t["busy_ns"] / t["span_ns"] if t["span_ns"] > 0 else 0.0)
                                   if ran[t["rank"]] else None)
    overall = {k: sum(t[k] for t in rank_tot) for k in ("busy_ns", "idle_ns", "warmup_ns", "steady_ns",
                                                         "cooldown_ns", "waiting_ns", "not_picked_ns", "helped_ns",
                                                         "recovered_ns")}
    # Both bubble ratios: the mean over steps of the per-step values (as summary.json reports them, docs/trace.md);
    # time_weighted_bubble_ratio: all idle time over ranks x the sum of the makespans (long steps weigh more).
    overall["bubble_ratio"] = sum(s["bubble_ratio"] for s in per_step) / max(1, len(per_step))
    overall["time_weighted_bubble_ratio"] = (overall["idle_ns"] / float(world * total_span) if total_span > 0
                                             else 0.0)
    overall["stage_bubble_ratio"] = sum(s["stage_bubble_ratio"] for s in per_step) / max(1, len(per_step))
    overall["steps"] = len(per_step)
    overall["total_makespan_ns"] = total_span
    step = ct.pick_step(trace, step_for_path)
    return {"trace": trace.shown, "label": trace.label(),
            "info": {k: trace.attrs[k] for k in ("schedule", "execution", "hint", "backend", "source",
                                                  "world_size", "pipeline", "microbatches", "virtual")},
            "overall": overall, "per_rank": rank_tot, "per_step": per_step,
            "stored_mismatch_steps": mismatches, "critical_path": ct.critical_path(trace, step)}


UNIT = ["ms", 1e6]  # set per trace by print_table: ms, or us for sub-10 ms steps


def ms(ns):
    return "%.3f" % (ns / UNIT[1])


def pct(x):
    return "-" if x is None else "%.1f%%" % (100.0 * x)


def print_table(res, out):
    info, o = res["info"], res["overall"]
    UNIT[:] = ["ms", 1e6] if o["total_makespan_ns"] / max(1, o["steps"]) >= 1e7 else ["us", 1e3]
    out.write("== %s  (%s, %s, %s, %s ranks, %d steps)\n" % (res["trace"], info["schedule"], info["execution"],
                                                            info["backend"], info["world_size"], o["steps"]))
    idle = o["idle_ns"] or 1
    out.write("overall bubble ratio %s (per-stage, Zero Bubble paper: %s; both the mean over steps); idle: "
              "warm-up %s, steady %s, cool-down %s; waiting for data or memory %s, ready but not picked %s\n" % (
                  pct(o["bubble_ratio"]), pct(o["stage_bubble_ratio"]), pct(o["warmup_ns"] / idle),
                                             pct(o["steady_ns"] / idle), pct(o["cooldown_ns"] / idle),
                                             pct(o["waiting_ns"] / idle), pct(o["not_picked_ns"] / idle)))
    if o["steps"] > 1:
        out.write("time-weighted bubble ratio %s (all idle time / (ranks x the sum of the step makespans))\n" %
                  pct(o["time_weighted_bubble_ratio"]))
    u = UNIT[0]
    out.write("\nper step (times in %s):\n%6s %12s %8s %8s %8s %11s %10s %10s %10s %10s %10s\n" % (
        u, "step", "makespan", "bubble", "stored", "stage", "lower_bnd", "warm-up", "steady", "cool-down", "waiting",
        "not-picked"))
    for s in res["per_step"]:
        out.write("%6d %12s %8s %8s %8s %11s %10s %10s %10s %10s %10s%s\n" % (
            s["step"], ms(s["makespan_ns"]), pct(s["bubble_ratio"]), pct(s["stored_bubble_ratio"]),
            pct(s["stage_bubble_ratio"]),
            ms(s["lower_bound_ns"]), ms(s["warmup_ns"]), ms(s["steady_ns"]), ms(s["cooldown_ns"]),
            ms(s["waiting_ns"]), ms(s["not_picked_ns"]), "" if s["agrees"] else "  MISMATCH with /steps"))
    migration = o["helped_ns"] > 0
    out.write("\nper rank, all steps (times in %s):\n%6s %10s %10s %8s %8s %10s %10s %10s %10s %10s%s\n" % (
        u, "rank", "busy", "idle", "bubble", "stage", "warm-up", "steady", "cool-down", "waiting", "not-picked",
        " %10s %10s" % ("helped", "recovered") if migration else ""))
    for t in res["per_rank"]:
        out.write("%6d %10s %10s %8s %8s %10s %10s %10s %10s %10s%s\n" % (
            t["rank"], ms(t["busy_ns"]), ms(t["idle_ns"]), pct(t["bubble_ratio"]), pct(t["stage_bubble_ratio"]),
            ms(t["warmup_ns"]), ms(t["steady_ns"]), ms(t["cooldown_ns"]), ms(t["waiting_ns"]), ms(t["not_picked_ns"]),
            " %10s %10s" % (ms(t["helped_ns"]), ms(t["recovered_ns"])) if migration else ""))
    if migration:
        out.write("helped: time on slices of other ranks' ops (HELP_* rows); recovered: time other ranks spent on "
                  "slices of this rank's ops (migration)\n")
    cp = res["critical_path"]
    length = cp["length_ns"] or 1
    out.write("\ncritical path of step %d: %s %s = compute %s + transfer %s + slack %s\n  " % (
        cp["step"], ms(cp["length_ns"]), u, pct(cp["compute_ns"] / length), pct(cp["transfer_ns"] / length),
        pct(cp["slack_ns"] / length)))
    out.write(" -> ".join("r%d:%s%d" % (op["rank"], op["kind"], op["microbatch"]) for op in cp["ops"]) + "\n\n")


IDLE_FIELDS = ("warmup_ns", "steady_ns", "cooldown_ns", "waiting_ns", "not_picked_ns")
MIGRATION_FIELDS = ("helped_ns", "recovered_ns")
ROW_FIELDS = IDLE_FIELDS + MIGRATION_FIELDS
CSV_FIELDS = ("trace", "step", "rank", "makespan_ns", "busy_ns", "idle_ns", "bubble_ratio",
              "stored_bubble_ratio") + IDLE_FIELDS + ("stage_bubble_ratio", "stored_stage_bubble_ratio") + MIGRATION_FIELDS


def _blank(x):
    return "" if x is None else x


def csv_rows(res):
    o = res["overall"]
    yield dict(trace=res["trace"], step="all", rank="all", makespan_ns=o["total_makespan_ns"], busy_ns=o["busy_ns"],
               idle_ns=o["idle_ns"], bubble_ratio=o["bubble_ratio"], stored_bubble_ratio="",
               stage_bubble_ratio=o["stage_bubble_ratio"], stored_stage_bubble_ratio="", **{k: o[k] for k in ROW_FIELDS})
    for t in res["per_rank"]:
        yield dict(trace=res["trace"], step="all", rank=t["rank"], makespan_ns=o["total_makespan_ns"],
                   stored_bubble_ratio="", stage_bubble_ratio=_blank(t["stage_bubble_ratio"]),
                   stored_stage_bubble_ratio="",
                   **{k: t[k] for k in ("busy_ns", "idle_ns", "bubble_ratio") + ROW_FIELDS})
    for s in res["per_step"]:
        yield dict(trace=res["trace"], step=s["step"], rank="all", makespan_ns=s["makespan_ns"],
                   busy_ns=sum(d["busy_ns"] for d in s["ranks"]), idle_ns=s["idle_ns"], bubble_ratio=s["bubble_ratio"],
                   stored_bubble_ratio=s["stored_bubble_ratio"], stage_bubble_ratio=s["stage_bubble_ratio"],
                   stored_stage_bubble_ratio=_blank(s["stored_stage_bubble_ratio"]), **{k: s[k] for k in ROW_FIELDS})
        for d in s["ranks"]:
            yield dict(trace=res["trace"], step=s["step"], rank=d["rank"], makespan_ns=s["makespan_ns"],
                       stored_bubble_ratio="", stage_bubble_ratio=_blank(d["stage_bubble_ratio"]),
                       stored_stage_bubble_ratio="", **{k: d[k] for k in ("busy_ns", "idle_ns", "bubble_ratio") + ROW_FIELDS})


def _finite(x):
    """x with every non-finite float (NaN, infinities) as None."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _json_default(x):
    import numpy as np
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x) if np.isfinite(x) else None
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(type(x).__name__)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace.h5 files (simulator or runtime)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="one CSV table: rows per (trace, step|all, rank|all)")
    fmt.add_argument("--json", action="store_true", help="everything as JSON, including the critical path ops")
    p.add_argument("--step", type=int, default=None, help="step whose critical path is shown (default: last)")
    p.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    args = p.parse_args(argv)
    ct.check_outputs(args.traces, [("-o", args.output)])

    results = []
    for path in args.traces:
        trace = ct.load(path)
        ct.note_dropped(trace)
        res = analyze(trace, args.step)
        if res["stored_mismatch_steps"]:
            ct.tell("warning: %s: recomputed figures differ from /steps at steps %s" %
                    (trace.shown, res["stored_mismatch_steps"]))
        results.append(res)

    def write(out):
        if args.json:
            # NaN (a trace without losses: the simulator, the emulated backend) is no JSON: null, as summary.json.
            json.dump(_finite({"traces": results}), out, indent=1, default=_json_default, allow_nan=False)
            out.write("\n")
        elif args.csv:
            w = csv.DictWriter(out, fieldnames=CSV_FIELDS)
            w.writeheader()
            for res in results:
                for row in csv_rows(res):
                    w.writerow(row)
        else:
            for res in results:
                print_table(res, out)

    with ct.output_file(args.output, newline="") as out:  # "-": standard output
        write(out)
    return 0


if __name__ == "__main__":
    ct.main_guard(main)
