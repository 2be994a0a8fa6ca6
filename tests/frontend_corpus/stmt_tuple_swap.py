# Parallel assignment: `a, b = b, a` swaps (the right side is evaluated before any name is bound).
# run: --fn f
# expect: out0 shape (2, 3)
from shapevm import ops, Tensor


def f(x: Tensor[2, 3], y: Tensor[2, 3], n: int):
    a, b = x, y
    a, b = b, a
    i, j = n, n + 1
    i, j = j, i
    return a, b, i - j
