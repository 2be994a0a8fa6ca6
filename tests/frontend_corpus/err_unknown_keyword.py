# An unknown keyword argument to an op is a compile error naming it.
# expect-compile-error: has no argument `axes`
# expect-compile-error: line 8
from shapevm import ops, Tensor


def f(x: Tensor[2, 3]):
    return ops.sum(x, axes=1)
