// SPDX-License-Identifier: Apache-2.0
// shapevm._core: the pybind11 extension under the `shapevm` package (python/shapevm/, docs/python.md).
// A Program is one Session (one loaded program, its VM, JIT and tuner); a Function calls one of
// its functions with numpy arrays and Python scalars. Invariant: the GIL is released whenever
// ShapeVM may block or run (load, run, stats, wait, close), and nothing ShapeVM calls back on its
// own threads (log lines, array releases) takes the GIL: it queues and asks for a pending call.
#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <pybind11/stl.h>

#include "python/convert.h"
#include "shapevm/shapevm.h"
#include "support/logging.h"
#include "support/tunables.h"

namespace shapevm::python {
namespace {

constexpr std::size_t kNumErrorCodes = 0
#define SVM_ERROR(name, meaning) +1
#include "shapevm/errors.def"
#undef SVM_ERROR
    ;

// ---- log lines to Python's logging (through a handler the package registers) ----

struct LogQueue {
  std::mutex mutex;
  std::vector<std::tuple<int, std::string, std::string>> lines;
  std::atomic<bool> any{false};
  std::atomic<bool> scheduled{false};
  std::atomic<bool> stopped{false};
  py::object handler;  // handler(list of (level, component, message)); set and read with the GIL
};
LogQueue& logQueue() {
  static LogQueue* queue = new LogQueue();  // never destroyed: compile threads may log at exit
  return *queue;
}

void flushLog() {
  LogQueue& queue = logQueue();
  if (!queue.any.load(std::memory_order_acquire)) return;
  std::vector<std::tuple<int, std::string, std::string>> lines;
  {
    std::lock_guard<std::mutex> lock(queue.mutex);
    lines.swap(queue.lines);
    queue.any.store(false);
  }
  if (!queue.handler || lines.empty()) return;
  try {
    queue.handler(py::cast(lines));
  } catch (py::error_already_set& error) {
    error.discard_as_unraisable("shapevm log handler");
  }
}

int flushLogPending(void*) {
  logQueue().scheduled.store(false);
  flushLog();
  return 0;
}

void pythonLogSink(LogLevel level, std::string_view component, std::string_view message) {
  LogQueue& queue = logQueue();
  {
    std::lock_guard<std::mutex> lock(queue.mutex);
    queue.lines.emplace_back(static_cast<int>(level), std::string(component), std::string(message));
    queue.any.store(true, std::memory_order_release);
  }
  if (queue.stopped.load()) return;
  if (!queue.scheduled.exchange(true) && Py_AddPendingCall(flushLogPending, nullptr) != 0) queue.scheduled.store(false);
}

// Back in Python after ShapeVM ran: hand over what other threads left.
void afterNative() {
  drainDeferredReleases();
  flushLog();
}

// ---- Program: one Session ----

// A call's argument Values: in place for the usual few (no heap block per call), and only as
// many as the function has parameters (each one's release is an out-of-line call).
class ArgumentValues {
 public:
  explicit ArgumentValues(std::size_t count) : count_(count) {
    if (count > kInline) heap_.resize(count);
    std::uninitialized_value_construct_n(inline_, count > kInline ? 0 : count);
  }
  ~ArgumentValues() { release(); }
  ArgumentValues(const ArgumentValues&) = delete;
  ArgumentValues& operator=(const ArgumentValues&) = delete;
  std::span<Value> values() { return count_ > kInline ? std::span<Value>(heap_) : std::span<Value>(inline_, count_); }
  // Releases every Value now (once).
  void release() {
    if (count_ <= kInline) std::destroy_n(inline_, count_);
    heap_.clear();
    count_ = 0;
  }

 private:
  static constexpr std::size_t kInline = 4;
  union {
    Value inline_[kInline];  // the first count_ are alive (count_ <= kInline)
  };
  std::vector<Value> heap_;
  std::size_t count_;
};

class Program {
 public:
  Program(std::optional<std::string> jit_level, bool jit_wait, bool autotune, bool tuning_cache) {
    SessionOptions options;
    options.jit_wait = jit_wait;
    options.autotune = autotune;
    options.tuning_cache = tuning_cache;
    session_ = std::make_shared<Session>(options);
    if (jit_level) check(session_->set("jit_level", *jit_level), Phase::Run);
  }
  ~Program() { close(); }

