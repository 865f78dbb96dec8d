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
import conductor_trace as ct  # noqa: E402

COLOURS = {"F": "#4C72B0", "B": "#DD8452", "W": "#55A868", "BW": "#C44E52", "SEND": "#8C8C8C", "RECV": "#B0B0B0"}


def draw(trace, step, output, comm=False, dpi=120, width=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig_s = ct.step_figures(trace, step)
    world = trace.world_size
    ev = trace.step_events(step)
    t0 = fig_s["start_ns"]
    span = max(1, fig_s["makespan_ns"])
    unit, scale = ("ms", 1e6) if span >= 1e6 else ("us", 1e3)
    w = width or min(24.0, 8.0 + 0.08 * len(ev) / max(1, world))
    fig, ax = plt.subplots(figsize=(w, 1.0 + 0.6 * world))
    compute = trace.compute_mask(ev)
    migrated_any = False

    def middle(i):
        return ((int(ev["start_ns"][i]) + int(ev["end_ns"][i])) / 2 - t0) / scale, int(ev["rank"][i])

    for i in range(len(ev)):
        kind = trace.kind_name(ev["kind"][i])
        r = int(ev["rank"][i])
        x0 = (int(ev["start_ns"][i]) - t0) / scale
        dx = max((int(ev["end_ns"][i]) - int(ev["start_ns"][i])) / scale, 0.0)
        if compute[i]:
            helped = ct.HELP_OF.get(kind)  # slices of another rank's op of this kind
            mig = bool(ev["migrated"][i])
            migrated_any |= mig
            ax.broken_barh([(x0, dx)], (r - 0.4, 0.8), facecolors=COLOURS.get(helped or kind, "#999999"),
                           edgecolors="black" if mig else "white", linewidth=1.5 if mig else 0.5,
                           hatch=("xx" if helped else "///") if mig else None)
            # microbatch number (and a help's owner), if the bar is wide enough for it
            if dx / (span / scale) > 0.012:
                label = ("r%d:%d" % (int(ev["peer"][i]), int(ev["microbatch"][i])) if helped
                         else str(int(ev["microbatch"][i])))
                ax.text(x0 + dx / 2, r, label, ha="center", va="center", fontsize=7, color="white")
        elif comm:
            ax.broken_barh([(x0, dx)], (r + 0.42, 0.08), facecolors=COLOURS.get(kind, "#999999"))
    for h, o in ct.help_links(trace, ev):  # a help and the op it computed slices of
        if o is not None:
            ax.annotate("", xy=middle(o), xytext=middle(h),
                        arrowprops=dict(arrowstyle="-", linestyle=":", color="black", linewidth=0.8))
    ax.set_ylim(world - 0.5, -0.5)
    ax.set_yticks(range(world))
    ax.set_yticklabels(["rank %d" % r for r in range(world)])
    ax.set_xlim(0, span / scale)
    ax.set_xlabel("time since step start (%s)" % unit)
    a = trace.attrs
    ax.set_title("%s  step %d: %s, %s, %s backend, %d ranks; makespan %.3f %s, bubble %.1f%%" % (
        os.path.basename(trace.path), step, a["schedule"], a["execution"], a["backend"], world,
        span / scale, unit, 100 * fig_s["bubble_ratio"]), fontsize=9)
    handles = [Patch(facecolor=COLOURS[k], label=k) for k in ct.COMPUTE_KINDS
               if trace.kind_codes.get(k) is not None and (ev["kind"] == trace.kind_codes[k]).any()]
    if migrated_any:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="gave slices"))
    if any(ct.HELP_OF.get(trace.kind_name(k)) for k in ev["kind"]):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="xx", label="slices for rN (owner)"))
    if comm:
        handles += [Patch(facecolor=COLOURS[k], label=k) for k in ("SEND", "RECV")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    try:
        ct.save_figure(fig, output, dpi)
    finally:
        plt.close(fig)


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
    print("wrote %s (step %d)" % (args.output, step))
    return 0


if __name__ == "__main__":
    ct.main_guard(main)
