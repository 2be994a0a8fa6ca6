// SPDX-License-Identifier: Apache-2.0
// `shapevm bench`: the reference workload at O0/O1/O2, cold costs and latency while compiles are
// in flight, JIT matmul vs the reference kernel, oneDNN and the measured FMA peak, elementwise
// chains vs a one-pass roofline and memcpy, per-op overhead, compile latency and memory. Results
// go to DIR/shapevm.json for bench/report.py. Outputs are checked before anything is timed.
#include "tools/bench.h"

#include <malloc.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.h>

#include "bytecode/text_format.h"
#include "frontend/frontend.h"
#include "jit/compiled_kernel.h"
#include "jit/jit.h"
#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"
#include "jit/validate.h"
#include "support/tunables.h"
#include "tools/cli_inputs.h"
#include "tune/auto_tuner.h"
#include "vm/vm.h"

namespace shapevm {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double msSince(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

double relL2(const Tensor& got, const Tensor& want) {
  double diff = 0, ref = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.elementAsDouble(i), g = got.elementAsDouble(i);
    diff += (g - w) * (g - w);
    ref += w * w;
  }
  return std::sqrt(diff / std::max(ref, 1e-300));
}

// Heap bytes in use (glibc's allocator): page-granular RSS misses small structures.
std::int64_t heapBytes() { return static_cast<std::int64_t>(mallinfo2().uordblks); }

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

Tensor randomTensor(const Shape& shape, std::mt19937_64& rng, double scale = 1.0) {
  Tensor t = std::move(Tensor::empty(DType::Float32, shape).value());
  std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// ---- shared helpers: the FMA peak, the one-pass roofline kernel, medians ----

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
  for (int a = 0; a < accumulators; ++a) acc[static_cast<std::size_t>(a)]->addIncoming(next[static_cast<std::size_t>(a)], loop);
  b.CreateCondBr(b.CreateICmpSLT(i_next, iterations), loop, exit);
  b.SetInsertPoint(exit);
  llvm::Value* sum = next[0];
  for (int a = 1; a < accumulators; ++a) sum = b.CreateFAdd(sum, next[static_cast<std::size_t>(a)]);
  b.CreateAlignedStore(sum, out, llvm::Align(4));
  b.CreateRetVoid();
  return Status::ok();
}

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
    auto load = [&](llvm::Value* p) { return jit::ir::loadCompute(b, DType::Float32, jit::ir::elementPtr(b, DType::Float32, p, i)); };
    llvm::Value* v = b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {b.getFloatTy()}, {load(pa), load(pb), load(pc)});
    jit::ir::storeCompute(b, DType::Float32, v, jit::ir::elementPtr(b, DType::Float32, py, i));
  });
  b.CreateRetVoid();
  return Status::ok();
}

template <typename F>
double medianMs(int repeats, F&& f) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const Clock::time_point start = Clock::now();
    f();
    ms.push_back(msSince(start));
  }
  return summarizeLatency(ms).median;
}

