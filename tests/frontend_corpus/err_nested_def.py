# A nested function definition is outside the subset.
# expect-compile-error: nested
# expect-compile-error: line 8, col 5
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    def inner(v):
        return v * 2.0
    return inner(x)
