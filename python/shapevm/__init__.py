# SPDX-License-Identifier: Apache-2.0
# The `shapevm` package. `shapevm.ops` / `shapevm.Tensor` are the numpy-backed CPython side of the
# ShapeVM Python subset (an undecorated function runs on them; the tests' oracle). With the
# native extension (_core, built into build/python/shapevm) the package is also the runtime:
# @shapevm.jit, shapevm.Module, shapevm.load, set_context/get_context and the error classes
# (docs/python.md). The source tree's python/ copy has no extension: only the oracle works there.
from . import ops
from .ops import Tensor

try:
    from . import _core
except ImportError as _err:  # the source tree's copy, or a build without SHAPEVM_BUILD_PYTHON
    _core = None
    _core_error = _err
    __all__ = ["ops", "Tensor"]

    def __getattr__(name):
        raise AttributeError(f"shapevm.{name} needs the native extension shapevm._core, which this copy of the "
                             f"package ({__path__[0]}) lacks ({_core_error}); use the built package: "
                             "PYTHONPATH=build/python")
else:
    from . import errors as _errors
    from .errors import CompileError, Error
    from .runtime import (JitFunction, LoadedModule, Module, Parameter, export_cache, get_context, import_cache, jit,
                          load, set_context)

    globals().update(_errors.CLASSES)  # ShapeError, DTypeError, VerifyError, LimitExceeded, ...
    __all__ = ["ops", "Tensor", "jit", "Module", "load", "set_context", "get_context", "Error", "CompileError",
               "JitFunction", "LoadedModule", "Parameter", "export_cache", "import_cache", *_errors.CLASSES]
