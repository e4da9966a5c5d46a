#!/usr/bin/env bash
# Every policy at its defaults on SmolLM2-135M-Instruct (issue 14, "Numbers to record"): the
# needle task at 2K, 4K and 8K (PROMPTS per kind and length: 7 gives 21 prompts per length),
# sparse-decode perplexity at 4K and 8K, and CPU decode tokens/s against dense at 8K (from the
# teacher-forced decode of the 8K window). Resumable: each piece is one JSON under OUT.
#
#   bench/defaults.sh                 run the pieces not yet done
#   PIECE=needle-4096 bench/defaults.sh   one piece (needle-2048, needle-4096, needle-8192, ppl-4096, ppl-8192)
# Env: SKIM (binary), THREADS (default 1), PROMPTS (default 7), DECODE (default 256), DOCS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

SKIM=${SKIM:-build/skim}
THREADS=${THREADS:-1}
PROMPTS=${PROMPTS:-7}
DECODE=${DECODE:-256}
DOCS=${DOCS:-2}
OUT=${OUT:-bench/results/defaults}
MODEL=${MODEL:-models/smollm2-135m-instruct}
POLICIES=${POLICIES:-dense,quest,gbsa,resa,quest+retro,streaming,mac,art,cs}
mkdir -p "$OUT"

piece() {  # name -- eval args
  local name=$1 json="$OUT/$1.json"
  shift
  [ -n "${PIECE:-}" ] && [ "$PIECE" != "$name" ] && return
  if [ -s "$json" ] && [ -z "${FORCE:-}" ]; then echo "defaults: $name done before"; return; fi
  echo "defaults: $name started $(date -u +%H:%M:%S)"
  "$SKIM" eval -m "$MODEL" --policy "$POLICIES" --threads "$THREADS" --json "$@" > "$json.tmp"
  mv "$json.tmp" "$json"
  echo "defaults: $name finished $(date -u +%H:%M:%S)"
}

for len in 2048 4096 8192; do
  piece "needle-$len" --tasks needle --ctx "$len" --lengths "$len" --prompts "$PROMPTS"
done
for ctx in 4096 8192; do
  piece "ppl-$ctx" --tasks ppl --ctx "$ctx" --decode-tokens "$DECODE" --buckets 2 --docs "$DOCS"
done
