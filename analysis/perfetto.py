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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conductor_trace as ct  # noqa: E402  (first: it tells a Python without numpy or h5py in one line)
import numpy as np  # noqa: E402

TID_HOST, STREAM_COMPUTE, STREAM_COMM = 0, 7, 8  # STREAM_COMM: the first transfer stream
COMM_PREFIX = "ncclKernel_SendRecv"  # hta/utils/utils.py is_comm_kernel(): "ncclKernel" in name
# Rows (or transfer pairs) made into events at a time, and events written at a time: memory stays bounded on a
# trace of 10^6 rows (a list of every event of a 64-rank trace, 7.4 million dicts, took 4.9 GB).
CHUNK = 1 << 15
MAX_OPEN_FILES = 256  # --per-rank files written at once; more ranks take another pass over the events


def _us(ns, origin):
    return (int(ns) - origin) / 1e3


def _us_array(ns, origin):
    """_us of every element, as Python floats: the same float as _us (an exact int64 difference, then / 1e3)."""
    return ((np.asarray(ns, dtype=np.int64) - origin) / 1e3).tolist()


def _kind_names(trace, codes):
    """kind name of every code of `codes` (a numpy array), as a list."""
    names = {int(c): trace.kind_name(c) for c in np.unique(codes)}
    return [names[c] for c in codes.tolist()]


# The events there are millions of (a 64-rank trace: 7.4 million) are written from these templates, not as dicts
# through json: 6x faster. They give json.dumps' text of the same event, byte for byte (its separators, repr() of
# floats, strings escaped by its own function); the tests check that against json itself (convert() parses them).
_esc = json.encoder.encode_basestring_ascii  # a str as a JSON string literal, quotes included, as json.dumps
_encode = json.JSONEncoder(check_circular=False).encode  # json.dumps, without its check for self-containing dicts
KERNEL = ('{"ph": "X", "name": %s, "cat": "kernel", "pid": %d, "tid": %d, "ts": %r, "dur": %r, "args": {"step": %d, '
          '"stage": %d, "chunk": %d, "microbatch": %d, "ready_ns": %d, "wait_ns": %d, "bytes": %d, "correlation": %d, '
          '"device": %d, "stream": %d, %s}}')  # the last %s: "migrated" (and "owner") of an op, "peer" of a transfer
LAUNCH = ('{"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": %d, "tid": ' + str(TID_HOST) +
          ', "ts": %r, "dur": 0, "args": {"correlation": %d, "op": %s}}')
FLOW_START = '{"ph": "s", "id": %d, "name": %s, "cat": %s, "pid": %d, "tid": %d, "ts": %r, "args": %s}'
FLOW_END = '{"ph": "f", "bp": "e", "id": %d, "name": %s, "cat": %s, "pid": %d, "tid": %d, "ts": %r, "args": %s}'
COUNTER = '{"ph": "C", "name": %s, "pid": %d, "ts": %r, "args": {%s: %d}}'


def _json(event):
    """(pid, JSON text) of an event given as a dict (the events there are few of)."""
    return event["pid"], _encode(event)


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


def _by_rank(ranks, world):
    """[positions in `ranks` (a rank column) holding rank r, ascending] for r in range(world)."""
    order = np.argsort(ranks, kind="stable")
    bounds = np.searchsorted(ranks[order], np.arange(world + 1))
    return [order[bounds[r]:bounds[r + 1]] for r in range(world)]


