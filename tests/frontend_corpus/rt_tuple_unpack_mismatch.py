# Unpacking a shape into the wrong number of names fails (the rank is only known at run time).
# xfail: KNOWN_ISSUES.md #4: dce deletes a TupleUnpack whose targets are unused, so a failing unpack runs silently
# run: --fn f
# input: x shape=(2,3,4)
# expect-runtime-error: line 9
from shapevm import ops, Tensor


def f(x: Tensor):
    a, b = x.shape
    return x
