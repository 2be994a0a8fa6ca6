# Unary ops: neg abs exp log sqrt rsqrt sigmoid tanh relu gelu erf silu.
# run: --fn f
# dims: n=1..4
# input: p positive
# expect: outputs 12
# expect: out11 shape (n, 3)
from shapevm import ops, Tensor


def f(x: Tensor["n", 3], p: Tensor["n", 3]):
    return (ops.neg(x), ops.abs(x), ops.exp(x), ops.log(p), ops.sqrt(p), ops.rsqrt(p), ops.sigmoid(x),
            ops.tanh(x), ops.relu(x), ops.gelu(x), ops.erf(x), ops.silu(x))
