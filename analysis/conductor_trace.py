"""Reading and measuring conductor traces (trace.h5, schema in docs/trace.md).

Shared by bubbles.py, timeline.py, compare.py and perfetto.py. `load(path)` validates the schema and the
values (`validate`: what no writer produces, e.g. an unknown kind or an op ending before it starts) and raises
TraceError naming what is missing or wrong; `main_guard(fn)` turns every error into one line on stderr and a
non-zero exit (2 for a TraceError), never a traceback.

Definitions (docs/trace.md): compute ops are F, B, W, BW; per step, makespan = last compute end - first
compute start over all ranks; bubble ratio = 1 - sum(busy) / (world_size * makespan); per-stage bubble
(the Zero Bubble paper's) = mean over ranks with a compute op of 1 - busy(r) / span(r), span(r) = the rank's
last compute end - its first compute start (0 where the span is 0).
"""
import atexit
import contextlib
import errno
import importlib.util
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import time
import warnings


def missing_module_message(name, e):
    """The one line a tool prints when this Python lacks numpy or h5py (module `name`, ImportError `e`): which
    module, which interpreter, and how to run the tools with one that has them (README.md, "Read the results")."""
    tool = os.path.splitext(os.path.basename(sys.argv[0]))[0] or "TOOL"
    return ("%s: error: this Python (%s) cannot import %s (%s); the analysis tools need a Python with h5py and numpy: "
            "run them as scripts/conductor-analysis %s ... (bin/conductor-analysis when installed), which finds "
            "one, or set CONDUCTOR_PYTHON to an interpreter that imports them" %
            (os.path.basename(sys.argv[0]) or "conductor_trace.py", sys.executable or "python3", name,
             " ".join(str(e).split()) or type(e).__name__, tool))


