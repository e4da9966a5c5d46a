#!/bin/bash
# usage: run.sh BINARY TAG
B=$1; T=$2; cd /work/main
P="dense,quest:budget=0.2,min=0,gbsa:keep=0.2,n_min=8,resa:keep=0.2,n_min=8,mac,art,cs,quest:budget=0.2,min=0+retro,gbsa:keep=0.2,n_min=8+art,gbsa:keep=0.2,n_min=8+mac,streaming:window=512"
$B eval -m models/demo-code-28m --policy "$P" --tasks ppl,error,agree --ctx 4096 --decode-tokens 192 --agree-tokens 48 --threads 1 --json > /tmp/evalcmp/$T-demo.json 2>/tmp/evalcmp/$T-demo.err
$B eval -m models/smollm2-135m-instruct --policy "$P" --tasks ppl,error,agree --ctx 2048 --decode-tokens 192 --agree-tokens 48 --threads 1 --json > /tmp/evalcmp/$T-smol.json 2>/tmp/evalcmp/$T-smol.err
echo done > /tmp/evalcmp/$T.done
