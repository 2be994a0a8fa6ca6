# `from numpy import ...` is not the shapevm namespace: a compile error.
# expect-compile-error: numpy
# expect-compile-error: line 4
from numpy import exp
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    return exp(x)
