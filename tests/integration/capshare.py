#!/usr/bin/env python3
"""One processing cap for both services [R4, V2] (stdlib only).

usage: capshare.py IORPC_ADDR POOL_ADDR METRICS_ADDR KEY VERSION SIZE BLOCKSIZE

Pipelines 2400 reads of 1 MiB over 40 IORPC connections and reads no answer, so that the
member's answers back up and requests hold every processing slot (the cap: 2048, or less where
the open-file limit lowers it); then sends one read on a TCP-pool connection. Through the member's metrics endpoint it checks that the IORPC requests hold
exactly the cap (mount_iorpc_inflight == remotecache_inflight_limit, the rest in
mount_iorpc_queued) and that the pool request waits for a slot (remotecache_pool_queued == 1,
remotecache_pool_inflight == 0). Then it reads every answer and checks that all of them came and
that every inflight and queued gauge is back to 0. Exits 0 on success, 1 with a reason.
"""
import os
import re
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frames  # noqa: E402

N_IORPC = 2400
# A member reads at most 64 requests of one connection before their answers have gone
# (CONN_ACTIVE_MAX in src/server/server.c); the rest wait in the socket. So the cap is filled by
# many connections, each under that bound.
PER_CONN = 60
LENGTH = 1 << 20
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? (\S+)$")
GAUGES = ("mount_iorpc_inflight", "mount_iorpc_queued", "remotecache_pool_inflight",
          "remotecache_pool_queued")


def metrics(addr):
    with urllib.request.urlopen("http://%s/metrics" % addr, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def wait_metrics(addr, pred, what, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(addr)
        if pred(m):
            return m
        if time.monotonic() > deadline:
            shown = {k: m.get(k) for k in GAUGES + ("remotecache_inflight_limit",)}
            raise SystemExit("FAIL: %s within %d s: %s" % (what, timeout, shown))
        time.sleep(0.1)


def read_req(key, version, size, bs, index):
    blen = min(bs, size - index * bs)
    return frames.read_body(key.encode(), version.encode(), size, bs, index, 0,
                            min(LENGTH, blen))


def main():
    if len(sys.argv) != 8:
        print(__doc__)
        return 2
    rpc, pool, maddr, key, version = sys.argv[1:6]
    size, bs = int(sys.argv[6]), int(sys.argv[7])
    nblocks = (size + bs - 1) // bs

    m = metrics(maddr)
    cap = m.get("remotecache_inflight_limit")
    if not cap or cap < 1:
        raise SystemExit("FAIL: remotecache_inflight_limit is %r" % cap)
    if N_IORPC <= cap:
        raise SystemExit("FAIL: cap %d is not below %d requests" % (cap, N_IORPC))

    conns = []
    for c in range(N_IORPC // PER_CONN):
        s = frames.connect(rpc)
        s.settimeout(60)
        frames.handshake(s, 2)
        out = bytearray()
        for i in range(PER_CONN):
            body = read_req(key, version, size, bs, (c * PER_CONN + i) % nblocks)
            out += frames.frame(frames.READ, body, id_=i + 1, flags=frames.FILL)
        s.sendall(out)
        conns.append(s)

    full = wait_metrics(maddr, lambda m: m["mount_iorpc_inflight"] == cap and
                        m["mount_iorpc_queued"] > 0, "IORPC did not fill the cap")
    print("  IORPC alone: mount_iorpc_inflight %d (the cap), mount_iorpc_queued %d" %
          (full["mount_iorpc_inflight"], full["mount_iorpc_queued"]))

    p = frames.connect(pool)
    p.settimeout(60)
    frames.handshake(p, 1)
    p.sendall(frames.frame(frames.READ, read_req(key, version, size, bs, 0), id_=7,
                           flags=frames.FILL))
    both = wait_metrics(maddr, lambda m: m["remotecache_pool_queued"] == 1,
                        "the pool request did not wait for a slot")
    if both["remotecache_pool_inflight"] != 0 or both["mount_iorpc_inflight"] != cap:
        raise SystemExit("FAIL: pool request in process past the cap: %s" %
                         {k: both[k] for k in GAUGES})
    print("  plus one pool read: remotecache_pool_queued %d, remotecache_pool_inflight %d, "
          "mount_iorpc_inflight %d" % (both["remotecache_pool_queued"],
                                       both["remotecache_pool_inflight"],
                                       both["mount_iorpc_inflight"]))

    answered = errors = 0
    for s in conns:
        for _ in range(PER_CONN):
            typ, _, _, _, _ = frames.read_frame(s)
            answered += 1
            errors += typ != frames.READ_RESP
        s.close()
    typ, status, id_, _, payload = frames.read_frame(p)
    p.close()
    if answered != N_IORPC or errors or typ != frames.READ_RESP or id_ != 7 or not payload:
        raise SystemExit("FAIL: IORPC %d answered, %d errors; pool answer type %d status %d" %
                         (answered, errors, typ, status))
    rest = wait_metrics(maddr, lambda m: all(m[g] == 0 for g in GAUGES),
                        "the gauges did not come back to 0")
    if rest["mount_iorpc_inflight_max"] != cap or rest["remotecache_pool_queued_max"] < 1:
        raise SystemExit("FAIL: high-water marks: mount_iorpc_inflight_max %d, "
                         "remotecache_pool_queued_max %d" %
                         (rest["mount_iorpc_inflight_max"], rest["remotecache_pool_queued_max"]))
    print("  all %d + 1 answered; gauges back to 0" % N_IORPC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
