#!/usr/bin/env python3
"""The summary of a scripts/scripting-bench.sh run (its log as argument):
per load tool, target and script, the DUT's CPU per request without a
script, the CPU a script adds (listener - none, in the same round: median,
min and max over the rounds, in ns), and per script Switchyard's added CPU
over the best peer's. Markdown, for BENCHMARKS.md."""
import re
import statistics
import sys
from collections import defaultdict

LINE = re.compile(r"^round (\d+) (\S+) (\S+) (\S+): (\d+) req/s, (\d+) requests, errors (\d+), DUT CPU ([0-9.]+) us/request, RSS (\d+) KB")
NAMES = {"sy": "Switchyard", "hp": "HAProxy 2.6", "haproxy28": "HAProxy 2.8", "envoy": "Envoy 1.40", "ng": "nginx 1.22 + njs"}
SCRIPTS = ["empty", "rewrite", "jwt"]


def main():
    cpu = defaultdict(dict)  # (tool, target, case) -> {round: us}
    rps = defaultdict(list)
    rss = defaultdict(int)
    errors = []
    for l in open(sys.argv[1]):
        m = LINE.match(l)
        if not m:
            continue
        rnd, t, tool, case, r, n, err, us, kb = m.groups()
        cpu[(tool, t, case)][int(rnd)] = float(us)
        rps[(tool, t, case)].append(int(r))
        rss[t] = max(rss[t], int(kb))
        if int(err):
            errors.append(l.strip())
    tools = sorted({k[0] for k in cpu}, key=lambda x: x != "wrk")
    targets = [t for t in NAMES if any(k[1] == t for k in cpu)]
    for tool in tools:
        print(f"\n{tool}: DUT CPU per request (µs) without a script; CPU added by each script (ns, median [min-max] of rounds); requests/s medians")
        print("| target | none (µs) | empty (ns) | rewrite (ns) | jwt (ns) | req/s none / empty / rewrite / jwt | max RSS |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        added = {}
        for t in targets:
            base = cpu.get((tool, t, "none"), {})
            cells = []
            for s in SCRIPTS:
                d = [(v - base[r]) * 1000 for r, v in cpu.get((tool, t, s), {}).items() if r in base]
                if d:
                    added[(t, s)] = statistics.median(d)
                    cells.append(f"{added[(t, s)]:.0f} [{min(d):.0f} to {max(d):.0f}]")
                else:
                    cells.append("-")
            rates = " / ".join(str(round(statistics.median(rps[(tool, t, c)]))) if rps.get((tool, t, c)) else "-" for c in ["none"] + SCRIPTS)
            none = f"{statistics.median(base.values()):.2f}" if base else "-"
            print(f"| {NAMES[t]} | {none} | {' | '.join(cells)} | {rates} | {rss[t] / 1024:.1f} MB |")
        print("\n| script | Switchyard added (ns) | best peer | its added (ns) | ratio (target ≤ 0.5) |")
        print("| --- | --- | --- | --- | --- |")
        for s in SCRIPTS:
            peers = [(added[(t, s)], t) for t in targets if t != "sy" and (t, s) in added]
            if (("sy", s) not in added) or not peers:
                continue
            best, who = min(peers)
            mine = added[("sy", s)]
            ratio = f"{mine / best:.2f}" if best > 0 else "n/a (peer's added CPU within noise)"
            print(f"| {s} | {mine:.0f} | {NAMES[who]} | {best:.0f} | {ratio} |")
    if errors:
        print("\nruns with errors:")
        for e in errors:
            print("  " + e)


if __name__ == "__main__":
    main()
