# Integer indexing of tensors: x[i] (drops an axis), x[i, j], x[-1], and a loop variable index.
# run: --fn f
# dims: n=1..5
# expect: out0 shape (3,)
# expect: out1 shape ()
# expect: out3 shape (3,)
from shapevm import ops, Tensor


def f(x: Tensor["n", 3]):
    first = x[0]
    corner = x[0, 2]
    last = x[-1]
    acc = x[0] * 0.0
    for i in range(x.shape[0]):
        acc = acc + x[i]
    return first, corner, last, acc
