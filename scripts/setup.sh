#!/usr/bin/env bash
# Install what is missing (Debian packages), then configure and build Release into build/.
# Idempotent and quiet when everything is present. The CLI ends up at build/bin/dsv4.
# Options: BUILD_DIR (default build), DSV4_CMAKE_ARGS (extra CMake arguments).
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake ninja-build pkg-config libpcre2-dev libcpp-httplib-dev nlohmann-json3-dev
      libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev python3-numpy chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Tools that may come from outside Debian's packages (a Node.js install ships its own npm): only install the
# Debian package when the command itself is missing.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v clang++ >/dev/null 2>&1 || missing+=(clang)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# nvcc is often installed outside PATH.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

BUILD_DIR=${BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${DSV4_CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
echo "setup: built $BUILD_DIR/bin/dsv4"
