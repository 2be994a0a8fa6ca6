# softmax and log_softmax, default axis -1 and axis 0.
# run: --fn f
# dims: n=1..5
# expect: out0 shape (n, 6)
from shapevm import ops, Tensor


def f(x: Tensor["n", 6]):
    return ops.softmax(x), ops.softmax(x * 3.0, axis=0), ops.log_softmax(x), ops.log_softmax(x, axis=0)
