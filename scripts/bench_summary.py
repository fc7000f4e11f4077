#!/usr/bin/env python3
"""One line per measurement of `dsv4 bench --json` output files (prefill, decode per depth, step graphs,
the top of the per-op profiles). usage: scripts/bench_summary.py FILE.json [FILE.json ...]"""
import json
import sys


def summary(path):
    try:
        r = json.load(open(path))
    except Exception as e:  # a failed or killed run leaves no JSON
        print(f"{path}: no JSON ({e})")
        return
    print(f"{path}: load {r.get('load_seconds', 0):.1f} s, {r['weight_bytes'] / 1e9:.1f} GB, "
          f"{r['weight_bytes_per_decoded_token'] / 1e9:.2f} GB read per token")
    p = r.get("prefill")
    if p and p.get("tokens"):
        print(f"  prefill {p['tokens']} tokens: {p['tokens_per_s']:.1f} tok/s")
    for d in r.get("decode", []):
        spread = ""
        if "repeats" in d:
            spread = (f", median of {d['repeats']} runs: {d['tokens_per_s_min']:.2f} to "
                      f"{d['tokens_per_s_max']:.2f}")
        print(f"  decode ctx {d['context']}: {d['tokens_per_s']:.2f} tok/s, {d['weight_gb_per_s']:.0f} GB/s "
              f"({100 * d.get('fraction_of_peak', 0):.1f}% of peak){spread}")
    if "step_graphs" in r:
        print(f"  step graphs: {r['step_graphs']}")
    for row in r.get("profile", [])[:12]:
        print(f"    {row['op']:<28} {row['calls']:>6} calls {1e3 * row['seconds']:9.2f} ms")
    pp = r.get("profile_prefill")
    if pp:
        print(f"  profile of one {pp['tokens']}-token prefill chunk:")
        for row in pp["ops"][:12]:
            print(f"    {row['op']:<28} {row['calls']:>6} calls {1e3 * row['seconds']:9.2f} ms")


for f in sys.argv[1:]:
    summary(f)
