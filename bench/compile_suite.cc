// SPDX-License-Identifier: Apache-2.0
// The compile suite: what a cold kernel costs to build under each compile configuration (the IR
// pipeline, jit_opt_pipeline: LLVM's O3 or the short kernel pipeline; the backend level,
// jit_codegen_level: Aggressive, Default or Less), and what the kernels it gives cost to run. On the
// reference workload's O1 kernels: CPU time of this thread for a whole compile (KernelBackend::compile:
// emit, IR passes, machine code) and for the rest of compileKernel (link; a kernel cache lookup), and each
// kernel's time per call; then the workload's steady time per call at O1 and O2 (untuned) with
// every kernel built under each configuration (compile threads at nice 0 for it). Invariant: the
// configurations alternate within every round (this machine's speed drifts) and every kernel is
// checked against the reference before it is timed; figures are medians.
#include <time.h>

#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

#include <llvm/IR/Module.h>

#include "bench/bench_common.h"
#include "jit/compiled_kernel.h"
#include "jit/jit.h"
#include "jit/llvm_cpu/engine.h"
#include "support/tunables.h"

namespace shapevm::bench {

namespace {

double threadCpuMs() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The compile configurations compared, the defaults' first.
struct CompileConfig {
  const char* tag;    // JSON key prefix
  const char* label;  // printed
  std::int64_t pipeline, codegen_level;
};
constexpr CompileConfig kConfigs[] = {
    {"kernel", "kernel+Aggr", 1, 3},
    {"o3", "O3+Aggr", 0, 3},
    {"kernel_cg2", "kernel+Default", 1, 2},
    {"kernel_cg1", "kernel+Less", 1, 1},
};
constexpr int kConfigCount = static_cast<int>(std::size(kConfigs));

Status applyConfig(int config) {
  SVM_RETURN_IF_ERROR(Tunables::set(Tunable::JitOptPipeline, kConfigs[config].pipeline));
  return Tunables::set(Tunable::JitCodegenLevel, kConfigs[config].codegen_level);
}

Status restoreDefaults() {
  for (Tunable t : {Tunable::JitOptPipeline, Tunable::JitCodegenLevel, Tunable::CompileNice}) {
    SVM_RETURN_IF_ERROR(Tunables::set(t, Tunables::info(t).default_value));
  }
  return Status::ok();
}

// One of the workload's O1 kernels on inputs of its shapes (batch 32, seq 30).
struct CompileCase {
  std::string name;
  OpId op;
  std::vector<Value> inputs;
};

std::vector<CompileCase> compileCases(std::mt19937_64& rng) {
  auto value = [&](const Shape& shape) { return Value::fromTensor(randomTensor(shape, rng)); };
  // W.T of a [n, k] weight: a [k, n] view with strides (1, k), as x @ W.T reads it.
  auto transposed = [&](std::int64_t k, std::int64_t n) {
    return Value::fromTensor(randomTensor(Shape{n, k}, rng).asStrided(Shape{k, n}, Shape{1, k}, 0).value());
  };
  // One gate of the [32, 30, 1024] pre-activations: a [32, 30, 256] view (split along the last axis).
  auto gate = [&] {
    return Value::fromTensor(
        randomTensor(Shape{32, 30, 1024}, rng).asStrided(Shape{32, 30, 256}, Shape{30 * 1024, 1024, 1}, 256).value());
  };
  std::vector<CompileCase> cases;
  cases.push_back({"matmul 960x128 @ W.T(128x1024)", OpId::MatMul, {value(Shape{960, 128}), transposed(128, 1024)}});
  cases.push_back({"matmul 32x256 @ W.T(256x1024)", OpId::MatMul, {value(Shape{32, 256}), transposed(256, 1024)}});
  cases.push_back({"add 32x30x1024 + 32x1x1024", OpId::Add, {value(Shape{32, 30, 1024}), value(Shape{32, 1, 1024})}});
  cases.push_back({"sigmoid of a gate view", OpId::Sigmoid, {gate()}});
  cases.push_back({"tanh of a gate view", OpId::Tanh, {gate()}});
  cases.push_back({"mul 32x30x256 * 32x30x256", OpId::Mul, {value(Shape{32, 30, 256}), value(Shape{32, 30, 256})}});
  return cases;
}

struct CaseTimes {
  std::vector<double> build_ms[kConfigCount], codegen_ms[kConfigCount], call_us[kConfigCount];
};

// The O1 kernels, configurations alternating per round.
Status kernelRows(const BenchFlags& flags, jit::LlvmCpuBackend& backend, json& out) {
  std::mt19937_64 rng(23);
  std::vector<CompileCase> cases = compileCases(rng);
  std::vector<CaseTimes> times(cases.size());
  const int rounds = flags.quick ? 3 : 7;
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t c = 0; c < cases.size(); ++c) {
      CompileCase& kase = cases[c];
      std::vector<const Value*> inputs;
      for (const Value& v : kase.inputs) inputs.push_back(&v);
      const jit::KernelFamily* family = jit::familyFor(kase.op);
      if (family == nullptr) return makeError(ErrorCode::Internal, "no kernel family for {}", kase.name);
      const jit::KernelSpec spec = backend.targetSpec(jit::exactSpec(kase.op, {}, inputs));
      std::vector<Value> want(1);
      SVM_RETURN_IF_ERROR(family->reference(spec, inputs, want));
      for (int p = 0; p < kConfigCount; ++p) {
        const int config = (round % 2 == 0) ? p : kConfigCount - 1 - p;  // order alternating
        SVM_RETURN_IF_ERROR(applyConfig(config));
        // A whole compile (emit, IR passes, machine code; the object is dropped), then compileKernel
        // (link; its kernel cache already holds this configuration's object from the first round on).
        double start = threadCpuMs();
        SVM_ASSIGN_OR_RETURN(std::unique_ptr<jit::KernelCode> code,
                             backend.compile(*family, spec, "svm_bench_" + family->symbolStem(spec)));
        const double build_ms = threadCpuMs() - start;
        code.reset();
        start = threadCpuMs();
        SVM_ASSIGN_OR_RETURN(std::unique_ptr<jit::CompiledKernel> kernel, jit::compileKernel(backend, *family, spec));
        const double total_ms = threadCpuMs() - start;
        std::vector<Value> got(1);
        auto call = [&] { (void)jit::invokeCompiled(*kernel, inputs, got); };
        call();
        const double error = got[0].isTensor() ? relL2(got[0].tensor(), want[0].tensor()) : 1.0;
        if (!(error <= 1e-5)) {
          (void)backend.free(kernel->handle);
          return makeError(ErrorCode::Internal, "{} ({}): rel L2 {:.3g} against the reference", kase.name,
                           kConfigs[config].label, error);
        }
        const double call_ms = medianMs(flags.quick ? 15 : 41, call);
        (void)backend.free(kernel->handle);
        times[c].build_ms[config].push_back(build_ms);
        times[c].codegen_ms[config].push_back(std::max(0.0, total_ms - build_ms));
        times[c].call_us[config].push_back(call_ms * 1e3);
      }
    }
  }
  SVM_RETURN_IF_ERROR(restoreDefaults());
  fmt::print(
      "compile: thread CPU ms per cold kernel (compile: emit + IR + machine code | link) and us per call, "
      "medians of {} rounds, per configuration (IR pipeline + backend level)\n",
      rounds);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const CaseTimes& t = times[c];
    json row = {{"kernel", cases[c].name}, {"rounds", rounds}};
    std::string line;
    for (int p = 0; p < kConfigCount; ++p) {
      const std::string tag = kConfigs[p].tag;
      row[tag + "_compile_cpu_ms"] = median(t.build_ms[p]);
      row[tag + "_link_cpu_ms"] = median(t.codegen_ms[p]);
      row[tag + "_call_us"] = median(t.call_us[p]);
      line += fmt::format("; {} compile {:.1f} + link {:.1f} = {:.1f} ms, call {:.1f} us", kConfigs[p].label,
                          median(t.build_ms[p]), median(t.codegen_ms[p]),
                          median(t.build_ms[p]) + median(t.codegen_ms[p]), median(t.call_us[p]));
    }
    out.push_back(row);
    fmt::print("compile {:<34}{}\n", cases[c].name, line);
  }
  return Status::ok();
}

