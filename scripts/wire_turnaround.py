#!/usr/bin/env python3
"""The DUT's turnaround on the wire: from each request's packet leaving the
client to its response's packet leaving the DUT, read from `tcpdump -n -tt`
text of one listener's port on loopback (scripts/h3-wire-p99.sh).

On loopback a packet is captured once, when its sender transmits it, and
the receiver's socket gets it in the same softirq: the gap is the time the
request waited in the DUT's socket buffer plus the DUT's own work, and
nothing of the client's. Responses are paired with requests first in,
first out per client port (the client's address); a request is a client
packet of the length most client packets have: HTTP/3 one short stream
frame in a QUIC packet, within 16 bytes (its packet number and
acknowledgements vary its length; a packet of acknowledgements alone is
shorter, and left out of the count), HTTP/2 one HEADERS frame in a TLS
record, exactly (Go's client sends a WINDOW_UPDATE record one byte
shorter for about every fourth response); a packet that carries several requests counts once for each
(`tls_requests`, `quic_requests`). A response is a DUT packet over 1,000
bytes; one the kernel
captured as a GSO or TSO batch counts as one per 1,100 bytes in it (the
1 KB response and its framing). Packets in the first WARMUP seconds
(handshakes, the load tool's ramp) are left out.

    wire_turnaround.py CAPTURE.txt PORT [WARMUP_S]

Prints one JSON object: matched responses, requests seen, the request
length used, and the turnaround's p50, p90, p99, p99.9 and max in ms.
"""
import collections
import json
import re
import sys

LINE = re.compile(r"(\S+) IP 127\.0\.0\.1\.(\d+) > 127\.0\.0\.1\.(\d+):.* length (\d+)")


# TLS 1.3 adds 22 bytes to a record (5 of header, the inner content type,
# a 16-byte tag); an HTTP/2 WINDOW_UPDATE frame is 13 bytes.
TLS_RECORD = 22
WINDOW_UPDATE = 13
# A QUIC packet of acknowledgements alone is 30 to 40 bytes, a request's
# at least 60 (its HEADERS frame names the authority and the path in
# literals: QPACK's static table has neither). Envoy's QUICHE acknowledges
# each response in a packet of its own, and oha's quinn then answers with
# one: client packets of acknowledgements outnumbered requests there, and
# the most common length was theirs.
QUIC_MIN_REQUEST = 48
# More requests than one connection has streams in flight (10 in the
# scripts' runs, 16 for margin) in one packet is something else.
MAX_BUNDLE = 16


def tls_requests(n, request_len):
    """How many requests a TCP packet of `n` bytes carries, when one request
    alone is `request_len`: HTTP/2 clients put several HEADERS frames in one
    TLS record (oha does at 5,000 requests/s: a third of its requests came
    two to six to a packet), or several records in one segment, sometimes
    with WINDOW_UPDATE frames. Counting only the packets of exactly one
    request would leave the bundled ones out, and the requests that
    arrived together are the ones that wait longest. Plain HTTP/1.1 (the
    member's port) is one request per packet or several whole ones."""
    if n == request_len:
        return 1
    frames = request_len - TLS_RECORD
    if n <= 0 or frames <= 0:
        return 0
    for records in range(1, 5):
        for updates in range(0, 5):
            rest = n - records * TLS_RECORD - updates * WINDOW_UPDATE
            if rest > 0 and rest % frames == 0 and records <= rest // frames <= MAX_BUNDLE:
                return rest // frames
    if n % request_len == 0 and n // request_len <= MAX_BUNDLE:
        return n // request_len
    return 0


# A QUIC packet's length moves with its packet number's size and the
# acknowledgements it carries: a request alone is within this of the most
# common length.
QUIC_SLACK = 16


def quic_step(lengths, request_len):
    """What each further request adds to a QUIC packet that carries several
    (h3load's quic-go does at 5,000 requests/s: a fifth of its requests
    came two or three to a packet), as the most common excess of a longer
    client packet over a lone request's length; None when too few packets
    are longer for a pattern (oha's quinn sends one request a packet)."""
    singles = sum(c for n, c in lengths.items() if abs(n - request_len) <= QUIC_SLACK)
    excess = collections.Counter()
    for n, c in lengths.items():
        if request_len + QUIC_SLACK < n <= 2 * request_len + QUIC_SLACK:
            excess[n - request_len] += c
    if not excess:
        return None
    step, count = excess.most_common(1)[0]
    return step if count * 100 >= singles else None


def quic_requests(n, request_len, step):
    """How many requests a QUIC packet of `n` bytes carries: one within
    QUIC_SLACK of `request_len`, and with `step` (quic_step) one more for
    each step it is longer, within the same slack."""
    if abs(n - request_len) <= QUIC_SLACK:
        return 1
    if step is None or n < request_len:
        return 0
    more = round((n - request_len) / step)
    if more >= 1 and 1 + more <= MAX_BUNDLE and abs(n - request_len - more * step) <= QUIC_SLACK:
        return 1 + more
    return 0


def read_capture(path, ports, warmup):
    """The packets of `tcpdump -n -tt` text on any of `ports` (time, source
    port, destination port, length), less the first `warmup` seconds, and
    whether they are TCP."""
    packets = []
    tcp = False
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            # A capture may hold other ports too (the member's, for its
            # own turnaround): only the ones asked for count.
            if m and (m[2] in ports or m[3] in ports):
                packets.append((float(m[1]), m[2], m[3], int(m[4])))
                tcp = tcp or "Flags [" in line
    if packets:
        start = packets[0][0] + warmup
        packets = [p for p in packets if p[0] >= start]
    return packets, tcp


def pair(packets, port, tcp):
    """Each request to `port` with its response, first in first out per
    client port: (request time, response time) pairs in response order,
    the requests seen, and the lone request's length (None: no client
    packet with payload)."""
    least = 1 if tcp else QUIC_MIN_REQUEST
    lengths = collections.Counter(n for _, _, dst, n in packets if dst == port and n >= least)
    if not lengths:
        return [], 0, None
    request_len = lengths.most_common(1)[0][0]
    step = None if tcp else quic_step(lengths, request_len)
    waiting = collections.defaultdict(collections.deque)
    pairs = []
    requests = 0
    for t, src, dst, n in packets:
        if dst == port:
            k = tls_requests(n, request_len) if tcp else quic_requests(n, request_len, step)
            for _ in range(k):
                waiting[src].append(t)
            requests += k
        elif src == port and n > 1000:
            q = waiting[dst]
            for _ in range(max(1, round(n / 1100))):
                if q:
                    pairs.append((q.popleft(), t))
    return pairs, requests, request_len


def main():
    path, port = sys.argv[1], sys.argv[2]
    warmup = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    packets, tcp = read_capture(path, (port,), warmup)
    if not packets:
        print(json.dumps({"error": "no packets"}))
        return 1
    pairs, requests, request_len = pair(packets, port, tcp)
    if request_len is None:
        print(json.dumps({"error": "no client packets with payload"}))
        return 1
    gaps = sorted((b - a) * 1000 for a, b in pairs)
    if not gaps:
        print(json.dumps({"error": "no responses matched", "request_len": request_len}))
        return 1

    def q(p):
        return round(gaps[min(len(gaps) - 1, int(len(gaps) * p))], 3)

    print(
        json.dumps(
            {
                "responses": len(gaps),
                "requests": requests,
                "request_len": request_len,
                "p50_ms": q(0.5),
                "p90_ms": q(0.9),
                "p99_ms": q(0.99),
                "p999_ms": q(0.999),
                "max_ms": round(gaps[-1], 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
