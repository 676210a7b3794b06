# Percentiles of the lhist histograms bpftrace prints (scripts/request-split.bt):
#   python3 scripts/hist-percentiles.py FILE
# One line per histogram: count, P50, P90, P99, P99.9 (the bucket's lower
# edge, µs) and the share of values at or above 200 µs.
import re, sys
hists, cur = {}, None
for line in open(sys.argv[1]):
    m = re.match(r'^@(\w+):', line)
    if m:
        cur = hists.setdefault(m.group(1), []); continue
    m = re.match(r'^\[(\d+), (\d+)\)\s+(\d+)', line) or re.match(r'^\[(\d+), \.\.\.\)\s+(\d+)', line)
    if cur is not None and m:
        g = m.groups()
        lo = int(g[0]); n = int(g[-1]); cur.append((lo, n))
    m = re.match(r'^\(\.\.\., (\d+)\)\s+(\d+)', line)
    if cur is not None and m: cur.append((-1, int(m.group(2))))
for name, h in hists.items():
    tot = sum(n for _, n in h)
    out = []
    for q in (0.5, 0.9, 0.99, 0.999):
        acc = 0
        for lo, n in sorted(h):
            acc += n
            if acc >= q * tot:
                out.append(f"p{q*100:g} {lo}"); break
    over = sum(n for lo, n in h if lo >= 200)
    print(f"{name:12s} n {tot:8d} " + " ".join(out) + f"  >=200us {over/tot*100:.2f}%")
