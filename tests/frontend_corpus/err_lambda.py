# lambda is outside the subset: a compile error naming it, with line and column.
# expect-compile-error: `lambda` is not supported
# expect-compile-error: line 9, col 9
from shapevm import ops, Tensor


def f(x: Tensor[2, 2]):
    g = 2
    h = lambda v: v * 2.0
    return h(x)