// ---- the matmul family's code size and cold compile cost (the default configuration, under the
// family's backend passes and under all passes) ----

// One matmul kernel: its spec's A (rows `m`, or the range m_lo..m_hi when m_hi > m_lo) x B, and
// the row counts it is called (and checked) at.
struct MatmulCase {
  std::string name;
  std::int64_t m_lo, m_hi, k, n;
  bool b_transposed;  // B = W.T, a [k, n] view of a row-major [n, k] weight (x @ W.T)
  std::vector<std::int64_t> call_rows;
};

// The generator's IR before the passes: functions, basic blocks, instructions.
struct IrSize {
  std::size_t functions = 0, blocks = 0, instructions = 0;
};
IrSize irSize(const llvm::Module& module) {
  IrSize size;
  for (const llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    ++size.functions;
    for (const llvm::BasicBlock& block : f) {
      ++size.blocks;
      size.instructions += block.size();
    }
  }
  return size;
}

}  // namespace

Status matmulCodegenSuite(const BenchFlags& flags, jit::LlvmCpuBackend& backend, json& out) {
  const std::vector<MatmulCase> cases = {
      {"cell x @ W_ih.T 960x128x1024", 960, 960, 128, 1024, true, {960}},
      {"cell h @ W_hh.T 32x256x1024", 32, 32, 256, 1024, true, {32}},
      {"range [256..1024]x128x1024", 256, 1024, 128, 1024, false, {256, 601, 1024}},
      {"small 32x48x64", 32, 32, 48, 64, false, {32}},
  };
  const jit::KernelFamily* family = jit::familyFor(OpId::MatMul);
  if (family == nullptr) return makeError(ErrorCode::Internal, "no matmul kernel family");
  std::mt19937_64 rng(23);
  const int rounds = flags.quick ? 3 : 7;
  struct Times {
    std::vector<double> ir_ms, machine_ms;
    std::map<std::int64_t, std::vector<double>> call_us;
    IrSize ir;
    std::size_t object_bytes = 0;
  };
  // Per case, the family's backend passes (the default: hand-vectorized modules skip some; see
  // markHandVectorized) and every pass, alternating within each round.
  constexpr int kPassSets = 2;
  constexpr const char* kPassSetTags[kPassSets] = {"", "all_passes_"};
  std::vector<std::array<Times, kPassSets>> times(cases.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t c = 0; c < cases.size(); ++c) {
      for (int q = 0; q < kPassSets; ++q) {
        const int set = (round + static_cast<int>(c)) % 2 == 0 ? q : kPassSets - 1 - q;
        backend.engine().setSkipHandVectorizedPasses(set == 0);
        Times& time = times[c][static_cast<std::size_t>(set)];
        const MatmulCase& kase = cases[c];
        // Inputs at every called row count; the spec from the first, with M a range when asked.
        std::map<std::int64_t, std::vector<Value>> inputs;
        for (std::int64_t rows : kase.call_rows) {
          std::vector<Value> values{Value::fromTensor(randomTensor(Shape{rows, kase.k}, rng))};
          if (kase.b_transposed) {
            values.push_back(Value::fromTensor(randomTensor(Shape{kase.n, kase.k}, rng)
                                                   .asStrided(Shape{kase.k, kase.n}, Shape{1, kase.k}, 0)
                                                   .value()));
          } else {
            values.push_back(Value::fromTensor(randomTensor(Shape{kase.k, kase.n}, rng)));
          }
          inputs[rows] = std::move(values);
        }
        auto pointers = [&](std::int64_t rows) {
          std::vector<const Value*> p;
          for (const Value& v : inputs.at(rows)) p.push_back(&v);
          return p;
        };
        jit::KernelSpec spec = jit::exactSpec(OpId::MatMul, {}, pointers(kase.call_rows.front()));
        if (kase.m_hi > kase.m_lo) {
          spec.inputs[0].dims[0].size = -1;
          static_cast<DimRange&>(spec.inputs[0].dims[0]) = DimRange::between(kase.m_lo, kase.m_hi);
        }
        spec = backend.targetSpec(spec);
        const std::string symbol = "svm_bench_cg_" + family->symbolStem(spec);
        const auto* emitter = dynamic_cast<const jit::LlvmKernelEmitter*>(family);
        if (emitter == nullptr) return makeError(ErrorCode::Internal, "the matmul family emits no LLVM IR");
        // Emit + IR passes, then machine code, each timed on this thread's CPU clock.
        double start = threadCpuMs();
        SVM_ASSIGN_OR_RETURN(std::unique_ptr<jit::KernelCode> built,
                             backend.engine().build(symbol, [&](llvm::Module& module) {
                               SVM_RETURN_IF_ERROR(emitter->emit(spec, module, symbol));
                               time.ir = irSize(module);
                               return Status::ok();
                             }));
        const double ir_ms = threadCpuMs() - start;
        start = threadCpuMs();
        SVM_ASSIGN_OR_RETURN(std::unique_ptr<jit::KernelCode> object, backend.engine().emitObject(std::move(built)));
        const double machine_ms = threadCpuMs() - start;
        time.object_bytes = backend.codeBytes(*object).size();
        time.ir_ms.push_back(ir_ms);
        time.machine_ms.push_back(machine_ms);
        SVM_ASSIGN_OR_RETURN(jit::KernelHandle handle, backend.load(std::move(object)));
        auto kernel = std::make_unique<jit::CompiledKernel>();
        kernel->family = family;
        kernel->spec = spec;
        kernel->handle = handle;
        kernel->backend = &backend;
        for (std::int64_t rows : kase.call_rows) {
          const std::vector<const Value*> in = pointers(rows);
          std::vector<Value> want(1), got(1);
          SVM_RETURN_IF_ERROR(family->reference(spec, in, want));
          auto call = [&] { (void)jit::invokeCompiled(*kernel, in, got); };
          call();
          const double error = got[0].isTensor() ? relL2(got[0].tensor(), want[0].tensor()) : 1.0;
          if (!(error <= 1e-5)) {
            (void)backend.free(handle);
            backend.engine().setSkipHandVectorizedPasses(true);
            return makeError(ErrorCode::Internal, "{} at {} rows ({}): rel L2 {:.3g} against the reference", kase.name,
                             rows, set == 0 ? "family passes" : "all passes", error);
          }
          time.call_us[rows].push_back(medianMs(flags.quick ? 15 : 41, call) * 1e3);
        }
        (void)backend.free(handle);
      }
    }
  }
  backend.engine().setSkipHandVectorizedPasses(true);
  fmt::print(
      "matmul codegen: per kernel, under the family's backend passes and under all passes (alternating), IR "
      "before the passes, object bytes, thread CPU ms (medians of {} rounds) and us per call\n",
      rounds);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    json row = {{"kernel", cases[c].name}, {"rounds", rounds}};
    for (int set = 0; set < kPassSets; ++set) {
      const Times& t = times[c][static_cast<std::size_t>(set)];
      const std::string tag = kPassSetTags[set];
      const double ir_ms = median(t.ir_ms), machine_ms = median(t.machine_ms);
      row[tag + "functions"] = t.ir.functions;
      row[tag + "blocks"] = t.ir.blocks;
      row[tag + "instructions"] = t.ir.instructions;
      row[tag + "object_bytes"] = t.object_bytes;
      row[tag + "ir_cpu_ms"] = ir_ms;
      row[tag + "machine_cpu_ms"] = machine_ms;
      row[tag + "compile_cpu_ms"] = ir_ms + machine_ms;
      std::string calls;
      for (const auto& [rows, us] : t.call_us) {
        row[fmt::format("{}call_us_m{}", tag, rows)] = median(us);
        calls += fmt::format(" m={} {:.1f} us", rows, median(us));
      }
      fmt::print(
          "matmul codegen {:<30} {:<6} {} fn {} bb {} inst, {} B object; emit+IR {:.1f} + machine {:.1f} = {:.1f} "
          "ms;{}\n",
          cases[c].name, set == 0 ? "family" : "all", t.ir.functions, t.ir.blocks, t.ir.instructions, t.object_bytes,
          ir_ms, machine_ms, ir_ms + machine_ms, calls);
    }
    out.push_back(row);
  }
  return Status::ok();
}

