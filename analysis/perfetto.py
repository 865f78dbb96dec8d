#!/usr/bin/python3
"""Converts a conductor trace to Chrome trace-event JSON for Perfetto (ui.perfetto.dev) and
HolisticTraceAnalysis (HTA). One process per rank (pid = rank, "rank R (host)") with these threads:

  host      ProfilerStep#N spans (cat user_annotation), one per step on this rank, from the rank's first
            op start to its last op end in that step; and one launch marker per op (cat cuda_runtime,
            "cudaLaunchKernel", zero duration at the op's start) carrying the op's correlation id
  stream 7  compute ops F/B/W/BW (cat kernel, args.stream 7, args.correlation, args.device = rank)
  stream 8, 9, ...  transfers SEND/RECV, then ANNOUNCE rows, on as many streams as they need (cat kernel,
            args.stream = tid; the name starts with "ncclKernel_SendRecv", the substring by which HTA
            classifies a kernel as communication, although the transport is MPI point to point). Transfers
            overlap without nesting, which a track cannot show: each row goes to the first of its rank's
            streams (of its group) that is free at its start, so the slices of every stream are disjoint

plus flow events (ph s/f, cat transfer) from every SEND to its RECV and (cat migration) from an op that gave
slices away to each helper's slices (HELP_* rows, args.owner) and back to the op's end, counter tracks per rank (ph C:
"in-flight activations", microbatches whose forward ended and whose W or BW has not; "ready ops", compute
ops ready but not started), and a "steps" process with one span per step over all ranks. The file carries
distributedInfo {rank, world_size, backend} and, when the trace records its clock's UNIX epoch,
baseTimeNanoseconds; --per-rank DIR also writes one file per rank (rank<R>.json, each with its own
distributedInfo.rank), the layout HTA's TraceAnalysis(trace_dir=DIR) loads. See docs/trace.md for which HTA
analyses apply."""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conductor_trace as ct  # noqa: E402

TID_HOST, STREAM_COMPUTE, STREAM_COMM = 0, 7, 8  # STREAM_COMM: the first transfer stream
COMM_PREFIX = "ncclKernel_SendRecv"  # hta/utils/utils.py is_comm_kernel(): "ncclKernel" in name


def _us(ns, origin):
    return (int(ns) - origin) / 1e3


