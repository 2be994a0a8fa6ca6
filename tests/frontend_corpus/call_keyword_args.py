# Keyword arguments to ops and to a user function, in any order.
# run: --fn f
# dims: n=1..5
# expect: out0 shape (n, 1)
# expect: out1 shape (n, 4)
from shapevm import ops, Tensor


def blend(a, b, alpha: float):
    return a * alpha + b * (1.0 - alpha)


def f(x: Tensor["n", 4]):
    s = ops.sum(x, axis=1, keepdims=True)
    p = ops.softmax(x, axis=-1)
    q = blend(b=p, a=x, alpha=0.25)
    return s, q
