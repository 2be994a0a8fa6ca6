# argmax along an axis, with and without keepdims (int64 indices of the first maximum).
# run: --fn f
# dims: n=1..5
# input: x int64 -2..2
# expect: out0 dtype int64
# expect: out0 shape (4,)
# expect: out1 shape (n, 1)
from shapevm import ops, Tensor


def f(x: Tensor["n", 4]):
    return ops.argmax(x, 0), ops.argmax(x, axis=1, keepdims=True), ops.argmax(x.astype(ops.float32), -1)