// The FMA peak of this core: the best of several independent-chain counts (enough chains to cover
// FMA latency x pipes). measure() is cheap (~10 ms); suites call it in every round right beside
// what they time, since this machine's clock drifts, and keep the best value seen.
class PeakMeter {
 public:
  static Expected<std::unique_ptr<PeakMeter>> create(jit::JitEngine& engine) {
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
  ~PeakMeter() {
    for (const Kernel& kernel : kernels_) (void)engine_.remove(kernel.handle);
  }
  // GFLOP/s of this measurement; best() keeps the maximum over all of them.
  double measure() {
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
  double best() const { return best_; }
  unsigned lanes() const { return lanes_; }

 private:
  struct Kernel {
    int chains;
    jit::KernelHandle handle;
  };
  explicit PeakMeter(jit::JitEngine& engine) : engine_(engine) {}
  jit::JitEngine& engine_;
  unsigned lanes_ = 8;
  std::vector<Kernel> kernels_;
  double best_ = 0;
};

// ---- the reference workload ----

struct Weights {
  Tensor w_ih, w_hh, b_ih, b_hh;
};

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

struct Instance {
  std::string variant;
  int level = 0;
  std::shared_ptr<Module> module;
  std::unique_ptr<tune::AutoTuner> tuner;  // declared before vm/jit: outlives the Jit that calls it
  std::unique_ptr<VirtualMachine> vm;
  std::unique_ptr<jit::Jit> jit;
  int function = 0;
};

// At O2 with a non-empty `tuning_db`, an AutoTuner on that database file is attached (a fresh
// AutoTuner each time: it reads whatever the file holds when it is created).
Expected<Instance> makeInstance(const BenchFlags& flags, const std::string& variant, int level,
                                const std::string& tuning_db = "", std::int64_t tune_budget_ms = -1) {
  Instance instance;
  instance.variant = variant;
  instance.level = level;
  SVM_ASSIGN_OR_RETURN(Module module, loadProgram(flags.examples + "/" + variant + ".py", FrontendOptions()));
  instance.module = std::make_shared<Module>(std::move(module));
  SVM_ASSIGN_OR_RETURN(instance.function, resolveFunction(*instance.module, variant));
  instance.vm = std::make_unique<VirtualMachine>(instance.module);
  if (level >= 1) {
    jit::JitOptions options;
    options.level = level;
    if (level >= 2 && !tuning_db.empty()) {
      tune::AutoTunerOptions tune_options;
      tune_options.database_path = tuning_db;
      tune_options.budget_ms = tune_budget_ms;
      instance.tuner = std::make_unique<tune::AutoTuner>(tune_options);
      options.tuner = instance.tuner.get();
    }
    SVM_ASSIGN_OR_RETURN(instance.jit, jit::Jit::attach(*instance.vm, options));
  }
  return instance;
}

Expected<Tensor> firstOutput(Instance& instance, const std::vector<Value>& args) {
  SVM_ASSIGN_OR_RETURN(std::vector<Value> out, instance.vm->run(instance.function, args));
  return out[0].tensor().clone();
}

// The shuffled stream of seq drawn from 8..128 (fixed seed; the peers time the same list).
std::vector<std::int64_t> benchStream(bool quick) {
  std::vector<std::int64_t> stream;
  std::mt19937_64 rng(42);
  for (int i = 0; i < (quick ? 8 : 24); ++i) stream.push_back(8 + static_cast<std::int64_t>(rng() % 121));
  return stream;
}

// Matmul FLOPs of one call (2mnk per matmul). The cell: [B*S,128]x[128,1024] and [B,256]x[256,1024];
// the loop: [B,128]x[128,1024] and [B,256]x[256,1024] per step. The elementwise tail (bias adds,
// gate nonlinearities, c/h updates: ~4.4 kflop per row of batch*seq vs 262 kflop of matmul, under 2%)
// is not counted, so the floor is slightly optimistic.
double workloadFlops(const std::string& variant, std::int64_t batch, std::int64_t seq) {
  const double b = static_cast<double>(batch), s = static_cast<double>(seq);
  if (variant == "lstm_loop") return s * (2.0 * b * 128 * 1024 + 2.0 * b * 256 * 1024);
  return 2.0 * b * s * 128 * 1024 + 2.0 * b * 256 * 1024;
}

// Fused ranges still waiting for their one background tuning: queued, or installed untuned.
int untunedRanges(const Instance& instance) {
  int untuned = 0;
  for (std::size_t f = 0; f < instance.module->functions.size(); ++f) {
    for (const jit::Jit::RangeState& range : instance.jit->rangeStates(static_cast<int>(f))) {
      using Phase = jit::Jit::RangeState::Phase;
      if (range.phase == Phase::Queued || (range.phase == Phase::Installed && !range.tuned)) ++untuned;
    }
  }
  return untuned;
}

struct WarmUp {
  double ms = 0;
  int extra_passes = 0;  // passes over every shape after the first seven, waiting for tuning
  int untuned = 0;       // fused ranges still untuned at the end (0 unless the pass cap was hit)
};

// Every shape of the run (the fixed seqs six times, then the stream), each compile allowed to
// finish after the run that queued it. With a tuner attached, more passes follow until every
// installed fused region has been re-tuned: a region is installed untuned first, and a later run
// queues its tuning (and a region widened for new shapes is installed untuned again).
Expected<WarmUp> warmUp(Instance& instance, const Weights& weights, std::int64_t batch, const std::vector<std::int64_t>& seqs,
                        const std::vector<std::int64_t>& stream) {
  const Function& fn = instance.module->functions[static_cast<std::size_t>(instance.function)];
  const Clock::time_point start = Clock::now();
  auto pass = [&](const std::vector<std::int64_t>& list) -> Status {
    for (std::int64_t seq : list) {
      if (auto ran = instance.vm->run(instance.function, workloadArgs(fn, weights, batch, seq, 7)); !ran) return ran.status();
      if (instance.jit) instance.jit->waitIdle();
    }
    return Status::ok();
  };
  for (int r = 0; r < 6; ++r) SVM_RETURN_IF_ERROR(pass(seqs));
  SVM_RETURN_IF_ERROR(pass(stream));
  WarmUp result;
  if (instance.tuner) {
    constexpr int kMaxExtraPasses = 12;
    while ((result.untuned = untunedRanges(instance)) > 0 && result.extra_passes < kMaxExtraPasses) {
      SVM_RETURN_IF_ERROR(pass(seqs));
      SVM_RETURN_IF_ERROR(pass(stream));
      ++result.extra_passes;
    }
  }
  result.ms = msSince(start);
  return result;
}

// Outputs of `instance` equal O0's (`reference`) on fresh inputs at every seq.
Status checkAgainst(Instance& reference, Instance& instance, const Weights& weights, std::int64_t batch,
                    const std::vector<std::int64_t>& seqs, const std::string& what) {
  const Function& fn = reference.module->functions[static_cast<std::size_t>(reference.function)];
  for (std::int64_t seq : seqs) {
    auto args = workloadArgs(fn, weights, batch, seq, 1000 + static_cast<std::uint64_t>(seq));
    SVM_ASSIGN_OR_RETURN(Tensor want, firstOutput(reference, args));
    SVM_ASSIGN_OR_RETURN(Tensor got, firstOutput(instance, args));
    const double err = relL2(got, want);
    if (!(err <= 1e-5)) {
      return makeError(ErrorCode::Internal, "{} {} differs from O0 at seq {}: rel L2 {:.3g}", instance.variant, what, seq, err);
    }
  }
  return Status::ok();
}

// One compile event, classified for the compile-latency tables.
struct TaggedEvent {
  std::string variant;
  std::string category;
  jit::CompileEvent event;
};

// O1: every event is one op's kernel. O2: "Region@PC" = a fused range installed untuned,
// "Region@PC (tuned)" = its background re-tune (the AutoTuner, then codegen of the winners), other
// signatures = single-op kernels outside fused ranges (tuned inline when a tuner is attached).
std::string eventCategory(int level, const jit::CompileEvent& e, bool cache_instance) {
  if (level == 1) return "O1 op kernel";
  const bool region = e.signature.rfind("Region@", 0) == 0;
  const bool tuned = e.signature.find("(tuned)") != std::string::npos;
  if (region && !tuned) return "O2 fused region, untuned install";
  if (region) {
    if (e.tuning_cache_hit) return "O2 fused region re-tune, tuning-database hit";
    return cache_instance ? "O2 fused region re-tune, database miss (timed)" : "O2 fused region re-tune, cold (timed)";
  }
  if (e.tuning_cache_hit) return "O2 op kernel, tuning-database hit";
  return e.tuning_ms > 0 ? "O2 op kernel, tuned by timing" : "O2 op kernel";
}

json jitStatsJson(const std::string& variant, const std::string& role, int level, const jit::JitStats& stats,
                  const WarmUp& warm) {
  return {{"variant", variant}, {"role", role}, {"level", fmt::format("O{}", level)}, {"compiles", stats.compiles},
          {"fused_regions", stats.fused_regions}, {"fused_ops", stats.fused_ops}, {"region_declines", stats.region_declines},
          {"tuning_ms", stats.tuning_ms}, {"tuned_kernels", stats.tuned_kernels},
          {"tuning_cache_hits", stats.tuning_cache_hits}, {"compile_failures", stats.compile_failures},
          {"validation_failures", stats.validation_failures}, {"warmup_s", warm.ms / 1000.0},
          {"warmup_extra_passes", warm.extra_passes}, {"untuned_ranges", warm.untuned}};
}

// `out`: the workload rows; `compile_out`: the O1 per-kernel summary (end to end median/p90, mean
// split); `extra`: compile_latency (per category, median/p90 of each part), compile_paths (per
// fused range: untuned install, cold re-tune, database-hit re-tune), workload_jit (JIT stats) and
// workload_2t (O2 timed again with kernel_threads = 2 in the same rounds, fixed seqs).
Status workloadSuite(const BenchFlags& flags, jit::JitEngine& engine, const Weights& weights, const std::string& tmp_dir,
                     json& out, json& compile_out, json& extra) {
  const std::int64_t batch = 32;
  const std::vector<std::int64_t> seqs = flags.quick ? std::vector<std::int64_t>{10, 30} : std::vector<std::int64_t>{10, 20, 30, 120};
  const std::vector<std::int64_t> stream = benchStream(flags.quick);
  const int rounds = flags.quick ? 3 : 7;
  const int per_round = flags.quick ? 2 : 4;
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<PeakMeter> meter, PeakMeter::create(engine));
  // --quick keeps under its 2 minutes with a shorter tuning budget (the matmul suite's tuning-
  // quality check keeps the default).
  const std::int64_t tune_budget_ms = flags.quick ? std::min<std::int64_t>(500, Tunables::get(Tunable::TuneBudgetMs))
                                                  : Tunables::get(Tunable::TuneBudgetMs);
  std::vector<TaggedEvent> events;
  json jit_stats = json::array(), paths = json::array(), two_thread_rows = json::array();
  for (const std::string variant : {"lstm_cell", "lstm_loop"}) {
    // O2 tunes with an AutoTuner on a fresh database (per variant): the warm-up includes tuning.
    const std::string tuning_db = tmp_dir + "/" + variant + "/tuning.jsonl";
    std::vector<Instance> instances;
    for (int level = 0; level <= 2; ++level) {
      SVM_ASSIGN_OR_RETURN(Instance instance, makeInstance(flags, variant, level, tuning_db, tune_budget_ms));
      instances.push_back(std::move(instance));
    }
    const Function& fn = instances[0].module->functions[static_cast<std::size_t>(instances[0].function)];
    std::vector<WarmUp> warm;
    for (Instance& instance : instances) {
      SVM_ASSIGN_OR_RETURN(WarmUp w, warmUp(instance, weights, batch, seqs, stream));
      warm.push_back(w);
    }
    for (std::size_t l = 1; l < instances.size(); ++l) {
      SVM_RETURN_IF_ERROR(checkAgainst(instances[0], instances[l], weights, batch, seqs, fmt::format("at O{}", l)));
    }
    if (warm[2].untuned > 0) {
      fmt::print("workload {:<9} O2: {} fused ranges still untuned after {} extra warm-up passes\n", variant, warm[2].untuned,
                 warm[2].extra_passes);
    }
    // Timing: rounds interleave the levels (and an FMA-peak measurement); each round runs every
    // seq `per_round` times, then the stream once.
    struct Acc {
      std::vector<double> ms;
      std::uint64_t runs = 0, allocs = 0, system_allocs = 0, compiled = 0, calls = 0;
    };
    std::map<std::pair<int, std::int64_t>, Acc> acc;  // (level, seq or -1 = stream)
    std::map<std::int64_t, std::vector<double>> two_threads;  // O2 with kernel_threads = 2: seq -> ms
    std::map<std::int64_t, std::vector<Value>> args_by_seq;
    for (std::int64_t seq : seqs) args_by_seq[seq] = workloadArgs(fn, weights, batch, seq, 2000 + static_cast<std::uint64_t>(seq));
    for (std::int64_t seq : stream) {
      if (!args_by_seq.count(seq)) args_by_seq[seq] = workloadArgs(fn, weights, batch, seq, 3000 + static_cast<std::uint64_t>(seq));
    }
    for (int round = 0; round < rounds; ++round) {
      meter->measure();
      for (Instance& instance : instances) {
        auto timed = [&](std::int64_t seq, std::int64_t key) -> Status {
          const ExecStats before = instance.vm->stats();
          const Clock::time_point start = Clock::now();
          auto ran = instance.vm->run(instance.function, args_by_seq[seq]);
          const double ms = msSince(start);
          if (!ran) return ran.status();
          const ExecStats& after = instance.vm->stats();
          Acc& a = acc[{instance.level, key}];
          a.ms.push_back(key < 0 ? ms / static_cast<double>(batch * seq) * 1e3 : ms);  // stream: us per token
          ++a.runs;
          a.allocs += after.alloc_requests - before.alloc_requests;
          a.system_allocs += after.system_allocations - before.system_allocations;
          a.compiled += after.compiled_calls - before.compiled_calls;
          a.calls += after.op_calls - before.op_calls;
          return Status::ok();
        };
        for (std::int64_t seq : seqs) {
          for (int k = 0; k < per_round; ++k) SVM_RETURN_IF_ERROR(timed(seq, seq));
        }
        for (std::int64_t seq : stream) SVM_RETURN_IF_ERROR(timed(seq, -1));
      }
      // "Report both": the same O2 kernels (tuned on one thread; those whose parameters leave
      // `threads` open read the tunable per call) with kernel_threads = 2, in the same rounds.
      // Untimed runs come first for 20 ms: on this VM the second vCPU, idle while the one-thread
      // levels ran, takes a few milliseconds to come up to speed (the cell at seq 10 ran 0.65-0.74
      // ms for its first five calls, then 0.32 ms), which a program that keeps two threads busy
      // does not see. The pool's workers spin 200 us after a job and are asleep before O0's turn.
      if (Tunables::get(Tunable::KernelThreads) == 1) {
        SVM_RETURN_IF_ERROR(Tunables::set(Tunable::KernelThreads, 2));
        Status status = Status::ok();
        const Clock::time_point warm_start = Clock::now();
        for (int k = 0; status.isOk() && (k < 2 || msSince(warm_start) < 20.0); ++k) {
          if (auto ran = instances[2].vm->run(instances[2].function, args_by_seq[seqs[0]]); !ran) status = ran.status();
        }
        for (std::int64_t seq : seqs) {
          for (int k = 0; k < per_round && status.isOk(); ++k) {
            const Clock::time_point start = Clock::now();
            auto ran = instances[2].vm->run(instances[2].function, args_by_seq[seq]);
            if (!ran) status = ran.status();
            two_threads[seq].push_back(msSince(start));
          }
        }
        SVM_RETURN_IF_ERROR(Tunables::set(Tunable::KernelThreads, 1));
        SVM_RETURN_IF_ERROR(status);
      }
    }
    const double peak = meter->best();
    double stream_flops = 0, stream_tokens = 0;
    for (std::int64_t seq : stream) {
      stream_flops += workloadFlops(variant, batch, seq);
      stream_tokens += static_cast<double>(batch * seq);
    }
    std::map<std::pair<int, std::int64_t>, double> medians;
    for (auto& [key, a] : acc) medians[key] = summarizeLatency(a.ms).median;
    for (auto& [key, a] : acc) {
      LatencySummary s = summarizeLatency(a.ms);
      const double runs = static_cast<double>(a.runs);
      json row = {{"variant", variant}, {"level", fmt::format("O{}", key.first)}, {"batch", batch},
                  {"runs", a.runs}, {"allocs_per_run", static_cast<double>(a.allocs) / runs},
                  {"system_allocs_per_run", static_cast<double>(a.system_allocs) / runs},
                  {"compiled_calls_per_run", static_cast<double>(a.compiled) / runs},
                  {"interpreted_calls_per_run", static_cast<double>(a.calls - a.compiled) / runs},
                  {"peak_gflops", peak}};
      // The compute floor: matmul FLOPs / the FMA peak measured in the same rounds.
      double floor = 0;
      if (key.second < 0) {
        row["seq"] = "stream";
        row["median_us_per_token"] = s.median;
        row["min_us_per_token"] = s.low;
        row["max_us_per_token"] = s.high;
        row["gflop_per_token"] = stream_flops / stream_tokens / 1e9;
        floor = stream_flops / stream_tokens / (peak * 1e3);  // us per token, averaged over the stream
        row["floor_us_per_token"] = floor;
      } else {
        row["seq"] = key.second;
        row["median_ms"] = s.median;
        row["min_ms"] = s.low;
        row["max_ms"] = s.high;
        row["p99_ms"] = s.p99;
        row["median_us_per_token"] = s.median * 1e3 / static_cast<double>(batch * key.second);
        row["gflop_per_call"] = workloadFlops(variant, batch, key.second) / 1e9;
        floor = workloadFlops(variant, batch, key.second) / (peak * 1e6);  // ms
        row["floor_ms"] = floor;
      }
      if (peak > 0) {
        row["vs_floor"] = s.median / floor;
        row["gflops"] = (key.second < 0 ? stream_flops / stream_tokens / (s.median * 1e3)
                                         : workloadFlops(variant, batch, key.second) / (s.median * 1e6));
      }
      if (medians.count({0, key.second}) && s.median > 0) row["speedup_vs_o0"] = medians[{0, key.second}] / s.median;
      out.push_back(row);
      fmt::print("workload {:<9} O{} seq {:>6}: median {:.3f} {} (min {:.3f}, max {:.3f}) = {:.2f}x the floor, {:.2f}x O0; "
                 "{:.1f} allocs/run, {:.0f}/{:.0f} compiled/interpreted calls/run\n",
                 variant, key.first, key.second < 0 ? std::string("stream") : std::to_string(key.second), s.median,
                 key.second < 0 ? "us/token" : "ms", s.low, s.high, s.median / floor,
                 row.value("speedup_vs_o0", 0.0), static_cast<double>(a.allocs) / runs,
                 static_cast<double>(a.compiled) / runs, static_cast<double>(a.calls - a.compiled) / runs);
    }
    fmt::print("workload {:<9}: FMA peak {:.1f} GFLOP/s (best of the rounds); the floor counts matmul FLOPs only\n", variant, peak);
    for (const auto& [seq, ms] : two_threads) {
      const LatencySummary s = summarizeLatency(ms);
      const double floor = workloadFlops(variant, batch, seq) / (peak * 1e6);  // one core's, ms
      const double one_thread = medians.count({2, seq}) ? medians[{2, seq}] : 0.0;
      two_thread_rows.push_back({{"variant", variant},
                                 {"level", "O2"},
                                 {"threads", 2},
                                 {"batch", batch},
                                 {"seq", seq},
                                 {"runs", ms.size()},
                                 {"median_ms", s.median},
                                 {"min_ms", s.low},
                                 {"max_ms", s.high},
                                 {"floor_ms", floor},
                                 {"vs_floor", s.median / floor},
                                 {"vs_two_core_floor", s.median / (floor / 2)},
                                 {"one_thread_ms", one_thread},
                                 {"speedup_vs_one_thread", s.median > 0 ? one_thread / s.median : 0.0}});
      fmt::print(
          "workload {:<9} O2 seq {:>6} with 2 kernel threads: median {:.3f} ms (min {:.3f}, max {:.3f}) = {:.2f}x "
          "the one-core floor, {:.2f}x a two-core floor; {:.2f}x O2 on one thread\n",
          variant, seq, s.median, s.low, s.high, s.median / floor, s.median / (floor / 2),
          s.median > 0 ? one_thread / s.median : 0.0);
    }

    // Compile events of O1 and of the cold O2 instance (its tuning timed every candidate).
    for (int level = 1; level <= 2; ++level) {
      const jit::JitStats stats = instances[static_cast<std::size_t>(level)].jit->stats();
      jit_stats.push_back(jitStatsJson(variant, level == 2 ? "cold" : "", level, stats, warm[static_cast<std::size_t>(level)]));
      if (level == 2) jit_stats.back()["tune_budget_ms"] = tune_budget_ms;
      for (const jit::CompileEvent& e : stats.events) events.push_back({variant, eventCategory(level, e, false), e});
    }
    // Tuning-cache hits: a second O2 VM + Jit with a NEW AutoTuner reading the database the first
    // one wrote, warmed up on the same shapes; its re-tunes should all come from the database.
    SVM_ASSIGN_OR_RETURN(Instance cached, makeInstance(flags, variant, 2, tuning_db, tune_budget_ms));
    SVM_ASSIGN_OR_RETURN(WarmUp cached_warm, warmUp(cached, weights, batch, seqs, stream));
    SVM_RETURN_IF_ERROR(checkAgainst(instances[0], cached, weights, batch, seqs, "at O2 (tuning-database instance)"));
    const jit::JitStats cached_stats = cached.jit->stats();
    jit_stats.push_back(jitStatsJson(variant, "database", 2, cached_stats, cached_warm));
    jit_stats.back()["tune_budget_ms"] = tune_budget_ms;
    for (const jit::CompileEvent& e : cached_stats.events) events.push_back({variant, eventCategory(2, e, true), e});
    const jit::JitStats cold_stats = instances[2].jit->stats();
    fmt::print("workload {:<9} O2 tuning: cold {:.0f} ms ({} kernels timed, {} database hits, warm-up {:.1f} s); "
               "second AutoTuner on its database: {:.1f} ms ({} timed, {} hits, warm-up {:.1f} s)\n",
               variant, cold_stats.tuning_ms, cold_stats.tuned_kernels, cold_stats.tuning_cache_hits, warm[2].ms / 1000.0,
               cached_stats.tuning_ms, cached_stats.tuned_kernels, cached_stats.tuning_cache_hits, cached_warm.ms / 1000.0);
    // Per hot path (fused range): its untuned install, the cold re-tune and the database-hit re-tune.
    std::map<std::string, json> by_path;
    std::vector<std::string> order;
    auto path_of = [](const std::string& signature) {
      const std::size_t cut = signature.find(" (tuned)");
      return cut == std::string::npos ? signature : signature.substr(0, cut);
    };
    auto note = [&](const jit::CompileEvent& e, const char* prefix) {
      const std::string path = path_of(e.signature);
      if (path.rfind("Region@", 0) != 0) return;
      if (!by_path.count(path)) {
        by_path[path] = {{"variant", variant}, {"path", path}};
        order.push_back(path);
      }
      json& row = by_path[path];
      const bool tuned = e.signature != path;
      const std::string key = std::string(prefix) + (tuned ? "retune" : "install");
      if (row.contains(key + "_total_ms")) {  // a widened range compiles again: count, keep the first
        row[key + "_count"] = row.value(key + "_count", 1) + 1;
        return;
      }
      row[key + "_total_ms"] = e.shape_infer_ms + e.codegen_ms + e.validate_patch_ms + e.tuning_ms;
      row[key + "_tuning_ms"] = e.tuning_ms;
      row[key + "_codegen_ms"] = e.codegen_ms;
      row[key + "_cache_hit"] = e.tuning_cache_hit;
      row[key + "_count"] = 1;
    };
    for (const jit::CompileEvent& e : cold_stats.events) note(e, "cold_");
    for (const jit::CompileEvent& e : cached_stats.events) note(e, "db_");
    for (const std::string& path : order) paths.push_back(by_path[path]);
  }
  // Compile latency per hot path and category, over both variants: median and p90 of each part.
  const std::vector<std::string> known_order = {
      "O1 op kernel", "O2 fused region, untuned install", "O2 fused region re-tune, cold (timed)",
      "O2 fused region re-tune, tuning-database hit", "O2 fused region re-tune, database miss (timed)", "O2 op kernel",
      "O2 op kernel, tuned by timing", "O2 op kernel, tuning-database hit"};
  std::vector<std::string> categories;
  for (const std::string& category : known_order) {
    if (std::any_of(events.begin(), events.end(), [&](const TaggedEvent& t) { return t.category == category; })) {
      categories.push_back(category);
    }
  }
  json latency = json::array();
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
  };
  for (const std::string& category : categories) {
    std::vector<double> total, infer, codegen, tuning, validate;
    for (const TaggedEvent& t : events) {
      if (t.category != category) continue;
      const jit::CompileEvent& e = t.event;
      total.push_back(e.shape_infer_ms + e.codegen_ms + e.validate_patch_ms + e.tuning_ms);
      infer.push_back(e.shape_infer_ms);
      codegen.push_back(e.codegen_ms);
      tuning.push_back(e.tuning_ms);
      validate.push_back(e.validate_patch_ms);
    }
    json row = {{"category", category}, {"level", category.substr(0, 2)}, {"count", total.size()},
                {"region", category.find("region") != std::string::npos}};
    for (auto& [name, v] : std::vector<std::pair<std::string, std::vector<double>*>>{
             {"total", &total}, {"shape_infer", &infer}, {"codegen", &codegen}, {"tuning", &tuning}, {"validate_patch", &validate}}) {
      row[name + "_median_ms"] = pct(*v, 0.5);
      row[name + "_p90_ms"] = pct(*v, 0.9);
    }
    latency.push_back(row);
    fmt::print("compile {:<48} n={:<3} median {:8.1f} ms, p90 {:8.1f}; shape inference {:.2f}, codegen {:.1f}, tuning {:.1f}, "
               "validation+patch {:.1f} ms (medians){}\n",
               category, total.size(), row["total_median_ms"].get<double>(), row["total_p90_ms"].get<double>(),
               row["shape_infer_median_ms"].get<double>(), row["codegen_median_ms"].get<double>(),
               row["tuning_median_ms"].get<double>(), row["validate_patch_median_ms"].get<double>(),
               row["region"].get<bool>() ? " [region: shape inference = its plan]" : "");
  }
  extra = {{"compile_latency", latency},
           {"compile_paths", paths},
           {"workload_jit", jit_stats},
           {"workload_2t", two_thread_rows}};
  // The O1 summary in its earlier form (end to end per kernel; means of the split).
  std::vector<double> compile_ms;
  double infer = 0, codegen = 0, validate = 0;
  for (const TaggedEvent& t : events) {
    if (t.category != "O1 op kernel") continue;
    compile_ms.push_back(t.event.shape_infer_ms + t.event.codegen_ms + t.event.validate_patch_ms + t.event.tuning_ms);
    infer += t.event.shape_infer_ms;
    codegen += t.event.codegen_ms;
    validate += t.event.validate_patch_ms;
  }
  if (!compile_ms.empty()) {
    const double n = static_cast<double>(compile_ms.size());
    compile_out = {{"level", "O1"}, {"count", compile_ms.size()}, {"median_ms", pct(compile_ms, 0.5)}, {"p90_ms", pct(compile_ms, 0.9)},
                   {"shape_infer_ms", infer / n}, {"codegen_ms", codegen / n}, {"validate_patch_ms", validate / n}};
  }
  return Status::ok();
}