  void loadSource(const std::string& source, const std::string& filename, const std::string& entry, bool python) {
    LoadOptions options;
    options.filename = filename;
    options.entry = entry;
    options.kind = python ? SourceKind::Python : SourceKind::Auto;
    std::shared_ptr<Session> session = live();
    Status status;
    {
      py::gil_scoped_release release;
      status = session->loadSource(source, options);
    }
    afterLoad(status);
  }

  void load(const std::string& path) {
    std::shared_ptr<Session> session = live();
    Status status;
    {
      py::gil_scoped_release release;
      status = session->load(path);
    }
    afterLoad(status);
  }

  const std::vector<FunctionInfo>& functions() const { return functions_; }

  int index(const std::string& name) {
    Expected<FunctionInfo> info = live()->function(name);
    if (!info) raiseStatus(info.status(), Phase::Run);
    return info->index;
  }

  // Runs function `index`: positional `args` (a tuple), then `kwargs` (a dict or null) by name,
  // for its first `user_params` parameters; the next ones are `bound` (a Module's derived
  // parameters, converted once), the rest attributes of `owner` (a Module's weights), read now.
  // `raw`: tensors come back as shapevm.Parameter objects (holdValue), not numpy arrays.
  py::object call(int index, int user_params, py::handle owner, PyObject* args, PyObject* kwargs,
                  std::span<const Value> bound = {}, bool raw = false) {
    if (index < 0 || static_cast<std::size_t>(index) >= functions_.size()) {
      raiseStatus(makeError(ErrorCode::InvalidArgument, "function index {} out of range", index), Phase::Run);
    }
    const FunctionInfo& info = functions_[static_cast<std::size_t>(index)];
    const std::size_t count = info.params.size();
    const std::size_t user = user_params < 0 ? count : std::min(count, static_cast<std::size_t>(user_params));
    // A parameter is bound once its Value is not None (toValue never yields None).
    ArgumentValues arguments(count);
    const std::span<Value> values = arguments.values();
    const auto positional = static_cast<std::size_t>(PyTuple_GET_SIZE(args));
    if (positional > user) {
      raiseStatus(makeError(ErrorCode::InvalidArgument, "{}() takes {} argument{} ({}), got {}", info.name, user,
                            user == 1 ? "" : "s", paramList(info, user), positional),
                  Phase::Run);
    }
    for (std::size_t i = 0; i < positional; ++i) bind(info, i, PyTuple_GET_ITEM(args, i), values);
    if (kwargs != nullptr) {
      for (auto [key, item] : py::reinterpret_borrow<py::dict>(kwargs)) {
        const std::string name = py::str(key);
        std::size_t i = 0;
        while (i < user && info.params[i].name != name) ++i;
        if (i == user) {
          raiseStatus(
              makeError(ErrorCode::InvalidArgument, "{}() got an unexpected keyword argument '{}' (parameters: {})",
                        info.name, name, paramList(info, user)),
              Phase::Run);
        }
        if (!values[i].isNone()) {
          raiseStatus(
              makeError(ErrorCode::InvalidArgument, "{}() got multiple values for argument '{}'", info.name, name),
              Phase::Run);
        }
        bind(info, i, item, values);
      }
    }
    for (std::size_t i = 0; i < user; ++i) {
      if (values[i].isNone()) {
        raiseStatus(makeError(ErrorCode::InvalidArgument, "{}() missing argument '{}' (parameters: {})", info.name,
                              info.params[i].name, paramList(info, user)),
                    Phase::Run);
      }
    }
    if (user + bound.size() > count) {
      raiseStatus(makeError(ErrorCode::InvalidArgument, "{}: {} bound values for {} parameters after the arguments",
                            info.name, bound.size(), count - user),
                  Phase::Run);
    }
    std::copy(bound.begin(), bound.end(), values.begin() + static_cast<std::ptrdiff_t>(user));
    for (std::size_t i = user + bound.size(); i < count; ++i) {
      const std::string& name = info.params[i].name;
      if (owner.is_none() || !py::hasattr(owner, name.c_str())) {
        raiseStatus(makeError(ErrorCode::InvalidArgument,
                              "{}: the module has no attribute '{}' (self.{} is a parameter)", info.name, name, name),
                    Phase::Run);
      }
      bind(info, i, owner.attr(name.c_str()), values);
    }
    std::shared_ptr<Session> session = live();
    std::optional<Expected<std::vector<Value>>> result;
    {
      py::gil_scoped_release release;
      result.emplace(session->run(index, values));
    }
    arguments.release();  // with the GIL: the arrays are decref'd here
    afterNative();
    if (!*result) raiseStatus(result->status(), Phase::Run);
    std::vector<Value>& outputs = result->value();
    auto convert = [raw](Value value) { return raw ? holdValue(std::move(value)) : fromValue(std::move(value)); };
    if (outputs.empty()) return py::none();
    if (outputs.size() == 1) return convert(std::move(outputs[0]));
    py::tuple out(outputs.size());
    for (std::size_t i = 0; i < outputs.size(); ++i) out[i] = convert(std::move(outputs[i]));
    return out;
  }

