#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds ShapeVM into build/ (or build-asan/ with --asan: ASan+UBSan, tests only;
# or build-tsan/ with --tsan: ThreadSanitizer, only the JIT's test binary, whose tests run the
# compile thread beside the interpreter).
# Usage: scripts/build.sh [--asan|--tsan]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
build=build
extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
targets=()
case "${1:-}" in
  --asan)
    build=build-asan
    extra=(-DCMAKE_BUILD_TYPE=Debug -DSHAPEVM_SANITIZE=ON -DSHAPEVM_BUILD_BENCH=OFF) ;;
  --tsan)
    build=build-tsan
    extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHAPEVM_TSAN=ON -DSHAPEVM_BUILD_BENCH=OFF)
    targets=(--target svm_jit_tests) ;;
  "") ;;
  *) echo "usage: scripts/build.sh [--asan|--tsan]" >&2; exit 2 ;;
esac
cmake -S . -B "$build" -G Ninja -DPython3_EXECUTABLE=/usr/bin/python3 "${extra[@]}"
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
