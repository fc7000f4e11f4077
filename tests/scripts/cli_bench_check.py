#!/usr/bin/env python3
"""Checks `dsv4 bench --synth tiny --json --profile`: every measurement is present and positive, the decode
rows are at the asked depths, and the profile counts the ops one decode step must run (per layer one routed
MoE call, per step one LM head matmul), so a profile that misses or double-counts ops fails. Decode steps (and a
short prompt's chunk) are recorded as step graphs (captured the second time a step's ops repeat, then replayed),
--skip-fill reaches a depth without a prefill, and --repeat reports the median of several measurements."""
import json
import os
import subprocess
import sys

dsv4 = sys.argv[1]
gen = 3
cmd = [dsv4, "bench", "--synth", "tiny", "--prompt", "16", "--gen", str(gen), "--ctx", "0,20", "--json",
       "--profile", "--device", "cpu", "--threads", "2"]
p = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
if p.returncode != 0:
    sys.exit(f"bench failed ({p.returncode}): {p.stderr[-2000:]}")
r = json.loads(p.stdout)
failures = []

def check(cond, what):
    if not cond:
        failures.append(what)

layers = r["layers"]
check(layers == 4, f"tiny has 4 layers, bench says {layers}")
check(r["prefill"]["tokens"] == 16 and r["prefill"]["tokens_per_s"] > 0, "prefill measured")
check([d["context"] for d in r["decode"]] == [0, 20], "decode rows at contexts 0 and 20")
for d in r["decode"]:
    check(d["tokens"] == gen and d["tokens_per_s"] > 0 and d["weight_gb_per_s"] > 0, f"decode row {d}")
check(r["weight_bytes_per_decoded_token"] > 0, "weight bytes per token")
# The tiny preset's 64-dim indexer keys: packed FP4 in the quant-sim store (32 code bytes + 2 scales, padded to
# 36, one key every 4 tokens), f32 in exact mode (256 bytes a key).
kv = r.get("kv_bytes_per_token", {})
check(kv.get("store") == "quant_sim" and kv.get("csa_layer_indexer_keys") == 9.0 and kv.get("all_layers", 0) > 0,
      f"KV bytes per token of the quant-sim store: {kv}")
ex = subprocess.run([dsv4, "bench", "--synth", "tiny", "--prompt", "4", "--gen", "2", "--ctx", "8", "--json", "--exact",
                     "--device", "cpu", "--threads", "2"], capture_output=True, text=True, timeout=300)
if ex.returncode != 0:
    failures.append(f"bench --exact failed ({ex.returncode}): {ex.stderr[-1000:]}")
else:
    kx = json.loads(ex.stdout)["kv_bytes_per_token"]
    check(kx["store"] == "exact" and kx["csa_layer_indexer_keys"] == 64.0 and kx["all_layers"] > kv.get("all_layers", 0),
          f"KV bytes per token of the exact store: {kx}")
prof = {row["op"]: row for row in r.get("profile", [])}
check("moe_experts n=1" in prof, "profile has the routed experts")
if "moe_experts n=1" in prof:
    check(prof["moe_experts n=1"]["calls"] == gen * layers, f"one routed MoE call per layer per step: {prof['moe_experts n=1']}")
check("hc_head" in prof and prof["hc_head"]["calls"] == gen, "one hc_head per step")
check(all(row["seconds"] >= 0 for row in prof.values()), "times are non-negative")
matmuls = sum(row["calls"] for k, row in prof.items() if k.startswith("matmul"))
check(matmuls > 0 and matmuls % gen == 0, f"matmul calls are a whole number per step: {matmuls}")
g = r.get("step_graphs", {})
# The timed decode steps, and the 16-token prefill and the 20-token fill of depth 20 (a step of one sequence of at
# most 64 tokens is recorded too; each of the two is seen once, so it runs as issued).
check(g.get("segments") == 2 * gen + 2 and g.get("replays", 0) > 0 and g["eager"] + g["replays"] == g["segments"],
      f"the timed decode steps ran as step graphs: {g}")

# The prefill in segments of depth: contiguous from 0 to the prompt's end, each measured.
segs = r["prefill"].get("segments", [])
check(segs and segs[0]["from"] == 0 and segs[-1]["to"] == 16 and all(g["tokens_per_s"] > 0 for g in segs)
      and all(a["to"] == b["from"] for a, b in zip(segs, segs[1:])), f"prefill segments: {segs}")
# --prefill-limit: a prompt stopped at the first chunk boundary past the limit (here the first), and said so.
lim = subprocess.run([dsv4, "bench", "--synth", "tiny", "--prompt", "3000", "--prefill-chunk", "16", "--gen", "1",
                      "--ctx", "0", "--json", "--prefill-limit", "1e-6", "--device", "cpu", "--threads", "2"],
                     capture_output=True, text=True, timeout=300)
