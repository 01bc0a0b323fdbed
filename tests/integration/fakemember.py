#!/usr/bin/env python3
"""Registers a group member that is really a fault proxy in front of a real member, and keeps its
heartbeat moving, so clients send that member's share of blocks through the proxy.

  fakemember.py DB_PATH GROUP TCP_ADDR VOLUME_URL BLOCK_SIZE
The record format is the one src/group/registry.c documents (tag m1).
"""
import os
import sqlite3
import sys
import time

db, group, addr, url, bs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
mid = os.urandom(16).hex()


def enc(s):
    return "".join("%%%02X" % ord(c) if c in "%|" or ord(c) < 0x20 else c for c in s)


start = int(time.time() * 1000)
beat = 0
con = sqlite3.connect(db, timeout=5)
print(mid, flush=True)
while True:
    beat += 1
    now = int(time.time() * 1000)
    rec = "|".join(["m1", mid, "proxy", addr, "", "0", "", "", "", "", "100", "0", enc(url),
                    str(bs), "0", str(1 << 40), str(beat), str(now), str(start)])
    try:
        con.execute("INSERT OR REPLACE INTO shoal_members (grp, id, record) VALUES (?, ?, ?)",
                    (group, mid, rec))
        con.commit()
    except sqlite3.OperationalError:
        pass
    time.sleep(0.2)
