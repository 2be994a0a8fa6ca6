# Python scalar arithmetic: // floors, % takes the divisor's sign, / is true division, ** on ints.
# run: --fn f
# arg: a=-9..9 b=1..4
# expect: out0 value a // b
# expect: out1 value a % b
# expect: out2 value (-a) // b
# expect: out3 value (-a) % -b
# expect: out4 value a / b
# expect: out5 value b ** 3
from shapevm import ops, Tensor


def f(a: int, b: int):
    return a // b, a % b, (-a) // b, (-a) % -b, a / b, b ** 3, 7.5 // 2.0, -7.5 % 2.0
