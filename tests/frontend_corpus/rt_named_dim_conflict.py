# The same named dim in two parameters must have the same size: checked on entry, naming the dim.
# run: --fn f
# no-diff: the entry check of annotations is ShapeVM's; CPython ignores annotations
# dims: n=2..4
# input: y shape=(n+1,3)
# expect-runtime-error: (n)
# expect-runtime-error: parameter 'y'
from shapevm import ops, Tensor


def f(x: Tensor["n", 3], y: Tensor["n", 3]):
    return x + y[0]
