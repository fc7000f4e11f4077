# Sourced by the scripts that run ON THE GPU MACHINE (gpu_run.sh, gpu_bench.sh, gpu_profile.sh) after they set
# their default steps in DEFAULT_STEPS: the repository root as working directory, results in $OUT, the build in
# $BIN, and has STEP (true when STEP is among $STEPS, which default to DEFAULT_STEPS).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/dsv4-out}
STEPS=${STEPS:-$DEFAULT_STEPS}
BIN=build-gpu/bin
mkdir -p "$OUT"
has() { [[ " $STEPS " == *" $1 "* ]]; }
