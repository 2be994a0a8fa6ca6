// SPDX-License-Identifier: Apache-2.0
// Cooperative cancellation of the compile thread's work at shutdown. The Jit's worker installs
// its stop flag for the duration of one request (CompileCancelScope); compileKernel, the region
// compiler's per-kernel compiles and the AutoTuner poll compileCancelled() before every LLVM
// compile, between tuning candidates and inside timing loops. Invariant: cancelled work returns
// an error and writes nothing to any cache; code running outside a scope is never cancelled.
#pragma once

#include <atomic>

namespace shapevm::jit {

namespace detail {
inline thread_local const std::atomic<bool>* compile_cancel_flag = nullptr;
}  // namespace detail

// True when the calling thread's current compile request has been cancelled.
inline bool compileCancelled() {
  const std::atomic<bool>* flag = detail::compile_cancel_flag;
  return flag != nullptr && flag->load(std::memory_order_relaxed);
}

inline constexpr const char* kCompileCancelledMessage = "cancelled: the JIT is shutting down";

// Makes `flag` the calling thread's cancel flag until the scope ends (scopes nest).
class CompileCancelScope {
 public:
  explicit CompileCancelScope(const std::atomic<bool>* flag) : previous_(detail::compile_cancel_flag) {
    detail::compile_cancel_flag = flag;
  }
  ~CompileCancelScope() { detail::compile_cancel_flag = previous_; }
  CompileCancelScope(const CompileCancelScope&) = delete;
  CompileCancelScope& operator=(const CompileCancelScope&) = delete;

 private:
  const std::atomic<bool>* previous_;
};

}  // namespace shapevm::jit
