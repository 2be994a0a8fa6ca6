# logical_and / logical_or / logical_not on bool tensors, and where with a tensor and a scalar branch.
# run: --fn f
# dims: n=1..5
# expect: out3 shape (n, 4)
# expect: out3 dtype float32
from shapevm import ops, Tensor


def f(x: Tensor["n", 4], y: Tensor["n", 4]):
    a = x > 0.0
    b = y > 0.0
    both = ops.logical_and(a, b)
    either = ops.logical_or(a, b)
    neither = ops.logical_not(either)
    return both, either, neither, ops.where(both, x, -1.0)
