# broadcast_to a shape built from a dynamic dim.
# run: --fn f
# dims: n=1..5
# expect: out0 shape (n, 2, 3)
from shapevm import ops, Tensor


def f(b: Tensor[2, 3], x: Tensor["n"]):
    y = ops.broadcast_to(b, (x.shape[0], 2, 3))
    return y + 0.0
