// SPDX-License-Identifier: Apache-2.0
// JitEngine over LLVM ORC: LLJIT (JITLink object layer on x86-64 ELF), a target machine for the
// host CPU or a named one, a short kernel pass pipeline (or LLVM's O3 one: JitOptPipeline = 0) per
// module, codegen to a relocatable object at the jit_codegen_level backend level (target machines
// pooled, one per concurrent codegen), one JITDylib per kernel version.
#include "jit/llvm_cpu/engine.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <span>

#include <llvm/ADT/StringMap.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/Debugging/DebuggerSupport.h>
#include <llvm/ExecutionEngine/Orc/Debugging/PerfSupportPlugin.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/TargetProcess/JITLoaderPerf.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/MCContext.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Pass.h>
#include <llvm/PassInfo.h>
#include <llvm/PassRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SmallVectorMemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/X86TargetParser.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include "support/logging.h"
#include "support/tunables.h"

namespace shapevm::jit {

namespace {

// LLVM 19's perf support writes the jitdump header's 64-bit flags word uninitialized, and `perf
// inject --jit` rejects a dump with reserved flag bits set. Its timestamps are CLOCK_MONOTONIC
// (what `perf record -k 1` uses), i.e. flags 0: rewrite the word in the dump this process has
// mapped (the marker mapping perf finds it by).
void clearJitdumpFlags() {
  std::ifstream maps("/proc/self/maps");
  const std::string suffix = "/jit-" + std::to_string(::getpid()) + ".dump";
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos || line.size() < suffix.size() ||
        line.compare(line.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const int fd = ::open(line.c_str() + slash, O_WRONLY);
    if (fd < 0) return;
    constexpr off_t kFlagsOffset = 32;  // magic, version, total_size, elf_mach, pad, pid (4 each), timestamp (8)
    const std::uint64_t flags = 0;
    (void)::pwrite(fd, &flags, sizeof(flags), kFlagsOffset);
    ::close(fd);
    return;
  }
}

// The IR passes for generated kernels (JitOptPipeline = 1). The code generators emit specialized
// IR with nothing to inline (helpers are noinline), hand-vectorized loops marked not to be
// vectorized or unrolled, and the loops left to the vectorizer marked how (LoopHints in
// codegen_util.h). What that IR needs: its allocas promoted, cleanup, invariant address arithmetic
// hoisted, loops rotated with canonical induction variables (indvars: the matmul's loops), the loop
// vectorizer, then GVN and a last cleanup (without them the elementwise kernels kept a fifth more
// instructions). On the reference workload's kernels this gives O3's instruction counts within 2%
// in 40-65% less IR time (BENCHMARKS.md, "Cold compiles and compile-thread priority").
constexpr const char* kKernelPipeline =
    "function(sroa,early-cse<memssa>,instcombine<no-verify-fixpoint>,simplifycfg,loop-mssa(licm,loop-rotate,licm),"
    "indvars,loop-deletion,loop-vectorize,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,gvn,loop-mssa(licm),"
    "instcombine<no-verify-fixpoint>,simplifycfg)";

// The IR passes for a module marked hand-vectorized (markHandVectorized: the matmul family). Its
// loops are vectorized by hand or left as emitted, so no loop vectorizer; and no IndVarSimplify,
// which was ~40% of the kernel pipeline's time on these kernels and left their machine code time and
// object size within 4% (BENCHMARKS.md, "Cold compile cost, round 3").
constexpr const char* kHandVectorizedPipeline =
    "function(sroa,early-cse<memssa>,instcombine<no-verify-fixpoint>,simplifycfg,loop-mssa(licm,loop-rotate,licm),"
    "loop-deletion,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,gvn,loop-mssa(licm),"
    "instcombine<no-verify-fixpoint>,simplifycfg)";

constexpr const char* kHandVectorizedMark = "shapevm.hand_vectorized";
constexpr const char* kMemoryBoundMark = "shapevm.memory_bound";

// The backend passes a hand-vectorized module's machine code is built without (by their
// PassRegistry argument). A tile's K loop is bound by its FMAs (24 per step for 6 x 64), not by the
// few integer operations of its addresses, so loop strength reduction (with its freeze
// canonicalization, IVUsers and SCEV: ~20% of the backend's time on a matmul kernel) and the post-RA
// list scheduler (~5%) buy it nothing measurable. The pre-RA machine scheduler stays. Measured on
// the matmul kernels: BENCHMARKS.md, "Cold compile cost, round 4".
constexpr std::string_view kHandVectorizedSkippedCodegenPasses[] = {"loop-reduce", "canon-freeze", "post-RA-sched"};

// Which marked modules skip those passes, in codeIdentity() (a kernel cache keeps no object built
// under an earlier rule): 1, hand-vectorized ones only; 2, memory-bound ones too (markMemoryBound);
// 3, and elementwise kernels call their float32 transcendental functions (ir::callElementFunction)
// instead of inlining them in every loop, and build() drops internal functions nothing calls.
constexpr int kBackendPassRule = 3;

// A legacy pass manager that drops the passes named in `skipped` as the target adds them (the
// backend's pass list is fixed by TargetPassConfig; only optional passes may be named).
class SkippingPassManager final : public llvm::legacy::PassManager {
 public:
  explicit SkippingPassManager(std::span<const std::string_view> skipped) : skipped_(skipped) {}
  void add(llvm::Pass* pass) override {
    if (!skipped_.empty()) {
      const llvm::PassInfo* info = llvm::PassRegistry::getPassRegistry()->getPassInfo(pass->getPassID());
      if (info != nullptr &&
          std::find(skipped_.begin(), skipped_.end(), std::string_view(info->getPassArgument())) != skipped_.end()) {
        delete pass;
        ++dropped_;
        return;
      }
    }
    llvm::legacy::PassManager::add(pass);
  }
  std::uint64_t dropped() const { return dropped_; }

