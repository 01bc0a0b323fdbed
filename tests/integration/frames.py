#!/usr/bin/env python3
"""Crafted shoal frames for hostile-input and overload tests (stdlib only).

  frames.py hostile HOST:PORT            run the table of malformed and hostile frames
  frames.py flood HOST:PORT N KEY VERSION SIZE BLOCKSIZE
                                         pipeline N reads over IORPC connections, check all answered
  frames.py flood-hold HOST:PORT N KEY VERSION SIZE BLOCKSIZE LENGTH GO_FILE
                                         the same with reads of LENGTH bytes, but no answer is
                                         read until GO_FILE exists ("sent N, holding" once sent)
  frames.py hold PORT,PORT... FIRST_SRC NSRC PER_SRC STOPFILE
                                         keep NSRC*PER_SRC silent connections open to 127.0.0.1
                                         from NSRC source addresses starting at FIRST_SRC,
                                         reopening those the server closes, until STOPFILE exists
  frames.py pipeclose HOST:PORT STOREDIR PREFIX NOBJ CONNS PER_CONN
                                         for objects PREFIX0..PREFIX{NOBJ-1} (one block each):
                                         CONNS connections at a time each pipeline PER_CONN reads
                                         with FILL and close at once, never reading an answer
  frames.py hog HOST:PORT STOREDIR KEY N STOPFILE
                                         N whole-block reads of KEY, answers never read
  frames.py corrupt HOST:PORT STOREDIR KEY CONNS SECONDS
                                         CORRUPT notices (true claims) for every block of KEY
                                         from CONNS connections for SECONDS; prints how many
  frames.py claim HOST:PORT SERVICE read|fill|corrupt KEY VERSION SIZE INDEX OFF LEN
                                         one READ (fill: with FILL) or CORRUPT claiming object
                                         size SIZE; prints "resp N", "error STATUS REASON",
                                         "closed" or "sent" (CORRUPT has no answer)
  frames.py put HOST:PORT SECRET_FILE URL BLOCKSIZE STOREDIR GOOD_KEY BAD_KEY
                                         write-through attacks [W3]: one true PUT_BLOCK of
                                         GOOD_KEY's block 0 (cached), then crafted ones for
                                         BAD_KEY (lengths, CRC, version, size, missing object,
                                         oversized, unauthenticated) each refused or closed
  frames.py plant HOST:PORT URL BLOCKSIZE STOREDIR KEY
                                         PUT_BLOCK of forged bytes for every block of KEY (the
                                         store's version and size), authenticated as this
                                         process may; prints "accepted N refused M"
  frames.py put-flood HOST:PORT SECRET_FILE URL BLOCKSIZE STOREDIR KEY CONNS PER_CONN
                                         CONNS connections each send PER_CONN PUT_BLOCKs for
                                         KEY with a bad CRC or a version the store does not
                                         hold; prints "refused N" when all were refused
  frames.py auth HOST:PORT SERVICE SECRET_FILE WRONG_SECRET_FILE DEADLINE_S
                                         the handshake against a member with a secret: the right
                                         secret works; a replay, a wrong secret, a proof made for
                                         another address, frames instead of AUTH and silence get
                                         no answer beyond HELLO_ACK and a close

Every hostile case opens its own connection and expects an ERROR answer or a close within a
second. The handshake here is written from docs/iorpc-protocol.md §4, apart from the C code.
"""
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

MAGIC = b"SHL1"
HELLO, HELLO_ACK, AUTH, AUTH_OK = 1, 2, 3, 4
READ, READ_RESP, ERROR, PING, PONG, INFO, INFO_RESP, CORRUPT, GOAWAY = 16, 17, 18, 19, 20, 21, 22, 23, 24
PUT_BLOCK, PUT_RESP = 25, 26
PUT_PAYLOAD_MAX = 4 * 1024 + (64 << 20)
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


VERSION = 2


def frame(type_, body=b"", id_=1, flags=0, status=0, payload_len=0, version=VERSION, magic=MAGIC,
          body_len=None, bad_crc=False):
    bl = len(body) if body_len is None else body_len
    head = magic + struct.pack("<BBHIIIQ", version, type_, flags, status, bl, payload_len, id_)
    crc = crc32c(head + body)
    if bad_crc:
        crc ^= 1
    return head + struct.pack("<I", crc) + body


