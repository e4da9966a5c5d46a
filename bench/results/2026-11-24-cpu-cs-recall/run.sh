#!/usr/bin/env bash
# CSAttention's recall of the true top-5% keys on SmolLM2-135M-Instruct at 4K (issue 14 part 5):
# the paper's scoring (the defaults before) against each change, from one dense pass over
# held-out Python (bench/cs_recall.cpp replays the recorded queries and keys through CsSelector).
#   bash bench/results/2026-11-24-cpu-cs-recall/run.sh   (from the repository root, after a build)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-build/cs_recall}
MODEL=${MODEL:-models/smollm2-135m-instruct}
CONFIGS="cs:score=cos,missing=zero,pool=head,subspaces=8,list=0.1"            # the paper's (main before)
CONFIGS+=";cs:score=dot,missing=zero,pool=head,subspaces=8,list=0.1"          # + dot scores
CONFIGS+=";cs:score=dot,missing=mean,pool=head,subspaces=8,list=0.1"          # + list tails
CONFIGS+=";cs:score=dot,missing=mean,pool=head,subspaces=4,list=0.2"          # + M=4, L=0.2 (same memory)
CONFIGS+=";cs"                                                                # + one search per group (the defaults)
CONFIGS+=";cs:keep=0.1"
CONFIGS+=";cs:subspaces=8,centroids=256,list=1"                               # every key in every list: the ranking's limit
"$BIN" -m "$MODEL" -t "${THREADS:-1}" --text data/heldout-python/asyncio.py.txt --prompt-tokens 4032 --decode 32 \
  --configs "$CONFIGS" --json "$HERE/smollm2-4k.json"
