#!/usr/bin/env bash
# Configures and builds skim into build/ (BUILD_DIR to change it; extra args go to CMake).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
