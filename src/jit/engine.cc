// SPDX-License-Identifier: Apache-2.0
// JitEngine over LLVM ORC: LLJIT (JITLink object layer on x86-64 ELF), host CPU target machine,
// the new pass manager's O3 pipeline per module, one ResourceTracker per kernel version.
#include "jit/engine.h"

#include <atomic>
#include <map>

#include <llvm/ADT/StringMap.h>
#include <llvm/ExecutionEngine/Orc/Debugging/DebuggerSupport.h>
#include <llvm/ExecutionEngine/Orc/Debugging/PerfSupportPlugin.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

namespace shapevm::jit {

namespace {

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

}  // namespace

struct JitEngine::Impl {
  EngineOptions options;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> target_machine;  // for the IR pipeline (TTI)
  std::string cpu_name;
  std::string cpu_features;
  bool avx512 = false;
  mutable std::mutex mutex;  // compile/remove are serialized (one engine, any thread)
  std::map<std::uint64_t, llvm::orc::ResourceTrackerSP> trackers;
  std::uint64_t next_id = 1;
};

JitEngine::JitEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

JitEngine::~JitEngine() {
  if (!impl_) return;
  for (auto& [id, tracker] : impl_->trackers) llvm::consumeError(tracker->remove());
  impl_->trackers.clear();
}

Expected<std::unique_ptr<JitEngine>> JitEngine::create(EngineOptions options) {
  initializeLlvmOnce();
  auto impl = std::make_unique<Impl>();
  impl->options = options;

  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) return llvmError(jtmb.takeError(), "cannot describe the host CPU");
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
    auto& object_layer = static_cast<llvm::orc::ObjectLinkingLayer&>(impl->jit->getObjLinkingLayer());
    auto plugin = llvm::orc::PerfSupportPlugin::Create(impl->jit->getExecutionSession().getExecutorProcessControl(),
                                                       impl->jit->getMainJITDylib(), true, true);
    if (!plugin) return llvmError(plugin.takeError(), "cannot enable perf jitdump support");
    object_layer.addPlugin(std::move(*plugin));
  }
  return std::unique_ptr<JitEngine>(new JitEngine(std::move(impl)));
}

const std::string& JitEngine::cpuName() const { return impl_->cpu_name; }
const std::string& JitEngine::cpuFeatures() const { return impl_->cpu_features; }
bool JitEngine::hasAvx512() const { return impl_->avx512; }

Expected<KernelHandle> JitEngine::compile(const std::string& symbol, const std::function<Status(llvm::Module&)>& build) {
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
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions tuning;
    tuning.LoopVectorization = true;
    tuning.SLPVectorization = true;
    llvm::PassBuilder builder(impl_->target_machine.get(), tuning);
    builder.registerModuleAnalyses(mam);
    builder.registerCGSCCAnalyses(cgam);
    builder.registerFunctionAnalyses(fam);
    builder.registerLoopAnalyses(lam);
    builder.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::OptimizationLevel level = impl_->options.opt_level >= 3   ? llvm::OptimizationLevel::O3
                                    : impl_->options.opt_level == 2 ? llvm::OptimizationLevel::O2
                                                                    : llvm::OptimizationLevel::O1;
    llvm::ModulePassManager passes = builder.buildPerModuleDefaultPipeline(level);
    passes.run(*module, mam);
  }

  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::uint64_t id = impl_->next_id++;
  // Rename to a unique, readable symbol per version so several versions can be live at once.
  const std::string unique = fmt::format("{}_v{}", symbol, id);
  function->setName(unique);
  llvm::orc::ResourceTrackerSP tracker = impl_->jit->getMainJITDylib().createResourceTracker();
  if (llvm::Error error = impl_->jit->addIRModule(tracker, llvm::orc::ThreadSafeModule(std::move(module), std::move(context)))) {
    return llvmError(std::move(error), fmt::format("cannot add kernel '{}'", unique));
  }
  auto address = impl_->jit->lookup(unique);
  if (!address) {
    llvm::consumeError(tracker->remove());
    return llvmError(address.takeError(), fmt::format("cannot link kernel '{}'", unique));
  }
  impl_->trackers.emplace(id, tracker);
  return KernelHandle{id, address->toPtr<void*>(), unique};
}

Status JitEngine::remove(const KernelHandle& handle) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->trackers.find(handle.id);
  if (it == impl_->trackers.end()) return makeError(ErrorCode::Internal, "kernel {} is not live", handle.symbol);
  llvm::Error error = it->second->remove();
  impl_->trackers.erase(it);
  if (error) return llvmError(std::move(error), fmt::format("cannot remove kernel '{}'", handle.symbol));
  return Status::ok();
}

std::size_t JitEngine::liveKernels() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->trackers.size();
}

}  // namespace shapevm::jit
