// SPDX-License-Identifier: Apache-2.0
// The benchmark executable's shared pieces (bench/shapevm_bench.cc runs the suites): flags,
// timing and error helpers, the FMA-peak meter, the reference workload's inputs and a Session
// per (variant, JIT level). Every suite checks its outputs against the reference path before it
// times anything; timings are medians over interleaved rounds, single thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bytecode/module.h"
#include "jit/kernel_abi.h"
#include "jit/llvm_cpu/engine.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"
#include "session/session_access.h"
#include "shapevm/shapevm.h"
#include "tools/cli_inputs.h"
#include "vm/vm.h"

namespace llvm {
class Module;
}

namespace shapevm::bench {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct BenchFlags {
  std::vector<std::string> suites;  // empty = all but compile: workload, cold, matmul, elementwise, overhead, memory
  bool quick = false;               // < 2 minutes in all (CI smoke test; no thresholds asserted)
  std::string out;                  // directory for shapevm.json (printed summary either way)
  std::string examples;             // folder with lstm_cell.py / lstm_loop.py
};

double msSince(Clock::time_point start);
double relL2(const Tensor& got, const Tensor& want);
// Heap bytes in use (glibc's allocator): page-granular RSS misses small structures.
std::int64_t heapBytes();
std::int64_t residentBytes();
std::string cpuModel();
Tensor randomTensor(const Shape& shape, std::mt19937_64& rng, double scale = 1.0);

// y[i] = a[i] * b[i] + c[i]: one pass over memory, the roofline for elementwise chains.
Status emitAxpy(llvm::Module& module, const std::string& symbol);

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
  static Expected<std::unique_ptr<PeakMeter>> create(jit::JitEngine& engine);
  ~PeakMeter();
  // GFLOP/s of this measurement; best() keeps the maximum over all of them.
  double measure();
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
                                std::uint64_t seed);

// One variant (lstm_cell / lstm_loop) at one JIT level: a Session and the parts the suites read.
struct Instance {
  std::string variant;
  int level = 0;
  std::unique_ptr<Session> session;
  std::shared_ptr<Module> module;
  VirtualMachine* vm = nullptr;  // the session's (per-run counters)
  int function = 0;
  jit::Jit* jit() const { return SessionAccess::jit(*session); }
  tune::AutoTuner* tuner() const { return SessionAccess::tuner(*session); }
};

// At O2 with a non-empty `tuning_db`, an AutoTuner on that database file is attached (a fresh
// AutoTuner each time: it reads whatever the file holds when it is created).
Expected<Instance> makeInstance(const BenchFlags& flags, const std::string& variant, int level,
                                const std::string& tuning_db = "", std::int64_t tune_budget_ms = -1,
                                bool jit_wait = false);
// A Session on .svasm text at `level`, every compile waited for, no AutoTuner (kernel suites).
Expected<std::unique_ptr<Session>> svasmSession(std::string_view text, const std::string& filename, int level);
Expected<Tensor> firstOutput(Instance& instance, const std::vector<Value>& args);
// The shuffled stream of seq drawn from 8..128 (fixed seed; the peers time the same list).
std::vector<std::int64_t> benchStream(bool quick);

// ---- the suites (each appends its rows to `out`) ----

Status workloadSuite(const BenchFlags& flags, jit::JitEngine& engine, const Weights& weights,
                     const std::string& tmp_dir, json& out, json& compile_out, json& extra);
// JitOptPipeline 0 (LLVM O3) against 1 (the kernel pipeline): cold compile CPU time and kernel speed.
Status compileSuite(const BenchFlags& flags, jit::LlvmCpuBackend& backend, const Weights& weights, json& out);
// The matmul family's generated code: IR size before the passes, object bytes, the thread CPU of
// emit + IR passes and of machine code, and us per call (checked against the reference) for the
// reference cell's matmuls, a range kernel and a small one; the default configuration only.
Status matmulCodegenSuite(const BenchFlags& flags, jit::LlvmCpuBackend& backend, json& out);
Status coldSuite(const BenchFlags& flags, const Weights& weights, const std::string& tmp_dir, json& out,
                 json& timeline);
Status memorySuite(const BenchFlags& flags, const Weights& weights, json& out);
Status matmulSuite(const BenchFlags& flags, jit::LlvmCpuBackend& engine, const std::string& tmp_dir, json& out,
                   json& out_bf16);
Status elementwiseSuite(const BenchFlags& flags, jit::JitEngine& engine, json& out, json& norms);
Status overheadSuite(const BenchFlags& flags, json& out);

}  // namespace shapevm::bench
