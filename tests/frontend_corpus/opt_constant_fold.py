# Optimization `fold`: scalar constant expressions fold (no scalar Add/Mul/Sub instructions remain).
# run: --fn f
# expect: out0 shape (2, 7)
# expect-dis-not: /^\s*(0x[0-9A-Fa-f]+:?\s*)?(Add|Mul|Sub)\b/
# expect-dis[--no-opt]: /\b(Add|Mul)\b/
from shapevm import ops, Tensor


def f(x: Tensor[2, 7]):
    k = 2 * 3 + 1
    m = k * 4 - 20
    return x * m + k
