#!/usr/bin/env python3
"""Summarize `ncu --metrics gpu__time_duration.sum --csv` output of a `dsv4 bench ... --no-graphs` run: the
kernels of the last model step (from the last embedding kernel on), grouped by kernel name, with their summed
device time. usage: ncu_step_summary.py NCU_CSV [EMBED_KERNEL_SUBSTRING]"""
import csv
import re
import sys
from collections import defaultdict

path = sys.argv[1]
marker = sys.argv[2] if len(sys.argv) > 2 else "embed"
rows = []
with open(path, newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "ns")
    ns = v * {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(unit, 1)
    name = re.sub(r"\(.*", "", r["Kernel Name"]).strip()
    rows.append((int(r["ID"]), name, ns, r.get("Grid Size", ""), r.get("Block Size", "")))
rows.sort()
starts = [i for i, r in enumerate(rows) if marker in r[1]]
if not starts:
    sys.exit("no embedding kernel found")
step = rows[starts[-1]:]
total = sum(r[2] for r in step)
print(f"last step: {len(step)} kernels, {total / 1e3:.1f} us of device time (kernels only, no gaps)")
agg = defaultdict(lambda: [0, 0.0])
for _, name, ns, _, _ in step:
    agg[name][0] += 1
    agg[name][1] += ns
for name, (n, ns) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:40]:
    print(f"  {ns / 1e3:9.1f} us {100 * ns / total:5.1f}%  {n:5d} x {ns / n / 1e3:7.2f} us  {name[:90]}")
