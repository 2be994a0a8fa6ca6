#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds ShapeVM (scripts/build.sh, same options) and runs its tests with ctest (GoogleTest per
# layer, JIT kernels and tiering, ONNX node conformance, golden and must-fail corpora, CLI and
# numpy-oracle tests, the layering check).
# Usage: scripts/test.sh [--asan|--tsan|--release|--clang] [--build-type TYPE] [--werror]
#   (default), --clang: the whole suite
#   --asan:    the same suite under ASan+UBSan
#   --tsan:    the threaded code's tests (JIT compile thread + interpreter threads, the thread
#              pool) under ThreadSanitizer
#   --release: the C++ unit tests of every layer (GoogleTest), against the Release build
set -euo pipefail
cd "$(dirname "$0")/.."
mode=""
for arg in "$@"; do
  case "$arg" in --asan|--tsan|--release|--clang) mode="$arg" ;; esac
done
# --release runs only the layers' GoogleTests, so only their executables are built at -O3.
if [ "$mode" = "--release" ]; then bash scripts/build.sh "$@" --layer-tests; else bash scripts/build.sh "$@"; fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
case "$mode" in
  --asan) ctest --test-dir build-asan --output-on-failure -j "$(nproc)" ;;
  --tsan)
    # halt_on_error: any race fails the run. LLVM's own (uninstrumented) internals are not checked.
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
    build-tsan/tests/svm_support_tests --gtest_filter='ThreadPool*:CpuCoresTest*'
    # Shutdown: tuning cancelled mid-flight on the compile thread, a Session destroyed meanwhile;
    # eight threads on one O2 Session and parallel Sessions while kernels install; a warm start
    # (its watchdog thread) and the tuning thread beside the compile thread.
    build-tsan/tests/svm_tune_tests --gtest_filter='AutoTunerTest.Shutdown*'
    build-tsan/tests/svm_session_tests --gtest_filter='SessionTest.Destroyed*:SessionConcurrency.*:WarmStartTest.*'
    build-tsan/tests/svm_jit_tests --gtest_filter='Tiering*:JitEngine*:ShapeInfer*:HotPath*:FusionTest.Lstm*:FusionTest.Declines*:FusionTest.MatmulRegionWithVarying*:*Thread*:PackedWeights*:SettledScan*:LaunchArgsCache*:FirstSight*:TierPriority*' ;;
  --release)
    # Every GoogleTest of the layer executables (labelled by folder); not pytest, conformance or bench.
    ctest --test-dir build-release --output-on-failure -j "$(nproc)" \
      -L '^(support|tensor|ops|bytecode|vm|frontend|jit|tune|session)$' ;;
  --clang) ctest --test-dir build-clang --output-on-failure -j "$(nproc)" ;;
  *) ctest --test-dir build --output-on-failure -j "$(nproc)" ;;
esac
