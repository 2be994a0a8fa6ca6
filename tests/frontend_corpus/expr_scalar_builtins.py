# The scalar builtins int() float() bool() min() max() abs() len() on shapes and scalars.
# run: --fn f
# dims: a=1..5 b=1..5
# arg: s=-3.0..3.0
# expect: out0 value min(a, b)
# expect: out1 value max(a, b) + 1
# expect: out3 value 2
# expect: out4 dtype bool
from shapevm import ops, Tensor


def f(x: Tensor["a", "b"], s: float):
    lo = min(x.shape[0], x.shape[1])
    hi = max(x.shape[0], x.shape[1]) + 1
    t = int(s) + abs(s) + float(lo)
    rank = len(x.shape)
    flag = bool(lo) and not bool(0)
    return lo, hi, t, rank, flag, abs(-lo)
