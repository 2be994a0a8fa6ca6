# --fn naming a function that does not exist fails cleanly, listing the functions.
# run: --fn nope
# expect-compile-error: nope
from shapevm import ops, Tensor


def f(x: Tensor[2]):
    return x