if lim.returncode != 0:
    failures.append(f"bench --prefill-limit failed ({lim.returncode}): {lim.stderr[-1000:]}")
else:
    pl = json.loads(lim.stdout)["prefill"]
    check(pl["tokens"] == 16 and pl.get("stopped", {}).get("asked_tokens") == 3000 and pl["tokens_per_s"] > 0
          and [(g["from"], g["to"]) for g in pl["segments"]] == [(0, 16)], f"prefill stopped by the limit: {pl}")
# --skip-fill: the depth is reached without prefilling (a 4000-token prefill would take far longer here).
skip = subprocess.run([dsv4, "bench", "--synth", "tiny", "--prompt", "4", "--gen", "2", "--ctx", "4000", "--json",
                       "--skip-fill", "--device", "cpu", "--threads", "2", "--no-graphs"],
                      capture_output=True, text=True, timeout=300)
if skip.returncode != 0:
    failures.append(f"bench --skip-fill failed ({skip.returncode}): {skip.stderr[-1000:]}")
else:
    rs = json.loads(skip.stdout)
    d = rs["decode"][0]
    check(d["context"] == 4000 and d["tokens_per_s"] > 0 and "skipped" in d.get("fill", ""), f"skip-fill row {d}")
    check("step_graphs" not in rs, "--no-graphs records no step")
# --repeat: the decode row is the median of the runs, with every run's rate and the slowest and fastest.
rep = subprocess.run([dsv4, "bench", "--synth", "tiny", "--prompt", "4", "--gen", "2", "--ctx", "8", "--json",
                      "--repeat", "3", "--device", "cpu", "--threads", "2"], capture_output=True, text=True, timeout=300)
if rep.returncode != 0:
    failures.append(f"bench --repeat failed ({rep.returncode}): {rep.stderr[-1000:]}")
else:
    d = json.loads(rep.stdout)["decode"][0]
    runs = d.get("tokens_per_s_runs", [])
    check(d.get("repeats") == 3 and len(runs) == 3 and all(x > 0 for x in runs), f"three runs: {d}")
    if len(runs) == 3:
        check(abs(d["tokens_per_s"] - sorted(runs)[1]) <= 1e-9 * d["tokens_per_s"], f"the median of the runs: {d}")
        check(d["tokens_per_s_min"] == min(runs) and d["tokens_per_s_max"] == max(runs), f"slowest and fastest: {d}")
# --batch: rows per (depth, size) with the asked sizes, every stream's tokens counted, the weight bytes a step
# reads growing with the batch (more distinct experts) but below that many single steps, and the KV per sequence.
bat = subprocess.run([dsv4, "bench", "--synth", "tiny", "--prompt", "4", "--gen", "2", "--ctx", "0,300", "--json",
                      "--skip-fill", "--batch", "1,3,5", "--device", "cpu", "--threads", "2"],
                     capture_output=True, text=True, timeout=300)
if bat.returncode != 0:
    failures.append(f"bench --batch failed ({bat.returncode}): {bat.stderr[-1000:]}")
else:
    rb = json.loads(bat.stdout)
    rows = rb.get("batch", [])
    check([(x["context"], x["sequences"]) for x in rows] == [(c, n) for c in (0, 300) for n in (1, 3, 5)],
          f"batch rows at each depth and size: {[(x['context'], x['sequences']) for x in rows]}")
    for x in rows:
        check(x["steps"] == 2 and x["tokens_per_s"] > 0, f"batch row measured: {x}")
        check(abs(x["tokens_per_s"] - x["sequences"] * x["tokens_per_s_per_stream"]) <= 1e-9 * x["tokens_per_s"],
              f"tokens/s in all = streams x per stream: {x}")
        check(x["kv_bytes_per_sequence"] > 0, f"KV bytes per sequence: {x}")
    one = [x for x in rows if x["sequences"] == 1]
    if one:
        check(abs(one[0]["weight_bytes_per_step"] - rb["weight_bytes_per_decoded_token"]) <= 1e-6 * one[0]["weight_bytes_per_step"],
              "a batch of one reads one decoded token's weights")
    w = [x["weight_bytes_per_step"] for x in rows[:3]]
    if len(w) == 3:
        check(w[0] < w[1] < w[2] < 5 * w[0], f"weight bytes per step grow with the batch, less than linearly: {w}")
# --batch --profile: a per-op table per batch size, its steps' attention run once per step for the batch's
# decode group (not once per sequence), and the profiled steps fit the caches.
bprof = subprocess.run([dsv4, "bench", "--synth", "tiny", "--prompt", "4", "--gen", "2", "--skip-fill", "--ctx", "40",
                       "--batch", "1,4", "--profile", "--device", "cpu", "--threads", "2"],
                      capture_output=True, text=True, timeout=300)
if bprof.returncode != 0:
    failures.append(f"bench --batch --profile failed ({bprof.returncode}): {bprof.stderr[-1000:]}")
