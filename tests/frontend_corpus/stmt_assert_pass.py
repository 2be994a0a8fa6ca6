# assert with and without a message, on scalars and on a tensor value; all pass.
# run: --fn f
# dims: n=1..5
# input: x positive
# expect: out0 shape (n, 2)
from shapevm import ops, Tensor


def f(x: Tensor["n", 2]):
    n, k = x.shape
    assert k == 2
    assert n >= 1, "need at least one row"
    assert x.min() > 0.0, "inputs must be positive"
    return ops.log(x)