  // `objects` as the Values of function `index`'s parameters from `first` on (toValue's checks).
  std::vector<Value> values(int index, std::size_t first, const py::sequence& objects) const {
    if (index < 0 || static_cast<std::size_t>(index) >= functions_.size()) {
      raiseStatus(makeError(ErrorCode::InvalidArgument, "function index {} out of range", index), Phase::Run);
    }
    const FunctionInfo& info = functions_[static_cast<std::size_t>(index)];
    if (first + objects.size() > info.params.size()) {
      raiseStatus(makeError(ErrorCode::InvalidArgument, "{}: {} bound values for {} parameters after the arguments",
                            info.name, objects.size(), info.params.size() - std::min(first, info.params.size())),
                  Phase::Run);
    }
    std::vector<Value> out(objects.size());
    for (std::size_t i = 0; i < objects.size(); ++i) bind(info, first + i, objects[i], out, first);
    for (Value& value : out) {
      // Adopted numpy memory may change under a cached Value: only ShapeVM-owned storage is bound.
      if (value.isTensor() && value.tensor().storage()->isExternal()) {
        raiseStatus(makeError(ErrorCode::InvalidArgument,
                              "{}: parameter '{}' is bound once, so it must be ShapeVM-owned (a Module parameter "
                              "or a shapevm.Parameter), not a plain numpy array",
                              info.name, info.params[first + static_cast<std::size_t>(&value - out.data())].name),
                    Phase::Run);
      }
    }
    return out;
  }

  // Session::statsJson's object (docs/observability.md's keys) as a dict.
  py::object stats() {
    std::shared_ptr<Session> session = live();
    std::string text;
    {
      py::gil_scoped_release release;
      text = session->statsJson();
    }
    afterNative();
    return py::module_::import("json").attr("loads")(text);
  }

  void writeStatsJson(const std::string& path) {
    std::shared_ptr<Session> session = live();
    Status status;
    {
      py::gil_scoped_release release;
      status = session->writeStatsJson(path);
    }
    afterNative();
    if (!status.isOk()) raiseStatus(status, Phase::Run);
  }

  void set(const std::string& key, const std::string& value) {
    std::shared_ptr<Session> session = live();
    Status status;
    {
      py::gil_scoped_release release;
      status = session->set(key, value);
    }
    check(status, Phase::Run);
  }

  std::int64_t get(const std::string& key) {
    Expected<std::int64_t> value = live()->get(key);
    if (!value) raiseStatus(value.status(), Phase::Run);
    return *value;
  }

  std::string jitStatus() {
    Status status = live()->jitStatus();
    return status.isOk() ? std::string() : status.toString();
  }

