// SPDX-License-Identifier: Apache-2.0
// JitEngine: the one thin layer over LLVM 19 ORC (LLJIT on JITLink) that the LLVM CPU backend
// uses. It builds code for one x86-64 CPU and its features (the host's by default; another named
// CPU, e.g. "haswell", from EngineOptions::cpu or $SHAPEVM_JIT_CPU), runs the kernel pass
// pipeline (jit_opt_pipeline) on each kernel module, compiles it to a relocatable object, and links every kernel
// version into its own JITDylib so it can be removed (and so one object can be linked more than once). Objects come
// from build() + emitObject() or from bytes a kernel cache kept (objectCode()).
// Kernels are registered with gdb (JIT loader interface) and, when asked, perf (jitdump).
// Invariant: nothing outside this file and codegen sees LLVM's generality; callers get a
// KernelHandle (address + symbol) and hand it back to remove() once no frame can run it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "jit/backend.h"
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
  // The CPU to compile for, an LLVM x86 CPU name ("haswell", "skylake-avx512"); empty: the
  // SHAPEVM_JIT_CPU environment variable, else the host CPU with the host's features.
  std::string cpu;
  // Allow a named CPU with vector features the host lacks (compile-only: its kernels must not
  // run here). Off: such a CPU is an error when the engine is created.
  bool allow_foreign_cpu = false;
};

// The CPU a JitEngine compiles for: its LLVM name and the features that are on ("+avx2" style).
struct CpuTarget {
  std::string name;
  std::vector<std::string> features;         // each with its leading '+'
  bool host = true;                          // detected (not named by an option or the environment)
  bool has(std::string_view feature) const;  // feature without '+', e.g. "avx512f"
};
// The CPU for `cpu` as EngineOptions::cpu reads it (empty: $SHAPEVM_JIT_CPU, else the host).
// Error for a name LLVM does not know, or (unless `allow_foreign`) one needing vector features
// this host lacks.
Expected<CpuTarget> resolveCpuTarget(const std::string& cpu, bool allow_foreign = false);
// The kernel-facing description of a CPU: vector width and registers, bf16 dot products.
KernelTarget kernelTargetOf(const CpuTarget& cpu);

// Marks a module whose loops the code generator vectorized by hand or left as emitted
// (ir::LoopHints::asEmitted() on every loop): build() runs the shorter hand-vectorized pipeline on
// it (no loop vectorizer, no induction-variable rewriting), when the kernel pipeline is on, and
// emitObject() builds its machine code without loop strength reduction (its address arithmetic is
// already per loop as emitted) and without the post-RA list scheduler: together ~1/4 of the
// backend's time on a matmul kernel, with its speed unchanged (BENCHMARKS.md, "Cold compile cost,
// round 4").
void markHandVectorized(llvm::Module& module);

// Marks a module whose loops are bound by memory traffic, not by their address arithmetic (the
// elementwise family: a few loads, one store and a few operations per element): emitObject()
// builds its machine code without the backend passes a hand-vectorized module skips (loop
// strength reduction was ~1/5 of a small elementwise kernel's compile); its IR pipeline is the
// kernel pipeline, loop vectorizer included. BENCHMARKS.md, "The per-compile floor".
void markMemoryBound(llvm::Module& module);

class JitEngine {
 public:
  static Expected<std::unique_ptr<JitEngine>> create(EngineOptions options = {});
  ~JitEngine();
  JitEngine(const JitEngine&) = delete;
  JitEngine& operator=(const JitEngine&) = delete;

  // Target description, e.g. "znver4" and "avx512f avx512bw ..." (features that are on).
  const std::string& cpuName() const;
  const std::string& cpuFeatures() const;
  const CpuTarget& cpu() const;
  bool hasAvx512() const;

  // Builds a kernel: `build` fills a fresh module (in a fresh context) with a function named
  // `symbol`; the engine sets the triple/data layout and target CPU, verifies and optimizes it.
  Expected<std::unique_ptr<KernelCode>> build(const std::string& symbol,
                                              const std::function<Status(llvm::Module&)>& build);
  // Compiles built code (from build()) to a relocatable object for this engine's target; object
  // code is returned as it is. Counted in codegens().
  Expected<std::unique_ptr<KernelCode>> emitObject(std::unique_ptr<KernelCode> code);
  // The object file's bytes of object code (from emitObject() or objectCode()); empty otherwise.
  std::string_view objectBytes(const KernelCode& code) const;
  // Object code from bytes (a cached object): error unless they are an object file for this
  // engine's architecture that defines `symbol`.
  Expected<std::unique_ptr<KernelCode>> objectCode(const std::string& symbol, std::string_view bytes) const;
  // What fixes the machine code this engine emits for a given IR: LLVM version, target triple,
  // CPU, its features, the optimization level, and the IR pipeline and backend level that
  // jit_opt_pipeline and jit_codegen_level set now (a kernel cache keys its objects with it).
  const std::string& codeIdentity() const;
  // Links code (from build(), emitObject() or objectCode(); built code is compiled first) into a
  // fresh JITDylib, so versions of one symbol coexist (their handles differ by id). The returned
  // handle's address stays valid until remove(handle).
  Expected<KernelHandle> link(std::unique_ptr<KernelCode> code);
  // build() then link().
  Expected<KernelHandle> compile(const std::string& symbol, const std::function<Status(llvm::Module&)>& build);
  // Frees a kernel's code. The caller guarantees no frame can still be executing it.
  Status remove(const KernelHandle& handle);
  std::size_t liveKernels() const;
  // IR modules compiled to machine code so far (emitObject() of built code; link() of built code).
  std::uint64_t codegens() const;
  // Backend passes left out of codegens so far (a hand-vectorized or memory-bound module's machine
  // code is built without loop strength reduction and the post-RA scheduler; see
  // markHandVectorized, markMemoryBound).
  std::uint64_t codegenPassesSkipped() const;
  // On (the default): hand-vectorized and memory-bound modules skip those passes. Off: every
  // module gets every pass (for the matmul-codegen bench's comparison; objects built off are not
  // told apart in codeIdentity(), so a process with a kernel cache keeps it on).
  void setSkipHandVectorizedPasses(bool skip);

 private:
  struct Impl;
  explicit JitEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shapevm::jit
