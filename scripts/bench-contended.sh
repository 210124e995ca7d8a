#!/bin/sh
# bench-contended.sh — CPU decode beside a busy process (issue 20, item 8):
# does -t N keep up with -t 1 when another process keeps one core busy?
#
# usage: scripts/bench-contended.sh [BUILD_DIR] [ROUNDS] [-- BENCH_ARGS...]
#   BUILD_DIR   default build
#   ROUNDS      default 5; each round starts one busy-loop process (a shell
#               `while :` loop: one core's worth of CPU), runs `minfer bench`
#               with -t 1 and then with -t THREADS (side by side, so both
#               see the same machine), and stops the loop
#   BENCH_ARGS  default: --backend cpu --type Q8_0 -p 0 -n 32 -r 1 (a
#               synthetic qwen2.5-0.5b Q8_0 made in memory, decode only)
#   THREADS     environment, default 2
#
# Prints each round's tg t/s for both and the medians with their ratio.
# With CHECK=1 exits 1 when the -t THREADS median is below the -t 1
# median (the pool must fall back rather than wait on preempted workers:
# backends/cpu/pool.c). docs/PERF.md records the measurements.
set -eu

build=${1:-build}
rounds=${2:-5}
[ $# -ge 1 ] && shift
[ $# -ge 1 ] && shift
[ "${1:-}" = "--" ] && shift
if [ $# -eq 0 ]; then
    set -- --backend cpu --type Q8_0 -p 0 -n 32 -r 1
fi
threads=${THREADS:-2}
bin="$build/bin/minfer"
[ -x "$bin" ] || { echo "bench-contended: $bin not built" >&2; exit 2; }

busy=""
cleanup() { [ -n "$busy" ] && kill "$busy" 2>/dev/null; busy=""; }
trap cleanup EXIT INT TERM

# tg t/s of one bench run (the last table row's mean)
tg() {
    "$bin" bench "$@" 2>/dev/null | awk -F'|' '/ tg[0-9]/ {split($8, a, " "); v = a[1]} END {print v}'
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

one=""
many=""
echo "round  -t 1 t/s  -t $threads t/s   (beside one busy-loop process; $*)"
r=1
while [ "$r" -le "$rounds" ]; do
    sh -c 'while :; do :; done' &
    busy=$!
    sleep 0.5
    a=$(tg "$@" -t 1)
    b=$(tg "$@" -t "$threads")
    cleanup
    printf '%5d  %8s  %8s\n' "$r" "$a" "$b"
    one="$one $a"
    many="$many $b"
    r=$((r + 1))
done
m1=$(echo "$one" | tr ' ' '\n' | grep . | median)
mn=$(echo "$many" | tr ' ' '\n' | grep . | median)
ratio=$(awk -v a="$m1" -v b="$mn" 'BEGIN {printf "%.2f", (a > 0 ? b / a : 0)}')
echo "median -t 1: $m1 t/s; median -t $threads: $mn t/s; ratio $ratio"
if [ "${CHECK:-0}" = 1 ] && awk -v r="$ratio" 'BEGIN {exit !(r < 1.0)}'; then
    echo "bench-contended: -t $threads is slower than -t 1 under contention" >&2
    exit 1
fi
