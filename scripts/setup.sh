#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test skim. Idempotent.
#   scripts/setup.sh            build and test dependencies (Debian packages)
#   scripts/setup.sh --fixtures also the Python packages that regenerate the golden fixtures
#                               and run the benchmarks against transformers (torch: several GB)
set -euo pipefail

pkgs=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libcli11-dev libpcre2-dev libfmt-dev
      libopenblas-dev libicu-dev libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev libpng-dev python3
      python3-venv)  # python3-venv: scripts/models/smollm2.sh makes a venv (pip without touching the system)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "${1:-}" = "--fixtures" ]; then
  python3 -m pip install -q torch transformers safetensors tokenizers numpy matplotlib accelerate gguf
fi
echo "setup: ok"
