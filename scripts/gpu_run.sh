#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root (after scripts/gpu_carry.sh filled carry/ here): build,
# op conformance test, golden logits with --device cuda, and the per-op benchmark. Everything lands in $OUT
# (at most 8 files come back): build.log, conformance.log, golden.log, logits-<set>.tgz, perf.log, ppl.log
# (step ppl, not in the default steps).
# Each step has a time limit so a hang cannot eat the lease. STEPS picks steps (default: all).
DEFAULT_STEPS="build conformance golden perf"
source "$(dirname "$0")/gpu_steps.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
if has build; then
  start=$SECONDS
  if ! timeout 400 scripts/gpu_build.sh >"$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"
    exit 1
  fi
  echo "build: ok in $((SECONDS - start)) s"
fi
if has conformance; then
  timeout 300 stdbuf -oL "$BIN/test-backend-ops" >"$OUT/conformance.log" 2>&1
  echo "conformance: exit $?"
  grep -E "^FAIL|^  |^test-backend-ops" "$OUT/conformance.log" | head -80
fi
if has golden; then
  rm -rf /tmp/dsv4-logits
  start=$SECONDS
  DEVICE=cuda timeout 300 scripts/gpu_golden.sh "$BIN/dsv4" carry/golden /tmp/dsv4-logits >"$OUT/golden.log" 2>&1
  echo "golden: exit $? in $((SECONDS - start)) s"
  grep -v "^logits:" "$OUT/golden.log" | tail -5
  grep "^logits:" "$OUT/golden.log" | head -40
  for d in carry/golden/*/; do
    s=$(basename "$d")
    tar -czf "$OUT/logits-$s.tgz" -C /tmp/dsv4-logits $(cd /tmp/dsv4-logits && ls "$s".* 2>/dev/null)
  done
fi
if has ppl; then
  # dsv4 perplexity of each golden set's token sequence on the CPU and on CUDA, quant-sim on and off: the two
  # must agree within the GPU bounds (issue: scoring, CPU and GPU).
  for d in carry/golden/*/; do
    s=$(basename "$d")
    python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); json.dump(m["tokens"][:m["prefill_len"]+m["decode_len"]], open(sys.argv[2],"w"))' \
      "$d/manifest.json" "/tmp/ppl-$s.json"
    for q in on off; do
      for dev in cpu cuda; do
        echo "ppl $s quant-sim $q $dev: $(timeout 60 "$BIN/dsv4" perplexity -m "$d/model.gguf" --tokens "/tmp/ppl-$s.json" \
          --quant-sim $q --device $dev -q 2>&1 | head -1)"
      done
    done
  done | tee "$OUT/ppl.log"
fi
if has perf; then
  timeout 300 "$BIN/test-backend-ops" --perf >"$OUT/perf.log" 2>&1
  echo "perf: exit $?"
  grep -E "^perf (matmul .*K=4096|moe_experts .*D=4096|attention .*H=64|indexer_topk .*keys=32768|hc_.*D=4096)" \
    "$OUT/perf.log" | cut -c6- | sed 's/  */ /g' | head -130
  grep -E "^FAIL|^test-backend-ops" "$OUT/perf.log" | tail -10
fi
