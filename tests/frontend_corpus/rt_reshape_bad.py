# A reshape to an incompatible size fails at run time with the line.
# run: --fn f
# dims: n=1..4
# expect-runtime-error: reshape
# expect-runtime-error: line 10
from shapevm import ops, Tensor


def f(x: Tensor["n", 3]):
    return x.reshape(x.shape[0] * 3 + 1)
