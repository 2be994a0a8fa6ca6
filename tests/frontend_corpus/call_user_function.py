# Calls to other functions of the module, including one returning a tuple that is unpacked.
# run: --fn main
# dims: n=1..5
# expect: out0 shape (n, 3)
from shapevm import ops, Tensor


def scale(x, k: float):
    return x * k


def stats(x):
    return x.mean(axis=1, keepdims=True), x.max(axis=1, keepdims=True)


def main(x: Tensor["n", 3]):
    m, top = stats(x)
    y = scale(x - m, 2.0)
    return y / (top - m + 1.0)
