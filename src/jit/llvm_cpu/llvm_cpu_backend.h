// SPDX-License-Identifier: Apache-2.0
// The LLVM CPU backend: KernelBackend over one JitEngine (LLVM ORC, x86-64). Its kernel families
// implement LlvmKernelEmitter next to KernelFamily; it compiles a spec by emitting the family's IR
// into a fresh module for the engine's CPU. Host features are this backend's decision: the CPU
// it compiles for (EngineOptions::cpu, $SHAPEVM_JIT_CPU, else the host) fixes the KernelTarget
// it stamps into specs, so a family's plan never asks the host CPU itself. Compiled code is a
// relocatable object: what a kernel cache keeps (codeBytes) and links back (codeFromBytes).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "jit/backend.h"
#include "jit/llvm_cpu/engine.h"

namespace llvm {
class Module;
}  // namespace llvm

namespace shapevm::jit {

// The LLVM code generator of a kernel family (implemented by the same singleton).
class LlvmKernelEmitter {
 public:
  virtual ~LlvmKernelEmitter() = default;
  // Emits `void <symbol>(ptr args)` into `module` for a spec the family supports (stamped with
  // the backend's target: KernelSpec::target).
  virtual Status emit(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) const = 0;
};

class LlvmCpuBackend final : public KernelBackend {
 public:
  static Expected<std::unique_ptr<LlvmCpuBackend>> create(EngineOptions options = {});

  const BackendCapabilities& capabilities() const override { return capabilities_; }
  const CostHints& costHints() const override { return cost_hints_; }
  Status supportsFamily(const KernelFamily& family) const override;
  Expected<std::unique_ptr<KernelCode>> compile(const KernelFamily& family, const KernelSpec& spec,
                                                const std::string& symbol) override;
  Expected<KernelHandle> load(std::unique_ptr<KernelCode> code) override;
  void launch(const KernelHandle& handle, const KernelArgs& args) const override {
    reinterpret_cast<GeneratedKernelFn>(handle.address)(&args);
  }
  Status free(const KernelHandle& handle) override;
  std::size_t liveKernels() const override;
  // The engine's (compiler, CPU, features) and the caches the plans' blocking derives from.
  std::string codeIdentity() const override;
  std::string_view codeBytes(const KernelCode& code) const override { return engine_->objectBytes(code); }
  Expected<std::unique_ptr<KernelCode>> codeFromBytes(const std::string& symbol,
                                                      std::string_view bytes) const override {
    return engine_->objectCode(symbol, bytes);
  }
  std::uint64_t codegens() const override { return engine_->codegens(); }
  double threadLibraryCodegenMs() const override;
  // The library kernels (impl=onednn) loaded now, by symbol, and oneDNN's primitive cache.
  std::string statsReport() const override;

  // The engine underneath (hand-built IR: tests, the bench's FMA peak).
  JitEngine& engine() { return *engine_; }

 private:
  explicit LlvmCpuBackend(std::unique_ptr<JitEngine> engine);
  std::unique_ptr<JitEngine> engine_;
  mutable std::mutex library_mutex_;
  std::map<std::uint64_t, std::string> library_kernels_;  // loaded library kernels: handle id -> symbol
  BackendCapabilities capabilities_;
  CostHints cost_hints_;
};

// The KernelTarget of the LLVM CPU backend's default CPU ($SHAPEVM_JIT_CPU, else the host),
// resolved once per process: what an unstamped KernelSpec (KernelTarget::known() false) means.
const KernelTarget& defaultKernelTarget();
// spec.target when the spec was stamped, else defaultKernelTarget(). Families read this.
const KernelTarget& targetOf(const KernelSpec& spec);

}  // namespace shapevm::jit
