#!/bin/bash
# device-tg.sh — one short GPU-machine run for the CUDA plugin, built from a
# committed state: the source tree comes from a `git archive` tar (so other
# people's uncommitted edits in a shared checkout do not travel into the
# build), the CUDA suites run while four models are synthesised on the
# CPU, then tg128 benches (fused; unfused with MINFER_CUDA_NO_FUSE=1 and a
# per-op profile of the qwen3-8b decode when time is left).
# Usage (repository root, $OUT set; deps in .debs/, fixtures in .fixtures/):
#   git archive HEAD -o build-X/src.tar   # on the dev box, then carry it
#   bash backends/cuda/device-tg.sh build-X/src.tar [BUDGET_S]
set -o pipefail
T0=$(date +%s)
TAR=${1:?usage: device-tg.sh SRC_TAR [BUDGET_S]}
BUDGET=${2:-280}
OUT=${OUT:-/tmp/out}
ROOT=$PWD
mkdir -p "$OUT" /tmp/deps /tmp/src
left() { echo $((BUDGET - ($(date +%s) - T0))); }
for f in .debs/*.deb; do dpkg -x "$f" /tmp/deps; done
tar -xf "$TAR" -C /tmp/src || { echo "cannot unpack $TAR"; exit 1; }
D=/tmp/deps
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
export PKG_CONFIG_SYSROOT_DIR=$D
export PKG_CONFIG_LIBDIR=$D/usr/lib/x86_64-linux-gnu/pkgconfig:$D/usr/share/pkgconfig
PKGC=$(command -v pkg-config || echo $D/usr/bin/pkgconf)
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
B=/tmp/b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.log" 2>&1
cat "$OUT/gpu.log"
cmake -S /tmp/src -B $B -G Ninja -DMINFER_CUDA=ON -DMINFER_CUDA_ARCHS=90 \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DPKG_CONFIG_EXECUTABLE="$PKGC" \
  -DMINFER_FIXTURES_DIR="$ROOT/.fixtures" \
  -DCMAKE_BUILD_RPATH=$D/usr/lib/x86_64-linux-gnu > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
ninja -C $B -j16 minfer-cuda minfer-cpu minfer-cli test-fixture test-cuda-e2e test-cuda-plugin \
  test-cuda-ops >> "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
cd $B
M8=/tmp/q3-8b-q4km.gguf M7Q8=/tmp/q25-7b-q8.gguf M7=/tmp/q25-7b-q4km.gguf M15=/tmp/q25-1.5b-q4km.gguf
syn() { # arch shape type file
  ./bin/minfer synth --arch "$1" --shape "$2" --type "$3" --threads 7 -o "$4.part" &&
    mv "$4.part" "$4" && echo "synth $2 $3 done at $(( $(date +%s) - T0 )) s"
}
# two chains of models on the CPU while the GPU runs the suites
( syn qwen3 qwen3-8b Q4_K_M $M8 && syn qwen2 qwen2.5-1.5b Q4_K_M $M15 ) > "$OUT/synth.log" 2>&1 &
SA=$!
( syn qwen2 qwen2.5-7b Q8_0 $M7Q8 && syn qwen2 qwen2.5-7b Q4_K_M $M7 ) > "$OUT/synth2.log" 2>&1 &
SB=$!
{
  echo "== cuda-plugin"; timeout 40 ./bin/test-cuda-plugin 2>&1
  echo "== cuda-ops"; timeout 60 ./bin/test-cuda-ops 2>&1
  echo "== cuda-e2e"; timeout $(( $(left) - 60 )) ./bin/test-cuda-e2e 2>&1
} > "$OUT/tests.log" 2>&1
grep -E "^== |^[0-9]+%|graph replay|:F:|:E:|Timeout|equals cpu" "$OUT/tests.log" | cut -c1-300 | head -40
echo "tests done at $(( $(date +%s) - T0 )) s"
wait_file() { # file: waits for a synth chain to write it (or for both to end)
  while [ ! -f "$1" ] && { kill -0 $SA 2>/dev/null || kill -0 $SB 2>/dev/null; } &&
    [ "$(left)" -gt 15 ]; do sleep 1; done
  [ -f "$1" ]
}
bench() { # label, env, args...
  local label=$1 env=$2; shift 2
  if [ "$(left)" -lt 15 ]; then echo "skip $label: $(left) s left"; return; fi
  echo "== $label ($(left) s left)" >> "$OUT/bench.log"
  env $env timeout $(( $(left) - 5 )) ./bin/minfer bench --backend cuda "$@" >> "$OUT/bench.log" 2>&1
  echo "$label: $(grep "^| [a-z0-9]" "$OUT/bench.log" | grep -v "^| model" | tail -1)"
}
for m in $M8 $M7Q8 $M7 $M15; do
  wait_file $m && bench "$(basename $m .gguf) fused" "" -m $m -p 0 -n 128 -r 2
done
for m in $M8 $M7Q8; do
  [ -f $m ] && bench "$(basename $m .gguf) NO_FUSE" "MINFER_CUDA_NO_FUSE=1" -m $m -p 0 -n 128 -r 2
done
# per-op time with every node synchronised (no graphs): where a qwen3 pass goes
if [ -f $M8 ] && [ "$(left)" -gt 25 ]; then
  MINFER_PROFILE=1 timeout $(( $(left) - 5 )) ./bin/minfer bench --backend cuda -m $M8 -p 0 \
    -n 16 -r 1 > "$OUT/profile.log" 2>&1
  grep -A16 "profile" "$OUT/profile.log" | cut -c1-160 | head -40
fi
cat "$OUT/synth.log" "$OUT/synth2.log"
kill $SA $SB 2>/dev/null
echo "all done at $(( $(date +%s) - T0 )) s"
