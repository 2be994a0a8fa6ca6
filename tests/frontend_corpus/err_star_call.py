# Star-unpacking in a call is outside the subset.
# expect-compile-error: not supported
# expect-compile-error: line 9
from shapevm import ops, Tensor


def f(x: Tensor[2, 3]):
    shape = x.shape
    return ops.zeros(*shape)
