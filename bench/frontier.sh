#!/usr/bin/env bash
# The quality/bytes frontier (issue 14, part 3): every policy swept over its budget (MAC over
# tau, ART over its thresholds, CS over keep), on SmolLM2-135M-Instruct at 4K and 8K and on
# the demo model at 16K; per point sparse-decode perplexity, retrieval (the needle task through
# the chat template on SmolLM2, the passkey task the demo model learned) and KV bytes read per
# decode step. Then bench/frontier_report.py writes the tables into docs/results.md and one
# PNG per model and context (quality against bytes, one line per policy).
#
#   bench/frontier.sh                  run the pieces not yet done (each a policy family at one
#                                      model and context, resumable), then report
#   ONLY=smollm2-4k bench/frontier.sh  one model/context only (smollm2-4k, smollm2-8k, demo-16k)
#   FAMILY=quest bench/frontier.sh     one policy family only
#   QUICK=1 ...                        a smoke run: tiny sizes, results under /tmp
# Env: SKIM (binary), THREADS (default 1: on a 2-core machine contending OpenMP threads slow
# decoding down), PROMPTS (retrieval prompts per length and kind, default 20), DECODE (teacher-
# forced tokens, default 256), DOCS (text windows, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

SKIM=${SKIM:-build/skim}
THREADS=${THREADS:-1}
PROMPTS=${PROMPTS:-20}
DECODE=${DECODE:-256}
DOCS=${DOCS:-2}
OUT=${OUT:-bench/results/frontier}
if [ -n "${QUICK:-}" ]; then PROMPTS=1; DECODE=16; DOCS=1; OUT=/tmp/skim-frontier-quick; fi
mkdir -p "$OUT"

# Budget points per family: a fraction of the context with the methods' own token floors
# (quest: min 256 tokens; gbsa/resa: n_min 16 blocks = 256 tokens).
families() {  # ctx -> lines "family policy-list"
  local ctx=$1 w
  echo "quest quest:budget=0.05,quest:budget=0.1,quest:budget=0.2,quest:budget=0.3,quest:budget=0.5"
  echo "gbsa gbsa:keep=0.05,gbsa:keep=0.1,gbsa:keep=0.2,gbsa:keep=0.3,gbsa:keep=0.5"
  echo "resa resa:keep=0.05,resa:keep=0.1,resa:keep=0.2,resa:keep=0.3"
  local s=""
  for f in 5 10 20 30 50; do w=$((ctx * f / 100 - 4)); s+="${s:+,}streaming:sink=4,window=$w"; done
  echo "streaming $s"
  echo "retro quest:budget=0.1+retro,quest:budget=0.2+retro,quest:budget=0.3+retro"
  echo "mac mac:tau=0.45,mac:tau=0.6,mac:tau=0.75,mac:tau=0.9"
  echo "art art:order=bound,art:order=bound,eps_scale=0.01,eps_dir=1e-4,patience=4,art:order=bound,eps_scale=1e-4,eps_dir=1e-6,patience=32"
  echo "cs cs:keep=0.05,cs:keep=0.1,cs:keep=0.2,cs:keep=0.3"
}

# model/context settings: name model-dir ctx retrieval-task lengths
settings() {
  echo "smollm2-4k models/smollm2-135m-instruct 4096 needle 2048,4096"
  echo "smollm2-8k models/smollm2-135m-instruct 8192 needle 8192"
  echo "demo-16k models/demo-code-28m 16384 passkey 16384"
}

piece() {  # name model ctx task lengths family policies
  local name=$1 model=$2 ctx=$3 task=$4 lengths=$5 family=$6 policies=$7
  local json="$OUT/$name-$family.json"
  [ -n "${FAMILY:-}" ] && [ "$FAMILY" != "$family" ] && return
  if [ -s "$json" ] && [ -z "${FORCE:-}" ]; then echo "frontier: $name $family done before"; return; fi
  local c=$ctx decode=$DECODE lens=$lengths
  if [ -n "${QUICK:-}" ]; then c=1024; lens=1024; fi
  echo "frontier: $name $family started $(date -u +%H:%M:%S)"
  "$SKIM" eval -m "$model" --policy "dense,$policies" --tasks "ppl,$task" --ctx "$c" --decode-tokens "$decode" \
    --buckets 2 --docs "$DOCS" --lengths "$lens" --prompts "$PROMPTS" --keys 1 --threads "$THREADS" --json > "$json.tmp"
  mv "$json.tmp" "$json"
  echo "frontier: $name $family finished $(date -u +%H:%M:%S)"
}

while read -r name model ctx task lengths; do
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ] && continue
  if [ ! -f "$model/config.json" ]; then echo "frontier: $model missing (scripts/models/smollm2.sh builds SmolLM2)"; continue; fi
  while read -r family policies; do
    piece "$name" "$model" "$ctx" "$task" "$lengths" "$family" "$policies"
  done < <(families "$ctx")
done < <(settings)

[ -z "${QUICK:-}" ] && python3 bench/frontier_report.py "$OUT" docs/results.md || true
