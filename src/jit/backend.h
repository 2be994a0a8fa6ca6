// SPDX-License-Identifier: Apache-2.0
// KernelBackend: the seam between the backend-neutral JIT (tiering, regions, guards,
// validation, the patch manager, the AutoTuner's driver) and whatever turns a KernelSpec into
// running code. A backend compiles a spec with a family's code generator, loads it, launches it
// on a KernelArgs block, frees it, and says what it can do (capabilities) and how fast (cost
// hints). Invariant: nothing here names LLVM or a device API; a backend's own headers (the LLVM
// CPU backend: llvm_cpu_backend.h) are included only by the code that creates it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jit/kernel_abi.h"
#include "shapevm/status.h"
#include "shapevm/tensor.h"

namespace shapevm::jit {

// What a backend compiles for. `isa` is the part kernel families read (stamped into every
// KernelSpec the backend compiles: KernelSpec::target); the rest describes the target.
struct BackendCapabilities {
  std::string backend;               // "llvm-cpu"
  Device device;                     // where the kernels' operands must live
  std::string target;                // the CPU (or device) it compiles for, e.g. "znver4", "haswell"
  std::string features;              // ISA features that are on, space-separated ("avx2 fma ...")
  KernelTarget isa;                  // vector width, registers, bf16 dot products
  std::vector<DType> native_dtypes;  // dtypes the target computes in natively (others widen)
  // True when `feature` (e.g. "avx512f") is in `features`.
  bool hasFeature(std::string_view feature) const;
  bool computesNatively(DType dtype) const;
  std::string toString() const;  // "llvm-cpu haswell (cpu): 256-bit vectors x 16, ..."
};

// Rough speeds and sizes the tuner and the planner may weigh candidates with. Estimates from the
// target description, not measurements (the AutoTuner measures; these only order and prune).
struct CostHints {
  double peak_gflops = 0;     // one core's float32 FMA peak (estimated, GFLOP/s)
  std::int64_t l1_bytes = 0;  // per-core data caches (support/cpu_caches.h: sysfs, sysconf, fallbacks)
  std::int64_t l2_bytes = 0;
  std::int64_t l3_bytes = 0;     // the shared last level, all of it...
  int l3_sharing = 1;            // ...shared by this many logical CPUs
  int cores = 1;                 // cores a kernel may split its work across
  std::string toString() const;  // "peak 96.0 GFLOP/s, L1d 32 KiB, L2 512 KiB, L3 32 MiB / 2 CPUs, 2 cores"
};

// A kernel that is loaded and callable; owned by its backend until free().
struct KernelHandle {
  std::uint64_t id = 0;     // backend-wide kernel version id
  void* address = nullptr;  // the entry point (CPU: a GeneratedKernelFn)
  std::string symbol;       // e.g. "svm_matmul_f32_Mdyn_K128_N1024" (versions differ by id)
};

// Compiled code that is not yet loaded (a backend-defined object: an optimized module, PTX ...).
class KernelCode {
 public:
  virtual ~KernelCode() = default;
  virtual const std::string& symbol() const = 0;
};

class KernelCache;  // kernel_cache.h: compiled code kept across processes

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  virtual const BackendCapabilities& capabilities() const = 0;
  virtual const CostHints& costHints() const = 0;
  // OK when this backend has a code generator for `family`; else the reason.
  virtual Status supportsFamily(const KernelFamily& family) const = 0;
  // Compiles `spec` (stamped with this backend's target: see targetSpec) with `family`'s code
  // generator into unloaded code whose entry is named `symbol`.
  virtual Expected<std::unique_ptr<KernelCode>> compile(const KernelFamily& family, const KernelSpec& spec,
                                                        const std::string& symbol) = 0;
  // Makes compiled code callable. The handle stays valid until free(handle).
  virtual Expected<KernelHandle> load(std::unique_ptr<KernelCode> code) = 0;
  // Runs a loaded kernel on a prepared argument block (operands on capabilities().device).
  virtual void launch(const KernelHandle& handle, const KernelArgs& args) const = 0;
  // Frees a kernel's code. The caller guarantees no call can still be running it.
  virtual Status free(const KernelHandle& handle) = 0;
  virtual std::size_t liveKernels() const = 0;

  // `spec` as this backend compiles it: its target fields set from capabilities().isa (the
  // families' plans and search spaces read them).
  KernelSpec targetSpec(KernelSpec spec) const {
    spec.target = capabilities().isa;
    return spec;
  }

  // Kernel caching (kernel_cache.h). What besides the spec fixes the code this backend emits
  // (compiler version, target, features); "" = its code is never cached.
  virtual std::string codeIdentity() const { return {}; }
  // The bytes a cache keeps for compiled code (from compile()); empty = none to keep.
  virtual std::string_view codeBytes(const KernelCode& /*code*/) const { return {}; }
  // Compiled code from kept bytes; an error when they are not usable code defining `symbol`.
  virtual Expected<std::unique_ptr<KernelCode>> codeFromBytes(const std::string& symbol,
                                                              std::string_view /*bytes*/) const {
    return makeError(ErrorCode::Unsupported, "this backend keeps no compiled code ('{}')", symbol);
  }
  // Code generations run so far (compiles that did not come from a cache).
  virtual std::uint64_t codegens() const { return 0; }
  // Milliseconds the calling thread has spent so far generating library code outside compile():
  // a library kernel's primitive is created at its first call on a new shape (oneDNN's code
  // generation). An install whose validation made such calls counts that time as codegen, not
  // validation (issue 25: primitive creation counts as compile time).
  virtual double threadLibraryCodegenMs() const { return 0; }
  // Lines for `shapevm run --stats` about this backend's kernels ("" = nothing to add).
  virtual std::string statsReport() const { return {}; }
  void setKernelCache(std::shared_ptr<KernelCache> cache) { cache_ = std::move(cache); }
  KernelCache* kernelCache() const { return cache_.get(); }
  // Kernels whose code came from the kernel cache (counted by compileThroughCache).
  std::uint64_t kernelsFromCache() const { return from_cache_.load(std::memory_order_relaxed); }
  void noteKernelFromCache() { from_cache_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::shared_ptr<KernelCache> cache_;
  std::atomic<std::uint64_t> from_cache_{0};
};

// How the JIT creates its backend (createBackend): which one, and what it compiles for.
struct BackendOptions {
  std::string name = "llvm-cpu";  // a row of the backend table (backends())
  // The target to compile for, in the backend's own terms (llvm-cpu: an LLVM CPU name such as
  // "haswell"); "" = the backend's default (llvm-cpu: $SHAPEVM_JIT_CPU, else the host CPU).
  std::string target;
  bool debugger_support = true;  // make compiled code visible to a debugger (gdb's JIT interface)
  bool perf_support = false;     // and to a profiler (perf jitdump)
};

// One row of the backend table (backend_registry.cc): the only place that names a backend's
// implementation. A new backend is a row here plus its own folder (docs/gpu-backend.md).
struct BackendInfo {
  std::string_view name;
  std::string_view description;
  Expected<std::unique_ptr<KernelBackend>> (*create)(const BackendOptions& options);
};
std::span<const BackendInfo> backends();
// The backend `options.name` names, created for `options`; an unknown name is an error that
// lists the known ones.
Expected<std::unique_ptr<KernelBackend>> createBackend(const BackendOptions& options = {});

}  // namespace shapevm::jit
