# Unpacking a shape into the wrong number of names fails (the rank is only known at run time).
# run: --fn f
# input: x shape=(2,3,4)
# expect-runtime-error: line 9
from shapevm import ops, Tensor


def f(x: Tensor):
    a, b = x.shape
    return x