def hello(service=2):
    return frame(HELLO, struct.pack("<BBB", VERSION, VERSION, service) + os.urandom(32), id_=1)


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


def read_frame_flags(s):
    """(type, flags, status, id, body, payload) of the next frame on S."""
    h = recv_exact(s, 32)
    _, ver, typ, flags, status, bl, pl, id_, crc = struct.unpack("<4sBBHIIIQI", h)
    body = recv_exact(s, bl)
    payload = recv_exact(s, pl) if pl else b""
    return typ, flags, status, id_, body, payload


def read_frame(s):
    typ, _, status, id_, body, payload = read_frame_flags(s)
    return typ, status, id_, body, payload


def local_secret_file():
    """Where a member without a group secret keeps the host-local one by default
    (src/node/local_secret.h)."""
    if os.geteuid() == 0:
        return "/var/lib/shoal/local.secret"
    return os.path.join(os.environ.get("HOME") or "/tmp", ".shoal", "local.secret")


def handshake(s, service=2):
    """HELLO; when the member asks for AUTH, the proof made with the host-local secret if this
    process may read it (a local client's rights), else none: the member then refuses what
    follows, which is what a process that cannot read it must get."""
    h = hello(service)
    s.sendall(h)
    typ, flags, status, _, body, _ = read_frame_flags(s)
    if typ != HELLO_ACK:
        raise RuntimeError("no HELLO_ACK")
    if not flags & 1:
        return
    try:
        secret = read_secret(local_secret_file())
    except OSError:
        return
    ip, port = s.getpeername()[:2]
    s.sendall(frame(AUTH, proof(group_key(secret), False, "%s:%d" % (ip, port), h[32:], body),
                    id_=2))
    typ, status, _, _, _ = read_frame(s)
    if typ != AUTH_OK:
        raise RuntimeError("the member refused the host-local secret (answer %d)" % typ)


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
    pre("HELLO body too long", frame(HELLO, bytes([VERSION, VERSION, SERVICE]) + b"\0" * 100))
    pre("HELLO bad crc", frame(HELLO, bytes([VERSION, VERSION, SERVICE]) + os.urandom(32), bad_crc=True))
    pre("HELLO wrong service", frame(HELLO, b"\x02\x02\x07" + os.urandom(32)))
    pre("HELLO other service", frame(HELLO, bytes([VERSION, VERSION, 3 - SERVICE]) + os.urandom(32)))
    pre("HELLO version 1 frame", frame(HELLO, b"\x01\x01" + bytes([SERVICE]) + os.urandom(32),
                                       version=1))
    pre("HELLO version range 5..6", frame(HELLO, b"\x05\x06\x02" + os.urandom(32)))
    pre("HELLO header stalls", frame(HELLO, bytes([VERSION, VERSION, SERVICE]) + os.urandom(32))[:20])
    pre("HELLO body stalls", frame(HELLO, bytes([VERSION, VERSION, SERVICE]) + os.urandom(32))[:50])
    pre("AUTH_OK from requester", frame(AUTH_OK))
    pre("payload on HELLO", frame(HELLO, bytes([VERSION, VERSION, SERVICE]) + os.urandom(32), payload_len=100))
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
    post("HELLO_ACK from requester", frame(HELLO_ACK, b"\0" * 38))
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


def read_secret(path):
    """The secret's bytes as shoal reads them: one trailing "\\n" or "\\r\\n" is not part of it."""
    with open(path, "rb") as f:
        data = f.read()
    if data.endswith(b"\n"):
        data = data[:-1]
        if data.endswith(b"\r"):
            data = data[:-1]
    return data


def group_key(secret):
    return hmac.new(secret, b"shoal group key v2", hashlib.sha256).digest()


def proof(key, server, addr, hello_body, ack_body):
    label = b"shoal v2 server proof\0" if server else b"shoal v2 requester proof\0"
    a = addr.encode()
    return hmac.new(key, label + bytes([len(a)]) + a + hello_body + ack_body,
                    hashlib.sha256).digest()


class Refused(Exception):
    pass


