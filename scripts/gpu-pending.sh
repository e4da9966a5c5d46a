#!/usr/bin/env bash
# The checks and measurements of GPU code written without a device, in one call on the next GPU
# machine with 4 GPUs (nvidia-h100-x4: 64 cores build both revisions in about 3 minutes, then
# the tests and the benchmarks run side by side on separate GPUs for about 6). Each item names
# what it settles; drop an item once its code has passed and its numbers are recorded under
# bench/results/.
#   1. test_cuda, whole (GPUs 0-1; the tensor-parallel tests take two): the selection, MAC,
#      Retro, token and CS kernels now launch as programmatic dependents (pdl_enter first);
#      DecodePlanner.DenseFallbackWhereSelectionCannotPay and
#      GpuEngine.DenseFallbackAttendsEveryKeyWhereSelectionCannotPay; the page cache test's
#      too-large steps (now surely refused); kWgmmaWs as the default prefill kernel (the golden
#      and rectification tests run it).
#   2. Whole 8B decode steps, this build against the previous revision (build-legacy/tree),
#      interleaved on GPU 2 (e2e-new-*.json, e2e-old-*.json): what PDL on the selection kernels
#      gains; then this build with the dense fallback (e2e-fallback.json): at 8K batch 1 no
#      sparse policy slower than dense.
#   3. 8B-shape prefill with kWgmmaWs against the previous revision's kWgmma, and transformers
#      + SDPA, on GPU 3 (prefill-*.json).
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
mkdir -p $LOGS

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

step "1: test_cuda (GPUs 0-1) | 2: decode steps (GPU 2) | 3: prefill (GPU 3)"
(CUDA_VISIBLE_DEVICES=0,1 timeout 420 build-gpu/tests/test_cuda > $LOGS/test_cuda.log 2>&1; echo $? > $LOGS/test_cuda.rc) &
tests_pid=$!
(
  export CUDA_VISIBLE_DEVICES=2
  e2e() {  # BINARY JSON [ARGS]
    local bin=$1 json=$2
    shift 2
    timeout 150 "$bin" bench --e2e-only --no-prefill --contexts 8192,32768 --batches 1,8 --steps 32 --sparse-keep 0.1 \
      "$@" --json "$OUT/$json" | grep -E "8B" | grep -v ";"
  }
  for round in 1 2; do
    echo "-- decode, this build (no fallback), round $round"
    e2e build-gpu/skim e2e-new-$round.json --no-dense-fallback
    if [ -x build-gpu-legacy/skim ]; then
      echo "-- decode, previous revision, round $round"
      e2e build-gpu-legacy/skim e2e-old-$round.json
    fi
  done
  echo "-- decode, this build with the dense fallback (the engine's default)"
  e2e build-gpu/skim e2e-fallback.json
) > $LOGS/decode.log 2>&1 &
decode_pid=$!
(
  export CUDA_VISIBLE_DEVICES=3
  pre() {  # BINARY LABEL
    timeout 120 "$1" bench --e2e-only --contexts 1024 --steps 4 --sparse-keep 0 --prefill-contexts 8192,32768 \
      --prefill-8b-max 32768 --chunk 2048 --json "$LOGS/prefill-$2.json" | sed -n '/^prefill/,$p'
  }
  for round in 1 2; do
    echo "-- prefill, this build, round $round"; pre build-gpu/skim new-$round
    [ -x build-gpu-legacy/skim ] && { echo "-- prefill, previous revision, round $round"; pre build-gpu-legacy/skim old-$round; }
  done
  echo "-- transformers + SDPA"
  timeout 200 python3 bench/hf_prefill_bench.py --contexts 8192,32768 --out $LOGS/hf-prefill.json 2>&1 | tail -8
) > $LOGS/prefill.log 2>&1 &
prefill_pid=$!

wait $decode_pid $prefill_pid
wait $tests_pid
rc=$(cat $LOGS/test_cuda.rc 2>/dev/null || echo 1)
echo "test_cuda rc $rc (124: timed out)"
grep -vE '^\[ +(RUN|OK) +\]' $LOGS/test_cuda.log | grep -E "FAILED|PASSED|fallback|\[ (quest|page cache|mixed)" | head -40
if [ "$rc" != 0 ]; then
  status=1
  grep -B2 -A8 -E "Failure|exception" $LOGS/test_cuda.log | head -80
fi
cat $LOGS/decode.log $LOGS/prefill.log
tar -czf "$OUT/logs.tar.gz" -C $LOGS test_cuda.log decode.log prefill.log hf-prefill.json $(cd $LOGS && ls prefill-*.json) 2>/dev/null
echo "gpu-pending status $status"
exit $status
