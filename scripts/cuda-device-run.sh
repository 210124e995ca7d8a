#!/bin/bash
# cuda-device-run.sh — one run on a GPU machine for the CUDA plugin's end to
# end work: build (deps unpacked from .debs/, fixtures from .fixtures/),
# the CUDA test suites (cuda-e2e runs the fixture suite on CUDA too), then
# `minfer bench --backend cuda` on synthetic models, within a time budget.
# Usage (repository root, $OUT set): scripts/cuda-device-run.sh [BUDGET_S]
# Logs go to $OUT/*.log. Needs cmake, ninja and the CUDA toolkit.
set -o pipefail
T0=$(date +%s)
BUDGET=${1:-520}
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
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.log" 2>&1
cmake -S . -B $B -G Ninja -DMINFER_CUDA=ON -DMINFER_CUDA_ARCHS=90 \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DPKG_CONFIG_EXECUTABLE="$PKGC" \
  -DMINFER_FIXTURES_DIR="$PWD/.fixtures" \
  -DCMAKE_BUILD_RPATH=$D/usr/lib/x86_64-linux-gnu > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
ninja -C $B -j16 minfer-cuda minfer-cpu minfer-cli test-fixture test-cuda-e2e test-cuda-plugin test-cuda-ops \
  >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
cd $B
{
  echo "== cuda-plugin"; timeout 60 ./bin/test-cuda-plugin 2>&1
  echo "== cuda-ops"; timeout 90 ./bin/test-cuda-ops 2>&1
  echo "== cuda-e2e"; timeout 180 ./bin/test-cuda-e2e 2>&1
} > "$OUT/tests.log" 2>&1
grep -E "^== |^[0-9]+%|SKIP|graph replay|:F:|:E:|equals cpu" "$OUT/tests.log" | cut -c1-300 | head -60
echo "tests done at $(( $(date +%s) - T0 )) s"
# Synthetic models are written once (minfer synth) and benched with -m.
synth() { # file, min seconds left, arch, shape, type
  local f=$1 need=$2
  [ -f "$f" ] && return 0
  if [ "$(left)" -lt "$need" ]; then echo "skip synth $f: $(left) s left"; return 1; fi
  local t=$(date +%s)
  timeout $(( $(left) - 10 )) ./bin/minfer synth --arch "$3" --shape "$4" --type "$5" -o "$f" \
    >> "$OUT/bench.log" 2>&1 || { echo "synth $f failed"; return 1; }
  echo "synth $4 $5: $(( $(date +%s) - t )) s"
}
bench() { # label, min seconds left, args...
  local label=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "skip $label: $(left) s left"; return; fi
  echo "== $label ($(left) s left)" >> "$OUT/bench.log"
  timeout $(( $(left) - 5 )) ./bin/minfer bench --backend cuda "$@" >> "$OUT/bench.log" 2>&1
  grep "^| [a-z0-9]" "$OUT/bench.log" | grep -v "^| model" | tail -2
}
M15=/tmp/q25-1.5b-q4km.gguf M7=/tmp/q25-7b-q4km.gguf M7Q8=/tmp/q25-7b-q8.gguf M8=/tmp/q3-8b-q4km.gguf
synth $M15 60 qwen2 qwen2.5-1.5b Q4_K_M && bench "1.5b q4_K_M" 40 -m $M15 -p 512 -n 128 -r 3
synth $M7 120 qwen2 qwen2.5-7b Q4_K_M && bench "7b q4_K_M" 50 -m $M7 -p 512 -n 128 -r 3
[ -f $M15 ] && bench "1.5b q4_K_M no graphs" 30 -m $M15 -p 0 -n 128 -r 3 --no-graphs
[ -f $M7 ] && bench "7b q4_K_M no graphs" 30 -m $M7 -p 0 -n 128 -r 3 --no-graphs
synth $M7Q8 140 qwen2 qwen2.5-7b Q8_0 && bench "7b q8_0" 50 -m $M7Q8 -p 512 -n 128 -r 3
synth $M8 120 qwen3 qwen3-8b Q4_K_M && bench "qwen3-8b q4_K_M" 50 -m $M8 -p 512 -n 128 -r 3
[ -f $M7 ] && bench "7b q4_K_M pp2048" 40 -m $M7 -p 2048 -b 2048 -n 0 -r 2
echo "all done at $(( $(date +%s) - T0 )) s"
