# Shape tuples: x.shape[1], x.shape[-1], len(x.shape), shape math driving a reshape.
# run: --fn f
# dims: a=1..4 b=1..4 c=1..4
# expect: out0 shape (a * b, c)
# expect: out1 value c
# expect: out2 value 3
from shapevm import ops, Tensor


def f(x: Tensor["a", "b", "c"]):
    rows = x.shape[0] * x.shape[1]
    y = x.reshape(rows, x.shape[-1])
    return y, x.shape[-1], len(x.shape)
