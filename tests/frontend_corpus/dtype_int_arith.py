# int64 tensors: + - * keep int64, tensor / truncates toward zero (ONNX Div), + 0.5 promotes to float32.
# run: --fn f
# input: x int64 -20..20
# input: y int64 1..5
# expect: out0 dtype int64
# expect: out2 dtype int64
# expect: out3 dtype float32
from shapevm import ops, Tensor


def f(x: Tensor[4, 3], y: Tensor[3]):
    return x + y * 2 - 1, -x, x / y, x + 0.5, ops.abs(x)
