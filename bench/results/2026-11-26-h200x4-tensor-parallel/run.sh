#!/usr/bin/env bash
# Issue 19 on nvidia-h200-x4 (4 x H200, NVLink NV18 between every pair: topo.txt). Run on the
# device after `ENGINE_ONLY=1 BUILD_ONLY=1 bash scripts/gpu-check.sh OUT` built build-gpu/.
set -euo pipefail
OUT=${1:?usage: run.sh OUT_DIR}
export NCCL_NVLS_ENABLE=0
nvidia-smi topo -m > $OUT/topo.txt
build-gpu/skim bench --tp 1,2,4 --shape 8b --contexts 32768,131072 --batches 1,8 --steps 32 --sparse-keep 0.1 \
  --json $OUT/tp124-8b.json
build-gpu/skim bench --tp 4,2 --shape 70b --contexts 32768,131072 --batches 1,8 --steps 16 --sparse-keep 0.1 \
  --json $OUT/tp42-70b.json
