// SPDX-License-Identifier: Apache-2.0
// numpy <-> ShapeVM values (see convert.h). Arrays with negative strides or strides that are not
// a multiple of the item size are the only inputs copied (Tensor views cannot express them).
#include "python/convert.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

namespace shapevm::python {
namespace {

// ---- error classes ----

std::vector<py::object>& errorClasses(Phase phase) {
  static std::vector<py::object>* run = new std::vector<py::object>();  // never destroyed: outlive exit
  static std::vector<py::object>* compile = new std::vector<py::object>();
  return phase == Phase::Run ? *run : *compile;
}

// ---- releases of wrapped arrays ----

struct Deferred {
  std::mutex mutex;
  std::vector<PyObject*> objects;
  std::atomic<bool> scheduled{false};
  std::atomic<bool> stopped{false};
  std::atomic<bool> pending{false};  // `objects` may be non-empty (set under `mutex`): drains skip the lock otherwise
};
Deferred& deferred() {
  static Deferred* state = new Deferred();  // never destroyed: compile threads may release at exit
  return *state;
}

int drainPending(void*) {
  deferred().scheduled.store(false);
  drainDeferredReleases();
  return 0;
}

void releaseArray(void* context) {
  auto* object = static_cast<PyObject*>(context);
  Deferred& state = deferred();
  if (state.stopped.load()) return;  // the interpreter is finalizing: leak rather than touch it
  if (PyGILState_Check()) {
    Py_DECREF(object);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.objects.push_back(object);
    state.pending.store(true, std::memory_order_release);
  }
  if (!state.scheduled.exchange(true) && Py_AddPendingCall(drainPending, nullptr) != 0) state.scheduled.store(false);
}

// ---- dtypes ----

// numpy's types and functions the conversions use, looked up once (and never destroyed).
struct Numpy {
  py::object bool_type, floating, generic, asarray, require;
};
const Numpy& numpy() {
  static const Numpy* cached = [] {
    py::module_ np = py::module_::import("numpy");
    return new Numpy{np.attr("bool_"), np.attr("floating"), np.attr("generic"), np.attr("asarray"), np.attr("require")};
  }();
  return *cached;
}

std::optional<DType> dtypeOf(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  const char order = dtype.byteorder();
  if (order == '>') return std::nullopt;  // a byte-swapped array (this host is little-endian)
  if (kind == 'f') {
    if (size == 4) return DType::Float32;
    if (size == 8) return DType::Float64;
    if (size == 2) return DType::Float16;
  } else if (kind == 'i') {
    if (size == 4) return DType::Int32;
    if (size == 8) return DType::Int64;
  } else if (kind == 'b' && size == 1) {
    return DType::Bool;
  }
  return std::nullopt;
}

const py::dtype& numpyDtype(DType dtype) {
  // float16..bool by DType; bfloat16 has no numpy dtype (fromValue widens it to float32).
  static const auto* table = [] {
    auto* dtypes = new std::vector<py::dtype>();
#define SVM_DTYPE_NUMPY(name, ctype, full, short_name, size) \
  dtypes->push_back(py::dtype(DType::name == DType::BFloat16 ? std::string("float32") : std::string(full)));
    SVM_DTYPES(SVM_DTYPE_NUMPY)
#undef SVM_DTYPE_NUMPY
    return dtypes;
  }();
  return (*table)[static_cast<std::size_t>(dtype)];
}

std::string typeName(py::handle object) {
  return py::str(py::type::handle_of(object).attr("__name__"));
}

Expected<Tensor> wrapArray(py::array array, const ParamInfo& param, std::string_view function) {
  const std::optional<DType> dtype = dtypeOf(array.dtype());
  if (!dtype) {
    return makeError(ErrorCode::DTypeMismatch,
                     "{}(): argument '{}' has numpy dtype {}, which ShapeVM does not support (float32, float16, "
                     "float64, int32, int64, bool; for bfloat16 hold a shapevm.Parameter or pass float32 and "
                     "ops.cast inside){}",
                     function, param.name, std::string(py::str(array.dtype())),
                     param.token.empty() ? "" : fmt::format("; the parameter is {}", param.token));
  }
  if (array.ndim() > kMaxRank) {
    return makeError(ErrorCode::ShapeMismatch, "{}(): argument '{}' has rank {}; ShapeVM tensors have at most {} dims",
                     function, param.name, array.ndim(), kMaxRank);
  }
  const auto item = static_cast<py::ssize_t>(dtypeSize(*dtype));
  bool expressible = true;
  for (py::ssize_t axis = 0; axis < array.ndim(); ++axis) {
    const py::ssize_t stride = array.strides(axis);
    if (array.shape(axis) > 1 && (stride < 0 || stride % item != 0)) expressible = false;
  }
  if (!expressible) array = py::array::ensure(array, py::array::c_style);  // the one copying case
  Shape shape;
  Shape strides;
  std::size_t extent = 0;
  bool empty = false;
  for (py::ssize_t axis = 0; axis < array.ndim(); ++axis) {
    const py::ssize_t size = array.shape(axis);
    const py::ssize_t stride = size > 1 ? array.strides(axis) / item : 0;
    shape.push_back(size);
    strides.push_back(stride);
    empty = empty || size == 0;
    extent += static_cast<std::size_t>((size - 1) * stride);
  }
  const std::size_t nbytes = empty ? 0 : (extent + 1) * static_cast<std::size_t>(item);
  PyObject* owner = array.inc_ref().ptr();  // released by releaseArray when the storage goes
  return Tensor::wrap(const_cast<void*>(array.data()), *dtype, shape, strides, nbytes, releaseArray, owner);
}

Expected<Value> scalarValue(py::handle object, const ParamInfo& param, std::string_view function) {
  auto given = [&] {
    return py::isinstance<py::array>(object)
               ? fmt::format("an array {}", std::string(py::str(object.attr("shape"))))
               : fmt::format("{} {}", typeName(object), std::string(py::repr(object)).substr(0, 40));
  };
  const bool is_bool = PyBool_Check(object.ptr()) || py::isinstance(object, numpy().bool_type);
  const bool is_int = !is_bool && !py::isinstance<py::array>(object) && PyIndex_Check(object.ptr());
  const bool is_float = PyFloat_Check(object.ptr()) || py::isinstance(object, numpy().floating);
  switch (param.kind) {
    case ValueKind::Bool:
      if (is_bool) return Value::fromBool(object.cast<bool>());
      break;
    case ValueKind::Int:
      if (is_int || is_bool)
        return Value::fromInt(py::cast<std::int64_t>(py::int_(py::reinterpret_borrow<py::object>(object))));
      break;
    case ValueKind::Float:
      if (is_float || is_int || is_bool)
        return Value::fromFloat(py::cast<double>(py::float_(py::reinterpret_borrow<py::object>(object))));
      break;
    default: break;
  }
  return makeError(ErrorCode::KindMismatch, "{}(): argument '{}' is a {} parameter, got {}", function, param.name,
                   valueKindName(param.kind), given());
}

// ---- arrays over ShapeVM storage ----

// The capsule name that marks a Module parameter's storage (ownParameter): ShapeVM-owned bytes
// behind a read-only array, so caches derived from them (packed weights) stay valid.
constexpr const char* kParameterCapsule = "shapevm.parameter";

// An ndarray over `tensor`'s elements whose base is a capsule owning the Tensor (named `name`,
// or unnamed for a result).
py::object arrayOver(Tensor tensor, bool writable, const char* name) {
  const int rank = tensor.rank();
  const auto item = static_cast<py::ssize_t>(tensor.itemSize());
  py::ssize_t dims[kMaxRank];
  py::ssize_t strides[kMaxRank];
  for (int axis = 0; axis < rank; ++axis) {
    dims[axis] = tensor.dim(axis);
    strides[axis] = tensor.stride(axis) * item;
  }
  const DType dtype = tensor.dtype();
  void* data = tensor.rawData();
  py::capsule owner(new Tensor(std::move(tensor)), name, [](PyObject* capsule) {
    delete static_cast<Tensor*>(PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule)));
  });
  auto& api = py::detail::npy_api::get();
  PyObject* array = api.PyArray_NewFromDescr_(api.PyArray_Type_, numpyDtype(dtype).inc_ref().ptr(), rank, dims, strides,
                                              data, writable ? py::detail::npy_api::NPY_ARRAY_WRITEABLE_ : 0,
                                              nullptr);  // steals the dtype reference
  if (array == nullptr) throw py::error_already_set();
  if (api.PyArray_SetBaseObject_(array, owner.release().ptr()) != 0) {  // steals the capsule
    Py_DECREF(array);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(array);
}

// The Tensor behind a Module parameter array, or a view of one (whose base is the parameter
// array: numpy stops collapsing bases at the capsule), else null.
const Tensor* parameterTensor(py::handle object) {
  PyObject* base = py::detail::array_proxy(object.ptr())->base;
  auto& api = py::detail::npy_api::get();
  while (base != nullptr && api.PyArray_Check_(base)) base = py::detail::array_proxy(base)->base;
  if (base == nullptr || !PyCapsule_IsValid(base, kParameterCapsule)) return nullptr;
  return static_cast<const Tensor*>(PyCapsule_GetPointer(base, kParameterCapsule));
}

// `array` (over a parameter's storage) as a view of `owned` without adopting it: same storage,
// so the JIT may cache what it derives (the bytes are read-only to Python). Null when the view
// is not expressible (another dtype, a misaligned offset).
std::optional<Tensor> parameterView(py::array array, const Tensor& owned, DType dtype) {
  if (dtype != owned.dtype()) return std::nullopt;
  const auto item = static_cast<std::ptrdiff_t>(owned.itemSize());
  const std::ptrdiff_t bytes =
      static_cast<const char*>(array.data()) - static_cast<const char*>(owned.storage()->data());
  if (bytes < 0 || bytes % item != 0) return std::nullopt;
  Shape shape;
  Shape strides;
  for (py::ssize_t axis = 0; axis < array.ndim(); ++axis) {
    if (array.strides(axis) % item != 0) return std::nullopt;
    shape.push_back(array.shape(axis));
    strides.push_back(array.shape(axis) > 1 ? array.strides(axis) / item : 0);
  }
  if (shape == owned.shape() && strides == owned.strides() && bytes / item == owned.offset()) return owned;
  Expected<Tensor> view = owned.asStrided(shape, strides, bytes / item);
  if (!view) return std::nullopt;
  return std::move(*view);
}

PyTypeObject* held_type = nullptr;  // shapevm.Parameter (setHeldTensorType)

// A Module parameter array (or a view of one) as a view of ShapeVM's Tensor; null otherwise.
std::optional<Tensor> ownedView(py::handle object) {
  const Tensor* owned = parameterTensor(object);
  if (owned == nullptr) return std::nullopt;
  py::array array = py::reinterpret_borrow<py::array>(object);
  const std::optional<DType> dtype = dtypeOf(array.dtype());
  if (!dtype) return std::nullopt;
  return parameterView(array, *owned, *dtype);
}
}  // namespace

