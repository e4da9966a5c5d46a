#!/usr/bin/env bash
# Device run (bash bench/results/2026-11-26-h100-selection-token/run.sh OUT from the repository root,
# build-legacy/tree carried: git archive of the previous revision plus this revision's bench files
# src/backend/cuda/{ops.cu,ops.cuh,decode_bench.cpp,decode_bench.h} and tools/bench_command.cpp,
# so both builds bench the same inputs): builds this tree (build-gpu) and the previous revision (build-legacy/tree ->
# build-gpu-legacy) side by side, runs the parity tests of the changed kernels, times the
# attention benches of both builds interleaved, and profiles quest's selection and the token
# gather kernel with ncu (per-kernel times).
set -uo pipefail
OUT=${1:?usage: OUT_DIR}
root=/tmp/devroot
mkdir -p $root && for f in .devdeps/*.deb; do dpkg -x "$f" $root; done
export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} NCCL_NVLS_ENABLE=0
( cmake -S build-legacy/tree -B build-gpu-legacy -G Ninja -DCMAKE_PREFIX_PATH=$root/usr \
    -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DSKIM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DSKIM_BLAS=OFF \
    -DSKIM_ICU=OFF -DSKIM_PNG=OFF -DSKIM_SERVER=OFF -DSKIM_TESTS=OFF -DSKIM_NATIVE=OFF > /tmp/legacy-cmake.log 2>&1 &&
  cmake --build build-gpu-legacy -j 24 --target skim > /tmp/legacy-build.log 2>&1 ) &
ENGINE_ONLY=1 BUILD_ONLY=1 bash scripts/gpu-check.sh /tmp/x > /tmp/build.log 2>&1
wait
ls -la build-gpu/skim build-gpu-legacy/skim | cut -c1-20,40-
S=$(date +%s)
timeout 240 build-gpu/tests/test_cuda --gtest_filter="${TESTS:-CudaTokenDecode*:CudaQuestPageSelect*:CudaGroupPageSelect*:GpuSparsePolicy*:DemoPrompts*}" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - S ))s"; grep -E "^\[  (FAILED|PASSED)|FAILED  \]|lists differ|max \|" $OUT/tests.log | head -40
B="--attention-only --sparse-keep 0.1 --attention-contexts 8192,32768,131072 --attention-batches 1,8"
for i in 1 2; do
  timeout 120 build-gpu/skim bench $B --json $OUT/bench-new-$i.json > /tmp/bench-new-$i.log 2>&1
  timeout 120 build-gpu-legacy/skim bench $B --json $OUT/bench-old-$i.json > /tmp/bench-old-$i.log 2>&1
done
cp /tmp/bench-new-1.log $OUT/; cat $OUT/bench-new-1.log
timeout 120 ncu --clock-control none --kernel-name-base demangled -k 'regex:QuestPageSelect|gather_kernel' --launch-count 120 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
  --csv build-gpu/skim bench --attention-only --sparse-keep 0.1 --attention-contexts 131072 --attention-batches 8 > $OUT/ncu.csv 2> /tmp/ncu.err
echo "ncu rc=$?"
