// SPDX-License-Identifier: Apache-2.0
// Session: one loaded Module with its VirtualMachine, the Jit watching it and, at O2, the
// AutoTuner the Jit calls. Invariant: the Jit is destroyed before the VM it patches and before
// the tuner it calls, and only while no run() is in progress (every change to the parts happens
// under the Session's mutex, which run() holds).
#include "shapevm/shapevm.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <numeric>
#include <optional>

#include "bytecode/module_io.h"
#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "frontend/frontend.h"
#if SHAPEVM_HAVE_ONNX
#include "onnx/onnx_import.h"
#endif
#include "session/session_access.h"
#include "session/stats_report.h"
#include "support/cpu_cores.h"
#include "support/logging.h"
#include "support/trace.h"
#include "support/tunables.h"
#include "vm/vm.h"
#if SHAPEVM_HAVE_JIT
#include "jit/jit.h"
#include "tune/auto_tuner.h"
#endif

namespace shapevm {
namespace {

// The table row named by `key` (snake_case key or CamelCase name).
Expected<Tunable> findTunable(std::string_view key) {
  for (std::size_t i = 0; i < Tunables::all().size(); ++i) {
    const TunableInfo& row = Tunables::all()[i];
    if (row.key == key || row.name == key) return static_cast<Tunable>(i);
  }
  std::string known;
  for (const TunableInfo& row : Tunables::all()) known += (known.empty() ? "" : ", ") + std::string(row.key);
  return makeError(ErrorCode::UnknownName, "unknown tunable '{}' (known: {})", key, known);
}

// A jit_level value: O0/O1/O2 or an integer, range-checked against its table row.
Expected<std::int64_t> parseJitLevel(std::string_view text) {
  std::string_view digits = text;
  if (digits.size() == 2 && (digits[0] == 'O' || digits[0] == 'o')) digits.remove_prefix(1);
  std::int64_t level = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), level);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    return makeError(ErrorCode::InvalidArgument, "tunable jit_level: '{}' is not a level (O0, O1, O2 or 0, 1, 2)",
                     text);
  }
  return level;
}

Status checkJitLevel(std::int64_t level) {
  const TunableInfo& row = Tunables::info(Tunable::JitLevel);
  if (level < row.min_value || level > row.max_value) {
    return makeError(ErrorCode::InvalidArgument, "tunable jit_level = {} is outside its range [{}, {}]", level,
                     row.min_value, row.max_value);
  }
  if (level >= 1 && !Session::jitAvailable()) {
    return makeError(ErrorCode::Unsupported,
                     "this ShapeVM was built without the JIT (SHAPEVM_ENABLE_JIT=OFF): jit_level must be O0, got O{}",
                     level);
  }
  return Status::ok();
}

bool isExtension(std::string_view name, std::string_view extension) {
  return name.size() >= extension.size() &&
         name.compare(name.size() - extension.size(), extension.size(), extension) == 0;
}

