#!/usr/bin/env bash
# Issue 6's numbers: MAC-Attention's hit rate and skipped fraction for tau in {0.3, 0.45, 0.6,
# 0.75}, ART's visited fraction and output error on dense (recent-first and Quest-bound order)
# and on quest, and the quality metrics of `skim eval` against dense, on the demo model.
#   bench/mac_art_results.sh           run the pieces not yet done, then write the section
#   FORCE=1 ... / REPORT_ONLY=1 ...    rerun every piece / only rewrite the section
# Each piece writes bench/results/mac-art-<piece>.json; the section "MAC-Attention and ART" of
# docs/results.md (between its markers) is rewritten after every piece, the rest left alone.
# Env: SKIM, THREADS (1), CTX (16384), DECODE (64), AGREE (32), BUCKETS (1), DOCS (text windows, 1).
set -euo pipefail
cd "$(dirname "$0")/.."

SKIM=${SKIM:-$( [ -x build/skim ] && echo build/skim || echo build-mac/skim )}
THREADS=${THREADS:-1}
CTX=${CTX:-16384}
DECODE=${DECODE:-64}
AGREE=${AGREE:-32}
BUCKETS=${BUCKETS:-1}
DOCS=${DOCS:-1}
OUT=${OUT:-bench/results}
MD=${MD:-docs/results.md}
MAC_POLICIES="mac:tau=0.3,mac:tau=0.45,mac:tau=0.6,mac:tau=0.75"
ART_POLICIES="art:order=recent,art:order=bound,quest:budget=0.1,quest:budget=0.1+art,quest:budget=0.1+art:patience=8,quest:budget=0.1+art:eps_scale=0.01,eps_dir=0.001,patience=3"
mkdir -p "$OUT"

piece() {  # name, policies, flags...
  local name=$1 policies=$2
  shift 2
  local json="$OUT/mac-art-$name.json"
  if [ -s "$json" ] && [ -z "${FORCE:-}" ]; then
    echo "mac_art_results: $name done before ($json)"
    return
  fi
  echo "mac_art_results: $name started $(date -u +%H:%M:%S)"
  "$SKIM" eval --policy "$policies" --ctx "$CTX" --threads "$THREADS" --json "$@" > "$json.tmp"
  mv "$json.tmp" "$json"
  echo "mac_art_results: $name finished $(date -u +%H:%M:%S)"
  report
}

report() {
  python3 bench/mac_art_report.py "$OUT" "$MD" "$THREADS" "$CTX" "$DECODE" "$AGREE"
}

if [ -z "${REPORT_ONLY:-}" ]; then
  piece mac "$MAC_POLICIES" --tasks ppl,error,agree --decode-tokens "$DECODE" --agree-tokens "$AGREE" --buckets "$BUCKETS" --docs "$DOCS"
  piece art "$ART_POLICIES" --tasks ppl,error,agree --decode-tokens "$DECODE" --agree-tokens "$AGREE" --buckets "$BUCKETS" --docs "$DOCS"
fi
report
