#!/usr/bin/env python3
"""A TCP proxy that damages traffic, for wire-fault tests (stdlib only).

  faultproxy.py LISTEN_PORT TARGET_HOST:PORT MODE

Modes (server-to-client direction unless said):
  flip    flip one bit in every MiB, at a random place
  slice   both directions in random 1..1023-byte pieces with short gaps
  cut     close each connection after N bytes, N cycling through 10 (inside a header),
          32 (payload start), 100000 (mid-payload) and 1 byte short of the first answer
  pass    forward unchanged
  mix     frame-aware: every connection ends cleanly after a random 1..40 read answers (so that a pooled
          client keeps making new ones), and 1 of every 30 connections is damaged at a random
          byte of a random answer, by turns cut (closed), reset (RST) or corrupted (one bit)
  once    frame-aware: every connection ends cleanly after its first read answer (a member that
          closes idle connections: every connection a client pools is dead when next used)
Counts of damaged connections are printed to stdout on SIGTERM.
"""
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time

listen_port, target, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
thost, tport = target.rsplit(":", 1)
stats = {"conns": 0, "flips": 0, "cuts": 0, "resets": 0, "answers": 0, "clean_closes": 0,
         "spared": 0}
lock = threading.Lock()
READ_RESP = 17  # frame type of an answer to a read (docs/iorpc-protocol.md)
cut_points = [10, 32, 100000, 32 + 28 + 4 * 64 + 4 * 1024 * 1024 - 1]


def pump(src, dst, damage, cut_at):
    sent = 0
    next_flip = random.randint(0, 1 << 20)
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if damage and mode == "flip":
                buf = bytearray(data)
                while sent <= next_flip < sent + len(buf):
                    i = next_flip - sent
                    buf[i] ^= 1 << random.randint(0, 7)
                    with lock:
                        stats["flips"] += 1
                    next_flip += 1 << 20
                data = bytes(buf)
            if damage and cut_at is not None and sent + len(data) >= cut_at:
                dst.sendall(data[: cut_at - sent])
                with lock:
                    stats["cuts"] += 1
                break
            if mode == "slice":
                i = 0
                while i < len(data):
                    n = random.randint(1, 1023)
                    dst.sendall(data[i : i + n])
                    i += n
                    if random.random() < 0.05:
                        time.sleep(0.001)
            else:
                dst.sendall(data)
            sent += len(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return buf


def mix_conn(server, client, n):
    """Mode mix: both directions of one connection in this one thread (so a close or a reset
    takes effect at once: no other thread holds the sockets), answers parsed frame by frame."""
    rnd = random.Random(n)
    life = 1 if mode == "once" else rnd.randint(1, 40)
    damage = ["cut", "reset", "flip"][(n // 30) % 3] if n % 30 == 0 and mode == "mix" else None
    hit = rnd.randint(1, life)
    applied = False
    k = 0
    sbuf = bytearray()
    end = "closed"
    try:
        while k < life:
            r, _, _ = select.select([client, server], [], [], 60)
            if not r:
                break
            if client in r:
                data = client.recv(65536)
                if not data:
                    break
                server.sendall(data)
            if server in r:
                data = server.recv(1 << 20)
                if not data:
                    break
                sbuf += data
                while len(sbuf) >= 32 and k < life:
                    body_len, payload_len = struct.unpack_from("<II", sbuf, 12)
                    size = 32 + body_len + payload_len
                    if len(sbuf) < size:
                        break
                    frame = sbuf[:size]
                    del sbuf[:size]
                    if frame[5] != READ_RESP:
                        client.sendall(frame)  # the handshake: not an answer to count or damage
                        continue
                    k += 1
                    if damage and k == hit:
                        applied = True
                        at = rnd.randrange(len(frame))
                        if damage == "flip":
                            frame[at] ^= 1 << rnd.randrange(8)
                            with lock:
                                stats["flips"] += 1
                        else:
                            client.sendall(frame[:at])
                            end = damage
                            with lock:
                                stats["cuts" if damage == "cut" else "resets"] += 1
                            raise StopIteration
                    client.sendall(frame)
                    with lock:
                        stats["answers"] += 1
                        if k == life:
                            stats["clean_closes"] += 1
    except (OSError, StopIteration):
        pass
    if damage and not applied:
        # Chosen, but the client closed it (or the run ended) before the answer to damage.
        with lock:
            stats["spared"] += 1
    if end == "reset":
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    else:
        for s in (client, server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    client.close()
    server.close()


def handle(client):
    with lock:
        stats["conns"] += 1
        n = stats["conns"]
    try:
        server = socket.create_connection((thost, int(tport)), timeout=5)
        server.settimeout(None)
    except OSError:
        client.close()
        return
    if mode in ("mix", "once"):
        mix_conn(server, client, n)
        return
    cut_at = cut_points[n % len(cut_points)] if mode == "cut" else None
    t1 = threading.Thread(target=pump, args=(client, server, False, None), daemon=True)
    t2 = threading.Thread(target=pump, args=(server, client, True, cut_at), daemon=True)
    t1.start()
    t2.start()
    t1.join()
    t2.join()
    client.close()
    server.close()


def stop(*_):
    print(" ".join("%s %d" % kv for kv in stats.items()), flush=True)
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", listen_port))
ls.listen(256)
while True:
    c, _ = ls.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
