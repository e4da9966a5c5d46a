#!/usr/bin/env bash
# Fetches (here, where apt works) the .deb files of the header-only and small -dev packages
# that scripts/gpu-check.sh unpacks on a GPU machine without them, into .devdeps/ (ignored
# by git; carry it to the GPU machine with the working tree).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .devdeps
cd .devdeps
apt-get download nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libpcre2-dev libpcre2-8-0 \
  libgtest-dev libgmock-dev libcpp-httplib-dev libcpp-httplib0.11 2>&1 | grep -v "unsandboxed" || true
ls -la