  // Session::warmStart's result as a dict (docs/python.md); `timeout_ms` 0 = no limit.
  py::dict warmStart(std::int64_t timeout_ms) {
    std::shared_ptr<Session> session = live();
    Expected<WarmStartResult> result = WarmStartResult{};
    {
      py::gil_scoped_release release;
      WarmStartOptions options;
      options.timeout_ms = timeout_ms;
      result = session->warmStart(options);
    }
    afterNative();
    if (!result) raiseStatus(result.status(), Phase::Run);
    py::list entries;
    for (const WarmStartEntry& entry : result->entries) {
      entries.append(py::dict(py::arg("function") = entry.function, py::arg("kind") = entry.kind,
                              py::arg("pc") = entry.pc, py::arg("outcome") = entry.outcome,
                              py::arg("reason") = entry.reason, py::arg("codegens") = entry.codegens));
    }
    return py::dict(py::arg("installed") = result->installed, py::arg("declined") = result->declined,
                    py::arg("failed") = result->failed, py::arg("skipped") = result->skipped,
                    py::arg("codegens") = result->codegens, py::arg("timed_out") = result->timed_out,
                    py::arg("cancelled") = result->cancelled, py::arg("wall_ms") = result->wall_ms,
                    py::arg("cpu_ms") = result->cpu_ms, py::arg("note") = result->note,
                    py::arg("summary") = result->summary(), py::arg("entries") = entries);
  }

  void waitIdle() {
    std::shared_ptr<Session> session = live();
    {
      py::gil_scoped_release release;
      session->waitIdle();
    }
    afterNative();
  }

  void save(const std::string& path) {
    std::shared_ptr<Session> session = live();
    Status status;
    {
      py::gil_scoped_release release;
      status = session->save(path);
    }
    check(status, Phase::Run);
  }

  // Stops the JIT's compiles and frees the program; later calls raise. Runs in flight finish
  // first (they hold their own reference to the Session).
  void close() {
    if (!session_) return;
    std::shared_ptr<Session> session = std::move(session_);
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release release;
      session.reset();
    } else {
      session.reset();
    }
  }
  bool closed() const { return session_ == nullptr; }

 private:
  static void check(const Status& status, Phase phase) {
    if (!status.isOk()) raiseStatus(status, phase);
  }

  std::shared_ptr<Session> live() const {
    if (!session_) {
      raiseStatus(makeError(ErrorCode::InvalidArgument, "this program was closed (shapevm is shutting down?)"),
                  Phase::Run);
    }
    return session_;
  }

  void afterLoad(const Status& status) {
    afterNative();
    check(status, Phase::Compile);
    std::shared_ptr<Session> session = live();
    std::vector<FunctionInfo> functions;
    {
      py::gil_scoped_release release;
      functions = session->functions();
    }
    functions_ = std::move(functions);  // with the GIL: call() reads it
  }

  static std::string paramList(const FunctionInfo& info, std::size_t count) {
    std::string out;
    for (std::size_t i = 0; i < count; ++i) out += (out.empty() ? "" : ", ") + info.params[i].name;
    return out.empty() ? "none" : out;
  }

  // Parameter `i` of `info` from `object`, into values[i - first].
  static void bind(const FunctionInfo& info, std::size_t i, py::handle object, std::span<Value> values,
                   std::size_t first = 0) {
    Expected<Value> value = toValue(object, info.params[i], info.name);
    if (!value) raiseStatus(value.status(), Phase::Run);
    values[i - first] = std::move(*value);
  }

