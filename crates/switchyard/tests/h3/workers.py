"""QUIC connections that move, for the tests of QUIC on several workers,
on aioquic (written by others).

    workers.py HOST PORT CA_FILE SERVER_NAME CONNECTIONS MOVES [OTHER_IP [FIRST_IP]]

Opens CONNECTIONS connections, all at once, from FIRST_IP (default: the
loopback address of HOST's family).
On each: GET /c<i>/0; then MOVES times: the client moves to a new UDP
socket (a new local port: a NAT rebinding; every other move also to
OTHER_IP when given: a new address, as a phone changing networks does;
every second move also to a new connection ID the server issued: a
migration proper), and sends GET /c<i>/<move> from there. Prints
{"connections": [{"statuses": [200, ...], "local": ["ip:port", ...],
"error": "..." (when one failed)}]}.
"""

import asyncio
import json
import socket
import ssl
import sys

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.waiting = {}

    def quic_event_received(self, event):
        for e in self.http.handle_event(event):
            if isinstance(e, (HeadersReceived, DataReceived)) and e.stream_id in self.waiting:
                r = self.waiting[e.stream_id]
                if isinstance(e, HeadersReceived) and "status" not in r:
                    r["status"] = int(dict(e.headers)[b":status"])
                if e.stream_ended:
                    r["done"].set()

    async def get(self, authority, path):
        sid = self._quic.get_next_available_stream_id()
        r = {"done": asyncio.Event()}
        self.waiting[sid] = r
        self.http.send_headers(
            stream_id=sid,
            headers=[
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", authority.encode()),
                (b":path", path.encode()),
            ],
            end_stream=True,
        )
        self.transmit()
        await asyncio.wait_for(r["done"].wait(), 10)
        return r.get("status")


def fresh_socket(ip, used):
    """A UDP socket on `ip` at a port this client has not used yet. A
    socket closed at one move frees its port, and the kernel may hand the
    same port out again at the next move back to that address: then the
    client would not have moved at all."""
    held = []
    while True:
        s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((ip, 0))
        name = s.getsockname()[:2]
        if name not in used:
            for h in held:
                h.close()
            used.add(name)
            return s
        held.append(s)


async def one(i, host, port, ca, name, moves, other_ip, first_ip):
    loop = asyncio.get_running_loop()
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=name)
    cfg.load_verify_locations(ca)
    cfg.verify_mode = ssl.CERT_REQUIRED
    first_ip = first_ip or ("::1" if ":" in host else "127.0.0.1")
    used = set()
    _, proto = await loop.create_datagram_endpoint(
        lambda: Client(QuicConnection(configuration=cfg)), sock=fresh_socket(first_ip, used)
    )
    out = {"statuses": [], "local": []}
    authority = f"{name}:{port}"
    try:
        # As the socket reports its peers: IPv6 addresses as 4-tuples.
        proto.connect((host, port, 0, 0) if ":" in host else (host, port))
        await asyncio.wait_for(proto.wait_connected(), 10)
        for m in range(moves + 1):
            if m > 0:
                ip = other_ip if other_ip and m % 2 == 1 else first_ip
                if m % 2 == 0:
                    proto.change_connection_id()
                old = proto._transport
                await loop.create_datagram_endpoint(lambda: proto, sock=fresh_socket(ip, used))
                old.close()
            ip, lport = proto._transport.get_extra_info("sockname")[:2]
            out["local"].append(f"{ip}:{lport}")
            out["statuses"].append(await proto.get(authority, f"/c{i}/{m}"))
    except Exception as e:  # the test reads what went wrong
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        proto.close()
        try:
            await asyncio.wait_for(proto.wait_closed(), 2)
        except Exception:
            pass
        proto._transport.close()
    return out


async def main():
    host, port, ca, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    connections, moves = int(sys.argv[5]), int(sys.argv[6])
    other_ip = sys.argv[7] if len(sys.argv) > 7 else None
    first_ip = sys.argv[8] if len(sys.argv) > 8 else None
    results = await asyncio.gather(
        *(
            one(i, host, port, ca, name, moves, other_ip, first_ip)
            for i in range(connections)
        )
    )
    print(json.dumps({"connections": results}))


try:
    asyncio.run(asyncio.wait_for(main(), 60))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
