// SPDX-License-Identifier: Apache-2.0
// The `shapevm` CLI: compile, asm, dis, import, verify, run, debug, dap, dump, tune, cache, ops, tunables (.py
// sources go through the frontend; .svm/.svasm are loaded as modules; .onnx models through the importer). `tune` is
// `run` at O2 with zero hot thresholds, waiting for every compile, with the AutoTuner's progress bar and summary.
// Every failure prints "shapevm: error: <what, where, shapes>" and exits non-zero; nothing here aborts.
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>

#include <CLI/CLI.hpp>

#include "bytecode/binary_format.h"
#include "bytecode/module_io.h"
#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "frontend/frontend.h"
#include "ops/registry.h"
#include "session/session_access.h"
#include "shapevm/npy.h"
#include "shapevm/shapevm.h"
#include "support/tunables.h"
#include "tools/bench_launcher.h"
#include "tools/cli_inputs.h"
#include "tools/dap_command.h"
#include "tools/debug_command.h"
#include "tools/dump_command.h"
#include "tools/import_command.h"
#include "tools/observability.h"
#include "vm/vm.h"
#if SHAPEVM_HAVE_JIT
#include "jit/jit.h"
#include "tools/cache_command.h"
#include "tune/auto_tuner.h"
#endif

namespace shapevm {
namespace {

int fail(const Status& status) {
  fmt::print(stderr, "shapevm: error: {}\n", status.toString());
  return 1;
}

Status applyTunables(const std::vector<std::string>& settings) {
  SVM_RETURN_IF_ERROR(Session::loadTunablesFromEnvironment());
  for (const std::string& setting : settings) {
    auto equals = setting.find('=');
    if (equals == std::string::npos) {
      return makeError(ErrorCode::InvalidArgument, "--set '{}': expected KEY=VALUE (see `shapevm tunables`)", setting);
    }
    SVM_RETURN_IF_ERROR(Session::setTunable(setting.substr(0, equals), setting.substr(equals + 1)));
  }
  return Status::ok();
}

Expected<int> selectFunction(const Module& module, const std::string& name) {
  return resolveFunction(module, name);
}

// Frontend options from --no-opt / --opt=LIST (the default: every optimization on).
Expected<FrontendOptions> frontendOptions(bool no_opt, const std::string& opt_list, bool opt_given,
                                          const std::string& entry) {
  FrontendOptions options;
  if (no_opt && opt_given) return makeError(ErrorCode::InvalidArgument, "--no-opt and --opt cannot be combined");
  if (no_opt) options = FrontendOptions::none();
  if (opt_given) {
    SVM_ASSIGN_OR_RETURN(options, FrontendOptions::parseList(opt_list));
  }
  options.entry = entry;
  return options;
}

// What `debug` and `dap` compile with unless --opt/--no-opt says otherwise: every optimization
// but inlining, so each user-function call keeps its frame (step in, `bt`, `break NAME`).
constexpr const char* kDebugOptimizations = "dce,reshape,addn,fold";

// --no-opt / --opt=LIST / --fn as a Session's LoadOptions (the default: every optimization on).
Expected<LoadOptions> loadOptions(bool no_opt, const std::string& opt_list, const std::string& entry) {
  if (no_opt && !opt_list.empty())
    return makeError(ErrorCode::InvalidArgument, "--no-opt and --opt cannot be combined");
  LoadOptions options;
  options.optimizations = no_opt ? "none" : opt_list.empty() ? "all" : opt_list;
  options.entry = entry;  // a .py program's entry function (ignored for modules)
  return options;
}

bool isPythonSource(const std::string& path) { return path.size() >= 3 && path.compare(path.size() - 3, 3, ".py") == 0; }

Expected<std::string> readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError(ErrorCode::IoError, "cannot open '{}'", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Expected<Value> parseScalarArg(const std::string& text) {
  if (text == "true" || text == "True") return Value::fromBool(true);
  if (text == "false" || text == "False") return Value::fromBool(false);
  const char* end = text.data() + text.size();
  std::int64_t integer = 0;
  if (auto r = std::from_chars(text.data(), end, integer); r.ec == std::errc() && r.ptr == end) return Value::fromInt(integer);
  double real = 0;
  if (auto r = std::from_chars(text.data(), end, real); r.ec == std::errc() && r.ptr == end) return Value::fromFloat(real);
  return makeError(ErrorCode::InvalidArgument, "'{}' is not an int, float or bool", text);
}

Expected<Tensor> outputTensor(const Value& v, std::size_t index) {
  switch (v.kind()) {
    case ValueKind::Tensor: return v.tensor();
    case ValueKind::Int: return Tensor::scalar(static_cast<double>(v.asInt()), DType::Int64);
    case ValueKind::Float: return Tensor::scalar(v.asFloat(), DType::Float64);
    case ValueKind::Bool: return Tensor::scalar(v.asBool() ? 1.0 : 0.0, DType::Bool);
    case ValueKind::Tuple: {
      SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> ints, v.toInts("output"));
      SVM_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(DType::Int64, Shape{static_cast<std::int64_t>(ints.size())}));
      for (std::size_t i = 0; i < ints.size(); ++i) t.data<std::int64_t>()[i] = ints[i];
      return t;
    }
    case ValueKind::None: break;
  }
  return makeError(ErrorCode::Unsupported, "output {} is {}, which cannot be written to .npz", index, v.describe());
}

std::string summarize(const Value& v) {
  if (!v.isTensor()) return v.describe();
  const Tensor& t = v.tensor();
  if (t.numel() == 0) return t.describe();
  double sum = 0, low = INFINITY, high = -INFINITY;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    double x = t.elementAsDouble(i);
    sum += x;
    low = std::min(low, x);
    high = std::max(high, x);
  }
  return fmt::format("{} mean={:.6g} min={:.6g} max={:.6g}", t.describe(), sum / static_cast<double>(t.numel()), low, high);
}