// ---- cold costs: first call, first call after a new shape, latency while compiles are in flight ----

Status coldSuite(const BenchFlags& flags, const Weights& weights, json& out, json& timeline) {
  for (const std::string variant : {"lstm_cell", "lstm_loop"}) {
    const Clock::time_point t0 = Clock::now();
    SVM_ASSIGN_OR_RETURN(Instance instance, makeInstance(flags, variant, 1));
    const Function& fn = instance.module->functions[static_cast<std::size_t>(instance.function)];
    std::vector<double> during, steady;
    double first = 0;
    const std::int64_t cycle[] = {10, 20, 30};
    const int runs = flags.quick ? 40 : 120;
    for (int i = 0; i < runs; ++i) {
      auto args = workloadArgs(fn, weights, 32, cycle[i % 3], 11);
      const Clock::time_point start = Clock::now();
      if (auto ran = instance.vm->run(instance.function, args); !ran) return ran.status();
      const double ms = msSince(start);
      if (i == 0) first = ms;
      const jit::JitStats stats = instance.jit->stats();
      const bool compiling = stats.requests > stats.compiles + stats.compile_failures + stats.validation_failures;
      if (compiling) during.push_back(ms);
      if (variant == "lstm_cell" && timeline.size() < 400) {
        timeline.push_back({{"thread", "interpreter"}, {"name", fmt::format("run seq={}", cycle[i % 3])},
                            {"start_ms", std::chrono::duration<double, std::milli>(start - t0).count()}, {"dur_ms", ms}});
      }
    }
    instance.jit->waitIdle();
    for (int i = 0; i < 30; ++i) {
      auto args = workloadArgs(fn, weights, 32, cycle[i % 3], 11);
      const Clock::time_point start = Clock::now();
      if (auto ran = instance.vm->run(instance.function, args); !ran) return ran.status();
      if (cycle[i % 3] == 20) steady.push_back(msSince(start));
    }
    // A shape never seen: interpreted (guard miss) at first.
    auto fresh = workloadArgs(fn, weights, 32, 77, 12);
    const Clock::time_point start = Clock::now();
    if (auto ran = instance.vm->run(instance.function, fresh); !ran) return ran.status();
    const double after_new_shape = msSince(start);
    if (variant == "lstm_cell") {
      for (const jit::CompileEvent& e : instance.jit->stats().events) {
        timeline.push_back({{"thread", "compile"}, {"name", e.signature}, {"start_ms", e.start_ms},
                            {"dur_ms", e.shape_infer_ms + e.codegen_ms + e.validate_patch_ms}});
      }
    }
    LatencySummary d = summarizeLatency(during), s = summarizeLatency(steady);
    out.push_back({{"variant", variant}, {"level", "O1"}, {"first_call_ms", first}, {"first_after_new_shape_ms", after_new_shape},
                   {"p50_during_compile_ms", d.median}, {"p99_during_compile_ms", d.p99}, {"runs_during_compile", during.size()},
                   {"p50_steady_ms", s.median}});
    fmt::print("cold {:<9} O1: first call {:.2f} ms, first after a new shape {:.2f} ms, while compiling p50 {:.2f} / p99 {:.2f} ms ({} runs), steady p50 {:.2f} ms (seq 20)\n",
               variant, first, after_new_shape, d.median, d.p99, during.size(), s.median);
  }
  return Status::ok();
}

