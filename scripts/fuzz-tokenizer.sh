#!/bin/sh
# fuzz-tokenizer.sh — a bounded libFuzzer run of the tokenizer (text
# pipeline, streaming detokenizer, chat-template recognition, and GGUF
# tokenizer metadata), for CI or by hand.
#
# usage: scripts/fuzz-tokenizer.sh [SECONDS] [BUILD_DIR]
#   SECONDS    total fuzzing time (default 60)
#   BUILD_DIR  a separate clang build (default build-fuzz), never the main one
#
# Uses the real Qwen tokenizer from MINFER_FIXTURES_DIR (default: the
# build's ../shared/fixtures) when present, else a synthetic one. Exits
# non-zero on any crash, leak, timeout or sanitizer report; the reproducer
# is left in BUILD_DIR/fuzz-tokenizer-artifacts/. Needs clang and
# libclang-rt-14-dev (libFuzzer), plus the usual build dependencies.
set -eu

secs=${1:-60}
build=${2:-build-fuzz}
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=${MINFER_FUZZ_BUILD_JOBS:-2}

cmake -S "$src" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DMINFER_FUZZ=ON \
      -DMINFER_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j "$jobs" fuzz-tokenizer

work="$build/fuzz-tokenizer-corpus"
art="$build/fuzz-tokenizer-artifacts"
mkdir -p "$work" "$art"
cp "$src"/tests/fuzz/corpus-tokenizer/* "$work"/

# -max_len: text up to 8 KiB and the seed GGUFs (4 KiB) with room to grow;
# -rss_limit_mb: the fixture tokenizer itself takes ~400 MB under ASan.
"$build/bin/fuzz-tokenizer" "$work" \
    -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$art/" -print_final_stats=1