Expected<std::string> readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError(ErrorCode::IoError, "cannot open '{}'", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Expected<FrontendOptions> frontendOptions(const LoadOptions& options) {
  SVM_ASSIGN_OR_RETURN(FrontendOptions frontend, FrontendOptions::parseList(options.optimizations));
  frontend.entry = options.entry;
  return frontend;
}

// Source text to a verified module (what loadProgram does for files).
Expected<Module> compileSource(std::string_view source, const LoadOptions& options) {
  const std::string& file = options.filename;
  SourceKind kind = options.kind;
  if (kind == SourceKind::Auto) {
    if (isExtension(file, ".svm")) {
      return makeError(ErrorCode::InvalidArgument,
                       "{}: a binary .svm module cannot be loaded from source text (use load())", file);
    }
    const std::size_t first = source.find_first_not_of(" \t\r\n");
    const bool svasm = isExtension(file, ".svasm") || (!isExtension(file, ".py") && first != std::string_view::npos &&
                                                       source.substr(first).starts_with(".module"));
    kind = isExtension(file, ".onnx") ? SourceKind::Onnx : svasm ? SourceKind::Svasm : SourceKind::Python;
  }
  if (kind == SourceKind::Onnx) {
#if SHAPEVM_HAVE_ONNX
    return importOnnxBytes(source, "", file);
#else
    return makeError(ErrorCode::Unsupported, "{}: this ShapeVM was built without the ONNX importer (libonnx-dev)",
                     file);
#endif
  }
  if (kind == SourceKind::Svasm) {
    SVM_ASSIGN_OR_RETURN(Module module, assemble(source, file));
    SVM_RETURN_IF_ERROR(verifyModule(module));
    return module;
  }
  SVM_ASSIGN_OR_RETURN(FrontendOptions frontend, frontendOptions(options));
  return compileAndVerifyPython(source, file, frontend);
}

FunctionInfo describeFunction(const Module& module, int index) {
  const Function& fn = module.functions[static_cast<std::size_t>(index)];
  FunctionInfo info;
  info.index = index;
  info.name = fn.name;
  info.num_outputs = fn.num_outputs;
  for (const Param& p : fn.params) {
    ParamInfo param;
    param.name = p.name;
    param.kind = p.kind;
    if (p.kind == ValueKind::Tensor) {
      param.token = p.token.toString();
      param.dtype = p.token.dtype;
      param.any_rank = p.token.any_rank;
      for (const DimToken& d : p.token.dims) {
        DimInfo dim;
        if (d.is_static) {
          dim.size = d.size;
        } else {
          const auto id = static_cast<std::size_t>(d.id);
          if (d.id >= 0)
            dim.name =
                id < fn.dim_names.size() && !fn.dim_names[id].empty() ? fn.dim_names[id] : fmt::format("?{}", d.id);
          dim.lo = d.lo != 0 || d.bounded() ? d.lo : -1;  // DimInfo's -1: no bound
          dim.hi = d.bounded() ? d.hi : -1;
        }
        param.dims.push_back(std::move(dim));
      }
    }
    info.params.push_back(std::move(param));
  }
  return info;
}

}  // namespace

struct Session::Impl {
  explicit Impl(SessionOptions opts) : options(std::move(opts)) {
    const std::int64_t table_level = Tunables::get(Tunable::JitLevel);
    jit_level = Session::jitAvailable() ? table_level : 0;  // interpreter-only builds start at O0
  }
  ~Impl() { dropParts(); }

  void dropParts() {
#if SHAPEVM_HAVE_JIT
    jit.reset();  // first: it stops its compile thread (the tuner's caller) and unpatches the VM
    tuner.reset();
#endif
    vm.reset();
  }

  // Attaches the JIT at jit_level to the loaded VM (callers hold mutex; no run is in progress).
  void attachJit() {
#if SHAPEVM_HAVE_JIT
    jit.reset();
    tuner.reset();
#endif
    jit_status = Status::ok();
    if (!vm || jit_level < 1) return;
#if SHAPEVM_HAVE_JIT
    // The tuner exists at O2 even when the JIT cannot start (the CLI's --stats reports it).
    if (jit_level >= 2 && options.autotune) {
      tune::AutoTunerOptions tune_options;
      tune_options.use_database = options.tuning_cache;
      tune_options.database_path = options.tuning_db;
      tune_options.budget_ms = options.tune_budget_ms;
      tuner = std::make_unique<tune::AutoTuner>(tune_options);
    }
#endif
    if (!options.profile) {
      jit_status =
          makeError(ErrorCode::Unsupported,
                    "profiling is off (SessionOptions::profile), and the JIT compiles from the shape profiles: "
                    "everything runs interpreted (O0)");
      return;
    }
#if SHAPEVM_HAVE_JIT
    jit::JitOptions jit_options;
    jit_options.level = static_cast<int>(jit_level);
    jit_options.wait_for_compiles = options.jit_wait;
    jit_options.tuner = tuner.get();
    // Compiled kernels next to the tuning database.
    if (const std::size_t slash = options.tuning_db.rfind('/'); slash != std::string::npos) {
      jit_options.kernel_cache_dir = options.tuning_db.substr(0, slash);
    }
    auto attached = jit::Jit::attach(*vm, jit_options);
    if (attached) {
      jit = std::move(*attached);
    } else {
      jit_status = std::move(attached).status();
      logAt(LogLevel::Warn, "JIT", "no JIT, the program runs interpreted: {}", jit_status.message());
    }
#endif
  }

