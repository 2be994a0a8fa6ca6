# pad numpy-style ((before, after), ...) per axis, with the default and an explicit value.
# run: --fn f
# dims: n=1..4
# expect: out0 shape (n + 1, 5)
# expect: out1 shape (n, 3)
from shapevm import ops, Tensor


def f(x: Tensor["n", 3]):
    return ops.pad(x, ((1, 0), (0, 2))), ops.pad(x, ((0, 0), (0, 0)), value=1.5)
