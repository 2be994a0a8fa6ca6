// SPDX-License-Identifier: Apache-2.0
// The benchmark executable's shared pieces (see bench_common.h): timing and error helpers, the
// FMA-peak and one-pass-roofline kernels, and the reference workload's Sessions and inputs.
#include "bench/bench_common.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "jit/jit.h"
#include "jit/llvm_cpu/codegen_util.h"

namespace shapevm::bench {

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double relL2(const Tensor& got, const Tensor& want) {
  double diff = 0, ref = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.elementAsDouble(i), g = got.elementAsDouble(i);
    diff += (g - w) * (g - w);
    ref += w * w;
  }
  return std::sqrt(diff / std::max(ref, 1e-300));
}

std::int64_t heapBytes() {
  return static_cast<std::int64_t>(mallinfo2().uordblks);
}

std::int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE));
}

std::string cpuModel() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

Tensor randomTensor(const Shape& shape, std::mt19937_64& rng, double scale) {
  Tensor t = std::move(Tensor::empty(DType::Float32, shape).value());
  std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// ---- the FMA peak and the one-pass roofline kernel ----

namespace {

// An FMA loop with `accumulators` independent <lanes x float> chains: the machine's FMA peak.
Status emitFmaPeak(llvm::Module& module, const std::string& symbol, unsigned lanes, int accumulators) {
  jit::ir::Builder b(module.getContext());
  llvm::Function* fn = jit::ir::beginKernel(module, symbol, b);
  jit::ir::ArgsView args(b, fn->getArg(0));
  llvm::Value* out = args.data(0);
  llvm::Value* iterations = args.scalar(0);
  llvm::Type* vec = llvm::FixedVectorType::get(b.getFloatTy(), lanes);
  llvm::BasicBlock* entry = b.GetInsertBlock();
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(module.getContext(), "loop", fn);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(module.getContext(), "exit", fn);
  llvm::Value* x = llvm::ConstantFP::get(vec, 0.999);
  llvm::Value* y = llvm::ConstantFP::get(vec, 0.001);
  b.CreateBr(loop);
  b.SetInsertPoint(loop);
  llvm::PHINode* i = b.CreatePHI(b.getInt64Ty(), 2);
  i->addIncoming(b.getInt64(0), entry);
  std::vector<llvm::PHINode*> acc;
  std::vector<llvm::Value*> next;
  for (int a = 0; a < accumulators; ++a) {  // PHIs first: they must head the block
    acc.push_back(b.CreatePHI(vec, 2));
    acc.back()->addIncoming(llvm::ConstantFP::get(vec, 1.0 + a), entry);
  }
  for (int a = 0; a < accumulators; ++a) {
    next.push_back(b.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {acc[static_cast<std::size_t>(a)], x, y}));
  }
  llvm::Value* i_next = b.CreateAdd(i, b.getInt64(1));
  i->addIncoming(i_next, loop);
  for (int a = 0; a < accumulators; ++a)
    acc[static_cast<std::size_t>(a)]->addIncoming(next[static_cast<std::size_t>(a)], loop);
  b.CreateCondBr(b.CreateICmpSLT(i_next, iterations), loop, exit);
  b.SetInsertPoint(exit);
  llvm::Value* sum = next[0];
  for (int a = 1; a < accumulators; ++a) sum = b.CreateFAdd(sum, next[static_cast<std::size_t>(a)]);
  b.CreateAlignedStore(sum, out, llvm::Align(4));
  b.CreateRetVoid();
  return Status::ok();
}

}  // namespace

// y[i] = a[i] * b[i] + c[i]: one pass over memory, the roofline for elementwise chains.
Status emitAxpy(llvm::Module& module, const std::string& symbol) {
  jit::ir::Builder b(module.getContext());
  llvm::Function* fn = jit::ir::beginKernel(module, symbol, b);
  jit::ir::ArgsView args(b, fn->getArg(0));
  llvm::Value* pa = args.data(0);
  llvm::Value* pb = args.data(1);
  llvm::Value* pc = args.data(2);
  llvm::Value* py = args.data(3);
  llvm::Value* n = args.dim(0, 0);
  jit::ir::emitLoop(b, b.getInt64(0), n, 1, [&](llvm::Value* i) {
    auto load = [&](llvm::Value* p) {
      return jit::ir::loadCompute(b, DType::Float32, jit::ir::elementPtr(b, DType::Float32, p, i));
    };
    llvm::Value* v = b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {b.getFloatTy()}, {load(pa), load(pb), load(pc)});
    jit::ir::storeCompute(b, DType::Float32, v, jit::ir::elementPtr(b, DType::Float32, py, i));
  });
  b.CreateRetVoid();
  return Status::ok();
}

