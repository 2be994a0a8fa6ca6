# Optimization `addn`: a + b + c (3+ terms) becomes one add_n; --no-opt and --opt without addn keep adds.
# run: --fn f
# dims: n=1..5
# expect: out0 shape (n, 4)
# expect-dis: add_n
# expect-dis-count: 0 /CallOp add\b/
# expect-dis[--no-opt]: /CallOp add\b/
# expect-dis-not[--no-opt]: add_n
# expect-dis-not[--opt=dce,reshape,fold]: add_n
# expect-dis[--opt=addn]: add_n
from shapevm import ops, Tensor


def f(a: Tensor["n", 4], b: Tensor["n", 4], c: Tensor[4]):
    return a + b + c
