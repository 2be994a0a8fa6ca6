# while on a tensor condition: halve until the largest magnitude is below 1 (data-dependent trips).
# run: --fn f
# input: x -50.0..50.0
# expect: out0 shape (3, 3)
from shapevm import ops, Tensor


def f(x: Tensor[3, 3]):
    y = x
    steps = 0
    while ops.abs(y).max() >= 1.0:
        y = y * 0.5
        steps += 1
    return y, steps
