# An indentation error is a compile error with its line.
# expect-compile-error: line 8
from shapevm import ops, Tensor


def f(x: Tensor[2, 2]):
    y = x + 1.0
      return y
