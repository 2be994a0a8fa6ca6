# cast / .astype between dtypes: float -> int truncates toward zero, -> bool is != 0, int -> float.
# run: --fn f
# input: x -5.0..5.0
# expect: out0 dtype int32
# expect: out1 dtype int64
# expect: out2 dtype bool
# expect: out3 dtype float64
# expect: out4 dtype float16
# expect: out5 dtype float32
from shapevm import ops, Tensor


def f(x: Tensor[3, 4]):
    i = ops.cast(x, ops.int32)
    j = x.astype(ops.int64)
    b = ops.cast(i, ops.bool)
    d = x.astype(ops.float64)
    h = ops.cast(x, ops.float16)
    back = i.astype(ops.float32) + 0.5
    return i, j, b, d, h, back