namespace {

// The workload (lstm_cell, batch 32) at O1 and O2 without tuning, every kernel built under each
// configuration: compile events of the warm-up, then the steady time per call, instances interleaved.
Status workloadRows(const BenchFlags& flags, const Weights& weights, json& out) {
  const std::int64_t seqs[] = {10, 20, 30};
  struct Entry {
    Instance instance;
    int level = 0, config = 0;
    std::vector<double> codegen_ms, total_ms;
    std::map<std::int64_t, std::vector<double>> ms;
  };
  std::vector<Entry> entries;
  // Compile threads at the interpreter's priority here: on a loaded machine a lowered compile
  // thread's wall times measure the other load more than the configuration.
  SVM_RETURN_IF_ERROR(Tunables::set(Tunable::CompileNice, 0));
  for (int level = 1; level <= 2; ++level) {
    for (int config = 0; config < kConfigCount; ++config) {
      SVM_RETURN_IF_ERROR(applyConfig(config));
      SVM_ASSIGN_OR_RETURN(Instance instance, makeInstance(flags, "lstm_cell", level, "", -1, /*jit_wait=*/true));
      const Function& fn = instance.module->functions[static_cast<std::size_t>(instance.function)];
      // As the workload suite warms up: six passes over the seqs, then the seq stream (8..128), so
      // O2's regions widen to every timed seq.
      std::vector<std::int64_t> warm;
      for (int pass = 0; pass < 6; ++pass) warm.insert(warm.end(), std::begin(seqs), std::end(seqs));
      for (std::int64_t seq : benchStream(flags.quick)) warm.push_back(seq);
      for (std::int64_t seq : warm) {
        if (auto ran = instance.session->run(instance.function, workloadArgs(fn, weights, 32, seq, 5)); !ran)
          return ran.status();
      }
      Entry entry{std::move(instance), level, config, {}, {}, {}};
      for (const jit::CompileEvent& e : entry.instance.jit()->stats().events) {
        entry.codegen_ms.push_back(e.codegen_ms);
        entry.total_ms.push_back(e.shape_infer_ms + e.codegen_ms + e.validate_patch_ms);
      }
      entries.push_back(std::move(entry));
    }
  }
  SVM_RETURN_IF_ERROR(restoreDefaults());
  const int rounds = flags.quick ? 5 : 15;
  for (int round = 0; round < rounds; ++round) {
    for (std::int64_t seq : seqs) {
      for (Entry& entry : entries) {
        const Function& fn = entry.instance.module->functions[static_cast<std::size_t>(entry.instance.function)];
        auto args = workloadArgs(fn, weights, 32, seq, 100 + round);
        const Clock::time_point start = Clock::now();
        if (auto ran = entry.instance.session->run(entry.instance.function, args); !ran) return ran.status();
        entry.ms[seq].push_back(msSince(start));
      }
    }
  }
  for (const Entry& entry : entries) {
    json row = {{"variant", "lstm_cell"},
                {"level", fmt::format("O{}", entry.level)},
                {"config", kConfigs[entry.config].tag},
                {"compiles", entry.codegen_ms.size()},
                {"codegen_median_ms", median(entry.codegen_ms)},
                {"compile_median_ms", median(entry.total_ms)}};
    std::string steady;
    for (std::int64_t seq : seqs) {
      const double ms = median(entry.ms.at(seq));
      row[fmt::format("steady_seq{}_ms", seq)] = ms;
      steady += fmt::format(" seq {} {:.3f} ms", seq, ms);
    }
    out.push_back(row);
    fmt::print(
        "compile workload lstm_cell O{} {:<14}: {} compiles, codegen median {:.1f} ms, compile median {:.1f} ms "
        "(wall, compile thread); steady per call{}\n",
        entry.level, kConfigs[entry.config].label, entry.codegen_ms.size(), median(entry.codegen_ms),
        median(entry.total_ms), steady);
  }
  return Status::ok();
}

}  // namespace

Status compileSuite(const BenchFlags& flags, jit::LlvmCpuBackend& backend, const Weights& weights, json& out) {
  json kernels = json::array(), workload = json::array();
  SVM_RETURN_IF_ERROR(kernelRows(flags, backend, kernels));
  SVM_RETURN_IF_ERROR(workloadRows(flags, weights, workload));
  out = {{"kernels", kernels}, {"workload", workload}};
  return Status::ok();
}

}  // namespace shapevm::bench
