# Tuple packing into a variable and unpacking it again: the items keep their tensor kind.
# run: --fn f
# expect: out0 shape (2, 3)
from shapevm import ops, Tensor


def f(x: Tensor[2, 3], y: Tensor[2, 3]):
    pair = (x * 2.0, y)
    p, q = pair
    return p - q, q
