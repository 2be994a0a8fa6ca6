# The same code on float16 inputs: dtype comes from the input, computed in float32, stored as float16.
# run: --fn f
# dims: n=1..4
# input: x float16
# input: w float16
# tol: rtol=1e-2 atol=1e-2 l2=5e-3
# expect: out0 dtype float16
# expect: out0 shape (n, 3)
from shapevm import ops, Tensor


def f(x: Tensor["n", 4], w: Tensor[4, 3]):
    return ops.tanh(x @ w) + ops.sigmoid(x).sum(axis=1, keepdims=True), ops.softmax(x)
