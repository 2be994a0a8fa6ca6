# Splitting a dynamic axis into parts that do not divide it fails at run time with the line.
# run: --fn f
# dims: n=1..3
# expect-runtime-error: split
# expect-runtime-error: line 10
from shapevm import ops, Tensor


def f(x: Tensor["n", 5]):
    a, b = ops.split(x, 2, axis=1)
    return a
