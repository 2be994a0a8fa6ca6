// SPDX-License-Identifier: Apache-2.0
// shapevm_bench (also run as `shapevm bench`): ShapeVM's side of the benchmark suite — the
// reference workload at O0/O1/O2, cold costs and latency while compiles are in flight, JIT matmul
// vs the reference kernel, oneDNN and the measured FMA peak, elementwise chains vs a one-pass
// roofline and memcpy, per-op overhead, compile latency and memory. Results go to
// DIR/shapevm.json for bench/report.py (bench/run_all.py runs the peers and writes BENCHMARKS.md).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "bench/bench_common.h"
#include "support/tunables.h"

namespace shapevm::bench {
namespace {

int benchCommand(const BenchFlags& flags_in) {
  BenchFlags flags = flags_in;
  const std::vector<std::string> known = {"workload", "cold",        "compile",  "matmul-codegen",
                                          "matmul",   "elementwise", "overhead", "memory"};
  // The compile suites (an A/B of the IR pipelines, minutes; the matmul code generator's size and
  // cold cost, for an A/B of two builds) run only when asked for.
  std::vector<std::string> suites = flags.suites;
  if (suites.empty())
    std::copy_if(known.begin(), known.end(), std::back_inserter(suites),
                 [](const std::string& s) { return s != "compile" && s != "matmul-codegen"; });
  for (const std::string& suite : suites) {
    if (std::find(known.begin(), known.end(), suite) == known.end()) {
      fmt::print(stderr,
                 "shapevm: error: unknown bench suite '{}' (suites: workload, cold, compile, matmul-codegen, matmul, "
                 "elementwise, overhead, memory)\n",
                 suite);
      return 2;
    }
  }
  if (flags.examples.empty()) flags.examples = std::string(SHAPEVM_SOURCE_DIR) + "/examples";
  omp_set_num_threads(1);  // oneDNN (OpenMP build): single thread like everything else here
  // The defaults, then the SHAPEVM_* variables (an A/B of a setting needs no rebuild); the ones
  // that differ from the defaults are printed and recorded with the results.
  // kernel_threads defaults to auto; the suite pins 1 like its peers unless the environment says otherwise.
  Tunables::resetToDefaults();
  (void)Tunables::set(Tunable::KernelThreads, 1);
  if (Status env = Tunables::loadFromEnvironment(); !env.isOk()) {
    fmt::print(stderr, "shapevm: error: {}\n", env.toString());
    return 2;
  }
  json tunables = json::object();
  for (std::size_t t = 0; t < Tunables::all().size(); ++t) {
    const TunableInfo& info = Tunables::all()[t];
    const std::int64_t value = Tunables::get(static_cast<Tunable>(t));
    const std::int64_t baseline = static_cast<Tunable>(t) == Tunable::KernelThreads ? 1 : info.default_value;
    if (value != baseline) tunables[std::string(info.key)] = value;
  }
  if (!tunables.empty()) fmt::print("shapevm bench: tunables from the environment: {}\n", tunables.dump());
  auto wants = [&](const char* name) { return std::find(suites.begin(), suites.end(), name) != suites.end(); };

  std::mt19937_64 rng(123);
  Weights weights{randomTensor(Shape{1024, 128}, rng, 0.1), randomTensor(Shape{1024, 256}, rng, 0.1),
                  randomTensor(Shape{1024}, rng), randomTensor(Shape{1024}, rng)};
  // SHAPEVM_JIT_PERF=1: a perf jitdump of the suite's kernels (perf record -k 1; perf inject --jit).
  auto engine = jit::LlvmCpuBackend::create({.perf_support = Tunables::get(Tunable::JitPerf) != 0});
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
  fmt::print("shapevm bench{}: {} ({}), single thread\n", flags.quick ? " --quick" : "", cpuModel(),
             (*engine)->engine().cpuName());
  auto check = [&](Status status, const char* suite) {
    if (status.isOk()) return true;
    fmt::print(stderr, "shapevm: error: bench suite '{}': {}\n", suite, status.toString());
    return false;
  };
  json workload = json::array(), compile = json::object(), cold = json::array(), timeline = json::array(),
       matmul = json::array(), matmul_bf16 = json::array(), elementwise = json::array(), overhead = json::array(),
       memory = json::array(), workload_extra = json::object(), norms = json::array(),
       compile_pipelines = json::object(), matmul_codegen = json::array();
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
  if (wants("elementwise"))
    ok = check(elementwiseSuite(flags, (*engine)->engine(), elementwise, norms), "elementwise") && ok;
  if (wants("workload"))
    ok = check(workloadSuite(flags, (*engine)->engine(), weights, tmp_dir, workload, compile, workload_extra),
               "workload") &&
         ok;
  if (wants("cold")) ok = check(coldSuite(flags, weights, tmp_dir, cold, timeline), "cold") && ok;
  if (wants("compile")) ok = check(compileSuite(flags, **engine, weights, compile_pipelines), "compile") && ok;
  if (wants("matmul-codegen")) ok = check(matmulCodegenSuite(flags, **engine, matmul_codegen), "matmul-codegen") && ok;
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
  result["compile_pipelines"] = compile_pipelines;
  result["matmul_codegen"] = matmul_codegen;
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

}  // namespace
}  // namespace shapevm::bench

int main(int argc, char** argv) {
  using namespace shapevm;
  bench::BenchFlags flags;
  CLI::App app{"ShapeVM's side of the benchmark suite (bench/run_all.py adds the peers and writes BENCHMARKS.md)",
               "shapevm bench"};
  app.add_option("--suite", flags.suites,
                 "only these suites: workload, cold, compile, matmul-codegen, matmul, elementwise, overhead, memory "
                 "(repeatable; the default is all but compile and matmul-codegen)");
  app.add_flag("--quick", flags.quick, "smaller sizes and fewer repeats (under 2 minutes; a smoke test)");
  app.add_option("--out", flags.out, "write DIR/shapevm.json");
  app.add_option("--examples", flags.examples,
                 "folder with lstm_cell.py and lstm_loop.py (default: the source tree's examples/)");
  CLI11_PARSE(app, argc, argv);
  // The SHAPEVM_* tunables apply here as for `shapevm run` (A/B runs of a setting).
  if (Status s = Session::loadTunablesFromEnvironment(); !s.isOk()) {
    fmt::print(stderr, "shapevm: error: {}\n", s.toString());
    return 1;
  }
  return bench::benchCommand(flags);
}
