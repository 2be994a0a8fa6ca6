#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds ShapeVM into build/ (or build-asan/ with --asan: ASan+UBSan, tests only).
# Usage: scripts/build.sh [--asan]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
build=build
extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "${1:-}" = "--asan" ]; then
  build=build-asan
  extra=(-DCMAKE_BUILD_TYPE=Debug -DSHAPEVM_SANITIZE=ON -DSHAPEVM_BUILD_BENCH=OFF)
fi
cmake -S . -B "$build" -G Ninja -DPython3_EXECUTABLE=/usr/bin/python3 "${extra[@]}"
cmake --build "$build" -j "$(nproc)"
