# float64 inputs stay float64 through arithmetic, matmul and reductions.
# run: --fn f
# dims: n=1..5
# input: x float64
# input: w float64
# expect: out0 dtype float64
from shapevm import ops, Tensor


def f(x: Tensor["n", 3], w: Tensor[3, 3]):
    return ops.exp(x @ w * 0.1).mean(axis=0) + 1.0
