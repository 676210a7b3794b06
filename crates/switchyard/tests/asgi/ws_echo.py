"""An ASGI application for tests/websocket.rs, served by Hypercorn as an
h2c member: WebSocket messages echoed as they came (the first offered
subprotocol accepted), any other request answered 200. Both say which
HTTP version carried them (`x-http-version`, and the body), so a test can
tell WebSocket over HTTP/2 (RFC 8441) from an HTTP/1.1 Upgrade."""


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    version = scope.get("http_version", "?").encode()
    if scope["type"] == "websocket":
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        offered = scope.get("subprotocols") or []
        await send(
            {
                "type": "websocket.accept",
                "subprotocol": offered[0] if offered else None,
                "headers": [(b"x-http-version", version)],
            }
        )
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("text") is not None:
                await send({"type": "websocket.send", "text": message["text"]})
            else:
                await send({"type": "websocket.send", "bytes": message["bytes"]})
    elif scope["type"] == "http":
        body = b"plain " + version + b"\n"
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-length", str(len(body)).encode()),
                    (b"x-http-version", version),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
