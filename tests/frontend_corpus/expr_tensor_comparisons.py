# Comparison operators on tensors give bool tensors (< <= > >= == !=), also against scalars.
# run: --fn f
# input: x int64 -2..2
# input: y int64 -2..2
# expect: out0 dtype bool
from shapevm import ops, Tensor


def f(x: Tensor[3, 4], y: Tensor[3, 4]):
    return x < y, x <= y, x > 0, x >= y, x == y, x != 1
