#!/usr/bin/env bash
# Where the page selectors' and CSAttention's chosen keys sit, step after step, on SmolLM2 at 8K
# (its trained length): skim eval --locality over 2 windows x 256 teacher-forced steps of
# held-out Python, at the defaults and at the small budgets of long contexts (5%, 10%).
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=bench/results/2026-11-26-cpu-selection-locality
./build/skim eval -m models/smollm2-135m-instruct --tasks ppl --locality --ctx 8192 --decode-tokens 256 --docs 2 \
  --policy "dense,quest,quest:budget=0.1,min=0,quest:budget=0.05,min=0,gbsa,gbsa:keep=0.1,n_min=16,gbsa:keep=0.05,n_min=16,cs,cs:keep=0.1,cs:keep=0.05,streaming" \
  --json > $out/smollm2-8k.json