// ---- matmul ----
// oneDNN's matmul primitive (C API) for a row-major C[m, n] = A[m, k] @ B[k, n] on given buffers.
// Created for the thread count OpenMP has when it is built.
class OnednnMatmul {
 public:
  static Expected<std::unique_ptr<OnednnMatmul>> create(std::int64_t m, std::int64_t k, std::int64_t n, void* a,
                                                        void* b, void* c, dnnl_data_type_t dtype = dnnl_f32) {
    auto mm = std::unique_ptr<OnednnMatmul>(new OnednnMatmul());
    auto check = [](dnnl_status_t status, const char* what) -> Status {
      if (status == dnnl_success) return Status::ok();
      return makeError(ErrorCode::Internal, "oneDNN {} failed (status {})", what, static_cast<int>(status));
    };
    SVM_RETURN_IF_ERROR(check(dnnl_engine_create(&mm->engine_, dnnl_cpu, 0), "engine_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_stream_create(&mm->stream_, mm->engine_, dnnl_stream_default_flags), "stream_create"));
    dnnl_memory_desc_t a_md, b_md, c_md;
    const dnnl_dims_t a_dims = {m, k}, b_dims = {k, n}, c_dims = {m, n};
    SVM_RETURN_IF_ERROR(check(dnnl_memory_desc_init_by_tag(&a_md, 2, a_dims, dtype, dnnl_ab), "memory_desc"));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_desc_init_by_tag(&b_md, 2, b_dims, dtype, dnnl_ab), "memory_desc"));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_desc_init_by_tag(&c_md, 2, c_dims, dtype, dnnl_ab), "memory_desc"));
    dnnl_matmul_desc_t desc;
    SVM_RETURN_IF_ERROR(check(dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md), "matmul_desc_init"));
    SVM_RETURN_IF_ERROR(check(dnnl_primitive_desc_create(&mm->pd_, &desc, nullptr, mm->engine_, nullptr), "primitive_desc"));
    SVM_RETURN_IF_ERROR(check(dnnl_primitive_create(&mm->primitive_, mm->pd_), "primitive_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&mm->a_, &a_md, mm->engine_, a), "memory_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&mm->b_, &b_md, mm->engine_, b), "memory_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&mm->c_, &c_md, mm->engine_, c), "memory_create"));
    return mm;
  }
  ~OnednnMatmul() {
    for (dnnl_memory_t mem : {a_, b_, c_}) {
      if (mem != nullptr) dnnl_memory_destroy(mem);
    }
    if (primitive_ != nullptr) dnnl_primitive_destroy(primitive_);
    if (pd_ != nullptr) dnnl_primitive_desc_destroy(pd_);
    if (stream_ != nullptr) dnnl_stream_destroy(stream_);
    if (engine_ != nullptr) dnnl_engine_destroy(engine_);
  }
  void run() {
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}};
    dnnl_primitive_execute(primitive_, stream_, 3, args);
    dnnl_stream_wait(stream_);
  }

 private:
  OnednnMatmul() = default;
  dnnl_engine_t engine_ = nullptr;
  dnnl_stream_t stream_ = nullptr;
  dnnl_primitive_desc_t pd_ = nullptr;
  dnnl_primitive_t primitive_ = nullptr;
  dnnl_memory_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
};

// The matmul family's search space for one shape, timed here: every candidate is compiled, checked
// against the reference and timed (median); the fastest one is kept compiled.
struct TunedMatmul {
  std::unique_ptr<jit::CompiledKernel> kernel;
  double ms = 0;
  int candidates = 0;
  double tune_s = 0;
};

Expected<TunedMatmul> tuneMatmul(jit::LlvmCpuBackend& engine, const jit::KernelFamily& family, const jit::KernelSpec& base,
                                 std::span<const Value* const> inputs, const Tensor& want, int repeats) {
  TunedMatmul best;
  const Clock::time_point start = Clock::now();
  for (const jit::KernelParams& params : family.searchSpace(base)) {
    jit::KernelSpec spec = base;
    spec.params = params;
    auto kernel = jit::compileKernel(engine, family, spec);
    if (!kernel) continue;  // a failed candidate counts as infinitely slow
    ++best.candidates;
    std::vector<Value> out(1);
    auto run = [&] { (void)jit::invokeCompiled(**kernel, inputs, out); };
    run();
    if (!(out[0].isTensor() && relL2(out[0].tensor(), want) <= 1e-5)) {
      (void)engine.free((*kernel)->handle);
      return makeError(ErrorCode::Internal, "matmul candidate {} gives wrong results", params.toString());
    }
    const double ms = medianMs(repeats, run);
    if (std::getenv("SHAPEVM_BENCH_TUNE_LOG") != nullptr) fmt::print("  candidate {:<56} {:8.3f} ms\n", params.toString(), ms);
    if (best.kernel == nullptr || ms < best.ms) {
      if (best.kernel != nullptr) (void)engine.free(best.kernel->handle);
      best.kernel = std::move(*kernel);
      best.ms = ms;
    } else {
      (void)engine.free((*kernel)->handle);
    }
  }
  best.tune_s = msSince(start) / 1000.0;
  if (best.kernel == nullptr) return makeError(ErrorCode::Internal, "no matmul candidate compiled");
  return best;
}

