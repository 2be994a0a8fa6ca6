# Calling an op with too many arguments is a compile error naming the op.
# expect-compile-error: tanh
# expect-compile-error: line 8
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    return ops.tanh(x, x)
