# SPDX-License-Identifier: Apache-2.0
# A block whose O2 region holds opaque steps between its convs: a softmax and a sum over the
# channels (not the trailing axes, so no fused reduction) and a round trip through bfloat16 (a
# cast). The conv steps take any batch and image size, so the region compiled on the first image
# serves every other one (`--dim h=56,40,72,28 --dim w=56,48,64,36`), its opaque steps with their
# own kernels: stats-json regions.opaque_fallbacks counts the steps that fell back to the
# reference kernel (0 here).
from shapevm import ops, Tensor


def block(x: Tensor["n", 32, "h", "w"], w1: Tensor[32, 32, 3, 3], b1: Tensor[32], w2: Tensor[32, 32, 1, 1]):
    y = ops.relu(ops.conv(x, w1, b1, pads=(1, 1)))
    s = ops.softmax(y, axis=1)
    t = ops.sum(s * y, axis=1, keepdims=True)
    c = ops.cast(ops.cast(s - t, ops.bfloat16), ops.float32)
    return ops.conv(ops.tanh(c) * y, w2, None)
