#!/usr/bin/env bash
# The quality/bytes frontier (issue 14, part 3): every policy swept over its budget (MAC over
# tau, ART over its thresholds, CS over keep), on SmolLM2-135M-Instruct at 4K and 8K and on
# the demo model at 16K; per point sparse-decode perplexity, retrieval (the needle task through
# the chat template on SmolLM2, the passkey task the demo model learned) and KV bytes read per
# decode step. Then bench/frontier_report.py writes the tables into docs/results.md and one
# PNG per model and context (quality against bytes, one line per policy).
#
#   bench/frontier.sh                  run the pieces not yet done (each a group of policy
#                                      families at one model and context, resumable), then report
#   ONLY=smollm2-4k bench/frontier.sh  one model/context only (smollm2-4k, smollm2-8k, demo-16k)
#   GROUP=selectors bench/frontier.sh  one group only (selectors, corrections, layers, oracle, art, art2, art3, mac, mac2, cs, defaults); two
#                                      groups in parallel with THREADS=1 use a 2-core machine best
#   QUICK=1 ...                        a smoke run: tiny sizes, results under /tmp
# Env: SKIM (binary), THREADS (default 1: on a 2-core machine contending OpenMP threads slow
# decoding down), PROMPTS (retrieval prompts per length and kind, default 3: 9 needle prompts
# per point; the defaults' retrieval at 20+ prompts per length is bench/defaults.sh's), DECODE
# (teacher-forced tokens, default 256), DOCS (text windows, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

SKIM=${SKIM:-build/skim}
THREADS=${THREADS:-1}
PROMPTS=${PROMPTS:-3}
DECODE=${DECODE:-256}
DOCS=${DOCS:-2}
OUT=${OUT:-bench/results/frontier}
if [ -n "${QUICK:-}" ]; then PROMPTS=1; DECODE=16; DOCS=1; OUT=/tmp/skim-frontier-quick; fi
mkdir -p "$OUT"

# Budget points, in groups of policy families that share one evaluation (so one dense prefill
# per prompt and one dense baseline serve the whole group): a fraction of the context, with the
# floors in tokens switched off (quest:min=0, gbsa:n_min=1) so the fraction is what is read.
groups() {  # ctx -> lines "group policy-list"
  local ctx=$1 w s=""
  for f in 5 10 20 30 50; do w=$((ctx * f / 100 - 4)); s+="${s:+,}streaming:sink=4,window=$w"; done
  echo "selectors quest:budget=0.1,min=0,quest:budget=0.2,min=0,quest:budget=0.3,min=0,quest:budget=0.5,min=0,quest:budget=0.7,min=0,gbsa:keep=0.1,n_min=1,gbsa:keep=0.2,n_min=1,gbsa:keep=0.3,n_min=1,gbsa:keep=0.5,n_min=1,$s"
  echo "corrections resa:keep=0.1,n_min=1,resa:keep=0.2,n_min=1,resa:keep=0.3,n_min=1,resa:keep=0.5,n_min=1,quest:budget=0.1,min=0+retro,quest:budget=0.2,min=0+retro,quest:budget=0.3,min=0+retro"
  echo "layers gbsa:keep=0.1,n_min=1,dense_layers=2,gbsa:keep=0.2,n_min=1,dense_layers=2,gbsa:keep=0.3,n_min=1,dense_layers=2,resa:keep=0.2,n_min=1,dense_layers=2,quest:budget=0.2,min=0,dense_layers=0,quest:budget=0.2,min=0,dense_layers=4"
  echo "oracle oracle:budget=0.02,dense_layers=2,oracle:budget=0.05,dense_layers=2,oracle:budget=0.1,dense_layers=2,oracle:budget=0.2,dense_layers=2,oracle:budget=0.3,dense_layers=2"
  echo "art art:order=bound,art:order=bound,eps_scale=0.01,eps_dir=1e-4,patience=4,art:order=bound,eps_scale=0.05,eps_dir=1e-3,patience=2,quest:budget=0.3,min=0+art,quest:budget=0.3,min=0+art:eps_scale=0.01,eps_dir=1e-4,patience=4"
  echo "art2 art:order=bound,eps_scale=0.003,eps_dir=3e-5,patience=8,art:order=bound,eps_scale=0.003,eps_dir=3e-5,patience=4,art:order=recent,eps_scale=0.01,eps_dir=1e-4,patience=4"
  # ART as a GPU kernel would run it: one order per KV head (the group's mean query), tested
  # between rounds of blocks; patience in tests (rounds x patience = the 16 blocks of the default).
  echo "art3 art:order=bound,art:order=group,art:order=group,round=4,patience=4,art:order=group,round=8,patience=2,quest:budget=0.3,min=0+art:round=4,patience=4"
  echo "mac mac:tau=0.45,mac:tau=0.6,mac:tau=0.75,mac:tau=0.9"
  echo "mac2 mac:window=256,mac:window=512,mac:window=256,tau=0.6"
  echo "cs cs:keep=0.05,cs:keep=0.1,cs:keep=0.2,cs:keep=0.3"
  # The defaults that moved after the groups above (2026-11-26: mac tau 0.9, art 10x stricter).
  echo "defaults mac,art"
}

# model/context settings: name model-dir ctx retrieval-task lengths
settings() {
  echo "smollm2-4k models/smollm2-135m-instruct 4096 needle 4096"
  echo "smollm2-8k models/smollm2-135m-instruct 8192 needle 8192"
  echo "demo-16k models/demo-code-28m 16384 passkey 16384"
}

piece() {  # name model ctx task lengths group policies
  local name=$1 model=$2 ctx=$3 task=$4 lengths=$5 group=$6 policies=$7
  local json="$OUT/$name-$group.json"
  [ -n "${GROUP:-}" ] && [ "$GROUP" != "$group" ] && return
  if [ -s "$json" ] && [ -z "${FORCE:-}" ]; then echo "frontier: $name $group done before"; return; fi
  local c=$ctx decode=$DECODE lens=$lengths
  if [ -n "${QUICK:-}" ]; then c=1024; lens=1024; fi
  echo "frontier: $name $group started $(date -u +%H:%M:%S)"
  "$SKIM" eval -m "$model" --policy "dense,$policies" --tasks "ppl,$task" --ctx "$c" --decode-tokens "$decode" \
    --buckets 2 --docs "$DOCS" --lengths "$lens" --prompts "$PROMPTS" --keys 1 --threads "$THREADS" --json > "$json.tmp"
  mv "$json.tmp" "$json"
  echo "frontier: $name $group finished $(date -u +%H:%M:%S)"
}

while read -r name model ctx task lengths; do
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ] && continue
  if [ ! -f "$model/config.json" ]; then echo "frontier: $model missing (scripts/models/smollm2.sh builds SmolLM2)"; continue; fi
  while read -r group policies; do
    piece "$name" "$model" "$ctx" "$task" "$lengths" "$group" "$policies"
  done < <(groups "$ctx")
done < <(settings)

# The plots need matplotlib: PYTHON names an interpreter that has it (e.g. /usr/bin/python3 with
# Debian's python3-matplotlib); without it the tables are written and the PNGs skipped.
[ -z "${QUICK:-}" ] && "${PYTHON:-python3}" bench/frontier_report.py "$OUT" docs/results.md || true
