#!/usr/bin/env bash
# cs on the GPU, first measurements and the speed fixes of 2026-11-26 against the previous
# revision (build-legacy/tree, carried), on a 4-GPU machine: tests on GPU 0, this revision's
# rows on GPU 1, the previous revision's on GPU 2, ncu's per-kernel breakdown on GPU 3.
# From the repository root: bash bench/results/2026-11-26-h200-cs-gpu/run.sh $OUT
set -uo pipefail
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu
( ENGINE_ONLY=1 BUILD_ONLY=1 bash scripts/gpu-check.sh /tmp/b > $OUT/build.log 2>&1; echo "build rc $?" >> $OUT/build.log ) &
ln -sfn "$(pwd)/models" build-legacy/tree/models
( cmake -S build-legacy/tree -B build-gpu-legacy -G Ninja -DCMAKE_PREFIX_PATH=/tmp/devroot/usr \
    -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DSKIM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DSKIM_BLAS=OFF \
    -DSKIM_ICU=OFF -DSKIM_PNG=OFF -DSKIM_SERVER=OFF -DSKIM_TESTS=OFF -DSKIM_NATIVE=OFF > $OUT/legacy.log 2>&1 &&
  cmake --build build-gpu-legacy -j 24 --target skim >> $OUT/legacy.log 2>&1; echo "legacy rc $?" >> $OUT/legacy.log ) &
wait
tail -2 $OUT/build.log $OUT/legacy.log
CS='cs:keep=0.05,list=0.05,points=4096'
E2E=(bench --e2e-only --no-prefill --8b-only --steps 16 --contexts 32768,131072 --batches 1)
( CUDA_VISIBLE_DEVICES=0 timeout 200 build-gpu/tests/test_cuda \
    --gtest_filter='CudaCs*:CudaTokenDecode*:CudaGroupPageSelect*:CudaQuestPageSelect*:DecodePlanner*:Cs/*:Policies/*quest*' \
    > $OUT/tests.log 2>&1; echo "tests rc $?" >> $OUT/tests.log ) &
( CUDA_VISIBLE_DEVICES=1 timeout 240 build-gpu/skim "${E2E[@]}" --e2e-policy dense "$CS" 'quest:budget=0.05,min=0,dense_layers=0' \
    --json $OUT/e2e-new.json > $OUT/e2e-new.log 2>&1 ) &
( CUDA_VISIBLE_DEVICES=2 timeout 240 build-gpu-legacy/skim "${E2E[@]}" --e2e-policy dense "$CS" \
    --json $OUT/e2e-old.json > $OUT/e2e-old.log 2>&1 ) &
( CUDA_VISIBLE_DEVICES=3 timeout 240 ncu --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none \
    build-gpu/skim bench --e2e-only --no-prefill --8b-only --contexts 32768 --batches 1 --steps 1 --e2e-policy "$CS" \
    > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc $?" >> $OUT/ncu.err ) &
wait
grep -E "OK|FAILED|PASSED|rc|sparse" $OUT/tests.log | grep -vE "^\[ +OK" | tail -12
grep -E "8B|rror" $OUT/e2e-new.log $OUT/e2e-old.log
tail -1 $OUT/ncu.err; python3 bench/kernel_breakdown.py $OUT/ncu.csv > $OUT/kernel-breakdown.md 2>&1; tail -24 $OUT/kernel-breakdown.md
