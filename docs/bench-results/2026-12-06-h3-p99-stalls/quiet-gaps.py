#!/usr/bin/env python3
"""Where the DUT's slowest requests lose their time, from a capture kept by
`KEEP=1 scripts/h3-wire-p99.sh` (tcpdump text of the vserver's and the
member's ports). Requests are paired with responses as
scripts/wire_turnaround.py pairs them for the script's turnaround.

For three bands of the turnaround (P45-P55, P90-P95, the slowest 1 %):
the median turnaround, the median of each request's largest quiet gap
(the longest stretch inside its turnaround when no packet moved on
either port: neither the client, the DUT nor the member sent anything),
and how many requests of the band had a quiet gap over 500 µs.

    quiet-gaps.py CAPTURE.txt PORT MEMBER_PORT
"""
import bisect
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "scripts"))
import wire_turnaround  # noqa: E402  (the pairing h3-wire-p99.sh's figures use)


def main():
    path, port, mport = sys.argv[1], sys.argv[2], sys.argv[3]
    packets, tcp = wire_turnaround.read_capture(path, (port, mport), 2.0)
    pairs, _, _ = wire_turnaround.pair(packets, port, tcp)
    times = [t for t, _, _, _ in packets]

    def largest_gap(a, b):
        i, j = bisect.bisect_right(times, a), bisect.bisect_right(times, b)
        seq = [a] + times[i:j]
        return max((y - x for x, y in zip(seq, seq[1:])), default=0) * 1e6

    pairs.sort(key=lambda p: p[1] - p[0])
    n = len(pairs)
    print(f"{path}: {n} requests paired")
    for lo, hi in ((0.45, 0.55), (0.90, 0.95), (0.99, 1.0)):
        band = pairs[int(n * lo):int(n * hi)]
        turn = sorted((b - a) * 1e6 for a, b in band)
        gaps = sorted(largest_gap(a, b) for a, b in band)
        print(
            f"  P{round(lo * 100)}-P{round(hi * 100)}: turnaround median {turn[len(turn) // 2]:.0f} us, "
            f"largest quiet gap median {gaps[len(gaps) // 2]:.0f} us, "
            f"requests with a quiet gap over 500 us: {sum(g > 500 for g in gaps)} of {len(gaps)}"
        )


main()
