#!/usr/bin/env bash
# Issue 15's "nothing lost" on the CPU for this session's plan + kernel changes (cs and the
# oracle through a token plan, ART's group rule through the ART kernel, cs's search as a
# kernel over flat tables): the previous revision's binary (f96b99e, the session's start) and
# this one, interleaved old/new twice, demo model, 16K, 64 teacher-forced steps, 2 threads.
#   OLD=path/to/old/skim NEW=path/to/new/skim bash run.sh
set -euo pipefail
cd "$(dirname "$0")"
for i in 1 2; do
  for which in old new; do
    bin=$OLD; [ $which = new ] && bin=$NEW
    $bin eval --policy "dense,quest,gbsa,cs,oracle:budget=0.1,mac,art,quest+art,mac+cs" --tasks ppl --ctx 16384 \
      --decode-tokens 64 --json > demo16k-$which-$i.json
  done
done
