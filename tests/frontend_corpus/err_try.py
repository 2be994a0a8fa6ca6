# try/except is outside the subset.
# expect-compile-error: `try` is not supported
# expect-compile-error: line 8, col 5
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    try:
        y = x + 1.0
    except ValueError:
        y = x
    return y
