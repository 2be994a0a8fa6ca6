# A matmul whose inner dims differ fails at run time naming matmul, the shapes and the line.
# run: --fn f
# dims: n=2..4
# expect-runtime-error: matmul
# expect-runtime-error: line 11
from shapevm import ops, Tensor


def f(x: Tensor["n", 3], w: Tensor[4, 5]):
    y = ops.relu(x)
    return y @ w
