# `with` is outside the subset.
# expect-compile-error: `with` is not supported
# expect-compile-error: line 8, col 5
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    with open("log.txt") as fh:
        pass
    return x
