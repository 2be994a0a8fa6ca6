# conv (strided, padded, grouped), conv_transpose, max_pool/avg_pool and the global pools on a
# dynamic batch and image size.
# run: --fn f
# dims: n=1..3 h=5..9 w=5..9
# input: var positive
# expect: out0 shape (n, 6, (h + 1) // 2, (w + 1) // 2)
# expect: out1 shape (n, 4, 2 * h, 2 * w)
# expect: out5 shape (n, 4, 1, 1)
from shapevm import ops, Tensor


def f(x: Tensor["n", 4, "h", "w"], wt: Tensor[6, 2, 3, 3], b: Tensor[6], wtt: Tensor[4, 4, 2, 2],
      scale: Tensor[4], shift: Tensor[4], mu: Tensor[4], var: Tensor[4]):
    y = ops.conv(x, wt, b, strides=(2, 2), pads=(1, 1), groups=2)
    up = ops.conv_transpose(x, wtt, None, strides=(2, 2))
    bn = ops.batch_norm(x, scale, shift, mu, var)
    mx = ops.max_pool(bn, (3, 3), (2, 2), (1, 1), ceil_mode=True)
    av = ops.avg_pool(x, (2, 2), pads=(1, 1), count_include_pad=True)
    return y, up, mx, av, ops.global_max_pool(x), ops.global_avg_pool(ops.relu(bn))