// bfloat16 x bfloat16 -> bfloat16 at the suite's shapes: the JIT's default kernel (bf16 pair dot
// products where the CPU has them) vs the same tile widening to float32 (bf16dot=-1) vs oneDNN's
// bf16 matmul primitive, interleaved; GFLOP/s also as a share of the float32 FMA peak.
Status bf16MatmulRows(const BenchFlags& flags, jit::LlvmCpuBackend& engine, const jit::KernelFamily& family,
                      std::span<const std::array<std::int64_t, 3>> shapes, double f32_peak, json& out) {
  std::mt19937_64 rng(11);
  fmt::print("matmul bfloat16 (bf16 inputs and output, float32 accumulation): GFLOP/s\n");
  for (const auto& [m, k, n] : shapes) {
    auto bf16 = [&](const Shape& shape) {
      Tensor f = randomTensor(shape, rng);
      Tensor t = std::move(Tensor::empty(DType::BFloat16, shape).value());
      for (std::int64_t i = 0; i < f.numel(); ++i) t.data<std::uint16_t>()[i] = floatToBf16(f.data<float>()[i]);
      return Value::fromTensor(std::move(t));
    };
    Value a = bf16(Shape{m, k}), b = bf16(Shape{k, n});
    std::vector<const Value*> inputs = {&a, &b};
    std::vector<Value> want(1), pairs_out(1), wide_out(1);
    {
      const OpSchema& schema = OpRegistry::global().schema(OpId::MatMul);
      OpContext ctx{&schema, inputs, {}, want};
      SVM_RETURN_IF_ERROR(invokeKernel(OpRegistry::global().resolve(OpId::MatMul, inputs), ctx));
    }
    jit::KernelSpec spec = jit::exactSpec(OpId::MatMul, {}, inputs);
    SVM_ASSIGN_OR_RETURN(auto pairs, jit::compileKernel(engine, family, spec));
    spec.params.bf16_dot = -1;
    SVM_ASSIGN_OR_RETURN(auto wide, jit::compileKernel(engine, family, spec));
    Tensor c = std::move(Tensor::empty(DType::BFloat16, Shape{m, n}).value());
    SVM_ASSIGN_OR_RETURN(auto primitive, OnednnMatmul::create(m, k, n, a.tensor().rawData(), b.tensor().rawData(),
                                                              c.rawData(), dnnl_bf16));
    // The same default kernel compiled twice: one packs B on every call (the suite's packed-weight
    // cache is off, like for like with oneDNN), the other keeps B's packing from its first call
    // (a weight reused across calls) through its own PackedOperandCache.
    spec.params = {};
    SVM_ASSIGN_OR_RETURN(auto packed_once, jit::compileKernel(engine, family, spec));
    std::vector<Value> once_out(1);
    auto runPairs = [&] { (void)jit::invokeCompiled(*pairs, inputs, pairs_out); };
    auto runWide = [&] { (void)jit::invokeCompiled(*wide, inputs, wide_out); };
    auto runDnnl = [&] { primitive->run(); };
    auto runOnce = [&] {
      const std::int64_t saved = Tunables::get(Tunable::PackedWeightEntries);
      (void)Tunables::set(Tunable::PackedWeightEntries, 2);
      (void)jit::invokeCompiled(*packed_once, inputs, once_out);
      (void)Tunables::set(Tunable::PackedWeightEntries, saved);
    };
    runPairs();
    runWide();
    runDnnl();
    runOnce();
    runOnce();
    // Each output rounds to bfloat16 (2^-9 relative), so 1e-2 in L2 means every kernel computes
    // the product, in whatever order it sums.
    const double errors[] = {relL2(pairs_out[0].tensor(), want[0].tensor()),
                             relL2(wide_out[0].tensor(), want[0].tensor()), relL2(c, want[0].tensor()),
                             relL2(once_out[0].tensor(), want[0].tensor())};
    for (double e : errors) {
      if (!(e <= 1e-2)) {
        return makeError(ErrorCode::Internal,
                         "bf16 matmul {}x{}x{}: rel L2 {:.3g} / {:.3g} / {:.3g} / {:.3g} (pairs / widening / "
                         "oneDNN / B packed once) vs the reference",
                         m, k, n, errors[0], errors[1], errors[2], errors[3]);
      }
    }
    const bool cache_hit = packed_once->packed.stats().hits > 0;
    const double flop = 2.0 * static_cast<double>(m * k * n);
    const int repeats = std::max(3, static_cast<int>(std::min<double>(flags.quick ? 10 : 40, 3e9 / flop)));
    std::vector<double> pairs_ms, wide_ms, dnnl_ms, once_ms;
    for (int round = 0; round < (flags.quick ? 3 : 5); ++round) {
      pairs_ms.push_back(medianMs(repeats, runPairs));
      wide_ms.push_back(medianMs(repeats, runWide));
      dnnl_ms.push_back(medianMs(repeats, runDnnl));
      once_ms.push_back(medianMs(repeats, runOnce));
    }
    auto gflops = [&](const std::vector<double>& ms) { return flop / (summarizeLatency(ms).median * 1e6); };
    const double pairs_g = gflops(pairs_ms), wide_g = gflops(wide_ms), dnnl_g = gflops(dnnl_ms);
    const double once_g = cache_hit ? gflops(once_ms) : 0.0;
    const bool used_pairs = pairs->handle.symbol.find("bf16pairs") != std::string::npos;
    out.push_back({{"m", m},
                   {"k", k},
                   {"n", n},
                   {"jit_gflops", pairs_g},
                   {"jit_widening_gflops", wide_g},
                   {"onednn_matmul_gflops", dnnl_g},
                   {"jit_packed_once_gflops", once_g},
                   {"f32_peak_gflops", f32_peak},
                   {"bf16_pairs", used_pairs},
                   {"rel_l2", errors[0]},
                   {"rel_l2_widening", errors[1]},
                   {"rel_l2_onednn", errors[2]}});
    fmt::print(
        "matmul bf16 {:>4}x{:>4}x{:>4}: JIT {:6.1f} ({}; {:.2f}x widening {:6.1f}, {:.2f}x oneDNN {:6.1f}; "
        "{:3.0f}% of the f32 FMA peak); B packed once {:6.1f} ({:.2f}x oneDNN)\n",
        m, k, n, pairs_g, used_pairs ? "bf16 pairs" : "widening", pairs_g / wide_g, wide_g, pairs_g / dnnl_g, dnnl_g,
        100.0 * pairs_g / f32_peak, once_g, once_g / dnnl_g);
    (void)engine.free(pairs->handle);
    (void)engine.free(wide->handle);
    (void)engine.free(packed_once->handle);
  }
  return Status::ok();
}

