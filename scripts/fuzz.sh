#!/bin/sh
# fuzz.sh — a bounded libFuzzer run of one parser of untrusted bytes, for CI
# (ctest runs it for each target) or by hand.
#
# usage: scripts/fuzz.sh TARGET [SECONDS] [BUILD_DIR]
#   TARGET     gguf (the GGUF reader), tokenizer (text pipeline, streaming
#              detokenizer, chat-template recognition, GGUF tokenizer metadata),
#              session (the session file parser) or serve-request (minfer
#              serve's JSON request parser)
#   SECONDS    total fuzzing time (default 60)
#   BUILD_DIR  a separate clang build (default build-fuzz), never the main one
#
# Configures BUILD_DIR with clang and -DMINFER_FUZZ=ON, builds only the
# fuzz-TARGET executable (ASan + UBSan + libFuzzer) and fuzzes a copy of the
# seed corpus tests/fuzz/corpus-TARGET, so the checked-in seeds never change.
# Exits non-zero on any crash, leak, timeout or sanitizer report; the
# reproducer is left in BUILD_DIR/fuzz-TARGET-artifacts/. The tokenizer
# target uses the real Qwen tokenizer from MINFER_FIXTURES_DIR when present,
# else a synthetic one. Needs clang and libclang-rt-14-dev (libFuzzer).
set -eu

target=${1:?usage: scripts/fuzz.sh gguf|tokenizer|session|serve-request [SECONDS] [BUILD_DIR]}
secs=${2:-60}
build=${3:-build-fuzz}
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=${MINFER_FUZZ_BUILD_JOBS:-2}

# Per-target libFuzzer limits. -rss_limit_mb: a parser must never allocate
# more than its input justifies, so a blow-up is a finding.
case "$target" in
gguf)
    # -max_len: every seed and long string arrays fit.
    extra="-dict=$src/tests/fuzz/gguf.dict -max_len=16384 -rss_limit_mb=1024" ;;
session)
    # -max_len: the seeds (up to ~10 KiB) with room to grow.
    extra="-max_len=32768 -rss_limit_mb=1024" ;;
serve-request)
    # -max_len: request bodies of a few KiB exercise every field.
    extra="-max_len=8192 -rss_limit_mb=1024" ;;
tokenizer)
    # -max_len: text up to 8 KiB and the seed GGUFs (4 KiB) with room to
    # grow; the fixture tokenizer itself takes ~400 MB under ASan.
    extra="-max_len=8192 -rss_limit_mb=2048" ;;
*)
    echo "fuzz.sh: unknown target '$target' (expected gguf, tokenizer, session or serve-request)" >&2
    exit 2 ;;
esac

cmake -S "$src" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DMINFER_FUZZ=ON \
      -DMINFER_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j "$jobs" "fuzz-$target"

work="$build/fuzz-$target-corpus"
art="$build/fuzz-$target-artifacts"
mkdir -p "$work" "$art"
cp "$src/tests/fuzz/corpus-$target"/* "$work"/

# shellcheck disable=SC2086 # $extra is a list of flags
"$build/bin/fuzz-$target" "$work" $extra \
    -max_total_time="$secs" -timeout=10 \
    -artifact_prefix="$art/" -print_final_stats=1
