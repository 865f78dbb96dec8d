#!/usr/bin/python3
"""Compares conductor runs side by side: throughput, makespan, bubble ratio and speedup over a named
baseline, as a Markdown table plus a bar chart PNG. Figures are the per-step figures stored in each
trace's /steps (docs/trace.md), time-weighted over the steps used.

Names: by default a trace's run folder (.../NAME/trace.h5) or file name; NAME=PATH sets one explicitly.
Speedup = baseline mean makespan / run mean makespan (> 1: faster than the baseline)."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conductor_trace as ct  # noqa: E402


def parse_runs(specs):
    runs = []
    for spec in specs:
        name, path = None, spec
        if "=" in spec and not os.path.exists(spec):
            name, path = spec.split("=", 1)
        trace = ct.load(path)
        ct.note_dropped(trace)
        ct.require_steps(trace)
        runs.append([name or trace.label(), trace])
    seen = {}
    for run in runs:  # make names unique
        n = run[0]
        seen[n] = seen.get(n, 0) + 1
        if seen[n] > 1:
            run[0] = "%s#%d" % (n, seen[n])
    return runs


def summarize(runs, skip, baseline):
    rows = []
    for name, trace in runs:
        ids = trace.step_ids[skip:]
        if not ids:
            raise ct.TraceError("%s: only %d steps, --skip %d leaves none" % (trace.path, len(trace.step_ids), skip))
        t = ct.run_totals(trace, ids)
        a = trace.attrs
        rows.append({"name": name, "path": trace.path, "schedule": a["schedule"], "execution": a["execution"],
                     "backend": a["backend"], "world_size": trace.world_size, **t})
    names = [r["name"] for r in rows]
    base_name = baseline if baseline is not None else names[0]
    if base_name not in names:
        raise ct.TraceError("baseline '%s' is not one of the runs: %s" % (base_name, ", ".join(names)))
    base = rows[names.index(base_name)]
    for r in rows:
        r["speedup"] = base["mean_makespan_ns"] / r["mean_makespan_ns"] if r["mean_makespan_ns"] > 0 else float("nan")
    return rows, base_name


def markdown(rows, base_name, png_name, skip):
    lines = ["# Run comparison", "",
             "Baseline: **%s**. Per-step figures from each trace's `/steps`%s; speedup = baseline mean makespan "
             "/ run mean makespan." % (base_name, ", first %d steps skipped" % skip if skip else ""), "",
             "| run | schedule | execution | backend | ranks | steps | mean makespan (ms) | samples/s | "
             "bubble ratio | speedup vs %s |" % base_name,
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %s | %s | %s | %s | %d | %d | %.4g | %.4g | %.1f%% | %.3fx |" % (
            r["name"], r["schedule"], r["execution"], r["backend"], r["world_size"], r["steps"],
            r["mean_makespan_ns"] / 1e6, r["samples_per_s"], 100 * r["bubble_ratio"], r["speedup"]))
    if png_name:
        lines += ["", "![comparison](%s)" % png_name]
    lines += ["", "Traces:", ""] + ["- %s: `%s`" % (r["name"], r["path"]) for r in rows]
    return "\n".join(lines) + "\n"


def chart(rows, base_name, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [r["name"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(max(9, 1.2 * len(rows) * 3), 3.6))
    specs = [("samples_per_s", "throughput (samples/s)", 1.0), ("bubble_ratio", "bubble ratio (%)", 100.0),
             ("speedup", "speedup vs %s" % base_name, 1.0)]
    for ax, (key, title, scale) in zip(axes, specs):
        vals = [r[key] * scale for r in rows]
        bars = ax.bar(range(len(rows)), vals, color=["#8C8C8C" if n == base_name else "#4C72B0" for n in names])
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), "%.3g" % v, ha="center", va="bottom", fontsize=7)
        if key == "speedup":
            ax.axhline(1.0, color="black", linewidth=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", metavar="[NAME=]TRACE", help="trace.h5 files to compare")
    p.add_argument("-o", "--output", required=True, help="Markdown report to write")
    p.add_argument("--png", help="bar chart to write (default: the report's path with .png)")
    p.add_argument("--baseline", metavar="NAME", help="run every speedup is relative to (default: the first)")
    p.add_argument("--skip", type=int, default=0, help="leave out the first N steps of every run (warm-up)")
    args = p.parse_args(argv)
    if args.skip < 0:
        p.error("--skip must be >= 0")
    runs = parse_runs(args.traces)
    rows, base_name = summarize(runs, args.skip, args.baseline)
    png = args.png or os.path.splitext(args.output)[0] + ".png"
    chart(rows, base_name, png)
    rel = os.path.relpath(png, os.path.dirname(os.path.abspath(args.output)))
    text = markdown(rows, base_name, rel, args.skip)
    with open(args.output, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    ct.main_guard(main)
