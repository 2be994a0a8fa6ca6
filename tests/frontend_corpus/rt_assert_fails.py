# A failing assert is a runtime error carrying its message and the assert's line.
# run: --fn f
# dims: n=1..5
# expect-runtime-error: AssertionFailed
# expect-runtime-error: batch must exceed 100
# expect-runtime-error: line 11
from shapevm import ops, Tensor


def f(x: Tensor["n", 2]):
    assert x.shape[0] > 100, "batch must exceed 100"
    return x
