#!/usr/bin/env bash
# Run the golden sets' token sequences through `dsv4 logits` and write the raw logits, without comparing:
# the reference logits stay on the development machine (scripts/golden_compare.py compares there).
# usage: scripts/gpu_golden.sh DSV4_BINARY GOLDEN_ROOT OUT_DIR   (DEVICE=cuda|cpu, default cuda)
# For each set and mode writes <set>.<mode>.{main,stepwise,mtp}.f32, following the commands of
# golden/README.md: main = tokens[0:P+D] with --prefill P; stepwise = tokens[0:S] --stepwise;
# mtp = tokens[0:P+D+1] --prefill P --mtp (sets with an MTP block only). Modes:
#   off  = --quant-sim off --gemm f32   (exact mode, checked against exact_fp32)
#   on   = --quant-sim on  --gemm f32   (checked against qat_fp32)
#   bf16 = --quant-sim on  --gemm bf16  (tensor-core matmuls, checked against the reference's bf16 run)
# The CPU backend ignores --gemm (it always computes in f32). Each set's stepwise run is repeated with
# --no-graphs and must match the graphed one bit for bit (when mode on runs). MODES picks modes (default
# "off on bf16").
set -euo pipefail
DSV4=$1
GOLDEN=$2
OUTDIR=$3
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUTDIR"
tmp=$(mktemp -d)
for dir in "$GOLDEN"/*/; do
  name=$(basename "$dir")
  # Token files and lengths from the manifest.
  read -r P HAS_MTP < <(python3 - "$dir/manifest.json" "$tmp" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); t = m["tokens"]
P, D, S = m["prefill_len"], m["decode_len"], m["stepwise_len"]
json.dump(t[:P + D], open(sys.argv[2] + "/main.json", "w"))
json.dump(t[:S], open(sys.argv[2] + "/stepwise.json", "w"))
json.dump(t[:P + D + 1], open(sys.argv[2] + "/mtp.json", "w"))
print(P, int("exact_fp32.mtp_prefill" in m["files"]))
PY
)
  for mode in ${MODES:-off on bf16}; do
    case $mode in
      off) opts=(--quant-sim off --gemm f32) ;;
      on) opts=(--quant-sim on --gemm f32) ;;
      bf16) opts=(--quant-sim on --gemm bf16) ;;
    esac
    base="$OUTDIR/$name.$mode"
    "$DSV4" logits -m "$dir/model.gguf" --tokens "$tmp/main.json" -o "$base.main.f32" --prefill "$P" \
      "${opts[@]}" --device "$DEVICE"
    "$DSV4" logits -m "$dir/model.gguf" --tokens "$tmp/stepwise.json" -o "$base.stepwise.f32" --stepwise \
      "${opts[@]}" --device "$DEVICE"
    if [[ "$HAS_MTP" == 1 ]]; then
      "$DSV4" logits -m "$dir/model.gguf" --tokens "$tmp/mtp.json" -o "$base.mtp.f32" --prefill "$P" --mtp \
        "${opts[@]}" --device "$DEVICE"
    fi
  done
  # Step graphs (their branches run concurrently) must give what the ops run one by one give, bit for bit.
  [[ -f "$OUTDIR/$name.on.stepwise.f32" ]] || continue
  "$DSV4" logits -m "$dir/model.gguf" --tokens "$tmp/stepwise.json" -o "$tmp/nographs.f32" --stepwise \
    --quant-sim on --gemm f32 --no-graphs --device "$DEVICE"
  if cmp -s "$tmp/nographs.f32" "$OUTDIR/$name.on.stepwise.f32"; then
    echo "graphs: $name stepwise logits bit-identical with and without step graphs"
  else
    echo "graphs: $name stepwise logits DIFFER with and without step graphs"
    graphs_failed=1
  fi
done
rm -rf "$tmp"
if [[ -n "${graphs_failed:-}" ]]; then exit 1; fi
