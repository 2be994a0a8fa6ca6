# zeros / ones / full / arange with shapes from dynamic dims and explicit dtypes.
# run: --fn f
# dims: n=1..6
# expect: out0 shape (n, 2)
# expect: out1 dtype int32
# expect: out2 value [2.5] * n
# expect: out3 value list(range(n))
# expect: out3 dtype int64
from shapevm import ops, Tensor


def f(x: Tensor["n", 2]):
    n = x.shape[0]
    z = ops.zeros((n, 2)) + x
    o = ops.ones((2, n), dtype=ops.int32)
    c = ops.full((n,), 2.5, ops.float32)
    r = ops.arange(n)
    return z, o, c, r
