# The @ operator and ops.matmul with a dynamic batch dim and a 1-D operand.
# run: --fn f
# dims: b=1..5
# expect: out0 shape (b, 3)
# expect: out1 shape (b,)
from shapevm import ops, Tensor


def f(x: Tensor["b", 4], w: Tensor[4, 3], v: Tensor[4]):
    return x @ w, ops.matmul(x, v)
