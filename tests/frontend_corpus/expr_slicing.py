# Slicing tensors: x[:, 0:5], open ends, negative indices, steps, and a negative step.
# run: --fn f
# dims: n=2..6
# expect: out0 shape (n, 5)
# expect: out1 shape (n - 1, 8)
# expect: out4 shape (n, 4)
from shapevm import ops, Tensor


def f(x: Tensor["n", 8]):
    a = x[:, 0:5]
    b = x[1:]
    c = x[:, -3:]
    d = x[::-1, ::2]
    e = x[:, 1::2]
    g = x[-2:, -1]
    return a, b, c, d, e, g
