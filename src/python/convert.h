// SPDX-License-Identifier: Apache-2.0
// numpy <-> ShapeVM values for the Python module (module.cc): an argument array is wrapped without
// a copy (Tensor::wrap holding a reference to the array), except a Module parameter, which
// ShapeVM owns (ownParameter); an output tensor becomes an array over
// ShapeVM's storage whose base is a capsule owning the Tensor. Invariant: Python objects are only
// touched with the GIL held; an array released on a thread without it is decref'd later, on a
// thread that holds it (a pending call, or the next return to Python).
#pragma once

#include <optional>
#include <string_view>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "shapevm/shapevm.h"

namespace shapevm::python {

namespace py = pybind11;

// Where a Status came from: loading/compiling a program (CompileError and the code's class) or
// running one (the code's class).
enum class Phase { Compile, Run };

// The Python classes for each ErrorCode (indexed by code), built by shapevm/__init__.py from the
// error table (`_core.error_table()`).
void setErrorClasses(py::list run_classes, py::list compile_classes);
// Raises the Python exception for a failed Status.
[[noreturn]] void raiseStatus(const Status& status, Phase phase);

// One argument for `param` of `function`; errors name both and say what was given.
Expected<Value> toValue(py::handle object, const ParamInfo& param, std::string_view function);
// An output as Python: an ndarray (no copy; bfloat16 widens to float32), int, float, bool, tuple.
py::object fromValue(Value value);

// A Module parameter (docs/python.md): a numpy array of a supported dtype is copied once into
// ShapeVM-owned storage and comes back as a READ-ONLY array over it (its base a capsule holding
// the Tensor). Passed to a call, such an array (or a view of it) crosses as that Tensor, not as
// adopted memory, so the JIT may cache what it derives from it (packed weights). Anything else
// (non-arrays, unsupported dtypes, arrays already ShapeVM's own) is returned unchanged.
py::object ownParameter(py::handle object);
// Whether `object` would cross into a call as ShapeVM-owned storage (tests).
bool crossesOwned(py::handle object);

// shapevm.Parameter: a ShapeVM-owned tensor that Python holds but cannot write (any dtype,
// bfloat16 included). It crosses into a call as that very Tensor, so the JIT may keep what it
// derives from it (packed weights). A Module's derived parameters (docs/python.md) are these.
struct HeldTensor {
  Tensor tensor;
};
// Registers the Python class of HeldTensor (module init); heldTensor/holdValue need it.
void setHeldTensorType(py::handle type);
// The Tensor of a shapevm.Parameter, else null (a type check: cheap on every argument).
const Tensor* heldTensor(py::handle object);
// A copy of `array` in ShapeVM-owned, row-major storage, converted to `dtype` (any DType:
// bfloat16 rounds to nearest even from float32; nullopt: the array's own, which must be one).
Tensor ownedCopy(py::array array, std::optional<DType> dtype);
// An output kept in ShapeVM's form: a tensor becomes a shapevm.Parameter (no copy, bfloat16
// stays bfloat16), a tuple a tuple of those; scalars as fromValue.
py::object holdValue(Value value);
// A read-only numpy array over a held tensor's storage (bfloat16: a float32 copy).
py::object heldArray(const Tensor& tensor);

// Decrefs arrays whose wrapped tensors were released on threads without the GIL (GIL held).
void drainDeferredReleases();
// At interpreter exit: from now on a release without the GIL leaks the reference instead of
// scheduling a pending call on a finalizing interpreter.
void stopDeferredReleases();

}  // namespace shapevm::python
