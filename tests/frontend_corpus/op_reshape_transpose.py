# reshape (ops and method, tuple and varargs, -1), transpose with a perm, .T and .transpose().
# run: --fn f
# dims: a=1..4
# expect: out0 shape (a * 6,)
# expect: out1 shape (2, a, 3)
# expect: out2 shape (3, 2 * a)
# expect: out3 shape (3, 2, a)
from shapevm import ops, Tensor


def f(x: Tensor["a", 2, 3]):
    flat = ops.reshape(x, (-1,))
    p = ops.transpose(x, (1, 0, 2))
    m = x.reshape(x.shape[0] * 2, 3).T
    r = x.transpose()
    q = x.reshape((2, -1)).transpose(1, 0)
    return flat, p, m, r, q
