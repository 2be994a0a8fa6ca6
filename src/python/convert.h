// SPDX-License-Identifier: Apache-2.0
// numpy <-> ShapeVM values for the Python module (module.cc): an argument array is wrapped without
// a copy (Tensor::wrap holding a reference to the array), except a Module parameter, which
// ShapeVM owns (ownParameter); an output tensor becomes an array over
// ShapeVM's storage whose base is a capsule owning the Tensor. Invariant: Python objects are only
// touched with the GIL held; an array released on a thread without it is decref'd later, on a
// thread that holds it (a pending call, or the next return to Python).
#pragma once

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

// Decrefs arrays whose wrapped tensors were released on threads without the GIL (GIL held).
void drainDeferredReleases();
// At interpreter exit: from now on a release without the GIL leaks the reference instead of
// scheduling a pending call on a finalizing interpreter.
void stopDeferredReleases();

}  // namespace shapevm::python