struct RunFlags {
  std::string module_path, fn, inputs_npz, params_npz, out, opt_list;
  bool no_opt = false;
  std::vector<std::string> input_files, args, dims, settings;
  std::uint64_t seed = 0;
  std::int64_t iters = 1;
  bool stats = false, no_profile = false, quiet = false;
  ObservabilityFlags observe;  // --trace, --profile, --stats-json, ...
  std::string jit_level, dump;
  std::optional<std::int64_t> warmup, hot_count, hot_ms;
  bool jit_log = false, jit_wait = false;
  bool warm_start = false;                // Session::warmStart before the first run
  bool no_cache = false;                  // run/tune: neither read nor write the tuning database
  // `shapevm tune` only:
  bool tune = false;
  std::vector<std::string> ranges;        // NAME=LO..HI, expanded to a --dim schedule
  std::optional<std::int64_t> budget_ms;  // the TuneBudgetMs tunable
  std::optional<std::int64_t> tune_iters;
  // `debug` / `dap`: the debugger front end driving the runs (nullptr for `run`).
  std::shared_ptr<RunHooks> hooks;
};

// `--range NAME=LO..HI`: LO, every power of two strictly between, and HI (the range buckets'
// edges), so a tuning run compiles what a run over that range would.
Expected<DimSchedule> parseRangeFlag(const std::string& flag) {
  const auto equals = flag.find('=');
  const auto dots = flag.find("..", equals == std::string::npos ? 0 : equals);
  std::int64_t lo = -1, hi = -1;
  if (equals != std::string::npos && equals > 0 && dots != std::string::npos) {
    const char* begin = flag.data() + equals + 1;
    const char* middle = flag.data() + dots;
    const char* end = flag.data() + flag.size();
    auto first = std::from_chars(begin, middle, lo);
    auto second = std::from_chars(middle + 2, end, hi);
    if (first.ec != std::errc() || first.ptr != middle || second.ec != std::errc() || second.ptr != end) lo = hi = -1;
  }
  if (lo < 0 || hi < lo) return makeError(ErrorCode::InvalidArgument, "--range '{}': expected NAME=LO..HI with 0 <= LO <= HI", flag);
  DimSchedule schedule;
  schedule.target = flag.substr(0, equals);
  schedule.values.push_back(lo);
  for (std::int64_t p = 1; p < hi && p > 0; p *= 2) {
    if (p > lo) schedule.values.push_back(p);
  }
  if (hi != lo) schedule.values.push_back(hi);
  return schedule;
}

#if SHAPEVM_HAVE_JIT
// The tuning progress bar on stderr: redrawn in place on a terminal, one line per kernel otherwise.
std::function<void(const tune::TuneProgress&)> progressPrinter() {
  const bool terminal = isatty(fileno(stderr)) != 0;
  auto mutex = std::make_shared<std::mutex>();
  return [terminal, mutex](const tune::TuneProgress& p) {
    std::lock_guard<std::mutex> lock(*mutex);
    if (!p.done) {
      if (!terminal) return;
      constexpr int kWidth = 24;
      const int filled = p.to_time > 0 ? p.candidate * kWidth / p.to_time : kWidth;
      fmt::print(stderr, "\r[tune] kernel {} {:<40.40} [{}{}] {}/{} candidates", p.kernel, p.signature,
                 std::string(static_cast<std::size_t>(filled), '#'), std::string(static_cast<std::size_t>(kWidth - filled), '.'),
                 p.candidate, p.to_time);
      std::fflush(stderr);
      return;
    }
    const jit::TuneOutcome& o = p.report->outcome;
    std::string what = o.from_database ? "from the tuning database"
                                       : fmt::format("{} timed, {} failed", o.timed, o.failed);
    fmt::print(stderr, "{}[tune] kernel {} {}: {} -> {} ({:.0f} ms)\n", terminal ? "\r\033[K" : "", p.kernel, p.signature,
               what, o.params.toString(), o.tuning_ms);
  };
}

void printTuneSummary(const tune::AutoTuner& tuner, double total_ms) {
  const std::vector<tune::TuneReport> reports = tuner.reports();
  if (reports.empty()) {
    fmt::print("tune: no compiled kernel has a search space (nothing to tune)\n");
    return;
  }
  int timed = 0, failed = 0, hits = 0;
  double tuning_ms = 0;
  for (const tune::TuneReport& r : reports) {
    timed += r.outcome.timed;
    failed += r.outcome.failed;
    hits += r.outcome.from_database ? 1 : 0;
    tuning_ms += r.outcome.tuning_ms;
  }
  fmt::print("tune: {} kernels ({} tuned by timing, {} from the tuning database), {} candidates timed, {} failed; "
             "tuning {:.0f} ms of {:.0f} ms\n",
             reports.size(), reports.size() - static_cast<std::size_t>(hits), hits, timed, failed, tuning_ms, total_ms);
  fmt::print("  {:<44} {:<36} {:>8} {:>10} {:>7}\n", "kernel", "params", "speedup", "tuning ms", "timed");
  for (const tune::TuneReport& r : reports) {
    const jit::TuneOutcome& o = r.outcome;
    const std::string speedup = o.best_us > 0 && o.default_us > 0 ? fmt::format("{:.2f}x", o.default_us / o.best_us) : "-";
    const std::string count = o.from_database ? "cached" : fmt::format("{}/{}", o.timed, o.candidates);
    fmt::print("  {:<44} {:<36} {:>8} {:>10.1f} {:>7}\n", r.signature, o.params.toString(), speedup, o.tuning_ms, count);
  }
  if (tuner.databaseEnabled()) {
    fmt::print("tuning database: {} ({} records)\n", tuner.database().path(), tuner.database().size());
  } else {
    fmt::print("tuning database: off (--no-cache)\n");
  }
}
#endif

