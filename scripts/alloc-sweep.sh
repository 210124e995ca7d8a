#!/bin/sh
# alloc-sweep.sh — fail every heap allocation of the CLI's file-handling
# commands once and require a clean error each time (issue 20, item 1).
#
# usage: scripts/alloc-sweep.sh BUILD_DIR [WORK_DIR]
#
# With tests/failalloc/libfailalloc.so preloaded (tests/failalloc/failalloc.c)
# each command first runs once to count its allocations (A), then A more
# times with FAILALLOC_N=1..A, so each allocation point fails once. A run
# passes when it was not killed by a signal (a NULL dereference, a glibc
# "double free" abort), printed no heap-corruption report, and either
# succeeded or exited non-zero with a "minfer" message on stderr. The
# commands: run, tokenize, detokenize, info, quantize and synth on a tiny
# synthetic qwen2 model (built-in byte-level BPE tokenizer with merges, so
# the BPE loader's merge table is swept too); outputs go to WORK_DIR.
# Exits 1 naming each failing point with its command and stderr.
set -u

build=${1:?usage: scripts/alloc-sweep.sh BUILD_DIR [WORK_DIR]}
build=$(cd "$build" && pwd)
if [ -n "${2:-}" ]; then
    work=$2
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/minfer-alloc-sweep.XXXXXX")
    trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
bin="$build/bin/minfer"
shim="$build/tests/failalloc/libfailalloc.so"
for f in "$bin" "$shim"; do
    [ -e "$f" ] || { echo "alloc-sweep: $f is missing (build minfer-cli and failalloc)" >&2; exit 2; }
done

shape=custom:n_embd=64,n_layer=2,n_head=4,n_head_kv=2,head_dim=16,n_ff=128,n_vocab=512,n_ctx=256
model="$work/m.gguf"
"$bin" synth --arch qwen2 --shape "$shape" --type Q8_0 --threads 1 -o "$model" >/dev/null ||
    { echo "alloc-sweep: cannot make the test model" >&2; exit 2; }

bad=0
total=0
# sweep NAME ARGS...: one counting run, then one run per allocation point.
sweep() {
    name=$1
    shift
    rm -f "$work/report" "$work/out.gguf"
    FAILALLOC_REPORT="$work/report" LD_PRELOAD="$shim" "$bin" "$@" >/dev/null 2>"$work/err"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "alloc-sweep: $name fails without any injected failure (exit $rc):" >&2
        cat "$work/err" >&2
        bad=$((bad + 1))
        return
    fi
    n=$(cut -d' ' -f1 "$work/report")
    i=1
    while [ "$i" -le "$n" ]; do
        rm -f "$work/report" "$work/out.gguf"
        FAILALLOC_N=$i FAILALLOC_REPORT="$work/report" LD_PRELOAD="$shim" \
            "$bin" "$@" >/dev/null 2>"$work/err"
        rc=$?
        why=""
        if [ $rc -ge 128 ]; then
            why="killed by signal $((rc - 128))"
        elif grep -qiE 'double free|corrupted|invalid pointer|Sanitizer|Segmentation' "$work/err"; then
            why="heap error report"
        elif [ $rc -ne 0 ] && ! grep -q 'minfer' "$work/err"; then
            why="exit $rc without a minfer message"
        fi
        if [ -n "$why" ]; then
            echo "alloc-sweep: FAIL $name, allocation $i of $n: $why; stderr:" >&2
            sed 's/^/    /' "$work/err" | head -5 >&2
            bad=$((bad + 1))
        fi
        i=$((i + 1))
    done
    total=$((total + n))
    echo "alloc-sweep: $name: $n allocation points swept"
}

printf 'Why is the sky blue?\n' >"$work/prompt.txt"
# run names its backend: without --backend the CLI also opens the CUDA
# plugin (when built) to probe it, and the static CUDA runtime inside it
# crashes in its own load-time constructors when an allocation fails there,
# before any code of ours runs. --backend cpu never opens it (issue 20,
# item 7); the sweep measures our code.
sweep run run -m "$model" -p "hello world" -n 4 -t 1 --seed 1 --backend cpu
sweep run-file run -m "$model" -f "$work/prompt.txt" -n 2 -t 1 --seed 1 --chat --backend cpu
sweep tokenize tokenize -m "$model" -p "hello world, 123"
sweep detokenize detokenize -m "$model" --ids 72,101,108,108,111
sweep info info "$model"
sweep quantize quantize --threads 1 --allow-requantize "$model" "$work/out.gguf" Q4_0
sweep synth synth --arch qwen2 --shape "$shape" --type Q4_K_M --threads 1 -o "$work/out.gguf"

echo "alloc-sweep: $total points in all, $bad failed"
[ $bad -eq 0 ]
