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
# cpp-httplib for `serve` (the minimal build takes it from carry/httplib): Debian's compiled library with the
# headers it is built against (OpenSSL, zlib, Brotli) and the shared libraries it needs; the GPU machine runs
# the server with LD_LIBRARY_PATH=carry/httplib/lib.
mkdir -p carry/httplib/include carry/httplib/lib
cp /usr/include/httplib.h /usr/include/zlib.h /usr/include/zconf.h carry/httplib/include/
cp -r /usr/include/openssl /usr/include/brotli carry/httplib/include/
cp /usr/include/x86_64-linux-gnu/openssl/* carry/httplib/include/openssl/
lib=/usr/lib/x86_64-linux-gnu
cp -L $lib/libcpp-httplib.so carry/httplib/lib/libcpp-httplib.so
cp -L $lib/libcpp-httplib.so.0.11 $lib/libssl.so.3 $lib/libcrypto.so.3 $lib/libz.so.1 $lib/libbrotlicommon.so.1 \
  $lib/libbrotlidec.so.1 $lib/libbrotlienc.so.1 carry/httplib/lib/
for d in "$SHARED"/golden/*/; do
  set_name=$(basename "$d")
  mkdir -p "carry/golden/$set_name"
  cp "$d/model.gguf" "$d/manifest.json" "carry/golden/$set_name/"
done
du -sh carry
