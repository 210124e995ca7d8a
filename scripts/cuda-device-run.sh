#!/bin/bash
# cuda-device-run.sh — one run of the CUDA plugin on a GPU machine: build,
# optionally the CUDA suites, then `minfer bench` on synthetic models, and
# optionally an Nsight Compute per-kernel table of a decode. With several
# source trees it builds each and alternates their benches in one run (the
# side-by-side comparison docs/PERF.md asks for on shared machines).
#
# Run from the repository root on the GPU machine, $OUT set. The machine
# has no Debian -dev packages: .debs/ holds Check, PCRE2, utf8proc, cJSON
# and pkgconf .debs (apt-get download here), unpacked into /tmp/deps;
# .fixtures/models/ holds the fixture files (fixture-A*, and fixture-*-dev*
# for test-fixture-families) for the fixture suites. fixture-A* and every
# fixture-*-dev* together pass the 64 MiB a device call carries; a run
# without fixture-qwen3moe-dev* fails those three families cases only.
#
# Environment:
#   SRC     source tars, space separated; the first is "A", then "B", ...
#           (default: this working tree). Make them compressed (git archive
#           --format=tar.gz BRANCH -o .device/BRANCH.tar, about 0.9 MB a tree
#           against 4 MB plain): the working tree, the tars, .debs and
#           fixture-A* must pass together under the call's 64 MiB.
#   TESTS=1 build and run test-cuda-plugin, -ops, -e2e and the fixture
#           suites (Qwen2 fixture A, the model families) on the first tree;
#           TESTS=ops: runs test-backend-ops only, its CUDA cases only
#           (MINFER_OPS_ONLY=cuda; a short run for kernel changes;
#           test-cuda-e2e, test-fixture (which it runs) and
#           minfer-cuda-bench are built too),
#           and test-cuda-e2e before it with E2E=1 (capture-time fusion);
#           TESTS=e2e: test-cuda-e2e alone (fusion and replay changes)
#   SYNTH_THREADS  CPU threads of `minfer synth` (default 4)
#   OPS_TIMEOUT    seconds test-backend-ops may take (TESTS=ops: 180, TESTS=1: 300;
#           a fresh machine synthesizes the models beside it)
#   MODELS  "arch,shape,type,name ..." made by `minfer synth` into /tmp
#           (default: qwen2.5-1.5b and qwen3-8b Q4_K_M)
#   BENCH   `minfer bench` arguments (default: -p 0 -n 128 -r 2); each test is
#           summarized as its median sample (min..max), the full rows (jsonl)
#           go to benchX.log
#   REPS    bench rounds over all trees and models (default 2)
#   NCU     model names to profile: per-kernel times of a decode with ncu,
#           one step of it as a table (scripts/ncu-step-table.py) in
#           ncu-NAME.md and on stdout
#   NCU_BENCH  the profiled `minfer bench` arguments (default: -p 0 -n 48
#           -r 1); NCU_SKIP, NCU_COUNT the launches skipped and profiled
#           (4000, 700): e.g. "--parallel 16 -p 16 -n 24 -r 1" for a step
#           of 16 sequences
#   MATVEC=1  also `minfer-cuda-bench --matvec --quick` of every tree, one
#           after the other (the nt = 1 products with programmatic dependent
#           launch on, off), into matvec$v.log
#   MATVEC_TPR=1  also `minfer-cuda-bench --matvec-tpr --quick` of the first
#           tree (the nt = 1 products and the Q/K/V group at each forced
#           thread count a row group), into matvec-tpr.log
#   QKV=1   also `minfer-cuda-bench --qkv --quick` of the first tree (the
#           7B's Q, K and V products as one launch and as three; on a tree
#           with the norm folds, those against the norm's launch, and the
#           gate/up pair's the same), into qkv.log
#   GEMMWG=1  also `minfer-cuda-bench --gemmwg` of every tree, one after the
#           other (every prefill GEMM kernel forced in turn on the 7B
#           shapes); GEMMWG="B C": of those trees only
#   NCU_GEMM  "K N M BN": Nsight Compute's stall and scheduler sections
#           for one `minfer-cuda-bench --gemm-one K N M BN` launch of the
#           first tree (e.g. "3584 18944 512 1128": gemm-wg.cu's 128-token
#           tile on the 7B ffn up product) for each weight type of
#           NCU_GEMM_TYPES (default q4_K), into ncu-gemm-TYPE.txt; with
#           NCU_GEMM_SOURCE=1 also the stall samples of every SASS
#           instruction (SourceCounters) as CSV, ncu-gemm-TYPE-sass.csv
#           (the table that found gemm-wg.cu's barrier waits in session 32)
#   KEEP_GOING=1  a failed TESTS=ops/e2e suite still reports failure (exit
#           status 1) but the benches run: a counting check that fails
#           should not cost the run its measurements
#   MEMCHECK=1  compute-sanitizer's memcheck over test-backend-ops of the
#           first tree (built with TESTS), into memcheck.log
#           (MEMCHECK_TIMEOUT seconds, default 400): with TESTS=ops in place
#           of the plain op suite (its verdict is the suite's), otherwise
#           after the benches
#   PARALLEL  model names for `minfer bench` with PARALLEL_BENCH arguments
#           (default: --parallel 16,64 -p 128 -n 128 -r 1), trees alternated,
#           REPS rounds
#
# Only the suites' verdicts and failures go to stdout (the transcript keeps
# its last 12,000 characters); the per-family NMSE lines are in ops.log.
# Logs past the 8 files a call brings back come packed in $OUT/run.tar.gz.
set -o pipefail
T0=$(date +%s)
since() { echo $(( $(date +%s) - T0 )); }
OUT=${OUT:?set OUT}
# on EXIT, so a run cut short by its time limit still brings its logs back
pack_out() {
  local n
  n=$(find "$OUT" -maxdepth 1 -type f | wc -l)
  [ "$n" -gt 8 ] || return 0
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name run.tar.gz -printf '%P\n' |
    tar -czf run.tar.gz -T - --remove-files) && echo "$n files of \$OUT packed into run.tar.gz"
}
trap pack_out EXIT
D=/tmp/deps
mkdir -p $D
for f in .debs/*.deb; do dpkg -x "$f" $D; done
# libmicrohttpd.pc names gnutls as a private requirement, whose -dev
# package the machine lacks; pkgconf refuses the module over it although a
# shared link needs only -lmicrohttpd (libgnutls.so.30 itself is resolved
# at run time; --allow-shlib-undefined below keeps the link from needing it)
sed -i '/^Requires.private/d' $D/usr/lib/x86_64-linux-gnu/pkgconfig/libmicrohttpd.pc
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
export PKG_CONFIG_SYSROOT_DIR=$D
export PKG_CONFIG_LIBDIR=$D/usr/lib/x86_64-linux-gnu/pkgconfig:$D/usr/share/pkgconfig
PKGC=$(command -v pkg-config || echo $D/usr/bin/pkgconf)
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
NCU_BIN=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.log 2>&1
cat $OUT/gpu.log

# ---- trees and builds ----
names=(A B C D E F G H)
trees=()
if [ -z "$SRC" ]; then
  trees=("$PWD")
else
  i=0
  for tar in $SRC; do
    dir=/tmp/src${names[$i]}
    # a fresh tree and build: on a machine still warm from an earlier call,
    # the tar's old file times would leave that call's objects in place
    rm -rf $dir /tmp/b${names[$i]}
    mkdir -p $dir && tar -xf "$tar" -C $dir || { echo "cannot unpack $tar"; exit 1; }
    trees+=("$dir")
    i=$((i + 1))
  done
fi
n=${#trees[@]}
jobs_each=$((16 / n > 1 ? 16 / n : 1))
for i in "${!trees[@]}"; do
  v=${names[$i]}
  tests=OFF; extra=""
  if [ "$i" = 0 ] && [ -n "$TESTS" ]; then
    tests=ON; extra="test-cuda-plugin test-backend-ops test-cuda-e2e test-cuda-faults test-fixture test-fixture-families"
    [ "$TESTS" = ops ] && extra="test-backend-ops test-cuda-e2e test-fixture minfer-cuda-bench"
    [ "$TESTS" = e2e ] && extra="test-cuda-e2e test-fixture"
  fi
  [ -n "$GEMMWG$NCU_GEMM$MATVEC$MATVEC_TPR$QKV" ] && extra="$extra minfer-cuda-bench"
  ( cmake -S "${trees[$i]}" -B /tmp/b$v -G Ninja -DMINFER_CUDA=ON -DMINFER_CUDA_ARCHS=90 \
      -DMINFER_TESTS=$tests -DCMAKE_CUDA_COMPILER="$NVCC" -DPKG_CONFIG_EXECUTABLE="$PKGC" \
      -DMINFER_FIXTURES_DIR="$PWD/.fixtures" -DCMAKE_BUILD_RPATH=$D/usr/lib/x86_64-linux-gnu \
      -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined \
      > $OUT/build$v.log 2>&1 &&
    ninja -C /tmp/b$v -j$jobs_each minfer-cuda minfer-cpu minfer-cli $extra >> $OUT/build$v.log 2>&1 ||
    { echo "build $v failed:"; grep -E "error|FAILED" $OUT/build$v.log | head -20; } ) &
done
wait
for i in "${!trees[@]}"; do [ -x /tmp/b${names[$i]}/bin/minfer ] || exit 1; done
echo "builds done at $(since) s"

# ---- models (on the CPU, while the suites use the GPU) ----
MODELS=${MODELS:-"qwen2,qwen2.5-1.5b,Q4_K_M,q15 qwen3,qwen3-8b,Q4_K_M,q3"}
for s in $MODELS; do
  IFS=, read -r arch shape type name <<< "$s"
  [ -f /tmp/$name.gguf ] || /tmp/bA/bin/minfer synth --arch $arch --shape $shape --type $type \
    --threads ${SYNTH_THREADS:-4} -o /tmp/$name.gguf > $OUT/synth-$name.log 2>&1 &
done

# ---- suites ----
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
memcheck() {
  CK_FORK=no timeout ${MEMCHECK_TIMEOUT:-400} $SAN --tool memcheck /tmp/bA/bin/test-backend-ops \
    > $OUT/memcheck.log 2>&1
  local r=$?
  echo "memcheck rc $r at $(since) s: $(grep -E '^[0-9]+%|ERROR SUMMARY' $OUT/memcheck.log | tr '\n' ' ')"
  return $r
}
if [ "$TESTS" = ops ] || [ "$TESTS" = e2e ]; then
  rc=0
  if [ -n "$E2E" ] || [ "$TESTS" = e2e ]; then
    timeout 300 /tmp/bA/bin/test-cuda-e2e > $OUT/e2e.log 2>&1
    rc=$?
    echo "e2e rc $rc: $(grep -E '^[0-9]+%' $OUT/e2e.log | tr '\n' ' ')"
    grep -E ":[EF]:|graph replay|equals cpu" $OUT/e2e.log | cut -c1-300 | head -20
  fi
  r=0
  if [ "$TESTS" = e2e ]; then
    :
  elif [ -n "$MEMCHECK" ]; then
    memcheck; r=$?; cp $OUT/memcheck.log $OUT/ops.log; MEMCHECK=
  else
    MINFER_OPS_ONLY=cuda timeout ${OPS_TIMEOUT:-180} /tmp/bA/bin/test-backend-ops > $OUT/ops.log 2>&1
    r=$?
  fi
  [ "$TESTS" = e2e ] || echo "ops rc $r: $(grep -E '^[0-9]+%' $OUT/ops.log)"
  [ "$TESTS" = e2e ] || grep -E ":[EF]:" $OUT/ops.log | cut -c1-200
  [ $rc = 0 ] && rc=$r
  echo "suites done at $(since) s"
  # a kernel that is wrong or hangs would only burn the device time left
  if [ $rc != 0 ] && [ -z "$KEEP_GOING" ]; then echo "op suite failed: no benches"; exit 1; fi
  [ $rc = 0 ] || { echo "op suite failed: benches anyway (KEEP_GOING)"; SUITE_FAILED=1; }
elif [ -n "$TESTS" ]; then
  B=/tmp/bA/bin
  $B/test-cuda-plugin > $OUT/plugin.log 2>&1; echo "plugin rc $?: $(grep -E '^[0-9]+%' $OUT/plugin.log)"
  timeout ${OPS_TIMEOUT:-300} $B/test-backend-ops > $OUT/ops.log 2>&1
  echo "ops rc $?: $(grep -E '^[0-9]+%' $OUT/ops.log)"
  grep -E ":[EF]:" $OUT/ops.log | cut -c1-200
  timeout 300 $B/test-cuda-e2e > $OUT/e2e.log 2>&1
  echo "e2e rc $?: $(grep -E '^[0-9]+%' $OUT/e2e.log | tr '\n' ' ')"
  grep -E ":[EF]:|graph replay|equals cpu|fixture" $OUT/e2e.log | cut -c1-300 | head -40
  timeout 150 $B/test-cuda-faults > $OUT/faults.log 2>&1
  echo "faults rc $?: $(grep -E '^[0-9]+%' $OUT/faults.log)"
  grep -E "sites|leak|:[EF]:" $OUT/faults.log | cut -c1-300 | head -20
  MINFER_TEST_BACKEND=cuda timeout 120 $B/test-fixture > $OUT/fixture.log 2>&1
  echo "fixture on cuda rc $?: $(grep -E '^[0-9]+%|SKIPPED' $OUT/fixture.log | tr '\n' ' ')"
  MINFER_TEST_BACKEND=cuda timeout 120 $B/test-fixture-families > $OUT/families.log 2>&1
  echo "families on cuda rc $?: $(grep -E '^[0-9]+%|SKIPPED|max \|logit' $OUT/families.log | tr '\n' ' ')"
  echo "suites done at $(since) s"
fi
wait
echo "models ready at $(since) s"

# ---- benches, alternating trees ----
# odd rounds run the trees A, B, ..., even rounds in reverse: whichever tree
# runs first in a round measured 0.5-1.5% ahead on paths it did not change
# one jsonl row per test -> "pp512 median (min..max) n=5;": the median,
# since the first timed repetitions of a graphed prefill also capture; a
# warning (an aborted capture turns graphs off) is shown beside the rows
bench_summary() {
  python3 -c '
import json, sys
for line in sys.stdin:
    if "warn" in line:
        print(" [%s]" % line.strip()[:200], end="")
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    x = sorted(r["samples_ts"])
    n = len(x)
    med = x[n // 2] if n % 2 else (x[n // 2 - 1] + x[n // 2]) / 2
    print(" %s %.1f (%.1f..%.1f) n=%d;" % (r["test"], med, x[0], x[-1], n), end="")
'
}
order() { if [ $(($1 % 2)) = 1 ]; then echo "${!trees[@]}"; else echo "${!trees[@]}" | tr ' ' '\n' | tac | tr '\n' ' '; fi; }
for rep in $(seq ${REPS:-2}); do
  for s in $MODELS; do
    IFS=, read -r arch shape type name <<< "$s"
    for i in $(order $rep); do
      v=${names[$i]}
      r=$(timeout 120 /tmp/b$v/bin/minfer bench --backend cuda -m /tmp/$name.gguf ${BENCH:--p 0 -n 128 -r 2} \
          -o jsonl 2>&1 | tee -a $OUT/bench$v.log | bench_summary)
      echo "$v $name:$r"
    done
  done
done
for rep in $(seq ${REPS:-2}); do
  for name in $PARALLEL; do
    for i in $(order $rep); do
      v=${names[$i]}
      echo "$v $name parallel:"
      timeout 200 /tmp/b$v/bin/minfer bench --backend cuda -m /tmp/$name.gguf \
        ${PARALLEL_BENCH:---parallel 16,64 -p 128 -n 128 -r 1} 2>&1 | tee -a $OUT/bench$v.log |
        grep '^| [a-z]' | grep -v '| model' | awk -F'|' '{print "B", $5, "S_PP", $8, "S_TG", $10}'
    done
  done
done
echo "benches done at $(since) s"

# ---- matrix-vector products alone ----
if [ -n "$MATVEC" ]; then
  for i in "${!trees[@]}"; do
    v=${names[$i]}
    timeout 150 /tmp/b$v/bin/minfer-cuda-bench --matvec --quick > $OUT/matvec$v.log 2>&1
    echo "matvec bench $v rc $?:"
    grep -E "^matvec|^programmatic" $OUT/matvec$v.log | cut -c1-110
  done
fi

# ---- the nt = 1 products at each thread count a row group (the first tree) ----
if [ -n "$MATVEC_TPR" ]; then
  timeout 300 /tmp/bA/bin/minfer-cuda-bench --matvec-tpr --quick > $OUT/matvec-tpr.log 2>&1
  echo "matvec-tpr bench rc $?:"
  grep -E "^matvec|^qkv|^--" $OUT/matvec-tpr.log | grep -v quant | cut -c7-100
fi

# ---- the Q/K/V products alone (the first tree) ----
if [ -n "$QKV" ]; then
  timeout 240 /tmp/bA/bin/minfer-cuda-bench --qkv --quick > $OUT/qkv.log 2>&1
  echo "qkv bench rc $?:"
  grep -E "^(qkv|glu)" $OUT/qkv.log
fi

# ---- prefill GEMM kernels alone ----
if [ -n "$GEMMWG" ]; then
  for i in "${!trees[@]}"; do
    v=${names[$i]}
    [ "$GEMMWG" = 1 ] || [[ " $GEMMWG " == *" $v "* ]] || continue
    timeout 240 /tmp/b$v/bin/minfer-cuda-bench --gemmwg > $OUT/gemmwg$v.log 2>&1
    echo "gemmwg bench $v rc $? at $(since) s"
  done
fi

# ---- one GEMM launch under Nsight Compute ----
if [ -n "$NCU_GEMM" ]; then
  for t in ${NCU_GEMM_TYPES:-q4_K}; do
    src=""
    [ -n "$NCU_GEMM_SOURCE" ] && src="--section SourceCounters"
    # shellcheck disable=SC2086  # K N M BN are four words; $src an option and its value, or none
    timeout 150 $NCU_BIN --section SpeedOfLight --section Occupancy --section SchedulerStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis $src --launch-skip 3 \
      --launch-count 1 -k 'regex:gemm_(wg|ss|q|i8|f16)' -f -o /tmp/ncu-gemm-$t \
      /tmp/bA/bin/minfer-cuda-bench --gemm-type $t --gemm-one $NCU_GEMM > $OUT/ncu-gemm-$t.txt 2>&1
    echo "ncu gemm $t rc $? at $(since) s"
    $NCU_BIN --import /tmp/ncu-gemm-$t.ncu-rep --page details >> $OUT/ncu-gemm-$t.txt 2>&1
    [ -n "$NCU_GEMM_SOURCE" ] && $NCU_BIN --import /tmp/ncu-gemm-$t.ncu-rep --page source --csv \
      --print-source sass > $OUT/ncu-gemm-$t-sass.csv 2>&1
  done
fi

# ---- memory errors of the op suite ----
if [ -n "$MEMCHECK" ]; then
  memcheck
fi

# ---- per-kernel decode profile ----
for name in $NCU; do
  timeout 150 $NCU_BIN --clock-control none --cache-control none --csv --page raw \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread \
    --launch-skip ${NCU_SKIP:-4000} --launch-count ${NCU_COUNT:-700} \
    /tmp/bA/bin/minfer bench --backend cuda -m /tmp/$name.gguf ${NCU_BENCH:--p 0 -n 48 -r 1} \
    > $OUT/ncu-$name.csv 2> $OUT/ncu-$name.err
  echo "ncu $name rc $? at $(since) s"
  python3 scripts/ncu-step-table.py $OUT/ncu-$name.csv | tee $OUT/ncu-$name.md
done
# a suite that failed under KEEP_GOING fails the run after its measurements
[ -z "$SUITE_FAILED" ] || exit 1