Expected<std::unique_ptr<PeakMeter>> PeakMeter::create(jit::JitEngine& engine) {
  auto meter = std::unique_ptr<PeakMeter>(new PeakMeter(engine));
  meter->lanes_ = engine.hasAvx512() ? 16 : 8;
  for (int chains : {8, 12, 16, 24}) {
    const unsigned lanes = meter->lanes_;
    SVM_ASSIGN_OR_RETURN(jit::KernelHandle handle, engine.compile("svm_bench_fma_peak", [&](llvm::Module& m) {
      return emitFmaPeak(m, "svm_bench_fma_peak", lanes, chains);
    }));
    meter->kernels_.push_back(Kernel{chains, handle});
  }
  return meter;
}

PeakMeter::~PeakMeter() {
  for (const Kernel& kernel : kernels_) (void)engine_.remove(kernel.handle);
}

double PeakMeter::measure() {
  double now = 0;
  for (const Kernel& kernel : kernels_) {
    alignas(64) float sink[16] = {};
    jit::KernelArgs args{};
    args.data[0] = sink;
    args.scalars[0] = 2'000'000;
    auto fn = reinterpret_cast<jit::GeneratedKernelFn>(kernel.handle.address);
    const double ms = medianMs(3, [&] { fn(&args); });
    now = std::max(now, 2.0 * lanes_ * kernel.chains * static_cast<double>(args.scalars[0]) / (ms * 1e6));
  }
  best_ = std::max(best_, now);
  return now;
}

// ---- the reference workload ----

std::vector<Value> workloadArgs(const Function& fn, const Weights& w, std::int64_t batch, std::int64_t seq,
                                std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Value> args;
  for (const Param& p : fn.params) {
    if (p.name == "x") args.push_back(Value::fromTensor(randomTensor(Shape{batch, seq, 128}, rng)));
    else if (p.name == "h" || p.name == "c") args.push_back(Value::fromTensor(randomTensor(Shape{batch, 256}, rng)));
    else if (p.name == "W_ih") args.push_back(Value::fromTensor(w.w_ih));
    else if (p.name == "W_hh") args.push_back(Value::fromTensor(w.w_hh));
    else if (p.name == "b_ih") args.push_back(Value::fromTensor(w.b_ih));
    else args.push_back(Value::fromTensor(w.b_hh));
  }
  return args;
}

Expected<Instance> makeInstance(const BenchFlags& flags, const std::string& variant, int level,
                                const std::string& tuning_db, std::int64_t tune_budget_ms, bool jit_wait) {
  Instance instance;
  instance.variant = variant;
  instance.level = level;
  SessionOptions options;
  options.autotune = level >= 2 && !tuning_db.empty();
  options.tuning_db = tuning_db;
  options.tune_budget_ms = tune_budget_ms;
  options.jit_wait = jit_wait;
  instance.session = std::make_unique<Session>(options);
  SVM_RETURN_IF_ERROR(instance.session->set("jit_level", level));
  SVM_RETURN_IF_ERROR(instance.session->load(flags.examples + "/" + variant + ".py"));
  SVM_RETURN_IF_ERROR(instance.session->jitStatus());
  SVM_ASSIGN_OR_RETURN(FunctionInfo fn, instance.session->function(variant));
  instance.function = fn.index;
  instance.module = SessionAccess::module(*instance.session);
  instance.vm = SessionAccess::vm(*instance.session);
  return instance;
}

Expected<std::unique_ptr<Session>> svasmSession(std::string_view text, const std::string& filename, int level) {
  SessionOptions options;
  options.autotune = false;
  options.jit_wait = true;
  auto session = std::make_unique<Session>(options);
  SVM_RETURN_IF_ERROR(session->set("jit_level", level));
  LoadOptions load;
  load.filename = filename;
  SVM_RETURN_IF_ERROR(session->loadSource(text, load));
  SVM_RETURN_IF_ERROR(session->jitStatus());
  return session;
}

Expected<Tensor> firstOutput(Instance& instance, const std::vector<Value>& args) {
  SVM_ASSIGN_OR_RETURN(std::vector<Value> out, instance.session->run(instance.function, args));
  return out[0].tensor().clone();
}

std::vector<std::int64_t> benchStream(bool quick) {
  std::vector<std::int64_t> stream;
  std::mt19937_64 rng(42);
  for (int i = 0; i < (quick ? 8 : 24); ++i) stream.push_back(8 + static_cast<std::int64_t>(rng() % 121));
  return stream;
}

}  // namespace shapevm::bench