 private:
  std::span<const std::string_view> skipped_;
  std::uint64_t dropped_ = 0;
};

Status llvmError(llvm::Error error, std::string_view what) {
  return makeError(ErrorCode::JitError, "{}: {}", what, llvm::toString(std::move(error)));
}

void initializeLlvmOnce() {
  static const bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    return true;
  }();
  (void)initialized;
}

// Vector ISA features: a named CPU may only ask for those the host has (others are tuning flags
// or system features that do not change which instructions run).
bool isVectorFeature(std::string_view feature) {
  for (std::string_view prefix : {"sse", "ssse3", "avx", "fma", "f16c", "amx"}) {
    if (feature.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// Built, optimized IR waiting to be linked: the module and the context that owns it.
class LlvmModuleCode final : public KernelCode {
 public:
  LlvmModuleCode(std::unique_ptr<llvm::LLVMContext> context, std::unique_ptr<llvm::Module> module,
                 llvm::Function* function, std::string symbol, const void* engine)
      : context_(std::move(context)),
        module_(std::move(module)),
        function_(function),
        symbol_(std::move(symbol)),
        engine_(engine) {}
  const std::string& symbol() const override { return symbol_; }

  std::unique_ptr<llvm::LLVMContext> context_;
  std::unique_ptr<llvm::Module> module_;
  llvm::Function* function_;
  std::string symbol_;
  const void* engine_;  // the engine that built it (link() accepts only its own)
};

// A relocatable object defining `symbol` (compiled by emitObject() or read from a cache).
class LlvmObjectCode final : public KernelCode {
 public:
  LlvmObjectCode(std::unique_ptr<llvm::MemoryBuffer> object, std::string symbol, const void* engine)
      : object_(std::move(object)), symbol_(std::move(symbol)), engine_(engine) {}
  const std::string& symbol() const override { return symbol_; }

  std::unique_ptr<llvm::MemoryBuffer> object_;
  std::string symbol_;
  const void* engine_;
};

}  // namespace

void markMemoryBound(llvm::Module& module) {
  module.getOrInsertNamedMetadata(kMemoryBoundMark);
}

void markHandVectorized(llvm::Module& module) {
  module.getOrInsertNamedMetadata(kHandVectorizedMark);
}

bool CpuTarget::has(std::string_view feature) const {
  return std::any_of(features.begin(), features.end(), [&](const std::string& f) {
    return f.size() == feature.size() + 1 && f[0] == '+' && std::string_view(f).substr(1) == feature;
  });
}

Expected<CpuTarget> resolveCpuTarget(const std::string& cpu, bool allow_foreign) {
  std::string name = cpu;
  if (name.empty()) {
    const char* env = std::getenv("SHAPEVM_JIT_CPU");
    if (env != nullptr) name = env;
  }
  CpuTarget target;
  const llvm::StringMap<bool> host_features = llvm::sys::getHostCPUFeatures();
  if (name.empty() || name == "host" || name == "native") {
    target.name = llvm::sys::getHostCPUName().str();
    for (const auto& entry : host_features) {
      if (entry.getValue()) target.features.push_back("+" + entry.getKey().str());
    }
    std::sort(target.features.begin(), target.features.end());
    return target;
  }
  if (llvm::X86::parseArchX86(name, /*Only64Bit=*/true) == llvm::X86::CK_None) {
    return makeError(ErrorCode::InvalidArgument,
                     "SHAPEVM_JIT_CPU / EngineOptions::cpu '{}' is not an x86-64 CPU LLVM knows (e.g. haswell, "
                     "skylake-avx512, znver4, or 'host')",
                     name);
  }
  target.name = name;
  target.host = false;
  llvm::SmallVector<llvm::StringRef, 64> features;
  llvm::X86::getFeaturesForCPU(name, features, /*NeedPlus=*/true);
  for (llvm::StringRef feature : features) target.features.push_back(feature.str());
  std::sort(target.features.begin(), target.features.end());
  if (!allow_foreign) {
    std::string missing;
    for (const std::string& feature : target.features) {
      const std::string bare = feature.substr(1);
      if (!isVectorFeature(bare)) continue;
      auto it = host_features.find(bare);
      if (it == host_features.end() || !it->getValue()) missing += (missing.empty() ? "" : " ") + bare;
    }
    if (!missing.empty()) {
      return makeError(ErrorCode::Unsupported,
                       "JIT target CPU '{}' needs {}, which this host ({}) lacks: its kernels could not run here", name,
                       missing, llvm::sys::getHostCPUName().str());
    }
  }
  return target;
}

KernelTarget kernelTargetOf(const CpuTarget& cpu) {
  KernelTarget target;
  const bool avx512 = cpu.has("avx512f");
  target.vector_bits = avx512 ? 512 : cpu.has("avx") ? 256 : 128;
  target.vector_registers = avx512 ? 32 : 16;
  target.bf16_dot = avx512 && cpu.has("avx512bf16");
  return target;
}

struct JitEngine::Impl {
  EngineOptions options;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> target_machine;  // the feature string (build() takes a pooled one)
  CpuTarget cpu;
  std::string cpu_name;
  std::string cpu_features;
  bool avx512 = false;
  mutable std::mutex mutex;                              // link/remove are serialized (one engine, any thread)
  std::map<std::uint64_t, llvm::orc::JITDylib*> dylibs;  // one per live kernel version
  std::uint64_t next_id = 1;
  // Codegen: target machines are not shared between threads; idle ones wait here for reuse.
  std::unique_ptr<llvm::orc::JITTargetMachineBuilder> machine_builder;
  std::mutex machines_mutex;
  std::vector<std::unique_ptr<llvm::TargetMachine>> idle_machines;
  std::atomic<std::uint64_t> codegens{0};
  std::atomic<std::uint64_t> codegen_passes_skipped{0};
  std::atomic<bool> skip_hand_vectorized_passes{true};
  // What fixes the machine code, per IR pipeline (jit_opt_pipeline) and backend level
  // (jit_codegen_level), at [pipeline * 4 + level]: a kernel cache never hands an object built under
  // one to a process (or a bench configuration) that compiles under another.
  std::array<std::string, 8> code_identity;

  // A target machine of this engine's CPU for one thread's use (a TargetMachine caches subtargets
  // without a lock, so the IR pipeline's TTI and codegen never share one between threads).
  Expected<std::unique_ptr<llvm::TargetMachine>> acquireMachine() {
    {
      std::lock_guard<std::mutex> lock(machines_mutex);
      if (!idle_machines.empty()) {
        std::unique_ptr<llvm::TargetMachine> machine = std::move(idle_machines.back());
        idle_machines.pop_back();
        return machine;
      }
    }
    auto created = machine_builder->createTargetMachine();
    if (!created) return llvmError(created.takeError(), "cannot create a target machine");
    return std::move(*created);
  }
  void releaseMachine(std::unique_ptr<llvm::TargetMachine> machine) {
    std::lock_guard<std::mutex> lock(machines_mutex);
    idle_machines.push_back(std::move(machine));
  }
};

namespace {

// The backend's optimization level for the next codegen (jit_codegen_level).
int codegenLevel() {
  return static_cast<int>(std::clamp<std::int64_t>(Tunables::get(Tunable::JitCodegenLevel), 0, 3));
}

// code_identity's index for the current pipeline and backend level.
std::size_t identityIndex() {
  const std::int64_t pipeline = std::clamp<std::int64_t>(Tunables::get(Tunable::JitOptPipeline), 0, 1);
  return static_cast<std::size_t>(pipeline * 4 + codegenLevel());
}

llvm::CodeGenOptLevel codegenOptLevel(int level) {
  switch (level) {
    case 0: return llvm::CodeGenOptLevel::None;
    case 1: return llvm::CodeGenOptLevel::Less;
    case 2: return llvm::CodeGenOptLevel::Default;
    default: return llvm::CodeGenOptLevel::Aggressive;
  }
}

}  // namespace

JitEngine::JitEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

JitEngine::~JitEngine() {
  if (!impl_) return;
  for (auto& [id, dylib] : impl_->dylibs) llvm::consumeError(impl_->jit->getExecutionSession().removeJITDylib(*dylib));
  impl_->dylibs.clear();
}

Expected<std::unique_ptr<JitEngine>> JitEngine::create(EngineOptions options) {
  initializeLlvmOnce();
  auto impl = std::make_unique<Impl>();
  impl->options = options;

  SVM_ASSIGN_OR_RETURN(impl->cpu, resolveCpuTarget(options.cpu, options.allow_foreign_cpu));
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) return llvmError(jtmb.takeError(), "cannot describe the host CPU");
  if (!impl->cpu.host) {
    // Same triple, another CPU: only the features that CPU has.
    jtmb = llvm::orc::JITTargetMachineBuilder(jtmb->getTargetTriple());
    jtmb->setCPU(impl->cpu.name);
    jtmb->addFeatures(impl->cpu.features);
  }
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  impl->cpu_name = jtmb->getCPU();
  for (const std::string& feature : jtmb->getFeatures().getFeatures()) {
    if (feature.empty() || feature[0] != '+') continue;
    impl->cpu_features += (impl->cpu_features.empty() ? "" : " ") + feature.substr(1);
    if (feature == "+avx512f") impl->avx512 = true;
  }
  auto tm = jtmb->createTargetMachine();
  if (!tm) return llvmError(tm.takeError(), "cannot create a target machine for the host");
  impl->target_machine = std::move(*tm);
  impl->machine_builder = std::make_unique<llvm::orc::JITTargetMachineBuilder>(*jtmb);
  {
    std::vector<std::string> sorted;
    for (std::size_t pos = 0; pos < impl->cpu_features.size();) {
      const std::size_t end = std::min(impl->cpu_features.find(' ', pos), impl->cpu_features.size());
      if (end > pos) sorted.push_back(impl->cpu_features.substr(pos, end - pos));
      pos = end + 1;
    }
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t index = 0; index < impl->code_identity.size(); ++index) {
      const std::size_t pipeline = index / 4, level = index % 4;
      // The defaults (kernel pipeline, level 3) keep the identity they had before these tunables
      // entered it, so existing caches stay warm.
      const std::string variant =
          pipeline == 1 && level == 3 ? std::string() : fmt::format(" pipeline {} codegen {}", pipeline, level);
      std::string& identity = impl->code_identity[index];
      identity =
          fmt::format("llvm {}; {}; cpu {}; O{}{}; backend rule {}; features", LLVM_VERSION_STRING,
                      jtmb->getTargetTriple().str(), impl->cpu_name, options.opt_level, variant, kBackendPassRule);
      for (const std::string& feature : sorted) identity += " " + feature;
    }
  }

  auto jit = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(std::move(*jtmb))
                 .setObjectLinkingLayerCreator([](llvm::orc::ExecutionSession& session, const llvm::Triple&) {
                   return std::make_unique<llvm::orc::ObjectLinkingLayer>(session);
                 })
                 .create();
  if (!jit) return llvmError(jit.takeError(), "cannot create the LLVM ORC JIT");
  impl->jit = std::move(*jit);
  // Kernels may call libm / libmvec and the process's own helpers.
  auto generator = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      impl->jit->getDataLayout().getGlobalPrefix());
  if (!generator) return llvmError(generator.takeError(), "cannot expose process symbols to kernels");
  impl->jit->getMainJITDylib().addGenerator(std::move(*generator));
  if (options.debugger_support) {
    if (llvm::Error error = llvm::orc::enableDebuggerSupport(*impl->jit)) {
      llvm::consumeError(std::move(error));  // gdb registration is best effort (not all builds have it)
    }
  }
  if (options.perf_support) {
    // The plugin looks LLVM's perf registration functions up among the process's global symbols;
    // a process that loaded LLVM privately (the Python extension: RTLD_LOCAL) has them only in
    // the library's own scope, so that library is promoted to global scope first.
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&llvm_orc_registerJITLoaderPerfStart), &info) != 0 &&
        info.dli_fname != nullptr) {
      (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
    }
    auto& object_layer = static_cast<llvm::orc::ObjectLinkingLayer&>(impl->jit->getObjLinkingLayer());
    auto plugin = llvm::orc::PerfSupportPlugin::Create(impl->jit->getExecutionSession().getExecutorProcessControl(),
                                                       impl->jit->getMainJITDylib(), true, true);
    if (plugin) {
      object_layer.addPlugin(std::move(*plugin));
    } else {
      // Profiling support is an extra: kernels still compile, without a jitdump.
      logAt(LogLevel::Warn, "JIT", "jit_perf: no perf jitdump ({}); compiled kernels run without one",
            llvm::toString(plugin.takeError()));
    }
  }
  return std::unique_ptr<JitEngine>(new JitEngine(std::move(impl)));
}

