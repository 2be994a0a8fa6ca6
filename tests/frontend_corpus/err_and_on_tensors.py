# `and`/`or` are for scalars; on tensor values they are a compile error pointing at ops.logical_and.
# expect-compile-error: `and` on tensors is not supported
# expect-compile-error: ops.logical_and
# expect-compile-error: line 9, col 8
from shapevm import ops, Tensor


def f(x: Tensor[None, 2]):
    if x.max() > 1.0 and x.min() < 0.0:
        return x
    return -x
