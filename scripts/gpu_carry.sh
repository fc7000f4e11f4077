#!/usr/bin/env bash
# Run HERE (not on the GPU machine): fill carry/ (git-ignored) with what the GPU machine lacks: the
# header-only dependencies (CLI11, nlohmann-json) and the golden models (model.gguf + manifest.json only;
# reference logits stay here and are compared here). Prints the size that will travel.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared}
mkdir -p carry/include carry/golden
cp -r /usr/include/CLI carry/include/
cp -r /usr/include/nlohmann carry/include/
# PCRE2 for the tokenizer (the GPU machine's minimal build takes it from carry/pcre2): run, bench --e2e.
mkdir -p carry/pcre2/include carry/pcre2/lib
cp /usr/include/pcre2.h carry/pcre2/include/
cp /usr/lib/x86_64-linux-gnu/libpcre2-8.a carry/pcre2/lib/
for d in "$SHARED"/golden/*/; do
  set_name=$(basename "$d")
  mkdir -p "carry/golden/$set_name"
  cp "$d/model.gguf" "$d/manifest.json" "carry/golden/$set_name/"
done
du -sh carry