const std::string& JitEngine::cpuName() const { return impl_->cpu_name; }
const std::string& JitEngine::cpuFeatures() const { return impl_->cpu_features; }
const CpuTarget& JitEngine::cpu() const {
  return impl_->cpu;
}
bool JitEngine::hasAvx512() const { return impl_->avx512; }

Expected<KernelHandle> JitEngine::compile(const std::string& symbol, const std::function<Status(llvm::Module&)>& build) {
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<KernelCode> code, this->build(symbol, build));
  return link(std::move(code));
}

Expected<std::unique_ptr<KernelCode>> JitEngine::build(const std::string& symbol,
                                                       const std::function<Status(llvm::Module&)>& build) {
  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>(symbol, *context);
  module->setDataLayout(impl_->jit->getDataLayout());
  module->setTargetTriple(impl_->jit->getTargetTriple().str());
  SVM_RETURN_IF_ERROR(build(*module));
  llvm::Function* function = module->getFunction(symbol);
  if (function == nullptr) return makeError(ErrorCode::JitError, "code generator emitted no function '{}'", symbol);
  // Tune every function for this CPU (the pipeline's TTI and the backend read these).
  for (llvm::Function& f : *module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", impl_->cpu_name);
    f.addFnAttr("target-features", impl_->target_machine->getTargetFeatureString());
  }
  {
    std::string errors;
    llvm::raw_string_ostream os(errors);
    if (llvm::verifyModule(*module, &os)) {
      return makeError(ErrorCode::JitError, "generated IR for '{}' is invalid: {}", symbol, os.str());
    }
  }
  if (impl_->options.opt_level > 0) {
    SVM_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine, impl_->acquireMachine());
    struct Release {  // back to the pool after the analyses that point into it are gone
      Impl* impl;
      std::unique_ptr<llvm::TargetMachine>* machine;
      ~Release() { impl->releaseMachine(std::move(*machine)); }
    } release{impl_.get(), &machine};
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions tuning;
    tuning.LoopVectorization = true;
    tuning.SLPVectorization = true;
    llvm::PassBuilder builder(machine.get(), tuning);
    builder.registerModuleAnalyses(mam);
    builder.registerCGSCCAnalyses(cgam);
    builder.registerFunctionAnalyses(fam);
    builder.registerLoopAnalyses(lam);
    builder.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager passes;
    if (Tunables::get(Tunable::JitOptPipeline) == 1) {
      const char* pipeline = kKernelPipeline;
      if (module->getNamedMetadata(kHandVectorizedMark) != nullptr) pipeline = kHandVectorizedPipeline;
      if (llvm::Error error = builder.parsePassPipeline(passes, pipeline)) {
        return llvmError(std::move(error), "the kernel pass pipeline does not parse");
      }
    } else {
      const llvm::OptimizationLevel level = impl_->options.opt_level >= 3   ? llvm::OptimizationLevel::O3
                                            : impl_->options.opt_level == 2 ? llvm::OptimizationLevel::O2
                                                                            : llvm::OptimizationLevel::O1;
      passes = builder.buildPerModuleDefaultPipeline(level);
    }
    passes.run(*module, mam);
  }
  // Internal functions nothing calls (an element function's vector variants for the lane counts the
  // loop vectorizer did not pick, ir::callElementFunction, kept until now in llvm.compiler.used)
  // are not compiled.
  llvm::removeFromUsedLists(*module, [](llvm::Constant* c) {
    const auto* f = llvm::dyn_cast<llvm::Function>(c->stripPointerCasts());
    return f != nullptr && f->hasLocalLinkage();
  });
  for (bool dropped = true; dropped;) {
    dropped = false;
    for (llvm::Function& f : llvm::make_early_inc_range(*module)) {
      if (&f == function || !f.hasLocalLinkage()) continue;
      f.removeDeadConstantUsers();  // e.g. the used list's old initializer
      if (f.use_empty()) {
        f.eraseFromParent();
        dropped = true;
      }
    }
  }
  return std::unique_ptr<KernelCode>(
      new LlvmModuleCode(std::move(context), std::move(module), function, symbol, impl_.get()));
}

