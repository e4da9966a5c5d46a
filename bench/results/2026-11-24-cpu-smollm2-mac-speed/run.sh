#!/bin/bash
# Decode step cost of dense and mac on SmolLM2-135M-Instruct at 4K and 8K, 1 and 2 threads,
# before (main's build) and after (this branch's build), interleaved so that both face the same
# load from other jobs. Per run one prefill, then 33 greedy decode steps timed one by one
# (step_times.cpp): step 1 alone is the first decode step, the median of steps 2..33 the steady
# step. `dense->mac` prefills under dense and times Engine::set_policy("mac").
#
#   MAIN=/work/main NEW=/work/wt-mac REPS=2 bash run.sh   (results.jsonl, then summarize.py)
#   CHECK=1 ... : also `skim generate -n 2` and `-n 34` at 8K, 2 threads (the older protocol)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MAIN=${MAIN:-/work/main}
NEW=${NEW:-$(cd "$HERE/../../.." && pwd)}
REPS=${REPS:-2}
MODEL=${MODEL:-$NEW/models/smollm2-135m-instruct}
DATA=$NEW/data/heldout-python/asyncio.py.txt
OUT=${OUT:-$HERE/results.jsonl}
TMP=$(mktemp -d)
export OMP_WAIT_POLICY=passive  # as the skim command sets it (tools/skim.cpp)

head -c 16000 "$DATA" > "$TMP/4k.txt"  # 4046 tokens
head -c 32000 "$DATA" > "$TMP/8k.txt"  # 7664 tokens

build() {  # build SRC BUILD_DIR OUT: step_times against that build's libraries
  local L=$2
  g++ -O2 -std=c++20 -fopenmp -I"$1/include" -I"$1/src" "$HERE/step_times.cpp" -o "$3" \
    "$L/libskim_engine.a" "$L/libskim_model.a" "$L/libskim_cpu.a" "$L/libskim_attention.a" "$L/libskim_kv.a" \
    "$L/libskim_tokenizer.a" "$L/libskim_core.a" -lopenblas -lfmt -lpcre2-8 -licuuc -licudata -lpthread
}
build "$MAIN" "$MAIN/build" "$TMP/st_main"
build "$NEW" "$NEW/build" "$TMP/st_new"

for rep in $(seq 1 "$REPS"); do
  for ctx in 4k 8k; do
    for t in 1 2; do
      for pol in dense mac dense-\>mac; do
        [ "$pol" = "dense->mac" ] && [ "$t" = 2 ] && continue  # the switch once, at 1 thread
        for bin in main new; do
          line=$("$TMP/st_$bin" "$MODEL" "$TMP/$ctx.txt" "$pol" "$t" 33 2>/dev/null)
          echo "{\"build\":\"$bin\",\"ctx\":\"$ctx\",\"rep\":$rep,${line:1}" | tee -a "$OUT"
        done
      done
    done
  done
done

if [ "${CHECK:-0}" = 1 ]; then
  for bin in main new; do
    B=$MAIN/build/skim; [ "$bin" = new ] && B=$NEW/build/skim
    for pol in dense mac; do for n in 2 34; do
      "$B" generate -m "$MODEL" -f "$TMP/8k.txt" --ctx 9000 -n $n --ignore-eos --policy $pol --json -t 2 2>/dev/null |
        python3 -c "import json,sys; j=json.load(sys.stdin); print(json.dumps({'check':'generate','build':'$bin','policy':'$pol','n':$n,'prefill_s':j['prefill_seconds'],'decode_s':j['decode_seconds'],'kv_bytes_per_step':j['kv_bytes_per_step']}))" | tee -a "$OUT"
    done; done
  done
fi
rm -r "$TMP"
