# Reductions on int32 tensors: sums come out int64, means float32, max/min keep int32.
# run: --fn f
# input: x int32 -9..9
# expect: out0 dtype int64
# expect: out1 dtype float32
# expect: out2 dtype int32
from shapevm import ops, Tensor


def f(x: Tensor[3, None]):
    return x.sum(axis=0), x.mean(axis=1), x.max(axis=1), ops.argmax(x, 1)
