# split into equal sections (tuple unpacking) and by sizes, along different axes.
# run: --fn f
# dims: n=1..4
# expect: out0 shape (n, 2)
# expect: out4 shape (n, 1)
# expect: out6 shape (n, 5)
from shapevm import ops, Tensor


def f(x: Tensor["n", 8]):
    i, f_, g, o = ops.split(x, 4, axis=1)
    parts = ops.split(x, [1, 2, 5], axis=-1)
    a, b, c = parts
    return i, f_, g, o, a, b, c
