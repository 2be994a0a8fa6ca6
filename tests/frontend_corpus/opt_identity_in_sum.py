# An identity inside a 3-term sum survives add_n lowering.
# run: --fn f
# expect: out0 shape (2, 3)
# expect-dis: /CallOp identity\b/
# expect-dis: add_n
from shapevm import ops, Tensor


def f(a: Tensor[2, 3], b: Tensor[2, 3], c: Tensor[2, 3]):
    return a + ops.identity(b) + c
