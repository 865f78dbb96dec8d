#!/usr/bin/python3
"""Compares conductor runs, grouped by the sweep's axes: a Markdown table (one row per configuration, mean
+- spread over its repeats) plus a compact chart PNG (throughput, bubble ratio and speedup, one horizontal
bar per configuration with error bars, coloured by noise preset).

Configuration: runs whose names are equal up to a repeat suffix (-r<k>) and whose resolved decks (the
trace's `deck` attribute) are equal except for noise.seed, run.name and run.output are repeats of one
configuration (jobs/sweep.sbatch with SWEEP_REPEATS=N runs each combination N times with noise.seed
0..N-1, labelled <combination>-r<k>). The table shows the axes that vary: deck, schedule,
execution (with the readiness hint), noise preset, and any other deck key that differs.

Figures per run are the per-step figures stored in each trace's /steps (docs/trace.md), time-weighted over
the steps used; step 0 (warm-up) is left out unless --include-warmup. Spread = sample standard deviation
over the repeats (shown when a configuration has two or more). Speedup = baseline mean makespan / mean
makespan (> 1: faster than the baseline).

Names: by default a trace's run folder (.../NAME/trace.h5) or file name; NAME=PATH sets one explicitly.
--baseline takes a run name or a configuration label (default: the first configuration)."""
import argparse
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conductor_trace as ct  # noqa: E402

IGNORED_KEYS = ("noise.seed", "run.name", "run.output")
AXES = ("deck", "schedule", "execution", "noise")
# schedule.* and noise.* keys are shown through the axes (a schedule also derives its memory_limit).
METRICS = (("samples_per_s", "samples/s", 1.0), ("mean_makespan_ms", "makespan (ms)", 1.0),
           ("bubble_ratio", "bubble ratio (%)", 100.0), ("speedup", "speedup", 1.0))


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


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flatten(v, "%s%s." % (prefix, k)))
        return out
    return {prefix[:-1]: repr(value)}


def describe(trace):
    """(axes dict, flattened deck without the ignored keys) of a run, from its root attributes and deck."""
    import yaml
    text = trace.attrs["deck"]
    try:
        deck = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        deck = {}
    deck = deck if isinstance(deck, dict) else {}
    sources = re.findall(r"^#\s+(deck|fragment)\s+(\S+)", text, re.M)
    deck_name = next((os.path.splitext(os.path.basename(p))[0] for k, p in sources if k == "deck"), "")
    presets = [os.path.splitext(os.path.basename(p))[0] for k, p in sources if k == "fragment" and "noise" in p]
    noise = deck.get("noise") if isinstance(deck.get("noise"), dict) else {}
    kinds = noise.get("kind", ["none"])
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if presets:
        noise_name = "+".join(presets)
    elif kinds in (["none"], []) or not noise.get("level", 1):
        noise_name = "none" if kinds in (["none"], []) else "+".join(kinds)
    else:
        noise_name = "%s %g" % ("+".join(kinds), noise.get("level", 0))
    a = trace.attrs
    execution = a["execution"] + (":" + a["hint"] if a["execution"] == "readiness" else "")
    flat = {k: v for k, v in _flatten(deck).items() if k not in IGNORED_KEYS}
    return {"deck": deck_name, "schedule": a["schedule"], "execution": execution, "noise": noise_name}, flat


def run_figures(name, trace, skip):
    ids = trace.step_ids[skip:]
    if not ids:
        raise ct.TraceError("%s: only %d step(s); leaving out %d warm-up step(s) leaves none (use --include-warmup "
                            "or a run with more steps)" % (trace.path, len(trace.step_ids), skip))
    t = ct.run_totals(trace, ids)
    t["mean_makespan_ms"] = t["mean_makespan_ns"] / 1e6
    axes, flat = describe(trace)
    return {"name": name, "path": trace.path, "axes": axes, "deck": flat, **t}


