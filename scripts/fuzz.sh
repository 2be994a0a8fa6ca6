#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs one libFuzzer target (fuzz/README.md) for SECONDS, from its seed corpora, with ASan+UBSan.
# Builds build-fuzz/ first (clang 19 + compiler-rt, the interpreter-only libraries the target
# needs; tuning_db also builds the JIT). New corpus entries go to build-fuzz/corpus/TARGET; a crash
# leaves build-fuzz/findings/TARGET/crash-*, which belongs in fuzz/regressions/TARGET once fixed.
# Usage: scripts/fuzz.sh TARGET SECONDS [extra libFuzzer flags]
#   TARGET: svm | svasm | frontend | npy | onnx | tuning_db
# Environment: FUZZ_JOBS=N runs N libFuzzer workers (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags]   (TARGET: svm svasm frontend npy onnx tuning_db)"
target="${1:?$usage}"
seconds="${2:?$usage}"
shift 2
case "$target" in
  svm) seeds=(fuzz/corpus/svm) ;;
  svasm) seeds=(examples tests/must_fail tests/golden) ;;
  frontend) seeds=(tests/frontend_corpus fuzz/corpus/frontend examples) ;;
  npy) seeds=(fuzz/corpus/npy) ;;
  onnx) seeds=(fuzz/corpus/onnx) ;;
  tuning_db) seeds=(fuzz/corpus/tuning_db) ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
if [ -d "fuzz/regressions/$target" ]; then seeds+=("fuzz/regressions/$target"); fi
jit=OFF
if [ "$target" = tuning_db ]; then jit=ON; fi
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE=/usr/bin/python3 \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 -DSHAPEVM_FUZZ=ON -DSHAPEVM_ENABLE_JIT="$jit" \
  -DSHAPEVM_BUILD_TESTS=OFF -DSHAPEVM_BUILD_BENCH=OFF -DSHAPEVM_BUILD_PYTHON=OFF "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "fuzz_$target"
mkdir -p "build-fuzz/corpus/$target" "build-fuzz/findings/$target"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
parallel=()
if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then parallel=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS"); fi
exec "build-fuzz/fuzz/fuzz_$target" "build-fuzz/corpus/$target" "${seeds[@]}" \
  -max_total_time="$seconds" -artifact_prefix="build-fuzz/findings/$target/" -print_final_stats=1 \
  -rss_limit_mb=4096 -malloc_limit_mb=2048 -timeout=10 "${parallel[@]}" "$@"