def tracks(trace):
    """(tid per row of /events, {(rank, tid): thread name}): compute ops on STREAM_COMPUTE; per rank, SEND/RECV
    on streams STREAM_COMM, STREAM_COMM + 1, ... and ANNOUNCE rows on the streams after those, each row on the
    first stream of its group free at its start (lanes())."""
    ev = trace.events
    tids = np.full(len(ev), STREAM_COMPUTE, dtype=np.int64)
    names = {}
    announce = trace.kind_codes.get("ANNOUNCE")
    is_announce = ev["kind"] == announce if announce is not None else np.zeros(len(ev), dtype=bool)
    transfers = np.nonzero(~trace.compute_mask())[0]
    by_rank = _by_rank(ev["rank"][transfers], trace.world_size)
    for r in range(trace.world_size):
        names[(r, TID_HOST)] = "host"
        names[(r, STREAM_COMPUTE)] = "stream %d (compute)" % STREAM_COMPUTE
        mine = transfers[by_rank[r]]
        tid = STREAM_COMM
        for rows, label in ((mine[~is_announce[mine]], "comm"), (mine[is_announce[mine]], "announce")):
            starts = ev["start_ns"][rows].astype(np.int64)
            ends = np.maximum(starts, ev["end_ns"][rows].astype(np.int64))
            lane = lanes(list(zip(starts.tolist(), ends.tolist())))
            for k in range(max(lane, default=-1) + 1):
                names[(r, tid + k)] = "stream %d (%s)" % (tid + k, label)
            tids[rows] = tid + np.asarray(lane, dtype=np.int64)
            tid += max(lane, default=-1) + 1
    return tids, names


def metadata(trace, names):
    threads = {}
    for (rank, tid), name in sorted(names.items()):
        threads.setdefault(rank, []).append((tid, name))
    out = []
    for r in range(trace.world_size):
        host = trace.attrs["hostnames"][r] if r < len(trace.attrs["hostnames"]) else ""
        out.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                    "args": {"name": "rank %d" % r + (" (%s)" % host if host else "")}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
        for tid, name in threads.get(r, []):
            out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": tid, "args": {"name": name}})
    return out


def op_events(trace, origin, tids):
    """One kernel event and one launch marker per row of /events (on stream tids[row]); correlation ids are
    1-based row numbers. A generator of (pid, JSON text), CHUNK rows at a time."""
    ev = trace.events
    compute = trace.compute_mask()
    for lo in range(0, len(ev), CHUNK):
        yield from _op_chunk(trace, ev[lo:lo + CHUNK], lo, origin, tids[lo:lo + CHUNK], compute[lo:lo + CHUNK])


def _op_chunk(trace, part, first_row, origin, tids, compute):
    # Columns as Python lists (numpy scalars are slow to index one by one and json cannot write them).
    col = {f: part[f].tolist() for f in ("step", "stage", "chunk", "microbatch", "ready_ns", "wait_ns", "bytes",
                                         "rank", "peer", "migrated")}
    kinds = _kind_names(trace, part["kind"])
    start, end = part["start_ns"].astype(np.int64), part["end_ns"].astype(np.int64)
    ts, dur = _us_array(start, origin), (np.maximum(end - start, 0) / 1e3).tolist()
    tids, compute = tids.tolist(), compute.tolist()
    for j, kind in enumerate(kinds):
        rank, corr, mb, peer = col["rank"][j], first_row + j + 1, col["microbatch"][j], col["peer"][j]
        if compute[j]:
            name, last = "%s%d" % (kind, mb), '"migrated": %d' % col["migrated"][j]
            if kind in ct.HELP_OF:
                name += " for r%d" % peer
                last += ', "owner": %d' % peer
        else:
            name = "%s %s %s r%d mb%d" % (COMM_PREFIX, kind, "to" if kind == "SEND" else "from", peer, mb)
            last = '"peer": %d' % peer
        name = _esc(name)
        yield rank, KERNEL % (name, rank, tids[j], ts[j], dur[j], col["step"][j], col["stage"][j], col["chunk"][j],
                              mb, col["ready_ns"][j], col["wait_ns"][j], col["bytes"][j], corr, rank, tids[j], last)
        yield rank, LAUNCH % (rank, ts[j], corr, name)


def profiler_steps(trace, origin):
    """ProfilerStep#N on every rank's host thread: [first op start, last op end] of the rank's rows of step N."""
    out = []
    for step in trace.step_ids:
        ev = trace.step_events(step)
        if len(ev) == 0:
            continue
        ev = ev[np.argsort(ev["rank"], kind="stable")]
        ranks, first = np.unique(ev["rank"], return_index=True)
        start, end = ev["start_ns"].astype(np.int64), ev["end_ns"].astype(np.int64)
        t0 = np.minimum.reduceat(start, first)
        t1 = np.maximum(np.maximum.reduceat(end, first), np.maximum.reduceat(start, first))
        for r, a, b in zip(ranks.tolist(), t0.tolist(), t1.tolist()):
            out.append(_json({"ph": "X", "name": "ProfilerStep#%d" % step, "cat": "user_annotation", "pid": r,
                              "tid": TID_HOST, "ts": _us(a, origin), "dur": (b - a) / 1e3, "args": {"step": step}}))
    return out


