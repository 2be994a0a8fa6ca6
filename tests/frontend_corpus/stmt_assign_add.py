# Plain assignment and a tensor + tensor with a shared named dim.
# run: --fn f
# dims: n=1..6
# expect: out0 shape (n, 4)
# expect: out0 dtype float32
from shapevm import ops, Tensor


def f(x: Tensor["n", 4], y: Tensor["n", 4]):
    z = x + y
    return z
