"""An HTTP/3 client for the tests, on aioquic (written by others: the
server meets a QUIC and HTTP/3 stack that is not its own).

    client.py HOST PORT CA_FILE SERVER_NAME [TIMEOUT_S] < requests.json

requests.json: [{"method": "GET", "path": "/", "headers": [["k", "v"]],
"body": "text"}, ...], sent on one connection, all at once (one stream
each). Prints one JSON object: {"responses": [{"status": 200, "headers":
[[k, v], ...], "body": "..."}], "alpn": "h3"}, or {"error": "..."}.
"""

import asyncio
import json
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.waiting = {}

    def quic_event_received(self, event: QuicEvent):
        for e in self.http.handle_event(event):
            if isinstance(e, (HeadersReceived, DataReceived)) and e.stream_id in self.waiting:
                r = self.waiting[e.stream_id]
                if isinstance(e, HeadersReceived):
                    if "status" not in r:
                        r["headers"] = [[k.decode(), v.decode()] for k, v in e.headers]
                        r["status"] = int(dict(e.headers)[b":status"])
                    else:
                        r["trailers"] = [[k.decode(), v.decode()] for k, v in e.headers]
                else:
                    r["body"] += e.data
                if e.stream_ended:
                    r["done"].set()

    async def request(self, authority, req):
        sid = self._quic.get_next_available_stream_id()
        body = req.get("body", "").encode()
        headers = [
            (b":method", req.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", req.get("path", "/").encode()),
        ] + [(k.encode(), v.encode()) for k, v in req.get("headers", [])]
        r = {"body": b"", "done": asyncio.Event()}
        self.waiting[sid] = r
        self.http.send_headers(stream_id=sid, headers=headers, end_stream=not body)
        if body:
            self.http.send_data(stream_id=sid, data=body, end_stream=True)
        self.transmit()
        await asyncio.wait_for(r["done"].wait(), 10)
        out = {"status": r.get("status"), "headers": r.get("headers", [])}
        out["body"] = r["body"].decode("utf-8", "replace")
        if "trailers" in r:
            out["trailers"] = r["trailers"]
        return out


async def main():
    host, port, ca, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    reqs = json.load(sys.stdin)
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=name)
    cfg.load_verify_locations(ca)
    cfg.verify_mode = ssl.CERT_REQUIRED
    async with connect(host, port, configuration=cfg, create_protocol=Client) as c:
        authority = f"{name}:{port}"
        responses = await asyncio.gather(*(c.request(authority, r) for r in reqs))
        alpn = c._quic.tls.alpn_negotiated
    print(json.dumps({"responses": responses, "alpn": alpn}))


try:
    asyncio.run(asyncio.wait_for(main(), float(sys.argv[5]) if len(sys.argv) > 5 else 20))
except Exception as e:  # the test reads what went wrong
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
