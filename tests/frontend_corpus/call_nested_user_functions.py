# A chain of user functions (f -> g -> h) and a function called twice inside a loop.
# run: --fn f
# arg: n=1..4
# expect: out0 shape (2, 2)
from shapevm import ops, Tensor


def h(x):
    return ops.tanh(x)


def g(x, y):
    return h(x) + h(y)


def f(x: Tensor[2, 2], n: int):
    y = x
    for i in range(n):
        y = g(y, x) * 0.5
    return y