  std::shared_ptr<Session> session_;
  std::vector<FunctionInfo> functions_;
};

// One callable function of a Program (a @shapevm.jit function, a Module's construct, a function
// of a loaded program). Calls come through functionCall (its type's tp_call), not pybind11's
// dispatcher: the per-call overhead is what a one-op function costs.
// `bound`: Values for the parameters after the first `user_params` (converted once; a Module's
// derived parameters); `raw`: results as shapevm.Parameter objects. Both fixed at construction.
class Function {
 public:
  Function(std::shared_ptr<Program> program, int index, int user_params, const py::sequence& bound, bool raw)
      : program_(std::move(program)), index_(index), user_params_(user_params), raw_(raw) {
    if (!bound.empty()) bound_ = program_->values(index, static_cast<std::size_t>(std::max(user_params, 0)), bound);
  }
  py::object call(PyObject* args, PyObject* kwargs) {
    return program_->call(index_, user_params_, py::none(), args, kwargs, bound_, raw_);
  }
  py::object callBound(py::handle owner, py::args args, py::kwargs kwargs) {
    return program_->call(index_, user_params_, owner, args.ptr(), kwargs.ptr(), bound_, raw_);
  }
  const std::shared_ptr<Program>& program() const { return program_; }
  int index() const { return index_; }

 private:
  std::shared_ptr<Program> program_;
  int index_;
  int user_params_;
  std::vector<Value> bound_;
  bool raw_ = false;
};

// The Function type object (set at module init): its exact instances skip pybind11's type lookup.
PyTypeObject* function_type = nullptr;

Function& functionOf(PyObject* self) {
  if (Py_TYPE(self) == function_type) {
    auto* value = reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder().value_ptr<Function>();
    if (value != nullptr) return *value;  // null: __init__ never ran; py::cast raises
  }
  return py::cast<Function&>(py::handle(self));
}

PyObject* functionCall(PyObject* self, PyObject* args, PyObject* kwargs) {
  try {
    return functionOf(self).call(args, kwargs).release().ptr();
  } catch (py::error_already_set& error) {
    error.restore();
  } catch (py::builtin_exception& error) {
    error.set_error();
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  }
  return nullptr;
}

py::dict describeParam(const ParamInfo& param) {
  py::dict out;
  out["name"] = param.name;
  out["kind"] = std::string(valueKindName(param.kind));
  out["token"] = param.token;
  out["dtype"] = param.dtype ? py::object(py::str(std::string(dtypeName(*param.dtype)))) : py::object(py::none());
  out["any_rank"] = param.any_rank;
  py::list dims;
  for (const DimInfo& dim : param.dims) {
    if (dim.size >= 0) {
      dims.append(dim.size);
    } else {
      dims.append(dim.name.empty() ? py::object(py::none()) : py::object(py::str(dim.name)));
    }
  }
  out["dims"] = dims;
  return out;
}

py::list settings() {
  py::list out;
  for (std::size_t i = 0; i < Tunables::all().size(); ++i) {
    const TunableInfo& row = Tunables::all()[i];
    py::dict item;
    item["key"] = std::string(row.key);
    item["value"] = Tunables::get(static_cast<Tunable>(i));
    item["default"] = row.default_value;
    item["min"] = row.min_value;
    item["max"] = row.max_value;
    item["env"] = std::string(row.env);
    item["meaning"] = std::string(row.meaning);
    out.append(item);
  }
  return out;
}

void setTunable(const std::string& key, const std::string& value) {
  if (Status status = Session::setTunable(key, value); !status.isOk()) raiseStatus(status, Phase::Run);
  // The JIT raises the log threshold when it attaches; a live Session's JIT must see it now.
  if (key == "jit_log" || key == "JitLog") {
    const std::int64_t level = Tunables::get(Tunable::JitLog);
    Log::setThreshold(level >= 2 ? LogLevel::Debug : level == 1 ? LogLevel::Info : LogLevel::Warn);
  }
}

}  // namespace
}  // namespace shapevm::python