void setErrorClasses(py::list run_classes, py::list compile_classes) {
  errorClasses(Phase::Run).clear();
  errorClasses(Phase::Compile).clear();
  for (py::handle c : run_classes) errorClasses(Phase::Run).push_back(py::reinterpret_borrow<py::object>(c));
  for (py::handle c : compile_classes) errorClasses(Phase::Compile).push_back(py::reinterpret_borrow<py::object>(c));
}

void raiseStatus(const Status& status, Phase phase) {
  const auto code = static_cast<std::size_t>(status.code());
  const std::vector<py::object>& classes = errorClasses(phase);
  if (code >= classes.size()) throw std::runtime_error(status.toString());  // the package did not register them
  py::object error = classes[code](py::str(status.message()), py::str(std::string(errorCodeName(status.code()))));
  PyErr_SetObject(classes[code].ptr(), error.ptr());
  throw py::error_already_set();
}

Expected<Value> toValue(py::handle object, const ParamInfo& param, std::string_view function) {
  if (param.kind != ValueKind::Tensor) return scalarValue(object, param, function);
  if (const Tensor* held = heldTensor(object)) return Value::fromTensor(*held);
  py::object candidate = py::reinterpret_borrow<py::object>(object);
  if (!py::isinstance<py::array>(candidate)) {
    if (!py::isinstance(candidate, numpy().generic)) {
      return makeError(ErrorCode::KindMismatch, "{}(): argument '{}' takes a numpy array{}, got {}", function,
                       param.name, param.token.empty() ? "" : " (" + param.token + ")", typeName(object));
    }
    candidate = numpy().asarray(candidate);  // a numpy scalar: a 0-d array (a copy of one element)
  }
  if (std::optional<Tensor> owned = ownedView(candidate)) return Value::fromTensor(std::move(*owned));
  SVM_ASSIGN_OR_RETURN(Tensor tensor, wrapArray(py::reinterpret_borrow<py::array>(candidate), param, function));
  return Value::fromTensor(std::move(tensor));
}

