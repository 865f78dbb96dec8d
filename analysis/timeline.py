#!/usr/bin/python3
"""Gantt chart of one step of a conductor trace: one row per rank, F/B/W/BW in distinct colours with the
microbatch number on each bar, idle gaps left blank, an op that gave slices away hatched and outlined, the
slices a helper computed for it (migration's HELP_* rows) on the helper's row in the colour of the owner's op,
cross-hatched, labelled with the owner's rank and linked to the owner's op by a dotted line, transfers (with
--comm) as thin bars under each row. Reads simulator and runtime traces (docs/trace.md)."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conductor_trace as ct  # noqa: E402  (first: it tells a Python without numpy or h5py in one line)
import numpy as np  # noqa: E402

COLOURS = {"F": "#4C72B0", "B": "#DD8452", "W": "#55A868", "BW": "#C44E52", "SEND": "#8C8C8C", "RECV": "#B0B0B0"}


# Hatches of compute bars: plain, an op that gave slices away (migrated), slices for another rank's op (a help).
# The bars of one hatch are one collection, drawn in this order (matplotlib takes one hatch per collection, the
# colours and edges per bar): one artist per bar took over 14 CPU minutes for the ~10^5 ops of a step of a
# 64-rank trace. So a migrated op's black outline lies over the white edge of a bar that touches it.
HATCHES = (None, "///", "xx")


def draw(trace, step, output, comm=False, dpi=120, width=None):
    """Draws step `step` of `trace` into the image file `output` (figure())."""
    fig = figure(trace, step, comm, width)
    plt = ct.pyplot()
    try:
        ct.save_figure(fig, output, dpi)
    finally:
        plt.close(fig)


def figure(trace, step, comm=False, width=None):
    """The chart of step `step` as a matplotlib figure (the caller closes it); one axes, laid out."""
    plt = ct.pyplot()
    fig_s = ct.step_figures(trace, step)
    world = trace.world_size
    ev = trace.step_events(step)
    t0 = fig_s["start_ns"]
    span = max(1, fig_s["makespan_ns"])
    unit, scale = ("ms", 1e6) if span >= 1e6 else ("us", 1e3)
    w = width or min(24.0, 8.0 + 0.08 * len(ev) / max(1, world))
    fig, ax = plt.subplots(figsize=(w, 1.0 + 0.6 * world))
    bars = _bars(trace, ev, t0, scale)
    _draw_compute(ax, bars, span / scale)
    if comm:
        _draw_comm(ax, bars)
    _draw_help_links(ax, trace, ev, t0, scale)
    ax.set_ylim(world - 0.5, -0.5)
    ax.set_yticks(range(world))
    ax.set_yticklabels(["rank %d" % r for r in range(world)])
    ax.set_xlim(0, span / scale)
    ax.set_xlabel("time since step start (%s)" % unit)
    a = trace.attrs
    # The run's name (its folder; a sweep draws one timeline.png per run, all of them trace.h5) and noise preset.
    ax.set_title("%s%s  step %d: %s, %s, %s backend, %d ranks; makespan %.3f %s, bubble %.1f%%" % (
        trace.label(), _noise_text(trace), step, a["schedule"], a["execution"], a["backend"], world,
        span / scale, unit, 100 * fig_s["bubble_ratio"]), fontsize=9)
    ax.legend(handles=_legend(trace, ev, bars, comm), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
              frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def _noise_text(trace):
    """", noise NAME" as compare.py names a run's noise (its preset, or the noise.* keys), or "" where the trace's
    deck cannot tell (a trace without one, or one compare.py would refuse: the timeline draws anyway)."""
    import compare
    try:
        return ", noise %s" % compare.describe(trace)[0]["noise"]
    except (ct.TraceError, KeyError, TypeError, ValueError):
        return ""


def _bars(trace, ev, t0, scale):
    """One bar per row of `ev` as columns: x0 and dx (time since t0 in units of `scale` ns), rank, kind (name),
    helped (the kind a HELP_* row computed slices of, else None), migrated, compute."""
    start, end = ev["start_ns"].astype(np.int64), ev["end_ns"].astype(np.int64)
    names = {int(c): trace.kind_name(c) for c in np.unique(ev["kind"])}
    kinds = [names[c] for c in ev["kind"].tolist()]
    return {"x0": (start - t0) / scale, "dx": np.maximum((end - start) / scale, 0.0),
            "rank": ev["rank"].astype(np.int64), "kind": kinds, "helped": [ct.HELP_OF.get(k) for k in kinds],
            "migrated": ev["migrated"] != 0, "microbatch": ev["microbatch"].tolist(), "peer": ev["peer"].tolist(),
            "compute": trace.compute_mask(ev)}


def _rectangles(x0, dx, y0, height):
    """Closed rectangles [(x0, y0), (x0, y1), (x1, y1), (x1, y0), (x0, y0)] as ax.broken_barh makes them, as an
    (n, 5, 2) array for a PolyCollection."""
    x1, y1 = x0 + dx, y0 + height
    return np.stack([np.stack(p, axis=-1) for p in ((x0, y0), (x0, y1), (x1, y1), (x1, y0), (x0, y0))], axis=1)


def _draw_compute(ax, bars, width):
    """Compute bars (rows rank +- 0.4) in their kind's colour, one collection per hatch (HATCHES), and the
    microbatch number (a help: r<owner>:<microbatch>) on every bar wider than 1.2% of the axis `width`."""
    from matplotlib.collections import PolyCollection
    rows = np.nonzero(bars["compute"])[0]
    helped = [bars["helped"][i] for i in rows]
    mig = bars["migrated"][rows]
    hatch = [(("xx" if h else "///") if m else None) for h, m in zip(helped, mig.tolist())]
    for style in HATCHES:
        pick = [n for n, h in enumerate(hatch) if h == style]
        if not pick:
            continue
        i = rows[pick]
        colours = [COLOURS.get(helped[n] or bars["kind"][rows[n]], "#999999") for n in pick]
        verts = _rectangles(bars["x0"][i], bars["dx"][i], bars["rank"][i] - 0.4, 0.8)
        ax.add_collection(PolyCollection(verts, facecolors=colours, hatch=style,
                                         edgecolors=["black" if m else "white" for m in mig[pick]],
                                         linewidths=[1.5 if m else 0.5 for m in mig[pick]]))
    wide = rows[bars["dx"][rows] / width > 0.012]  # room for the label
    for i in wide.tolist():
        label = ("r%d:%d" % (bars["peer"][i], bars["microbatch"][i]) if bars["helped"][i]
                 else str(bars["microbatch"][i]))
        ax.text(bars["x0"][i] + bars["dx"][i] / 2, bars["rank"][i], label, ha="center", va="center", fontsize=7,
                color="white")


def _draw_comm(ax, bars):
    """Transfers as thin bars (rank + 0.42 .. + 0.5) in their kind's colour, one collection in row order."""
    from matplotlib.collections import PolyCollection
    i = np.nonzero(~bars["compute"])[0]
    if len(i):
        verts = _rectangles(bars["x0"][i], bars["dx"][i], bars["rank"][i] + 0.42, 0.08)
        ax.add_collection(PolyCollection(verts, facecolors=[COLOURS.get(bars["kind"][n], "#999999") for n in i]))


