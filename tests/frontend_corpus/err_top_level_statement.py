# Executable statements at module level (other than imports, defs and classes) are rejected.
# expect-compile-error: module-level
# expect-compile-error: line 6
from shapevm import ops, Tensor

scale = ops.ones((2,))


def f(x: Tensor[2]):
    return x
