#!/usr/bin/env bash
# SmolLM2 on a GPU machine. The working tree that travels to it is limited to 64 MiB and the
# model is 514 MB (fp32; 270 MB as bf16, the weights the GPU holds anyway: to_bf16.py rounds as
# the GPU upload does), so it travels in parts, one per call, which wait in build-gpu/ (ignored
# paths stay on the device between calls) until the last arrives; then the model is put
# together as models/smollm2-135m-instruct/ there (ignored too, so it stays).
#
# Here:   bash scripts/device-model.sh pack        .device-model/: part-NN (60 MiB each) and SHA256SUMS
#         bash scripts/device-tree.sh hide-all     only scripts/ travels besides what is carried
#         then one `run` per part: carry [".device-model/part-NN", ".device-model/SHA256SUMS"],
#           command `bash scripts/device-model.sh receive`
#         bash scripts/device-tree.sh restore
# There:  bash scripts/device-model.sh receive     keeps the carried parts; with all of them,
#                                                  checks and unpacks the model; says what is missing
#         bash scripts/device-model.sh status      whether the model is there
set -euo pipefail
cd "$(dirname "$0")/.."
model=models/smollm2-135m-instruct
here=.device-model
there=build-gpu/device-model

case "${1:-}" in
  pack)
    [ -f $model/.complete ] || bash scripts/models/smollm2.sh
    rm -rf $here && mkdir -p $here/bf16/smollm2-135m-instruct
    .cache/models-venv/bin/python scripts/models/to_bf16.py $model $here/bf16/smollm2-135m-instruct
    tar -C $here/bf16 -cf $here/model.tar smollm2-135m-instruct
    split -b 60M -d $here/model.tar $here/part-
    rm -rf $here/bf16 $here/model.tar
    (cd $here && sha256sum part-* > SHA256SUMS)
    echo "device-model: $(ls $here/part-* | wc -l) parts in $here/:"; cat $here/SHA256SUMS
    ;;
  receive)
    [ -f $here/SHA256SUMS ] || { echo "device-model: no $here/SHA256SUMS carried" >&2; exit 2; }
    mkdir -p $there
    cp $here/SHA256SUMS $there/
    for p in $here/part-*; do [ -f "$p" ] && cp "$p" $there/ && echo "device-model: kept $(basename "$p")"; done
    missing=$(cd $there && while read -r _ f; do [ -f "$f" ] || echo "$f"; done < SHA256SUMS)
    if [ -n "$missing" ]; then echo "device-model: still missing:" $missing; exit 0; fi
    (cd $there && sha256sum -c --quiet SHA256SUMS) || { echo "device-model: a part is damaged" >&2; exit 1; }
    rm -rf $model && mkdir -p models
    cat $(awk '{print "'$there'/" $2}' $there/SHA256SUMS) | tar -C models -xf -
    echo "device-model: $model is there ($(du -sh $model | cut -f1))"
    ;;
  status)
    if [ -f $model/.complete ]; then echo "device-model: $model is there"; else echo "device-model: $model is missing"; exit 1; fi
    ;;
  *) echo "usage: $0 pack|receive|status" >&2; exit 2 ;;
esac
