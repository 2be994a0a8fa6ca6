# Mixed dtypes promote by category: int32 + float32 -> float32, float16 + float32 -> float32.
# run: --fn f
# input: i int32 -5..5
# input: h float16
# expect: out0 dtype float32
# expect: out1 dtype float32
# expect: out2 dtype int32
from shapevm import ops, Tensor


def f(i: Tensor[2, 3], x: Tensor[2, 3], h: Tensor[2, 3]):
    return i + x, h * x, i * 2
