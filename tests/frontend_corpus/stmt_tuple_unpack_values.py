# Tuple packing and unpacking of tensors, swapping with `a, b = b, a`.
# run: --fn f
# expect: out0 shape (2, 3)
from shapevm import ops, Tensor


def f(x: Tensor[2, 3], y: Tensor[2, 3]):
    a, b = x, y
    a, b = b, a
    pair = (a * 2.0, b)
    p, q = pair
    return p - q, a
