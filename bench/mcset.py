#!/usr/bin/env python3
"""Stores one value of N random bytes in memcached: mcset.py HOST PORT KEY N"""
import os
import socket
import sys

host, port, key, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = socket.create_connection((host, port))
s.sendall(b"set %s 0 0 %d\r\n" % (key.encode(), n) + os.urandom(n) + b"\r\n")
ans = s.recv(64)
sys.exit(0 if ans.startswith(b"STORED") else 1)