  Status install(Module loaded_module) {
    dropParts();
    module = std::make_shared<Module>(std::move(loaded_module));
    VmOptions vm_options;
    vm_options.profile = options.profile;
    vm = std::make_unique<VirtualMachine>(module, vm_options);
    runs = 0;
    latency = LatencyBook();
    attachJit();
    return Status::ok();
  }

  Status requireModule() const {
    if (!vm) return makeError(ErrorCode::InvalidArgument, "no program is loaded (Session::load or loadSource first)");
    return Status::ok();
  }

  const SessionOptions options;
  std::int64_t jit_level = 0;
  mutable std::mutex mutex;
  std::shared_ptr<Module> module;
  // Declaration order is destruction order in reverse; dropParts() makes it explicit anyway.
#if SHAPEVM_HAVE_JIT
  std::unique_ptr<tune::AutoTuner> tuner;
#endif
  std::unique_ptr<VirtualMachine> vm;
#if SHAPEVM_HAVE_JIT
  std::unique_ptr<jit::Jit> jit;
#endif
  Status jit_status;
  std::uint64_t runs = 0;
  LatencyBook latency;  // per argument shape (statsJson)
};

Session::Session(SessionOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Session::~Session() = default;

bool Session::jitAvailable() {
  return SHAPEVM_HAVE_JIT != 0;
}

// ---- settings ----

Status Session::set(std::string_view key, std::string_view value) {
  SVM_ASSIGN_OR_RETURN(Tunable row, findTunable(key));
  if (row != Tunable::JitLevel) return Tunables::set(key, value);
  SVM_ASSIGN_OR_RETURN(std::int64_t level, parseJitLevel(value));
  return set(key, level);
}

Status Session::set(std::string_view key, std::int64_t value) {
  SVM_ASSIGN_OR_RETURN(Tunable row, findTunable(key));
  if (row != Tunable::JitLevel) return Tunables::set(row, value);
  SVM_RETURN_IF_ERROR(checkJitLevel(value));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->jit_level == value) return Status::ok();
  impl_->jit_level = value;
  impl_->attachJit();
  return Status::ok();
}

Expected<std::int64_t> Session::get(std::string_view key) const {
  SVM_ASSIGN_OR_RETURN(Tunable row, findTunable(key));
  if (row != Tunable::JitLevel) return Tunables::get(row);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->jit_level;
}

std::vector<Session::Setting> Session::settings() const {
  std::vector<Setting> out;
  for (std::size_t i = 0; i < Tunables::all().size(); ++i) {
    const TunableInfo& row = Tunables::all()[i];
    Setting setting{std::string(row.key), Tunables::get(static_cast<Tunable>(i)), row.default_value,
                    std::string(row.env), std::string(row.meaning)};
    if (static_cast<Tunable>(i) == Tunable::JitLevel) setting.value = *get(row.key);
    out.push_back(std::move(setting));
  }
  return out;
}

Status Session::setTunable(std::string_view key, std::string_view value) {
  return Tunables::set(key, value);
}

Expected<std::int64_t> Session::getTunable(std::string_view key) {
  SVM_ASSIGN_OR_RETURN(Tunable row, findTunable(key));
  return Tunables::get(row);
}

Status Session::loadTunablesFromEnvironment() {
  return Tunables::loadFromEnvironment();
}

// ---- the program ----

Status Session::load(const std::string& path, const LoadOptions& options) {
  Expected<Module> module = Status::ok();
  if (options.kind == SourceKind::Onnx || (options.kind == SourceKind::Auto && isExtension(path, ".onnx"))) {
#if SHAPEVM_HAVE_ONNX
    module = importOnnxFile(path);
#else
    return makeError(ErrorCode::Unsupported, "{}: this ShapeVM was built without the ONNX importer (libonnx-dev)",
                     path);
#endif
  } else if (options.kind == SourceKind::Auto) {
    // By extension: .py through the frontend, .svm/.svasm through loadModuleFile (verified).
    SVM_ASSIGN_OR_RETURN(FrontendOptions frontend, frontendOptions(options));
    if (!isExtension(path, ".py")) frontend.entry.clear();
    module = loadProgram(path, frontend);
  } else {
    SVM_ASSIGN_OR_RETURN(std::string text, readText(path));
    LoadOptions named = options;
    named.filename = path;
    module = compileSource(text, named);
  }
  if (!module) return std::move(module).status();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->install(std::move(*module));
}

