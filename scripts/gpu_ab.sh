#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root: decode speed of this tree against a base commit in one call,
# so the two are measured on the same machine. HERE, first: scripts/gpu_carry.sh, then
#   git archive BASE > carry/base.tar
# On the GPU machine this builds both trees at once (build-gpu from the working tree; carry/base.tar unpacked
# in build-base/tree, which stays between calls while the machine does, built in its own build-gpu), then runs `dsv4 bench --synth flash --skip-fill` at the depths of $CTX, alternating
# base/new/base/new... ($ROUNDS pairs), each run the median of 5 measurements of 64 tokens per depth.
# Results in $OUT: ab-<side>-<round>.json and a table on stdout. STEPS: build, ab (default both).
DEFAULT_STEPS="build ab"
source "$(dirname "$0")/gpu_steps.sh"
CTX=${CTX:-4096,32768,131072}
ROUNDS=${ROUNDS:-2}
if has build; then
  start=$SECONDS
  rm -rf build-base/tree && mkdir -p build-base/tree && tar -xf carry/base.tar -C build-base/tree
  mkdir -p build-base/tree/carry && cp -r carry/include build-base/tree/carry/
  (cd build-base/tree && timeout 300 scripts/gpu_build.sh >"$OUT/build-base.log" 2>&1) &
  base_pid=$!
  timeout 300 scripts/gpu_build.sh >"$OUT/build.log" 2>&1
  new_rc=$?
  wait $base_pid
  base_rc=$?
  echo "build: new exit $new_rc, base exit $base_rc in $((SECONDS - start)) s"
  [[ $new_rc == 0 && $base_rc == 0 ]] || { tail -30 "$OUT/build.log" "$OUT/build-base.log"; exit 1; }
fi
if has ab; then
  for r in $(seq 1 "$ROUNDS"); do
    for side in base new; do
      bin=$BIN/dsv4
      [[ $side == base ]] && bin=build-base/tree/build-gpu/bin/dsv4
      f="$OUT/ab-$side-$r.json"
      start=$SECONDS
      timeout 200 "$bin" bench --synth flash --device cuda --peak-gbs 4800 --json --prompt 16 --ctx "$CTX" --gen 64 \
        --repeat 5 --skip-fill >"$f" 2>"$f.err"
      echo "ab $side round $r: exit $? in $((SECONDS - start)) s"
      python3 - "$f" "$side" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"  {sys.argv[2]}: no result ({e})"); sys.exit(0)
print("  " + sys.argv[2] + ": " + "  ".join(f"ctx {r['context']}: {r['tokens_per_s']:.2f} tok/s" for r in d["decode"]))
PY
    done
  done
fi
