# SPDX-License-Identifier: Apache-2.0
# CPython side of the ShapeVM Python subset: `from shapevm import ops, Tensor` and
# `import shapevm.ops as ops` make a ShapeVM source file runnable under CPython with numpy.
# This package is a test oracle (tests/python/test_frontend_*.py), not a runtime.
from . import ops
from .ops import Tensor

__all__ = ["ops", "Tensor"]
