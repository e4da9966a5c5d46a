#!/usr/bin/env bash
# Where quest and gbsa lose the needle on SmolLM2-135M-Instruct at 4K (issue 14, part 5), and
# how much decoding the question under the policy costs. ~20 min each on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=bench/results/2026-11-24-smollm2-needle-coverage
M=models/smollm2-135m-instruct
for q in policy dense; do
  build/skim eval -m $M --policy dense,quest,quest:dense_layers=0,quest:budget=0.3 --tasks needle --ctx 4096 \
    --lengths 4096 --prompts 3 --question $q --threads 1 --json > $D/question-$q.json
done
build/skim eval -m $M --policy dense,quest,gbsa --tasks needle --ctx 4096 --lengths 4096 --prompts 3 \
  --question dense --coverage --threads 2 --json > $D/coverage.json
python3 $D/needle_table.py $D/question-*.json $D/coverage.json
python3 $D/coverage_table.py $D/coverage.json
