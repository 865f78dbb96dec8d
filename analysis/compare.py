#!/usr/bin/python3
"""Compares conductor runs, grouped by the sweep's axes: a Markdown table (one row per configuration, mean
+- spread over its repeats) plus a compact chart PNG (throughput, bubble ratio and speedup, one horizontal
bar per configuration with error bars, coloured by noise preset).

Configuration: runs whose names are equal up to a repeat suffix (-r<k>) and whose resolved decks (the
trace's `deck` attribute) are equal except for noise.seed, run.name, run.output, run.overwrite, run.log_every,
run.memory_limit_gb and checkpoint.path/resume are repeats of one
configuration (jobs/sweep.sbatch with SWEEP_REPEATS=N runs each combination N times with noise.seed
0..N-1, labelled <combination>-r<k>). The table shows the axes that vary: deck, schedule,
execution (with the readiness hint), noise preset (with the noise.* overrides given on the command line), and
in "other" any other deck key that differs (values as in YAML; a schedule.* or noise.* key only where the
schedule or noise column does not already tell it apart).

Figures per run are the per-step figures stored in each trace's /steps (docs/trace.md) over the steps used:
mean makespan, throughput = samples / total makespan, bubble ratio = mean of the per-step values (as
summary.json and bubbles.py); step 0 (warm-up) is left out unless --include-warmup. Spread = sample standard
deviation over the repeats (shown when a configuration has two or more). Speedup = baseline mean makespan / mean
makespan (> 1: faster than the baseline); n/a where a mean makespan is 0. A trace given twice is refused.

Names: by default a trace's run folder (.../NAME/trace.h5) or file name (NAME#2, ... where two are alike);
NAME=PATH sets one explicitly, each NAME for one run only.
--baseline takes a run name or a configuration label (default: the first configuration)."""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conductor_trace as ct  # noqa: E402  (first: it tells a Python without numpy or h5py in one line)
import numpy as np  # noqa: E402

# Keys that do not change what a run measures: where it writes, how often it logs, its memory guard, its seed.
IGNORED_KEYS = ("noise.seed", "run.name", "run.output", "run.overwrite", "run.log_every", "run.memory_limit_gb",
                "checkpoint.path", "checkpoint.resume")
# "source": a measured run and a simulation of the same deck are two configurations, never repeats of one.
AXES = ("deck", "schedule", "execution", "noise", "source")
# Deck keys an axis shows; other schedule.* and noise.* keys are shown in "other" where they differ, unless the
# schedule or noise axis already tells them apart (a schedule derives its memory_limit, a preset its noise.*).
AXIS_KEYS = ("schedule.kind", "schedule.execution", "schedule.hint")
AXIS_OF = {"schedule.": ("schedule", "execution"), "noise.": ("noise",)}
METRICS = (("samples_per_s", "samples/s", 1.0), ("mean_makespan_ms", "makespan (ms)", 1.0),
           ("bubble_ratio", "bubble ratio (%)", 100.0), ("speedup", "speedup", 1.0))


def split_spec(spec):
    """(name or None, path) of a [NAME=]TRACE argument."""
    if "=" in spec and not os.path.exists(spec):
        name, path = spec.split("=", 1)
        return name, path
    return None, spec


def check_distinct(paths):
    """Refuses (TraceError) a trace given twice: it would count as two repeats."""
    for i, path in enumerate(paths):
        for other in paths[:i]:
            if ct.same_file(path, other):
                raise ct.TraceError("%s: given twice (also as %s); pass each run once" % (path, other))


def parse_specs(specs):
    """[(name or None, path)] of the [NAME=]TRACE arguments. Refused (TraceError): nothing before or after the
    '=', and a NAME given to two runs (--baseline NAME, and the table's rows, could not tell them apart)."""
    out = []
    for spec in specs:
        name, path = split_spec(spec)
        if name is not None and not path:
            raise ct.TraceError("'%s': no trace after the '=' (NAME=TRACE: the run's name, then its trace.h5)" % spec)
        if name == "":
            raise ct.TraceError("'%s': no name before the '=' (NAME=TRACE: the run's name, then its trace.h5)" % spec)
        for other, (other_name, _) in zip(specs, out):
            if name is not None and name == other_name:
                raise ct.TraceError("name '%s' is given to two runs (%s and %s); give each run its own NAME" %
                                    (name, other, spec))
        out.append((name, path))
    return out


