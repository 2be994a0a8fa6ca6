# gather with an int64 index tensor (negative indices wrap) and with an int scalar (drops the axis).
# run: --fn f
# dims: k=1..6
# input: idx int64 -4..3
# expect: out0 shape (k, 5)
# expect: out1 shape (4, k)
# expect: out2 shape (5,)
from shapevm import ops, Tensor


def f(x: Tensor[4, 5], idx: Tensor["k"]):
    return ops.gather(x, idx), ops.gather(x, idx, axis=1), ops.gather(x, 2, axis=0)