def start_session(addr, service, key, proof_addr=None, hello_frame=None):
    """HELLO, HELLO_ACK, AUTH with KEY over PROOF_ADDR (default: ADDR). Returns the socket, the
    HELLO frame, the AUTH frame and the HELLO_ACK body; raises Refused on an ERROR or a close."""
    s = connect(addr)
    hello_frame = hello_frame or hello(service)
    s.sendall(hello_frame)
    try:
        typ, flags, status, id_, ack, _ = read_frame_flags(s)
    except (ConnectionError, OSError):
        raise Refused("closed after HELLO")
    if typ != HELLO_ACK or id_ != 1 or not flags & 1:
        raise Refused("answer %d (flags %d) to HELLO" % (typ, flags))
    auth = proof(key, False, proof_addr or addr, hello_frame[32:], ack)
    auth_frame = frame(AUTH, auth, id_=2)
    s.sendall(auth_frame)
    return s, hello_frame, auth_frame, ack


def refused(s, seconds=2.0):
    """True when S gets nothing but an ERROR(AUTH_FAILED) and a close within SECONDS."""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            typ, status, _, _, _ = read_frame(s)
            if typ != ERROR or status != 8:
                return False
        return False
    except socket.timeout:
        return False
    except (ConnectionError, OSError):
        return True


def run_auth(addr, service, secret_file, wrong_file, deadline_s):
    service, deadline_s = int(service), float(deadline_s)
    key = group_key(read_secret(secret_file))
    wrong = group_key(read_secret(wrong_file))
    bad = 0

    def report(name, ok, extra=""):
        nonlocal bad
        print("%-40s %s%s" % (name, "ok" if ok else "FAIL", extra))
        bad += not ok

    # 1. The right secret: the member proves itself, then answers a PING.
    s, hello1, auth1, ack1 = start_session(addr, service, key)
    typ, status, id_, body, _ = read_frame(s)
    ok = typ == AUTH_OK and id_ == 2 and body == proof(key, True, addr, hello1[32:], ack1)
    s.sendall(frame(PING, b"12345678", id_=3))
    typ, _, id_, body, _ = read_frame(s)
    ok = ok and typ == PONG and body == b"12345678"
    s.close()
    report("right secret: AUTH_OK with a valid proof", ok)

    # 2. The same HELLO and AUTH replayed on a new connection: the member's nonce is new.
    s = connect(addr)
    s.sendall(hello1)
    typ, _, _, ack2, _ = read_frame(s)
    s.sendall(auth1 + frame(PING, b"replay", id_=3))
    report("replayed HELLO+AUTH refused", typ == HELLO_ACK and ack2[1:33] != ack1[1:33] and refused(s))
    s.close()

    # 3. Another secret.
    s, _, _, _ = start_session(addr, service, wrong)
    s.sendall(frame(PING, b"wrong", id_=3))
    report("wrong secret refused", refused(s))
    s.close()

    # 4. The right secret, but a proof made for another address (what a relay produces).
    host = addr.rsplit(":", 1)[0]
    s, _, _, _ = start_session(addr, service, key, proof_addr=host + ":1")
    report("proof for another address refused", refused(s))
    s.close()

    # 5. Requests instead of AUTH: nothing but a close.
    for name, data in (("READ", frame(READ, read_body(), id_=5, flags=FILL)),
                       ("PING", frame(PING, b"p", id_=5)), ("INFO", frame(INFO, id_=5)),
                       ("AUTH_OK", frame(AUTH_OK, bytes(32), id_=2))):
        s = connect(addr)
        s.sendall(hello(service))
        typ, _, _, _, _ = read_frame(s)
        s.sendall(data)
        report("%s instead of AUTH: closed, 0 bytes" % name, typ == HELLO_ACK and refused(s, 1.0)
               and not_answered(s))
        s.close()

    # 6. Silence after HELLO_ACK, and silence from the start: closed by the handshake deadline.
    for name, send_hello in (("silent after HELLO", True), ("silent from the start", False)):
        s = connect(addr)
        t0 = time.monotonic()
        if send_hello:
            s.sendall(hello(service))
            read_frame(s)
        s.settimeout(deadline_s + 5)
        try:
            gone = s.recv(1) == b""
        except OSError:
            gone = True
        took = time.monotonic() - t0
        report("%s: closed within %.0f s" % (name, deadline_s), gone and took <= deadline_s + 1.5,
               " (after %.1f s)" % took)
        s.close()
    print("%d failed" % bad)
    return 1 if bad else 0


def not_answered(s):
    """True when nothing more can be read from S (it is closed)."""
    try:
        s.settimeout(0.2)
        return s.recv(1) == b""
    except (ConnectionError, OSError):
        return True


