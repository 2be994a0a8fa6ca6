# if/elif/else on an int scalar parameter.
# run: --fn f
# arg: mode=0..3
# expect: out0 shape (3,)
from shapevm import ops, Tensor


def f(x: Tensor[3], mode: int):
    if mode == 0:
        y = x + 1.0
    elif mode == 1:
        y = x * 2.0
    elif mode == 2:
        y = -x
    else:
        y = ops.exp(x)
    return y
