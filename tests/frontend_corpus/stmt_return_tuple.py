# Returning a tuple of tensors and scalars: outputs out0..out3 in return order.
# run: --fn f
# dims: n=1..5
# expect: outputs 4
# expect: out2 value n
# expect: out3 value 2.5
# expect: out3 dtype float64
from shapevm import ops, Tensor


def f(x: Tensor["n", 3]):
    return x.sum(axis=1), x.mean(axis=0), x.shape[0], 2.5