def transfer_pairs(trace):
    """(send_rows, recv_rows), two arrays, one pair per SEND in (start, row) order; raises TraceError for a SEND
    without its RECV. The rule is pair_transfers'; most transfers are alone with their key (step, sender,
    receiver, microbatch) and are paired by numpy, the others one by one as the rule says."""
    ev = trace.events
    codes = trace.kind_codes
    sends = np.nonzero(ev["kind"] == codes["SEND"])[0] if "SEND" in codes else np.zeros(0, dtype=np.int64)
    recvs = np.nonzero(ev["kind"] == codes["RECV"])[0] if "RECV" in codes else np.zeros(0, dtype=np.int64)
    sends = sends[np.argsort(ev["start_ns"][sends], kind="stable")]  # by (start, row)
    recvs = recvs[np.argsort(ev["end_ns"][recvs], kind="stable")]  # by (end, row): arrival order
    key = ct.group_ids([np.concatenate((ev[a][sends], ev[b][recvs])).astype(np.int64)
                        for a, b in (("step", "step"), ("rank", "peer"), ("peer", "rank"),
                                     ("microbatch", "microbatch"))])
    ks, kr = key[:len(sends)], key[len(sends):]
    n_keys = int(key.max()) + 1 if len(key) else 0
    n_send, n_recv = np.bincount(ks, minlength=n_keys), np.bincount(kr, minlength=n_keys)
    recv_of = np.full(n_keys, -1, dtype=np.int64)
    recv_of[kr] = recvs  # the RECV of a key with one RECV
    match = np.full(len(sends), -1, dtype=np.int64)
    alone = (n_send[ks] == 1) & (n_recv[ks] == 1)
    cand = recv_of[ks[alone]]
    adjacent = np.abs(ev["stage"][cand].astype(np.int64) - ev["stage"][sends[alone]]) == 1
    match[np.nonzero(alone)[0][adjacent]] = cand[adjacent]
    _match_shared_keys(ev, sends, recvs, ks, kr, np.nonzero(~alone)[0], match)
    missing = np.nonzero(match < 0)[0]
    if len(missing):
        i = int(sends[missing[0]])  # the first unmatched SEND in (start, row) order
        raise ct.TraceError("%s: SEND of step %d from rank %d (stage %d) to rank %d, microbatch %d, has no "
                            "matching RECV in /events" % (trace.path, int(ev["step"][i]), int(ev["rank"][i]),
                                                          int(ev["stage"][i]), int(ev["peer"][i]),
                                                          int(ev["microbatch"][i])))
    return sends, match


def _match_shared_keys(ev, sends, recvs, ks, kr, which, match):
    """Sets match[n] for the SENDs sends[which] (keys shared with other transfers): each SEND, in order, takes the
    earliest-arriving unmatched RECV of its key at an adjacent stage; -1 where none is left."""
    cands = {}
    mine = np.isin(kr, ks[which])
    for j, k in zip(recvs[mine].tolist(), kr[mine].tolist()):
        cands.setdefault(k, []).append(j)
    stage = ev["stage"]
    for n in which.tolist():
        lst = cands.get(int(ks[n]), [])
        s_stage = int(stage[sends[n]])
        j = next((j for j in lst if abs(int(stage[j]) - s_stage) == 1), None)
        if j is not None:
            lst.remove(j)
            match[n] = j


def pair_transfers(trace):
    """[(send_row, recv_row)] for every SEND; raises TraceError for a SEND without its RECV.

    A SEND (rank = sender, peer = receiver, stage = the producing stage) matches a RECV of the same step and
    microbatch with rank and peer swapped and an adjacent stage (the consumer: stage +- 1). Among several
    candidates (interleaved chunks can send both ways between two ranks) the SENDs are taken by start time,
    each with the earliest-arriving unmatched candidate (MPI delivers in order between two ranks)."""
    sends, recvs = transfer_pairs(trace)
    return list(zip(sends.tolist(), recvs.tolist()))


