#!/usr/bin/env python3
"""CPU a DUT spends on users who come back after a long think time.

Opens USERS keep-alive connections (one request each), lets them sit idle
SETTLE seconds (long enough for Switchyard to park them), then measures the
DUT's CPU (the sum of its threads' run time from /proc/PID/task/*/schedstat,
in nanoseconds, not clock ticks) over two windows of WINDOW seconds each:

  idle     nothing is sent: what holding USERS idle connections costs;
  trickle  RATE requests a second, each on the connection idle longest (so
           every request comes on a connection idle USERS/RATE seconds).

Prints both as CPU milliseconds per second, and the trickle's CPU per
request with the idle cost included (what a user costs) and left out.

  scripts/parked-requests.py PORT PID [USERS] [SETTLE] [WINDOW] [RATE]

PID is the DUT process (every thread is summed). Run it on another CPU than
the DUT (taskset -c 1). The descriptor limit must allow USERS connections.
"""
import os
import socket
import sys
import time

REQ = b"GET /size/128 HTTP/1.1\r\nHost: bench\r\n\r\n"


def cpu_ns(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def exchange(s):
    s.sendall(REQ)
    got = b""
    # The bench origin's 128-byte answer carries Content-Length: read the
    # head, then the body it announces.
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("closed by the DUT")
        got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("closed by the DUT")
        body += chunk


def main():
    port, pid = int(sys.argv[1]), int(sys.argv[2])
    users = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    settle = float(sys.argv[4]) if len(sys.argv) > 4 else 8
    window = float(sys.argv[5]) if len(sys.argv) > 5 else 20
    rate = float(sys.argv[6]) if len(sys.argv) > 6 else 33
    conns = []
    for _ in range(users):
        s = socket.create_connection(("127.0.0.1", port))
        exchange(s)
        conns.append(s)
    time.sleep(settle)
    c0 = cpu_ns(pid)
    time.sleep(window)
    c1 = cpu_ns(pid)
    n = int(window * rate)
    start = time.monotonic()
    for i in range(n):
        due = start + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        exchange(conns[i % users])
    spent = max(time.monotonic() - start, window)
    c2 = cpu_ns(pid)
    idle_per_s = (c1 - c0) / window
    trickle_per_s = (c2 - c1) / spent
    print(
        f"{users} connections: idle {idle_per_s / 1e6:.3f} ms/s; "
        f"{n} requests at {rate:g}/s, each on a connection idle "
        f"{min(users, n) / rate:.0f} s or more: {trickle_per_s / 1e6:.3f} ms/s, "
        f"{(c2 - c1) / n / 1e3:.1f} us/request "
        f"({((c2 - c1) - idle_per_s * spent) / n / 1e3:.1f} without the idle cost)"
    )


if __name__ == "__main__":
    main()