// --jit-level/--warmup/--hot-count/--hot-ms/--jit-log are shorthands for tunables (one table).
Status applyJitFlags(const RunFlags& flags) {
  if (!flags.jit_level.empty()) SVM_RETURN_IF_ERROR(Tunables::set("jit_level", flags.jit_level).withContext("--jit-level"));
  if (flags.warmup) SVM_RETURN_IF_ERROR(Tunables::set(Tunable::WarmupRuns, *flags.warmup).withContext("--warmup"));
  if (flags.hot_count) SVM_RETURN_IF_ERROR(Tunables::set(Tunable::HotCount, *flags.hot_count).withContext("--hot-count"));
  if (flags.hot_ms) SVM_RETURN_IF_ERROR(Tunables::set(Tunable::HotMs, *flags.hot_ms).withContext("--hot-ms"));
  if (flags.jit_log)
    SVM_RETURN_IF_ERROR(Tunables::set(Tunable::JitLog, std::max<std::int64_t>(1, Tunables::get(Tunable::JitLog))));
  return Status::ok();
}

int runCommand(RunFlags flags) {
  [[maybe_unused]] const auto command_start = std::chrono::steady_clock::now();  // tune summary (JIT builds)
  if (Status s = applyTunables(flags.settings); !s.isOk()) return fail(s);
  if (flags.tune) {
    // Tuning ahead of time: O2, every region hot at once, every compile waited for.
    if (!flags.jit_level.empty() && flags.jit_level != "O2" && flags.jit_level != "2") {
      return fail(makeError(ErrorCode::InvalidArgument, "tune: tuning happens at O2 only (got --jit-level {})", flags.jit_level));
    }
    flags.jit_level = "O2";
    if (!flags.hot_count) flags.hot_count = 0;
    if (!flags.hot_ms) flags.hot_ms = 0;
    flags.jit_wait = true;
    flags.quiet = true;
    if (flags.budget_ms) {
      if (Status s = Tunables::set(Tunable::TuneBudgetMs, *flags.budget_ms).withContext("--budget-ms"); !s.isOk()) return fail(s);
    }
  }
  if (Status s = applyJitFlags(flags); !s.isOk()) return fail(s);
  if (flags.iters < 1) return fail(makeError(ErrorCode::InvalidArgument, "--iters must be >= 1, got {}", flags.iters));
  auto load = loadOptions(flags.no_opt, flags.opt_list, flags.fn);
  if (!load) return fail(load.status());
  // The Session owns the VM, the JIT (at the jit_level set above) and, at O2, the AutoTuner.
  if (Status s = startObservability(flags.observe); !s.isOk()) return fail(s);
  SessionOptions session_options;
  session_options.profile = !flags.no_profile;
  session_options.jit_wait = flags.jit_wait;
  session_options.tuning_cache = !flags.no_cache;
  Session session(session_options);
  if (Status s = session.load(flags.module_path, *load); !s.isOk()) return fail(s);
  const std::shared_ptr<Module> shared = SessionAccess::module(session);
  auto function = selectFunction(*shared, flags.fn);
  if (!function) return fail(function.status());
  const Function& fn = shared->functions[static_cast<std::size_t>(*function)];

  InputPlan plan;
  plan.seed = flags.seed;
  auto addGiven = [&](const std::string& name, Tensor t, const std::string& from) -> Status {
    if (!plan.given.emplace(name, std::move(t)).second) {
      return makeError(ErrorCode::InvalidArgument, "parameter '{}' is given twice (again in {})", name, from);
    }
    return Status::ok();
  };
  for (const std::string* path : {&flags.inputs_npz, &flags.params_npz}) {
    if (path->empty()) continue;
    auto entries = readNpz(*path);
    if (!entries) return fail(entries.status());
    for (auto& [name, tensor] : *entries) {
      if (Status s = addGiven(name, std::move(tensor), *path); !s.isOk()) return fail(s);
    }
  }
  for (const std::string& item : flags.input_files) {
    auto equals = item.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == item.size()) {
      return fail(makeError(ErrorCode::InvalidArgument, "--input '{}': expected NAME=FILE.npy", item));
    }
    auto tensor = readNpy(item.substr(equals + 1));
    if (!tensor) return fail(tensor.status());
    if (Status s = addGiven(item.substr(0, equals), std::move(*tensor), item); !s.isOk()) return fail(s);
  }
  for (const std::string& item : flags.args) {
    auto equals = item.find('=');
    if (equals == std::string::npos || equals == 0) {
      return fail(makeError(ErrorCode::InvalidArgument, "--arg '{}': expected NAME=VALUE", item));
    }
    auto value = parseScalarArg(item.substr(equals + 1));
    if (!value) return fail(std::move(value).status().withContext("--arg " + item));
    if (!plan.scalars.emplace(item.substr(0, equals), *value).second) {
      return fail(makeError(ErrorCode::InvalidArgument, "parameter '{}' is given twice (again in --arg {})",
                            item.substr(0, equals), item));
    }
  }
  for (const std::string& item : flags.dims) {
    auto schedule = parseDimFlag(item);
    if (!schedule) return fail(schedule.status());
    plan.dims.push_back(*schedule);
  }
  for (const std::string& item : flags.ranges) {
    auto schedule = parseRangeFlag(item);
    if (!schedule) return fail(schedule.status());
    plan.dims.push_back(*schedule);
  }
  if (Status s = validatePlan(fn, plan); !s.isOk()) return fail(s);
  if (flags.tune) {
    // Enough passes over the longest schedule for the warm-up, the first compile and the range
    // recompiles that guard misses trigger.
    std::size_t longest = 1;
    for (const DimSchedule& d : plan.dims) longest = std::max(longest, d.values.size());
    flags.iters = flags.tune_iters ? *flags.tune_iters
                                   : std::max<std::int64_t>(Tunables::get(Tunable::WarmupRuns) + 2,
                                                            static_cast<std::int64_t>(longest) *
                                                                (Tunables::get(Tunable::GuardMissRecompile) + 2));
    if (flags.iters < 1) return fail(makeError(ErrorCode::InvalidArgument, "--iters must be >= 1, got {}", flags.iters));
  }

  VirtualMachine& vm = *SessionAccess::vm(session);
  prepareProfile(flags.observe, vm);
