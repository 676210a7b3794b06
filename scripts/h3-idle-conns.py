"""N HTTP/3 connections (aioquic) to 127.0.0.1:26084, each fetching one
response (PATH, default /size/1024), then held open idle: prints "ready N
BYTES" and waits for a line on stdin before closing them.
    h3-idle-conns.py N [PATH]
(scripts/h3-idle-conns.sh runs it against each DUT.)"""
import asyncio, ssl, sys
from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration

class C(QuicConnectionProtocol):
    def __init__(s, *a, **k):
        super().__init__(*a, **k); s.http = H3Connection(s._quic); s.w = {}
    def quic_event_received(s, ev):
        for e in s.http.handle_event(ev):
            if isinstance(e, (HeadersReceived, DataReceived)) and e.stream_id in s.w:
                r = s.w[e.stream_id]
                if isinstance(e, DataReceived): r[0] += len(e.data)
                if e.stream_ended: r[1].set()
    async def get(s, path):
        sid = s._quic.get_next_available_stream_id()
        s.w[sid] = [0, asyncio.Event()]
        s.http.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"bench.switchyard.test:26084"), (b":path", path.encode())], end_stream=True)
        s.transmit(); await asyncio.wait_for(s.w[sid][1].wait(), 10); return s.w[sid][0]

async def one(path, got, hold):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="bench.switchyard.test", verify_mode=ssl.CERT_NONE, idle_timeout=120)
    async with connect("127.0.0.1", 26084, configuration=cfg, create_protocol=C) as c:
        got.append(await c.get(path))
        await hold.wait()

async def main():
    n = int(sys.argv[1]); path = sys.argv[2] if len(sys.argv) > 2 else "/size/1024"
    got = []; hold = asyncio.Event()
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(one(path, got, hold)))
        if i % 20 == 19: await asyncio.sleep(0.05)
    while len(got) < n:
        await asyncio.sleep(0.1)
    print("ready", len(got), sum(got), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    hold.set(); await asyncio.gather(*tasks, return_exceptions=True)
asyncio.run(main())