Expected<std::unique_ptr<KernelCode>> JitEngine::emitObject(std::unique_ptr<KernelCode> code) {
  if (auto* object = dynamic_cast<LlvmObjectCode*>(code.get()); object != nullptr && object->engine_ == impl_.get()) {
    return code;
  }
  auto* built = dynamic_cast<LlvmModuleCode*>(code.get());
  if (built == nullptr || built->engine_ != impl_.get() || !built->module_) {
    return makeError(ErrorCode::Internal, "kernel code '{}' was not built by this engine",
                     code ? code->symbol() : std::string("<null>"));
  }
  llvm::Module& module = *built->module_;
  std::span<const std::string_view> skipped;
  for (const char* name : {kHandVectorizedMark, kMemoryBoundMark}) {
    if (llvm::NamedMDNode* mark = module.getNamedMetadata(name); mark != nullptr) {
      module.eraseNamedMetadata(mark);
      if (impl_->skip_hand_vectorized_passes.load(std::memory_order_relaxed))
        skipped = kHandVectorizedSkippedCodegenPasses;
    }
  }
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine, impl_->acquireMachine());
  machine->setOptLevel(codegenOptLevel(codegenLevel()));
  llvm::SmallVector<char, 0> bytes;
  bool unsupported = false;
  {
    llvm::raw_svector_ostream stream(bytes);
    SkippingPassManager passes(skipped);
    llvm::MCContext* context = nullptr;
    unsupported = machine->addPassesToEmitMC(passes, context, stream);
    if (!unsupported) passes.run(module);
    impl_->codegen_passes_skipped.fetch_add(passes.dropped(), std::memory_order_relaxed);
  }
  impl_->releaseMachine(std::move(machine));
  if (unsupported) return makeError(ErrorCode::JitError, "cannot compile kernel '{}': no MC emission", built->symbol());
  auto object = std::make_unique<llvm::SmallVectorMemoryBuffer>(
      std::move(bytes), module.getModuleIdentifier() + "-jitted-objectbuffer", /*RequiresNullTerminator=*/false);
  impl_->codegens.fetch_add(1, std::memory_order_relaxed);
  return std::unique_ptr<KernelCode>(new LlvmObjectCode(std::move(object), built->symbol(), impl_.get()));
}

