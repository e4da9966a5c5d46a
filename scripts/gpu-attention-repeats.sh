#!/usr/bin/env bash
# On a GPU machine, after scripts/gpu-check.sh has built build-gpu/skim: times skim's dense
# decode attention (`skim bench --attention-only`) and PyTorch SDPA (sdpa_bench.py) N times,
# alternating, so that the comparison at each point has a spread instead of one sample.
# Writes OUT_DIR/skim-I.json, OUT_DIR/sdpa-I.json and OUT_DIR/repeats.md (per point: every
# sample of both sides, their medians, and in how many rounds skim was not slower).
# Usage: bash scripts/gpu-attention-repeats.sh OUT_DIR [N=3]
set -uo pipefail
OUT=${1:?usage: gpu-attention-repeats.sh OUT_DIR [N]}
N=${2:-3}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -x build-gpu/skim ] || { echo "build-gpu/skim missing: run scripts/gpu-check.sh first"; exit 1; }
for i in $(seq 1 "$N"); do
  build-gpu/skim bench --attention-only --sparse-keep 0 --json "$OUT/skim-$i.json" > /dev/null || exit 1
  python3 bench/attention/sdpa_bench.py --out "$OUT/sdpa-$i.json" > /dev/null 2>&1 || exit 1
done
python3 bench/attention_repeats_report.py "$OUT" "$N" | tee "$OUT/repeats.md"
