# SPDX-License-Identifier: Apache-2.0
# A block whose O2 region holds opaque steps between its matmuls: a softmax and a sum over the
# sequence axis (not the trailing one, so no fused reduction) and a round trip through bfloat16
# (a cast). Run over a varying seq (`--dim seq=64,200,512,1000`): the region compiled on the first
# seq serves every other one, its opaque steps with their own kernels (stats-json
# regions.opaque_fallbacks counts the runs where one fell back to the reference kernel).
from shapevm import ops, Tensor


def block(x: Tensor["seq", 256], w1: Tensor[256, 256], b1: Tensor[256], w2: Tensor[256, 256]):
    h = x @ w1 + b1
    s = ops.softmax(h, axis=0)
    m = ops.sum(ops.tanh(h) * s, axis=0, keepdims=True)
    c = ops.cast(ops.cast(h - m, ops.bfloat16), ops.float32)
    return (ops.tanh(c) + h) @ w2
