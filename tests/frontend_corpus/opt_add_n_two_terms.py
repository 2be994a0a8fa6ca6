# Two terms stay a plain add (add_n is for 3 or more terms).
# run: --fn f
# expect: out0 shape (2, 2)
# expect-dis: /CallOp add\b/
# expect-dis-not: add_n
from shapevm import ops, Tensor


def f(a: Tensor[2, 2], b: Tensor[2, 2]):
    return a + b
