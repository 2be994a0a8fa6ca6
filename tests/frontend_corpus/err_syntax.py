# A Python syntax error (an operator with no left operand) is a compile error with its line and column.
# expect-compile-error: line 8, col 13
from shapevm import ops, Tensor


def f(x: Tensor[2, 2]):
    y = x + 1.0
    z = y + * 2.0
    return z
