# Generators (yield) are outside the subset.
# expect-compile-error: `yield` is not supported
# expect-compile-error: line 8
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    yield x
