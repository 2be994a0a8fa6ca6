// SPDX-License-Identifier: Apache-2.0
// LlvmCpuBackend: capabilities and cost hints from the engine's CPU and the host's caches (which
// the KernelTarget it stamps carries to the families' plans), compile = emit the family's
// IR + optimize (JitEngine::build) + codegen to an object (emitObject), load = link
// (JitEngine::link), free = remove its JITDylib.
#include "jit/llvm_cpu/llvm_cpu_backend.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "jit/llvm_cpu/library_cache.h"
#include "jit/llvm_cpu/library_onednn.h"
#include "support/cpu_caches.h"

namespace shapevm::jit {

namespace {

// Without a clock measurement, peak estimates assume this core clock (the AutoTuner measures).
constexpr double kNominalGhz = 3.0;
// FMA units per core on the x86-64 cores LLVM targets with AVX2 or AVX-512.
constexpr int kFmaUnits = 2;

// The host's caches into a target: what the matmul family's blocking reads (its L3 share per CPU).
KernelTarget withHostCaches(KernelTarget target) {
  const CpuCaches& caches = hostCpuCaches();
  target.l1d_bytes = caches.l1d_bytes;
  target.l2_bytes = caches.l2_bytes;
  target.l3_bytes = caches.l3PerCpu();
  return target;
}

}  // namespace

std::string CostHints::toString() const {
  const CpuCaches caches{l1_bytes, l2_bytes, l3_bytes, l3_sharing, {}};
  std::string text = caches.toString();
  text.resize(text.rfind(" ("));  // no sources
  return fmt::format("peak {:.1f} GFLOP/s, {}, {} cores", peak_gflops, text, cores);
}

bool BackendCapabilities::hasFeature(std::string_view feature) const {
  std::string_view rest = features;
  while (!rest.empty()) {
    const std::size_t space = rest.find(' ');
    if (rest.substr(0, space) == feature) return true;
    if (space == std::string_view::npos) break;
    rest.remove_prefix(space + 1);
  }
  return false;
}

bool BackendCapabilities::computesNatively(DType dtype) const {
  return std::find(native_dtypes.begin(), native_dtypes.end(), dtype) != native_dtypes.end();
}

std::string BackendCapabilities::toString() const {
  std::string dtypes;
  for (DType dtype : native_dtypes) dtypes += (dtypes.empty() ? "" : " ") + std::string(dtypeShortName(dtype));
  return fmt::format("{} {} ({}): {}-bit vectors x {} registers, bf16 dot products {}, native dtypes {}", backend,
                     target, device.toString(), isa.vector_bits, isa.vector_registers, isa.bf16_dot ? "yes" : "no",
                     dtypes);
}

Expected<std::unique_ptr<LlvmCpuBackend>> LlvmCpuBackend::create(EngineOptions options) {
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<JitEngine> engine, JitEngine::create(std::move(options)));
  return std::unique_ptr<LlvmCpuBackend>(new LlvmCpuBackend(std::move(engine)));
}

