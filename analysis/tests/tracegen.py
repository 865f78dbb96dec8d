"""Builds small traces with h5py, following docs/trace.md only (not conductor_trace.py), for the tests."""
import h5py
import numpy as np

KINDS = {"F": 0, "B": 1, "W": 2, "BW": 3, "SEND": 4, "RECV": 5, "ANNOUNCE": 6, "HELP_F": 7, "HELP_B": 8, "HELP_W": 9,
         "HELP_BW": 10}
KIND_T = h5py.enum_dtype(KINDS, basetype="i1")
EVENT_T = np.dtype([("step", "<i4"), ("rank", "<i4"), ("stage", "<i4"), ("chunk", "<i4"), ("microbatch", "<i4"),
                    ("kind", KIND_T), ("ready_ns", "<i8"), ("start_ns", "<i8"), ("end_ns", "<i8"),
                    ("bytes", "<i8"), ("wait_ns", "<i8"), ("peer", "<i4"), ("migrated", "i1")])
STEP_T = np.dtype([("step", "<i4"), ("loss", "<f8"), ("start_ns", "<i8"), ("makespan_ns", "<i8"),
                   ("bubble_ratio", "<f8"), ("samples_per_s", "<f8"), ("lower_bound_ns", "<f8")])
# /steps as written since the per-stage bubble column was added (STEP_T is the older layout, still valid).
STEP_T_STAGE = np.dtype(STEP_T.descr + [("stage_bubble_ratio", "<f8")])


def ev(step, rank, kind, mb, ready, start, end, stage=None, peer=-1, migrated=0, bytes_=0):
    return (step, rank, rank if stage is None else stage, 0, mb, KINDS[kind], ready, start, end, bytes_, 0, peer,
            migrated)


# The hand-computed example (2 ranks = 2 stages, 2 microbatches, 1 step), numbers worked out in
# test_analysis.py. rank 0: F0 F1 . B0 . B1   rank 1: .. F0 B0 F1 B1 W0 W1 ..
def example_events(step=0, offset=0):
    o = offset
    rows = [
        ev(step, 0, "F", 0, o + 0, o + 0, o + 100),
        ev(step, 0, "F", 1, o + 0, o + 100, o + 200),
        ev(step, 0, "SEND", 0, o + 100, o + 100, o + 110, peer=1, bytes_=4096),
        ev(step, 0, "B", 0, o + 300, o + 300, o + 400),
        ev(step, 0, "B", 1, o + 450, o + 500, o + 600, migrated=1),
        ev(step, 1, "RECV", 0, o + 0, o + 0, o + 110, peer=0, bytes_=4096),
        ev(step, 1, "F", 0, o + 110, o + 120, o + 220),
        ev(step, 1, "B", 0, o + 220, o + 220, o + 290),
        ev(step, 1, "F", 1, o + 210, o + 290, o + 390),
        ev(step, 1, "B", 1, o + 390, o + 390, o + 440),
        ev(step, 1, "W", 0, o + 290, o + 440, o + 470),
        ev(step, 1, "W", 1, o + 440, o + 470, o + 500),
    ]
    return rows


EXAMPLE = {"makespan_ns": 600, "bubble_ratio": 0.35, "lower_bound_ns": 400.0, "samples": 4.0,
           "stage_bubble_ratio": (1 - 400 / 600 + 1 - 380 / 380) / 2}


def write_trace(path, events, steps, world_size=2, schedule="1f1b", execution="strict", drop=(), libver=None,
                swmr_kill=False, deck="pipeline: 2\n"):
    """events: list of tuples (EVENT_T order); steps: list of tuples (STEP_T order). drop: names of
    datasets ('events', 'steps'), fields ('events.ready_ns') or attributes ('@world_size') to leave out.
    libver: h5py's (low, high) file format bounds, e.g. ("v110", "v110") as the C++ writer uses (checksummed
    version 2 object headers); the default is h5py's."""
    drop = set(drop)
    kw = {"libver": ("v110", "v110")} if swmr_kill else ({"libver": libver} if libver else {})
    f = h5py.File(path, "w", **kw)
    attrs = {"schema_version": np.int32(1), "deck": deck, "world_size": np.int32(world_size),
             "schedule": schedule, "execution": execution, "hint": "schedule", "backend": "simulator",
             "source": "simulator", "hostnames": ["simulator"] * world_size, "git_revision": "test",
             "pipeline": np.int32(world_size), "microbatches": np.int32(2), "virtual": np.int32(1)}
    for k, v in attrs.items():
        if "@" + k not in drop:
            f.attrs[k] = v
    step_t = STEP_T_STAGE if steps and len(steps[0]) == len(STEP_T_STAGE) else STEP_T
    for name, dtype, rows in (("events", EVENT_T, events), ("steps", step_t, steps)):
        if name in drop:
            continue
        keep = [n for n in dtype.names if "%s.%s" % (name, n) not in drop]
        sub = np.dtype([(n, dtype.fields[n][0]) for n in keep])
        full = np.array(rows, dtype=dtype)
        data = np.zeros(len(full), dtype=sub)
        for n in keep:
            data[n] = full[n]
        f.create_dataset(name, data=data, maxshape=(None,), chunks=(64,), shuffle=True, compression="gzip")
    if swmr_kill:
        f.swmr_mode = True
        f.flush()
        return f  # the caller os._exit()s in a child to leave the SWMR mark
    f.close()
    return None


def step_row(step, makespan, bubble, lower, samples=4.0, start=0, loss=float("nan")):
    return (step, loss, start, makespan, bubble, samples / (makespan * 1e-9), lower)


def example_trace(path, steps=1, stage_bubble=None, **kw):
    """stage_bubble: None writes the older /steps layout (no stage_bubble_ratio column), else that value."""
    events, rows = [], []
    for s in range(steps):
        off = 1000 * s
        events += example_events(s, off)
        rows.append(step_row(s, EXAMPLE["makespan_ns"], EXAMPLE["bubble_ratio"], EXAMPLE["lower_bound_ns"], start=off))
        if stage_bubble is not None:
            rows[-1] += (stage_bubble,)
    write_trace(path, events, rows, **kw)


def damage_object_header(path, name):
    """Damages, in place, the metadata of object `name` ("/" for the root group) of an HDF5 file whose object
    headers are version 2 ("OHDR", written with libver v110 or later): the 4-byte checksum that ends the header's
    first chunk is inverted, so HDF5 reports "incorrect metadata checksum" when it reads that header, and nothing
    else about the file changes. Returns the byte offset written. Raises ValueError for a version 1 header."""
    with h5py.File(path, "r") as f:
        addr = h5py.h5o.get_info(f[name].id).addr
    with open(path, "r+b") as fp:
        fp.seek(addr)
        head = fp.read(6 + 16 + 4 + 8)
        if head[:4] != b"OHDR":
            raise ValueError("%s: object %s has no version 2 header at %d" % (path, name, addr))
        flags = head[5]
        pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)  # times, attribute phase change
        width = 1 << (flags & 0x03)  # size of the "size of chunk 0" field
        chunk0 = int.from_bytes(head[pos:pos + width], "little")
        at = addr + pos + width + chunk0
        fp.seek(at)
        checksum = fp.read(4)
        fp.seek(at)
        fp.write(bytes(b ^ 0xFF for b in checksum))
    return at
