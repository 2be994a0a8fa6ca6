# Adding tensors whose shapes do not broadcast fails at run time with ShapeMismatch and the line.
# run: --fn f
# expect-runtime-error: ShapeMismatch
# expect-runtime-error: line 10
from shapevm import ops, Tensor


def f(x: Tensor[None, 4], y: Tensor[None, 5]):
    z = x * 2.0
    return z + y