std::string_view JitEngine::objectBytes(const KernelCode& code) const {
  const auto* object = dynamic_cast<const LlvmObjectCode*>(&code);
  if (object == nullptr || !object->object_) return {};
  const llvm::StringRef bytes = object->object_->getBuffer();
  return std::string_view(bytes.data(), bytes.size());
}

Expected<std::unique_ptr<KernelCode>> JitEngine::objectCode(const std::string& symbol, std::string_view bytes) const {
  std::unique_ptr<llvm::MemoryBuffer> buffer =
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(bytes.data(), bytes.size()), symbol);
  auto file = llvm::object::ObjectFile::createObjectFile(buffer->getMemBufferRef());
  if (!file) return llvmError(file.takeError(), fmt::format("object for '{}' does not parse", symbol));
  const llvm::Triple& triple = impl_->jit->getTargetTriple();
  if ((*file)->getArch() != triple.getArch() || !(*file)->isRelocatableObject()) {
    return makeError(ErrorCode::JitError, "object for '{}' is not a relocatable {} object", symbol, triple.str());
  }
  bool defined = false;
  for (const llvm::object::SymbolRef& entry : (*file)->symbols()) {
    auto name = entry.getName();
    auto flags = entry.getFlags();
    if (!name || !flags) {
      llvm::consumeError(name.takeError());
      llvm::consumeError(flags.takeError());
      continue;
    }
    if (*name == symbol && (*flags & llvm::object::SymbolRef::SF_Undefined) == 0) defined = true;
  }
  if (!defined) return makeError(ErrorCode::JitError, "object does not define kernel '{}'", symbol);
  return std::unique_ptr<KernelCode>(new LlvmObjectCode(std::move(buffer), symbol, impl_.get()));
}

