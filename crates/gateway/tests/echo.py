"""The tests' echo backend, in the manner of the Gateway API conformance
suite's echo-basic: answers every request with JSON naming the request
(path, method, host, headers) and the "pod" that served it.

usage: echo.py [--tls CERT KEY] ADDRESS PORT POD NAMESPACE [ADDRESS PORT POD NAMESPACE ...]
(one server per address, each in a thread; with --tls each speaks HTTPS
with that certificate and says the SNI it got, as the suite's TLS
backend does). Each request answered is logged on stdout: "echoed POD
NAMESPACE METHOD PATH"."""
import base64
import hashlib
import json
import os
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def handler(pod, namespace):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self):
            if self.headers.get("upgrade", "").lower() == "websocket":
                return self.tunnel()
            n = int(self.headers.get("content-length") or 0)
            if n:
                self.rfile.read(n)
            # The suite's echo logs each request it answers: its mirror
            # cases look for the copies in the mirrored pod's log.
            # One write(2) per line: print() from several threads at once
            # runs lines together.
            os.write(1, f"echoed {pod} {namespace} {self.command} {self.path}\n".encode())
            headers = {}
            for k, v in self.headers.items():
                headers.setdefault(k.title(), []).append(v)
            body = json.dumps({
                "path": self.path,
                "host": self.headers.get("host", ""),
                "method": self.command,
                "proto": self.request_version,
                "headers": headers,
                "namespace": namespace,
                "pod": pod,
                "sni": getattr(self.connection, "sy_sni", None) or "",
            }).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def tunnel(self):
            """A WebSocket upgrade: 101 naming the pod, then every byte
            echoed until the client closes (the proxy tunnels bytes)."""
            key = self.headers.get("sec-websocket-key", "")
            accept = base64.b64encode(hashlib.sha1(
                (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.send_response(101)
            self.send_header("upgrade", "websocket")
            self.send_header("connection", "Upgrade")
            self.send_header("sec-websocket-accept", accept)
            self.send_header("x-pod", pod)
            self.end_headers()
            self.wfile.flush()
            while True:
                b = self.connection.recv(65536)
                if not b:
                    break
                self.connection.sendall(b)
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = answer

        def log_message(self, *a):
            pass

    return H


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class TlsServer(Server):
    context = None

    def get_request(self):
        sock, addr = self.socket.accept()
        # The handshake runs in the request's thread (first read), so a
        # client that refuses the certificate holds nobody else up.
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr


args = sys.argv[1:]
kind = Server
if args[:1] == ["--tls"]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args[1], args[2])

    def remember_sni(sock, name, _ctx):
        sock.sy_sni = name

    context.sni_callback = remember_sni
    TlsServer.context = context
    kind = TlsServer
    args = args[3:]
servers = []
for i in range(0, len(args), 4):
    addr, port, pod, ns = args[i:i + 4]
    s = kind((addr, int(port)), handler(pod, ns))
    servers.append(s)
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
