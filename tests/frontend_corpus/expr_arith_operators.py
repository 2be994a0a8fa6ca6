# Every arithmetic operator on tensors and scalars: + - * / ** @ and unary minus.
# run: --fn f
# input: y positive
# expect: outputs 6
# expect: out5 shape (2, 3)
from shapevm import ops, Tensor


def f(x: Tensor[2, 3], y: Tensor[2, 3], w: Tensor[3, 3]):
    a = x + y - 1.5
    b = 2.0 * x * y
    c = x / y
    d = y ** 2 + 3 ** 2
    e = -x
    g = x @ w
    return a, b, c, d, e, g
