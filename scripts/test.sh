#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds ShapeVM and runs the whole test suite with ctest (GoogleTest per layer, ONNX node
# conformance, golden and must-fail corpora, CLI and numpy-oracle tests).
# Usage: scripts/test.sh [--asan]   (--asan: the same suite under ASan+UBSan)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
build=build
if [ "${1:-}" = "--asan" ]; then build=build-asan; fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