def parse_runs(specs):
    specs = parse_specs(specs)
    runs = []
    check_distinct([path for _, path in specs])
    for name, path in specs:
        trace = ct.load(path)
        ct.note_dropped(trace)
        ct.require_steps(trace)
        runs.append([trace.label() if name is None else ct.printable(name), trace, name is not None])
    named = {run[0]: run for run in runs if run[2]}
    seen = set(named)
    for run in runs:  # names from the traces (their run folders) made unique: NAME, NAME#2, ...
        if run[2]:
            continue
        if run[0] in named:  # a name the user gave another run
            raise ct.TraceError("name '%s' is given to two runs (%s=%s, and %s by its %s); give each run its own "
                                "NAME" % (run[0], run[0], named[run[0]][1].path, run[1].path,
                                          "run folder" if os.path.basename(run[1].path) == "trace.h5"
                                          else "file name"))
        n, k = run[0], 1
        while run[0] in seen:
            k += 1
            run[0] = "%s#%d" % (n, k)
        seen.add(run[0])
    return [run[:2] for run in runs]


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flatten(v, "%s%s." % (prefix, k)))
        return out
    return {prefix[:-1]: _yaml(value)}


def _yaml(value):
    """A deck value as YAML flow text: true/false, null, [a, b], {k: v}."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[%s]" % ", ".join(_yaml(v) for v in value)
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s: %s" % (k, _yaml(v)) for k, v in value.items())
    return str(value)


def parse_deck(trace):
    """The trace's resolved deck (root attribute `deck`) as a dict ({} for an empty one); a deck that is not YAML, or
    not a mapping, is refused (TraceError naming the attribute): the configurations are told apart by their decks."""
    import yaml
    try:
        deck = yaml.safe_load(trace.attrs["deck"])
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        at = " at line %d, column %d" % (mark.line + 1, mark.column + 1) if mark is not None else ""
        raise ct.TraceError("%s: root attribute 'deck' is not valid YAML (%s%s); compare.py groups runs by their "
                            "resolved decks" % (trace.path, problem, at)) from None
    if deck is None:
        return {}
    if not isinstance(deck, dict):
        raise ct.TraceError("%s: root attribute 'deck' is YAML but not a mapping of deck keys (a %s); compare.py "
                            "groups runs by their resolved decks" % (trace.path, type(deck).__name__))
    return deck


def describe(trace):
    """(axes dict, flattened deck without the ignored keys) of a run, from its root attributes and deck."""
    text = trace.attrs["deck"]
    deck = parse_deck(trace)
    sources = re.findall(r"^#\s+(deck|fragment)\s+(\S+)", text, re.M)
    deck_name = next((os.path.splitext(os.path.basename(p))[0] for k, p in sources if k == "deck"), "")
    presets = [os.path.splitext(os.path.basename(p))[0] for k, p in sources if k == "fragment" and "noise" in p]
    noise = deck.get("noise") if isinstance(deck.get("noise"), dict) else {}
    kinds = noise.get("kind", ["none"])
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if presets:
        # The preset's name, with the noise.* overrides given after it (they change what the preset set).
        overrides = [(k, v.strip()) for k, v in re.findall(r"^#\s+override\s+noise\.([^=\s]+)=(.*)$", text, re.M)
                     if k != "seed"]
        noise_name = " ".join(["+".join(presets)] + ["%s=%s" % kv for kv in overrides])
    elif kinds in (["none"], []) or not noise.get("level", 1):
        noise_name = "none" if kinds in (["none"], []) else "+".join(kinds)
    else:
        noise_name = "%s %g" % ("+".join(kinds), noise.get("level", 0))
    a = trace.attrs
    execution = a["execution"] + (":" + a["hint"] if a["execution"] == "readiness" else "")
    source = "simulator" if a["source"] == "simulator" else "measured (%s)" % a["backend"]
    flat = {k: v for k, v in _flatten(deck).items() if k not in IGNORED_KEYS}
    return {"deck": deck_name, "schedule": a["schedule"], "execution": execution, "noise": noise_name,
            "source": source}, flat


def run_figures(name, trace, skip):
    ids = trace.step_ids[skip:]
    if not ids:
        raise ct.TraceError("%s: only %d step(s); leaving out %d warm-up step(s) leaves none (use --include-warmup "
                            "or a run with more steps)" % (trace.path, len(trace.step_ids), skip))
    t = ct.run_totals(trace, ids)
    t["mean_makespan_ms"] = t["mean_makespan_ns"] / 1e6
    axes, flat = describe(trace)
    return {"name": name, "path": trace.shown, "axes": axes, "deck": flat, **t}


def group(runs):
    """Configurations in order of first appearance: {label, axes, other, runs}."""
    groups = {}
    for r in runs:
        key = (_common_name([r["name"]]), tuple(r["axes"][a] for a in AXES), tuple(sorted(r["deck"].items())))
        groups.setdefault(key, {"axes": r["axes"], "deck": r["deck"], "runs": []})["runs"].append(r)
    out = list(groups.values())
    varying = [a for a in AXES if len({g["axes"][a] for g in out}) > 1]
    keys = sorted(set().union(*(g["deck"].keys() for g in out)))
    other = [k for k in keys if k not in AXIS_KEYS and len({g["deck"].get(k) for g in out}) > 1
             and not _told_apart(out, k)]
    for g in out:
        g["other"] = ", ".join("%s=%s" % (k, g["deck"].get(k, "-")) for k in other)
        g["label"] = _common_name([r["name"] for r in g["runs"]])
    return out, varying, bool(other)


def _told_apart(groups, key):
    """Whether a schedule.* or noise.* key's value follows from the axis that shows it (one value per axis value)."""
    axes = next((a for prefix, a in AXIS_OF.items() if key.startswith(prefix)), None)
    if axes is None:
        return False
    seen = {}
    for g in groups:
        if seen.setdefault(tuple(g["axes"][a] for a in axes), g["deck"].get(key)) != g["deck"].get(key):
            return False
    return len(seen) > 1


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
        if base_ms > 0 and all(r["mean_makespan_ms"] > 0 for r in g["runs"]):
            vals = np.array([base_ms / r["mean_makespan_ms"] for r in g["runs"]])
            g["speedup"] = (float(vals.mean()), float(vals.std(ddof=1)) if len(vals) > 1 else None)
        else:  # undefined: a mean makespan of 0 (all-zero costs)
            g["speedup"] = (None, None)
    return base