Status matmulSuite(const BenchFlags& flags, jit::LlvmCpuBackend& engine, const std::string& tmp_dir, json& out,
                   json& out_bf16) {
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<PeakMeter> meter, PeakMeter::create(engine.engine()));
  // Tuning quality: the AutoTuner as O2 runs it (its default budget, TuneBudgetMs; repeats and
  // sample length from the tunables) on the same spec, with one fresh database for the suite, so
  // its predictor may order candidates by the earlier shapes' winners as it would in use.
  tune::AutoTunerOptions auto_options;
  auto_options.database_path = tmp_dir + "/matmul/tuning.jsonl";
  tune::AutoTuner auto_tuner(auto_options);
  // Like for like with oneDNN, which packs B on every call: the JIT's packed-weight cache is off
  // for every figure but the "B packed once" one (a weight reused across calls, as in the loop).
  struct RestoreEntries {
    std::int64_t saved = Tunables::get(Tunable::PackedWeightEntries);
    ~RestoreEntries() { (void)Tunables::set(Tunable::PackedWeightEntries, saved); }
  } restore_entries;
  SVM_RETURN_IF_ERROR(Tunables::set(Tunable::PackedWeightEntries, 0));
  const unsigned lanes = meter->lanes();
  double overall_peak = 0;

  struct MatmulShape {
    std::int64_t m, k, n;
  };
  // The issue's shapes, then the reference workload's (seq 10/20/120 x batch 32 rows).
  std::vector<MatmulShape> shapes = {{640, 128, 1024},  {32, 768, 4096},  {256, 256, 256}, {1024, 1024, 1024},
                                     {320, 128, 1024},  {3840, 128, 1024}, {32, 256, 1024}};
  if (flags.quick) shapes = {{640, 128, 1024}, {256, 256, 256}, {32, 256, 1024}};
  // SHAPEVM_BENCH_MATMUL_SHAPES=MxKxN,... : only these shapes (for working on one kernel).
  if (const char* only = std::getenv("SHAPEVM_BENCH_MATMUL_SHAPES"); only != nullptr && *only != '\0') {
    shapes.clear();
    std::string list = only;
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t end = std::min(list.find(',', at), list.size());
      MatmulShape s{};
      const std::string item = list.substr(at, end - at);
      if (std::sscanf(item.c_str(), "%ldx%ldx%ld", &s.m, &s.k, &s.n) != 3 || s.m <= 0 || s.k <= 0 || s.n <= 0) {
        return makeError(ErrorCode::InvalidArgument, "SHAPEVM_BENCH_MATMUL_SHAPES: '{}' is not MxKxN (positive)", item);
      }
      shapes.push_back(s);
      at = end + 1;
    }
  }
  const jit::KernelFamily* family = jit::familyFor(OpId::MatMul);
  if (family == nullptr) return makeError(ErrorCode::Unsupported, "no JIT matmul family");
  std::mt19937_64 rng(5);
  fmt::print("matmul: GFLOP/s (% of the FMA peak measured beside it); ratios vs the faster of oneDNN sgemm / matmul\n");
  for (const MatmulShape& s : shapes) {
    Value a = Value::fromTensor(randomTensor(Shape{s.m, s.k}, rng));
    Value b = Value::fromTensor(randomTensor(Shape{s.k, s.n}, rng));
    std::vector<const Value*> inputs = {&a, &b};
    const KernelEntry& reference = OpRegistry::global().resolve(OpId::MatMul, inputs);
    const OpSchema& schema = OpRegistry::global().schema(OpId::MatMul);
    std::vector<Value> ref_out(1), jit_out(1), best_out(1);
    auto runReference = [&] {
      OpContext ctx{&schema, inputs, {}, ref_out};
      (void)invokeKernel(reference, ctx);
    };
    runReference();
    const Tensor& want = ref_out[0].tensor();
    const jit::KernelSpec spec = jit::exactSpec(OpId::MatMul, {}, inputs);
    SVM_ASSIGN_OR_RETURN(auto kernel, jit::compileKernel(engine, *family, spec));
    auto runJit = [&] { (void)jit::invokeCompiled(*kernel, inputs, jit_out); };
    Tensor c = std::move(Tensor::empty(DType::Float32, Shape{s.m, s.n}).value());
    Tensor c2 = std::move(Tensor::empty(DType::Float32, Shape{s.m, s.n}).value());
    auto runSgemm = [&] {
      dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, a.tensor().data<float>(), s.k, b.tensor().data<float>(), s.n, 0.0f,
                 c.data<float>(), s.n);
    };
    SVM_ASSIGN_OR_RETURN(auto primitive, OnednnMatmul::create(s.m, s.k, s.n, a.tensor().data<float>(),
                                                             b.tensor().data<float>(), c2.data<float>()));
    auto runPrimitive = [&] { primitive->run(); };
    runJit();
    runSgemm();
    runPrimitive();
    const double jit_err = relL2(jit_out[0].tensor(), want);
    const double dnnl_err = std::max(relL2(c, want), relL2(c2, want));
    if (!(jit_err <= 1e-5) || !(dnnl_err <= 1e-5)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{}: JIT rel L2 {:.3g}, oneDNN rel L2 {:.3g} vs the reference",
                       s.m, s.k, s.n, jit_err, dnnl_err);
    }
    const double flop = 2.0 * static_cast<double>(s.m * s.k * s.n);
    const int repeats = std::max(3, static_cast<int>(std::min<double>(flags.quick ? 10 : 40, 3e9 / flop)));
    SVM_ASSIGN_OR_RETURN(TunedMatmul tuned,
                         tuneMatmul(engine, *family, spec, inputs, want, std::max(3, repeats / 4)));
    auto runBest = [&] { (void)jit::invokeCompiled(*tuned.kernel, inputs, best_out); };
    SVM_ASSIGN_OR_RETURN(jit::TuneOutcome auto_outcome, auto_tuner.tune(engine, *family, spec, inputs));
    jit::KernelSpec auto_spec = spec;
    auto_spec.params = auto_outcome.params;
    SVM_ASSIGN_OR_RETURN(auto auto_kernel, jit::compileKernel(engine, *family, auto_spec));
    std::vector<Value> auto_out(1);
    auto runAuto = [&] { (void)jit::invokeCompiled(*auto_kernel, inputs, auto_out); };
    runAuto();
    if (!(relL2(auto_out[0].tensor(), want) <= 1e-5)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{}: the AutoTuner's choice {} gives wrong results", s.m, s.k, s.n,
                       auto_outcome.params.toString());
    }
    std::vector<double> jit_ms, best_ms, ref_ms, sgemm_ms, prim_ms, auto_ms;
    double peak = 0;
    const bool time_reference = flop <= 1e9;  // the reference kernel takes seconds beyond this
    for (int round = 0; round < (flags.quick ? 3 : 5); ++round) {  // interleaved rounds
      peak = std::max(peak, meter->measure());
      jit_ms.push_back(medianMs(repeats, runJit));
      best_ms.push_back(medianMs(repeats, runBest));
      auto_ms.push_back(medianMs(repeats, runAuto));
      sgemm_ms.push_back(medianMs(repeats, runSgemm));
      prim_ms.push_back(medianMs(repeats, runPrimitive));
      if (time_reference) ref_ms.push_back(medianMs(std::min(repeats, 5), runReference));
    }
    auto gflops = [&](const std::vector<double>& ms) { return flop / (summarizeLatency(ms).median * 1e6); };
    const double jit_g = gflops(jit_ms), best_g = gflops(best_ms), auto_g = gflops(auto_ms), sgemm_g = gflops(sgemm_ms),
                 prim_g = gflops(prim_ms), ref_g = time_reference ? gflops(ref_ms) : 0.0;
    // The default kernel with its B packed once and cached (the first call packs; a weight).
    SVM_RETURN_IF_ERROR(Tunables::set(Tunable::PackedWeightEntries, restore_entries.saved > 0 ? restore_entries.saved : 2));
    runJit();
    std::vector<double> cached_ms;
    for (int round = 0; round < (flags.quick ? 2 : 3); ++round) cached_ms.push_back(medianMs(repeats, runJit));
    if (!(relL2(jit_out[0].tensor(), want) <= 1e-5)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{} with B packed once: wrong results", s.m, s.k, s.n);
    }
    const bool cache_hit = kernel->packed.stats().hits > 0;
    kernel->packed.clear();
    SVM_RETURN_IF_ERROR(Tunables::set(Tunable::PackedWeightEntries, 0));
    const double cached_g = cache_hit ? gflops(cached_ms) : 0.0;
    const double dnnl_g = std::max(sgemm_g, prim_g);
    // The clock drifts and other processes share the core: % of peak uses the best peak seen so far.
    overall_peak = std::max(overall_peak, peak);
    peak = overall_peak;

    // Two threads: the tuned parameters with threads=2 vs oneDNN's matmul with two OpenMP threads.
    jit::KernelSpec spec2 = tuned.kernel->spec;
    spec2.params.threads = 2;
    SVM_ASSIGN_OR_RETURN(auto kernel2, jit::compileKernel(engine, *family, spec2));
    std::vector<Value> out2(1);
    auto runJit2 = [&] { (void)jit::invokeCompiled(*kernel2, inputs, out2); };
    runJit2();
    if (!(relL2(out2[0].tensor(), want) <= 1e-5)) {
      return makeError(ErrorCode::Internal, "matmul {}x{}x{} with 2 threads: wrong results", s.m, s.k, s.n);
    }
    omp_set_num_threads(2);
    SVM_ASSIGN_OR_RETURN(auto primitive2, OnednnMatmul::create(s.m, s.k, s.n, a.tensor().data<float>(),
                                                              b.tensor().data<float>(), c2.data<float>()));
    std::vector<double> jit2_ms, prim2_ms;
    // libgomp's idle threads spin for milliseconds after a parallel region (OMP_WAIT_POLICY
    // unset), and on two vCPUs such a spinning thread takes the core the JIT's second worker
    // needs: timed right after oneDNN, 256^3 ran no faster with two threads than with one (231
    // vs 439 GFLOP/s with OMP_WAIT_POLICY=passive). Each side gets the cores to itself: a pause
    // before every round lets the other side's threads go to sleep first.
    auto quiet = [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); };
    for (int round = 0; round < (flags.quick ? 2 : 3); ++round) {
      quiet();
      jit2_ms.push_back(medianMs(repeats, runJit2));
      quiet();
      prim2_ms.push_back(medianMs(repeats, [&] { primitive2->run(); }));
    }
    omp_set_num_threads(1);
    const double jit2_g = gflops(jit2_ms), prim2_g = gflops(prim2_ms);
    (void)engine.free(kernel2->handle);

    const std::string best_params = tuned.kernel->spec.params.toString();
    out.push_back({{"m", s.m}, {"k", s.k}, {"n", s.n}, {"jit_gflops", jit_g}, {"jit_best_gflops", best_g},
                   {"jit_best_params", best_params}, {"candidates", tuned.candidates}, {"tune_s", tuned.tune_s},
                   {"reference_gflops", ref_g}, {"onednn_gflops", dnnl_g}, {"onednn_sgemm_gflops", sgemm_g},
                   {"onednn_matmul_gflops", prim_g}, {"peak_gflops", peak}, {"jit_2t_gflops", jit2_g},
                   {"onednn_matmul_2t_gflops", prim2_g}, {"jit_level", "O1"},
                   {"auto_gflops", auto_g}, {"auto_params", auto_outcome.params.toString()},
                   {"auto_tuning_ms", auto_outcome.tuning_ms}, {"auto_timed", auto_outcome.timed},
                   {"auto_failed", auto_outcome.failed}, {"auto_candidates", auto_outcome.candidates},
                   {"auto_from_database", auto_outcome.from_database},
                   {"auto_budget_ms", Tunables::get(Tunable::TuneBudgetMs)},
                   {"auto_vs_best", auto_g / best_g}, {"auto_vs_default", auto_g / jit_g},
                   {"auto_own_speedup", auto_outcome.best_us > 0 ? auto_outcome.default_us / auto_outcome.best_us : 0.0},
                   {"jit_packed_once_gflops", cached_g}});
    fmt::print("matmul {:>4}x{:>4}x{:>4}: JIT default {:6.1f} ({:3.0f}%, {:.2f}x)  best {:6.1f} ({:3.0f}%, {:.2f}x) [{}]\n",
               s.m, s.k, s.n, jit_g, 100.0 * jit_g / peak, jit_g / dnnl_g, best_g, 100.0 * best_g / peak,
               best_g / dnnl_g, best_params);
    fmt::print("                    oneDNN sgemm {:6.1f}, matmul {:6.1f}; reference {:6.1f}; peak {:.1f}; "
               "tuned {} candidates in {:.1f} s\n",
               sgemm_g, prim_g, ref_g, peak, tuned.candidates, tuned.tune_s);
    fmt::print("                    2 threads: JIT {:6.1f}, oneDNN matmul {:6.1f} ({:.2f}x)\n", jit2_g, prim2_g,
               jit2_g / prim2_g);
    if (cached_g > 0) {
      fmt::print("                    JIT default with B packed once (cached weight): {:6.1f} ({:3.0f}%, {:.2f}x oneDNN)\n",
                 cached_g, 100.0 * cached_g / peak, cached_g / dnnl_g);
    }
    fmt::print("                    AutoTuner (budget {} ms): {} of {} candidates in {:.0f} ms -> {:6.1f} = {:.2f}x the "
               "exhaustive best, {:.2f}x the default, {:.2f}x oneDNN ({:.0f}% of peak) [{}]\n",
               Tunables::get(Tunable::TuneBudgetMs), auto_outcome.timed, auto_outcome.candidates, auto_outcome.tuning_ms,
               auto_g, auto_g / best_g, auto_g / jit_g, auto_g / dnnl_g, 100.0 * auto_g / peak,
               auto_outcome.params.toString());
    (void)engine.free(kernel->handle);
    (void)engine.free(tuned.kernel->handle);
    (void)engine.free(auto_kernel->handle);
    overall_peak = std::max(overall_peak, peak);
  }
  fmt::print("FMA peak (one core, {}-lane FMA, best of 8..24 independent chains): {:.1f} GFLOP/s\n", lanes, overall_peak);
  std::vector<std::array<std::int64_t, 3>> bf16_shapes;
  for (const MatmulShape& s : shapes) bf16_shapes.push_back({s.m, s.k, s.n});
  SVM_RETURN_IF_ERROR(bf16MatmulRows(flags, engine, *family, bf16_shapes, overall_peak, out_bf16));
  return Status::ok();
}

// ---- elementwise ----

constexpr const char* kChainProgram = R"(.module "chain"
.func chain
  .param a : f32[?0]
  .param b : f32[?0]
  .param c : f32[?0]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
  LoadTensor r2, c
  CallOp mul r3 = r0, r1 : f32[?0] x f32[?0] -> f32[?0]
  CallOp add r4 = r3, r2 : f32[?0] x f32[?0] -> f32[?0]
  CallOp sigmoid r5 = r4 : f32[?0] -> f32[?0]
  StoreTensor r5, o0
  Return
