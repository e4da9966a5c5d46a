#!/usr/bin/env bash
# The checks and measurements of GPU code written without a device, in one call on the next GPU
# machine with 2 or 4 GPUs (nvidia-h100-x4: 64 cores build both revisions in about 3 minutes, then
# the tests and the benchmarks run side by side on separate GPUs). Each item names what it
# settles; drop an item once its code has passed and its numbers are recorded under
# bench/results/.
#   Nothing is pending: every item below last ran on 2026-11-26 (2 x H100) and passed; the
#   script stays as the template of the next such call.
#   1. test_cuda, whole (GPUs 0-1; TESTS overrides the filter).
#   2. mac at forced hit rates against dense, this build against the previous revision
#      (build-legacy/tree), interleaved on one GPU: 8B shape, 32K b1 and b8 (two rounds; ONE_ROUND=1:
#      one), 128K b1 (one) (e2e*-new*.json, e2e*-old*.json); then KV beyond GPU memory at 512K b1
#      (--host-kv-slots 8192; host memory 64 GiB of KV): gbsa and quest at 5%, gbsa at 2%, and gbsa
#      5% with the previous revision (issue 18's 10 tokens/s; bytes copied and hits per step).
#   3. ncu's per-kernel breakdown of mac at 0% hits (ncu.csv; bench/kernel_breakdown.py).
#   4. (PARTS=prefill) ncu's breakdown of the 8B shape's 32K prefill (ncu-prefill.csv;
#      bench/kernel_breakdown.py --all).
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

# PARTS: which of tests, bench, ncu, prefill run (default the first three; the whole test_cuda takes about 5
# minutes alone, more beside the benchmarks: on a 600 s call run PARTS=tests first, then
# PARTS=bench,ncu on the warm machine, whose build-gpu*/ stay).
PARTS=${PARTS:-tests,bench,ncu}
has() { [[ ",$PARTS," == *",$1,"* ]]; }
case "$(nvidia-smi -L | wc -l)" in
  [4-9]) G_TESTS=0,1 G_BENCH=2 G_NCU=3 ;;
  [23]) G_TESTS=0 G_BENCH=1 G_NCU=0 ;;
  *) G_TESTS=0 G_BENCH=0 G_NCU=0 ;;  # one GPU: the benchmarks wait for the tests (timings alone)
esac
step "$PARTS: tests on GPUs $G_TESTS, mac against the previous revision on GPU $G_BENCH, ncu on GPU $G_NCU"
TESTS=${TESTS:-'*'}
( if has tests; then
    CUDA_VISIBLE_DEVICES=$G_TESTS timeout 480 build-gpu/tests/test_cuda --gtest_filter="$TESTS" > $LOGS/test_cuda.log 2>&1
    echo $? > $LOGS/test_cuda.rc
  fi
  touch $LOGS/tests.done ) &
tests_pid=$!
( if has ncu; then
    [ "$G_NCU" = 0 ] && while [ ! -e $LOGS/tests.done ]; do sleep 2; done  # 2 GPUs: after the tests
    CUDA_VISIBLE_DEVICES=$G_NCU timeout 240 ncu --csv --metrics gpu__time_duration.sum --cache-control none \
      --clock-control none build-gpu/skim bench --e2e-only --no-prefill --8b-only --no-dense-fallback --sparse-keep 0.1 \
      --contexts 32768 --batches 1 --steps 1 --e2e-policy 'mac@hits=0' > $LOGS/ncu.csv 2> $LOGS/ncu.err
    echo "ncu rc $?" >> $LOGS/ncu.err
  fi
  if has prefill; then
    CUDA_VISIBLE_DEVICES=$G_NCU timeout 300 ncu --csv --metrics gpu__time_duration.sum --cache-control none \
      --clock-control none build-gpu/skim bench --e2e-only --8b-only --e2e-policy none --prefill-contexts 32768 \
      --prefill-8b-max 32768 > $LOGS/ncu-prefill.csv 2>> $LOGS/ncu.err
    echo "ncu (prefill) rc $?" >> $LOGS/ncu.err
  fi ) &
ncu_pid=$!
e2e() {  # BINARY JSON ARGS...
  local bin=$1 json=$2
  shift 2
  timeout 100 "$bin" bench --e2e-only --no-prefill --8b-only --no-dense-fallback --steps 32 --sparse-keep 0 --mac "$@" \
    --json "$OUT/$json" | grep -E "8B"
}
( if has bench; then
    [ "$G_BENCH" = "$G_TESTS" ] && while [ ! -e $LOGS/tests.done ]; do sleep 2; done
    export CUDA_VISIBLE_DEVICES=$G_BENCH
    for round in 1 2; do
      [ $round = 2 ] && [ -n "${ONE_ROUND:-}" ] && break
      echo "-- this build, round $round"
      e2e build-gpu/skim e2e-new-$round.json --contexts 32768 --batches 1,8
      [ $round = 1 ] && e2e build-gpu/skim e2e128-new.json --contexts 131072 --batches 1
      if [ -x build-gpu-legacy/skim ]; then
        echo "-- previous revision, round $round"
        e2e build-gpu-legacy/skim e2e-old-$round.json --contexts 32768 --batches 1,8
        [ $round = 1 ] && e2e build-gpu-legacy/skim e2e128-old.json --contexts 131072 --batches 1
      fi
    done
    # KV beyond GPU memory at 512K, batch 1 (issue 18's 10 tokens/s): this build, then gbsa against
    # the previous revision (a map and a gather per layer instead of per KV head).
    host_kv() {  # BINARY POLICY...
      local bin=$1
      shift
      timeout 200 $bin bench --e2e-only --no-prefill --8b-only --steps 16 --sparse-keep 0.05 --e2e-policy "$@" \
        --contexts 524288 --batches 1 --host-kv-slots 8192 | grep -E "8B"
    }
    echo "-- host KV, this build"
    host_kv build-gpu/skim 'gbsa:keep=0.05,n_min=16' 'quest:budget=0.05,min=0,dense_layers=0' 'gbsa:keep=0.02,n_min=16'
    if [ -x build-gpu-legacy/skim ]; then
      echo "-- host KV, previous revision"
      host_kv build-gpu-legacy/skim 'gbsa:keep=0.05,n_min=16'
    fi
  fi ) > $LOGS/decode.log 2>&1 &
decode_pid=$!

wait $decode_pid $tests_pid $ncu_pid
rc=$(cat $LOGS/test_cuda.rc 2>/dev/null || echo "not run")
echo "test_cuda rc $rc (124: timed out)"
grep -vE '^\[ +(RUN|OK) +\]' $LOGS/test_cuda.log | grep -E "FAILED|PASSED|\[ (mac|retro|sparse|golden|greedy)" | head -40
if [ "$rc" != 0 ] && [ "$rc" != "not run" ]; then
  status=1
  grep -B2 -A8 -E "Failure|exception" $LOGS/test_cuda.log | head -80
fi
cat $LOGS/decode.log; tail -3 $LOGS/ncu.err 2>/dev/null; [ -s $LOGS/ncu.csv ] && python3 bench/kernel_breakdown.py $LOGS/ncu.csv | tail -25
[ -s $LOGS/ncu-prefill.csv ] && python3 bench/kernel_breakdown.py --all $LOGS/ncu-prefill.csv | head -30
tar -czf "$OUT/logs.tar.gz" -C $LOGS test_cuda.log decode.log ncu.csv ncu-prefill.csv ncu.err 2>/dev/null
echo "gpu-pending status $status"
exit $status
