#!/usr/bin/env python3
"""Summarize `ncu --csv --page details` output (scripts/gpu_profile.sh): one block per kernel launch with its
duration, throughputs, occupancy, registers, issue rate and the largest warp stall reasons (cycles per issued
instruction), then the launches grouped by kernel name.
usage: ncu_sections.py NCU_CSV | ncu_sections.py --stall-metrics (the --metrics list gpu_profile.sh passes)"""
import sys
from collections import defaultdict

from ncu_csv import kernel_name, metric_rows, microseconds, value

STALLS = ["long_scoreboard", "short_scoreboard", "wait", "barrier", "mio_throttle", "lg_throttle",
          "math_pipe_throttle", "not_selected", "selected", "no_instruction", "membar", "drain", "sleeping",
          "branch_resolving", "dispatch_stall", "misc", "tex_throttle", "imc_miss"]


def stall_metric(r):
    return f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio"


if len(sys.argv) > 1 and sys.argv[1] == "--stall-metrics":
    print(",".join(stall_metric(r) for r in STALLS))
    sys.exit(0)

KEYS = {  # metric name in the details page -> short label
    "Duration": "us",
    "DRAM Throughput": "dram%",
    "Memory Throughput": "mem%",
    "Compute (SM) Throughput": "sm%",
    "L1/TEX Hit Rate": "l1hit%",
    "Achieved Occupancy": "occ%",
    "Theoretical Occupancy": "theo%",
    "Registers Per Thread": "regs",
    "Issue Slots Busy": "issue%",
    "Executed Ipc Active": "ipc",
    "Warp Cycles Per Issued Instruction": "cyc/inst",
    "Dynamic Shared Memory Per Block": "dsmem",
    "Static Shared Memory Per Block": "ssmem",
}

launches = defaultdict(dict)
info = {}
for r in metric_rows(sys.argv[1]):
    i = int(r["ID"])
    info[i] = (kernel_name(r).removeprefix("void "), r.get("Grid Size", ""), r.get("Block Size", ""))
    m = r["Metric Name"]
    try:
        v = microseconds(r) if m == "Duration" else value(r)
    except ValueError:
        continue
    for r_ in STALLS:
        if m == stall_metric(r_):
            launches[i]["stall:" + r_] = v
    if m in KEYS:
        launches[i][KEYS[m]] = v

for i in sorted(launches):
    d = launches[i]
    name, grid, block = info[i]
    head = " ".join(f"{k}={d[k]:.4g}" for k in KEYS.values() if k in d)
    stalls = sorted(((v, k[6:]) for k, v in d.items() if k.startswith("stall:")), reverse=True)[:5]
    print(f"[{i}] {name} grid {grid} block {block}: {head}")
    if stalls:
        print("      stalls (cycles/issue): " + ", ".join(f"{k} {v:.2f}" for v, k in stalls))

agg = defaultdict(lambda: [0, 0.0])
for i, d in launches.items():
    agg[info[i][0]][0] += 1
    agg[info[i][0]][1] += d.get("us", 0.0)
print("\nby kernel: launches, total us, mean us")
for name, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"  {name:<40} {c:4d} {t:9.1f} {t / c:8.2f}")
