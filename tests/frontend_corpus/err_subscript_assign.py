# Assigning into a tensor element is outside the subset (tensors are values).
# expect-compile-error: not supported
# expect-compile-error: line 8
from shapevm import ops, Tensor


def f(x: Tensor[2, 3]):
    x[0] = 1.0
    return x
