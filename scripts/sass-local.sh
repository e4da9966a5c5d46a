#!/usr/bin/env bash
# A CUDA file's kernels as SASS, on a machine without a GPU: compiles one .cu for sm_90a with the
# local nvcc, then disassembles it with cuobjdump (fetched once from PyPI's nvidia-cuda-cuobjdump
# and nvidia-cuda-nvdisasm into .cache/cuda-tools/; the toolkit here has nvcc and ptxas only).
# Prints each kernel's registers and spills (ptxas) and its instruction count, then, with KERNEL
# (a regex on the mangled name), that kernel's SASS into OUT (default /tmp/sass-KERNEL.txt) and,
# by bench/sass_loops.py, the instructions that cost (MMAs, memory ops, fences, L1 invalidations,
# integer divisions, barriers) in the whole kernel and in each loop, to compare before and after.
# Session 34 counted ART's loop with it (bench/results/2026-11-29-s34-h200-art-loop/).
#   bash scripts/sass-local.sh src/backend/cuda/art_decode_attention.cu [KERNEL] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?usage: sass-local.sh FILE.cu [KERNEL_REGEX] [OUT]}
KERNEL=${2:-}
TOOLS=.cache/cuda-tools
if [ ! -x $TOOLS/cuobjdump ] || [ ! -x $TOOLS/nvdisasm ]; then  # cuobjdump runs nvdisasm from its folder
  mkdir -p $TOOLS/wheel
  pip download --quiet --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d $TOOLS/wheel
  for w in $TOOLS/wheel/*.whl; do python3 -m zipfile -e "$w" $TOOLS/wheel/x; done
  for tool in cuobjdump nvdisasm; do
    cp "$(find $TOOLS/wheel/x -name $tool -type f | head -1)" $TOOLS/$tool
    chmod +x $TOOLS/$tool
  done
  rm -rf $TOOLS/wheel
fi
CUBIN=/tmp/sass-local.cubin
nvcc -std=c++20 -arch=sm_90a -O3 -Xptxas -v -Isrc -Iinclude -cubin -o $CUBIN "$SRC" 2>&1 |
  grep -E "Compiling entry|Used|spill" | sed -E "s/ptxas info *: //; s/Compiling entry function '([^']*)'.*/\1/"
$TOOLS/cuobjdump -sass $CUBIN > /tmp/sass-local.txt
echo
echo "instructions by kernel:"
awk '/Function :/{name=$3} /^ +\/\*[0-9a-f]+\*\//{n[name]++} END{for (k in n) printf "%6d %s\n", n[k], k}' \
  /tmp/sass-local.txt | sort -k2
if [ -n "$KERNEL" ]; then
  OUT=${3:-/tmp/sass-$(echo "$KERNEL" | tr -c 'A-Za-z0-9_\n' '_').txt}
  awk -v re="$KERNEL" '/Function :/{on = ($3 ~ re)} on' /tmp/sass-local.txt |
    sed -nE 's/^ +\/\*([0-9a-f]+)\*\/ +(.*);.*$/\1 \2/p' > "$OUT"
  echo
  echo "$KERNEL: $OUT (every kernel matching, one after another)"
  python3 bench/sass_loops.py "$OUT"  # the whole kernel, then its loops, with what each holds
fi
