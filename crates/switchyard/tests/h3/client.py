"""An HTTP/3 client for the tests, on aioquic (written by others: the
server meets a QUIC and HTTP/3 stack that is not its own).

    client.py HOST PORT CA_FILE SERVER_NAME [TIMEOUT_S [TICKET_FILE [HOLD_MS [LINGER_MS [PAD]]]]] < requests.json

requests.json: [{"method": "GET", "path": "/", "headers": [["k", "v"]],
"body": "text", "trailers": [["k", "v"]]}, ...], sent on one connection,
all at once (one stream each); trailers follow the body in a HEADERS
frame of their own. Prints one JSON object: {"responses": [{"status": 200, "headers":
[[k, v], ...], "body": "..."}], "alpn": "h3"}, or {"error": "..."}; a
request whose stream the server reset has "reset": its error code, one
that got interim (1xx) responses first has "interim": [{"status": 103,
"headers": [...]}, ...].

TICKET_FILE: the session tickets the server sends are saved there; when
it holds one at the start, the connection resumes with it and the requests
leave at once, in 0-RTT early data if the ticket allows it ("early_data"
and "resumed" in the output say what the server did; "transport" has the
server's flow-control windows; "peer_subject" the subject of the
certificate the server sent, on a full handshake). HOLD_MS: datagrams
from the server wait that long before the client reads them, so that the
handshake cannot end before the server has seen the early requests.
LINGER_MS: after the responses the connection stays open that long, or
until the server closes it ("closed_by_server" in the output). An empty
TICKET_FILE: no tickets.

PAD: that many bytes of made-up ALPN names
after "h3", so the ClientHello spans two Initial packets as a browser's
with a post-quantum key share does (Chrome's is about 1.8 KB); the second
leaves 150 ms after the first.

"datagrams" in the output: how many the server sent ("received"), the
largest's UDP payload in bytes ("largest"), and how many came after the
client closed the connection ("after_close"). H3_FRAMES=1 (environment)
adds "frames": the frames of each datagram the server sent, in order, a
list of lists of their types ("stream 3" for a STREAM frame on stream 3;
PADDING left out), from aioquic's own log.

H3_CLIENT_CERT and H3_CLIENT_KEY (environment): a client certificate and
its key (PEM files) to present when the server asks for one.
"""

import asyncio
import json
import os
import pickle
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent, StreamReset
from aioquic.quic.logger import QuicLogger


