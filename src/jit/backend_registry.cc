// SPDX-License-Identifier: Apache-2.0
// The backend table: every KernelBackend the JIT can create, by name. The backend-neutral JIT
// (jit.cc) creates its backend only through createBackend(); this file is the one place that
// includes a backend's own header.
#include <fmt/format.h>

#include "jit/backend.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"

namespace shapevm::jit {
namespace {

Expected<std::unique_ptr<KernelBackend>> createLlvmCpu(const BackendOptions& options) {
  EngineOptions engine;
  engine.cpu = options.target;
  engine.debugger_support = options.debugger_support;
  engine.perf_support = options.perf_support;
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<LlvmCpuBackend> backend, LlvmCpuBackend::create(engine));
  return std::unique_ptr<KernelBackend>(std::move(backend));
}

constexpr BackendInfo kBackends[] = {
    {"llvm-cpu", "LLVM 19 ORC JIT for this x86-64 CPU (or the one SHAPEVM_JIT_CPU names)", &createLlvmCpu},
};

}  // namespace

std::span<const BackendInfo> backends() {
  return kBackends;
}

Expected<std::unique_ptr<KernelBackend>> createBackend(const BackendOptions& options) {
  std::string known;
  for (const BackendInfo& row : kBackends) {
    if (row.name == options.name) return row.create(options);
    known += fmt::format("{}'{}'", known.empty() ? "" : ", ", row.name);
  }
  return makeError(ErrorCode::InvalidArgument, "unknown JIT backend '{}' (known: {})", options.name, known);
}

}  // namespace shapevm::jit
