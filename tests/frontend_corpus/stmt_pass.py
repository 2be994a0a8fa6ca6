# pass in a branch and in a loop body.
# run: --fn f
# arg: n=0..3
# expect: out0 shape (2,)
from shapevm import ops, Tensor


def f(x: Tensor[2], n: int):
    if n > 1:
        pass
    else:
        x = x + 1.0
    for i in range(n):
        pass
    return x
