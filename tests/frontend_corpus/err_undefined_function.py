# Calling an unknown function is a compile error naming it.
# expect-compile-error: name `project` is not defined
# expect-compile-error: line 8
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    return project(x)