py::object fromValue(Value value) {
  switch (value.kind()) {
    case ValueKind::None: return py::none();
    case ValueKind::Int: return py::int_(value.asInt());
    case ValueKind::Float: return py::float_(value.asFloat());
    case ValueKind::Bool: return py::bool_(value.asBool());
    case ValueKind::Tuple: {
      py::tuple out(value.tuple().size());
      for (std::size_t i = 0; i < value.tuple().size(); ++i) out[i] = fromValue(value.tuple()[i]);
      return out;
    }
    case ValueKind::Tensor: break;
  }
  Tensor tensor = value.takeTensor();
  if (tensor.dtype() == DType::BFloat16) {  // numpy has no bfloat16: widen (exactly) to float32
    // Into ShapeVM's caching allocator, not a fresh numpy buffer: a bf16 cell's h' and c' (4 MB
    // each at seq 120) would otherwise fault in new pages on every call.
    Expected<Tensor> wide = Tensor::empty(DType::Float32, tensor.shape());
    if (!wide) raiseStatus(wide.status(), Phase::Run);
    const std::int64_t count = tensor.numel();
    if (tensor.isContiguous()) {  // the bits shifted (vectorizes: integers only)
      const std::uint16_t* bits = tensor.data<std::uint16_t>();
      auto* to = static_cast<std::uint32_t*>(wide->rawData());
      for (std::int64_t i = 0; i < count; ++i) to[i] = static_cast<std::uint32_t>(bits[i]) << 16;
    } else {
      float* to = wide->data<float>();
      for (std::int64_t i = 0; i < count; ++i) to[i] = static_cast<float>(tensor.elementAsDouble(i));
    }
    return arrayOver(std::move(*wide), true, nullptr);
  }
  // Writable when nothing else can see the bytes (a fresh result) or they are the caller's own
  // (a view of an argument array); read-only when ShapeVM shares them (a program constant).
  const bool writable = tensor.storage()->isExternal() || tensor.isSoleOwner();
  return arrayOver(std::move(tensor), writable, nullptr);
}

