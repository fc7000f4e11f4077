#!/usr/bin/env bash
# Whether the working tree's CUDA kernels compile to the same machine code as a commit's, kernel by kernel.
# usage: scripts/cuda_same_code.sh BASE_COMMIT [ARCH]   (ARCH: default sm_90a, the H200's)
#
# A change that leaves every kernel's code byte for byte as it was (a refactor of the kernels' C++, a comment)
# keeps what the GPU conformance tests, golden runs and benchmarks measured on BASE_COMMIT; one that does not
# needs them again. Both trees are compiled from the same path, so the names of anonymous namespaces match.
# Needs nvcc (CUDA_HOME or /usr/local/cuda) and no GPU. Exit status 0 when every kernel's code is the same.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: scripts/cuda_same_code.sh BASE_COMMIT [ARCH]}
arch=${2:-sm_90a}
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
[ -x "$nvcc" ] || { echo "cuda_same_code: no nvcc at $nvcc (set CUDA_HOME)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

compile() {  # compile TREE_DIR OUT_DIR: every src/kernels/cuda/*.cu, from $work/src
    rm -rf "$work/src" && cp -r "$1/src" "$work/src" && mkdir -p "$2"
    local pids=() f
    for f in "$work"/src/kernels/cuda/*.cu; do
        (cd "$work" && "$nvcc" -DDSV4_HAVE_CUDA=1 -Isrc -O3 -DNDEBUG -arch="$arch" -cubin --expt-relaxed-constexpr \
            -std=c++20 -x cu "src/kernels/cuda/$(basename "$f")" -o "$2/$(basename "$f" .cu).cubin") &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
}

mkdir -p "$work/base_tree"
git archive "$base" src | tar -x -C "$work/base_tree"
echo "compiling $base ($arch)..." >&2
compile "$work/base_tree" "$work/base"
echo "compiling the working tree ($arch)..." >&2
compile "$PWD" "$work/new"
python3 scripts/cubin_kernels.py "$work/base" "$work/new"
