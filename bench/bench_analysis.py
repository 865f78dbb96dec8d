#!/usr/bin/python3
"""Analysis tools on a large trace: seconds and peak memory (RSS) of bubbles.py, compare.py, timeline.py and
perfetto.py, side by side in this one run, on the simulator trace of a 64-rank pipeline (512 microbatches, 64
layers, 10 steps: about 2.3 million rows, 5 MB), the trace a user of a 64-GPU job hands them.

Not part of `make bench` (it takes about two minutes). Usage:
  bench/bench_analysis.py [BUILD_DIR] [--ranks P] [--microbatches M] [--steps S] [--migration] [--keep DIR]
(BUILD_DIR: where `conductor` is, default build). On a 2-core machine shared with other work (load 2 to 7):
timeline 7 to 13 s, perfetto 29 s in 0.53 GB, since timeline draws one collection per bar style and perfetto
streams its events as text; before, timeline ran over 14 CPU minutes (killed), perfetto 146 s in 4.9 GB."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
ANALYSIS = os.path.join(SOURCE, "analysis")
PY = "/usr/bin/python3"


def measure(argv):
    """(exit status, wall seconds, peak RSS in MB) of one command, its output discarded."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)  # the rusage of this child alone (ru_maxrss: KB on Linux)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace").strip()
    p.stderr.close()
    if p.returncode != 0:
        print("  %s failed (exit %d): %s" % (os.path.basename(argv[1]), p.returncode, err[-300:]), file=sys.stderr)
    return p.returncode, time.monotonic() - t0, usage.ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--microbatches", type=int, default=512)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--migration", action="store_true", help="migration on (NVLink): helps and their links too")
    ap.add_argument("--keep", metavar="DIR", help="write the trace and outputs to DIR and keep them")
    args = ap.parse_args()
    conductor = os.path.join(args.build, "conductor")
    if not os.access(conductor, os.X_OK):
        sys.exit("bench_analysis: %s is not built (make build)" % conductor)
    work = args.keep or tempfile.mkdtemp(prefix="bench_analysis_")
    os.makedirs(work, exist_ok=True)
    try:
        run = os.path.join(work, "run")
        cmd = [conductor, "simulate", os.path.join(SOURCE, "inputs", "quickstart.yaml"),
               "parallel.pipeline=%d" % args.ranks, "parallel.microbatches=%d" % args.microbatches,
               "model.n_layers=%d" % args.ranks, "run.steps=%d" % args.steps, "run.output=" + run,
               "run.overwrite=true", "trace.enabled=true"]
        if args.migration:
            cmd += ["migration.enabled=true", "migration.link=nvlink"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("bench_analysis: conductor simulate failed (exit %d): %s" % (r.returncode, r.stderr[-500:]))
        trace = os.path.join(run, "trace.h5")
        print("trace: %d ranks, %d microbatches, %d steps%s: %.1f MB" % (
            args.ranks, args.microbatches, args.steps, ", migration" if args.migration else "",
            os.path.getsize(trace) / 1e6))
        tools = [("bubbles.py", [trace, "-o", os.path.join(work, "bubbles.txt")]),
                 ("compare.py", [trace, "-o", os.path.join(work, "compare.md")]),
                 ("timeline.py", [trace, "-o", os.path.join(work, "timeline.png")]),
                 ("timeline.py --comm", [trace, "-o", os.path.join(work, "timeline_comm.png"), "--comm"]),
                 ("perfetto.py", [trace, "-o", os.path.join(work, "trace.json")])]
        print("%-20s %8s %10s" % ("tool", "seconds", "peak MB"))
        status = 0
        for name, tool_args in tools:
            code, secs, rss = measure([PY, os.path.join(ANALYSIS, name.split()[0])] + tool_args)
            status |= code != 0
            print("%-20s %8.1f %10.0f" % (name, secs, rss), flush=True)
        return status
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
