# sum / mean / max / min over all axes, one axis, a tuple of axes, keepdims; ops and methods.
# run: --fn f
# dims: a=1..4 b=1..4
# expect: out0 shape ()
# expect: out1 shape (a, 1, 3)
# expect: out2 shape (b,)
# expect: out3 shape (1, 1, 1)
from shapevm import ops, Tensor


def f(x: Tensor["a", "b", 3]):
    return (ops.sum(x), ops.mean(x, axis=1, keepdims=True), ops.max(x, axis=(0, 2)), x.min(keepdims=True),
            x.sum(axis=-1), x.mean(), x.max(axis=0), ops.min(x, 2))
