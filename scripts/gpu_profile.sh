#!/usr/bin/env bash
# Run ON THE GPU MACHINE after scripts/gpu_build.sh: where the decode kernels spend their time.
#   gemv.log        bench_gemv at n = 1: the read floor of each call size next to the Q8_0 GEMVs and the MoE,
#                   weights rotated through more than L2 (HBM) ...
#   gemv-l2.log     ... and with one copy, so calls under the 50 MB L2 read from L2 (A/B of DRAM)
#   ncu-decode.csv  Nsight Compute sections (speed of light, occupancy, warp states, memory, instructions) of
#                   the big decode kernels of one step of a 4-layer Flash (window, window, CSA, HCA layers) at
#                   4K context, graphs off; scripts/ncu_sections.py summarizes it
# STEPS picks steps (default: all). Results land in $OUT.
DEFAULT_STEPS="gemv ncu"
source "$(dirname "$0")/gpu_steps.sh"
if has gemv; then
  timeout 120 "$BIN/bench_gemv" --n 1 --only floor >"$OUT/gemv.log" 2>&1
  for op in q_a q_b wo_a wo_b shexp lm_head moe; do timeout 60 "$BIN/bench_gemv" --n 1 --only $op | tail -n +3; done >>"$OUT/gemv.log" 2>&1
  timeout 120 "$BIN/bench_gemv" --n 1 --no-rotate --only floor >"$OUT/gemv-l2.log" 2>&1
  for op in q_a q_b wo_a wo_b shexp moe; do timeout 60 "$BIN/bench_gemv" --n 1 --no-rotate --only $op | tail -n +3; done >>"$OUT/gemv-l2.log" 2>&1
  echo "== gemv (HBM)"; grep -v "^bench_gemv\|^op " "$OUT/gemv.log" | grep -E "floor|Q8_0|moe" | grep -v "F32\b.*expert"
  echo "== gemv (one copy: L2 where it fits)"; grep -E "floor|Q8_0|moe" "$OUT/gemv-l2.log"
fi
if has ncu; then
  # The prompt step (position 0) comes first, then the decode steps at 4K: the summary's last launches are those.
  KERNELS=${KERNELS:-"regex:attention_kernel|attention_merge_kernel|moe_gate_up_kernel|moe_down_sum_kernel|gemv_kernel|indexer_score_kernel"}
  timeout 300 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats \
    --metrics "$(python3 scripts/ncu_sections.py --stall-metrics)" --csv --page details -k "$KERNELS" --launch-count "${LAUNCHES:-160}" \
    "$BIN/dsv4" bench --synth flash --layers 4 --device cuda --prompt 1 --ctx 4096 --gen 2 --skip-fill --no-graphs \
    >"$OUT/ncu-decode.csv" 2>"$OUT/ncu-decode.err"
  echo "ncu: exit $?"
  python3 scripts/ncu_sections.py "$OUT/ncu-decode.csv" | tail -60
fi
