# and / or / not and comparisons on scalars (== != < <= > >=), short-circuit safe.
# run: --fn f
# arg: a=0..4 b=0..4 flag=0..1
# expect: out0 value (a < b) and not (a == 0)
# expect: out1 value (a >= b) or (b != 2)
# expect: out2 value not ((a <= b) and (a > 1))
from shapevm import ops, Tensor


def f(a: int, b: int, flag: bool):
    p = a < b and not a == 0
    q = a >= b or b != 2
    r = not (a <= b and a > 1)
    s = flag or a == b
    return p, q, r, s
