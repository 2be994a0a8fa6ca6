# Four-term sum with broadcasting (lowered to add_n) matches the sequential sum.
# run: --fn f
# dims: n=1..4
# expect: out0 shape (n, 3)
# expect-dis: add_n
from shapevm import ops, Tensor


def f(a: Tensor["n", 3], b: Tensor[3], c: Tensor["n", 1], d: Tensor["n", 3]):
    return a + b + c + d
