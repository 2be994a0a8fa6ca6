// SPDX-License-Identifier: Apache-2.0
// JitEngine: the one thin layer over LLVM 19 ORC (LLJIT on JITLink) that ShapeVM uses. It builds
// code for the host CPU and its features (AVX-512 when present), runs the O3 pipeline on each
// kernel module, and gives every kernel version its own ResourceTracker so it can be removed.
// Kernels are registered with gdb (JIT loader interface) and, when asked, perf (jitdump).
// Invariant: nothing outside this file and codegen sees LLVM's generality; callers get a
// KernelHandle (address + symbol) and hand it back to remove() once no frame can run it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "shapevm/status.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace shapevm::jit {

struct EngineOptions {
  bool debugger_support = true;  // register objects with gdb's JIT interface
  bool perf_support = false;     // write a perf jitdump (perf inject --jit)
  int opt_level = 3;             // IR pipeline O0..O3
};

struct KernelHandle {
  std::uint64_t id = 0;          // engine-wide kernel version id
  void* address = nullptr;
  std::string symbol;            // e.g. "svm_matmul_f32_Mdyn_K128_N1024_v3"
};

class JitEngine {
 public:
  static Expected<std::unique_ptr<JitEngine>> create(EngineOptions options = {});
  ~JitEngine();
  JitEngine(const JitEngine&) = delete;
  JitEngine& operator=(const JitEngine&) = delete;

  // Host description, e.g. "znver4 +avx512f +avx512bw ..." (features that are on).
  const std::string& cpuName() const;
  const std::string& cpuFeatures() const;
  bool hasAvx512() const;

  // Builds a kernel: `build` fills a fresh module (in a fresh context) with a function named
  // `symbol`; the engine sets the host triple/data layout, verifies, optimizes and links it.
  // The returned handle's address stays valid until remove(handle).
  Expected<KernelHandle> compile(const std::string& symbol,
                                 const std::function<Status(llvm::Module&)>& build);
  // Frees a kernel's code. The caller guarantees no frame can still be executing it.
  Status remove(const KernelHandle& handle);
  std::size_t liveKernels() const;

 private:
  struct Impl;
  explicit JitEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shapevm::jit