#if SHAPEVM_HAVE_JIT
  tune::AutoTuner* tuner = SessionAccess::tuner(session);
  jit::Jit* jit = SessionAccess::jit(session);
  if (tuner && flags.tune) tuner->setProgress(progressPrinter());
  if (Tunables::get(Tunable::JitLevel) >= 1 && flags.no_profile) {
    // The JIT picks hot regions and their shape ranges from the interpreter's profile.
    fmt::print(stderr,
               "[WARN] JIT: --no-profile leaves the JIT without the shape profiles it compiles from; "
               "everything runs interpreted (O0)\n");
  }
  if (Tunables::get(Tunable::JitLevel) >= 1 && !flags.no_profile && !jit) {
    Status why = session.jitStatus();
    if (flags.tune) return fail(why.withContext("tune: cannot start the JIT"));
    // JIT trouble never changes results: run interpreted, and say so
    fmt::print(stderr, "[WARN] JIT: cannot start ({}); running interpreted (O0)\n", why.toString());
  }
#else
  if (Tunables::get(Tunable::JitLevel) >= 1 && (!flags.jit_level.empty() || std::getenv("SHAPEVM_JIT_LEVEL"))) {
    return fail(makeError(ErrorCode::Unsupported, "this shapevm was built without the JIT (SHAPEVM_ENABLE_JIT=OFF); use --jit-level O0"));
  }
#endif
  if (flags.hooks && flags.hooks->before_runs) {
    if (Status s = flags.hooks->before_runs(session, *function); !s.isOk()) return fail(s);
  }
  if (flags.warm_start) {
    // Before the first run: what the kernel cache's install records cover, installed now.
    auto warm = session.warmStart();
    if (!warm) return fail(warm.status());
    if (!flags.quiet) fmt::print(stderr, "[INFO] {}\n", warm->summary());
  }
  std::vector<double> latencies;
  std::map<std::string, std::vector<double>> by_label;
  std::vector<std::string> label_order;
  std::vector<Value> outputs;
  DrawnOnce drawn_once;  // generated weights: drawn in the first iteration, reused by the rest
  // A debugger front end may run the program again from the start (`run` after the end or an error).
  for (bool again = true; again;) {
    again = false;
    latencies.clear();
    by_label.clear();
    label_order.clear();
    for (std::int64_t iteration = 0; iteration < flags.iters; ++iteration) {
      std::string label;
      auto args = buildArguments(fn, plan, iteration, &label, &drawn_once);
      if (!args) return fail(args.status());
      auto start = std::chrono::steady_clock::now();
      auto result = session.run(*function, *args);
      auto stop = std::chrono::steady_clock::now();
      if (!result && flags.hooks && flags.hooks->ended_by_user && flags.hooks->ended_by_user()) {
        if (flags.hooks->after_runs) flags.hooks->after_runs(false);
        return 0;  // the user quit the debugger mid-run
      }
      if (!result) {
        Status status = std::move(result).status();
        if (flags.iters > 1)
          status.withContext(fmt::format("iteration {}{}", iteration, label.empty() ? "" : " (" + label + ")"));
        if (flags.hooks && flags.hooks->after_error && flags.hooks->after_error(status)) {
          again = true;
          break;
        }
        return fail(status);
      }
      double ms = std::chrono::duration<double, std::milli>(stop - start).count();
      latencies.push_back(ms);
      if (!by_label.count(label)) label_order.push_back(label);
      by_label[label].push_back(ms);
      outputs = std::move(*result);
    }
    if (again) continue;

    if (!flags.out.empty()) {
      std::vector<std::pair<std::string, Tensor>> entries;
      for (std::size_t i = 0; i < outputs.size(); ++i) {
        auto t = outputTensor(outputs[i], i);
        if (!t) return fail(t.status());
        entries.emplace_back("out" + std::to_string(i), *t);
      }
      if (Status s = writeNpz(flags.out, entries); !s.isOk()) return fail(s);
    }
    if (!flags.quiet) {
      for (std::size_t i = 0; i < outputs.size(); ++i) fmt::print("out{}: {}\n", i, summarize(outputs[i]));
    }
    again = flags.hooks && flags.hooks->after_runs && flags.hooks->after_runs(true);
  }
  if (flags.stats) {
    const ExecStats& st = vm.stats();
    const double runs = static_cast<double>(flags.iters);
    LatencySummary all = summarizeLatency(latencies);
    fmt::print("stats: function '{}', {} iterations\n", fn.name, flags.iters);
    fmt::print("  latency ms: median {:.4f}  p99 {:.4f}  min {:.4f}  max {:.4f}\n", all.median, all.p99, all.low, all.high);
    if (label_order.size() > 1 || (label_order.size() == 1 && !label_order[0].empty())) {
      for (const std::string& label : label_order) {
        LatencySummary s = summarizeLatency(by_label[label]);
        fmt::print("  {:<24} median {:.4f} ms  p99 {:.4f} ms  ({} runs)\n", label, s.median, s.p99, by_label[label].size());
      }
    }
    fmt::print("  instructions: {} ({:.0f}/run)\n", st.instructions, static_cast<double>(st.instructions) / runs);
    fmt::print("  op calls: {} ({:.0f}/run; interpreted {}, compiled {}, guard misses {}, inline-cache misses {})\n",
               st.op_calls, static_cast<double>(st.op_calls) / runs, st.op_calls - st.compiled_calls, st.compiled_calls,
               st.guard_misses, st.ic_misses);
    fmt::print("  allocations: {} requests, {} system ({:.1f} requests/run, {:.1f} system/run)\n", st.alloc_requests,
               st.system_allocations, static_cast<double>(st.alloc_requests) / runs,
               static_cast<double>(st.system_allocations) / runs);
    AllocatorStats alloc = CachingAllocator::global().stats();
    fmt::print("  memory: live {} bytes, peak {} bytes, cached {} bytes\n", alloc.live_bytes, alloc.peak_bytes,
               alloc.cached_bytes);
  }
  if (Status s = writeStatsJson(flags.observe, session); !s.isOk()) return fail(s);