LlvmCpuBackend::LlvmCpuBackend(std::unique_ptr<JitEngine> engine) : engine_(std::move(engine)) {
  const CpuTarget& cpu = engine_->cpu();
  capabilities_.backend = "llvm-cpu";
  capabilities_.device = kCpuDevice;
  capabilities_.target = engine_->cpuName();
  capabilities_.features = engine_->cpuFeatures();
  capabilities_.isa = kernelTargetOf(cpu);
  capabilities_.native_dtypes = {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool};
  if (capabilities_.isa.bf16_dot) capabilities_.native_dtypes.push_back(DType::BFloat16);
  if (cpu.has("avx512fp16")) capabilities_.native_dtypes.push_back(DType::Float16);

  cost_hints_.peak_gflops = capabilities_.isa.floatLanes() * 2.0 * kFmaUnits * kNominalGhz;
  const CpuCaches& caches = hostCpuCaches();
  cost_hints_.l1_bytes = caches.l1d_bytes;
  cost_hints_.l2_bytes = caches.l2_bytes;
  cost_hints_.l3_bytes = caches.l3_bytes;
  cost_hints_.l3_sharing = caches.l3_sharing;
  capabilities_.isa = withHostCaches(capabilities_.isa);
  cost_hints_.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::string LlvmCpuBackend::codeIdentity() const {
  const KernelTarget& isa = capabilities_.isa;
  if (engine_->codeIdentity().empty()) return {};  // never cached
  return fmt::format("{} caches {}/{}/{}", engine_->codeIdentity(), isa.l1d_bytes, isa.l2_bytes, isa.l3_bytes);
}

Status LlvmCpuBackend::supportsFamily(const KernelFamily& family) const {
  if (dynamic_cast<const LlvmKernelEmitter*>(&family) != nullptr) return Status::ok();
  return makeError(ErrorCode::Unsupported, "the llvm-cpu backend has no code generator for kernel family '{}'",
                   family.name());
}

Expected<std::unique_ptr<KernelCode>> LlvmCpuBackend::compile(const KernelFamily& family, const KernelSpec& spec,
                                                              const std::string& symbol) {
  const auto* emitter = dynamic_cast<const LlvmKernelEmitter*>(&family);
  if (emitter == nullptr) return supportsFamily(family);
  if (spec.target != capabilities_.isa) {
    return makeError(ErrorCode::Internal, "spec for '{}' targets another CPU than the backend's ({})", symbol,
                     capabilities_.target);
  }
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<KernelCode> built, engine_->build(symbol, [&](llvm::Module& module) {
    return emitter->emit(spec, module, symbol);
  }));
  return engine_->emitObject(std::move(built));
}

Expected<KernelHandle> LlvmCpuBackend::load(std::unique_ptr<KernelCode> code) {
  SVM_ASSIGN_OR_RETURN(KernelHandle handle, engine_->link(std::move(code)));
  if (onednn::isLibrarySymbol(handle.symbol)) {
    const std::lock_guard<std::mutex> lock(library_mutex_);
    library_kernels_[handle.id] = handle.symbol;
  }
  return handle;
}

Status LlvmCpuBackend::free(const KernelHandle& handle) {
  {
    const std::lock_guard<std::mutex> lock(library_mutex_);
    library_kernels_.erase(handle.id);
  }
  return engine_->remove(handle);
}

double LlvmCpuBackend::threadLibraryCodegenMs() const {
  return library::threadCreateMs();
}

std::string LlvmCpuBackend::statsReport() const {
  const onednn::LibraryStats library = onednn::stats();
  std::vector<std::string> symbols;
  {
    const std::lock_guard<std::mutex> lock(library_mutex_);
    for (const auto& [id, symbol] : library_kernels_) symbols.push_back(symbol);
  }
  if (symbols.empty() && library.primitives == 0) return {};
  std::sort(symbols.begin(), symbols.end());
  std::string text = fmt::format("jit: library kernels (impl=onednn): {} loaded{}{}\n", symbols.size(),
                                 symbols.empty() ? "" : ": ", fmt::join(symbols, ", "));
  text += fmt::format(
      "jit: oneDNN (process-wide, tuning included): {} primitives created in {:.1f} ms, {} calls ({} finished by a "
      "generated tail, impl=onednn+tail; {} read a weight packed once, in {} packings), {} failed at run time "
      "(computed by the fallback loop)\n",
      library.primitives, library.create_ms, library.calls, library.tail_calls, library.packed_calls, library.b_packs,
      library.run_failures);
  return text;
}

std::size_t LlvmCpuBackend::liveKernels() const {
  return engine_->liveKernels();
}

const KernelTarget& defaultKernelTarget() {
  static const KernelTarget target = [] {
    // The same CPU JitEngine::create picks with default options; a bad $SHAPEVM_JIT_CPU falls
    // back to the host here (the engine reports the error when it is created).
    Expected<CpuTarget> cpu = resolveCpuTarget("");
    if (!cpu) cpu = resolveCpuTarget("host");
    return withHostCaches(kernelTargetOf(*cpu));
  }();
  return target;
}

const KernelTarget& targetOf(const KernelSpec& spec) {
  return spec.target.known() ? spec.target : defaultKernelTarget();
}

}  // namespace shapevm::jit
