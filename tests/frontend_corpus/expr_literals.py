# int, float, bool and None literals (None as an optional op argument), negative literals.
# run: --fn f
# expect: out0 shape (2, 3)
# expect: out1 value 12
# expect: out2 value True
from shapevm import ops, Tensor


def f(x: Tensor[2, 3]):
    y = ops.layer_norm(x, None, None)
    k = 3 * 4
    t = True
    z = y * -1.5 + 0.25 - 1e-3
    return z, k, t, False
