#!/usr/bin/env python3
"""A TCP proxy that damages traffic, for wire-fault tests (stdlib only).

  faultproxy.py LISTEN_PORT TARGET_HOST:PORT MODE

Modes (server-to-client direction unless said):
  flip    flip one bit in every MiB, at a random place
  slice   both directions in random 1..1023-byte pieces with short gaps
  cut     close each connection after N bytes, N cycling through 10 (inside a header),
          32 (payload start), 100000 (mid-payload) and 1 byte short of the first answer
  pass    forward unchanged
Counts of damaged connections are printed to stdout on SIGTERM.
"""
import os
import random
import signal
import socket
import sys
import threading
import time

listen_port, target, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
thost, tport = target.rsplit(":", 1)
stats = {"conns": 0, "flips": 0, "cuts": 0}
lock = threading.Lock()
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
    print("conns %d flips %d cuts %d" % (stats["conns"], stats["flips"], stats["cuts"]), flush=True)
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", listen_port))
ls.listen(256)
while True:
    c, _ = ls.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
