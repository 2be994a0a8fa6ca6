# identity and contiguous (as op and method) return the same values; contiguous of a transposed view.
# run: --fn f
# dims: n=1..4
# expect: out0 shape (n, 3)
# expect: out1 shape (3, n)
from shapevm import ops, Tensor


def f(x: Tensor["n", 3]):
    return ops.identity(x), ops.contiguous(x.T), x.T.contiguous() * 1.0