Status Session::loadSource(std::string_view source, const LoadOptions& options) {
  SVM_ASSIGN_OR_RETURN(Module module, compileSource(source, options));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->install(std::move(module));
}

bool Session::loaded() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->vm != nullptr;
}

Status Session::jitStatus() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->jit_status;
}

Status Session::save(const std::string& path) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  SVM_RETURN_IF_ERROR(impl_->requireModule());
#if SHAPEVM_HAVE_JIT
  if (impl_->jit) impl_->jit->waitIdle();  // no compile rewrites a token while it is written
#endif
  return saveModuleFile(*impl_->module, path);
}

std::vector<FunctionInfo> Session::functions() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<FunctionInfo> out;
  if (!impl_->module) return out;
  for (std::size_t i = 0; i < impl_->module->functions.size(); ++i)
    out.push_back(describeFunction(*impl_->module, static_cast<int>(i)));
  return out;
}

Expected<FunctionInfo> Session::function(std::string_view name) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  SVM_RETURN_IF_ERROR(impl_->requireModule());
  SVM_ASSIGN_OR_RETURN(int index, resolveFunction(*impl_->module, std::string(name)));
  return describeFunction(*impl_->module, index);
}

// ---- running ----

Expected<std::vector<Value>> Session::run(std::string_view function, std::span<const Value> args) {
  int index = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    SVM_RETURN_IF_ERROR(impl_->requireModule());
    SVM_ASSIGN_OR_RETURN(index, resolveFunction(*impl_->module, std::string(function)));
  }
  return run(index, args);
}

Expected<std::vector<Value>> Session::run(int function, std::span<const Value> args) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  SVM_RETURN_IF_ERROR(impl_->requireModule());
  const std::size_t count = impl_->module->functions.size();
  if (function < 0 || static_cast<std::size_t>(function) >= count) {
    return makeError(ErrorCode::InvalidArgument, "function index {} is out of range (the module has {} functions)",
                     function, count);
  }
  ++impl_->runs;
  const auto start = std::chrono::steady_clock::now();
  const BusyProgramThread program;  // a compile's helper threads leave this thread's core alone
  auto result = impl_->vm->run(function, args);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (result) impl_->latency.add(impl_->module->functions[static_cast<std::size_t>(function)], args, ms);
  return result;
}

void Session::waitIdle() {
#if SHAPEVM_HAVE_JIT
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->jit) impl_->jit->waitIdle();
#endif
}

Expected<WarmStartResult> Session::warmStart(const WarmStartOptions& options) {
  std::lock_guard<std::mutex> lock(impl_->mutex);  // no run meanwhile (run holds it)
  SVM_RETURN_IF_ERROR(impl_->requireModule());
  WarmStartResult out;
#if SHAPEVM_HAVE_JIT
  if (!impl_->jit) {
    out.note = impl_->jit_status.isOk() ? std::string("jit_level is O0: nothing is compiled")
                                        : "no JIT: " + impl_->jit_status.message();
    return out;
  }
  const jit::WarmStartReport report =
      impl_->jit->warmStart(std::chrono::milliseconds(std::max<std::int64_t>(options.timeout_ms, 0)), options.cancel);
  out.note = report.note;
  out.timed_out = report.timed_out;
  out.cancelled = report.cancelled;
  out.wall_ms = report.wall_ms;
  out.cpu_ms = report.cpu_ms;
  for (const jit::WarmStartItem& item : report.items) {
    using Outcome = jit::WarmStartItem::Outcome;
    WarmStartEntry& entry = out.entries.emplace_back();
    entry.function = impl_->module->functions[static_cast<std::size_t>(item.function)].name;
    entry.kind = item.region ? "region" : "site";
    entry.pc = item.pc;
    entry.reason = item.reason;
    entry.codegens = item.codegens;
    out.codegens += item.codegens;
    switch (item.outcome) {
      case Outcome::Installed:
        entry.outcome = "installed";
        ++out.installed;
        break;
      case Outcome::Declined:
        entry.outcome = "declined";
        ++out.declined;
        break;
      case Outcome::Failed:
        entry.outcome = "failed";
        ++out.failed;
        break;
      case Outcome::Skipped:
        entry.outcome = "skipped";
        ++out.skipped;
        break;
    }
  }
#else
  out.note = "this ShapeVM was built without the JIT: nothing is compiled";
#endif
  return out;
}

