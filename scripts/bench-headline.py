#!/usr/bin/env python3
"""The headline table of a `switchyard bench compare` report (BENCHMARKS.md).

    python3 scripts/bench-headline.py REPORT_DIR/report.json[.gz] [--targets a,b,...]
        [--kpi p99_us] [--scenario latency,...]

One row per case: the median over valid runs of each target's DUT CPU time
per request (the figure this 2-core machine measures best: it holds when
the load generator is the limit), then each peer's figure divided by
Switchyard's (above 1: Switchyard uses less). Cases re-run "at equal
offered rate" are the ones to read first; a case's maximum (its primary
KPI) is given beside it for Switchyard. Runs a target could not do are "—";
invalid runs are left out and counted. `--kpi NAME` shows that KPI of the
report instead (p99_us: the P99 in ms, lower is better, ratios likewise
peer / Switchyard). `--behind a,b` lists, after the table, the rows where
the best of those peers is more than 5 % below Switchyard (issue 33's
target against HAProxy 2.8 and nginx 1.31).
"""
import gzip
import json
import statistics
import sys


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    d = load(args[0])
    targets = [t["name"] for t in d["targets"]]
    if "--targets" in args:
        targets = args[args.index("--targets") + 1].split(",")
    kpi = args[args.index("--kpi") + 1] if "--kpi" in args else "dut_cpu_us_per_req"
    only = args[args.index("--scenario") + 1].split(",") if "--scenario" in args else None
    behind = args[args.index("--behind") + 1].split(",") if "--behind" in args else []
    shortfalls = []
    scale, unit = (1000.0, "P99 ms") if kpi.endswith("_us") else (1.0, "µs/req")
    cases = {}
    order = []
    for s in d["samples"]:
        if only and s["scenario"] not in only:
            continue
        key = (s["scenario"], s["case"])
        if key not in cases:
            cases[key] = {}
            order.append(key)
        cases[key].setdefault(s["target"], []).append(s)
    peers = [t for t in targets if t != "switchyard"]
    head = ["scenario", "case", f"Switchyard {unit} (max)"] + [f"{p} {unit} (ratio)" for p in peers]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for key in order:
        row = [key[0], key[1]]
        med = {}
        prim = {}
        for t in targets:
            ok = [s for s in cases[key].get(t, []) if s["valid"]]
            cpu = [s["kpi"].get(kpi) for s in ok]
            cpu = [c / scale for c in cpu if c]
            if cpu:
                med[t] = statistics.median(cpu)
            if ok:
                p = ok[0]["primary"]
                vals = [s["kpi"].get(p) for s in ok if s["kpi"].get(p) is not None]
                if vals:
                    prim[t] = (p, statistics.median(vals))
            bad = len(cases[key].get(t, [])) - len(ok)
            if bad:
                prim.setdefault(t, ("", None))
                med.setdefault(t, None)
                med[f"{t}#bad"] = bad
        sy = med.get("switchyard")
        if sy is None:
            continue
        p = prim.get("switchyard")
        cell = f"{sy:.2f}" if scale > 1 else f"{sy:.1f}"
        if p and p[1] is not None and "equal offered" not in key[1] and scale == 1:
            cell += f" ({p[1]:,.0f} {p[0]})"
        row.append(cell)
        for t in peers:
            m = med.get(t)
            bad = med.get(f"{t}#bad")
            if m is None:
                row.append("—" if not bad else f"invalid ({bad})")
            else:
                v = f"{m:.2f}" if scale > 1 else f"{m:.1f}"
                row.append(f"{v} ({m / sy:.2f}x)" + (f", {bad} invalid" if bad else ""))
        print("| " + " | ".join(row) + " |")
        best = min(((med[t], t) for t in behind if med.get(t) is not None), default=None)
        if best and best[0] / sy < 0.95:
            shortfalls.append(f"- {key[0]} {key[1]}: {best[1]} {best[0] / sy:.2f}x")
    if behind:
        print()
        print(f"Rows where the best of {', '.join(behind)} is more than 5 % below Switchyard:")
        print("\n".join(shortfalls) if shortfalls else "- none")


main()