def flow_events(trace, origin, tids, pairs=None, links=None):
    """Chrome flow events (v1): "s" at the SEND's start binds to the SEND slice, "f" with bp "e" at the last
    nanosecond of the RECV binds to the enclosing RECV slice. Ids are unique over the file. A generator of (pid,
    JSON text); pairs (transfer_pairs()) and links (ct.help_links()) are computed here when not given."""
    ev = trace.events
    sends, recvs = transfer_pairs(trace) if pairs is None else pairs
    for lo in range(0, len(sends), CHUNK):
        s, r = sends[lo:lo + CHUNK], recvs[lo:lo + CHUNK]
        r_start, r_end = ev["start_ns"][r].astype(np.int64), ev["end_ns"][r].astype(np.int64)
        cols = zip(range(lo + 1, lo + len(s) + 1), ev["step"][s].tolist(), ev["microbatch"][s].tolist(),
                   ev["bytes"][s].tolist(), ev["rank"][s].tolist(), tids[s].tolist(),
                   _us_array(ev["start_ns"][s], origin), ev["rank"][r].tolist(), tids[r].tolist(),
                   _us_array(np.maximum(r_start, r_end - 1), origin))
        name = _esc("transfer")
        for n, step, mb, nbytes, s_pid, s_tid, s_ts, r_pid, r_tid, r_ts in cols:
            args = '{"step": %d, "microbatch": %d, "bytes": %d}' % (step, mb, nbytes)
            yield s_pid, FLOW_START % (n, name, name, s_pid, s_tid, s_ts, args)
            yield r_pid, FLOW_END % (n, name, name, r_pid, r_tid, r_ts, args)
    yield from migration_flows(trace, origin, len(sends) + 1, links)


def migration_flows(trace, origin, first_id, links=None):
    """Two flows per help (HELP_* row) whose owner's op is in the trace: owner's op start -> the help's start
    (the request), the help's last nanosecond -> the owner's op's last nanosecond (the answer). A generator of
    (pid, JSON text)."""
    ev = trace.events
    n = first_id
    for h, o in ct.help_links(trace, ev) if links is None else links:
        if o is None:
            continue
        args = {"step": int(ev["step"][h]), "microbatch": int(ev["microbatch"][h]), "slices": int(ev["migrated"][h]),
                "bytes": int(ev["bytes"][h])}
        for (a, ta), (b, tb) in (((o, int(ev["start_ns"][o])), (h, int(ev["start_ns"][h]))),
                                 ((h, max(int(ev["start_ns"][h]), int(ev["end_ns"][h]) - 1)),
                                  (o, max(int(ev["start_ns"][o]), int(ev["end_ns"][o]) - 1)))):
            yield _json({"ph": "s", "id": n, "name": "migration", "cat": "migration", "pid": int(ev["rank"][a]),
                         "tid": STREAM_COMPUTE, "ts": _us(ta, origin), "args": args})
            yield _json({"ph": "f", "bp": "e", "id": n, "name": "migration", "cat": "migration",
                         "pid": int(ev["rank"][b]), "tid": STREAM_COMPUTE, "ts": _us(tb, origin), "args": args})
            n += 1


def _counter(name, pid, key, times, deltas, origin):
    """Counter samples from changes (times[i] ns, deltas[i]): one sample per distinct time, with the value after
    all its changes (a running sum in time order)."""
    order = np.argsort(times, kind="stable")
    t = np.asarray(times, dtype=np.int64)[order]
    value = np.cumsum(np.asarray(deltas, dtype=np.int64)[order])
    last = np.nonzero(np.append(t[1:] != t[:-1], True))[0] if len(t) else np.zeros(0, dtype=np.int64)
    name, key = _esc(name), _esc(key)
    return [(pid, COUNTER % (name, pid, ts, key, v)) for ts, v in zip(_us_array(t[last], origin), value[last].tolist())]


