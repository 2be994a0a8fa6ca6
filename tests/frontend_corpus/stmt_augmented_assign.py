# Augmented assignment on tensors and scalars (+= -= *= /= and a broadcast +=); never in place.
# run: --fn f
# dims: n=1..5
# expect: out0 shape (n, 3)
# expect: out2 value 2 * n + 3 - 1
from shapevm import ops, Tensor


def f(x: Tensor["n", 3], b: Tensor[3]):
    y = x
    y += b
    y *= 2.0
    y -= x
    y /= 4.0
    k = x.shape[0]
    k *= 2
    k += 3
    k -= 1
    return y, x, k
