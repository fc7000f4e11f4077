#!/usr/bin/env python3
"""Summarize `ncu --metrics gpu__time_duration.sum --csv` output of a `dsv4 bench ... --no-graphs` run: the
kernels of the last model step (from the last embedding kernel on), grouped by kernel name, with their summed
device time. usage: ncu_step_summary.py NCU_CSV [EMBED_KERNEL_SUBSTRING]"""
import sys
from collections import defaultdict

from ncu_csv import kernel_name, metric_rows, microseconds

path = sys.argv[1]
marker = sys.argv[2] if len(sys.argv) > 2 else "embed"
rows = [(int(r["ID"]), kernel_name(r), 1e3 * microseconds(r), r.get("Grid Size", ""), r.get("Block Size", ""))
        for r in metric_rows(path) if r.get("Metric Name") == "gpu__time_duration.sum"]
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