def group(runs):
    """Configurations in order of first appearance: {label, axes, other, runs}."""
    groups = {}
    for r in runs:
        key = (_common_name([r["name"]]), tuple(r["axes"][a] for a in AXES), tuple(sorted(r["deck"].items())))
        groups.setdefault(key, {"axes": r["axes"], "deck": r["deck"], "runs": []})["runs"].append(r)
    out = list(groups.values())
    varying = [a for a in AXES if len({g["axes"][a] for g in out}) > 1]
    keys = sorted(set().union(*(g["deck"].keys() for g in out)))
    other = [k for k in keys if not k.startswith(("noise.", "schedule."))
             and len({g["deck"].get(k) for g in out}) > 1]
    for g in out:
        g["other"] = ", ".join("%s=%s" % (k, g["deck"].get(k, "-")) for k in other)
        g["label"] = _common_name([r["name"] for r in g["runs"]])
    return out, varying, bool(other)


def _common_name(names):
    """The runs' shared name, less a repeat suffix (-r1, #2); the first name when they differ."""
    stripped = {re.sub(r"(-r\d+|#\d+)$", "", n) for n in names}
    return stripped.pop() if len(stripped) == 1 else names[0]


def stats(groups, baseline):
    for g in groups:
        for key, _, _ in METRICS[:3]:
            vals = np.array([r[key] for r in g["runs"]], dtype=float)
            g[key] = (float(vals.mean()), float(vals.std(ddof=1)) if len(vals) > 1 else None)
        g["steps"] = sorted({r["steps"] for r in g["runs"]})
    base = _find(groups, baseline)
    base_ms = base["mean_makespan_ms"][0]
    for g in groups:
        vals = np.array([base_ms / r["mean_makespan_ms"] if r["mean_makespan_ms"] > 0 else np.nan for r in g["runs"]])
        g["speedup"] = (float(vals.mean()), float(vals.std(ddof=1)) if len(vals) > 1 else None)
    return base


def _find(groups, name):
    if name is None:
        return groups[0]
    for g in groups:
        if name == g["label"] or any(name == r["name"] for r in g["runs"]):
            return g
    names = [g["label"] for g in groups] + [r["name"] for g in groups for r in g["runs"]]
    raise ct.TraceError("baseline '%s' is not one of the runs: %s" % (name, ", ".join(names)))


def _pm(value, fmt, scale=1.0):
    mean, sd = value
    return (fmt % (mean * scale)) + ("" if sd is None else " ± " + fmt % (sd * scale))


def markdown(groups, varying, other, base, png_name, skip):
    runs = [r for g in groups for r in g["runs"]]
    fixed = [(a, groups[0]["axes"][a]) for a in AXES if a not in varying and groups[0]["axes"][a]]
    warm = "step 0 (warm-up) left out" if skip == 1 else ("first %d steps left out" % skip if skip else "all steps")
    lines = ["# Run comparison", "",
             "%d runs in %d configurations; %s; mean ± sample standard deviation over repeats; speedup vs **%s** "
             "(baseline mean makespan / mean makespan)." % (len(runs), len(groups), warm, base["label"]), ""]
    if fixed:
        lines += ["Same for every run: " + ", ".join("%s **%s**" % kv for kv in fixed) + ".", ""]
    cols = ["run"] + list(varying) + (["other"] if other else []) + [
        "repeats", "steps", "samples/s", "makespan (ms)", "bubble ratio (%)", "speedup vs %s" % base["label"]]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) - 6) + "---:|" * 6]
    for g in groups:
        cells = [g["label"]] + [g["axes"][a] for a in varying] + ([g["other"]] if other else [])
        cells += [str(len(g["runs"])), "/".join(str(s) for s in g["steps"]), _pm(g["samples_per_s"], "%.4g"),
                  _pm(g["mean_makespan_ms"], "%.4g"), _pm(g["bubble_ratio"], "%.1f", 100.0),
                  _pm(g["speedup"], "%.3f") + "x"]
        lines.append("| " + " | ".join(cells) + " |")
    if png_name:
        lines += ["", "![comparison](%s)" % png_name]
    lines += ["", "Traces:", ""] + ["- %s (%s): `%s`" % (r["name"], g["label"], r["path"]) for g in groups
                                    for r in g["runs"]]
    return "\n".join(lines) + "\n"


