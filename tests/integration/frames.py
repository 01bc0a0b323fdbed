#!/usr/bin/env python3
"""Crafted shoal frames for hostile-input and overload tests (stdlib only).

  frames.py hostile HOST:PORT            run the table of malformed and hostile frames
  frames.py flood HOST:PORT N KEY VERSION SIZE BLOCKSIZE
                                         pipeline N reads over IORPC connections, check all answered
  frames.py flood-hold HOST:PORT N KEY VERSION SIZE BLOCKSIZE LENGTH GO_FILE
                                         the same with reads of LENGTH bytes, but no answer is
                                         read until GO_FILE exists ("sent N, holding" once sent)

Every case opens its own connection and expects an ERROR answer or a close within a second.
"""
import os
import socket
import struct
import sys
import time

MAGIC = b"SHL1"
HELLO, HELLO_ACK, AUTH, AUTH_OK = 1, 2, 3, 4
READ, READ_RESP, ERROR, PING, PONG, INFO, INFO_RESP, CORRUPT, GOAWAY = 16, 17, 18, 19, 20, 21, 22, 23, 24
FILL = 1 << 3

_T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _T.append(c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def frame(type_, body=b"", id_=1, flags=0, status=0, payload_len=0, version=1, magic=MAGIC,
          body_len=None, bad_crc=False):
    bl = len(body) if body_len is None else body_len
    head = magic + struct.pack("<BBHIIIQ", version, type_, flags, status, bl, payload_len, id_)
    crc = crc32c(head + body)
    if bad_crc:
        crc ^= 1
    return head + struct.pack("<I", crc) + body


def hello(service=2):
    return frame(HELLO, struct.pack("<BBB", 1, 1, service) + os.urandom(32), id_=1)


def read_body(key=b"k", version=b"v", size=4096, bs=4 << 20, index=0, off=0, length=4096):
    return struct.pack("<QQIIIIQQHH", 0, size, bs, index, off, length, 0, 0, len(key),
                       len(version)) + key + version


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=2)
    s.settimeout(1.0)
    return s


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def read_frame(s):
    h = recv_exact(s, 32)
    _, ver, typ, flags, status, bl, pl, id_, crc = struct.unpack("<4sBBHIIIQI", h)
    body = recv_exact(s, bl)
    payload = recv_exact(s, pl) if pl else b""
    return typ, status, id_, body, payload


def handshake(s, service=2):
    s.sendall(hello(service))
    typ, status, _, body, _ = read_frame(s)
    if typ != HELLO_ACK:
        raise RuntimeError("no HELLO_ACK")


def outcome(s):
    """'error' (an ERROR frame), 'closed', or 'hang' within one second."""
    deadline = time.monotonic() + 1.0
    try:
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            typ, status, _, _, _ = read_frame(s)
            if typ == ERROR:
                return "error"
            if typ in (PONG, AUTH_OK, HELLO_ACK, READ_RESP, INFO_RESP):
                continue
        return "hang"
    except socket.timeout:
        return "hang"
    except (ConnectionError, OSError):
        return "closed"


SERVICE = 2


def cases():
    good = read_body()
    big = 1 << 20
    c = []
    pre = lambda name, data: c.append((name, False, data))
    post = lambda name, data: c.append((name, True, data))
    pre("junk stream", os.urandom(512))
    pre("bad magic", frame(HELLO, b"x" * 35, magic=b"XXXX"))
    pre("bad version", frame(HELLO, b"x" * 35, version=9))
    pre("unknown type 99", frame(99))
    pre("READ before HELLO", frame(READ, good, flags=FILL))
    pre("HELLO with huge body_len", frame(HELLO, b"", body_len=big))
    pre("HELLO body too long", frame(HELLO, bytes([1, 1, SERVICE]) + b"\0" * 100))
    pre("HELLO bad crc", frame(HELLO, bytes([1, 1, SERVICE]) + os.urandom(32), bad_crc=True))
    pre("HELLO wrong service", frame(HELLO, b"\x01\x01\x07" + os.urandom(32)))
    pre("HELLO version range 5..6", frame(HELLO, b"\x05\x06\x02" + os.urandom(32)))
    pre("HELLO header stalls", frame(HELLO, bytes([1, 1, SERVICE]) + os.urandom(32))[:20])
    pre("HELLO body stalls", frame(HELLO, bytes([1, 1, SERVICE]) + os.urandom(32))[:50])
    pre("AUTH_OK from requester", frame(AUTH_OK))
    pre("payload on HELLO", frame(HELLO, bytes([1, 1, SERVICE]) + os.urandom(32), payload_len=100))
    post("READ bad crc", frame(READ, good, flags=FILL, bad_crc=True))
    post("READ body_len past max", frame(READ, good, body_len=1 << 30))
    post("READ payload_len set", frame(READ, good, payload_len=4096))
    post("READ empty body", frame(READ, b"", flags=FILL))
    post("READ truncated body", frame(READ, good[:30], flags=FILL))
    post("READ trailing bytes", frame(READ, good + b"zz", flags=FILL))
    post("READ key with NUL", frame(READ, read_body(key=b"a\0b"), flags=FILL))
    post("READ key ../etc/passwd", frame(READ, read_body(key=b"../etc/passwd"), flags=FILL))
    post("READ absolute key", frame(READ, read_body(key=b"/etc/passwd"), flags=FILL))
    post("READ key 64 KiB", frame(READ, read_body(key=b"a" * 65535), flags=FILL))
    post("READ key control chars", frame(READ, read_body(key=b"a\x01\x02"), flags=FILL))
    post("READ empty key", frame(READ, read_body(key=b""), flags=FILL))
    post("READ version with space", frame(READ, read_body(version=b"v 1"), flags=FILL))
    post("READ bad block size", frame(READ, read_body(bs=3000), flags=FILL))
    post("READ other block size", frame(READ, read_body(bs=1 << 20), flags=FILL))
    post("READ index past end", frame(READ, read_body(index=5), flags=FILL))
    post("READ unaligned offset", frame(READ, read_body(size=1 << 20, off=100, length=4096), flags=FILL))
    post("READ zero length", frame(READ, read_body(length=0), flags=FILL))
    post("READ range past block", frame(READ, read_body(size=8192, length=65536 * 2), flags=FILL))
    post("READ RDMA target on TCP", frame(READ, good, flags=FILL | 2))
    post("READ unknown flag", frame(READ, good, flags=1 << 9))
    post("READ missing object", frame(READ, read_body(key=b"no/such/object"), flags=FILL))
    post("READ_RESP from requester", frame(READ_RESP, b"\0" * 28, payload_len=0))
    post("HELLO_ACK from requester", frame(HELLO_ACK, b"\0" * 69))
    post("second HELLO", hello(SERVICE))
    post("ERROR from requester", frame(ERROR, b"x", status=5))
    post("INFO_RESP from requester", frame(INFO_RESP, b"\0" * 8))
    post("duplicate in-flight id", frame(READ, read_body(key=b"no/such/a"), id_=7, flags=FILL)
         + frame(READ, read_body(key=b"no/such/a"), id_=7, flags=FILL))
    post("status on a request", frame(READ, good, flags=FILL, status=3))
    post("PING body too long", frame(PING, b"p" * 200))
    post("header stalls half-way", frame(PING, b"p")[:16])
    post("body stalls half-way", frame(READ, good, flags=FILL)[:40])
    post("junk after handshake", os.urandom(256))
    return c


