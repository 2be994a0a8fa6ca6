# `global` is outside the subset.
# expect-compile-error: `global` is not supported
# expect-compile-error: line 10, col 5
from shapevm import ops, Tensor

counter = 0


def f(x: Tensor[2]):
    global counter
    return x
