#!/usr/bin/env python3
"""A process that registers itself as a group member without being one (stdlib only).

  fakemember.py DB_PATH GROUP TCP_ADDR VOLUME_URL BLOCK_SIZE [RDMA_ADDR [IORPC_ADDR]]
      registers TCP_ADDR (a fault proxy in front of a real member, say), RDMA_ADDR as its RDMA
      listener when not empty, and IORPC_ADDR as its IORPC address when given, and keeps its
      heartbeat moving, so clients send that member's share of blocks there.

  fakemember.py attack MODE DB_PATH GROUP VOLUME_URL BLOCK_SIZE MEMBER_ADDR STATS_FILE [RDMA_ADDR]
      listens on a loopback port of its own, registers it (and RDMA_ADDR, if given, as its RDMA
      listener), and plays a member that does not hold the group secret:
        relay   takes the requester's HELLO, opens its own connection to the real member's TCP
                pool at MEMBER_ADDR, relays HELLO, HELLO_ACK and the requester's AUTH through it;
                when the member accepts, it forwards the AUTH_OK, and when it refuses, it bluffs
                with an AUTH_OK carrying the requester's own proof
        noauth  answers HELLO with a HELLO_ACK that does not ask for AUTH
      Either way it then answers every READ with forged bytes ('A's) whose chunk CRCs are right
      (they are keyless: anyone can compute them from the public block id). STATS_FILE always
      holds "conns N", "auths N", "member_accepted N", "member_refused N", "reads N" and
      "forged_bytes N" lines. The first line on stdout is "ID PORT".

The record format is the one src/group/registry.c documents (tag m1).
"""
import hashlib
import os
import socket
import sqlite3
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frames  # noqa: E402  (the frame codec and CRC32C of the hostile tests)

CHUNK = 64 * 1024


def enc(s):
    return "".join("%%%02X" % ord(c) if c in "%|" or ord(c) < 0x20 else c for c in s)


def heartbeat(db, group, mid, addr, url, bs, rdma="", iorpc=""):
    start = int(time.time() * 1000)
    beat = 0
    con = sqlite3.connect(db, timeout=5)
    while True:
        beat += 1
        now = int(time.time() * 1000)
        rec = "|".join(["m1", mid, "proxy", addr, iorpc, "1" if rdma else "0", rdma, "", "", "",
                        "100", "0", enc(url), str(bs), "0", str(1 << 40), str(beat), str(now),
                        str(start)])
        try:
            con.execute("INSERT OR REPLACE INTO shoal_members (grp, id, record) VALUES (?, ?, ?)",
                        (group, mid, rec))
            con.commit()
        except sqlite3.OperationalError:
            pass
        time.sleep(0.2)


# ---- the attack ----

stats = {"conns": 0, "auths": 0, "member_accepted": 0, "member_refused": 0, "reads": 0,
         "forged_bytes": 0}
lock = threading.Lock()


def count(name, n=1):
    with lock:
        stats[name] += n
        tmp = STATS_FILE + ".tmp"
        with open(tmp, "w") as f:
            for k, v in stats.items():
                f.write("%s %d\n" % (k, v))
        os.replace(tmp, STATS_FILE)


def read_raw(s):
    """One whole frame (header, body, payload) as bytes, and its type."""
    h = frames.recv_exact(s, 32)
    _, _, typ, _, _, bl, pl, _, _ = struct.unpack("<4sBBHIIIQI", h)
    return h + frames.recv_exact(s, bl + pl), typ


def volume_fp(url, bs):
    return hashlib.sha256(url.encode() + b"\0" + struct.pack("<I", bs)).digest()[:16]