bool crossesOwned(py::handle object) {
  return py::isinstance<py::array>(object) && ownedView(object).has_value();
}

py::object ownParameter(py::handle object) {
  if (!py::isinstance<py::array>(object) || parameterTensor(object) != nullptr) {
    return py::reinterpret_borrow<py::object>(object);  // not an array, or already ShapeVM's own
  }
  py::array array = py::reinterpret_borrow<py::array>(object);
  const std::optional<DType> dtype = dtypeOf(array.dtype());
  if (!dtype || array.ndim() > kMaxRank) return array;   // calls reject it with the usual message
  return arrayOver(ownedCopy(array, *dtype), false, kParameterCapsule);
}

Tensor ownedCopy(py::array array, std::optional<DType> wanted) {
  const std::optional<DType> given = dtypeOf(array.dtype());
  if (!wanted && !given) {
    raiseStatus(makeError(ErrorCode::DTypeMismatch,
                          "numpy dtype {} is not a ShapeVM dtype (float32, float16, "
                          "float64, int32, int64, bool; bfloat16 by converting one of those)",
                          std::string(py::str(array.dtype()))),
                Phase::Run);
  }
  const DType dtype = wanted.value_or(given.value_or(DType::Float32));
  if (array.ndim() > kMaxRank) {
    raiseStatus(makeError(ErrorCode::ShapeMismatch, "a parameter has rank {}; ShapeVM tensors have at most {} dims",
                          array.ndim(), kMaxRank),
                Phase::Run);
  }
  const bool bf16 = dtype == DType::BFloat16;  // numpy has none: rounded from float32 below
  // Row-major, in the dtype numpy can hold (a copy only when the array is not that already).
  py::array source = numpy().require(array, bf16 ? py::dtype("float32") : numpyDtype(dtype), "C");
  Shape shape;
  for (py::ssize_t axis = 0; axis < source.ndim(); ++axis) shape.push_back(source.shape(axis));
  Expected<Tensor> tensor = Tensor::empty(dtype, shape);
  if (!tensor) raiseStatus(tensor.status(), Phase::Run);
  const auto count = static_cast<std::size_t>(tensor->numel());
  if (bf16) {
    const auto* from = static_cast<const float*>(source.data());
    auto* to = tensor->data<std::uint16_t>();
    for (std::size_t i = 0; i < count; ++i) to[i] = floatToBf16(from[i]);
  } else if (count > 0) {
    std::memcpy(tensor->rawData(), source.data(), count * tensor->itemSize());
  }
  return std::move(*tensor);
}

