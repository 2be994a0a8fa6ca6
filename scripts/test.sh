#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds ShapeVM and runs the whole test suite with ctest (GoogleTest per layer, JIT kernels and
# tiering, ONNX node conformance, golden and must-fail corpora, CLI and numpy-oracle tests).
# Usage: scripts/test.sh [--asan|--tsan]
#   --asan: the same suite under ASan+UBSan
#   --tsan: the JIT tests (compile thread + interpreter threads) under ThreadSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
case "${1:-}" in
  --asan) ctest --test-dir build-asan --output-on-failure -j "$(nproc)" ;;
  --tsan)
    # halt_on_error: any race fails the run. LLVM's own (uninstrumented) internals are not checked.
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
      build-tsan/tests/svm_jit_tests --gtest_filter='Tiering*:JitEngine*:ShapeInfer*:HotPath*:FusionTest.Lstm*:FusionTest.Declines*:FusionTest.MatmulRegionWithVarying*:*Thread*:PackedWeights*' ;;
  *) ctest --test-dir build --output-on-failure -j "$(nproc)" ;;
esac
