#!/usr/bin/env bash
# Builds skim and runs the whole test suite on the CPU (CUDA sources are compiled when nvcc
# is present; GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh "$@"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