void setHeldTensorType(py::handle type) {
  held_type = reinterpret_cast<PyTypeObject*>(type.ptr());
}

const Tensor* heldTensor(py::handle object) {
  if (held_type == nullptr || Py_TYPE(object.ptr()) != held_type) return nullptr;
  auto* held = reinterpret_cast<py::detail::instance*>(object.ptr())->get_value_and_holder().value_ptr<HeldTensor>();
  return held == nullptr ? nullptr : &held->tensor;  // null: __init__ never ran
}

py::object holdValue(Value value) {
  if (value.kind() == ValueKind::Tuple) {
    py::tuple out(value.tuple().size());
    for (std::size_t i = 0; i < value.tuple().size(); ++i) out[i] = holdValue(value.tuple()[i]);
    return out;
  }
  if (value.kind() != ValueKind::Tensor) return fromValue(std::move(value));
  return py::cast(HeldTensor{value.takeTensor()});
}

py::object heldArray(const Tensor& tensor) {
  if (tensor.dtype() == DType::BFloat16) return fromValue(Value::fromTensor(tensor));  // widened: a copy
  return arrayOver(tensor, false, kParameterCapsule);  // read-only; crosses back as this tensor
}

void drainDeferredReleases() {
  Deferred& state = deferred();
  // Every call drains: without this check each would take the lock. A release racing with the
  // check is drained by the next call or by the pending call releaseArray scheduled.
  if (!state.pending.load(std::memory_order_acquire)) return;
  std::vector<PyObject*> objects;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.pending.store(false, std::memory_order_relaxed);
    if (state.objects.empty()) return;
    objects.swap(state.objects);
  }
  for (PyObject* object : objects) Py_DECREF(object);
}

void stopDeferredReleases() {
  deferred().stopped.store(true);
}

}  // namespace shapevm::python