def counter_events(trace, origin):
    """Per rank: "in-flight activations" (+1 at an F's end, -1 at a W's or BW's end) and "ready ops" (+1 at a
    compute op's ready time, -1 at its start, where it waited). A generator of (pid, JSON text), a rank at a time."""
    ev = trace.events[trace.compute_mask()]
    codes = trace.kind_codes
    plus = ev["kind"] == codes["F"]
    minus = np.isin(ev["kind"], [codes[k] for k in ("W", "BW")])
    for r, rows in enumerate(_by_rank(ev["rank"], trace.world_size)):
        mine = ev[rows]
        held = plus[rows] | minus[rows]
        yield from _counter("in-flight activations", r, "microbatches", mine["end_ns"][held],
                            np.where(plus[rows][held], 1, -1), origin)
        rd, st = mine["ready_ns"].astype(np.int64), mine["start_ns"].astype(np.int64)
        waited = rd < st
        # (ready, +1) and (start, -1) of every op that waited; the order within one time does not matter
        times = np.stack((rd[waited], st[waited]), axis=1).ravel()
        deltas = np.tile([1, -1], int(waited.sum()))
        yield from _counter("ready ops", r, "ops", times, deltas, origin)


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


def plan(trace):
    """What every event needs, computed before any output is written (so that a trace perfetto.py cannot
    convert leaves no partial file): origin (the earliest op start), tids and thread names (tracks()), the
    transfer pairs and the help links."""
    ev = trace.events
    tids, names = tracks(trace)
    return {"origin": int(ev["start_ns"].min()) if len(ev) else 0, "tids": tids, "names": names,
            "pairs": transfer_pairs(trace), "links": ct.help_links(trace, ev)}


def iter_events(trace, p):
    """Every Chrome trace event of the file, in file order, from plan() p, as (pid, JSON text); ts are us since
    p["origin"]."""
    origin, tids = p["origin"], p["tids"]
    yield from map(_json, metadata(trace, p["names"]))
    yield from op_events(trace, origin, tids)
    yield from profiler_steps(trace, origin)
    yield from flow_events(trace, origin, tids, p["pairs"], p["links"])
    yield from counter_events(trace, origin)
    yield from map(_json, step_spans(trace, origin))


def convert(trace):
    """Returns (events, origin_ns): every Chrome trace event of the file as a list (main() streams them
    instead); ts are us since origin_ns, the earliest op start."""
    p = plan(trace)
    return [json.loads(text) for _, text in iter_events(trace, p)], p["origin"]


def document(trace, events, origin, rank):
    a = trace.attrs
    doc = {"schemaVersion": 1, "displayTimeUnit": "ns",
           "distributedInfo": {"rank": rank, "world_size": trace.world_size, "backend": a["backend"]},
           "otherData": {"source": a["source"], "schedule": a["schedule"], "execution": a["execution"],
                         "hint": a["hint"], "git_revision": a["git_revision"], "origin_ns": origin,
                         "trace": ct.printable(os.path.abspath(trace.path))},
           "traceEvents": events}
    if trace.epoch_unix_ns is not None:
        doc["baseTimeNanoseconds"] = trace.epoch_unix_ns + origin
    return doc


_HOLE = "\x00traceEvents\x00"  # stands for the event list in document(); json writes it as "\u0000traceEvents..."


class _JsonDocument:
    """Writes document(trace, events, origin, rank) to an open file as json.dump would, byte for byte, with the
    events given a batch at a time (add()) instead of as one list."""

    def __init__(self, f, trace, origin, rank):
        text = json.dumps(document(trace, _HOLE, origin, rank))
        hole = json.dumps(_HOLE)
        if text.count(hole) != 1:
            raise ValueError("a trace attribute contains %r" % _HOLE)
        self.f, self.first = f, True
        head, self.tail = text.split(hole)
        f.write(head + "[")

    def add(self, texts):
        """Writes events given as JSON texts after those written before."""
        if texts:
            self.f.write(("" if self.first else ", ") + ", ".join(texts))
            self.first = False

    def close(self):
        self.f.write("]" + self.tail)