PYBIND11_MODULE(_core, m) {
  namespace py = pybind11;
  using namespace shapevm;
  using namespace shapevm::python;
  m.doc() = "ShapeVM's native core (use the `shapevm` package, docs/python.md)";

  m.def("error_table", [] {
    std::vector<std::pair<std::string, std::string>> rows;
    for (std::size_t i = 0; i < kNumErrorCodes; ++i) {
      const auto code = static_cast<ErrorCode>(i);
      rows.emplace_back(std::string(errorCodeName(code)), std::string(errorCodeMeaning(code)));
    }
    return rows;
  });
  m.def("_set_error_classes", &setErrorClasses);
  m.def("settings", &settings, "every row of the tunables table (key, value, default, min, max, env, meaning)");
  m.def("set_tunable", &setTunable, py::arg("key"), py::arg("value"));
  m.def("get_tunable", [](const std::string& key) {
    Expected<std::int64_t> value = Session::getTunable(key);
    if (!value) raiseStatus(value.status(), Phase::Run);
    return *value;
  });
  m.def("jit_available", &Session::jitAvailable);
  m.def(
      "start_trace",
      [](const std::string& path, bool ops) {
        if (Status s = Session::startTrace(path, ops); !s.isOk()) raiseStatus(s, Phase::Run);
      },
      py::arg("path"), py::arg("ops") = false);
  m.def("stop_trace", [] {
    Status s;
    {
      py::gil_scoped_release release;
      s = Session::stopTrace();
    }
    if (!s.isOk()) raiseStatus(s, Phase::Run);
  });
  // The kernel cache + tuning database as an archive (Session::exportCache / importCache).
  auto cache_transfer = [](bool out) {
    return [out](const std::string& dir, const std::string& cache_dir) {
      Expected<CacheTransfer> done = [&] {
        py::gil_scoped_release release;
        return out ? Session::exportCache(dir, cache_dir) : Session::importCache(dir, cache_dir);
      }();
      if (!done) raiseStatus(done.status(), Phase::Run);
      return py::dict(py::arg("kernels") = done->kernels, py::arg("tuning_records") = done->tuning_records);
    };
  };
  m.def("cache_export", cache_transfer(true), py::arg("dir"), py::arg("cache_dir") = "");
  m.def("cache_import", cache_transfer(false), py::arg("dir"), py::arg("cache_dir") = "");
  m.def("dtypes", [] {
    std::vector<std::string> names;
    for (int i = 0; i < kNumDTypes; ++i) names.emplace_back(dtypeName(static_cast<DType>(i)));
    return names;
  });
  m.def("_set_log_handler", [](py::object handler) {
    logQueue().handler = std::move(handler);
    Log::setSink(logQueue().handler.is_none() ? nullptr : &pythonLogSink);
  });
  m.def("_own_parameter", &ownParameter, py::arg("value"),
        "a Module attribute as the Module keeps it: a numpy array becomes a read-only array over a ShapeVM-owned "
        "copy; anything else is returned unchanged");
  m.def("_crosses_owned", &crossesOwned, py::arg("array"),
        "whether `array` crosses into a call as ShapeVM-owned storage (a Module parameter or a view of one)");
  m.def("_flush", &afterNative, "hands Python what ShapeVM's threads left (log lines, array releases)");
  m.def("_shutdown", [] {
    stopDeferredReleases();
    logQueue().stopped.store(true);
    Log::setSink(nullptr);
    logQueue().handler = py::none();
  });

  // shapevm.Parameter (convert.h HeldTensor): a ShapeVM-owned tensor Python holds (docs/python.md).
  py::class_<HeldTensor> parameter(m, "Parameter");
  parameter
      .def(py::init([](const py::array& array, std::optional<std::string> dtype) {
             const std::optional<DType> type = dtype ? parseDType(*dtype) : std::nullopt;
             if (dtype && !type) throw py::value_error("shapevm.Parameter: unknown dtype '" + *dtype + "'");
             return HeldTensor{ownedCopy(array, type)};
           }),
           py::arg("array"), py::arg("dtype") = py::none(),
           "a read-only copy of `array` in ShapeVM's storage, converted to `dtype` (e.g. 'bfloat16')")
      .def_property_readonly("shape",
                             [](const HeldTensor& held) {
                               py::tuple out(static_cast<std::size_t>(held.tensor.rank()));
                               for (int axis = 0; axis < held.tensor.rank(); ++axis) out[axis] = held.tensor.dim(axis);
                               return out;
                             })
      .def_property_readonly("dtype",
                             [](const HeldTensor& held) { return std::string(dtypeName(held.tensor.dtype())); })
      .def_property_readonly("ndim", [](const HeldTensor& held) { return held.tensor.rank(); })
      .def(
          "numpy", [](const HeldTensor& held) { return heldArray(held.tensor); },
          "a read-only array over its storage (bfloat16: a float32 copy, widened exactly)")
      .def(
          "__array__",
          [](const HeldTensor& held, py::object dtype, py::object) {
            py::object array = heldArray(held.tensor);
            return dtype.is_none() ? array : array.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("__repr__", [](const HeldTensor& held) {
        return fmt::format("shapevm.Parameter({}, {})", held.tensor.shape().toString(), dtypeName(held.tensor.dtype()));
      });
  setHeldTensorType(parameter);

  py::class_<Program, std::shared_ptr<Program>>(m, "Program")
      .def(py::init<std::optional<std::string>, bool, bool, bool>(), py::arg("jit_level") = py::none(),
           py::arg("jit_wait") = false, py::arg("autotune") = true, py::arg("tuning_cache") = true)
      .def("load_source", &Program::loadSource, py::arg("source"), py::arg("filename"), py::arg("entry") = "",
           py::arg("python") = true)
      .def("load", &Program::load, py::arg("path"))
      .def("functions",
           [](const Program& program) {
             py::list out;
             for (const FunctionInfo& info : program.functions()) {
               py::dict item;
               item["index"] = info.index;
               item["name"] = info.name;
               item["num_outputs"] = info.num_outputs;
               py::list params;
               for (const ParamInfo& p : info.params) params.append(describeParam(p));
               item["params"] = params;
               out.append(item);
             }
             return out;
           })
      .def("index", &Program::index)
      .def("stats", &Program::stats)
      .def("write_stats_json", &Program::writeStatsJson, py::arg("path"))
      .def("set", &Program::set)
      .def("get", &Program::get)
      .def("jit_status", &Program::jitStatus)
      .def("wait_idle", &Program::waitIdle)
      .def("warm_start", &Program::warmStart, py::arg("timeout_ms") = 0,
           "installs what the kernel cache's install records list for this program, before the first call")
      .def("save", &Program::save)
      .def("close", &Program::close)
      .def_property_readonly("closed", &Program::closed);

  py::class_<Function, std::shared_ptr<Function>> function(m, "Function", py::dynamic_attr());
  function
      .def(py::init<std::shared_ptr<Program>, int, int, const py::sequence&, bool>(), py::arg("program"),
           py::arg("index"), py::arg("user_params") = -1, py::arg("bound") = py::tuple(), py::arg("raw") = false)
      .def("call_bound", &Function::callBound)
      .def(
          "stats", [](const Function& f) { return f.program()->stats(); },
          "counters of its program (runs, launches_compiled, kernels_installed, ...; docs/observability.md)")
      .def(
          "write_stats_json", [](const Function& f, const std::string& path) { f.program()->writeStatsJson(path); },
          py::arg("path"), "writes stats() to a JSON file")
      .def(
          "wait_idle", [](const Function& f) { f.program()->waitIdle(); },
          "blocks until its JIT has no compile queued or running")
      .def(
          "warm_start",
          [](const Function& f, std::optional<double> timeout) {
            if (timeout && !(*timeout >= 0)) throw py::value_error("warm_start: timeout must be >= 0 seconds");
            // A timeout rounds to at least 1 ms: 0 would mean no limit.
            return f.program()->warmStart(
                timeout ? std::max<std::int64_t>(1, static_cast<std::int64_t>(*timeout * 1000.0 + 0.5)) : 0);
          },
          py::arg("timeout") = py::none(),
          "installs what the kernel cache lists for its program before the first call (docs/python.md)")
      .def_property_readonly("program", &Function::program)
      .def_property_readonly("index", &Function::index);
  // Calls go straight to functionCall; the type never gets a __call__ attribute that would
  // send them through slot_tp_call and pybind11's dispatcher.
  function_type = reinterpret_cast<PyTypeObject*>(function.ptr());
  function_type->tp_call = &functionCall;
  PyType_Modified(reinterpret_cast<PyTypeObject*>(function.ptr()));
}
