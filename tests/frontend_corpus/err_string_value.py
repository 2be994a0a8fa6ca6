# Strings are only allowed as assert messages and dim names, not as values.
# expect-compile-error: cannot hold this value
# expect-compile-error: line 8
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    name = "hello"
    return x
