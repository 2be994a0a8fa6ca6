# while with a scalar condition and a dynamic trip count.
# run: --fn f
# dims: n=1..6
# expect: out0 shape (n, 2)
from shapevm import ops, Tensor


def f(x: Tensor["n", 2]):
    i = 0
    y = x
    while i < x.shape[0]:
        y = y * 0.5 + x
        i = i + 1
    return y