def _draw_help_links(ax, trace, ev, t0, scale):
    """A dotted line from the middle of every help to the middle of the op it computed slices of. Both ends lie
    inside the axes, so the lines are left out of tight_layout's bounding boxes: the layout is the same, and
    measuring thousands of arrows (a 64-rank migration trace) took longer than drawing them."""
    mid = ((ev["start_ns"].astype(np.int64) + ev["end_ns"]) / 2 - t0) / scale
    rank = ev["rank"]
    for h, o in ct.help_links(trace, ev):
        if o is not None:
            ax.annotate("", xy=(mid[o], rank[o]), xytext=(mid[h], rank[h]),
                        arrowprops=dict(arrowstyle="-", linestyle=":", color="black", linewidth=0.8)
                        ).set_in_layout(False)


def _legend(trace, ev, bars, comm):
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=COLOURS[k], label=k) for k in ct.COMPUTE_KINDS
               if trace.kind_codes.get(k) is not None and (ev["kind"] == trace.kind_codes[k]).any()]
    if (bars["migrated"] & bars["compute"]).any():
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="gave slices"))
    if any(bars["helped"]):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="xx", label="slices for rN (owner)"))
    if comm:
        handles += [Patch(facecolor=COLOURS[k], label=k) for k in ("SEND", "RECV")]
    return handles


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", metavar="TRACE", help="trace.h5 (simulator or runtime)")
    p.add_argument("-o", "--output", required=True, help="output image (PNG; .svg/.pdf also work)")
    p.add_argument("--step", type=int, default=None, help="step to draw (default: the last complete step)")
    p.add_argument("--comm", action="store_true", help="also draw SEND/RECV transfers")
    p.add_argument("--dpi", type=int, default=120, help="resolution of a bitmap image (default 120)")
    args = p.parse_args(argv)
    if args.dpi <= 0:
        p.error("--dpi must be > 0 (got %d)" % args.dpi)
    ct.check_outputs([args.trace], [("-o", args.output)])
    ct.check_image_output(args.output)
    trace = ct.load(args.trace)
    ct.note_dropped(trace)
    step = ct.pick_step(trace, args.step)
    draw(trace, step, args.output, comm=args.comm, dpi=args.dpi)
    ct.say("wrote %s (step %d)\n" % (ct.printable(args.output), step))
    return 0


if __name__ == "__main__":
    ct.main_guard(main)