def _find(groups, name):
    if name is None:
        return groups[0]
    for g in groups:
        if name == g["label"] or any(name == r["name"] for r in g["runs"]):
            return g
    names = []  # a run's label is its name when it has no repeats: each once, in order
    for n in [g["label"] for g in groups] + [r["name"] for g in groups for r in g["runs"]]:
        if n not in names:
            names.append(n)
    raise ct.TraceError("baseline '%s' is not one of the runs: %s" % (name, ", ".join(names)))


def _pm(value, fmt, scale=1.0, suffix=""):
    mean, sd = value
    if mean is None:
        return "n/a"
    return (fmt % (mean * scale)) + ("" if sd is None else " ± " + fmt % (sd * scale)) + suffix


def skipped(skip):
    """The steps left out, as the report and the chart's title say it (skip > 0)."""
    return "step 0 (warm-up) left out" if skip == 1 else "first %d steps left out" % skip


def markdown(groups, varying, other, base, png_name, skip):
    runs = [r for g in groups for r in g["runs"]]
    fixed = [(a, groups[0]["axes"][a]) for a in AXES if a not in varying and groups[0]["axes"][a]]
    warm = skipped(skip) if skip else "all steps"
    lines = ["# Run comparison", "",
             "%d runs in %d configurations; %s; mean ± sample standard deviation over repeats; speedup vs **%s** "
             "(baseline mean makespan / mean makespan)." % (len(runs), len(groups), warm, base["label"]), ""]
    if fixed:
        lines += ["Same for every run: " + ", ".join("%s **%s**" % kv for kv in fixed) + ".", ""]
    cols = ["run"] + list(varying) + (["other"] if other else []) + [
        "repeats", "steps", "samples/s", "makespan (ms)", "bubble ratio (%)", "speedup vs %s" % base["label"]]
    lines += ["| " + " | ".join(_cell(c) for c in cols) + " |", "|" + "---|" * (len(cols) - 6) + "---:|" * 6]
    for g in groups:
        cells = [g["label"]] + [g["axes"][a] for a in varying] + ([g["other"]] if other else [])
        cells += [str(len(g["runs"])), "/".join(str(s) for s in g["steps"]), _pm(g["samples_per_s"], "%.4g"),
                  _pm(g["mean_makespan_ms"], "%.4g"), _pm(g["bubble_ratio"], "%.1f", 100.0),
                  _pm(g["speedup"], "%.3f", suffix="x")]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    if png_name:
        lines += ["", "![comparison](%s)" % _link(png_name)]
    lines += ["", "Traces:", ""] + ["- %s (%s): `%s`" % (r["name"], g["label"], r["path"]) for g in groups
                                    for r in g["runs"]]
    return "\n".join(lines) + "\n"


