#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root: the full-size V4-Flash benchmark of issue 6 in one go,
# every step with its own time limit so one slow step cannot eat the lease. Results land in $OUT:
#   bench-decode.json   decode tok/s at 4K/32K context (+ the per-op profile), prefill of an 8K prompt (f32)
#   bench-bf16.json     the same prefill with the tensor-core GEMMs (--gemm bf16)
#   bench-depths.json   decode at 4K/32K/128K reached with --skip-fill (seconds, not minutes, per depth), the
#                       median of 5 runs of 64 tokens per depth
#   ncu.txt             device time per kernel of one 4K decode step (Nsight Compute, graphs off)
#   gemv.log            bench_gemv (decode GEMV and MoE at V4-Flash shapes)
#   moe.log             (step moe) bench_gemv --bf16 of the routed experts at 16..1024 tokens, as chosen and with
#                       each MoE kernel forced
#   batch.log           batched decode at 4K: 1, 8, 16, 32, 64 sequences a step (tokens/s in all and per stream,
#                       GB/s of weights), then a per-op table at 16 and 64 sequences (ops timed one at a time)
#   e2e.log             requests through the engine (`bench --e2e`): TTFT and tokens/s alone and in batches, and
#                       under bench/schemas/order.json
#   serve.log, serve_load.log  `serve --synth flash` under 1, 16 and 64 streaming clients (bench/serve_load.py)
#   whatif (stdout)     decode at 4K (median of 3 runs of 64 tokens) with each set of ops in $WHATIF skipped
#                       (bench --skip-ops: those ops launch nothing), the first set empty: what each op class
#                       costs inside the step graph, where Nsight Compute times kernels one at a time
# Needs the build from scripts/gpu_build.sh (build-gpu/). STEPS picks steps (default: all).
DEFAULT_STEPS="gemv decode bf16 depths ncu"
source "$(dirname "$0")/gpu_steps.sh"
# LAYERS=N builds the synthetic model with N layers (a GPU with less memory than an H200: 30 fit an H100).
synth=(--synth flash ${LAYERS:+--layers $LAYERS})
flash=("${synth[@]}" --device cuda --peak-gbs 4800 --json)
run() {  # name, time limit, command...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name" 2>"$OUT/$name.err"
  echo "$name: exit $? in $((SECONDS - start)) s"
}
summary() { python3 scripts/bench_summary.py "$1"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if has gemv; then
  run gemv.log 180 "$BIN/bench_gemv" --n 1,4
  tail -30 "$OUT/gemv.log"
fi
if has moe; then
  # The bf16 mode's routed experts from a batch to a prefill chunk (V4-Flash shapes), as chosen and with each
  # kernel that serves forced: where tc_blocks, the register kernels and the wgmma kernels cross over.
  for f in "" decode_xreg tc_blocks tc_bf16; do
    timeout 120 "$BIN/bench_gemv" --bf16 --n 16,32,64,128,256,512,1024 --only moe ${f:+--force moe_experts=$f} \
      >>"$OUT/moe.log" 2>&1
    echo "moe ${f:-as chosen}: exit $?"
  done
  grep -E "^(moe|bench_gemv)" "$OUT/moe.log"
fi
if has decode; then
  run bench-decode.json 420 "$BIN/dsv4" bench "${flash[@]}" --prompt 8192 --prefill-chunk 2048 --ctx 4096,32768 \
    --gen 32 --profile --gemm f32
  summary "$OUT/bench-decode.json"
fi
if has bf16; then
  run bench-bf16.json 300 "$BIN/dsv4" bench "${flash[@]}" --prompt 8192 --prefill-chunk 4096 --ctx 0 --gen 8 \
    --gemm bf16
  summary "$OUT/bench-bf16.json"
fi
if has depths; then
  run bench-depths.json 300 "$BIN/dsv4" bench "${flash[@]}" --prompt 16 --ctx 4096,32768,131072 --gen 64 --repeat 5 \
    --skip-fill
  summary "$OUT/bench-depths.json"
fi
if has batch; then
  start=$SECONDS
  timeout 300 "$BIN/dsv4" bench "${synth[@]}" --device cuda --peak-gbs 4000 --prompt 32 --gen 16 --ctx 4096 \
    --skip-fill --repeat 3 --batch 1,8,16,32,64 >"$OUT/batch.log" 2>&1
  echo "batch: exit $? in $((SECONDS - start)) s"
  grep -E "^(decode|batch|graphs)" "$OUT/batch.log"
  timeout 200 "$BIN/dsv4" bench "${synth[@]}" --device cuda --prompt 32 --gen 4 --ctx 4096 --skip-fill \
    --batch 16,64 --profile >>"$OUT/batch.log" 2>&1
  echo "batch profile: exit $?"
  sed -n '/^profile  64/,/^total/p' "$OUT/batch.log" | head -30
fi
if has e2e; then
  # What a user sees: requests through the engine (one at a time, then --batch of them at once), and under a
  # JSON schema (the server's response_format path: masks on the host, every answer must parse).
  start=$SECONDS
  timeout 300 "$BIN/dsv4" bench "${synth[@]}" --vocab carry/vocab.gguf --device cuda --prompt 32 --gen 64 --ctx 32 \
    --skip-fill --repeat 3 --e2e --e2e-prompts 32,4096 --batch 8,16,32,64 >"$OUT/e2e.log" 2>&1
  echo "e2e: exit $? in $((SECONDS - start)) s"
  grep -E "^(decode|batch|e2e)" "$OUT/e2e.log"
  timeout 200 "$BIN/dsv4" bench "${synth[@]}" --vocab carry/vocab.gguf --device cuda --prompt 32 --gen 64 --ctx 32 \
    --skip-fill --repeat 4 --e2e --e2e-schema bench/schemas/order.json >>"$OUT/e2e.log" 2>&1
  echo "e2e schema: exit $?"
  grep -E "schema-constrained" "$OUT/e2e.log"
fi
if has serve; then
  # The server under load: `serve --synth flash` (random weights in memory), then bench/serve_load.py with
  # 1, 16 and 64 streaming clients; the server is stopped at the end (bounded waits throughout).
  export LD_LIBRARY_PATH=$PWD/carry/httplib/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  "$BIN/dsv4" serve "${synth[@]}" --vocab carry/vocab.gguf --device cuda --parallel 64 --ctx 4096 --port 8093 \
    >"$OUT/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do
    python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8093/health", timeout=2)' \
      2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 1
  done
  for c in ${SERVE_CLIENTS:-1 16 64}; do
    timeout 180 python3 bench/serve_load.py --url http://127.0.0.1:8093 --clients "$c" --requests $((c * 2)) \
      --max-tokens 64 --warmup 2 2>&1 | tee -a "$OUT/serve_load.log" | sed "s/^/serve_load $c: /"
  done
  kill $pid 2>/dev/null
  wait $pid 2>/dev/null
  grep -E "^dsv4 serve" "$OUT/serve.log" | head -5
fi
if has whatif; then
  WHATIF=${WHATIF:-"none rms_norm hc_pre norm_rope attention moe_experts matmul matmul_batch"}
  for set in $WHATIF; do
    skip=()
    [[ $set != none ]] && skip=(--skip-ops "${set//+/,}")
    rm -f /tmp/dsv4-whatif.json
    timeout 120 "$BIN/dsv4" bench "${flash[@]}" --prompt 16 --ctx 4096 --gen 64 --repeat 3 --skip-fill "${skip[@]}" \
      >/tmp/dsv4-whatif.json 2>/dev/null
    python3 -c 'import json, sys; t = json.load(open(sys.argv[1]))["decode"][0]["tokens_per_s"]
print("whatif skip=%-40s %8.2f tok/s %7.3f ms/token" % (sys.argv[2], t, 1e3 / t))' \
      /tmp/dsv4-whatif.json "$set" || echo "whatif skip=$set: failed"
  done
fi
if has ncu; then
  timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv "$BIN/dsv4" bench \
    "${synth[@]}" --device cuda --prompt 1 --ctx 4096 --gen 1 --skip-fill --no-graphs >/tmp/dsv4-ncu.csv 2>/dev/null
  python3 scripts/ncu_step_summary.py /tmp/dsv4-ncu.csv dequant_rows >"$OUT/ncu.txt"
  head -25 "$OUT/ncu.txt"
fi
