# Comparison ops: equal not_equal less less_equal greater greater_equal (bool outputs).
# run: --fn f
# input: x int32 -2..2
# input: y int32 -2..2
# expect: out0 dtype bool
# expect: out5 shape (2, 5)
from shapevm import ops, Tensor


def f(x: Tensor[2, 5], y: Tensor[5]):
    return (ops.equal(x, y), ops.not_equal(x, y), ops.less(x, y), ops.less_equal(x, 0),
            ops.greater(x, y), ops.greater_equal(x, y))
