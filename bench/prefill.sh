#!/usr/bin/env bash
# Issue 20's prefill numbers on a GPU machine, in one run (build-gpu/ built by
# `ENGINE_ONLY=1 BUILD_ONLY=1 bash scripts/gpu-check.sh`):
#   prefill-attention.json  skim's paged prefill attention kernel, 8B layer shape, whole causal
#                           prompts and short chunks (skim bench --prefill-attention)
#   sdpa-prefill.json       PyTorch SDPA on the same whole prompts, per backend
#   prefill-e2e*.json       8B-shape prefill tokens/s at each chunk size, this build and, when
#                           build-gpu-legacy/skim exists, the previous revision, interleaved
#                           (new, old, new, old)
# Usage: bash bench/prefill.sh OUT_DIR   (env: CONTEXTS for the kernels, default
# 8192,32768,131072; E2E_CONTEXTS, default 8192,32768; CHUNKS, default 512,2048)
set -uo pipefail
OUT=${1:?usage: prefill.sh OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
CONTEXTS=${CONTEXTS:-8192,32768,131072}
E2E_CONTEXTS=${E2E_CONTEXTS:-8192,32768}
CHUNKS=${CHUNKS:-512,2048}
max=$(echo "$E2E_CONTEXTS" | tr , '\n' | sort -n | tail -1)
status=0

echo "=== prefill attention kernel ($(date +%T))"
timeout 300 build-gpu/skim bench --attention-only --attention-contexts 32768 --attention-batches 1 --sparse-keep 0 \
  --prefill-attention "$CONTEXTS" --json "$OUT/prefill-attention.json" || { echo "PREFILL ATTENTION BENCH FAILED"; status=1; }
echo "=== SDPA ($(date +%T))"
timeout 300 python3 bench/attention/sdpa_prefill_bench.py --contexts "$CONTEXTS" --out "$OUT/sdpa-prefill.json" ||
  { echo "SDPA PREFILL BENCH FAILED"; status=1; }

# The end-to-end prefill of the 8B shape (random weights): decode points kept to one short one.
e2e() {  # BINARY LABEL ROUND
  for chunk in ${CHUNKS//,/ }; do
    timeout 300 "$1" bench --e2e-only --contexts 1024 --steps 4 --sparse-keep 0 --prefill-contexts "$E2E_CONTEXTS" \
      --prefill-8b-max "$max" --chunk "$chunk" --json "$OUT/prefill-e2e-$2-c$chunk-$3.json" |
      sed -n '/^prefill/,$p' || { echo "E2E PREFILL ($2, chunk $chunk) FAILED"; status=1; }
  done
}
for round in 1 2; do
  echo "=== 8B-shape prefill, this build, round $round ($(date +%T))"
  e2e build-gpu/skim new $round
  if [ -x build-gpu-legacy/skim ]; then
    echo "=== 8B-shape prefill, previous revision, round $round ($(date +%T))"
    e2e build-gpu-legacy/skim old $round
  fi
done
exit $status