.end
)";

Status normalizationSuite(const BenchFlags& flags, double roof_gbps, json& out);

Status elementwiseSuite(const BenchFlags& flags, jit::JitEngine& engine, json& out, json& norms) {
  const std::int64_t n = flags.quick ? (1 << 20) : (1 << 24);
  std::mt19937_64 rng(9);
  std::vector<Value> args = {Value::fromTensor(randomTensor(Shape{n}, rng)), Value::fromTensor(randomTensor(Shape{n}, rng)),
                             Value::fromTensor(randomTensor(Shape{n}, rng))};
  SVM_ASSIGN_OR_RETURN(Module parsed, assemble(kChainProgram, "chain.svasm"));
  auto module = std::make_shared<Module>(std::move(parsed));
  VirtualMachine o0(module);
  VirtualMachine o1(std::make_shared<Module>(*module));
  VirtualMachine o2(std::make_shared<Module>(*module));
  jit::JitOptions options;
  options.level = 1;
  options.wait_for_compiles = true;
  SVM_ASSIGN_OR_RETURN(auto jit, jit::Jit::attach(o1, options));
  options.level = 2;
  SVM_ASSIGN_OR_RETURN(auto jit2, jit::Jit::attach(o2, options));
  for (int i = 0; i < 8; ++i) {
    if (auto ran = o1.run(0, args); !ran) return ran.status();
    if (auto ran = o2.run(0, args); !ran) return ran.status();
  }
  if (jit2->stats().fused_regions == 0) return makeError(ErrorCode::Internal, "elementwise chain: O2 installed no fused region");
  SVM_ASSIGN_OR_RETURN(std::vector<Value> want, o0.run(0, args));
  SVM_ASSIGN_OR_RETURN(std::vector<Value> got, o1.run(0, args));
  SVM_ASSIGN_OR_RETURN(std::vector<Value> got2, o2.run(0, args));
  if (relL2(got[0].tensor(), want[0].tensor()) > 1e-5) return makeError(ErrorCode::Internal, "elementwise chain: O1 differs from O0");
  if (relL2(got2[0].tensor(), want[0].tensor()) > 1e-5) return makeError(ErrorCode::Internal, "elementwise chain: O2 differs from O0");
  SVM_ASSIGN_OR_RETURN(jit::KernelHandle axpy, engine.compile("svm_bench_axpy", [](llvm::Module& m) { return emitAxpy(m, "svm_bench_axpy"); }));
  Tensor y = std::move(Tensor::empty(DType::Float32, Shape{n}).value());
  jit::KernelArgs axpy_args{};
  for (int i = 0; i < 3; ++i) axpy_args.data[i] = args[static_cast<std::size_t>(i)].tensor().rawData();
  axpy_args.data[3] = y.rawData();
  axpy_args.shape[0][0] = n;
  auto axpy_fn = reinterpret_cast<jit::GeneratedKernelFn>(axpy.address);
  std::vector<float> copy_dst(static_cast<std::size_t>(n));
  std::vector<double> o2_ms, o1_ms, o0_ms, axpy_ms, copy_ms;
  const int repeats = flags.quick ? 5 : 9;
  for (int round = 0; round < (flags.quick ? 3 : 5); ++round) {
    o2_ms.push_back(medianMs(repeats, [&] { (void)o2.run(0, args); }));
    o1_ms.push_back(medianMs(repeats, [&] { (void)o1.run(0, args); }));
    o0_ms.push_back(medianMs(repeats, [&] { (void)o0.run(0, args); }));
    axpy_ms.push_back(medianMs(repeats, [&] { axpy_fn(&axpy_args); }));
    copy_ms.push_back(medianMs(repeats, [&] {
      std::memcpy(copy_dst.data(), args[0].tensor().rawData(), static_cast<std::size_t>(n) * 4);
    }));
  }
  const double bytes = 16.0 * static_cast<double>(n);  // 3 inputs + 1 output, one pass
  const double chain2 = bytes / (summarizeLatency(o2_ms).median * 1e6);
  const double chain = bytes / (summarizeLatency(o1_ms).median * 1e6);
  const double chain0 = bytes / (summarizeLatency(o0_ms).median * 1e6);
  const double roof = bytes / (summarizeLatency(axpy_ms).median * 1e6);
  const double copy = 8.0 * static_cast<double>(n) / (summarizeLatency(copy_ms).median * 1e6);
  out.push_back({{"n", n}, {"chain", "sigmoid(a*b+c)"}, {"level", "O2"}, {"chain_o2_gbps", chain2}, {"chain_gbps", chain},
                 {"chain_o0_gbps", chain0}, {"axpy_gbps", roof}, {"memcpy_gbps", copy},
                 {"chain_o2_ms", summarizeLatency(o2_ms).median}, {"chain_ms", summarizeLatency(o1_ms).median},
                 {"axpy_ms", summarizeLatency(axpy_ms).median}});
  fmt::print("elementwise sigmoid(a*b+c) over {} f32: O2 (fused) {:.1f} GB/s effective = {:.0f}% of the one-pass y=a*b+c "
             "roofline {:.1f} GB/s; O1 {:.1f} ({:.0f}%), O0 {:.1f}; memcpy {:.1f} GB/s\n",
             n, chain2, 100.0 * chain2 / roof, roof, chain, 100.0 * chain / roof, chain0, copy);
  (void)engine.remove(axpy);
  return normalizationSuite(flags, roof, norms);
}

// ---- fused reductions and normalizations ----

// softmax / layer_norm of an elementwise producer over rows of 1024: at O2 the statistics are
// fused reductions of the producer (never stored) and the normalization's output is computed in
// its consumer's kernel. Effective GB/s counts one read of x and one write of y per element
// (the minimum any implementation moves), against the same one-pass roofline as the chain.
constexpr const char* kNormProgram = R"(.module "norms"
.func softmax
  .param x : f32[?0,1024]
  .param w : f32[1024]
  .param b : f32[1024]
  .outputs 1
  LoadTensor r0, x
  LoadTensor r1, w
  LoadTensor r2, b
  CallOp mul r3 = r0, r1 : f32[?0,1024] x f32[1024] -> f32[?0,1024]
  CallOp add r4 = r3, r2 : f32[?0,1024] x f32[1024] -> f32[?0,1024]
  CallOp softmax r5 = r4 {axis=-1} : f32[?0,1024] -> f32[?0,1024]
  StoreTensor r5, o0
  Return
.end
.func layer_norm
  .param x : f32[?0,1024]
  .param w : f32[1024]
  .param b : f32[1024]
  .outputs 1
  LoadTensor r0, x
  LoadTensor r1, w
  LoadTensor r2, b
  CallOp add r3 = r0, r2 : f32[?0,1024] x f32[1024] -> f32[?0,1024]
  CallOp layer_norm r4 = r3, r1, r2 {axis=-1, eps=1e-05} : f32[?0,1024] x f32[1024] x f32[1024] -> f32[?0,1024]
  CallOp relu r5 = r4 : f32[?0,1024] -> f32[?0,1024]
  StoreTensor r5, o0
  Return
.end
)";

Status normalizationSuite(const BenchFlags& flags, double roof_gbps, json& out) {
  const std::int64_t rows = flags.quick ? 256 : 4096;
  const std::int64_t n = rows * 1024;
  std::mt19937_64 rng(11);
  std::vector<Value> args = {Value::fromTensor(randomTensor(Shape{rows, 1024}, rng)),
                             Value::fromTensor(randomTensor(Shape{1024}, rng)), Value::fromTensor(randomTensor(Shape{1024}, rng))};
  SVM_ASSIGN_OR_RETURN(Module parsed, assemble(kNormProgram, "norms.svasm"));
  auto module = std::make_shared<Module>(std::move(parsed));
  for (int fn = 0; fn < static_cast<int>(module->functions.size()); ++fn) {
    const std::string& name = module->functions[static_cast<std::size_t>(fn)].name;
    VirtualMachine o0(module);
    VirtualMachine o1(std::make_shared<Module>(*module));
    VirtualMachine o2(std::make_shared<Module>(*module));
    jit::JitOptions options;
    options.level = 1;
    options.wait_for_compiles = true;
    SVM_ASSIGN_OR_RETURN(auto jit1, jit::Jit::attach(o1, options));
    options.level = 2;
    SVM_ASSIGN_OR_RETURN(auto jit2, jit::Jit::attach(o2, options));
    // Until the region is hot and installed (the default thresholds; small inputs take more runs).
    for (int i = 0; i < 64 && (i < 8 || jit2->stats().fused_regions == 0); ++i) {
      if (auto ran = o1.run(fn, args); !ran) return ran.status();
      if (auto ran = o2.run(fn, args); !ran) return ran.status();
    }
    if (jit2->stats().fused_regions == 0) return makeError(ErrorCode::Internal, "{}: O2 installed no fused region", name);
    SVM_ASSIGN_OR_RETURN(std::vector<Value> want, o0.run(fn, args));
    SVM_ASSIGN_OR_RETURN(std::vector<Value> got1, o1.run(fn, args));
    SVM_ASSIGN_OR_RETURN(std::vector<Value> got2, o2.run(fn, args));
    if (relL2(got1[0].tensor(), want[0].tensor()) > 1e-5 || relL2(got2[0].tensor(), want[0].tensor()) > 1e-5) {
      return makeError(ErrorCode::Internal, "{}: O1/O2 differ from O0", name);
    }
    std::vector<double> o2_ms, o1_ms, o0_ms;
    const int repeats = flags.quick ? 5 : 9;
    for (int round = 0; round < (flags.quick ? 3 : 5); ++round) {
      o2_ms.push_back(medianMs(repeats, [&] { (void)o2.run(fn, args); }));
      o1_ms.push_back(medianMs(repeats, [&] { (void)o1.run(fn, args); }));
      o0_ms.push_back(medianMs(repeats, [&] { (void)o0.run(fn, args); }));
    }
    const double bytes = 8.0 * static_cast<double>(n);
    const double t2 = summarizeLatency(o2_ms).median, t1 = summarizeLatency(o1_ms).median, t0 = summarizeLatency(o0_ms).median;
    const double gbps = bytes / (t2 * 1e6);
    out.push_back({{"op", name}, {"rows", rows}, {"cols", 1024}, {"o2_ms", t2}, {"o1_ms", t1}, {"o0_ms", t0},
                   {"o2_gbps", gbps}, {"roofline_gbps", roof_gbps}});
    fmt::print("fused {} of an elementwise producer over [{},1024] f32: O2 {:.3f} ms ({:.1f} GB/s effective = {:.0f}% of the "
               "one-pass roofline), O1 {:.3f} ms ({:.2f}x O2), O0 {:.3f} ms ({:.2f}x O2)\n",
               name, rows, t2, gbps, 100.0 * gbps / roof_gbps, t1, t1 / t2, t0, t0 / t2);
  }
  return Status::ok();
}