def _cell(text):
    """A Markdown table cell: a '|' in a run's name or a value would end the cell."""
    return str(text).replace("|", "\\|")


def _link(path):
    """A Markdown link destination: in angle brackets where it holds a blank or a bracket (CommonMark ends a bare
    one at a blank)."""
    if not re.search(r"[\s()<>]", path):
        return path
    return "<" + path.replace("<", "\\<").replace(">", "\\>") + ">"


def chart_size(n_groups):
    """Figure size in inches: three panels side by side, one bar row per configuration."""
    return 11.0, 1.4 + 0.24 * max(2, n_groups)


def chart(groups, varying, base, path, skip, dpi=100, outs=None):
    """Draws the chart into image file `path` (in OutputSet `outs` when given: renamed into place with the report)."""
    plt = ct.pyplot()
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
        means = [(g[key][0] or 0.0) * scale for g in groups]  # None: undefined (n/a), no bar
        errs = [(g[key][1] or 0.0) * scale for g in groups] if any(len(g["runs"]) > 1 for g in groups) else None
        cols = [colour.get(g["axes"][colour_axis], "#4C72B0") if colour_axis else
                ("#8C8C8C" if g is base else "#4C72B0") for g in groups]
        ax.barh(y, means, xerr=errs, color=cols, height=0.7, error_kw={"elinewidth": 0.8, "capsize": 2})
        ax.set_title(title if key != "speedup" else "speedup vs %s" % _short(base["label"]), fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", linewidth=0.3)
        if key == "speedup":
            ax.axvline(1.0, color="black", linewidth=0.8)
            for yi, g in zip(y, groups):
                if g[key][0] is None:
                    ax.text(0, yi, " n/a", va="center", fontsize=7)
    axes[0].set_yticks(y)
    axes[0].set_yticklabels([_short(s) for s in labels], fontsize=7)
    if colour_axis:
        from matplotlib.patches import Patch
        fig.legend([Patch(color=colour[v]) for v in values], values, title="noise", fontsize=7, title_fontsize=8,
                   loc="upper right", ncol=min(len(values), 6), frameon=False)
    runs = sum(len(g["runs"]) for g in groups)
    reps = sorted({len(g["runs"]) for g in groups})
    fig.suptitle("%d runs, %d configurations, %s repeat(s)%s" %
                 (runs, n, "/".join(map(str, reps)), "; " + skipped(skip) if skip else ""),
                 fontsize=9, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97 if n > 6 else 0.92))
    try:
        ct.save_figure(fig, path, dpi, outs)
    finally:
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
    if args.output == "-" and not args.png:  # the chart's default name came out as ./-.png
        p.error("-o - writes the report to standard output; name the chart with --png FILE")
    if not args.png and os.path.exists(args.output) and not os.path.isfile(args.output) and \
            not os.path.isdir(args.output):  # a device or a pipe: the chart's default name made /dev/null.png
        p.error("-o %s is not a regular file (a device or a pipe), so the chart has no name beside it; name the chart "
                "with --png FILE" % ct.printable(args.output))
    png = args.png or os.path.splitext(args.output)[0] + ".png"
    chart_what = "--png" if args.png else "the chart (default: -o's path with .png; set --png)"
    ct.check_outputs([path for _, path in parse_specs(args.traces)], [("-o", args.output), (chart_what, png)])
    ct.check_output_folder(args.output)  # the report is written after the chart: its folder is told first
    if args.png:
        ct.check_image_output(png, "--png")
    runs = [run_figures(name, trace, skip) for name, trace in parse_runs(args.traces)]
    groups, varying, other = group(runs)
    base = stats(groups, args.baseline)
    rel = ct.printable(os.path.relpath(png, os.path.dirname(os.path.abspath(args.output))))
    text = markdown(groups, varying, other, base, rel, skip)
    with ct.output_files() as outs:  # the chart and the report replace earlier ones together, or neither does
        chart(groups, varying, base, png, skip, outs=outs)
        outs.open(args.output).write(text)
    if args.output != "-":  # the report went to standard output already
        ct.say(text)
    return 0


if __name__ == "__main__":
    ct.main_guard(main)
