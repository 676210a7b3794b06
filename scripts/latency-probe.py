#!/usr/bin/env python3
"""Per-request latency through a proxy, one keep-alive connection, sequential.

usage: latency-probe.py PORT N GAP_SECONDS
Sends N requests for /size/1 to 127.0.0.1:PORT, GAP_SECONDS apart, and prints
p50/p90/p99/max and which request was the slowest.
"""
import socket
import sys
import time

port, n, gap = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
req = b"GET /size/1 HTTP/1.1\r\nHost: probe\r\n\r\n"
lat = []
for _ in range(n):
    t = time.perf_counter()
    s.sendall(req)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    head, _, body = buf.partition(b"\r\n\r\n")
    length = int(next(l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")))
    while len(body) < length:
        body += s.recv(65536)
    lat.append((time.perf_counter() - t) * 1e6)
    time.sleep(gap)
slowest = max(range(n), key=lambda i: lat[i])
lat.sort()
print(f"p50 {lat[n // 2]:.0f}us p90 {lat[int(n * .9)]:.0f}us p99 {lat[int(n * .99)]:.0f}us max {lat[-1]:.0f}us (slowest: request {slowest})")