#if SHAPEVM_HAVE_JIT
  if (flags.tune && jit) {
    jit->waitIdle();
    printTuneSummary(*tuner, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - command_start).count());
  }
  if (flags.stats && jit) fmt::print("{}", jit->statsReport());
  if (flags.stats && tuner) {
    int tuned = 0, hits = 0, timed = 0, failed = 0;
    double tuning_ms = 0;
    for (const tune::TuneReport& r : tuner->reports()) {
      tuned += !r.outcome.from_database && r.outcome.timed > 0 ? 1 : 0;
      hits += r.outcome.from_database ? 1 : 0;
      timed += r.outcome.timed;
      failed += r.outcome.failed;
      tuning_ms += r.outcome.tuning_ms;
    }
    fmt::print(
        "autotuner: {} kernels tuned by timing ({} candidates timed, {} failed, {:.1f} ms), {} tuning-database hits; "
        "database {}{}\n",
        tuned, timed, failed, tuning_ms, hits,
        tuner->databaseEnabled() ? tuner->database().path() : std::string("off (--no-cache)"),
        jit && jit->stats().compiles_pending > 0 ? "; a background tune is still running (figures not final)" : "");
  }
  // A finished run never waits for the JIT: queued and running compiles are cancelled here.
  bool jit_stopped = SessionAccess::cancelJit(session, 5);
#endif
  if (Status s = finishObservability(flags.observe, vm, *function); !s.isOk()) return fail(s);
  if (!flags.dump.empty()) {
    // The module as the JIT left it: shape tokens rewritten to the ranges it compiled for and, in
    // the text form, each site's installed entries as comments.
    DumpNotes notes;
#if SHAPEVM_HAVE_JIT
    if (jit) notes = [jit, &vm](int f, int pc) { return jitSiteNotes(*jit, vm, f, pc, false); };
#endif
    if (Status written = writeDump(*shared, "", flags.dump, notes); !written.isOk()) return fail(written);
  }
#if SHAPEVM_HAVE_JIT
  if (!jit_stopped && !SessionAccess::cancelJit(session, 0)) {
    // An LLVM compile is still running: abandoned with the process, its result dropped (the tuning
    // database is written a whole line per write(); nothing else of the JIT is on disk).
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(0);
  }
  SessionAccess::stopJit(session);  // joins the compile thread; the VM keeps its (now unpatched) interpreter state
#endif
  return 0;
}

// An unsigned option would take "-1" as 2^64-1; a seed is written without a sign.
CLI::Validator nonNegativeSeed() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const auto first = text.find_first_not_of(" \t");
        if (first != std::string::npos && (text[first] == '-' || text[first] == '+')) {
          return "the seed must be an unsigned integer (0 to 18446744073709551615), got " + text;
        }
        return {};
      },
      "UINT64");
}