class SecondDatagramLate:
    """The client's second datagram leaves 150 ms after the others: with a
    padded ClientHello, its second half reaches the server well after the
    first, as it can on a real network."""

    def __init__(self, transport, loop):
        self.transport, self.loop, self.sent = transport, loop, 0

    def sendto(self, data, addr=None):
        self.sent += 1
        if self.sent == 2:
            self.loop.call_later(0.15, self.transport.sendto, data, addr)
        else:
            self.transport.sendto(data, addr)

    def __getattr__(self, name):
        return getattr(self.transport, name)


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.waiting = {}
        self.hold_until = None
        self.split_hello = False
        self.datagrams, self.largest, self.at_close = 0, 0, None

    def connection_made(self, transport):
        super().connection_made(transport)
        if self.split_hello:
            self._transport = SecondDatagramLate(transport, self._loop)

    def datagram_received(self, data, addr):
        self.datagrams += 1
        self.largest = max(self.largest, len(data))
        if self.hold_until is not None and self._loop.time() < self.hold_until:
            self._loop.call_at(self.hold_until, super().datagram_received, data, addr)
            return
        super().datagram_received(data, addr)

    def close(self, *args, **kwargs):
        self.at_close = self.datagrams
        super().close(*args, **kwargs)

    def quic_event_received(self, event: QuicEvent):
        # A request the server refused by resetting its stream (a malformed
        # head: RFC 9114 4.1.2) ends with that code: "reset" in the output.
        if isinstance(event, StreamReset) and event.stream_id in self.waiting:
            r = self.waiting[event.stream_id]
            r["reset"] = event.error_code
            r["done"].set()
        for e in self.http.handle_event(event):
            if isinstance(e, (HeadersReceived, DataReceived)) and e.stream_id in self.waiting:
                r = self.waiting[e.stream_id]
                if isinstance(e, HeadersReceived):
                    status = dict(e.headers).get(b":status", b"")
                    fields = [[k.decode(), v.decode()] for k, v in e.headers]
                    if "status" not in r and status.startswith(b"1"):
                        r.setdefault("interim", []).append({"status": int(status), "headers": fields})
                    elif "status" not in r:
                        r["headers"] = fields
                        r["status"] = int(status)
                    else:
                        r["trailers"] = fields
                else:
                    r["body"] += e.data
                if e.stream_ended:
                    r["done"].set()

    async def request(self, authority, req):
        sid = self._quic.get_next_available_stream_id()
        body = req.get("body", "").encode()
        trailers = [(k.encode(), v.encode()) for k, v in req.get("trailers", [])]
        headers = [
            (b":method", req.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", req.get("path", "/").encode()),
        ] + [(k.encode(), v.encode()) for k, v in req.get("headers", [])]
        r = {"body": b"", "done": asyncio.Event()}
        self.waiting[sid] = r
        self.http.send_headers(stream_id=sid, headers=headers, end_stream=not (body or trailers))
        if body:
            self.http.send_data(stream_id=sid, data=body, end_stream=not trailers)
        if trailers:
            self.http.send_headers(stream_id=sid, headers=trailers, end_stream=True)
        self.transmit()
        await asyncio.wait_for(r["done"].wait(), 10)
        out = {"status": r.get("status"), "headers": r.get("headers", [])}
        out["body"] = r["body"].decode("utf-8", "replace")
        if "trailers" in r:
            out["trailers"] = r["trailers"]
        if "interim" in r:
            out["interim"] = r["interim"]
        if "reset" in r:
            out["reset"] = r["reset"]
        return out


def split(client, on):
    client.split_hello = on
    return client


async def main():
    host, port, ca, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    ticket_file = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] else None
    hold_ms = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    linger_ms = int(sys.argv[8]) if len(sys.argv) > 8 else 0
    reqs = json.load(sys.stdin)
    alpn = list(H3_ALPN)
    pad = int(sys.argv[9]) if len(sys.argv) > 9 else 0
    while 31 * (len(alpn) - len(H3_ALPN)) < pad:
        alpn.append("x-pad-%03d-%s" % (len(alpn), "p" * 20))
    cfg = QuicConfiguration(is_client=True, alpn_protocols=alpn, server_name=name)
    cfg.load_verify_locations(ca)
    cfg.verify_mode = ssl.CERT_REQUIRED
    if os.environ.get("H3_CLIENT_CERT"):
        cfg.load_cert_chain(os.environ["H3_CLIENT_CERT"], os.environ["H3_CLIENT_KEY"])
    if os.environ.get("H3_FRAMES") == "1":
        cfg.quic_logger = QuicLogger()
    resuming = bool(ticket_file) and os.path.exists(ticket_file)
    if resuming:
        with open(ticket_file, "rb") as f:
            cfg.session_ticket = pickle.load(f)
    got_ticket = asyncio.Event()

    def save_ticket(ticket):
        if ticket_file:
            with open(ticket_file, "wb") as f:
                pickle.dump(ticket, f)
            got_ticket.set()

    async with connect(
        host,
        port,
        configuration=cfg,
        create_protocol=lambda *a, **k: split(Client(*a, **k), pad > 0),
        session_ticket_handler=save_ticket,
        wait_connected=not resuming,
    ) as c:
        if hold_ms:
            c.hold_until = c._loop.time() + hold_ms / 1000
        authority = f"{name}:{port}"
        responses = await asyncio.gather(*(c.request(authority, r) for r in reqs))
        if ticket_file and not got_ticket.is_set():
            try:
                await asyncio.wait_for(got_ticket.wait(), 2)
            except asyncio.TimeoutError:
                pass
        if linger_ms:
            try:
                await asyncio.wait_for(c.wait_closed(), linger_ms / 1000)
                out_closed = True
            except asyncio.TimeoutError:
                out_closed = False
        tls = c._quic.tls
        out = {"responses": responses, "alpn": tls.alpn_negotiated}
        out["early_data"] = tls.early_data_accepted
        out["resumed"] = tls.session_resumed
        # The certificate the server sent (none on a resumed connection).
        if getattr(tls, "_peer_certificate", None) is not None:
            out["peer_subject"] = tls._peer_certificate.subject.rfc4514_string()
        if linger_ms:
            out["closed_by_server"] = out_closed
        # The server's transport parameters: its flow-control windows, and
        # the bidirectional streams it allows in all by now (its
        # parameter's, raised by each MAX_STREAMS it sent).
        q = c._quic
        out["transport"] = {
            "max_streams_bidi": q._remote_max_streams_bidi,
            "max_data": q._remote_max_data,
            "max_stream_data_bidi_remote": q._remote_max_stream_data_bidi_remote,
            "max_datagram_frame_size": q._remote_max_datagram_frame_size,
        }
    out["datagrams"] = {
        "received": c.datagrams,
        "largest": c.largest,
        "after_close": None if c.at_close is None else c.datagrams - c.at_close,
    }
    if cfg.quic_logger is not None:
        out["frames"] = frames_by_datagram(cfg.quic_logger)
    print(json.dumps(out))


def frames_by_datagram(logger):
    """The frames of each datagram received, from aioquic's log: its
    "datagrams_received" event starts one, each "packet_received" after
    it adds the packet's frames."""
    datagrams = []
    for trace in logger.to_dict()["traces"]:
        for event in trace["events"]:
            name, data = event.get("name", ""), event.get("data", {})
            if name.endswith("datagrams_received"):
                datagrams.append([])
            elif name.endswith("packet_received") and datagrams:
                for f in data.get("frames", []):
                    kind = f.get("frame_type")
                    if kind == "stream":
                        datagrams[-1].append(f"stream {f.get('stream_id')}")
                    elif kind != "padding":
                        datagrams[-1].append(kind)
    return datagrams


try:
    asyncio.run(asyncio.wait_for(main(), float(sys.argv[5]) if len(sys.argv) > 5 else 20))
except Exception as e:  # the test reads what went wrong
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
