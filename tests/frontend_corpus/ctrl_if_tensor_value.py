# Control flow on tensor values: `if x.sum() > 0:` branches on data; a nested tensor condition.
# run: --fn f
# runs: 4
# expect: out0 shape (n, 2)
from shapevm import ops, Tensor


def f(x: Tensor["n", 2]):
    if x.sum() > 0:
        y = x * 10.0
    else:
        y = x - 10.0
    if x.max() > 1.0:
        if x.shape[0] > 1:
            y = y + 1.0
    elif ops.logical_and(x.min() < 0.0, x.max() > -0.5):
        y = y - 1.0
    return y
