// SPDX-License-Identifier: Apache-2.0
// Whether this build compiles in the interpreter's trace and debug hooks. CMake's
// SHAPEVM_TRACE_HOOKS=OFF defines SHAPEVM_TRACE_HOOKS as 0 for svm_support, svm_vm and svm_debug
// (only the files that include this header read it): the per-instruction debugger test and the
// per-op and per-run timeline checks are compiled out, trace::start() and the debugger refuse.
// The OFF build exists to measure what the hooks cost while they are off (bench/trace_overhead.py,
// BENCHMARKS.md); CI never builds it.
#pragma once

#ifndef SHAPEVM_TRACE_HOOKS
#define SHAPEVM_TRACE_HOOKS 1
#endif

namespace shapevm::trace {
inline constexpr bool kHooksCompiledIn = SHAPEVM_TRACE_HOOKS != 0;
}  // namespace shapevm::trace