def run_flood(addr, n, key, version, size, bs, length=65536, go_file=None):
    n, size, bs, length = int(n), int(size), int(bs), int(length)
    # Fewer per connection than the server reads from one before answers are taken
    # (CONN_ACTIVE_MAX, 64 in src/server/server.c): every request reaches the server, so what holds
    # them back is its server-wide cap, not one connection's bound.
    per_conn = 50
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
    answered, errors = read_all_answers(conns, 120)
    print("sent %d, answered %d, errors %d" % (n, answered, errors))
    return 0 if answered == n and errors == 0 else 1


def read_all_answers(conns, timeout_s):
    """(answered, errors) after reading K frames from each (socket, K) of CONNS at once.

    At once, as a client reads: the member's cap on requests in process is server-wide, and an
    answer holds its slot until it is sent, so a client that read one connection to its end
    before the next would leave the others' answers unsent and their slots taken; the first
    connection's queued requests would then wait for the member's send deadline (30 s) to
    close the others."""
    import select
    want = {s: k for s, k in conns}
    bufs = {s: bytearray() for s, _ in conns}
    answered = errors = 0
    deadline = time.monotonic() + timeout_s
    while want and time.monotonic() < deadline:
        r, _, _ = select.select(list(want), [], [], 1.0)
        for s in r:
            chunk = s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed with %d answers unread" % want[s])
            buf = bufs[s]
            buf += chunk
            while len(buf) >= 32 and want[s]:
                typ, bl, pl = buf[5], *struct.unpack_from("<II", buf, 12)
                if len(buf) < 32 + bl + pl:
                    break
                del buf[:32 + bl + pl]
                answered += 1
                errors += typ == ERROR
                want[s] -= 1
            if not want[s]:
                del want[s]
                s.close()
    return answered, errors


def run_hold(ports, first_src, nsrc, per_src, stopfile):
    import ipaddress, select
    ports = [int(p) for p in ports.split(",")]
    base = int(ipaddress.IPv4Address(first_src))
    want = [(str(ipaddress.IPv4Address(base + i)), j) for i in range(int(nsrc)) for j in range(int(per_src))]
    socks = {}
    opened = reopened = failed = 0
    deadline = time.monotonic() + 300
    while not os.path.exists(stopfile) and time.monotonic() < deadline:
        # Reap what the server closed (readable with EOF or an error: we never send anything).
        if socks:
            r, _, _ = select.select(list(socks.values()), [], [], 0)
            for sk in r:
                try:
                    gone = sk.recv(1) == b""
                except OSError:
                    gone = True
                if gone:
                    key = next(k for k, v in socks.items() if v is sk)
                    del socks[key]
                    sk.close()
        for key in want:
            if key in socks:
                continue
            src, j = key
            try:
                sk = socket.create_connection(("127.0.0.1", ports[j % len(ports)]), timeout=1,
                                              source_address=(src, 0))
                socks[key] = sk
                reopened += opened >= len(want)
                opened += 1
            except OSError:
                failed += 1
        print("holding %d" % len(socks), flush=True)
        time.sleep(0.5)
    print("opened %d (%d reopened), failed %d, holding %d at the end" %
          (opened, reopened, failed, len(socks)), flush=True)
    for sk in socks.values():
        sk.close()
    return 0


