# A loop whose trip count is a dynamic dim: for i in range(x.shape[0]) summing rows.
# run: --fn f
# dims: n=1..7
# expect: out0 shape (4,)
from shapevm import ops, Tensor


def f(x: Tensor["n", 4]):
    acc = ops.zeros((4,))
    for i in range(x.shape[0]):
        acc = acc + x[i] * (i + 1)
    return acc
