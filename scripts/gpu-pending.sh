#!/usr/bin/env bash
# The checks and measurements of GPU code written without a device, in one call on the next GPU
# machine with 2 or 4 GPUs (nvidia-h100-x4: 64 cores build both revisions in about 3 minutes, then
# the tests and the benchmarks run side by side on separate GPUs). Each item names what it
# settles; drop an item once its code has passed and its numbers are recorded under
# bench/results/.
#   1. RetroAttention's plan and merge kernels (the newest rows' mask update a thread per list
#      entry, the page index map once per step, one merge launch over w entries) and MAC's plan
#      with the step's index map: CudaRetro*, GpuEngine.Retro*, GpuEngine.Mac*, CudaMac*
#      (TESTS overrides).
#   2. Retro at w = 2, 4, 8 against quest, this build against the previous revision
#      (build-legacy/tree), interleaved on one GPU: 8B shape, 32K, b1 and b8 (retro-*.json).
#   3. ncu's per-kernel breakdown of quest and quest+retro:w=2 (ncu.csv; bench/kernel_breakdown.py).
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

if [ "$(nvidia-smi -L | wc -l)" -ge 4 ]; then G_TESTS=0,1 G_BENCH=2 G_NCU=3; else G_TESTS=0 G_BENCH=1 G_NCU=0; fi
step "1: tests (GPUs $G_TESTS), then ncu there | 2: retro against the previous revision (GPU $G_BENCH)"
TESTS=${TESTS:-'CudaRetro*:GpuEngine.Retro*:GpuEngine.Mac*:CudaMac*'}
(CUDA_VISIBLE_DEVICES=$G_TESTS timeout 200 build-gpu/tests/test_cuda --gtest_filter="$TESTS" > $LOGS/test_cuda.log 2>&1
 echo $? > $LOGS/test_cuda.rc
 export CUDA_VISIBLE_DEVICES=${G_NCU}
 timeout 240 ncu --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none \
   build-gpu/skim bench --e2e-only --no-prefill --8b-only --no-dense-fallback --sparse-keep 0.1 --contexts 32768 \
   --batches 1 --steps 1 --e2e-policy none --retro --retro-windows 2 > $LOGS/ncu.csv 2> $LOGS/ncu.err
 echo "ncu rc $?" >> $LOGS/ncu.err) &
tests_pid=$!
retro() {  # BINARY JSON
  timeout 150 "$1" bench --e2e-only --no-prefill --8b-only --steps 32 --sparse-keep 0.1 --e2e-policy none --retro \
    --contexts 32768 --batches 1,8 --json "$OUT/$2" | grep -E "8B"
}
(
  export CUDA_VISIBLE_DEVICES=$G_BENCH
  for round in 1 2; do
    echo "-- this build, round $round"; retro build-gpu/skim retro-new-$round.json
    [ -x build-gpu-legacy/skim ] && { echo "-- previous revision, round $round"; retro build-gpu-legacy/skim retro-old-$round.json; }
  done
) > $LOGS/decode.log 2>&1 &
decode_pid=$!

wait $decode_pid
wait $tests_pid
rc=$(cat $LOGS/test_cuda.rc 2>/dev/null || echo 1)
echo "test_cuda rc $rc (124: timed out)"
grep -vE '^\[ +(RUN|OK) +\]' $LOGS/test_cuda.log | grep -E "FAILED|PASSED|\[ (mac|retro)" | head -40
if [ "$rc" != 0 ]; then
  status=1
  grep -B2 -A8 -E "Failure|exception" $LOGS/test_cuda.log | head -80
fi
cat $LOGS/decode.log; tail -3 $LOGS/ncu.err; wc -l $LOGS/ncu.csv
tar -czf "$OUT/logs.tar.gz" -C $LOGS test_cuda.log decode.log ncu.csv ncu.err 2>/dev/null
echo "gpu-pending status $status"
exit $status
