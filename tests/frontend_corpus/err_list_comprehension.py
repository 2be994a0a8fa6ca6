# A list comprehension is outside the subset.
# expect-compile-error: comprehension
# expect-compile-error: line 8, col 13
from shapevm import ops, Tensor


def f(x: Tensor[4, 2]):
    parts = [x[i] for i in range(4)]
    return ops.stack(parts)
