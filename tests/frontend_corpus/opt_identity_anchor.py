# ops.identity is an anchor: it survives every optimization and blocks reshape merging across it.
# run: --fn f
# dims: n=1..4
# expect: out0 shape (n * 6,)
# expect-dis: /CallOp identity\b/
# expect-dis[--no-opt]: /CallOp identity\b/
# expect-dis-count: 2 /CallOp reshape\b/
from shapevm import ops, Tensor


def f(x: Tensor["n", 2, 3]):
    y = ops.identity(x.reshape(x.shape[0], 6))
    return y.reshape(-1)
