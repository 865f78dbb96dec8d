#!/usr/bin/python3
"""Converts a conductor trace to Chrome trace-event JSON for Perfetto (ui.perfetto.dev) and
HolisticTraceAnalysis: one process per rank (pid = rank, named "rank R", with a compute thread and a comm
thread), one complete ("X") event per op with its fields as args, a "steps" process with one span per
step. The file carries distributedInfo {rank, world_size, backend}; --per-rank DIR also writes one file per
rank (rank<R>.json, each with its own distributedInfo.rank), the layout HolisticTraceAnalysis expects."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conductor_trace as ct  # noqa: E402

TID_COMPUTE, TID_COMM = 0, 1


def convert(trace):
    """Returns (events, origin_ns): Chrome trace events for every rank plus the steps process."""
    ev = trace.events
    origin = int(ev["start_ns"].min()) if len(ev) else 0
    world = trace.world_size
    out = []
    for r in range(world):
        host = trace.attrs["hostnames"][r] if r < len(trace.attrs["hostnames"]) else ""
        out.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                    "args": {"name": "rank %d" % r + (" (%s)" % host if host else "")}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
        out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": TID_COMPUTE, "args": {"name": "compute"}})
        out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": TID_COMM, "args": {"name": "comm"}})
    compute = trace.compute_mask()
    for i in range(len(ev)):
        kind = trace.kind_name(ev["kind"][i])
        start, end = int(ev["start_ns"][i]), int(ev["end_ns"][i])
        args = {"step": int(ev["step"][i]), "stage": int(ev["stage"][i]), "chunk": int(ev["chunk"][i]),
                "microbatch": int(ev["microbatch"][i]), "ready_ns": int(ev["ready_ns"][i]),
                "wait_ns": int(ev["wait_ns"][i]), "bytes": int(ev["bytes"][i])}
        if compute[i]:
            args["migrated"] = int(ev["migrated"][i])
            name = "%s%d" % (kind, args["microbatch"])
        else:
            args["peer"] = int(ev["peer"][i])
            name = "%s %s r%d" % (kind, "to" if kind == "SEND" else "from", args["peer"])
        out.append({"ph": "X", "name": name, "cat": "compute" if compute[i] else "comm", "pid": int(ev["rank"][i]),
                    "tid": TID_COMPUTE if compute[i] else TID_COMM, "ts": (start - origin) / 1e3,
                    "dur": max(0, end - start) / 1e3, "args": args})
    steps_pid = world
    out.append({"ph": "M", "name": "process_name", "pid": steps_pid, "tid": 0, "args": {"name": "steps"}})
    out.append({"ph": "M", "name": "process_sort_index", "pid": steps_pid, "tid": 0, "args": {"sort_index": -1}})
    for row in trace.steps:
        start = int(row["start_ns"])
        out.append({"ph": "X", "name": "step %d" % int(row["step"]), "cat": "step", "pid": steps_pid, "tid": 0,
                    "ts": (start - origin) / 1e3, "dur": int(row["makespan_ns"]) / 1e3,
                    "args": {"makespan_ns": int(row["makespan_ns"]), "bubble_ratio": float(row["bubble_ratio"]),
                             "samples_per_s": float(row["samples_per_s"]),
                             "loss": None if row["loss"] != row["loss"] else float(row["loss"])}})
    return out, origin


def document(trace, events, origin, rank):
    a = trace.attrs
    return {"schemaVersion": 1, "displayTimeUnit": "ns",
            "distributedInfo": {"rank": rank, "world_size": trace.world_size, "backend": a["backend"]},
            "otherData": {"source": a["source"], "schedule": a["schedule"], "execution": a["execution"],
                          "hint": a["hint"], "git_revision": a["git_revision"], "origin_ns": origin,
                          "trace": os.path.abspath(trace.path)},
            "traceEvents": events}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", metavar="TRACE", help="trace.h5 (simulator or runtime)")
    p.add_argument("-o", "--output", required=True, help="output JSON (all ranks; distributedInfo.rank = 0)")
    p.add_argument("--per-rank", metavar="DIR", help="also write DIR/rank<R>.json, one per rank")
    args = p.parse_args(argv)
    trace = ct.load(args.trace)
    ct.note_dropped(trace)
    ct.require_steps(trace)
    events, origin = convert(trace)
    with open(args.output, "w") as f:
        json.dump(document(trace, events, origin, 0), f)
    n = sum(1 for e in events if e["ph"] == "X" and e["cat"] != "step")
    print("wrote %s: %d events, %d ranks, %d steps" % (args.output, n, trace.world_size, len(trace.steps)))
    if args.per_rank:
        os.makedirs(args.per_rank, exist_ok=True)
        for r in range(trace.world_size):
            mine = [e for e in events if e["pid"] == r]
            with open(os.path.join(args.per_rank, "rank%d.json" % r), "w") as f:
                json.dump(document(trace, mine, origin, r), f)
        print("wrote %s/rank0..%d.json" % (args.per_rank, trace.world_size - 1))
    return 0


if __name__ == "__main__":
    ct.main_guard(main)