def _batches(events, size=None):
    """Lists of `size` (default CHUNK) consecutive items of the iterable `events`, the last one shorter."""
    size = size or CHUNK
    batch = []
    for e in events:
        batch.append(e)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def write(trace, p, output, per_rank=()):
    """Writes the file `output` (distributedInfo.rank 0) and per_rank[r] (rank r's events only) for plan() p.
    The events are made and written a batch at a time; per-rank files are written MAX_OPEN_FILES at a time,
    each group in one more pass over the events. Every file is written whole or not at all: all are renamed into
    place at the end (ct.output_files), none on an error or a signal."""
    groups = [list(range(lo, min(lo + MAX_OPEN_FILES, len(per_rank))))
              for lo in range(0, len(per_rank), MAX_OPEN_FILES)]
    with ct.output_files() as outs:
        for n, ranks in enumerate(groups or [[]]):
            main = _JsonDocument(outs.open(output), trace, p["origin"], 0) if n == 0 else None
            docs = {r: _JsonDocument(outs.open(per_rank[r]), trace, p["origin"], r) for r in ranks}
            for batch in _batches(iter_events(trace, p)):
                if main:
                    main.add([text for _, text in batch])
                if docs:
                    by_pid = {}
                    for pid, text in batch:
                        if pid in docs:
                            by_pid.setdefault(pid, []).append(text)
                    for r, texts in by_pid.items():
                        docs[r].add(texts)
            for doc in ([main] if main else []) + list(docs.values()):
                doc.close()
                doc.f.close()  # this group's files: at most MAX_OPEN_FILES are open at once


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", metavar="TRACE", help="trace.h5 (simulator or runtime)")
    p.add_argument("-o", "--output", required=True,
                   help="output JSON (all ranks; distributedInfo.rank = 0); - for standard output")
    p.add_argument("--per-rank", metavar="DIR", help="also write DIR/rank<R>.json, one per rank (for HTA)")
    p.add_argument("--steps", metavar="N|A..B", type=ct.step_range,
                   help="only step N or steps A..B (as the trace counts them, from 0): Perfetto's UI opens files "
                        "up to about 1-2 GB, and a long or wide trace writes more")
    args = p.parse_args(argv)
    trace = ct.load(args.trace)
    ct.note_dropped(trace)
    ct.require_steps(trace)
    if args.steps:
        trace = trace.select_steps(*args.steps)
    per_rank = [os.path.join(args.per_rank, "rank%d.json" % r) for r in range(trace.world_size)
                if args.per_rank]
    ct.check_outputs([args.trace], [("-o", args.output)] + [("--per-rank", f) for f in per_rank])
    # Every output is checked before the first is written: a failure halfway left -o replaced and some ranks'
    # files written.
    if args.output != "-":
        ct.check_output_folder(args.output)
    if args.per_rank:
        if os.path.exists(args.per_rank) and not os.path.isdir(args.per_rank):
            raise ct.TraceError("%s: --per-rank names a folder (it gets rank<R>.json files), and this is a file" %
                                args.per_rank)
        try:
            os.makedirs(args.per_rank, exist_ok=True)
        except OSError as e:
            raise ct.output_error(args.per_rank, e) from None
        for f in per_rank:
            ct.check_output_folder(f)
    todo = plan(trace)
    write(trace, todo, args.output, per_rank)
    # one kernel event per row, one flow per SEND, two per help with its owner's op
    migrations = 2 * sum(1 for _, o in todo["links"] if o is not None)
    said = ct.tell if args.output == "-" else (lambda line: ct.say(line + "\n"))  # the JSON alone on stdout
    said("wrote %s: %d events, %d transfers%s, %d ranks, %d steps" %
         ("standard output" if args.output == "-" else ct.printable(args.output), len(trace.events),
          len(todo["pairs"][0]), ", %d migration flows" % migrations if migrations else "", trace.world_size,
          len(trace.steps)))
    if args.per_rank:
        said("wrote %s/rank0..%d.json" % (ct.printable(args.per_rank), trace.world_size - 1))
    return 0


if __name__ == "__main__":
    ct.main_guard(main)
