# Lists of tensors for concat and stack.
# run: --fn f
# dims: n=1..4
# expect: out0 shape (n, 7)
# expect: out1 shape (3, n, 3)
from shapevm import ops, Tensor


def f(a: Tensor["n", 3], b: Tensor["n", 4], c: Tensor["n", 3]):
    return ops.concat([a, b], axis=1), ops.stack([a, c, a * c])
