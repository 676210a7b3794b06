#!/usr/bin/env python3
# Used by scripts/h2-idle-conns.sh: python3 h2-idle-conns.py PORT N HOLD_SECONDS
# Opens N HTTP/2-over-TLS connections, each serving one GET of /size/1024,
# then holds them idle for HOLD seconds (the caller samples the DUT's RSS).
import socket, ssl, struct, sys, time
port, n, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
ctx.set_alpn_protocols(["h2"])
def frame(kind, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload
auth = b"127.0.0.1"
block = bytes([0x82, 0x87, 0x41, len(auth)]) + auth + bytes([0x04, 10]) + b"/size/1024"
hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") + frame(1, 5, 1, block)
conns = []
for i in range(n):
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
    assert s.selected_alpn_protocol() == "h2", s.selected_alpn_protocol()
    s.sendall(hello)
    got = b""; done = False; acked = False
    while not done:
        d = s.recv(65536)
        if not d: raise SystemExit("closed")
        got += d
        at = 0
        while at + 9 <= len(got):
            ln = int.from_bytes(got[at:at+3], "big"); k = got[at+3]; fl = got[at+4]
            if at + 9 + ln > len(got): break
            if k == 4 and fl & 1 == 0 and not acked:
                s.sendall(frame(4, 1, 0, b"")); acked = True
            if k in (0, 1) and fl & 1: done = True
            at += 9 + ln
    conns.append(s)
print("open", len(conns), flush=True)
time.sleep(hold)
