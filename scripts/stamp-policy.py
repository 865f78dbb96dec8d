#!/usr/bin/python3
"""Adds body_bytes and body_crc32 to the header line of a conductor policy file written before policy checksums
(conductor train-policy writes them itself). Use it only on a file you trust: it vouches for the bytes as they are.

    scripts/stamp-policy.py inputs/policies/default.pt
"""
import os
import sys
import zlib

MAGIC = b"conductor-policy"


def stamp(path):
    with open(path, "rb") as f:
        data = f.read()
    end = data.find(b"\n")
    if not data.startswith(MAGIC) or end < 0:
        sys.exit(f"stamp-policy: error: '{path}' is not a conductor policy file")
    body = data[end + 1:]
    words = [w for w in data[:end].split(b" ") if not w.startswith((b"body_bytes=", b"body_crc32="))]
    words += [b"body_bytes=%d" % len(body), b"body_crc32=0x%08x" % zlib.crc32(body)]
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b" ".join(words) + b"\n" + body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    print(f"stamped {path}: body {len(body)} bytes, CRC-32 0x{zlib.crc32(body):08x}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        stamp(p)