// The flags of `run`, shared by `debug` (and the DAP launch request's `args`).
void addRunOptions(CLI::App* cmd, RunFlags& flags) {
  cmd->add_option("module", flags.module_path, "module file (.svm, .svasm), Python source (.py) or ONNX model (.onnx)")
      ->required();
  cmd->add_option("--fn", flags.fn, "function to run (default: the only one, or 'main')");
  cmd->add_option("--inputs", flags.inputs_npz, ".npz whose arrays are matched to parameters by name");
  cmd->add_option("--params", flags.params_npz, ".npz of parameters (weights), matched by name");
  cmd->add_option("--input", flags.input_files, "NAME=FILE.npy for one parameter (repeatable)");
  cmd->add_option("--arg", flags.args, "NAME=VALUE for a scalar (int/float/bool) parameter (repeatable)");
  cmd->add_option("--dim", flags.dims,
                  "NAME=V[,V...] for a named dynamic dim (or ?N), PARAM.AXIS=V[,V...] for any dynamic dim; "
                  "a list cycles per iteration (repeatable)");
  cmd->add_option("--seed", flags.seed,
                  "seed for generated inputs (default 0); static-shape parameters (weights) are drawn once per run, "
                  "inputs with a dynamic dim afresh each iteration")
      ->check(nonNegativeSeed());
  cmd->add_option("--iters", flags.iters, "number of runs (default 1)");
  cmd->add_option("--out", flags.out, "write the last run's outputs to this .npz (out0, out1, ...)");
  cmd->add_flag("--stats", flags.stats, "print latency (median, p99) per dim setting and totals");
  addObservabilityFlags(*cmd, flags.observe);
  cmd->add_flag(
      "--no-profile", flags.no_profile,
      "disable per-site timing and shape profiling (and with them the JIT, which compiles from the profiles)");
  cmd->add_flag("-q,--quiet", flags.quiet, "do not print output summaries");
  cmd->add_flag("--no-opt", flags.no_opt, "(.py) compile without optimizations");
  cmd->add_option("--opt", flags.opt_list, "(.py) only these optimizations: a list of dce,reshape,addn,fold,inline");
  cmd->add_option("--jit-level", flags.jit_level,
                  "O0 (interpret), O1 (a compiled kernel per hot op) or O2 (default: hot-region fusion + autotuning)");
  cmd->add_option("--warmup", flags.warmup, "runs interpreted before any compile (tunable warmup, default 3)");
  cmd->add_option("--hot-count", flags.hot_count, "executions before a region is hot (tunable hot_count, default 5)");
  cmd->add_option("--hot-ms", flags.hot_ms, "cumulative ms before a region is hot (tunable hot_ms, default 20)");
  cmd->add_flag("--jit-log", flags.jit_log,
                "print the JIT's log lines ([INFO] JIT: ...); also SHAPEVM_JIT_LOG=1 (=2 adds debug lines: every "
                "AutoTuner candidate's time)");
  cmd->add_flag("--jit-wait", flags.jit_wait,
                "wait for queued compiles after each run (reproducible tier-up for tests; the default never waits)");
  cmd->add_flag("--warm-start", flags.warm_start,
                "before the first run, install (on this thread, validated) every kernel and fused region the kernel "
                "cache's install records list for this program; a cold cache is a no-op");
  cmd->add_option(
      "--dump", flags.dump,
      "after the runs, write the module (.svasm text or .svm binary) with the JIT's rewritten shape tokens");
  cmd->add_option("--set", flags.settings, "KEY=VALUE for a tunable (see `shapevm tunables`; repeatable)");
  cmd->add_flag("--no-cache", flags.no_cache,
                "O2: neither read nor write the tuning database ($SHAPEVM_CACHE_DIR/tuning.jsonl)");
}

Status writeBytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return makeError(ErrorCode::IoError, "cannot open '{}' for writing", path);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) return makeError(ErrorCode::IoError, "failed writing '{}'", path);
  return Status::ok();
}

}  // namespace
}  // namespace shapevm

