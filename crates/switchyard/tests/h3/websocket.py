"""WebSocket over HTTP/3 (RFC 9220) for the tests, on aioquic: an extended
CONNECT, then WebSocket frames in the stream's DATA.

    websocket.py HOST PORT CA_FILE SERVER_NAME < plan.json

plan.json: {"path": "/chat", "protocol": "websocket", "messages": ["text",
...], "close": true, "after": "/path", "idle_ms": 0}. Each message goes as
a masked text frame and its echo is awaited; then a ping; then, with
"close", a close frame, whose echo and the server's end of the stream are
awaited before the client ends its own; "after": a GET on the same
connection afterwards; "idle_ms": instead of any frame, wait that long for
the server to reset the stream.

Prints one JSON object: {"connect_protocol": the server's
SETTINGS_ENABLE_CONNECT_PROTOCOL (null when absent), "status": ...,
"headers": [[k, v], ...], "body": "..." (a response that is not 200),
"reset": the code of a reset stream, "echoes": [[opcode, same bytes as
sent], ...], "ended": the stream ended cleanly after the close, "after":
the GET's status}, or {"error": "..."}.
"""

import asyncio
import json
import os
import struct
import sys

from aioquic.asyncio.client import connect
from aioquic.h3.connection import Setting

from streams import Client, target


def ws_frame(op, payload):
    """A final, masked frame (RFC 6455 5.2), as a client sends it."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | op])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def take_frame(buf):
    """(opcode, payload, rest) of the first whole frame in buf (a server's
    frames are not masked), or None."""
    if len(buf) < 2:
        return None
    op, n, at = buf[0] & 0x0F, buf[1] & 0x7F, 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, at = struct.unpack("!H", buf[2:4])[0], 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, at = struct.unpack("!Q", buf[2:10])[0], 10
    if len(buf) < at + n:
        return None
    return op, buf[at : at + n], buf[at + n :]


async def echo(c, sid, s, op, payload, out):
    c.send(sid, ws_frame(op, payload))
    if not await c.until(s, lambda s: take_frame(s.data) is not None):
        out["echoes"].append(None)
        return False
    got_op, got, s.data = take_frame(s.data)
    out["echoes"].append([got_op, got == payload])
    return True


async def main():
    host, port, name, cfg = target()
    plan = json.load(sys.stdin)
    out = {"echoes": []}
    async with connect(host, port, configuration=cfg, create_protocol=Client) as c:
        await asyncio.wait_for(c.settings.wait(), 5)
        out["connect_protocol"] = c.http.received_settings.get(Setting.ENABLE_CONNECT_PROTOCOL)
        authority = f"{name}:{port}"
        sid, s = c.open(
            [
                (b":method", b"CONNECT"),
                (b":protocol", plan.get("protocol", "websocket").encode()),
                (b":scheme", b"https"),
                (b":authority", authority.encode()),
                (b":path", plan["path"].encode()),
                (b"sec-websocket-version", b"13"),
                (b"sec-websocket-protocol", b"chat"),
            ],
            False,
        )
        await c.until(s, lambda s: s.headers is not None)
        if s.headers is not None:
            out["status"] = int(dict(s.headers)[b":status"])
            out["headers"] = [[k.decode(), v.decode()] for k, v in s.headers]
        if out.get("status") != 200:
            if s.reset is None:
                await c.until(s, lambda s: False)
            out["body"] = s.data.decode("utf-8", "replace")
        elif plan.get("idle_ms"):
            try:
                await c.until(s, lambda s: False, plan["idle_ms"] / 1000)
            except asyncio.TimeoutError:
                pass
        else:
            ok = True
            for m in plan.get("messages", []):
                ok = ok and await echo(c, sid, s, 1, m.encode(), out)
            ok = ok and await echo(c, sid, s, 9, b"ping", out)
            if ok and plan.get("close"):
                # The close comes back, then the member's FIN is the end of
                # the stream, with nothing after it; then ours.
                if await echo(c, sid, s, 8, b"\x03\xe8", out):
                    try:
                        await c.until(s, lambda s: False, 5)
                    except asyncio.TimeoutError:
                        pass
                    out["ended"] = s.ended and s.reset is None and s.data == b""
                c.send(sid, b"", end=True)
        if s.reset is not None:
            out["reset"] = s.reset
        if plan.get("after"):
            sid, s = c.open(
                [
                    (b":method", b"GET"),
                    (b":scheme", b"https"),
                    (b":authority", authority.encode()),
                    (b":path", plan["after"].encode()),
                ],
                True,
            )
            await c.until(s, lambda s: s.headers is not None)
            out["after"] = int(dict(s.headers)[b":status"]) if s.headers else None
    print(json.dumps(out))


try:
    asyncio.run(asyncio.wait_for(main(), 30))
except Exception as e:  # the test reads what went wrong
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
