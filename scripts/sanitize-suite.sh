#!/bin/sh
# sanitize-suite.sh — the whole test suite under AddressSanitizer and
# UndefinedBehaviorSanitizer (LeakSanitizer included), for CI: ctest runs it
# from the main build as `sanitize-suite` (issue 20, CI).
#
# usage: scripts/sanitize-suite.sh [BUILD_DIR]   (default build-asan)
#
# Configures BUILD_DIR with -DMINFER_SANITIZE=ON and CUDA off (nvcc code is
# not instrumented; the CUDA suites skip without a GPU anyway), without the
# bounded fuzz runs (the main build's fuzz-*-run entries fuzz under ASan
# already) and without the allocation sweep (ASan owns malloc; the main
# build runs it), builds everything and runs ctest there, except the
# out-of-tree plugin builds (below). Any sanitizer
# report fails the test that caused it: UBSan does not recover
# (-fno-sanitize-recover), ASan and LSan exit non-zero.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-asan}
jobs=${MINFER_SANITIZE_BUILD_JOBS:-2}

cmake -S "$src" -B "$build" -G Ninja -DMINFER_CUDA=OFF -DMINFER_SANITIZE=ON \
      -DMINFER_FUZZ_SECONDS=0 -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j "$jobs"
# abort_on_error=0: a report exits non-zero (ctest: failed) instead of
# dumping core; detect_leaks=1 is ASan's default on Linux, stated here.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS UBSAN_OPTIONS
# -E plugin-standalone: those tests build a plugin out of tree against the
# installed SDK with the SDK's own flags, which cannot link the
# sanitizer-instrumented libminfer-quant.a; the main build runs them.
ctest --test-dir "$build" --output-on-failure -E '^plugin-standalone'

