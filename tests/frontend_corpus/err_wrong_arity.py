# Calling a user function with the wrong number of arguments is a compile error.
# expect-compile-error: `scale` takes 2 arguments, got 1
# expect-compile-error: line 12
from shapevm import ops, Tensor


def scale(x, k: float):
    return x * k


def f(x: Tensor[2]):
    return scale(x)
