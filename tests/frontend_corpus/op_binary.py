# Binary ops with broadcasting: add sub mul div pow maximum minimum, tensor and scalar operands.
# run: --fn f
# dims: n=1..4
# input: p positive
# expect: out0 shape (n, 3)
from shapevm import ops, Tensor


def f(x: Tensor["n", 3], y: Tensor[3], p: Tensor["n", 3]):
    return (ops.add(x, y), ops.sub(x, 2.0), ops.mul(3.0, y), ops.div(x, p), ops.pow(p, y),
            ops.maximum(x, y), ops.minimum(x, 0.0))