std::string WarmStartResult::summary() const {
  std::string text = fmt::format(
      "warm start: {} installed, {} declined, {} failed, {} skipped; {} LLVM codegens; "
      "{:.1f} ms wall, {:.1f} ms compile CPU",
      installed, declined, failed, skipped, codegens, wall_ms, cpu_ms);
  if (timed_out) text += " (timed out)";
  if (cancelled) text += " (cancelled)";
  if (!note.empty()) text += "; " + note;
  return text;
}

SessionStats Session::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  SessionStats out;
  if (!impl_->vm) return out;
  const ExecStats& st = impl_->vm->stats();
  out.runs = impl_->runs;
  out.launches_compiled = st.compiled_calls;
  out.launches_interpreted = st.op_calls - st.compiled_calls;
  out.allocations_requested = st.alloc_requests;
  out.allocations_system = st.system_allocations;
  out.instructions = st.instructions;
  out.guard_misses = st.guard_misses;
#if SHAPEVM_HAVE_JIT
  if (impl_->jit) {
    const jit::JitStats js = impl_->jit->stats();
    out.kernels_installed = js.compiles;
    out.compile_ms = std::accumulate(js.compile_ms.begin(), js.compile_ms.end(), 0.0);
    out.compile_failures = js.compile_failures + js.validation_failures;
    out.fused_regions = js.fused_regions;
    out.tuning_ms = js.tuning_ms;
    out.kernels_from_cache = js.kernels_from_cache;
    out.codegen_count = js.codegen_count;
    out.compiles_pending = js.compiles_pending;
    out.jit_level = impl_->jit->level();
    out.jit_report = impl_->jit->statsReport();
  }
#endif
  return out;
}

std::string Session::statsJson() const {
  const SessionStats st = stats();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  StatsSources sources;
  sources.session = &st;
  if (impl_->vm) sources.exec = &impl_->vm->stats();
  sources.latency = &impl_->latency;
#if SHAPEVM_HAVE_JIT
  std::optional<jit::JitStats> js;
  if (impl_->jit) js = impl_->jit->stats();
  if (js) sources.jit = &*js;
#endif
  return shapevm::statsJson(sources);
}

Status Session::writeStatsJson(const std::string& path) const {
  const std::string text = statsJson();
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return makeError(ErrorCode::IoError, "cannot open stats file '{}' for writing", path);
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  if (std::fclose(file) != 0 || !written) return makeError(ErrorCode::IoError, "failed writing stats file '{}'", path);
  return Status::ok();
}

Status Session::startTrace(const std::string& path, bool ops) {
  return trace::start(path, ops);
}
Status Session::stopTrace() {
  return trace::stop();
}

// ---- in-tree access ----

std::shared_ptr<Module> SessionAccess::module(const Session& session) {
  std::lock_guard<std::mutex> lock(session.impl_->mutex);
  return session.impl_->module;
}

VirtualMachine* SessionAccess::vm(Session& session) {
  return session.impl_->vm.get();
}

jit::Jit* SessionAccess::jit(Session& session) {
#if SHAPEVM_HAVE_JIT
  return session.impl_->jit.get();
#else
  (void)session;
  return nullptr;
#endif
}

tune::AutoTuner* SessionAccess::tuner(Session& session) {
#if SHAPEVM_HAVE_JIT
  return session.impl_->tuner.get();
#else
  (void)session;
  return nullptr;
#endif
}

bool SessionAccess::cancelJit(Session& session, int timeout_ms) {
#if SHAPEVM_HAVE_JIT
  std::lock_guard<std::mutex> lock(session.impl_->mutex);
  if (!session.impl_->jit) return true;
  session.impl_->jit->cancel();
  return session.impl_->jit->waitStopped(std::chrono::milliseconds(timeout_ms));
#else
  (void)session, (void)timeout_ms;
  return true;
#endif
}

void SessionAccess::stopJit(Session& session) {
#if SHAPEVM_HAVE_JIT
  std::lock_guard<std::mutex> lock(session.impl_->mutex);
  session.impl_->jit.reset();
#else
  (void)session;
#endif
}

}  // namespace shapevm
