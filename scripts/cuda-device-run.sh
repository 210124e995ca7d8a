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
ninja -C $B -j16 minfer-cuda minfer-cpu minfer-cli test-fixture test-cuda-e2e test-cuda-plugin \
  >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
cd $B
{
  echo "== cuda-plugin"; timeout 60 ./bin/test-cuda-plugin 2>&1 | tail -5
  echo "== cuda-e2e"; timeout 200 ./bin/test-cuda-e2e 2>&1 | tail -40
} > "$OUT/tests.log" 2>&1
grep -E "^[0-9]+%|Checks|SKIP|graph replay|failed|Failures|Errors" "$OUT/tests.log" | head -40
echo "tests done at $(( $(date +%s) - T0 )) s"
bench() { # label, min seconds left, args...
  local label=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "skip $label: $(left) s left"; return; fi
  echo "== $label ($(left) s left)" >> "$OUT/bench.log"
  timeout $(( $(left) - 10 )) ./bin/minfer bench --backend cuda "$@" >> "$OUT/bench.log" 2>&1
  grep "|" "$OUT/bench.log" | tail -2
}
bench "1.5b q4_K_M" 60 --arch qwen2 --shape qwen2.5-1.5b --type Q4_K_M -p 512 -n 128 -r 3
bench "7b q4_K_M" 90 --arch qwen2 --shape qwen2.5-7b --type Q4_K_M -p 512 -n 128 -r 3
bench "1.5b q4_K_M no graphs" 40 --arch qwen2 --shape qwen2.5-1.5b --type Q4_K_M -p 0 -n 128 -r 3 --no-graphs
bench "7b q8_0" 90 --arch qwen2 --shape qwen2.5-7b --type Q8_0 -p 512 -n 128 -r 3
bench "qwen3-8b q4_K_M" 90 --arch qwen3 --shape qwen3-8b --type Q4_K_M -p 512 -n 128 -r 3
bench "7b q4_K_M pp2048" 60 --arch qwen2 --shape qwen2.5-7b --type Q4_K_M -p 2048 -n 0 -r 2
echo "all done at $(( $(date +%s) - T0 )) s"
