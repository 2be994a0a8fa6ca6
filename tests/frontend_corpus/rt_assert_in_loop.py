# An assert that fails on some loop iteration reports its message and line.
# run: --fn f
# dims: n=2..5
# expect-runtime-error: row index too large
# expect-runtime-error: line 11
from shapevm import ops, Tensor


def f(x: Tensor["n", 2]):
    for i in range(x.shape[0]):
        assert i < 1, "row index too large"
    return x
