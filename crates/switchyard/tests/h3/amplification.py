"""The QUIC interop runner's amplification limit case, on aioquic's
packet builder: a client's first flight of Initials and then silence (no
acknowledgement, no address validation). A server may send at most three
times what it received from an unvalidated address (RFC 9000 8.1), its
retransmissions included.

    amplification.py HOST PORT SERVER_NAME WAIT_S

Prints {"sent": bytes, "received": bytes, "datagrams": n}.
"""

import json
import socket
import ssl
import sys
import time

from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

host, port, name, wait = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=name)
cfg.verify_mode = ssl.CERT_NONE
conn = QuicConnection(configuration=cfg)
addr = (host, port)
conn.connect(addr, now=time.time())
s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
sent = 0
for data, _ in conn.datagrams_to_send(now=time.time()):
    s.sendto(data, addr)
    sent += len(data)
s.settimeout(0.2)
received, n = 0, 0
end = time.time() + wait
while time.time() < end:
    try:
        data, _ = s.recvfrom(65536)
        received += len(data)
        n += 1
    except socket.timeout:
        pass
print(json.dumps({"sent": sent, "received": received, "datagrams": n}))
