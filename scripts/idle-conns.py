#!/usr/bin/env python3
"""Memory per idle keep-alive client connection.

Opens N client connections to URL's host:port, sends one keep-alive GET on
each and reads the response, then leaves them idle and reports how much the
DUT's resident memory (summed over PIDs) grew per connection.

usage: idle-conns.py HOST:PORT PATH N PID[,PID...]
"""
import asyncio
import os
import resource
import sys
import time


def rss_kb(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


async def one(host, port, path, source, held):
    r, w = await asyncio.open_connection(host, port, local_addr=(source, 0))
    w.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
    await w.drain()
    head = await r.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    if length:
        await r.readexactly(length)
    held.append((r, w))


async def main():
    hostport, path, n, pids = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(p) for p in sys.argv[4].split(",")]
    host, port = hostport.rsplit(":", 1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = []
    # Warm up the DUT (upstream connection, buffers) before the baseline.
    await one(host, int(port), path, "127.0.0.1", held)
    time.sleep(0.5)
    before = rss_kb(pids)
    batch = int(os.environ.get("BATCH", "100"))
    for start in range(0, n, batch):
        tasks = []
        for i in range(start, min(n, start + batch)):
            # Spread sources over 127.0.0.0/8 so ports never run out.
            source = f"127.0.{1 + i // 20000}.{1 + (i // 250) % 250}"
            tasks.append(one(host, int(port), path, source, held))
        await asyncio.gather(*tasks)
    await asyncio.sleep(float(os.environ.get("SETTLE", "3")))
    after = rss_kb(pids)
    per = (after - before) * 1024 / n
    print(f"connections={len(held) - 1} rss_before_kb={before} rss_after_kb={after} bytes_per_connection={per:.0f}")
    for _, w in held:
        w.close()


asyncio.run(main())
