# Shape arithmetic stays scalar: batch * seq is scalar math, never a tensor op, and 2 * 4 folds.
# run: --fn f
# dims: batch=1..4 seq=1..4
# expect: out0 shape (batch * seq, 8)
# expect-dis-not: /CallOp mul\b/
# expect-dis-not: /CallOp add\b/
from shapevm import ops, Tensor


def f(x: Tensor["batch", "seq", 8]):
    batch, seq, _ = x.shape
    return x.reshape(batch * seq, 2 * 4)