def lanes(intervals):
    """Greedy interval partitioning: [lane] for [(start, end)], lane = the lowest whose previous interval ended
    by this one's start (intervals of one lane are disjoint); lanes used = the largest number overlapping."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], intervals[i][1], i))
    free_at, out = [], [0] * len(intervals)
    for i in order:
        start, end = intervals[i]
        lane = next((k for k, t in enumerate(free_at) if t <= start), len(free_at))
        if lane == len(free_at):
            free_at.append(end)
        else:
            free_at[lane] = end
        out[i] = lane
    return out


def tracks(trace):
    """(tid per row of /events, {(rank, tid): thread name}): compute ops on STREAM_COMPUTE; per rank, SEND/RECV
    on streams STREAM_COMM, STREAM_COMM + 1, ... and ANNOUNCE rows on the streams after those, each row on the
    first stream of its group free at its start (lanes())."""
    ev = trace.events
    compute = trace.compute_mask()
    tids = np.full(len(ev), STREAM_COMPUTE, dtype=np.int64)
    names = {}
    announce = trace.kind_codes.get("ANNOUNCE")
    for r in range(trace.world_size):
        names[(r, TID_HOST)] = "host"
        names[(r, STREAM_COMPUTE)] = "stream %d (compute)" % STREAM_COMPUTE
        mine = (ev["rank"] == r) & ~compute
        tid = STREAM_COMM
        is_announce = ev["kind"] == announce
        for group, label in ((mine & ~is_announce, "comm"), (mine & is_announce, "announce")):
            rows = np.nonzero(group)[0]
            starts = ev["start_ns"][rows].astype(np.int64)
            lane = lanes(list(zip(starts, np.maximum(starts, ev["end_ns"][rows].astype(np.int64)))))
            for k in range(max(lane, default=-1) + 1):
                names[(r, tid + k)] = "stream %d (%s)" % (tid + k, label)
            tids[rows] = tid + np.asarray(lane, dtype=np.int64)
            tid += max(lane, default=-1) + 1
    return tids, names


def metadata(trace, names):
    out = []
    for r in range(trace.world_size):
        host = trace.attrs["hostnames"][r] if r < len(trace.attrs["hostnames"]) else ""
        out.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                    "args": {"name": "rank %d" % r + (" (%s)" % host if host else "")}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
        for (rank, tid), name in sorted(names.items()):
            if rank == r:
                out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": tid, "args": {"name": name}})
    return out


def op_events(trace, origin, tids):
    """One kernel event and one launch marker per row of /events (on stream tids[row]); correlation ids are
    1-based row numbers."""
    ev = trace.events
    compute = trace.compute_mask()
    out = []
    for i in range(len(ev)):
        kind = trace.kind_name(ev["kind"][i])
        start, end, rank = int(ev["start_ns"][i]), int(ev["end_ns"][i]), int(ev["rank"][i])
        corr = i + 1
        args = {"step": int(ev["step"][i]), "stage": int(ev["stage"][i]), "chunk": int(ev["chunk"][i]),
                "microbatch": int(ev["microbatch"][i]), "ready_ns": int(ev["ready_ns"][i]),
                "wait_ns": int(ev["wait_ns"][i]), "bytes": int(ev["bytes"][i]), "correlation": corr,
                "device": rank, "stream": int(tids[i])}
        if compute[i]:
            args["migrated"] = int(ev["migrated"][i])
            name = "%s%d" % (kind, args["microbatch"])
            if kind in ct.HELP_OF:
                args["owner"] = int(ev["peer"][i])
                name += " for r%d" % args["owner"]
        else:
            args["peer"] = int(ev["peer"][i])
            name = "%s %s %s r%d mb%d" % (COMM_PREFIX, kind, "to" if kind == "SEND" else "from", args["peer"],
                                           args["microbatch"])
        ts = _us(start, origin)
        out.append({"ph": "X", "name": name, "cat": "kernel", "pid": rank, "tid": args["stream"], "ts": ts,
                    "dur": max(0, end - start) / 1e3, "args": args})
        out.append({"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": rank, "tid": TID_HOST,
                    "ts": ts, "dur": 0, "args": {"correlation": corr, "op": name}})
    return out


def profiler_steps(trace, origin):
    """ProfilerStep#N on every rank's host thread: [first op start, last op end] of the rank's rows of step N."""
    out = []
    for step in trace.step_ids:
        ev = trace.step_events(step)
        for r in np.unique(ev["rank"]):
            mine = ev[ev["rank"] == r]
            t0, t1 = int(mine["start_ns"].min()), int(max(mine["end_ns"].max(), mine["start_ns"].max()))
            out.append({"ph": "X", "name": "ProfilerStep#%d" % step, "cat": "user_annotation", "pid": int(r),
                        "tid": TID_HOST, "ts": _us(t0, origin), "dur": (t1 - t0) / 1e3, "args": {"step": step}})
    return out


def pair_transfers(trace):
    """[(send_row, recv_row)] for every SEND; raises TraceError for a SEND without its RECV.

    A SEND (rank = sender, peer = receiver, stage = the producing stage) matches a RECV of the same step and
    microbatch with rank and peer swapped and an adjacent stage (the consumer: stage +- 1). Among several
    candidates (interleaved chunks can send both ways between two ranks) the SENDs are taken by start time,
    each with the earliest-arriving unmatched candidate (MPI delivers in order between two ranks)."""
    ev = trace.events
    kinds = [trace.kind_name(k) for k in ev["kind"]]
    recvs = {}
    for i, k in enumerate(kinds):
        if k == "RECV":
            key = (int(ev["step"][i]), int(ev["peer"][i]), int(ev["rank"][i]), int(ev["microbatch"][i]))
            recvs.setdefault(key, []).append(i)
    for lst in recvs.values():
        lst.sort(key=lambda j: (int(ev["end_ns"][j]), j))
    sends = [i for i, k in enumerate(kinds) if k == "SEND"]
    sends.sort(key=lambda i: (int(ev["start_ns"][i]), i))
    pairs = []
    for i in sends:
        key = (int(ev["step"][i]), int(ev["rank"][i]), int(ev["peer"][i]), int(ev["microbatch"][i]))
        cands = recvs.get(key, [])
        match = next((j for j in cands if abs(int(ev["stage"][j]) - int(ev["stage"][i])) == 1), None)
        if match is None:
            raise ct.TraceError("%s: SEND of step %d from rank %d (stage %d) to rank %d, microbatch %d, has no "
                                "matching RECV in /events" % ((trace.path, key[0], key[1], int(ev["stage"][i])) +
                                                              key[2:]))
        cands.remove(match)
        pairs.append((i, match))
    return pairs