def chart_size(n_groups):
    """Figure size in inches: three panels side by side, one bar row per configuration."""
    return 11.0, 1.4 + 0.24 * max(2, n_groups)


def chart(groups, varying, base, path, skip, dpi=100):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(groups)
    colour_axis = "noise" if "noise" in varying else None
    palette = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
    values = sorted({g["axes"][colour_axis] for g in groups}) if colour_axis else []
    colour = {v: palette[i % len(palette)] for i, v in enumerate(values)}
    fig, axes = plt.subplots(1, 3, figsize=chart_size(n), sharey=True)
    y = np.arange(n)[::-1]
    labels = []
    for g in groups:  # the run's name, with the axes its name does not already spell (sweep labels do)
        shown = [g["axes"][a] for a in varying] + ([g["other"]] if g.get("other") else [])
        missing = [v for v in shown if v.replace(":", "-") not in g["label"]]
        labels.append(g["label"] + (" (%s)" % ", ".join(missing) if missing else ""))
    for ax, (key, title, scale) in zip(axes, [METRICS[0], METRICS[2], METRICS[3]]):
        means = [g[key][0] * scale for g in groups]
        errs = [(g[key][1] or 0.0) * scale for g in groups] if any(len(g["runs"]) > 1 for g in groups) else None
        cols = [colour.get(g["axes"][colour_axis], "#4C72B0") if colour_axis else
                ("#8C8C8C" if g is base else "#4C72B0") for g in groups]
        ax.barh(y, means, xerr=errs, color=cols, height=0.7, error_kw={"elinewidth": 0.8, "capsize": 2})
        ax.set_title(title if key != "speedup" else "speedup vs %s" % _short(base["label"]), fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", linewidth=0.3)
        if key == "speedup":
            ax.axvline(1.0, color="black", linewidth=0.8)
    axes[0].set_yticks(y)
    axes[0].set_yticklabels([_short(s) for s in labels], fontsize=7)
    if colour_axis:
        from matplotlib.patches import Patch
        fig.legend([Patch(color=colour[v]) for v in values], values, title="noise", fontsize=7, title_fontsize=8,
                   loc="upper right", ncol=min(len(values), 6), frameon=False)
    runs = sum(len(g["runs"]) for g in groups)
    reps = sorted({len(g["runs"]) for g in groups})
    fig.suptitle("%d runs, %d configurations, %s repeat(s)%s" %
                 (runs, n, "/".join(map(str, reps)), "; step 0 left out" if skip else ""),
                 fontsize=9, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97 if n > 6 else 0.92))
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def _short(s, width=56):
    return s if len(s) <= width else s[: width - 1] + "…"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", metavar="[NAME=]TRACE", help="trace.h5 files to compare")
    p.add_argument("-o", "--output", required=True, help="Markdown report to write")
    p.add_argument("--png", help="chart to write (default: the report's path with .png)")
    p.add_argument("--baseline", metavar="NAME", help="run or configuration speedups are relative to "
                   "(default: the first)")
    p.add_argument("--include-warmup", action="store_true", help="use step 0 too (left out by default)")
    p.add_argument("--skip", type=int, help="leave out the first N steps of every run (default 1, 0 with "
                   "--include-warmup)")
    args = p.parse_args(argv)
    skip = args.skip if args.skip is not None else (0 if args.include_warmup else 1)
    if skip < 0:
        p.error("--skip must be >= 0")
    runs = [run_figures(name, trace, skip) for name, trace in parse_runs(args.traces)]
    groups, varying, other = group(runs)
    base = stats(groups, args.baseline)
    png = args.png or os.path.splitext(args.output)[0] + ".png"
    chart(groups, varying, base, png, skip)
    rel = os.path.relpath(png, os.path.dirname(os.path.abspath(args.output)))
    text = markdown(groups, varying, other, base, rel, skip)
    with open(args.output, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    ct.main_guard(main)
