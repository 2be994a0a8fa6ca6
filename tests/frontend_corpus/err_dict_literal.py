# Dict literals are outside the subset.
# expect-compile-error: not supported
# expect-compile-error: line 8
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    d = {"a": x}
    return x
