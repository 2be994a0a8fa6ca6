# Importing any module but shapevm is a compile error.
# expect-compile-error: import
# expect-compile-error: os
# expect-compile-error: line 5
import os
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    return x
