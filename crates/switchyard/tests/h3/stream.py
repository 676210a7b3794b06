"""A request whose body is sent piece by piece, each piece only once the
response brought the previous one back: gRPC's bidirectional streaming
over HTTP/3 against an echoing member, on aioquic. A proxy that reads the
whole body before the response never gets past the first piece.

    stream.py HOST PORT CA_FILE SERVER_NAME < plan.json

plan.json: {"path": "/svc/Method", "messages": ["one", ...], "trailers":
[["k", "v"]], "pause_ms": N}. With "pause_ms" no echo is awaited: the
client sends each piece and pauses that long. Prints one JSON object:
{"status": ..., "headers": [[k, v], ...], "body": "...", "echoes": [true
when the piece came back as sent, ...], "trailers": [[k, v], ...] of the
response, "ended": the stream ended cleanly}, or {"error": "..."}.
"""

import asyncio
import json
import sys

from aioquic.asyncio.client import connect

from streams import Client, target


def fields(headers):
    return [[k.decode(), v.decode()] for k, v in headers or []]


async def main():
    host, port, name, cfg = target()
    plan = json.load(sys.stdin)
    out = {"echoes": []}
    async with connect(host, port, configuration=cfg, create_protocol=Client) as c:
        sid, s = c.open(
            [
                (b":method", b"POST"),
                (b":scheme", b"https"),
                (b":authority", f"{name}:{port}".encode()),
                (b":path", plan["path"].encode()),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
            ],
            False,
        )
        sent = b""
        for m in plan["messages"]:
            sent += m.encode()
            c.send(sid, m.encode())
            if "pause_ms" in plan:
                # No echo awaited: the client pauses between pieces.
                await asyncio.sleep(plan["pause_ms"] / 1000)
                continue
            try:
                await c.until(s, lambda s: len(s.data) >= len(sent), 5)
            except asyncio.TimeoutError:
                pass
            out["echoes"].append(s.data == sent)
            if s.data != sent:
                break
        trailers = [(k.encode(), v.encode()) for k, v in plan.get("trailers", [])]
        if trailers:
            c.send_trailers(sid, trailers)
        else:
            c.send(sid, b"", end=True)
        try:
            await c.until(s, lambda s: False, 5)
        except asyncio.TimeoutError:
            pass
        out["status"] = int(dict(s.headers)[b":status"]) if s.headers else None
        out["headers"] = fields(s.headers)
        out["body"] = s.data.decode("utf-8", "replace")
        out["ended"] = s.ended and s.reset is None
        out["trailers"] = fields(s.trailers)
        if s.reset is not None:
            out["reset"] = s.reset
    print(json.dumps(out))


try:
    asyncio.run(asyncio.wait_for(main(), 30))
except Exception as e:  # the test reads what went wrong
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