else:
    tables = [t.split("total (ops")[0] for t in bprof.stdout.split("profile  ")[1:]]
    heads = [t.split("\n", 1)[0] for t in tables]
    check(heads[:2] == ["1 streams, per step:", "4 streams, per step:"], f"a profile per batch size: {heads}")
    def op_calls(table, op, col):
        """Calls per step of one op's rows: column col (after the name and, for matmul-like ops, the shape)."""
        return sum(float(p[col]) for p in (l.split() for l in table.splitlines()) if len(p) > col and p[0] == op)
    if len(tables) >= 2:
        # Attention rows are named by what the queries attend to ("attention window n=1", "attention indexed
        # n=4", ...): the calls are column 3.
        one, four = op_calls(tables[0], "attention", 3), op_calls(tables[1], "attention", 3)
        check(one > 0 and four == one, f"4 decoding streams make as many attention calls per step as one: {one}, {four}")
        # Every stream's token is drawn on the backend in one call per step, as the engine draws a batch.
        draws = [op_calls(t, "sample", 1) for t in tables[:2]]
        check(draws == [1.0, 1.0], f"one draw call per step for the whole batch: {draws}")
badb = subprocess.run([dsv4, "bench", "--synth", "tiny", "--batch", "2,x", "--device", "cpu"], capture_output=True,
                      text=True, timeout=60)
check(badb.returncode != 0 and "--batch" in badb.stderr, f"--batch 2,x is refused: {badb.returncode} {badb.stderr[-300:]}")
bad = subprocess.run([dsv4, "bench", "--synth", "tiny", "--repeat", "0", "--device", "cpu"], capture_output=True,
                     text=True, timeout=60)
check(bad.returncode != 0 and "repeat" in bad.stderr, f"--repeat 0 is refused: {bad.returncode} {bad.stderr[-300:]}")
# --e2e under a JSON schema (the tiny model with the real vocabulary): every constrained answer parses, and
# --speculative prints its verify steps and keeps the greedy tokens.
shared = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared")
vocab = os.path.join(shared, "fixtures", "tokenizer", "deepseek_v3", "vocab.gguf")
check(os.path.exists(vocab), f"the real vocabulary at {vocab}")
if os.path.exists(vocab):
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                    "age": {"type": "integer"}}, "required": ["name", "age"]}, f)
    r = subprocess.run([dsv4, "bench", "--synth", "tiny", "--vocab", vocab, "--prompt", "12", "--gen", "40", "--repeat", "2",
                        "--e2e", "--e2e-schema", f.name, "--device", "cpu", "--json"], capture_output=True, text=True, timeout=300)
    os.unlink(f.name)
    check(r.returncode == 0, f"bench --e2e --e2e-schema runs: {r.stderr[-300:]}")
    if r.returncode == 0:
        rows = json.loads(r.stdout)["e2e"]
        check(len(rows) == 2 and all(x["parsed_json"] == x["requests"] for x in rows),
              f"every schema-constrained answer parses: {rows}")
    # --batch with --e2e: that many greedy requests at once through one engine, a row per size.
    r = subprocess.run([dsv4, "bench", "--synth", "tiny", "--vocab", vocab, "--prompt", "6", "--gen", "8", "--repeat", "1",
                        "--skip-fill", "--batch", "1,3", "--e2e", "--device", "cpu", "--threads", "2", "--json"],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"bench --batch --e2e runs: {r.stderr[-300:]}")
    if r.returncode == 0:
        eb = json.loads(r.stdout).get("e2e_batch", [])
        check([x["sequences"] for x in eb] == [1, 3] and
              all(x["tokens_per_s"] > 0 and 0 < x["ttft_p50_ms"] <= x["ttft_max_ms"] for x in eb) and
              all(abs(x["tokens_per_s"] - x["sequences"] * x["tokens_per_s_per_stream"]) <= 1e-9 * x["tokens_per_s"]
                  for x in eb),
              f"bench --batch --e2e: a row per size, tokens/s in all = streams x per stream: {eb}")
    r = subprocess.run([dsv4, "bench", "--synth", "tiny", "--vocab", vocab, "--prompt", "12", "--gen", "12", "--repeat", "1",
                        "--speculative", "mtp:2", "--draft-oracle", "0.5", "--device", "cpu", "--json"],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"bench --speculative runs: {r.stderr[-300:]}")
    if r.returncode == 0:
        sp = json.loads(r.stdout)["speculative"]
        check(len(sp["verify_steps"]) == 3 and all(x["same_tokens_as_plain"] for x in sp["speculative"]),
              f"bench --speculative: verify steps of 1-3 tokens, greedy tokens unchanged: {sp['speculative']}")
if failures:
    print("\n".join("FAIL " + f for f in failures))
    sys.exit(1)
print(f"cli_bench: ok ({len(prof)} profiled ops, {matmuls // gen} matmuls per decode step)")
