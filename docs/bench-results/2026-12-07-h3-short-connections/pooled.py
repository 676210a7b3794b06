"""Pools session-cache-ab-1.log (sy = the session cache build, sy-b = the
build before it), session-cache-ab-2.log (the two swapped) and
session-cache-ab-3.log (the session cache build alone, after Envoy in
each round) and prints,
per handshake, each build's CPU against Envoy's in the same round: the
median, a bootstrap 95 % interval of the median, and how many rounds are
at or under 0.7x; then the two builds against each other."""
import collections
import random
import re
import statistics as st


def load(path, build_of):
    rows = collections.defaultdict(dict)
    for line in open(path):
        m = re.search(r"round (\d+) (sy-b|sy|envoy) h3 (\S+) new.*CPU 0 ([\d.]+)", line)
        if m and "invalid" not in line:
            rows[(m[1], m[3])][build_of.get(m[2], m[2])] = float(m[4])
    return rows


runs = [
    load("session-cache-ab-1.log", {"sy": "cache", "sy-b": "before"}),
    load("session-cache-ab-2.log", {"sy": "before", "sy-b": "cache"}),
    load("session-cache-ab-3.log", {"sy": "cache"}),
]
random.seed(1)
for mode in ("resume", "0rtt"):
    for build in ("cache", "before"):
        r = [d[build] / d["envoy"] for rows in runs for (_, md), d in rows.items()
             if md == mode and build in d and "envoy" in d]
        boots = sorted(st.median(random.choices(r, k=len(r))) for _ in range(5000))
        print(f"{mode} {build}: {len(r)} rounds, median {st.median(r):.3f}x Envoy, "
              f"95 % {boots[125]:.3f}-{boots[-126]:.3f}, {sum(x <= 0.7 for x in r)} at or under 0.7x")
    r = [d["cache"] / d["before"] for rows in runs for (_, md), d in rows.items()
         if md == mode and "before" in d]
    print(f"{mode} cache / before: median {st.median(r):.3f}")
