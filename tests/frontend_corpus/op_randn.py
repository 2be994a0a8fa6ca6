# randn(shape, seed): ShapeVM's mt19937_64 + Box-Muller, reproduced bit-exactly by the oracle.
# run: --fn f
# dims: n=1..6
# expect: out0 shape (n, 3)
# expect: out1 shape (5,)
from shapevm import ops, Tensor


def f(x: Tensor["n", 3]):
    noise = ops.randn((x.shape[0], 3), seed=7)
    return x + noise * 0.1, ops.randn((5,))
