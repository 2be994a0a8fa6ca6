# bfloat16 via casts inside the program (.npz has no bfloat16); results cast back to float32.
# run: --fn f
# dims: n=1..4
# tol: rtol=2e-2 atol=2e-2 l2=1e-2
# expect: out0 dtype float32
# expect: out0 shape (n, 3)
from shapevm import ops, Tensor


def f(x: Tensor["n", 4], w: Tensor[4, 3]):
    xb = x.astype(ops.bfloat16)
    wb = ops.cast(w, ops.bfloat16)
    y = ops.relu(xb @ wb) * 0.5 + 1.0
    return y.astype(ops.float32), ops.cast(xb, ops.float32)
