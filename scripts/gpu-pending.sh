#!/usr/bin/env bash
# The checks and measurements of GPU code written without a device, in one call on the next GPU
# machine (a build of ~2 minutes on 64 cores, then ~4 minutes). Each item names what it settles;
# drop an item here once its code has passed and its numbers are recorded under bench/results/.
#   1. CudaPagedPrefillAttention.* with the warp-specialised wgmma kernels (kWgmmaWs,
#      kWgmmaPingpong), alone and under a timeout first: a wrong mbarrier parity or an unbalanced
#      named barrier would hang them.
#   2. CudaQuestPageSelect.* and CudaGroupPageSelect.*: the fused selection kernels give the same
#      plans bit for bit.
#   3. GpuTensorParallel.*: the token comparison up to a near-tie flip (and the PDL launches
#      under NCCL).
#   4. Prefill attention, every kernel (prefill.json): is kWgmmaWs or kWgmmaPingpong faster than
#      kWgmma? Then make the fastest the default (paged_prefill_attention.cu:
#      default_prefill_kernel), and record bench/prefill.sh's end-to-end numbers with it.
#   5. The selection kernels with and without fusion at 8K / 32K / 128K, batch 1 and 8
#      (selection.json: "fused select us"), and whole 8B steps with --fused-select-pages 0 and
#      4096 (e2e-*.json): set kDefaultFusedSelectPages (decode_planner.h) where fusion wins.
#   6. CudaPageCache.*: the device page cache map equals its CPU reference; the gather copies.
# Usage (from the repository root, after scripts/device-tree.sh hide, carrying .devdeps):
#   bash scripts/gpu-pending.sh $OUT
set -uo pipefail
OUT=${1:?usage: gpu-pending.sh OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
step() { echo; echo "=== $* ($(date +%T))"; }

step build
ENGINE_ONLY=1 BUILD_ONLY=1 bash scripts/gpu-check.sh /tmp/gpu-pending-build > /tmp/gpu-pending-build.log 2>&1 ||
  { tail -30 /tmp/gpu-pending-build.log; exit 1; }

step "1-3: tests"
tests() {  # FILTER SECONDS
  CUDA_VISIBLE_DEVICES=${GPUS:-0,1} timeout "$2" build-gpu/tests/test_cuda --gtest_filter="$1" >> "$OUT/tests.log" 2>&1
  local rc=$?
  echo "$1: rc $rc (124: timed out)"
  [ $rc = 0 ] || status=1
}
tests 'CudaPagedPrefillAttention.*' 90
tests 'CudaQuestPageSelect.*:CudaGroupPageSelect.*:GpuTensorParallel.*:CudaPageCache.*' 180
grep -E "^\[  (PASSED|FAILED)|FAILED|wgmma|fused|tokens differ" "$OUT/tests.log" | head -40

export CUDA_VISIBLE_DEVICES=0
step "4: prefill attention"
timeout 200 build-gpu/skim bench --attention-only --attention-contexts 32768 --attention-batches 1 --sparse-keep 0 \
  --prefill-attention 8192,32768,131072 --json "$OUT/prefill.json" | grep -E "^\| [0-9]" || status=1
step "5: selection, fused or not"
timeout 200 build-gpu/skim bench --attention-only --attention-contexts 8192,32768,131072 --attention-batches 1,8 \
  --sparse-keep 0.1 --json "$OUT/selection.json" | grep -E "^\| ([0-9]|independent|agree)" | head -30 || status=1
for pages in 0 4096; do
  timeout 150 build-gpu/skim bench --e2e-only --no-prefill --contexts 8192,32768 --batches 1,8 --steps 32 \
    --sparse-keep 0.1 --fused-select-pages $pages --json "$OUT/e2e-fused-$pages.json" | grep -E "8B" | grep -v ";" ||
    status=1
done
echo "gpu-pending status $status"
exit $status
