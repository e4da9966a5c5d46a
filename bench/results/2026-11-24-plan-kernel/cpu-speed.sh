#!/bin/bash
# usage: speed.sh OUT  -- alternates old/new, 3 runs each, gbsa and dense
cd /work/main
for i in 1 2 3; do
  for tag in old new; do
    B=/tmp/skim-before; [ $tag = new ] && B=/tmp/skim-new
    for pol in dense gbsa:keep=0.2,n_min=8; do
      $B generate -m models/demo-code-28m -f /tmp/prompt16k.txt --max-tokens 64 --ignore-eos --threads 1 --ctx 16500 --policy $pol --json 2>/dev/null | python3 -c "
import json,sys; d=json.load(sys.stdin); print('$tag', '$pol', d.get('prompt_tokens'), d.get('prefill_tokens_per_s', d.get('timings',{})), d.get('decode_tokens_per_s'), d.get('tokens', [])[:8])" >> $1
    done
  done
done
echo done >> $1
