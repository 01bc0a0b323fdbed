#!/usr/bin/env python3
"""Damages cached block files in place, as a failing disk or a stray writer would.

  damage.py DIR N SEED

Does N damaging operations on random files under DIR/**/blocks/ (the cache's block files): a bit
flipped in the data (past the 4 KiB header, so only the requester's chunk CRCs can catch it when
the member answers by sendfile), a bit flipped in the header, a truncation, a 4 KiB range zeroed,
or two files swapped. Files that vanish meanwhile (the member removed them) are skipped. Prints
one line: the counts per kind and the number of distinct files touched.
"""
import os
import random
import sys

root, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
files = []
for d, _, names in os.walk(root):
    if "/blocks" in d:
        files += [os.path.join(d, x) for x in names]
counts = {"data_flip": 0, "header_flip": 0, "truncate": 0, "zero": 0, "swap": 0, "vanished": 0}
touched = set()


def flip(path, lo):
    size = os.path.getsize(path)
    if size <= lo:
        return False
    off = rnd.randrange(lo, size) if lo else rnd.randrange(0, min(size, 4096))
    fd = os.open(path, os.O_RDWR)
    try:
        b = bytearray(os.pread(fd, 1, off))
        b[0] ^= 1 << rnd.randrange(8)
        os.pwrite(fd, bytes(b), off)
    finally:
        os.close(fd)
    return True


for _ in range(n if files else 0):
    kind = rnd.choice(["data_flip"] * 5 + ["header_flip", "truncate", "zero", "swap"])
    path = rnd.choice(files)
    try:
        if kind == "data_flip":
            done = flip(path, 4096)
        elif kind == "header_flip":
            done = flip(path, 0)
        elif kind == "truncate":
            os.truncate(path, rnd.randrange(0, max(1, os.path.getsize(path))))
            done = True
        elif kind == "zero":
            size = os.path.getsize(path)
            fd = os.open(path, os.O_RDWR)
            try:
                os.pwrite(fd, bytes(4096), rnd.randrange(0, max(1, size)))
            finally:
                os.close(fd)
            done = True
        else:
            other = rnd.choice(files)
            if other == path:
                continue
            tmp = path + ".swap"
            os.rename(path, tmp)
            try:
                os.rename(other, path)
            except FileNotFoundError:
                os.rename(tmp, path)
                raise
            os.rename(tmp, other)
            touched.add(other)
            done = True
    except FileNotFoundError:
        done = False
    if done:
        counts[kind] += 1
        touched.add(path)
    else:
        counts["vanished"] += 1
print(" ".join("%s %d" % kv for kv in counts.items()) + " files %d" % len(touched))
