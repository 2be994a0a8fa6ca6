# Reading a name that is never assigned is a compile error naming it.
# expect-compile-error: name `bias` is not defined
# expect-compile-error: line 8, col 16
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    return x + bias