def run_hostile(addr, service=2):
    global SERVICE
    SERVICE = service
    bad = 0
    table = cases()
    for name, needs_hs, data in table:
        s = connect(addr)
        try:
            if needs_hs:
                handshake(s, service)
            s.sendall(data)
            got = outcome(s)
        except (ConnectionError, OSError):
            got = "closed"
        finally:
            s.close()
        # A stalled frame is dropped by the server's deadline (seconds); here "hang" is only
        # acceptable for the two stall cases, which the test checks separately.
        ok = got in ("error", "closed") or (got == "hang" and "stalls" in name)
        print("%-28s %s%s" % (name, got, "" if ok else "  <-- FAIL"))
        bad += not ok
    print("%d cases, %d failed" % (len(table), bad))
    return 1 if bad else 0


def run_flood(addr, n, key, version, size, bs, length=65536, go_file=None):
    n, size, bs, length = int(n), int(size), int(bs), int(length)
    per_conn = 1000
    conns = []
    sent = 0
    nblocks = (size + bs - 1) // bs
    while sent < n:
        s = connect(addr)
        s.settimeout(60)
        handshake(s)
        k = min(per_conn, n - sent)
        out = bytearray()
        for i in range(k):
            idx = (sent + i) % nblocks
            blen = min(bs, size - idx * bs)
            body = read_body(key.encode(), version.encode(), size, bs, idx, 0, min(length, blen))
            out += frame(READ, body, id_=sent + i + 1, flags=FILL)
        s.sendall(out)
        conns.append((s, k))
        sent += k
    if go_file:
        # Hold every answer unread (the server can finish only what fits in socket buffers)
        # until the test has looked at the server.
        print("sent %d, holding" % n, flush=True)
        while not os.path.exists(go_file):
            time.sleep(0.05)
    answered = errors = 0
    for s, k in conns:
        for _ in range(k):
            typ, status, _, _, _ = read_frame(s)
            answered += 1
            errors += typ == ERROR
        s.close()
    print("sent %d, answered %d, errors %d" % (n, answered, errors))
    return 0 if answered == n and errors == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "hostile":
        sys.exit(run_hostile(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2))
    if len(sys.argv) == 3 and sys.argv[1] == "stall":
        s = connect(sys.argv[2])
        s.sendall(frame(PING, b"p")[:16])
        t0 = time.monotonic()
        s.settimeout(30)
        try:
            gone = s.recv(1) == b""
        except OSError:
            gone = True
        print("stalled frame closed after %.1f s" % (time.monotonic() - t0))
        sys.exit(0 if gone and time.monotonic() - t0 < 20 else 1)
    if len(sys.argv) == 4 and sys.argv[1] == "halfopen":
        socks = []
        for _ in range(int(sys.argv[3])):
            socks.append(connect(sys.argv[2]))
        t0 = time.monotonic()
        closed = 0
        for s in socks:
            s.settimeout(max(0.1, 15 - (time.monotonic() - t0)))
            try:
                if s.recv(1) == b"":
                    closed += 1
            except OSError:
                closed += 1
            s.close()
        print("%d half-open connections, %d closed by the server within %.1f s" %
              (len(socks), closed, time.monotonic() - t0))
        sys.exit(0 if closed == len(socks) else 1)
    if len(sys.argv) == 8 and sys.argv[1] == "flood":
        sys.exit(run_flood(*sys.argv[2:]))
    if len(sys.argv) == 10 and sys.argv[1] == "flood-hold":
        sys.exit(run_flood(*sys.argv[2:]))
    print(__doc__)
    sys.exit(2)