namespace {

int cliMain(int argc, char** argv) {
  using namespace shapevm;
  CLI::App app{"ShapeVM: a bytecode VM for tensor programs with dynamic shapes"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");

  std::string asm_in, asm_out;
  auto* asm_cmd = app.add_subcommand("asm", "assemble .svasm text into a binary .svm module (verified)");
  asm_cmd->add_option("input", asm_in, "input .svasm file")->required();
  asm_cmd->add_option("-o,--output", asm_out, "output .svm file")->required();

  std::string compile_in, compile_out, compile_fn, compile_opt;
  bool compile_no_opt = false;
  auto* compile_cmd = app.add_subcommand("compile", "compile a Python (.py) program to a .svm or .svasm module (verified)");
  compile_cmd->add_option("input", compile_in, "input .py file")->required();
  compile_cmd->add_option("-o,--output", compile_out, "output .svm (binary) or .svasm (text) file")->required();
  compile_cmd->add_option("--fn", compile_fn, "compile only this function (or Class.method) and what it calls");
  compile_cmd->add_flag("--no-opt", compile_no_opt, "disable every optimization");
  compile_cmd->add_option("--opt", compile_opt, "only these optimizations: a list of dce,reshape,addn,fold,inline");

  std::string dis_in, dis_fn, dis_opt;
  bool dis_no_opt = false;
  bool dis_pseudo = false;
  auto* dis_cmd = app.add_subcommand("dis", "disassemble a module (.svm or .svasm) to canonical .svasm");
  dis_cmd->add_option("input", dis_in, "module file")->required();
  dis_cmd->add_flag("--pseudo", dis_pseudo, "print Python-like pseudocode instead");
  dis_cmd->add_option("--fn", dis_fn, "only this function");
  dis_cmd->add_flag("--no-opt", dis_no_opt, "(.py) compile without optimizations");
  dis_cmd->add_option("--opt", dis_opt, "(.py) only these optimizations: a list of dce,reshape,addn,fold,inline");

  std::string verify_in;
  std::string import_in, import_out;
  auto* import_cmd =
      app.add_subcommand("import", "convert an ONNX model (.onnx) to a .svm or .svasm module (docs/onnx.md)");
  import_cmd->add_option("model", import_in, "input .onnx model")->required();
  import_cmd->add_option("-o,--output", import_out, "output .svm (binary) or .svasm (text) file")->required();
  auto* verify_cmd = app.add_subcommand("verify", "load and verify a module; prints OK or the violated rule");
  verify_cmd->add_option("input", verify_in, "module file")->required();

  RunFlags run;
  auto* run_cmd = app.add_subcommand("run", "run a function of a module");
#if SHAPEVM_HAVE_JIT
  // `shapevm bench ARGS` runs the shapevm_bench executable with ARGS (see main's first lines);
  // the subcommand is declared here for `shapevm --help` and the unknown-subcommand check.
  app.add_subcommand("bench",
                     "ShapeVM's side of the benchmark suite (bench/run_all.py adds the peers and writes BENCHMARKS.md)")
      ->allow_extras();
#endif
  addRunOptions(run_cmd, run);

  RunFlags debug_flags;
  auto* debug_cmd = app.add_subcommand(
      "debug",
      "debug a program at the source and bytecode level: breakpoints, stepping, frames with runtime shapes "
      "(commands from stdin; see docs/debugging.md); takes every `run` flag");
  addRunOptions(debug_cmd, debug_flags);

  auto* dap_cmd = app.add_subcommand(
      "dap",
      "serve the debugger over the Debug Adapter Protocol on stdio (VS Code: see docs/vscode.md); the launch "
      "request names the program, the function and `run` flags");

  std::string dump_in, dump_out, dump_fn, dump_opt;
  bool dump_no_opt = false;
  auto* dump_cmd =
      app.add_subcommand("dump", "write a module, or one function and what it calls, as .svasm text or .svm binary");
  dump_cmd->add_option("module", dump_in, "module file (.svm, .svasm) or Python source (.py)")->required();
  dump_cmd->add_option("-o,--output", dump_out, "output .svasm (text) or .svm (binary) file")->required();
  dump_cmd->add_option("--fn", dump_fn, "only this function (or Class.method) and the functions it calls");
  dump_cmd->add_flag("--no-opt", dump_no_opt, "(.py) compile without optimizations");
  dump_cmd->add_option("--opt", dump_opt, "(.py) only these optimizations: a list of dce,reshape,addn,fold,inline");

#if SHAPEVM_HAVE_JIT
  RunFlags tune_flags;
  tune_flags.tune = true;
  auto* tune_cmd = app.add_subcommand(
      "tune", "tune a module's kernels ahead of time: run it at O2 over the given shapes, time each kernel's "
              "candidates and write the winners to the tuning database");
  tune_cmd->add_option("module", tune_flags.module_path, "module file (.svm, .svasm) or Python source (.py)")->required();
  tune_cmd->add_option("--fn", tune_flags.fn, "function to tune (default: the only one, or 'main')");
  tune_cmd->add_option("--inputs", tune_flags.inputs_npz, ".npz whose arrays are matched to parameters by name");
  tune_cmd->add_option("--params", tune_flags.params_npz, ".npz of parameters (weights), matched by name");
  tune_cmd->add_option("--input", tune_flags.input_files, "NAME=FILE.npy for one parameter (repeatable)");
  tune_cmd->add_option("--arg", tune_flags.args, "NAME=VALUE for a scalar parameter (repeatable)");
  tune_cmd->add_option("--dim", tune_flags.dims,
                       "NAME=V[,V...] (or PARAM.AXIS=...): the dynamic dims' values to tune for, cycled as in `run` (repeatable)");
  tune_cmd->add_option("--range", tune_flags.ranges,
                       "NAME=LO..HI: tune for LO, every power of two in between and HI (repeatable)");
  tune_cmd->add_option("--budget-ms", tune_flags.budget_ms, "milliseconds per kernel for timing candidates (tunable tune_budget_ms, default 2000)");
  tune_cmd->add_option("--iters", tune_flags.tune_iters, "runs (default: enough passes over the --dim schedule for every recompile)");
  tune_cmd->add_option("--seed", tune_flags.seed, "seed for generated inputs (default 0)")->check(nonNegativeSeed());
  tune_cmd->add_flag("--no-cache", tune_flags.no_cache, "time every kernel without reading or writing the tuning database");
  tune_cmd->add_flag("--stats", tune_flags.stats, "also print the run's statistics");
  tune_cmd->add_flag("--jit-log", tune_flags.jit_log, "print the JIT's log lines");
  tune_cmd->add_option("--set", tune_flags.settings, "KEY=VALUE for a tunable (repeatable)");
  std::string cache_action, cache_dir_arg;
  auto* cache_cmd = app.add_subcommand(
      "cache",
      "the compiled-kernel cache and tuning database ($SHAPEVM_CACHE_DIR): stats, clear, export DIR, "
      "import DIR (ship one warmed cache to every replica; see docs/kernel-cache.md)");
  cache_cmd->add_option("action", cache_action, "stats | clear | export | import")
      ->required()
      ->check(CLI::IsMember({"stats", "clear", "export", "import"}));
  cache_cmd->add_option("dir", cache_dir_arg, "export: the directory to write; import: the directory to read");
#endif

  auto* ops_cmd = app.add_subcommand("ops", "list the op table (inputs, attributes, meaning)");
  bool ops_json = false;
  ops_cmd->add_flag("--json", ops_json, "every column of the op table and each op's Python parameters, as JSON");
  auto* tunables_cmd = app.add_subcommand("tunables", "list tunables with defaults, env variables and meanings");

#if SHAPEVM_HAVE_JIT
  if (argc > 1 && std::string_view(argv[1]) == "bench") return launchBench(argc, argv);
#endif
  if (argc > 1 && argv[1][0] != '-') {
    std::string word = argv[1];
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known = known || sub->get_name() == word;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      fmt::print(stderr, "shapevm: error: unknown subcommand '{}' (subcommands: {}; see shapevm --help)\n", word, names);
      return 2;
    }
  }
  CLI11_PARSE(app, argc, argv);

  if (*compile_cmd) {
    if (!isPythonSource(compile_in)) {
      return fail(makeError(ErrorCode::InvalidArgument, "compile: '{}' is not a .py source (use `shapevm asm` for .svasm)", compile_in));
    }
    auto options = frontendOptions(compile_no_opt, compile_opt, !compile_opt.empty(), compile_fn);
    if (!options) return fail(options.status());
    auto module = loadProgram(compile_in, *options);
    if (!module) return fail(module.status());
    if (Status s = saveModuleFile(*module, compile_out); !s.isOk()) return fail(s);
    return 0;
  }
  if (*asm_cmd) {
    auto module = loadProgram(asm_in, FrontendOptions());
    if (!module) return fail(module.status());
    if (Status s = writeBytes(asm_out, serializeModule(*module)); !s.isOk()) return fail(s);
    return 0;
  }
  if (*dis_cmd) {
    auto options = frontendOptions(dis_no_opt, dis_opt, !dis_opt.empty(), isPythonSource(dis_in) ? dis_fn : "");
    if (!options) return fail(options.status());
    auto module = isOnnxModel(dis_in) ? importModel(dis_in) : loadProgram(dis_in, *options);
    if (!module) return fail(module.status());
    int chosen_index = -1;
    if (!dis_fn.empty()) {
      auto chosen = selectFunction(*module, dis_fn);
      if (!chosen) return fail(chosen.status());
      chosen_index = *chosen;
    }
    std::string source;  // a .py program's listing shows its source lines
    if (isPythonSource(dis_in)) {
      auto text = readText(dis_in);
      if (!text) return fail(text.status());
      source = std::move(*text);
    }
    DisassembleOptions listing{source};
    if (dis_pseudo || chosen_index >= 0) {
      for (std::size_t i = 0; i < module->functions.size(); ++i) {
        if (chosen_index >= 0 && static_cast<int>(i) != chosen_index) continue;
        fmt::print("{}", dis_pseudo ? pseudocode(*module, static_cast<int>(i)) : disassembleFunction(*module, static_cast<int>(i), listing));
      }
    } else {
      fmt::print("{}", disassemble(*module, listing));
    }
    return 0;
  }
  if (*import_cmd) return importCommand(import_in, import_out);
  if (*verify_cmd) {
    auto module = loadProgram(verify_in, FrontendOptions());
    if (!module) return fail(module.status());
    fmt::print("OK: {} ({} functions, {} constants)\n", verify_in, module->functions.size(), module->constants.size());
    return 0;
  }
  if (*run_cmd) return runCommand(run);
  if (*debug_cmd) {
    if (!debug_flags.no_opt && debug_flags.opt_list.empty()) debug_flags.opt_list = kDebugOptimizations;
    debug_flags.hooks =
        makeCliDebugger(DebugTarget{debug_flags.module_path, debug_flags.fn, debug_flags.no_opt, debug_flags.opt_list});
    return runCommand(debug_flags);
  }
  if (*dap_cmd) {
    return dapCommand([](const std::vector<std::string>& args, std::shared_ptr<RunHooks> hooks) -> Expected<int> {
      CLI::App parser{"shapevm dap: the launch request's program and run flags"};
      RunFlags flags;
      addRunOptions(&parser, flags);
      std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
      try {
        parser.parse(reversed);
      } catch (const CLI::ParseError& e) {
        return makeError(ErrorCode::InvalidArgument, "bad run flags: {}", e.what());
      }
      if (!flags.no_opt && flags.opt_list.empty()) flags.opt_list = kDebugOptimizations;
      flags.hooks = std::move(hooks);
      return runCommand(flags);
    });
  }
  if (*dump_cmd) {
    auto options = frontendOptions(dump_no_opt, dump_opt, !dump_opt.empty(), isPythonSource(dump_in) ? dump_fn : "");
    if (!options) return fail(options.status());
    auto module = loadProgram(dump_in, *options);
    if (!module) return fail(module.status());
    if (Status s = writeDump(*module, dump_fn, dump_out, {}); !s.isOk()) return fail(s);
    return 0;
  }
#if SHAPEVM_HAVE_JIT
  if (*tune_cmd) return runCommand(tune_flags);
  if (*cache_cmd) {
    if (Status s = applyTunables({}); !s.isOk()) return fail(s);
    return cacheCommand(cache_action, cache_dir_arg);
  }
#endif
  if (*ops_cmd) {
    if (ops_json) {
      fmt::print("{}", frontend::opTableJson());
      return 0;
    }
    for (const OpSchema& schema : OpRegistry::global().schemas()) {
      std::string inputs, attrs;
      for (const InputSpec& in : schema.inputs) inputs += (inputs.empty() ? "" : ", ") + in.name + (in.optional ? "?" : in.variadic ? "*" : "");
      for (const AttrSpec& a : schema.attrs) {
        attrs += (attrs.empty() ? "" : ", ") + a.name + ":" + std::string(attrKindName(a.kind)) +
                 (a.default_value ? "=" + a.default_value->toString() : "");
      }
      fmt::print("{:<14} ({}) {{{}}}  {}\n", schema.name, inputs, attrs, schema.meaning);
    }
    return 0;
  }
  if (*tunables_cmd) {
    for (const TunableInfo& row : Tunables::all()) {
      fmt::print("{:<20} default {:<12} env {:<28} {}\n", row.key, row.default_value, row.env, row.meaning);
    }
    return 0;
  }
  return 0;
}

}  // namespace

// Output the command could not write (stdout or stderr on a full disk, past RLIMIT_FSIZE) fails it
// with a message and exit status 1, never an uncaught exception or a silent 0.
int main(int argc, char** argv) {
  int rc = 0;
  std::string lost;
  try {
    rc = cliMain(argc, argv);
  } catch (const std::system_error& e) {  // fmt::print when the stream refused the write
    lost = e.what();
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) lost = lost.empty() ? std::strerror(errno) : lost;
  if (lost.empty()) return rc;
  const std::string line = fmt::format("shapevm: error: cannot write the output: {}\n", lost);
  (void)std::fwrite(line.data(), 1, line.size(), stderr);
  return rc == 0 ? 1 : rc;
}
