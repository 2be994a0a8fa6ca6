# concat along axes 0 and -1; stack along a new middle axis.
# run: --fn f
# dims: n=1..4 m=1..4
# expect: out0 shape (n + m, 3)
# expect: out1 shape (n, 6)
# expect: out2 shape (n, 2, 3)
from shapevm import ops, Tensor


def f(a: Tensor["n", 3], b: Tensor["m", 3]):
    return ops.concat([a, b]), ops.concat([a, a * 2.0], axis=-1), ops.stack([a, -a], axis=1)
