# Optimization `reshape`: consecutive reshapes merge into one; --no-opt keeps all three.
# run: --fn f
# dims: a=1..4 b=1..4
# expect: out0 shape (a * b * 6,)
# expect-dis-count: 1 /CallOp reshape\b/
# expect-dis-count[--no-opt]: 3 /CallOp reshape\b/
# expect-dis-count[--opt=dce,addn,fold]: 3 /CallOp reshape\b/
from shapevm import ops, Tensor


def f(x: Tensor["a", "b", 6]):
    a, b, c = x.shape
    y = x.reshape(a * b, c)
    z = y.reshape(a * b * 2, 3)
    return z.reshape(-1)
