#!/usr/bin/env bash
# The checks and measurements of GPU code written without a device, in one call on the next GPU
# machine with 2 or 4 GPUs (nvidia-h100-x4: 64 cores build both revisions in about 3 minutes, then
# the tests and the benchmarks run side by side on separate GPUs). Each item names what it
# settles; drop an item once its code has passed and its numbers are recorded under
# bench/results/.
#   1. test_cuda's tests for MAC's one-call attention (PagedDecodeArgs::q_rows: the parity
#      cases with q_rows, GpuEngine.Mac*, CudaMac*), with the rest of GpuSparsePolicy, which
#      the last run's timeout cut (GPUs 0-1; TESTS overrides the filter).
#   2. Whole 8B decode steps, this build against the previous revision (build-legacy/tree),
#      interleaved on GPU 2 (e2e-new-*.json, e2e-old-*.json): mac at forced hit rates 0-100%
#      against dense, RetroAttention at w = 2, 4, 8 against quest; at 32K, batch 1 and 8.
#   3. The same for mac at 128K, batch 1, on GPU 3 (e2e128-*.json).
# Usage (from the repository root, after scripts/device-tree.sh hide, carrying .devdeps and
# build-legacy/tree):
#   mkdir -p build-legacy/tree && git archive REV CMakeLists.txt CMakePresets.json cmake src include \
#     tools bench/cs_recall.cpp bench/attend_scatter.cpp | tar -x -C build-legacy/tree
#   bash scripts/gpu-pending.sh $OUT
set -uo pipefail
OUT=${1:?usage: gpu-pending.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
step() { echo; echo "=== $* ($(date +%T))"; }
LOGS=/tmp/gpu-pending
rm -rf $LOGS && mkdir -p $LOGS

step "build (this revision, then the previous one)"
ENGINE_ONLY=1 BUILD_ONLY=1 bash scripts/gpu-check.sh $LOGS/build > $LOGS/build.log 2>&1 ||
  { tail -30 $LOGS/build.log; exit 1; }
if [ -d build-legacy/tree ]; then
  ln -sfn "$(pwd)/models" build-legacy/tree/models
  cmake -S build-legacy/tree -B build-gpu-legacy -G Ninja -DCMAKE_PREFIX_PATH=/tmp/devroot/usr \
    -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DSKIM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DSKIM_BLAS=OFF \
    -DSKIM_ICU=OFF -DSKIM_PNG=OFF -DSKIM_SERVER=OFF -DSKIM_TESTS=OFF -DSKIM_NATIVE=OFF > $LOGS/legacy-cmake.log 2>&1 &&
    cmake --build build-gpu-legacy -j "$(nproc)" --target skim 2>&1 | grep -E "error|FAILED" | head -20
fi
[ -x build-gpu-legacy/skim ] || echo "no previous revision: its comparisons are skipped"

# 4 GPUs: tests on 0-1, 32K on 2, 128K on 3; 2 GPUs: tests then 128K on 0, 32K on 1.
if [ "$(nvidia-smi -L | wc -l)" -ge 4 ]; then G_TESTS=0,1 G_32=2 G_128=3; else G_TESTS=0 G_32=1 G_128=0; fi
step "1: tests (GPUs $G_TESTS) | 2: decode steps at 32K (GPU $G_32) | 3: mac at 128K (GPU $G_128)"
TESTS=${TESTS:-'Policies/GpuSparsePolicy.*:CudaPagedDecodeAttention.*:GpuEngine.Mac*:GpuEngine.Retro*:CudaMac*:GpuEngine.Mixed*:GpuEngine.Dense*:DecodePlanner.*'}
(CUDA_VISIBLE_DEVICES=$G_TESTS timeout 300 build-gpu/tests/test_cuda --gtest_filter="$TESTS" > $LOGS/test_cuda.log 2>&1
 echo $? > $LOGS/test_cuda.rc) &
tests_pid=$!
e2e() {  # BINARY JSON ARGS...
  local bin=$1 json=$2
  shift 2
  timeout 200 "$bin" bench --e2e-only --no-prefill --no-dense-fallback --steps 32 --sparse-keep 0.1 --mac "$@" \
    --json "$OUT/$json" | grep -E "8B|^\| random" | grep -v ";"
}
(
  export CUDA_VISIBLE_DEVICES=$G_32
  for round in 1 2; do
    echo "-- 32K, this build, round $round"
    e2e build-gpu/skim e2e-new-$round.json --retro --contexts 32768 --batches 1,8
    if [ -x build-gpu-legacy/skim ]; then
      echo "-- 32K, previous revision, round $round"
      e2e build-gpu-legacy/skim e2e-old-$round.json --retro --contexts 32768 --batches 1,8
    fi
  done
) > $LOGS/decode.log 2>&1 &
decode_pid=$!
(
  export CUDA_VISIBLE_DEVICES=$G_128
  [ "$G_128" = 0 ] && while [ ! -e $LOGS/test_cuda.rc ]; do sleep 2; done  # after the tests
  echo "-- 128K, this build"; e2e build-gpu/skim e2e128-new.json --contexts 131072 --batches 1
  [ -x build-gpu-legacy/skim ] && { echo "-- 128K, previous revision"; e2e build-gpu-legacy/skim e2e128-old.json --contexts 131072 --batches 1; }
) > $LOGS/decode128.log 2>&1 &
mac128_pid=$!

wait $decode_pid $mac128_pid
wait $tests_pid
rc=$(cat $LOGS/test_cuda.rc 2>/dev/null || echo 1)
echo "test_cuda rc $rc (124: timed out)"
grep -vE '^\[ +(RUN|OK) +\]' $LOGS/test_cuda.log | grep -E "FAILED|PASSED|\[ (sparse|mac|retro|mixed)" | head -40
if [ "$rc" != 0 ]; then
  status=1
  grep -B2 -A8 -E "Failure|exception" $LOGS/test_cuda.log | head -80
fi
cat $LOGS/decode.log $LOGS/decode128.log
tar -czf "$OUT/logs.tar.gz" -C $LOGS test_cuda.log decode.log decode128.log 2>/dev/null
echo "gpu-pending status $status"
exit $status
