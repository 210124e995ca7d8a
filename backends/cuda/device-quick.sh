#!/bin/bash
# device-quick.sh — a short GPU-machine run for the CUDA plugin (one call
# of a few minutes): build, synthesise the 1.5B/7B Q4_K_M models on the CPU
# while the CUDA suites run on the GPU, then tg benches with the
# capture-time fusions on and off (MINFER_CUDA_NO_FUSE=1).
# Usage (repository root, $OUT set; deps in .debs/, fixtures in .fixtures/):
#   bash backends/cuda/device-quick.sh [BUDGET_S]
set -o pipefail
T0=$(date +%s)
BUDGET=${1:-260}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/deps
left() { echo $((BUDGET - ($(date +%s) - T0))); }
for f in .debs/*.deb; do dpkg -x "$f" /tmp/deps; done
D=/tmp/deps
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
export PKG_CONFIG_SYSROOT_DIR=$D
export PKG_CONFIG_LIBDIR=$D/usr/lib/x86_64-linux-gnu/pkgconfig:$D/usr/share/pkgconfig
PKGC=$(command -v pkg-config || echo $D/usr/bin/pkgconf)
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
B=/tmp/b
SRC=$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.log" 2>&1
cat "$OUT/gpu.log"
cmake -S . -B $B -G Ninja -DMINFER_CUDA=ON -DMINFER_CUDA_ARCHS=90 \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DPKG_CONFIG_EXECUTABLE="$PKGC" \
  -DMINFER_FIXTURES_DIR="$SRC/.fixtures" \
  -DCMAKE_BUILD_RPATH=$D/usr/lib/x86_64-linux-gnu > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
ninja -C $B -j16 minfer-cuda minfer-cpu minfer-cli test-fixture test-cuda-e2e test-cuda-plugin test-cuda-ops \
  >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
cd $B
M15=/tmp/q25-1.5b-q4km.gguf M7=/tmp/q25-7b-q4km.gguf M8=/tmp/q3-8b-q4km.gguf
# models on the CPU (12 threads) while the GPU runs the suites
( ./bin/minfer synth --arch qwen2 --shape qwen2.5-1.5b --type Q4_K_M --threads 12 -o $M15 &&
  echo "synth 1.5b done at $(( $(date +%s) - T0 )) s" &&
  ./bin/minfer synth --arch qwen2 --shape qwen2.5-7b --type Q4_K_M --threads 12 -o $M7 &&
  echo "synth 7b done at $(( $(date +%s) - T0 )) s" &&
  ./bin/minfer synth --arch qwen3 --shape qwen3-8b --type Q4_K_M --threads 12 -o $M8 &&
  echo "synth qwen3-8b done at $(( $(date +%s) - T0 )) s" ) > "$OUT/synth.log" 2>&1 &
SYN=$!
{
  echo "== cuda-plugin"; timeout 40 ./bin/test-cuda-plugin 2>&1
  echo "== cuda-ops"; timeout 60 ./bin/test-cuda-ops 2>&1
  echo "== cuda-e2e"; timeout $(( $(left) - 50 )) ./bin/test-cuda-e2e 2>&1
} > "$OUT/tests.log" 2>&1
grep -E "^== |^[0-9]+%|graph replay|:F:|:E:|Timeout|equals cpu" "$OUT/tests.log" | cut -c1-300 | head -40
echo "tests done at $(( $(date +%s) - T0 )) s"
wait_file() { # file: waits for the synth job to write it (or to end)
  while [ ! -f "$1" ] && kill -0 $SYN 2>/dev/null && [ "$(left)" -gt 15 ]; do sleep 1; done
  sleep 1
  [ -f "$1" ]
}
bench() { # label, env, args...
  local label=$1 env=$2; shift 2
  if [ "$(left)" -lt 12 ]; then echo "skip $label: $(left) s left"; return; fi
  echo "== $label ($(left) s left)" >> "$OUT/bench.log"
  env $env timeout $(( $(left) - 5 )) ./bin/minfer bench --backend cuda "$@" >> "$OUT/bench.log" 2>&1
  echo "$label: $(grep "^| [a-z0-9]" "$OUT/bench.log" | grep -v "^| model" | tail -1)"
}
wait_file $M15 && {
  bench "1.5b fused" "" -m $M15 -p 0 -n 64 -r 2
  bench "1.5b NO_FUSE" "MINFER_CUDA_NO_FUSE=1" -m $M15 -p 0 -n 64 -r 2
}
wait_file $M7 && {
  bench "7b fused" "" -m $M7 -p 0 -n 64 -r 2
  bench "7b NO_FUSE" "MINFER_CUDA_NO_FUSE=1" -m $M7 -p 0 -n 64 -r 2
}
wait_file $M8 && {
  bench "qwen3-8b fused" "" -m $M8 -p 0 -n 64 -r 2
  bench "qwen3-8b NO_FUSE" "MINFER_CUDA_NO_FUSE=1" -m $M8 -p 0 -n 64 -r 2
}
[ -f $M7 ] && bench "7b fused pp512+tg128" "" -m $M7 -p 512 -n 128 -r 3
# per-op time with every node synchronised (no graphs): where a pass goes
if [ -f $M15 ] && [ "$(left)" -gt 20 ]; then
  MINFER_PROFILE=1 timeout $(( $(left) - 5 )) ./bin/minfer bench --backend cuda -m $M15 -p 0 \
    -n 16 -r 1 > "$OUT/profile.log" 2>&1
  grep -A14 "profile" "$OUT/profile.log" | cut -c1-160 | head -40
fi
cat "$OUT/synth.log"
kill $SYN 2>/dev/null
echo "all done at $(( $(date +%s) - T0 )) s"
