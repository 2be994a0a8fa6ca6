# A tensor index combined with another integer or tensor index is numpy advanced indexing
# (broadcast indices, axes moved to the front); ShapeVM rejects it instead of miscompiling.
# expect-compile-error: (numpy advanced indexing) is not supported
# expect-compile-error: line 10
from shapevm import ops, Tensor


def f(x: Tensor[4, 5, 6]):
    idx = ops.arange(3)
    return x[1, :, idx]
