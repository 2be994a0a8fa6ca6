# layer_norm with weight and bias as function inputs, without affine (None, None), and eps by keyword.
# run: --fn f
# dims: n=1..5
# expect: out0 shape (n, 8)
from shapevm import ops, Tensor


def f(x: Tensor["n", 8], gamma: Tensor[8], beta: Tensor[8]):
    return (ops.layer_norm(x, gamma, beta), ops.layer_norm(x, None, None),
            ops.layer_norm(x * 2.0 + 1.0, gamma, None, eps=1e-3))
