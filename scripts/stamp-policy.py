#!/usr/bin/python3
"""Adds body_bytes and body_crc32 to the header line of a conductor policy file written before policy checksums
(conductor train-policy writes them itself). Use it only on a file you trust: it vouches for the bytes as they are.

    scripts/stamp-policy.py inputs/policies/default.pt
"""
import argparse
import os
import sys
import zlib

MAGIC = b"conductor-policy"


def error(text):
    print(f"stamp-policy: error: {text}", file=sys.stderr)
    sys.exit(2)


def stamp(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        error(f"cannot read '{path}': {e.strerror}")
    end = data.find(b"\n")
    if not data.startswith(MAGIC) or end < 0:
        error(f"'{path}' is not a conductor policy file")
    body = data[end + 1:]
    words = [w for w in data[:end].split(b" ") if not w.startswith((b"body_bytes=", b"body_crc32="))]
    words += [b"body_bytes=%d" % len(body), b"body_crc32=0x%08x" % zlib.crc32(body)]
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(b" ".join(words) + b"\n" + body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        error(f"cannot write '{path}': {e.strerror} (the file is left as it was)")
    print(f"stamped {path}: body {len(body)} bytes, CRC-32 0x{zlib.crc32(body):08x}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="stamp-policy.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("policy", nargs="+", help="policy file(s) to stamp in place")
    for p in parser.parse_args().policy:
        stamp(p)
