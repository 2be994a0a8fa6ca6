#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds ShapeVM. Each kind of build has its own folder, so switching between them
# never reconfigures another and ccache serves each from its own entries:
#   (default)  build/          RelWithDebInfo, GCC
#   --release  build-release/  Release (-O3), what a packager builds
#   --clang    build-clang/    RelWithDebInfo with clang 19 (Debian 12 clang 14 lacks C++20 features used)
#   --asan     build-asan/     Debug with ASan+UBSan, tests only
#   --tsan     build-tsan/     ThreadSanitizer, only the test binaries of the threaded code (the
#                              JIT's, whose tests run the compile thread beside the interpreter, and
#                              support's thread pool, the tuner's and the Session's shutdown)
# --build-type TYPE overrides the folder's CMake build type (Debug, Release, RelWithDebInfo).
# --werror makes warnings errors (SHAPEVM_WERROR=ON); CI=true does too, except for --release.
# --layer-tests builds only the layers' GoogleTest executables (what scripts/test.sh --release runs).
# Usage: scripts/build.sh [--asan|--tsan|--release|--clang] [--build-type TYPE] [--werror] [--layer-tests]
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/build.sh [--asan|--tsan|--release|--clang] [--build-type TYPE] [--werror] [--layer-tests]"
mode=""
build_type=""
werror=""
layer_tests=""
while [ $# -gt 0 ]; do
  case "$1" in
    --asan|--tsan|--release|--clang)
      if [ -n "$mode" ]; then echo "$usage" >&2; exit 2; fi
      mode="$1"; shift ;;
    --build-type) build_type="${2:?$usage}"; shift 2 ;;
    --werror) werror=ON; shift ;;
    --layer-tests) layer_tests=1; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
# CI=true turns -Werror on, except for Release (GCC 12's -O3 false positives); --werror forces it.
if [ -z "$werror" ]; then
  werror=OFF
  if [ "${CI:-}" = "true" ] && [ "$mode" != "--release" ]; then werror=ON; fi
fi
bash scripts/install_deps.sh
build=build
type=RelWithDebInfo
extra=()
targets=()
case "$mode" in
  --release) build=build-release; type=Release ;;
  --clang) build=build-clang; extra=(-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19) ;;
  --asan) build=build-asan; type=Debug; extra=(-DSHAPEVM_SANITIZE=ON -DSHAPEVM_BUILD_BENCH=OFF) ;;
  --tsan)
    build=build-tsan
    extra=(-DSHAPEVM_TSAN=ON -DSHAPEVM_BUILD_BENCH=OFF)
    targets=(--target svm_jit_tests svm_support_tests svm_tune_tests svm_session_tests) ;;
esac
if [ -n "$build_type" ]; then type="$build_type"; fi
if [ -n "$layer_tests" ]; then
  targets=(--target svm_support_tests svm_tensor_tests svm_ops_tests svm_bytecode_tests svm_vm_tests
           svm_frontend_tests svm_jit_tests svm_tune_tests svm_session_tests)
fi
if command -v ccache >/dev/null && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  extra+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build" -G Ninja -DPython3_EXECUTABLE=/usr/bin/python3 -DCMAKE_BUILD_TYPE="$type" \
  -DSHAPEVM_WERROR="$werror" "${extra[@]}"
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