def flow_events(trace, origin, tids):
    """Chrome flow events (v1): "s" at the SEND's start binds to the SEND slice, "f" with bp "e" at the last
    nanosecond of the RECV binds to the enclosing RECV slice. Ids are unique over the file."""
    ev = trace.events
    out = []
    for n, (s, r) in enumerate(pair_transfers(trace), start=1):
        r_start, r_end = int(ev["start_ns"][r]), int(ev["end_ns"][r])
        args = {"step": int(ev["step"][s]), "microbatch": int(ev["microbatch"][s]), "bytes": int(ev["bytes"][s])}
        out.append({"ph": "s", "id": n, "name": "transfer", "cat": "transfer", "pid": int(ev["rank"][s]),
                    "tid": int(tids[s]), "ts": _us(ev["start_ns"][s], origin), "args": args})
        out.append({"ph": "f", "bp": "e", "id": n, "name": "transfer", "cat": "transfer", "pid": int(ev["rank"][r]),
                    "tid": int(tids[r]), "ts": _us(max(r_start, r_end - 1), origin), "args": args})
    return out + migration_flows(trace, origin, len(out) // 2 + 1)


def migration_flows(trace, origin, first_id):
    """Two flows per help (HELP_* row) whose owner's op is in the trace: owner's op start -> the help's start
    (the request), the help's last nanosecond -> the owner's op's last nanosecond (the answer)."""
    ev = trace.events
    out = []
    n = first_id
    for h, o in ct.help_links(trace, ev):
        if o is None:
            continue
        args = {"step": int(ev["step"][h]), "microbatch": int(ev["microbatch"][h]), "slices": int(ev["migrated"][h]),
                "bytes": int(ev["bytes"][h])}
        for (a, ta), (b, tb) in (((o, int(ev["start_ns"][o])), (h, int(ev["start_ns"][h]))),
                                 ((h, max(int(ev["start_ns"][h]), int(ev["end_ns"][h]) - 1)),
                                  (o, max(int(ev["start_ns"][o]), int(ev["end_ns"][o]) - 1)))):
            out.append({"ph": "s", "id": n, "name": "migration", "cat": "migration", "pid": int(ev["rank"][a]),
                        "tid": STREAM_COMPUTE, "ts": _us(ta, origin), "args": args})
            out.append({"ph": "f", "bp": "e", "id": n, "name": "migration", "cat": "migration",
                        "pid": int(ev["rank"][b]), "tid": STREAM_COMPUTE, "ts": _us(tb, origin), "args": args})
            n += 1
    return out


def _counter(name, pid, key, changes, origin):
    """Counter samples from (time_ns, delta) changes: one sample per distinct time, after all its changes."""
    out, value = [], 0
    changes.sort(key=lambda c: c[0])
    i = 0
    while i < len(changes):
        t = changes[i][0]
        while i < len(changes) and changes[i][0] == t:
            value += changes[i][1]
            i += 1
        out.append({"ph": "C", "name": name, "pid": pid, "ts": _us(t, origin), "args": {key: value}})
    return out


def counter_events(trace, origin):
    ev = trace.events[trace.compute_mask()]
    kinds = [trace.kind_name(k) for k in ev["kind"]]
    out = []
    for r in range(trace.world_size):
        held, ready = [], []
        for i in np.nonzero(ev["rank"] == r)[0]:
            k = kinds[i]
            if k == "F":
                held.append((int(ev["end_ns"][i]), 1))
            elif k in ("W", "BW"):
                held.append((int(ev["end_ns"][i]), -1))
            rd, st = int(ev["ready_ns"][i]), int(ev["start_ns"][i])
            if rd < st:
                ready += [(rd, 1), (st, -1)]
        out += _counter("in-flight activations", r, "microbatches", held, origin)
        out += _counter("ready ops", r, "ops", ready, origin)
    return out


def step_spans(trace, origin):
    steps_pid = trace.world_size
    out = [{"ph": "M", "name": "process_name", "pid": steps_pid, "tid": 0, "args": {"name": "steps"}},
           {"ph": "M", "name": "process_sort_index", "pid": steps_pid, "tid": 0, "args": {"sort_index": -1}}]
    for row in trace.steps:
        out.append({"ph": "X", "name": "step %d" % int(row["step"]), "cat": "step", "pid": steps_pid, "tid": 0,
                    "ts": _us(row["start_ns"], origin), "dur": int(row["makespan_ns"]) / 1e3,
                    "args": {"makespan_ns": int(row["makespan_ns"]), "bubble_ratio": float(row["bubble_ratio"]),
                             "samples_per_s": float(row["samples_per_s"]),
                             "loss": None if row["loss"] != row["loss"] else float(row["loss"])}})
    return out


def convert(trace):
    """Returns (events, origin_ns): every Chrome trace event of the file; ts are us since origin_ns, the
    earliest op start."""
    ev = trace.events
    origin = int(ev["start_ns"].min()) if len(ev) else 0
    tids, names = tracks(trace)
    out = metadata(trace, names) + op_events(trace, origin, tids) + profiler_steps(trace, origin)
    out += flow_events(trace, origin, tids)
    for part in (counter_events, step_spans):
        out += part(trace, origin)
    return out, origin


def document(trace, events, origin, rank):
    a = trace.attrs
    doc = {"schemaVersion": 1, "displayTimeUnit": "ns",
           "distributedInfo": {"rank": rank, "world_size": trace.world_size, "backend": a["backend"]},
           "otherData": {"source": a["source"], "schedule": a["schedule"], "execution": a["execution"],
                         "hint": a["hint"], "git_revision": a["git_revision"], "origin_ns": origin,
                         "trace": os.path.abspath(trace.path)},
           "traceEvents": events}
    if trace.epoch_unix_ns is not None:
        doc["baseTimeNanoseconds"] = trace.epoch_unix_ns + origin
    return doc


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", metavar="TRACE", help="trace.h5 (simulator or runtime)")
    p.add_argument("-o", "--output", required=True, help="output JSON (all ranks; distributedInfo.rank = 0)")
    p.add_argument("--per-rank", metavar="DIR", help="also write DIR/rank<R>.json, one per rank (for HTA)")
    args = p.parse_args(argv)
    trace = ct.load(args.trace)
    ct.note_dropped(trace)
    ct.require_steps(trace)
    per_rank = [os.path.join(args.per_rank, "rank%d.json" % r) for r in range(trace.world_size)
                if args.per_rank]
    ct.check_outputs([args.trace], [("-o", args.output)] + [("--per-rank", f) for f in per_rank])
    events, origin = convert(trace)
    with ct.output_file(args.output) as f:
        json.dump(document(trace, events, origin, 0), f)
    n = sum(1 for e in events if e.get("cat") == "kernel")
    transfers = sum(1 for e in events if e["ph"] == "s" and e.get("cat") == "transfer")
    migrations = sum(1 for e in events if e["ph"] == "s" and e.get("cat") == "migration")
    print("wrote %s: %d events, %d transfers%s, %d ranks, %d steps" %
          (args.output, n, transfers, ", %d migration flows" % migrations if migrations else "", trace.world_size,
           len(trace.steps)))
    if args.per_rank:
        try:
            os.makedirs(args.per_rank, exist_ok=True)
        except OSError as e:
            raise ct.output_error(args.per_rank, e) from None
        for r, path in enumerate(per_rank):
            mine = [e for e in events if e["pid"] == r]
            with ct.output_file(path) as f:
                json.dump(document(trace, mine, origin, r), f)
        print("wrote %s/rank0..%d.json" % (args.per_rank, trace.world_size - 1))
    return 0


if __name__ == "__main__":
    ct.main_guard(main)
