# resize (nearest, linear, cubic), pixel shuffles, reflect/edge pad and the instance/group norms.
# run: --fn f
# dims: n=1..2 h=2..5 w=2..5
# expect: out0 shape (n, 8, 2 * h, 2 * w)
# expect: out1 shape (n, 8, 7, 3)
# expect: out3 shape (n, 2, 2 * h, 2 * w)
# expect: out5 shape (n, 8, h + 3, w + 2)
from shapevm import ops, Tensor


def f(x: Tensor["n", 8, "h", "w"], gamma: Tensor[8], beta: Tensor[8]):
    near = ops.resize(x, (2 * x.shape[2], 2 * x.shape[3]))
    lin = ops.resize(x, (7, 3), None, 1, 3)
    cub = ops.resize(x, (6, 6), None, 2, 2)
    d2s = ops.depth_to_space(x, 2, 1)
    s2d = ops.space_to_depth(d2s, 2)
    refl = ops.pad(x, ((0, 0), (0, 0), (1, 2), (1, 1)), mode=2)
    return near, lin, cub, d2s, s2d, refl, ops.instance_norm(x, gamma, beta), ops.group_norm(x, gamma, beta, groups=4)
