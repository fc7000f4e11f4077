#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root: configure and build the minimal CUDA tree (no
# GoogleTest) with the carried dependencies; the server too when scripts/gpu_carry.sh carried cpp-httplib.
# Targets: dsv4, test-backend-ops and bench_gemv.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
ARCHS=${ARCHS:-90a}
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_MINIMAL=ON -DDSV4_TESTS=OFF -DDSV4_CUDA=ON \
  -DDSV4_CUDA_ARCHS="$ARCHS" -DDSV4_EXTRA_INCLUDE="$PWD/carry/include" -DDSV4_PCRE2_ROOT="$PWD/carry/pcre2" \
  -DDSV4_HTTPLIB_ROOT="$([[ -d carry/httplib ]] && echo "$PWD/carry/httplib")" >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target dsv4 test-backend-ops bench_gemv
