#!/usr/bin/env bash
# cs on the GPU, second round (k-means points dimension-major, choose's picks by a warp, zero
# keys counted apart in the radix select), on a 4-GPU machine: tests on GPU 0, b1 rows on
# GPU 1, b8 rows on GPU 2, ncu's per-kernel breakdown (the table build included) on GPU 3.
# From the repository root: bash run2.sh $OUT
set -uo pipefail
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu
ENGINE_ONLY=1 BUILD_ONLY=1 bash scripts/gpu-check.sh /tmp/b > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
CS='cs:keep=0.05,list=0.05,points=4096'
Q='quest:budget=0.05,min=0,dense_layers=0'
E2E=(bench --e2e-only --no-prefill --8b-only --steps 16)
( CUDA_VISIBLE_DEVICES=0 timeout 200 build-gpu/tests/test_cuda \
    --gtest_filter='CudaCs*:CudaTokenDecode*:CudaGroupPageSelect*:CudaQuestPageSelect*:CudaMixedPlan*:DecodePlanner*:Cs/*:Policies/*gbsa*' \
    > $OUT/tests.log 2>&1; echo "tests rc $?" >> $OUT/tests.log ) &
( CUDA_VISIBLE_DEVICES=1 timeout 200 build-gpu/skim "${E2E[@]}" --contexts 32768,131072 --batches 1 --e2e-policy dense "$CS" "$Q" \
    --json $OUT/e2e-b1.json > $OUT/e2e-b1.log 2>&1 ) &
( CUDA_VISIBLE_DEVICES=2 timeout 200 build-gpu/skim "${E2E[@]}" --contexts 32768 --batches 8 --e2e-policy dense "$CS" "$Q" \
    --json $OUT/e2e-b8.json > $OUT/e2e-b8.log 2>&1 ) &
( CUDA_VISIBLE_DEVICES=3 timeout 200 ncu --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none \
    build-gpu/skim bench --e2e-only --no-prefill --8b-only --contexts 32768 --batches 1 --steps 1 --e2e-policy "$CS" \
    > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc $?" >> $OUT/ncu.err ) &
wait
grep -E "FAILED|PASSED|rc|sparse" $OUT/tests.log | tail -12
grep -hE "8B|rror" $OUT/e2e-b1.log $OUT/e2e-b8.log
tail -1 $OUT/ncu.err; python3 bench/kernel_breakdown.py $OUT/ncu.csv > $OUT/kernel-breakdown.md 2>&1; tail -20 $OUT/kernel-breakdown.md
grep -oE '(kmeans|list|sample)_kernel[^"]*",[^,]*,[^,]*' $OUT/ncu.csv | head -0
python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
t = collections.defaultdict(float)
for r in csv.DictReader(rows):
    for k in ("kmeans_kernel", "list_kernel", "sample_kernel", "DeviceSegmentedRadixSort"):
        if k in r["Kernel Name"]: t[k] += float(r["Metric Value"].replace(",", "")) / 1e6
print("table build, ms over 32 layers:", {k: round(v, 1) for k, v in t.items()})
PY
