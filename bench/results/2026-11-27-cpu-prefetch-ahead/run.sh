#!/usr/bin/env bash
# Which guess of layer l + 1's pages, copied while layer l computes, hides its host-KV misses
# (issue 18's overlap)? skim eval --locality's copies_ahead (layer l's pages, or the selector over
# queries guessed from layer l's input) on
# SmolLM2 at 8K (its trained length), 2 windows x 256 teacher-forced steps of held-out Python.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=bench/results/2026-11-27-cpu-prefetch-ahead
./build/skim eval -m models/smollm2-135m-instruct --tasks ppl --locality --ctx 8192 --decode-tokens 256 --docs 2 \
  --policy "quest:budget=0.05,min=0,quest:budget=0.1,min=0,gbsa:keep=0.05,n_min=16,gbsa:keep=0.1,n_min=16,quest,gbsa" \
  --json > $out/smollm2-8k.json
