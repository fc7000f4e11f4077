#!/usr/bin/env python3
# usage: scripts/step_invariance.py DSV4_BINARY GOLDEN_ROOT TMP_DIR  (run where the device is; no comparison data needed)
# Logits of the same tokens fed one at a time (--stepwise) and in prefill chunks of 2-4 (a speculative verify
# step's sizes): bit-identical rows or not, per golden set and chunk size.
import json, subprocess, sys, array, os
dsv4, golden, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(tmp, exist_ok=True)
for s in sorted(os.listdir(golden)):
    m = json.load(open(f"{golden}/{s}/manifest.json"))
    toks = m["tokens"][:m["stepwise_len"]]
    tf = f"{tmp}/{s}.json"; json.dump(toks, open(tf, "w"))
    def run(extra, out):
        subprocess.run([dsv4, "logits", "-m", f"{golden}/{s}/model.gguf", "--tokens", tf, "-o", out] + extra,
                       check=True, capture_output=True)
        a = array.array("f"); a.frombytes(open(out, "rb").read()); return a
    for qs in ("on", "off"):
        ref = run(["--stepwise", "--quant-sim", qs], f"{tmp}/{s}.step.f32")
        V = len(ref) // len(toks)
        for c in (2, 3, 4):
            got = run(["--prefill-chunk", str(c), "--quant-sim", qs], f"{tmp}/{s}.c{c}.f32")
            bad = [r for r in range(len(toks)) if got[r * V:(r + 1) * V] != ref[r * V:(r + 1) * V]]
            print(f"chunk {s} quant-sim={qs} chunks of {c}: {len(toks) - len(bad)}/{len(toks)} rows bit-identical to stepwise"
                  + (f" (first differing row {bad[0]})" if bad else ""))
