# Optimization `dce`: a computed but unused value (exp, and a dead loop-free branch value) disappears.
# run: --fn f
# dims: n=1..4
# expect: out0 shape (n, 2)
# expect-dis-not: /CallOp exp\b/
# expect-dis[--no-opt]: /CallOp exp\b/
# expect-dis-not[--opt=dce]: /CallOp exp\b/
from shapevm import ops, Tensor


def f(x: Tensor["n", 2]):
    unused = ops.exp(x)
    also_unused = unused * 2.0
    return ops.tanh(x)