const std::string& JitEngine::codeIdentity() const {
  return impl_->code_identity[identityIndex()];
}

std::uint64_t JitEngine::codegens() const {
  return impl_->codegens.load(std::memory_order_relaxed);
}

void JitEngine::setSkipHandVectorizedPasses(bool skip) {
  impl_->skip_hand_vectorized_passes.store(skip, std::memory_order_relaxed);
}

std::uint64_t JitEngine::codegenPassesSkipped() const {
  return impl_->codegen_passes_skipped.load(std::memory_order_relaxed);
}

Expected<KernelHandle> JitEngine::link(std::unique_ptr<KernelCode> code) {
  if (dynamic_cast<LlvmModuleCode*>(code.get()) != nullptr) {
    SVM_ASSIGN_OR_RETURN(code, emitObject(std::move(code)));
  }
  auto* object = dynamic_cast<LlvmObjectCode*>(code.get());
  if (object == nullptr || object->engine_ != impl_.get() || !object->object_) {
    return makeError(ErrorCode::Internal, "kernel code '{}' was not built by this engine",
                     code ? code->symbol() : std::string("<null>"));
  }
  const std::string symbol = object->symbol();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::uint64_t id = impl_->next_id++;
  // Each version alone in its dylib: versions of one symbol (and one cached object) coexist.
  const std::string unique = fmt::format("svm_kernel_{}", id);
  llvm::orc::ExecutionSession& session = impl_->jit->getExecutionSession();
  auto dylib = impl_->jit->createJITDylib(unique);
  if (!dylib) return llvmError(dylib.takeError(), fmt::format("cannot add kernel '{}'", symbol));
  dylib->addToLinkOrder(impl_->jit->getMainJITDylib());
  if (llvm::Error error = impl_->jit->addObjectFile(*dylib, std::move(object->object_))) {
    llvm::consumeError(session.removeJITDylib(*dylib));
    return llvmError(std::move(error), fmt::format("cannot add kernel '{}'", symbol));
  }
  auto address = impl_->jit->lookup(*dylib, symbol);
  if (!address) {
    llvm::consumeError(session.removeJITDylib(*dylib));
    return llvmError(address.takeError(), fmt::format("cannot link kernel '{}'", symbol));
  }
  impl_->dylibs.emplace(id, &*dylib);
  if (impl_->options.perf_support) clearJitdumpFlags();  // the header is flushed with the first record
  return KernelHandle{id, address->toPtr<void*>(), symbol};
}

Status JitEngine::remove(const KernelHandle& handle) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->dylibs.find(handle.id);
  if (it == impl_->dylibs.end()) return makeError(ErrorCode::Internal, "kernel {} is not live", handle.symbol);
  llvm::Error error = impl_->jit->getExecutionSession().removeJITDylib(*it->second);
  impl_->dylibs.erase(it);
  if (error) return llvmError(std::move(error), fmt::format("cannot remove kernel '{}'", handle.symbol));
  return Status::ok();
}

std::size_t JitEngine::liveKernels() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->dylibs.size();
}

}  // namespace shapevm::jit
