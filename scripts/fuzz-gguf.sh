#!/bin/sh
# fuzz-gguf.sh — a bounded libFuzzer run of the GGUF reader, for CI.
#
# usage: scripts/fuzz-gguf.sh [SECONDS] [BUILD_DIR]
#   SECONDS    total fuzzing time (default 60)
#   BUILD_DIR  a separate clang build (default build-fuzz), never the main one
#
# Configures BUILD_DIR with clang and -DMINFER_FUZZ=ON, builds only the
# fuzz-gguf target (ASan + UBSan + libFuzzer), and fuzzes from the seed
# corpus in tests/fuzz/corpus-gguf (copied, so the checked-in seeds never
# change). Exits non-zero on any crash, leak, timeout or sanitizer report;
# the reproducer is left in BUILD_DIR/fuzz-gguf-artifacts/.
# Needs the Debian packages clang and libclang-rt-14-dev (libFuzzer),
# plus the project's usual build dependencies.
set -eu

secs=${1:-60}
build=${2:-build-fuzz}
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=${MINFER_FUZZ_BUILD_JOBS:-2}

cmake -S "$src" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DMINFER_FUZZ=ON \
      -DMINFER_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j "$jobs" fuzz-gguf

work="$build/fuzz-gguf-corpus"
art="$build/fuzz-gguf-artifacts"
mkdir -p "$work" "$art"
cp "$src"/tests/fuzz/corpus-gguf/* "$work"/

# -max_len: big enough for every seed and for long string arrays;
# -rss_limit_mb: the reader must never allocate more than the input
# justifies, so a blow-up is a finding.
"$build/bin/fuzz-gguf" "$work" \
    -dict="$src/tests/fuzz/gguf.dict" \
    -max_total_time="$secs" -max_len=16384 -timeout=10 -rss_limit_mb=1024 \
    -artifact_prefix="$art/" -print_final_stats=1
