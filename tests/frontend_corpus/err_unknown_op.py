# An op that is not in the ops namespace is a compile error naming it.
# expect-compile-error: fft
# expect-compile-error: line 8
from shapevm import ops, Tensor


def f(x: Tensor[4]):
    return ops.fft(x)