// ---- per-op overhead ----

Status overheadSuite(const BenchFlags& flags, json& out) {
  std::string text = ".module \"overhead\"\n.func f\n  .param a : f32[1]\n  .outputs 1\n  LoadTensor r0, a\n";
  const int ops = 64;
  for (int i = 0; i < ops; ++i) text += fmt::format("  CallOp add r{} = r{}, r0 : f32[1] x f32[1] -> f32[1]\n", i + 1, i);
  text += fmt::format("  StoreTensor r{}, o0\n  Return\n.end\n", ops);
  SVM_ASSIGN_OR_RETURN(Module parsed, assemble(text, "overhead.svasm"));
  auto module = std::make_shared<Module>(std::move(parsed));
  for (bool profile : {true, false}) {
    VmOptions options;
    options.profile = profile;
    VirtualMachine vm(module, options);
    std::vector<Value> args = {Value::fromTensor(std::move(Tensor::empty(DType::Float32, Shape{1}).value()))};
    args[0].tensor().data<float>()[0] = 1.0f;
    for (int i = 0; i < 100; ++i) (void)vm.run(0, args);
    std::vector<double> per_op;
    const int calls = flags.quick ? 200 : 2000;
    for (int round = 0; round < 7; ++round) {
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < calls; ++i) (void)vm.run(0, args);
      per_op.push_back(msSince(start) * 1e6 / (static_cast<double>(calls) * ops));
    }
    const double ns = summarizeLatency(per_op).median;
    out.push_back({{"what", fmt::format("CallOp add 1-elem f32 ({})", profile ? "profiled" : "unprofiled")}, {"ns", ns}});
    fmt::print("per-op overhead, CallOp add on 1-element f32, {}: {:.1f} ns/op\n", profile ? "profiled" : "unprofiled", ns);
  }
  return Status::ok();
}

// ---- memory ----

Status memorySuite(const BenchFlags& flags, const Weights& weights, json& out) {
  for (const std::string variant : {"lstm_cell", "lstm_loop"}) {
    const std::int64_t before = heapBytes();
    SVM_ASSIGN_OR_RETURN(Instance instance, makeInstance(flags, variant, 0));
    const std::int64_t context = heapBytes() - before;
    // The JIT beside it: engine, kernels, LLVM's own code pages — reported separately.
    const Function& fn = instance.module->functions[static_cast<std::size_t>(instance.function)];
    const std::int64_t before_jit = residentBytes();
    const std::int64_t before_jit_heap = heapBytes();
    jit::JitOptions options;
    options.level = 1;
    options.wait_for_compiles = true;
    SVM_ASSIGN_OR_RETURN(instance.jit, jit::Jit::attach(*instance.vm, options));
    for (int i = 0; i < 8; ++i) {
      if (auto ran = instance.vm->run(instance.function, workloadArgs(fn, weights, 32, 10, 3)); !ran) return ran.status();
    }
    const std::int64_t jit_bytes = residentBytes() - before_jit;
    const std::int64_t jit_heap = heapBytes() - before_jit_heap;
    out.push_back({{"module", variant}, {"context_bytes", context}, {"llvm_code_bytes", jit_bytes},
                   {"jit_heap_bytes", jit_heap}, {"kernels", instance.jit->stats().compiles}});
    fmt::print("memory {:<9}: VM context (module + runtime state, heap) {:.1f} KB; JIT with {} kernels (incl. LLVM): {:.1f} KB RSS, {:.1f} KB heap\n",
               variant, static_cast<double>(context) / 1024, instance.jit->stats().compiles, static_cast<double>(jit_bytes) / 1024,
               static_cast<double>(jit_heap) / 1024);
  }
  return Status::ok();
}

}  // namespace

int benchCommand(const BenchFlags& flags_in) {
  BenchFlags flags = flags_in;
  const std::vector<std::string> known = {"workload", "cold", "matmul", "elementwise", "overhead", "memory"};
  std::vector<std::string> suites = flags.suites.empty() ? known : flags.suites;
  for (const std::string& suite : suites) {
    if (std::find(known.begin(), known.end(), suite) == known.end()) {
      fmt::print(stderr, "shapevm: error: unknown bench suite '{}' (suites: workload, cold, matmul, elementwise, overhead, memory)\n", suite);
      return 2;
    }
  }
  if (flags.examples.empty()) flags.examples = std::string(SHAPEVM_SOURCE_DIR) + "/examples";
  omp_set_num_threads(1);  // oneDNN (OpenMP build): single thread like everything else here
  // The defaults, then the SHAPEVM_* variables (an A/B of a setting needs no rebuild); the ones
  // that differ from the defaults are printed and recorded with the results.
  Tunables::resetToDefaults();
  if (Status env = Tunables::loadFromEnvironment(); !env.isOk()) {
    fmt::print(stderr, "shapevm: error: {}\n", env.toString());
    return 2;
  }
  json tunables = json::object();
  for (std::size_t t = 0; t < Tunables::all().size(); ++t) {
    const TunableInfo& info = Tunables::all()[t];
    const std::int64_t value = Tunables::get(static_cast<Tunable>(t));
    if (value != info.default_value) tunables[std::string(info.key)] = value;
  }
  if (!tunables.empty()) fmt::print("shapevm bench: tunables from the environment: {}\n", tunables.dump());
  auto wants = [&](const char* name) { return std::find(suites.begin(), suites.end(), name) != suites.end(); };

  std::mt19937_64 rng(123);
  Weights weights{randomTensor(Shape{1024, 128}, rng, 0.1), randomTensor(Shape{1024, 256}, rng, 0.1),
                  randomTensor(Shape{1024}, rng), randomTensor(Shape{1024}, rng)};
  auto engine = jit::LlvmCpuBackend::create();
  if (!engine) {
    fmt::print(stderr, "shapevm: error: {}\n", engine.status().toString());
    return 1;
  }
  json result = {{"cpu", cpuModel()},
                 {"features", (*engine)->engine().cpuFeatures()},
                 {"cpu_name", (*engine)->engine().cpuName()},
                 {"tunables", tunables},
                 {"quick", flags.quick},
                 {"threads", Tunables::get(Tunable::KernelThreads)}};
  {
    std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
    result["date"] = date;
  }
  fmt::print("shapevm bench{}: {} ({}), single thread\n", flags.quick ? " --quick" : "", cpuModel(), (*engine)->engine().cpuName());
  auto check = [&](Status status, const char* suite) {
    if (status.isOk()) return true;
    fmt::print(stderr, "shapevm: error: bench suite '{}': {}\n", suite, status.toString());
    return false;
  };
  json workload = json::array(), compile = json::object(), cold = json::array(), timeline = json::array(),
       matmul = json::array(), matmul_bf16 = json::array(), elementwise = json::array(), overhead = json::array(),
       memory = json::array(), workload_extra = json::object(), norms = json::array();
  // Tuning databases of this run (the O2 workload instances and the matmul tuning-quality check):
  // fresh, so every run pays (and reports) its tuning; removed at the end.
  std::string tmp_dir;
  {
    std::string pattern = (std::filesystem::temp_directory_path() / "shapevm-bench-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      fmt::print(stderr, "shapevm: error: cannot create a temporary directory {}\n", pattern);
      return 1;
    }
    tmp_dir = pattern;
  }
  struct RemoveTmp {
    std::string dir;
    ~RemoveTmp() {
      std::error_code error;
      std::filesystem::remove_all(dir, error);
    }
  } remove_tmp{tmp_dir};
  bool ok = true;
  if (wants("overhead")) ok = check(overheadSuite(flags, overhead), "overhead") && ok;
  if (wants("matmul")) ok = check(matmulSuite(flags, **engine, tmp_dir, matmul, matmul_bf16), "matmul") && ok;
  if (wants("elementwise")) ok = check(elementwiseSuite(flags, (*engine)->engine(), elementwise, norms), "elementwise") && ok;
  if (wants("workload")) ok = check(workloadSuite(flags, (*engine)->engine(), weights, tmp_dir, workload, compile, workload_extra), "workload") && ok;
  if (wants("cold")) ok = check(coldSuite(flags, weights, cold, timeline), "cold") && ok;
  if (wants("memory")) ok = check(memorySuite(flags, weights, memory), "memory") && ok;
  result["workload"] = workload;
  result["stream"] = benchStream(flags.quick);
  result["compile"] = compile;
  for (const char* key : {"compile_latency", "compile_paths", "workload_jit", "workload_2t"}) {
    result[key] = workload_extra.contains(key) ? workload_extra[key] : json::array();
  }
  result["cold"] = cold;
  result["timeline"] = timeline;
  result["matmul"] = matmul;
  result["matmul_bf16"] = matmul_bf16;
  result["elementwise"] = elementwise;
  result["normalizations"] = norms;
  result["overhead"] = overhead;
  result["memory"] = memory;
  if (!flags.out.empty()) {
    std::error_code error;
    std::filesystem::create_directories(flags.out, error);
    std::ofstream file(flags.out + "/shapevm.json");
    if (!file) {
      fmt::print(stderr, "shapevm: error: cannot write {}/shapevm.json\n", flags.out);
      return 1;
    }
    file << result.dump(1) << "\n";
    fmt::print("wrote {}/shapevm.json\n", flags.out);
  }
  return ok ? 0 : 1;
}

}  // namespace shapevm
