#!/usr/bin/env bash
# Build if needed and run the whole CPU test suite through ctest; ends with ctest's summary line.
# Options: BUILD_DIR (default build), CTEST_ARGS (extra ctest arguments, e.g. "-R gguf").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build} ./scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-}
