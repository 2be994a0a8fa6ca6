# *args parameters are outside the subset.
# expect-compile-error: *args
# expect-compile-error: line 7
from shapevm import ops, Tensor


def f(*xs):
    return xs[0]