def _run_as_tool():
    """Whether this process runs one of the analysis tools (a script next to this file) as its main program."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    return bool(main_file) and (os.path.dirname(os.path.realpath(main_file)) ==
                                os.path.dirname(os.path.realpath(__file__)))


# numpy is used throughout; h5py is imported where a trace is read, but its absence is told here, before any work
# (a broken h5py that is found but fails to import is told by main_guard, with the same line).
try:
    import numpy as np
    if importlib.util.find_spec("h5py") is None:
        raise ModuleNotFoundError("No module named 'h5py'", name="h5py")
except ImportError as _e:
    if not _run_as_tool():
        raise
    print(missing_module_message(_e.name or "numpy", _e), file=sys.stderr)
    sys.exit(1)  # as any other error that is not the trace's (main_guard); e.g. a missing matplotlib

SUPPORTED_SCHEMA = 1
KIND_NAMES = ("F", "B", "W", "BW", "SEND", "RECV", "ANNOUNCE", "HELP_F", "HELP_B", "HELP_W", "HELP_BW")
COMPUTE_KINDS = ("F", "B", "W", "BW")
# Busy time: a rank's own ops and the slices it computed for another rank (migration's HELP_* rows).
BUSY_KINDS = COMPUTE_KINDS + ("HELP_F", "HELP_B", "HELP_W", "HELP_BW")
EVENT_FIELDS = ("step", "rank", "stage", "chunk", "microbatch", "kind", "ready_ns", "start_ns", "end_ns",
                "bytes", "wait_ns", "peer", "migrated")
STEP_FIELDS = ("step", "loss", "start_ns", "makespan_ns", "bubble_ratio", "samples_per_s", "lower_bound_ns")
# Added to /steps after schema 1 was published; traces without it stay readable (it is recomputed from /events).
OPTIONAL_STEP_FIELDS = ("stage_bubble_ratio",)
INT_ATTRS = ("schema_version", "world_size", "pipeline", "microbatches", "virtual")
MAX_RANKS = 65536  # parallel.pipeline's largest value
STR_ATTRS = ("deck", "schedule", "execution", "hint", "backend", "source", "git_revision")
LIST_ATTRS = ("hostnames",)

# What load() accepts in /events and /steps: what the C++ writers (trace_writer, summarize_step, the simulator and
# the runtime) can write, so that a corrupt trace is refused with one line naming the row, field and value.
# Times: the simulator refuses a clock of 9.2e12 ms or more, "the ms a trace holds (nanoseconds in 64 bits)"
# (src/sim/simulator.cpp, to_ns); the runtime's common clock is rank 0's steady clock (ns since boot), far below.
MAX_TIME_NS = 9_200_000_000_000_000_000
# SEND, RECV and ANNOUNCE rows may end before they start by the clocks' alignment error (an ANNOUNCE's two times
# are two ranks' readings; docs/trace.md: a fraction of a millisecond); refused beyond this.
CLOCK_SLACK_NS = 1_000_000_000
# ... and lie outside the run's steps ([first step start, last step end] in /steps: RECVs are posted at a rank's
# step begin); refused beyond the larger of the run's length and this.
OUTSIDE_RUN_NS = 3600 * 1_000_000_000


class TraceError(Exception):
    """A trace that cannot be used; the message names the file and what is wrong."""


def printable(text):
    """`text` (a path, a run's name, a message) as reports, figures and messages show it: a byte of a file name
    that is not UTF-8 (the str the file system gives it, decoded with surrogateescape) as \\xNN, as are other
    characters that do not print (a newline: \\n), so that the text can be written as UTF-8 and read."""
    text = str(text)
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif 0xDC80 <= ord(ch) <= 0xDCFF:  # surrogateescape's stand-in for the undecodable byte ord(ch) - 0xDC00
            out.append("\\x%02x" % (ord(ch) - 0xDC00))
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def _str(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.shape == ():
        return _str(value[()])
    return str(value)


class Trace:
    """One validated trace: attrs (dict), events and steps (numpy structured arrays), kind codes.

    events hold only rows of complete steps (steps present in /steps); `kind` is stored as the HDF5
    enum's integer, `kind_name(code)` and `kind_code(name)` translate.
    """

    def __init__(self, path, attrs, events, steps, kind_codes, dropped, dataset_attrs=None):
        self.path = path
        self.attrs = attrs
        # Attributes of /events and /steps (units, descriptions, clock); empty for traces written before them.
        self.dataset_attrs = dataset_attrs or {"events": {}, "steps": {}}
        self.events = events
        self.steps = steps
        self.kind_codes = kind_codes            # name -> int
        self.kind_names = {v: k for k, v in kind_codes.items()}
        self.dropped_events = dropped           # rows of incomplete steps or unwritten fill
        # Events grouped by step once (a stable sort keeps the writer's order within a step), so that
        # per-step queries cost O(events of the step), not O(all events), on long runs.
        # Each step's slice of the sorted rows and each step's /steps row are looked up in a dict, built once:
        # a searchsorted per query on the strided field view copied the whole column each time (bubbles.py and
        # perfetto.py grew with the square of the steps: 50 s at 8000 steps).
        order = np.argsort(events["step"], kind="stable")
        self._by_step = events[order]
        keys = np.ascontiguousarray(self._by_step["step"])
        firsts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, dtype=np.int64)
        ends = np.r_[firsts[1:], len(keys)] if len(keys) else firsts
        self._step_slices = {int(keys[a]): (int(a), int(b)) for a, b in zip(firsts, ends)}
        self._step_rows = {}
        for i, step in enumerate(np.asarray(steps["step"]).tolist()):
            self._step_rows.setdefault(int(step), i)

    def select_steps(self, first, last):
        """The same trace with only steps first..last (inclusive) in /events and /steps; TraceError naming the
        steps present when none of them is in the trace."""
        keep_steps = (self.steps["step"] >= first) & (self.steps["step"] <= last)
        if not keep_steps.any():
            raise TraceError("%s: no step of %s in /steps (steps present: %s)" %
                             (self.path, "%d" % first if first == last else "%d..%d" % (first, last),
                              _ranges(self.step_ids)))
        keep_events = (self.events["step"] >= first) & (self.events["step"] <= last)
        return Trace(self.path, self.attrs, self.events[keep_events], self.steps[keep_steps], self.kind_codes,
                     self.dropped_events, self.dataset_attrs)

    @property
    def world_size(self):
        return int(self.attrs["world_size"])

    @property
    def epoch_unix_ns(self):
        """UNIX time (ns) of time 0 of the trace's clock, or None (simulator, or a trace written before it)."""
        v = self.dataset_attrs["events"].get("epoch_unix_ns")
        return None if v is None else int(v)

    def units(self, dataset):
        """{field: unit} of /events or /steps ('' where unitless); empty for a trace without the attributes."""
        a = self.dataset_attrs[dataset]
        if "field_names" not in a or "field_units" not in a:
            return {}
        return dict(zip(a["field_names"], a["field_units"]))

    @property
    def step_ids(self):
        return [int(s) for s in self.steps["step"]]

    def kind_name(self, code):
        return self.kind_names.get(int(code), "?%d" % int(code))

    def kind_code(self, name):
        return self.kind_codes[name]

    def compute_mask(self, events=None):
        ev = self.events if events is None else events
        codes = [self.kind_codes[k] for k in BUSY_KINDS if k in self.kind_codes]
        return np.isin(ev["kind"], codes)

    def step_events(self, step, compute_only=False):
        lo, hi = self._step_slices.get(int(step), (0, 0))
        ev = self._by_step[lo:hi]
        if compute_only:
            ev = ev[self.compute_mask(ev)]
        return ev

    def step_row(self, step):
        i = self._step_rows.get(int(step))
        if i is None:
            raise TraceError("%s: step %d is not in /steps (steps present: %s)" % (self.path, step, _ranges(self.step_ids)))
        return self.steps[i]

    @property
    def shown(self):
        """The trace's path as reports and messages show it (printable())."""
        return printable(self.path)

    def label(self):
        """A short name for tables: the run folder of .../<run>/trace.h5, else the file name (printable())."""
        base = os.path.basename(self.path)
        parent = os.path.basename(os.path.dirname(os.path.abspath(self.path)))
        return printable(parent if base == "trace.h5" and parent else os.path.splitext(base)[0])


def _ranges(ids, most=8):
    """The steps present as runs: "0..2, 5..6, 8..19" (a gap shown, not hidden in min..max); past `most` runs,
    "and N more"."""
    if not ids:
        return "none"
    runs = []
    for i in sorted(set(int(x) for x in ids)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join("%d..%d" % (a, b) if b > a else "%d" % a for a, b in runs[:most])
    return text + (", and %d more runs" % (len(runs) - most) if len(runs) > most else "")


def _reason(e):
    """An h5py/HDF5 error as one short line: HDF5's low-level dumps (time, buffer address, byte counts) are cut
    down to their 'error message', and the errno prefix and line breaks are dropped."""
    args = [a for a in getattr(e, "args", ()) if isinstance(a, str)]
    msg = args[-1] if args else str(e)
    m = re.search(r"error message = '([^']*)'", msg)
    if m:
        msg = "%s (%s)" % (msg.split("(", 1)[0].strip(), m.group(1))
    return " ".join(msg.split())


def _open(path):
    import h5py
    if not os.path.exists(path):
        raise TraceError("%s: no such file" % path)
    if os.path.isdir(path):
        raise TraceError("%s: is a folder, not a trace file" % path)
    if not os.path.isfile(path):  # HDF5 would wait for ever on a named pipe's writer
        raise TraceError("%s: is not a regular file (a named pipe or a device); a trace is an HDF5 file" % path)
    try:
        return h5py.File(path, "r")
    except OSError as first:
        # A run killed while writing leaves the file marked open for SWMR writing; SWMR readers may open it.
        # Only then: a SWMR reader retries every metadata read that fails its checksum (HDF5 sleeps between
        # tries), so a damaged superblock opened that way takes minutes to fail.
        if "already open for write" not in str(first):
            raise TraceError("%s: not a readable HDF5 file (%s)" % (path, _reason(first))) from None
        try:
            return h5py.File(path, "r", swmr=True)
        except OSError:
            # Marked open, but not for SWMR writing: a run killed while it reopened the trace to continue it
            # (conductor itself reads past the mark). Every row is there; h5py cannot read past the mark.
            raise TraceError("%s: marked open for writing by a killed run (not in SWMR mode, which h5py can read); "
                             "clear the mark with `h5clear -s %s` (package hdf5-tools): every row it holds reads "
                             "back" % (path, path)) from None


def _probe_timeout(path):
    """Seconds a child may take to read the trace: generous for a slow disk (20 MB/s), bounded for a hang."""
    return 30.0 + os.path.getsize(path) / 20e6


def _probe(path):
    """Reads the trace once in a child process. Some damage to HDF5 metadata makes the HDF5 library itself
    crash (a segmentation fault inside h5py's calls, which Python cannot catch) or never return; the child
    takes that, and the tool reports it as one line. When the child ends, the same reads in this process are
    safe: they are the same calls on the same bytes. Errors the child meets are left to the real read, which
    reports them."""
    pid = os.fork()
    if pid == 0:  # the child: no output, no cleanup handlers of the parent
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            with _open(path) as f:
                _read(f, path)
        except BaseException:  # noqa: BLE001 - reported by the parent's own read
            pass
        os._exit(0)
    deadline = time.monotonic() + _probe_timeout(path)
    pause = 0.001
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                raise TraceError("%s: damaged HDF5 trace (reading it did not finish in %.0f s); it cannot be read" %
                                 (path, _probe_timeout(path)))
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    except BaseException:  # the deadline, or a signal (Stopped): the child does not outlive the tool
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else "signal %d" % sig
        raise TraceError("%s: damaged HDF5 trace (reading it crashed the HDF5 library: %s); it cannot be read" %
                         (path, name))


def _table(f, path, name, fields):
    import h5py
    if name not in f:
        raise TraceError("%s: missing dataset '/%s' (see docs/trace.md)" % (path, name))
    ds = f[name]
    if not isinstance(ds, h5py.Dataset) or ds.dtype.names is None:
        raise TraceError("%s: '/%s' is not a table of compound records (see docs/trace.md)" % (path, name))
    missing = [fld for fld in fields if fld not in ds.dtype.names]
    if missing:
        raise TraceError("%s: dataset '/%s' has no field %s (see docs/trace.md)" %
                         (path, name, ", ".join("'%s'" % m for m in missing)))
    if len(ds.shape) != 1:
        raise TraceError("%s: dataset '/%s' is not 1-D" % (path, name))
    try:
        return ds[...]
    except (OSError, ValueError) as e:
        raise TraceError("%s: dataset '/%s' cannot be read, the file is damaged or truncated (%s)" %
                         (path, name, _reason(e))) from None


def load(path):
    """Opens and validates a trace; raises TraceError naming what is missing or damaged."""
    import h5py
    if os.path.isfile(path):
        _probe(path)
    try:
        f = _open(path)
    except TraceError:
        raise
    except Exception as e:  # h5py may raise other types on damaged files
        raise TraceError("%s: cannot open (%s)" % (path, _reason(e))) from None
    try:
        with f:
            attrs, events, steps, kinds, dataset_attrs = _read(f, path)
    except TraceError:
        raise
    except (KeyError, OSError, RuntimeError, ValueError, TypeError) as e:
        # Damaged HDF5 metadata (object headers, B-trees, heaps: e.g. "incorrect metadata checksum") surfaces
        # from h5py as any of these, wherever the damaged object is first touched.
        raise TraceError("%s: damaged HDF5 trace (%s); it cannot be read" % (path, _reason(e))) from None
    # Rows of steps < 0 are unwritten fill, events of steps not in /steps belong to an incomplete step (a killed
    # run): both are left out; the rows kept are validated, reported by their row number in the file.
    step_rows = np.nonzero(steps["step"] >= 0)[0]
    steps = steps[step_rows]
    complete = np.isin(events["step"], steps["step"])
    dropped = int((~complete).sum())
    event_rows = np.nonzero(complete)[0]
    events = events[event_rows]
    kind_codes = {k: int(v) for k, v in kinds.items()}
    validate(path, attrs, events, event_rows, steps, step_rows, kind_codes)
    return Trace(path, attrs, events, steps, kind_codes, dropped, dataset_attrs)


# ---------------------------------------------------------------------------------------------------
# Validation of the rows: vectorised (a 64-rank trace has millions of rows), the first bad row reported


def _refuse(path, bad, where, what):
    """Raises TraceError for the first True of the boolean array `bad`: "PATH: WHERE(i): WHAT(i)", and how many
    more rows are bad the same way."""
    n = int(np.count_nonzero(bad))
    if n:
        i = int(np.argmax(bad))
        more = " (and %d more row%s)" % (n - 1, "s" if n > 2 else "") if n > 1 else ""
        raise TraceError("%s: %s: %s%s" % (path, where(i), what(i), more))


def _num(x):
    """A float for a message as Python writes it: nan, inf, -1.5."""
    return repr(float(x))


def _code_list(codes):
    codes = sorted(codes)
    if codes == list(range(codes[0], codes[-1] + 1)):
        return "%d..%d" % (codes[0], codes[-1])
    return ", ".join(str(c) for c in codes)


def _validate_steps(path, steps, step_rows):
    """/steps: each step once; start_ns in 0..MAX_TIME_NS, makespan_ns >= 0 and start_ns + makespan_ns <=
    MAX_TIME_NS; bubble_ratio a finite ratio in 0..1; samples_per_s and lower_bound_ns finite and >= 0, samples_per_s 0
    exactly when makespan_ns is 0 (the writers write samples / makespan, samples > 0, and 0 for a makespan of 0);
    stage_bubble_ratio a finite ratio in 0..1, or NaN (not computed). The loss is not checked: NaN is documented (no
    loss) and a diverging run may record any value. Returns (sort order of the step ids, start, makespan)."""
    def where(i):
        return "/steps row %d (step %d)" % (int(step_rows[i]), int(steps["step"][i]))

    ids = steps["step"]
    order = np.argsort(ids, kind="stable")
    dup = np.zeros(len(ids), dtype=bool)
    dup[order[1:]] = ids[order[1:]] == ids[order[:-1]]
    _refuse(path, dup, where, lambda i: "step %d is also in /steps row %d; each step appears once (docs/trace.md)" %
            (int(ids[i]), int(step_rows[np.nonzero(ids == ids[i])[0][0]])))
    start = steps["start_ns"].astype(np.int64)
    makespan = steps["makespan_ns"].astype(np.int64)
    _refuse(path, (start < 0) | (start > MAX_TIME_NS), where, lambda i: "start_ns %d is outside 0..%d (ns on the "
            "run's clock, docs/trace.md)" % (start[i], MAX_TIME_NS))
    _refuse(path, (makespan < 0) | (makespan > MAX_TIME_NS - start), where, lambda i: "makespan_ns %d is outside "
            "0..%d (>= 0, and start_ns + makespan_ns within the clock's %d ns; docs/trace.md)" %
            (makespan[i], MAX_TIME_NS - start[i], MAX_TIME_NS))
    with np.errstate(invalid="ignore"):
        # A ratio in 0..1 (a writer's rounding may leave -1e-9: tolerated to -1e-6).
        ratio = lambda v: np.isfinite(v) & (v <= 1.0) & (v >= -1e-6)  # noqa: E731
        non_negative = lambda v: np.isfinite(v) & (v >= 0.0)  # noqa: E731
        for field, ok, allowed in (("bubble_ratio", ratio, "a finite ratio in 0..1"),
                                   ("samples_per_s", non_negative, "finite and >= 0"),
                                   ("lower_bound_ns", non_negative, "finite and >= 0"),
                                   ("stage_bubble_ratio", lambda v: ratio(v) | np.isnan(v),
                                    "a finite ratio in 0..1, or NaN (not computed)")):
            if field in steps.dtype.names:
                v = steps[field].astype(np.float64)
                _refuse(path, ~ok(v), where, lambda i: "%s %s is not %s (docs/trace.md)" % (field, _num(v[i]), allowed))
    rate = steps["samples_per_s"].astype(np.float64)
    _refuse(path, (rate == 0) != (makespan == 0), where, lambda i: "samples_per_s %s with makespan_ns %d; allowed: 0 "
            "exactly when makespan_ns is 0 (the writers write samples / makespan; docs/trace.md)" %
            (_num(rate[i]), makespan[i]))
    return order, start, makespan


def validate(path, attrs, events, event_rows, steps, step_rows, kinds):
    """Refuses (TraceError: one line naming the file, the dataset, the row, the field, its value and what is allowed)
    rows that no writer of docs/trace.md produces, so that every tool refuses a corrupt trace the same way.
    events, steps: the rows kept (complete steps); event_rows, step_rows: their row numbers in the file (0-based);
    kinds: the file's enum {name: code}. /steps as _validate_steps says; /events:

    - kind one of the file's enum values; rank in [0, world_size); peer in [0, world_size) on SEND, RECV, ANNOUNCE
      and HELP_* rows (the other rank, the owner);
    - ready_ns, start_ns, end_ns within +-MAX_TIME_NS;
    - compute rows (F, B, W, BW, HELP_*) end at or after their start and lie within their step's [start_ns,
      start_ns + makespan_ns] in /steps (the writers compute those from exactly these rows: trace::summarize_step);
    - SEND, RECV and ANNOUNCE rows end before their start by at most CLOCK_SLACK_NS, and lie outside the run's steps
      by at most max(the run's length, OUTSIDE_RUN_NS);
    - every step in /steps has a compute row (the writers record a step only with its ops)."""
    order, start, makespan = _validate_steps(path, steps, step_rows)
    ids = steps["step"]
    world = attrs["world_size"]
    names = {v: k for k, v in kinds.items()}
    kind, rank, peer = events["kind"], events["rank"], events["peer"]

    def where(i):
        return "/events row %d (step %d, rank %d)" % (int(event_rows[i]), int(events["step"][i]), int(rank[i]))

    def name(i):
        return names[int(kind[i])]

    _refuse(path, ~np.isin(kind, list(kinds.values())), where, lambda i: "kind %d is not one of the event kinds %s "
            "(docs/trace.md)" % (int(kind[i]), _code_list(kinds.values())))
    _refuse(path, (rank < 0) | (rank >= world), where, lambda i: "rank %d is outside [0, world_size=%d)" %
            (int(rank[i]), world))
    own = np.isin(kind, [kinds[k] for k in COMPUTE_KINDS])
    _refuse(path, ~own & ((peer < 0) | (peer >= world)), where, lambda i: "peer %d of a %s row is outside "
            "[0, world_size=%d) (the other rank; docs/trace.md)" % (int(peer[i]), name(i), world))
    times = [(f, events[f].astype(np.int64)) for f in ("ready_ns", "start_ns", "end_ns")]
    for f, t in times:
        _refuse(path, (t < -MAX_TIME_NS) | (t > MAX_TIME_NS), where, lambda i: "%s %d is beyond the trace clock's "
                "range of +-%d ns (docs/trace.md)" % (f, t[i], MAX_TIME_NS))
    t0, t1 = times[1][1], times[2][1]
    compute = np.isin(kind, [kinds[k] for k in BUSY_KINDS if k in kinds])
    _refuse(path, compute & (t1 < t0), where, lambda i: "end_ns %d < start_ns %d of a compute op (%s); allowed: "
            "end_ns >= start_ns (docs/trace.md)" % (t1[i], t0[i], name(i)))
    # The /steps row of each event's step (every kept event's step is in /steps, once).
    at = order[np.searchsorted(ids[order], events["step"])] if len(ids) else np.zeros(len(events), dtype=np.int64)
    w0, w1 = start[at], start[at] + makespan[at]
    _refuse(path, compute & (t0 < w0), where, lambda i: "start_ns %d of a compute op (%s) is before its step's "
            "start_ns %d in /steps; allowed: within its step's [start_ns, start_ns + makespan_ns] (docs/trace.md)" %
            (t0[i], name(i), w0[i]))
    _refuse(path, compute & (t1 > w1), where, lambda i: "end_ns %d of a compute op (%s) is after its step's end in "
            "/steps (start_ns %d + makespan_ns %d = %d); allowed: within its step's [start_ns, start_ns + makespan_ns] "
            "(docs/trace.md)" % (t1[i], name(i), w0[i], makespan[at[i]], w1[i]))
    other = ~compute
    _refuse(path, other & (t1 < t0 - CLOCK_SLACK_NS), where, lambda i: "end_ns %d < start_ns %d of a %s row; "
            "allowed: end_ns >= start_ns - %d (the ranks' clock alignment; docs/trace.md)" %
            (t1[i], t0[i], name(i), CLOCK_SLACK_NS))
    if len(ids) and other.any():
        lo, hi = int(start.min()), int((start + makespan).max())
        margin = max(hi - lo, OUTSIDE_RUN_NS)
        low, high = max(lo - margin, -MAX_TIME_NS), min(hi + margin, MAX_TIME_NS)
        for f, t in times[1:]:
            _refuse(path, other & ((t < low) | (t > high)), where, lambda i: "%s %d of a %s row is outside the run's "
                    "steps in /steps [%d, %d] by more than max(the run's length, %d ns); allowed: %d..%d "
                    "(docs/trace.md)" % (f, t[i], name(i), lo, hi, OUTSIDE_RUN_NS, low, high))
    if len(ids) and not len(events):
        raise TraceError("%s: /events has no rows, but /steps has %d step%s (%s): every step in /steps has its ops in "
                         "/events (docs/trace.md)" % (path, len(ids), "s" if len(ids) > 1 else "",
                                                      _ranges([int(s) for s in ids])))
    has_ops = np.bincount(at[compute], minlength=len(ids)) > 0
    _refuse(path, ~has_ops, lambda i: "/steps row %d (step %d)" % (int(step_rows[i]), int(ids[i])),
            lambda i: "the step has no compute op (F, B, W, BW or HELP_*) in /events: every step in /steps has its "
            "ops there (docs/trace.md)")


def _read(f, path):
    """The validated contents of an open trace: (attrs, events, steps, kind enum, dataset attributes)."""
    import h5py
    attrs = {}
    missing = [a for a in INT_ATTRS + STR_ATTRS + LIST_ATTRS if a not in f.attrs]
    if missing:
        raise TraceError("%s: missing root attribute %s (see docs/trace.md)" %
                         (path, ", ".join("'%s'" % m for m in missing)))
    try:
        for a in INT_ATTRS:
            attrs[a] = int(f.attrs[a])
        for a in STR_ATTRS:
            attrs[a] = _str(f.attrs[a])
        attrs["hostnames"] = [_str(h) for h in np.atleast_1d(f.attrs["hostnames"])]
    except (OSError, ValueError, TypeError) as e:
        raise TraceError("%s: root attributes cannot be read (%s)" % (path, _reason(e))) from None
    if attrs["schema_version"] < 1 or attrs["schema_version"] > SUPPORTED_SCHEMA:
        raise TraceError("%s: schema_version %d is not supported (these tools read 1..%d)" %
                         (path, attrs["schema_version"], SUPPORTED_SCHEMA))
    # One rank per pipeline stage, at most conductor's 65536 (a larger world_size sized per-rank arrays past the
    # machine's memory before any row was read).
    if not 1 <= attrs["world_size"] <= MAX_RANKS:
        raise TraceError("%s: world_size %d is outside 1..%d (docs/trace.md)" % (path, attrs["world_size"], MAX_RANKS))
    if attrs["world_size"] != attrs["pipeline"]:
        raise TraceError("%s: world_size %d differs from pipeline %d; allowed: one rank per pipeline stage, the same "
                         "number (docs/trace.md)" % (path, attrs["world_size"], attrs["pipeline"]))
    # /steps before /events: a running writer appends a step's ops to /events before its /steps row, so every step
    # read has its ops in the /events read after it (the other order found, now and then, a step just completed
    # without its ops, and called a healthy trace damaged).
    steps = _table(f, path, "steps", STEP_FIELDS)
    events = _table(f, path, "events", EVENT_FIELDS)
    dataset_attrs = {name: _dataset_attrs(f[name]) for name in ("events", "steps")}
    kinds = h5py.check_enum_dtype(f["events"].dtype["kind"])
    if kinds is None:
        raise TraceError("%s: field 'kind' of '/events' is not an HDF5 enum (see docs/trace.md)" % path)
    missing = [k for k in COMPUTE_KINDS if k not in kinds]
    if missing:
        raise TraceError("%s: enum 'kind' of '/events' lacks %s" % (path, ", ".join(missing)))
    return attrs, events, steps, kinds, dataset_attrs


def _dataset_attrs(ds):
    """A dataset's attributes as Python values (strings decoded, arrays as lists); unreadable ones are left out:
    they are documentation, never needed to use the data."""
    out = {}
    for k in ds.attrs:
        try:
            v = ds.attrs[k]
        except (OSError, ValueError, TypeError):
            continue
        if isinstance(v, np.ndarray) and v.ndim == 1:
            out[k] = [_str(x) if isinstance(x, (bytes, str)) else x.item() for x in v]
        elif isinstance(v, (bytes, str)):
            out[k] = _str(v)
        else:
            out[k] = v.item() if hasattr(v, "item") else v
    return out


def step_range(text):
    """argparse type of a --steps value: "N" or "A..B" (steps counted as the trace counts them, from 0)."""
    import argparse
    import re
    m = re.fullmatch(r"([0-9]+)(?:\.\.([0-9]+))?", text)
    first = last = -1
    if m:
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
    if first < 0 or last < first:
        raise argparse.ArgumentTypeError("'%s': expected a step N or a range A..B with 0 <= A <= B" % printable(text))
    return first, last


def require_steps(trace):
    if len(trace.steps) == 0:
        raise TraceError("%s: /steps is empty: no step completed" % trace.path)


def pick_step(trace, step):
    """The step to show: `step` if given (must exist), else the last complete step."""
    require_steps(trace)
    if step is None:
        return int(trace.steps["step"][-1])
    trace.step_row(step)  # raises if absent
    return int(step)


# ---------------------------------------------------------------------------------------------------
# Per-step measurement


def step_figures(trace, step):
    """The per-step figures, recomputed from /events with THE definition (docs/trace.md)."""
    ev = trace.step_events(step, compute_only=True)
    if len(ev) == 0:
        raise TraceError("%s: step %d has no compute event in /events" % (trace.path, step))
    first = int(ev["start_ns"].min())
    last = int(ev["end_ns"].max())
    makespan = last - first
    busy = np.zeros(trace.world_size, dtype=np.int64)
    np.add.at(busy, ev["rank"], (ev["end_ns"] - ev["start_ns"]).astype(np.int64))
    bubble = 1.0 - busy.sum() / float(trace.world_size * makespan) if makespan > 0 else 0.0
    span = np.full(trace.world_size, -1, dtype=np.int64)  # -1: the rank ran no compute op in this step
    for r in np.unique(ev["rank"]):
        mine = ev[ev["rank"] == r]
        span[r] = int(mine["end_ns"].max()) - int(mine["start_ns"].min())
    return {"step": step, "start_ns": first, "end_ns": last, "makespan_ns": makespan,
            "busy_ns": busy, "bubble_ratio": bubble, "lower_bound_ns": float(busy.max()),
            "span_ns": span, "stage_bubble_ratio": stage_bubble_ratio(busy, span)}


def stage_bubble_ratio(busy, span):
    """Mean over ranks with span >= 0 of 1 - busy / span (0 where span is 0); 0 when no rank has an op."""
    ratios = [1.0 - b / float(s) if s > 0 else 0.0 for b, s in zip(busy, span) if s >= 0]
    return float(sum(ratios) / len(ratios)) if ratios else 0.0


def stored_stage_bubble(trace, row):
    """The stored per-stage bubble of a /steps row, or None for a trace written before that column existed or a NaN
    (not computed, docs/trace.md)."""
    if "stage_bubble_ratio" not in trace.steps.dtype.names:
        return None
    v = float(row["stage_bubble_ratio"])
    return None if v != v else v


def idle_split(trace, step, figures=None):
    """Per rank idle time of a step, split into warm-up / steady / cool-down and into waiting for data
    or memory / ready but not picked (definitions in docs/trace.md). Returns a list of dicts, one per rank."""
    fig = figures or step_figures(trace, step)
    t0, t1 = fig["start_ns"], fig["end_ns"]
    ev = trace.step_events(step, compute_only=True)
    out = []
    for r in range(trace.world_size):
        mine = ev[ev["rank"] == r]
        mine = mine[np.argsort(mine["start_ns"], kind="stable")]
        d = {"rank": r, "busy_ns": int(fig["busy_ns"][r]), "warmup_ns": 0, "steady_ns": 0, "cooldown_ns": 0,
             "waiting_ns": 0, "not_picked_ns": 0}
        if len(mine) == 0:
            d["cooldown_ns"] = d["waiting_ns"] = t1 - t0  # a rank with no work this step: all idle, nothing ready
            d["idle_ns"] = t1 - t0
            out.append(d)
            continue
        starts = mine["start_ns"].astype(np.int64)
        ends = mine["end_ns"].astype(np.int64)
        ready = mine["ready_ns"].astype(np.int64)
        # free_at[i]: when the rank became free before op i (ops run one at a time on a rank)
        free_at = np.maximum(t0, np.concatenate(([t0], np.maximum.accumulate(ends)[:-1])))
        gaps = np.maximum(0, starts - free_at)
        # earliest ready time among the ops not yet started at op i: some op was ready from then on
        pending_ready = np.minimum.accumulate(ready[::-1])[::-1]
        not_picked = np.maximum(0, starts - np.maximum(free_at, pending_ready))
        d["warmup_ns"] = int(gaps[0])
        d["steady_ns"] = int(gaps[1:].sum())
        d["not_picked_ns"] = int(not_picked.sum())
        d["waiting_ns"] = int(gaps.sum()) - d["not_picked_ns"]
        tail = max(0, t1 - max(t0, int(ends.max())))  # after its last op nothing of the rank is pending
        d["cooldown_ns"] = tail
        d["waiting_ns"] += tail
        d["idle_ns"] = d["warmup_ns"] + d["steady_ns"] + d["cooldown_ns"]
        out.append(d)
    return out


# A HELP_* row computed slices of its owner's op of this kind (docs/trace.md).
HELP_OF = {"HELP_F": "F", "HELP_B": "B", "HELP_W": "W", "HELP_BW": "BW"}


def group_ids(columns):
    """One integer per row, equal for rows whose values agree in every one of `columns` (equal-length 1-D
    arrays): a composite key made usable by numpy (bincount, indexing) without one Python tuple per row."""
    n = len(columns[0]) if columns else 0
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(columns[::-1])
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for c in columns:
        c = np.asarray(c)[order]
        new[1:] |= c[1:] != c[:-1]
    ids = np.empty(n, dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def help_links(trace, events):
    """[(help_row, owner_row)] for every HELP_* row of `events` (one step's rows, or all): the owner's op is the
    row of rank = the help's peer with the same step, stage, microbatch and the kind it helped with; owner_row is
    None where that op is not in `events` (the last such row where several match)."""
    codes = trace.kind_codes
    base_of = {codes[h]: codes[b] for h, b in HELP_OF.items() if h in codes and b in codes}
    kind = events["kind"]
    helps = np.nonzero(np.isin(kind, list(base_of)))[0]
    if len(helps) == 0:
        return []
    # Vectorised over rows (a 64-rank trace has ~10^6): the key (step, rank, stage, microbatch, kind) of every
    # owner candidate and of every help (rank = its peer, kind = the kind it helped with) as one group number.
    owners = np.nonzero(np.isin(kind, [codes[k] for k in COMPUTE_KINDS]))[0]
    help_base = np.array([base_of[int(k)] for k in kind[helps]], dtype=np.int64)
    ids = group_ids([np.concatenate((events[f][owners], events[f][helps])).astype(np.int64)
                     for f in ("step", "stage", "microbatch")] +
                    [np.concatenate((events["rank"][owners], events["peer"][helps])).astype(np.int64),
                     np.concatenate((kind[owners].astype(np.int64), help_base))])
    owner_of = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    np.maximum.at(owner_of, ids[:len(owners)], owners)  # rows ascend: the last owner row of a key wins
    return [(h, None if o < 0 else o) for h, o in zip(helps.tolist(), owner_of[ids[len(owners):]].tolist())]


def migration_split(trace, events):
    """Per rank of `events`: helped_ns, the time it computed slices of other ranks' ops (its HELP_* rows), and
    recovered_ns, the time other ranks computed slices of its own ops (HELP_* rows naming it as owner): the work
    migration took off it, measured on the helpers."""
    helped = np.zeros(trace.world_size, dtype=np.int64)
    recovered = np.zeros(trace.world_size, dtype=np.int64)
    for i in range(len(events)):
        if trace.kind_name(events["kind"][i]) in HELP_OF:
            d = max(0, int(events["end_ns"][i]) - int(events["start_ns"][i]))
            helped[int(events["rank"][i])] += d
            owner = int(events["peer"][i])
            if 0 <= owner < trace.world_size:
                recovered[owner] += d
    return helped, recovered


def _producer_key(kind, stage, mb, num_stages):
    """(kind, stage, microbatch) of the op whose output this op consumes, or None (docs/trace.md)."""
    if kind == "F":
        return ("F", stage - 1, mb) if stage > 0 else None
    if kind in ("B", "BW"):
        return ("F", stage, mb) if stage == num_stages - 1 else ("B|BW", stage + 1, mb)
    if kind == "W":
        return ("B", stage, mb)
    return None


def critical_path(trace, step):
    """Walk back from the op that ends last (docs/trace.md). Returns dict with the ops on the path (in
    time order) and the split of the makespan into compute, transfer and slack."""
    ev = trace.step_events(step, compute_only=True)
    if len(ev) == 0:
        raise TraceError("%s: step %d has no compute event in /events" % (trace.path, step))
    names = [trace.kind_name(k) for k in ev["kind"]]
    num_stages = int(ev["stage"].max()) + 1
    index = {}
    for i, n in enumerate(names):
        index[(n, int(ev["stage"][i]), int(ev["microbatch"][i]))] = i
    by_rank = {}
    for i in np.argsort(ev["start_ns"], kind="stable"):
        by_rank.setdefault(int(ev["rank"][i]), []).append(int(i))
    pos = {i: (r, k) for r, lst in by_rank.items() for k, i in enumerate(lst)}
    first = int(ev["start_ns"].min())

    cur = int(np.argmax(ev["end_ns"]))
    path, links = [cur], []
    while True:
        r, k = pos[cur]
        prev = by_rank[r][k - 1] if k > 0 else None
        prev_end = int(ev["end_ns"][prev]) if prev is not None else first
        ready = int(ev["ready_ns"][cur])
        nxt, via = None, None
        if ready > prev_end or prev is None:
            key = _producer_key(names[cur], int(ev["stage"][cur]), int(ev["microbatch"][cur]), num_stages)
            if key is not None:
                kinds = key[0].split("|")
                for kd in kinds:
                    j = index.get((kd, key[1], key[2]))
                    if j is not None and int(ev["end_ns"][j]) <= int(ev["start_ns"][cur]):
                        nxt, via = j, "data"
                        break
        if nxt is None and prev is not None:
            nxt, via = prev, "rank"
        if nxt is None:
            break
        links.append(via)
        path.append(nxt)
        cur = nxt
    path.reverse()
    links.reverse()
    compute = transfer = slack = 0
    ops = []
    for n, i in enumerate(path):
        s, e, rd = int(ev["start_ns"][i]), int(ev["end_ns"][i]), int(ev["ready_ns"][i])
        compute += e - s
        if n == 0:
            slack += s - first
        else:
            pe = int(ev["end_ns"][path[n - 1]])
            if links[n - 1] == "data":
                t = max(0, min(rd, s) - pe)
                transfer += t
                slack += (s - pe) - t
            else:
                slack += s - pe
        ops.append({"rank": int(ev["rank"][i]), "kind": names[i], "stage": int(ev["stage"][i]),
                    "microbatch": int(ev["microbatch"][i]), "ready_ns": rd, "start_ns": s, "end_ns": e,
                    "via": links[n - 1] if n > 0 else "start"})
    length = int(ev["end_ns"][path[-1]]) - first
    return {"step": step, "length_ns": length, "compute_ns": compute, "transfer_ns": transfer,
            "slack_ns": slack, "ops": ops}


def run_totals(trace, steps=None):
    """Figures over steps, from the stored /steps rows (the figures the run reported): mean makespan, throughput
    = samples of the steps / their total makespan, bubble ratios = the mean of the per-step values."""
    st = trace.steps if steps is None else trace.steps[np.isin(trace.steps["step"], steps)]
    if len(st) == 0:
        raise TraceError("%s: no step to summarize" % trace.path)
    mk = st["makespan_ns"].astype(np.float64)
    total = mk.sum()
    samples = (st["samples_per_s"] * mk * 1e-9).sum()
    # Over steps the bubble ratio is the mean of the per-step values, as summary.json and bubbles.py take it.
    bubble = float(st["bubble_ratio"].mean())
    # The per-stage bubble is a per-step mean over ranks; over steps it is averaged (as summary.json does).
    # None for a trace without the column, or where every step's value is NaN (not computed).
    stage = None
    if "stage_bubble_ratio" in st.dtype.names:
        known = st["stage_bubble_ratio"][~np.isnan(st["stage_bubble_ratio"])]
        stage = float(known.mean()) if len(known) else None
    return {"steps": int(len(st)), "mean_makespan_ns": float(mk.mean()), "total_ns": float(total),
            "samples_per_s": float(samples / (total * 1e-9)) if total > 0 else 0.0, "bubble_ratio": bubble,
            "stage_bubble_ratio": stage, "final_loss": float(st["loss"][-1])}


# ---------------------------------------------------------------------------------------------------
# CLI plumbing


# SIGINT, SIGTERM and SIGHUP stop a tool alike: the exception Stopped unwinds it (an OutputSet removes its unfinished
# files on the way), and main_guard says so in one line and exits 128 + the signal's number (130, 143, 129).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """Raised in the main thread by SIGINT, SIGTERM or SIGHUP once main_guard runs (a KeyboardInterrupt: what
    Ctrl-C raises)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _stop(signum, frame):
    for s in STOP_SIGNALS:  # the cleanup that follows is not cut short by a second signal
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(s) is _stop:
                signal.signal(s, signal.SIG_IGN)
    raise Stopped(signum)


def catch_stop_signals():
    """SIGINT, SIGTERM and SIGHUP raise Stopped in the main thread, except those the tool was started with ignored
    (nohup's SIGHUP, a background job's SIGINT), which stay ignored."""
    for s in STOP_SIGNALS:
        with contextlib.suppress(OSError, ValueError):  # ValueError: not the main thread
            if signal.getsignal(s) is not signal.SIG_IGN:
                signal.signal(s, _stop)


@contextlib.contextmanager
def _signals_held():
    """STOP_SIGNALS wait (blocked) until the block ends: a temporary file is created and recorded, or every output
    renamed into place, without a signal in between."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    except (AttributeError, OSError, ValueError):
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def tell(line):
    """Prints a line on stderr (messages, notes, warnings); a stderr that is closed or cannot be written (a closed
    terminal, SIGHUP's usual cause) is ignored: the exit status still tells."""
    if sys.stderr is None:  # print(file=None) would write to standard output
        return
    try:
        print(line, file=sys.stderr)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def stdout_error(e):
    """An OSError writing standard output as what to raise: a TraceError saying so (exit 2), or a BrokenPipeError
    as it is (the reader left, as `TOOL ... | head` does: exit 1 without a message)."""
    if isinstance(e, BrokenPipeError):
        return e
    return TraceError("cannot write to standard output (%s)" % (e.strerror or e))


def say(text):
    """Writes `text` to standard output, for what a tool reports besides its output (wrote FILE ...). A closed
    standard output takes nothing (as print()); a failed write is a TraceError (stdout_error)."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.write(text)
    except OSError as e:
        raise stdout_error(e) from None


def _flush_stdout():
    if sys.stdout is not None:
        try:
            sys.stdout.flush()
        except OSError as e:
            raise stdout_error(e) from None


def _settle_stdout():
    """Where standard output cannot take what is left in its buffer (already told, or a broken pipe), points it at
    /dev/null: the interpreter's own flush at exit would print a second, raw 'Exception ignored ...'."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, sys.stdout.fileno())
            os.close(fd)


def _open_closed_std_fds():
    """Opens /dev/null on a standard descriptor (0, 1, 2) the tool was started without (`TOOL >&-`): else the next
    file opened would get it, and a library printing to it would write into that file. sys.stdout stays None."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)


def main_guard(fn):
    """Runs fn(); any error becomes 'PROG: error: MESSAGE' on stderr and exit status 1 (2 for TraceError
    and bad arguments), never a Python traceback. SIGINT, SIGTERM and SIGHUP (Stopped): 'PROG: stopped by
    SIGTERM ...' and exit status 128 + the signal's number, no output file left half-written."""
    try:
        _main_guard(fn)
    finally:
        _settle_stdout()


def _main_guard(fn):
    prog = os.path.basename(sys.argv[0])
    _open_closed_std_fds()
    catch_stop_signals()
    warnings.showwarning = lambda message, category, *_args, **_kw: tell(
        "%s: warning: %s" % (prog, printable(" ".join(str(message).split()))))  # one line, not the library's two
    try:
        code = fn()
        _flush_stdout()
    except TraceError as e:
        tell("%s: error: %s" % (prog, printable(e)))
        sys.exit(2)
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        tell("%s: stopped by %s; no output file is left half-written" % (prog, signal.Signals(signum).name))
        sys.exit(128 + signum)
    except SystemExit:
        raise
    except BrokenPipeError:
        sys.exit(1)
    except ImportError as e:
        if e.name in ("numpy", "h5py"):  # e.g. an h5py whose HDF5 library is missing
            tell(missing_module_message(e.name, e))
        else:
            tell("%s: error: %s: %s" % (prog, type(e).__name__, printable(e)))
        sys.exit(1)
    except Exception as e:  # noqa: BLE001 - the promise is: never a traceback
        tell("%s: error: %s: %s" % (prog, type(e).__name__, printable(e)))
        sys.exit(1)
    sys.exit(code or 0)


def same_file(a, b):
    """Whether paths a and b name one file: os.path.samefile where both exist, else equal real paths."""
    if os.path.exists(a) and os.path.exists(b):
        try:
            return os.path.samefile(a, b)
        except OSError:
            pass
    return os.path.realpath(a) == os.path.realpath(b)


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def is_hdf5(path):
    """Whether `path` is a regular file in HDF5 format: the format signature at offset 0, 512, 1024, 2048, ...
    (where the HDF5 library looks for the superblock: after a user block, if any). A path that is not a regular
    file (absent, a folder, a pipe, a device such as /dev/stdout) or cannot be read: False."""
    if not os.path.isfile(path):  # before opening it: opening a named pipe would block
        return False
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = 0
            while offset + len(HDF5_SIGNATURE) <= size:
                f.seek(offset)
                if f.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                    return True
                offset = 512 if offset == 0 else 2 * offset
    except OSError:
        return False
    return False


# What conductor and its job scripts write into a run folder (src/cli/run_folder.cpp's kRunFiles, and
# jobs/common.sh's records): a tool's output of that name in a run folder would replace the run's own record.
RUN_RECORDS = ("trace.h5", "summary.json", "metrics.jsonl", "resolved.yaml", "policy.pt", "curve.csv", "summary.csv",
               "summary.txt", "deck.resolved.yaml", "job.txt", "job.log", "combination.txt")


def run_record(path):
    """Whether existing file `path` is one of a run folder's records: a name conductor writes, in a folder that
    holds a run's resolved deck (every command writes resolved.yaml; a job's folder has deck.resolved.yaml)."""
    folder = os.path.dirname(os.path.abspath(path))
    return (os.path.basename(path) in RUN_RECORDS and os.path.isfile(path) and
            any(os.path.isfile(os.path.join(folder, f)) for f in ("resolved.yaml", "deck.resolved.yaml")))


def check_outputs(inputs, outputs):
    """Refuses (TraceError) an output that is one of the input traces, an existing HDF5 file (another run's trace
    or checkpoint), a run folder's record (summary.json, resolved.yaml, ...: run_record) or another output of the
    same command: nothing already written by a run is overwritten; an earlier report of a tool is.
    inputs: trace paths; outputs: [(what, path)], `what` naming the option (e.g. "-o"); "-" (stdout) and None
    are skipped."""
    for what, path in outputs:
        if path == "-" and sys.stdout is None:
            raise TraceError("standard output is closed: nowhere to write the output (%s -); give %s FILE" %
                             (what, what))
    outs = [(what, path) for what, path in outputs if path and path != "-"]
    for i, (what, path) in enumerate(outs):
        for src in inputs:
            if same_file(path, src):
                raise TraceError("%s: the output (%s) is the input trace %s; writing it would overwrite the trace, "
                                 "choose another output file" % (path, what, src))
        if is_hdf5(path):
            raise TraceError("%s: the output (%s) is an HDF5 file (a trace?); refusing to overwrite it, choose "
                             "another output file" % (path, what))
        if run_record(path):
            raise TraceError("%s: the output (%s) is a record of the run in %s; refusing to overwrite it, choose "
                             "another output file" % (path, what, os.path.dirname(path) or "."))
        for other_what, other in outs[:i]:
            if same_file(path, other):
                raise TraceError("%s: the outputs %s and %s are the same file; choose different files" %
                                 (path, other_what, what))


def output_error(path, e):
    """An OSError writing output file `path` as a TraceError naming the file (one line, exit 2)."""
    return TraceError("%s: cannot write the output file (%s)" % (path, e.strerror or e))


def check_output_folder(path):
    """Refuses (TraceError, as output_error) output file `path` where writing it would fail for its folder (missing,
    not a folder, not writable: the file is written as a temporary file there, OutputSet) or for the file itself (a
    folder, or not writable): for a tool that writes more than one file, so that it names this one before writing
    any (compare.py's -o: it writes its chart first)."""
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):  # a device or a pipe: written in place
            if not os.access(path, os.W_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
            return
        final = os.path.realpath(path) if os.path.islink(path) else path
        folder = os.path.dirname(final) or "."
        if not stat.S_ISDIR(os.stat(folder).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
            # os.access answers False on a read-only file system too: say which.
            code = errno.EROFS if os.statvfs(folder).f_flag & os.ST_RDONLY else errno.EACCES
            raise OSError(code, os.strerror(code))
    except OSError as e:
        raise output_error(path, e) from None


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class _Output:
    """A text file an OutputSet writes (`name`: the output's path as given), or standard output (not owned): errors
    writing or closing it are TraceErrors naming it (one line, exit 2; stdout_error for standard output)."""

    def __init__(self, f, name, owned=True):
        self.f, self.name, self._owned = f, name, owned

    def _error(self, e):
        return output_error(self.name, e) if self._owned else stdout_error(e)

    def write(self, text):
        try:
            return self.f.write(text)
        except OSError as e:
            raise self._error(e) from None

    def flush(self):
        try:
            self.f.flush()
        except OSError as e:
            raise self._error(e) from None

    @property
    def closed(self):
        return self.f.closed

    def close(self):
        """Closes the file (flushes standard output, which stays open)."""
        if not self._owned:
            self.flush()
        elif not self.f.closed:
            try:
                self.f.close()
            except OSError as e:
                raise output_error(self.name, e) from None


def _same_file_as_fd(path, fd):
    """Whether `path` names the file open as descriptor `fd` (False where either cannot be looked at)."""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except (OSError, ValueError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _is_stream(path, st):
    """Whether writing `path` writes an open stream rather than a file of its own: a path through /dev or /proc
    (/dev/stdout, /dev/fd/3, /proc/self/fd/1), or the file standard output or error is redirected to."""
    first = os.path.abspath(path).split(os.sep)[1:2]
    return first in (["dev"], ["proc"]) or _same_file_as_fd(path, 1) or _same_file_as_fd(path, 2)


class OutputSet:
    """Output files written whole or not at all. Each file is written to a new temporary file beside it
    (.NAME.XXXXXXXX.tmp in its folder, with the mode the file has or would get), and commit() renames them all into
    place once every one is complete; until then an earlier file of that name is untouched. On an error, or a signal
    (Stopped), the temporary files are removed (discard()), so a full disk or a Ctrl-C leaves the earlier output as
    it was and no partial file. An existing output that is not a regular file (/dev/null, a named pipe) is written in
    place; "-" is standard output. Use output_files()."""

    def __init__(self):
        self._pending = []  # [temporary path, final path, path as given]
        self._files = []

    def path(self, path):
        """The path to write output file `path` to: a new temporary file, renamed to `path` by commit(); or `path`
        itself where it exists and is not a regular file, names an open stream (/dev/stdout, /dev/fd/N, the file
        standard output or error is redirected to: renaming over it would drop what the stream writes next), or
        sits in a folder this user cannot write but is writable itself (as before: written in place). Errors (no
        such folder, not writable, a folder) are TraceErrors naming `path`."""
        try:
            if os.path.isdir(path):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            if os.path.exists(path):
                st = os.stat(path)
                if not stat.S_ISREG(st.st_mode) or _is_stream(path, st):
                    return path
                if not os.access(path, os.W_OK):  # as opening it to write would: replacing it is not asked for
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
                if not os.access(os.path.dirname(os.path.realpath(path)) or ".", os.W_OK | os.X_OK):
                    return path
                mode = stat.S_IMODE(st.st_mode)
            else:
                mode = 0o666 & ~_umask()
            final = os.path.realpath(path) if os.path.islink(path) else path  # a link keeps pointing at the file
            base = os.fsdecode(os.fsencode(os.path.basename(final))[:160])  # within NAME_MAX with the additions
            with _signals_held():
                fd, tmp = tempfile.mkstemp(prefix="." + base + ".", suffix=".tmp", dir=os.path.dirname(final) or ".")
                self._pending.append([tmp, final, path])
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        except OSError as e:
            raise output_error(path, e) from None
        return tmp

    def open(self, path, newline=None):
        """A text file (UTF-8) to write output `path` with (write, flush, close); "-", or a path naming the file
        standard output goes to (/dev/stdout in a job whose output is slurm-N.out): standard output itself."""
        if path == "-" or _same_file_as_fd(path, 1):
            if sys.stdout is None:
                raise TraceError("standard output is closed: nowhere to write the output; give a FILE")
            out = _Output(sys.stdout, "standard output", owned=False)
        else:
            target = self.path(path)
            try:
                out = _Output(open(target, "w", newline=newline, encoding="utf-8", errors="backslashreplace"), path)
            except OSError as e:
                raise output_error(path, e) from None
        self._files.append(out)
        return out

    def commit(self):
        """Closes the files and renames every temporary file into place."""
        for f in self._files:
            f.close()
        with _signals_held():
            while self._pending:
                tmp, final, path = self._pending[0]
                try:
                    os.replace(tmp, final)
                except OSError as e:
                    raise output_error(path, e) from None
                self._pending.pop(0)

    def discard(self):
        """Closes the files, ignoring errors, and removes the temporary files not renamed into place."""
        with _signals_held():
            for f in self._files:
                with contextlib.suppress(Exception):
                    if f._owned:
                        f.f.close()
            for tmp, _, _ in self._pending:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            self._pending.clear()


@contextlib.contextmanager
def output_files():
    """`with output_files() as outs:` ... outs.open(path) or outs.path(path) for each output; all are renamed into
    place when the block ends without an error, none otherwise (OutputSet)."""
    outs = OutputSet()
    try:
        yield outs
        outs.commit()
    finally:
        outs.discard()


@contextlib.contextmanager
def output_file(path, newline=None):
    """`with output_file(path) as f:` writes text file `path` ("-": standard output), whole or not at all
    (OutputSet); an error opening, writing or closing it becomes a TraceError naming the file."""
    with output_files() as outs:
        yield outs.open(path, newline=newline)


def _writable_folder(path):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return False
    return os.path.isdir(path) and os.access(path, os.W_OK)


def prepare_matplotlib():
    """What the tools need before matplotlib is imported: where its configuration and cache folders (MPLCONFIGDIR
    unset: $XDG_CONFIG_HOME or ~/.config, $XDG_CACHE_HOME or ~/.cache) cannot be written (HOME read-only or absent,
    as in some batch jobs), MPLCONFIGDIR is a temporary folder removed at exit (matplotlib made one too, and warned
    at length); a glyph missing from its font (a run named in a script DejaVu Sans lacks) is drawn as a box,
    without matplotlib's warning."""
    warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
    if os.environ.get("MPLCONFIGDIR") or "matplotlib" in sys.modules:
        return
    home = os.path.expanduser("~")
    config = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "matplotlib")
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "matplotlib")
    if _writable_folder(config) and _writable_folder(cache):
        return
    try:
        folder = tempfile.mkdtemp(prefix="conductor-matplotlib-")
    except OSError:
        return  # no temporary folder either: matplotlib says what it does
    atexit.register(shutil.rmtree, folder, True)
    os.environ["MPLCONFIGDIR"] = folder


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display), after prepare_matplotlib()."""
    prepare_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def check_image_output(path, what="-o"):
    """Refuses (TraceError) an image output whose extension matplotlib cannot write, before any work is done."""
    prepare_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    formats = FigureCanvasAgg.get_supported_filetypes()
    ext = os.path.splitext(path)[1][1:].lower()
    if ext not in formats:
        raise TraceError("%s: %s must name an image file ending in .png, .svg or .pdf (%s; supported: %s)" %
                         (path, what, "no extension" if not ext else "'.%s' is not an image format" % ext,
                          ", ".join(sorted(formats))))


# matplotlib's Agg backend draws at most 2^16 pixels a side.
MAX_IMAGE_SIDE_PX = 1 << 16


def save_figure(fig, path, dpi, outs=None):
    """fig.savefig(path), whole or not at all (OutputSet `outs`, else its own), with a write error naming the file
    (TraceError), and a bitmap over matplotlib's 2^16 pixels a side refused naming --dpi and the largest that fits
    (it surfaced as a ValueError, exit 1)."""
    if outs is None:
        with output_files() as own:
            return save_figure(fig, path, dpi, own)
    w, h = fig.get_size_inches()
    vector = os.path.splitext(path)[1].lower() in (".svg", ".svgz", ".pdf", ".eps", ".ps")
    if not vector and max(w, h) * dpi >= MAX_IMAGE_SIDE_PX:
        raise TraceError("%s: at --dpi %d the image would be %d x %d pixels, over the %d a side matplotlib draws; "
                         "use --dpi %d or less, or a vector format (.svg, .pdf)" %
                         (path, dpi, round(w * dpi), round(h * dpi), MAX_IMAGE_SIDE_PX,
                          int((MAX_IMAGE_SIDE_PX - 1) / max(w, h))))
    target = outs.path(path)
    try:
        fig.savefig(target, dpi=dpi, format=os.path.splitext(path)[1][1:].lower() or None)
    except OSError as e:
        raise output_error(path, e) from None


def note_dropped(trace):
    if trace.dropped_events:
        tell("note: %s: ignored %d events of an incomplete step (the run was killed while writing)" %
             (trace.shown, trace.dropped_events))