def file_version(path):
    """The version store_file.c gives a file: size, mtime, inode and ctime."""
    st = os.stat(path)
    return "%x-%x.%09d-%x-%x.%09d" % (st.st_size, st.st_mtime_ns // 10**9, st.st_mtime_ns % 10**9,
                                      st.st_ino, st.st_ctime_ns // 10**9, st.st_ctime_ns % 10**9)


def block_bodies(storedir, key, bs=4 << 20):
    """A READ body per block of KEY asking for the whole block, with the object's true size."""
    path = os.path.join(storedir, key)
    size, ver = os.stat(path).st_size, file_version(path)
    return [read_body(key.encode(), ver.encode(), size, bs, idx, 0, min(bs, size - idx * bs))
            for idx in range((size + bs - 1) // bs)]


def run_pipeclose(addr, storedir, prefix, nobj, conns, per_conn):
    nobj, conns, per_conn = int(nobj), int(conns), int(per_conn)
    # Every frame first, so that each connection closes right after its reads are sent.
    blobs = []
    for first in range(0, nobj, per_conn):
        blobs.append(b"".join(
            frame(READ, block_bodies(storedir, "%s%d" % (prefix, k))[0], id_=100 + k - first,
                  flags=FILL) for k in range(first, min(nobj, first + per_conn))))
    for r in range(0, len(blobs), conns):
        socks = []
        for blob in blobs[r:r + conns]:
            s = connect(addr)
            s.settimeout(20)  # the member may be busy with the fills of the last round
            handshake(s)
            socks.append((s, blob))
        for s, blob in socks:
            s.sendall(blob)
            s.close()
    print("pipelined %d reads and closed" % nobj)
    return 0


def run_hog(addr, storedir, key, n, stopfile):
    s = connect(addr)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    handshake(s)
    bodies = block_bodies(storedir, key)
    s.sendall(b"".join(frame(READ, bodies[i % len(bodies)], id_=1000 + i, flags=FILL)
                       for i in range(int(n))))
    print("hogging", flush=True)
    while not os.path.exists(stopfile):
        time.sleep(0.1)
    s.close()
    return 0


def run_corrupt(addr, storedir, key, conns, seconds):
    import select
    notices = [frame(CORRUPT, b, id_=5000 + i) for i, b in enumerate(block_bodies(storedir, key))]
    socks = []
    for _ in range(int(conns)):
        s = connect(addr)
        handshake(s)
        s.setblocking(False)
        socks.append(s)
    blob = b"".join(notices)
    sent = 0
    end = time.monotonic() + float(seconds)
    pending = {s: b"" for s in socks}
    while time.monotonic() < end:
        _, w, _ = select.select([], socks, [], 0.1)
        for s in w:
            if not pending[s]:
                pending[s] = blob
                sent += len(notices)
            try:
                n = s.send(pending[s])
                pending[s] = pending[s][n:]
            except BlockingIOError:
                pass
    for s in socks:
        s.close()
    print("sent %d corrupt notices" % sent)
    return 0


def run_claim(addr, service, kind, key, version, size, index, off, length):
    service, size, index, off, length = int(service), int(size), int(index), int(off), int(length)
    s = connect(addr)
    s.settimeout(30)
    handshake(s, service)
    body = read_body(key.encode(), version.encode(), size, 4 << 20, index, off, length)
    if kind == "corrupt":
        s.sendall(frame(CORRUPT, body, id_=9))
        # A PING after it: the answer shows the notice was read (its check runs on its own).
        s.sendall(frame(PING, b"p", id_=10))
        typ, _, _, _, _ = read_frame(s)
        print("sent" if typ == PONG else "unexpected type %d" % typ)
        s.close()
        return 0
    s.sendall(frame(READ, body, id_=9, flags=FILL if kind == "fill" else 0))
    try:
        typ, status, _, rbody, payload = read_frame(s)
    except socket.timeout:
        print("hang")
        return 0
    except (ConnectionError, OSError):
        print("closed")
        return 0
    if typ == READ_RESP:
        # TCP carries the payload after the body; take it all before closing.
        print("resp %d" % len(payload))
    elif typ == ERROR:
        print("error %d %s" % (status, rbody.decode(errors="replace")))
    else:
        print("unexpected type %d" % typ)
    s.close()
    return 0


# ---- write-through [W3] ----------------------------------------------------------------------

def volume_fp(url, bs):
    return hashlib.sha256(url.encode() + b"\0" + struct.pack("<I", bs)).digest()[:16]


def block_id(fp, key, version, index):
    return hashlib.sha256(fp + struct.pack("<H", len(key)) + key + struct.pack("<H", len(version))
                          + version + struct.pack("<I", index)).digest()[:16]


def put_body(key, version, size, bs, index):
    return struct.pack("<QQIIHH", 0, size, bs, index, len(key), len(version)) + key + version


def put_payload(fp, key, version, index, data):
    """The PUT_BLOCK payload: chunk CRCs (seeded with the block id and index), then DATA."""
    bid = block_id(fp, key, version, index)
    crcs = b""
    for c in range(0, len(data), 65536):
        crcs += struct.pack("<I", crc32c(data[c:c + 65536], crc32c(bid + struct.pack("<I", c // 65536))))
    return crcs + data


def session(addr, secret_file):
    key = group_key(read_secret(secret_file))
    s, _, _, _ = start_session(addr, 2, key)
    typ, status, _, _, _ = read_frame(s)
    if typ != AUTH_OK:
        raise Refused("no AUTH_OK")
    s.settimeout(10)
    return s


def answer(s):
    """'resp', 'error STATUS', 'closed' (the member closed: EOF or a reset), or 'timeout' (no
    answer within S's timeout: a member gone silent is not one that closed) for the next answer
    on S."""
    try:
        typ, status, _, body, _ = read_frame(s)
    except socket.timeout:
        return "timeout"
    except (ConnectionError, OSError):
        return "closed"
    if typ == PUT_RESP:
        return "resp"
    if typ == ERROR:
        return "error %d" % status
    return "type %d" % typ


def run_put(addr, secret_file, url, bs, storedir, good, bad):
    bs = int(bs)
    fp = volume_fp(url, bs)
    failed = 0

    def obj(key):
        path = os.path.join(storedir, key)
        data = open(path, "rb").read()
        return key.encode(), file_version(path).encode(), data

    def check(name, got, want):
        nonlocal failed
        ok = got == want
        failed += not ok
        print("%-44s %s%s" % (name, "ok" if ok else "FAIL", "" if ok else " (%s, want %s)" % (got, want)),
              flush=True)

    def one(name, want, body, payload, payload_len=None, then_ping=True):
        s = session(addr, secret_file)
        pl = len(payload) if payload_len is None else payload_len
        s.sendall(frame(PUT_BLOCK, body, id_=7, payload_len=pl) + payload)
        got = answer(s)
        if then_ping and got.startswith("error"):
            # A refused put leaves the stream in step: the connection still answers.
            s.sendall(frame(PING, b"after", id_=8))
            nxt = read_frame(s)
            if nxt[0] != PONG:
                got += " then %d" % nxt[0]
        s.close()
        check(name, got, want)

    gk, gv, gdata = obj(good)
    blen = min(bs, len(gdata))
    one("true put of a committed block", "resp", put_body(gk, gv, len(gdata), bs, 0),
        put_payload(fp, gk, gv, 0, gdata[:blen]))
    k, v, data = obj(bad)
    blen = min(bs, len(data))
    good_payload = put_payload(fp, k, v, 0, data[:blen])
    body = put_body(k, v, len(data), bs, 0)
    one("payload one byte short", "error 5", body, good_payload[:-1])
    one("payload one byte long", "error 5", body, good_payload + b"x")
    flipped = bytearray(good_payload)
    flipped[-1] ^= 1
    one("a byte flipped (chunk CRC fails)", "error 5", body, bytes(flipped))
    crcbad = bytearray(good_payload)
    crcbad[0] ^= 1
    one("a wrong chunk CRC", "error 5", body, bytes(crcbad))
    ov = b"1-1.000000001"
    one("a version the store does not hold", "error 2", put_body(k, ov, len(data), bs, 0),
        put_payload(fp, k, ov, 0, data[:blen]))
    big = len(data) + 3 * bs
    one("a size the object does not have", "error 5", put_body(k, v, big, bs, 0),
        put_payload(fp, k, v, 0, data[:blen]))
    nk = k + b".missing"
    one("an object the store does not have", "error 1", put_body(nk, v, len(data), bs, 0),
        put_payload(fp, nk, v, 0, data[:blen]))
    one("another block size", "error 10", put_body(k, v, len(data), bs * 2, 0), good_payload)
    one("an index past the object's end", "error 5",
        put_body(k, v, len(data), bs, 0)[:20] + struct.pack("<I", 1000) + body[24:], good_payload)
    # Past the largest payload: refused from the header alone, before any byte is read.
    s = session(addr, secret_file)
    s.sendall(frame(PUT_BLOCK, body, id_=9, payload_len=PUT_PAYLOAD_MAX + 1))
    check("payload_len past the largest block", answer(s), "closed")
    s.close()
    # Without AUTH: after HELLO, and as the very first frame.
    for name, pre in (("put before AUTH", True), ("put as the first frame", False)):
        s = connect(addr)
        s.settimeout(3)
        if pre:
            s.sendall(hello(2))
            read_frame(s)
        s.sendall(frame(PUT_BLOCK, body, id_=3, payload_len=len(good_payload)) + good_payload)
        check(name, answer(s), "closed")
        s.close()
    return 1 if failed else 0


def run_plant(addr, url, bs, storedir, key):
    """PUT_BLOCK of forged bytes ('P's, chunk CRCs right) for every block of KEY with the version
    and size the store gives anyone with stat, on one connection authenticated as this process
    may (handshake). Prints "accepted N refused M"."""
    bs = int(bs)
    fp = volume_fp(url, bs)
    path = os.path.join(storedir, key)
    size, ver = os.stat(path).st_size, file_version(path).encode()
    k = key.encode()
    accepted = refused_ = 0
    s = connect(addr)
    s.settimeout(10)
    try:
        handshake(s, 2)
        for idx in range((size + bs - 1) // bs):
            data = b"P" * min(bs, size - idx * bs)
            pl = put_payload(fp, k, ver, idx, data)
            s.sendall(frame(PUT_BLOCK, put_body(k, ver, size, bs, idx), id_=idx + 7,
                            payload_len=len(pl)) + pl)
            if answer(s) == "resp":
                accepted += 1
            else:
                refused_ += 1
    except (ConnectionError, OSError):
        pass
    s.close()
    nblocks = (size + bs - 1) // bs
    refused_ = nblocks - accepted
    print("accepted %d refused %d" % (accepted, refused_))
    return 0


def run_put_flood(addr, secret_file, url, bs, storedir, key, conns, per_conn):
    import threading
    bs, conns, per_conn = int(bs), int(conns), int(per_conn)
    fp = volume_fp(url, bs)
    path = os.path.join(storedir, key)
    data = open(path, "rb").read()[:bs]
    k, v = key.encode(), file_version(path).encode()
    size = os.stat(path).st_size
    bad_crc = bytearray(put_payload(fp, k, v, 0, data))
    bad_crc[0] ^= 0xFF
    frames_ = [frame(PUT_BLOCK, put_body(k, v, size, bs, 0), payload_len=len(bad_crc)) + bytes(bad_crc)]
    ov = b"2-2.000000002"
    other = put_payload(fp, k, ov, 0, data)
    frames_.append(frame(PUT_BLOCK, put_body(k, ov, size, bs, 0), payload_len=len(other)) + other)
    results = []
    lock = threading.Lock()

    def worker():
        got = {}
        try:
            s = session(addr, secret_file)
            for i in range(per_conn):
                s.sendall(frames_[i % 2])  # stop and wait: one id in flight at a time
                a = answer(s)
                got[a] = got.get(a, 0) + 1
            s.close()
        except Exception as e:  # noqa: BLE001 — reported below
            got["exception %s" % e] = 1
        with lock:
            results.append(got)

    ts = [threading.Thread(target=worker) for _ in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    total = {}
    for g in results:
        for a, n in g.items():
            total[a] = total.get(a, 0) + n
    print("answers: %s" % sorted(total.items()), flush=True)
    refused = total.get("error 5", 0) + total.get("error 2", 0) + total.get("error 9", 0)
    if refused != conns * per_conn:
        return 1
    print("refused %d" % refused)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 9 and sys.argv[1] == "put":
        sys.exit(run_put(*sys.argv[2:]))
    if len(sys.argv) == 7 and sys.argv[1] == "plant":
        sys.exit(run_plant(*sys.argv[2:]))
    if len(sys.argv) == 10 and sys.argv[1] == "put-flood":
        sys.exit(run_put_flood(*sys.argv[2:]))
    if len(sys.argv) == 8 and sys.argv[1] == "pipeclose":
        sys.exit(run_pipeclose(*sys.argv[2:]))
    if len(sys.argv) == 7 and sys.argv[1] == "hog":
        sys.exit(run_hog(*sys.argv[2:]))
    if len(sys.argv) == 7 and sys.argv[1] == "corrupt":
        sys.exit(run_corrupt(*sys.argv[2:]))
    if len(sys.argv) == 7 and sys.argv[1] == "hold":
        sys.exit(run_hold(*sys.argv[2:]))
    if len(sys.argv) == 11 and sys.argv[1] == "claim":
        sys.exit(run_claim(*sys.argv[2:]))
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
    if len(sys.argv) == 7 and sys.argv[1] == "auth":
        sys.exit(run_auth(*sys.argv[2:]))
    if len(sys.argv) == 8 and sys.argv[1] == "flood":
        sys.exit(run_flood(*sys.argv[2:]))
    if len(sys.argv) == 10 and sys.argv[1] == "flood-hold":
        sys.exit(run_flood(*sys.argv[2:]))
    print(__doc__)
    sys.exit(2)
