# Tuple packing into a variable and unpacking it again: the items keep their tensor kind.
# xfail: KNOWN_ISSUES.md #3: tensors unpacked from a tuple variable are typed as scalars (scalar Sub on f32 tensors)
# run: --fn f
# expect: out0 shape (2, 3)
from shapevm import ops, Tensor


def f(x: Tensor[2, 3], y: Tensor[2, 3]):
    pair = (x * 2.0, y)
    p, q = pair
    return p - q, q
