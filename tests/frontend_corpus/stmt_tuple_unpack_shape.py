# Tuple unpacking of a shape (`batch, seq, _ = x.shape`) and scalar shape arithmetic.
# run: --fn f
# dims: batch=1..4 seq=1..6
# expect: out0 shape (batch * seq, 8)
# expect: out1 value batch * seq
# expect: out1 dtype int64
from shapevm import ops, Tensor


def f(x: Tensor["batch", "seq", 8]):
    batch, seq, _ = x.shape
    flat = x.reshape(batch * seq, 8)
    return flat, batch * seq