def forged_answer(url, msg_id, body):
    """A READ_RESP for the READ BODY with 'A' bytes and correct chunk CRCs."""
    (_, _, bs, index, off, length, _, _, klen, vlen) = struct.unpack("<QQIIIIQQHH", body[:52])
    key, ver = body[52:52 + klen], body[52 + klen:52 + klen + vlen]
    bid = hashlib.sha256(volume_fp(url, bs) + struct.pack("<H", klen) + key +
                         struct.pack("<H", vlen) + ver + struct.pack("<I", index)).digest()[:16]
    data = b"A" * length
    crcs = b""
    for i in range((length + CHUNK - 1) // CHUNK):
        chunk = off // CHUNK + i
        seed = frames.crc32c(bid + struct.pack("<I", chunk))
        crcs += struct.pack("<I", frames.crc32c(data[i * CHUNK:(i + 1) * CHUNK], seed))
    resp = bid + struct.pack("<III", off, length, len(crcs) // 4) + crcs
    return frames.frame(frames.READ_RESP, resp, id_=msg_id, payload_len=length) + data, length


def serve_forged(c, url):
    while True:
        h = frames.recv_exact(c, 32)
        _, _, typ, _, _, bl, _, msg_id, _ = struct.unpack("<4sBBHIIIQI", h)
        body = frames.recv_exact(c, bl)
        if typ == frames.READ:
            count("reads")
            out, n = forged_answer(url, msg_id, body)
            c.sendall(out)
            count("forged_bytes", n)
        elif typ == frames.PING:
            c.sendall(frames.frame(frames.PONG, body, id_=msg_id))
        elif typ == frames.INFO:
            c.sendall(frames.frame(frames.ERROR, b"rpc disabled", id_=msg_id, status=7))


def handle(c, mode, member, url):
    count("conns")
    m = None
    try:
        hello, typ = read_raw(c)
        if typ != frames.HELLO:
            return
        if mode == "noauth":
            ack = (bytes([frames.VERSION]) + os.urandom(32) + struct.pack("<I", 1) + bytes([4]) +
                   b"fake")
            c.sendall(frames.frame(frames.HELLO_ACK, ack, id_=1))
        else:
            host, port = member.rsplit(":", 1)
            m = socket.create_connection((host, int(port)), timeout=5)
            m.sendall(hello)
            ack, _ = read_raw(m)
            c.sendall(ack)
            auth, typ = read_raw(c)
            if typ != frames.AUTH:
                return
            count("auths")
            m.sendall(auth)
            try:
                answer, typ = read_raw(m)
            except (ConnectionError, OSError):
                answer, typ = None, None
            if typ == frames.AUTH_OK:
                count("member_accepted")
                c.sendall(answer)
            else:
                count("member_refused")
                c.sendall(frames.frame(frames.AUTH_OK, auth[32:64], id_=2))
        serve_forged(c, url)
    except (ConnectionError, OSError):
        pass
    finally:
        c.close()
        if m:
            m.close()


def attack(argv):
    global STATS_FILE
    mode, db, group, url, bs, member, STATS_FILE = argv[:7]
    rdma = argv[7] if len(argv) > 7 else ""
    if mode not in ("relay", "noauth"):
        sys.exit("unknown mode " + mode)
    count("conns", 0)
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    port = ls.getsockname()[1]
    mid = os.urandom(16).hex()
    print(mid, port, flush=True)
    threading.Thread(target=heartbeat, args=(db, group, mid, "127.0.0.1:%d" % port, url,
                                             int(bs), rdma), daemon=True).start()
    while True:
        c, _ = ls.accept()
        c.settimeout(10)
        threading.Thread(target=handle, args=(c, mode, member, url), daemon=True).start()


if __name__ == "__main__":
    if len(sys.argv) >= 9 and sys.argv[1] == "attack":
        attack(sys.argv[2:])
    elif len(sys.argv) in (6, 7, 8):
        mid = os.urandom(16).hex()
        print(mid, flush=True)
        heartbeat(sys.argv[1], sys.argv[2], mid, sys.argv[3], sys.argv[4], int(sys.argv[5]),
                  sys.argv[6] if len(sys.argv) >= 7 else "",
                  iorpc=sys.argv[7] if len(sys.argv) == 8 else "")
    else:
        print(__doc__)
        sys.exit(2)
