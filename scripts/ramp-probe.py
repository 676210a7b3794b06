#!/usr/bin/env python3
"""Latency of each new connection's first request, connections opened one per
millisecond and kept open: finds stalls tied to the connection count (the
descriptor table's growth, for one; see runtime/fdtable.rs).

usage: ramp-probe.py PORT N
Opens N keep-alive connections to 127.0.0.1:PORT, one per millisecond, each
sending GET /size/1024 once, and prints the median, the maximum, and every
request slower than 1 ms as (ms since the start, latency in us).
"""
import socket
import sys
import time

port, n = int(sys.argv[1]), int(sys.argv[2])
held, lat = [], []
t0 = time.perf_counter()
for i in range(n):
    due = t0 + i * 0.001
    while time.perf_counter() < due:
        pass
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = time.perf_counter()
    s.sendall(b"GET /size/1024 HTTP/1.1\r\nHost: probe\r\n\r\n")
    buf = b""
    while True:
        buf += s.recv(65536)
        head, sep, body = buf.partition(b"\r\n\r\n")
        if sep and len(body) >= 1024:
            break
    lat.append(((t - t0) * 1000, (time.perf_counter() - t) * 1e6))
    held.append(s)
ordered = sorted(l for _, l in lat)
slow = [(round(at, 1), round(l)) for at, l in lat if l > 1000]
print(f"p50 {ordered[n // 2]:.0f} us, max {ordered[-1]:.0f} us, over 1 ms: {slow}")
