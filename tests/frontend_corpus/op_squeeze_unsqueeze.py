# squeeze / unsqueeze as ops and methods, single and several axes, negative axes.
# run: --fn f
# dims: n=1..4
# expect: out0 shape (n, 3)
# expect: out1 shape (1, n, 1, 3)
# expect: out2 shape (n, 3, 1)
# expect: out3 shape (n, 3)
from shapevm import ops, Tensor


def f(x: Tensor["n", 1, 3]):
    s = ops.squeeze(x, 1)
    u = ops.unsqueeze(s, (0, 2))
    v = s.unsqueeze(-1)
    w = u.squeeze((0, 2))
    return s, u, v, w
