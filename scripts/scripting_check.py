#!/usr/bin/env python3
"""Checks that a target of the `scripting` scenario runs the three scripts
(scripts/scripting-bench.sh calls it before measuring):

   scripts/scripting_check.py TOKEN

Serves 127.0.0.1:27081 itself (the bench origin's address, before the
origin starts) and echoes the request head it got; asks each listener of
scripts/scripting_configs.py and checks: rewrite -> the member saw
x-c "left,right" and no x-d; jwt -> 200 with the token, 401 with a bad
signature, an expired token and none. Exits 1 with what failed."""
import http.client
import socketserver
import sys
import threading
sys.path.insert(0, __import__("os").path.dirname(__file__))
import scripting_configs as sc


class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = self.rfile.readline()
                if not line:
                    return
                head += line
            body = head.lower()
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def ask(port, hdrs):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/size/128", headers=hdrs)
    r = c.getresponse()
    return r.status, r.read().decode(errors="replace")


def main():
    good = sys.argv[1]
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    srv = socketserver.ThreadingTCPServer(sc.ORIGIN, Echo)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = {"X-A": "left", "X-B": "right", "X-D": "gone", "Authorization": "Bearer " + good}
    fails = []
    for case, port in sc.PORTS.items():
        st, body = ask(port, base)
        if st != 200:
            fails.append(f"{case}: status {st}")
        if case == "rewrite" and ("x-c: left,right" not in body or "x-d:" in body):
            fails.append(f"rewrite: the member got {body!r}")
        if case != "rewrite" and "x-d: gone" not in body:
            fails.append(f"{case}: x-d lost")
    bad_sig = good[:-2] + ("AA" if not good.endswith("AA") else "BB")
    for what, tok in [("bad signature", bad_sig), ("expired", sc.token(exp=1000000000)), ("none", None)]:
        h = dict(base)
        if tok is None:
            del h["Authorization"]
        else:
            h["Authorization"] = "Bearer " + tok
        st, _ = ask(sc.PORTS["jwt"], h)
        if st != 401:
            fails.append(f"jwt {what}: status {st}, not 401")
    srv.shutdown()
    srv.server_close()
    if fails:
        print("; ".join(fails))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
