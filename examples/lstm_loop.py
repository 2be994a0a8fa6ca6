# SPDX-License-Identifier: Apache-2.0
# The reference workload (docs/reference-workload.md), looped variant: a true recurrence over the time
# steps (`for t in range(seq)`), so the hot region is the loop body between LoopStart and
# LoopEnd. Runs under CPython with the numpy-backed `shapevm.ops` and compiles to the bytecode of
# examples/lstm_loop.svasm. Returns the final h and c, each [batch, 256].
from shapevm import ops, Tensor


def lstm_loop(x: Tensor["batch", "seq", 128], h: Tensor["batch", 256], c: Tensor["batch", 256],
              W_ih: Tensor[1024, 128], W_hh: Tensor[1024, 256], b_ih: Tensor[1024], b_hh: Tensor[1024]):
    w_ih_t = W_ih.T
    w_hh_t = W_hh.T
    seq = x.shape[1]
    for t in range(seq):
        x_t = x[:, t, :]
        gates = (x_t @ w_ih_t + b_ih) + (h @ w_hh_t + b_hh)
        i, f, g, o = ops.split(gates, 4, axis=1)
        i = ops.sigmoid(i)
        f = ops.sigmoid(f)
        g = ops.tanh(g)
        o = ops.sigmoid(o)
        c = f * c + i * g
        h = o * ops.tanh(c)
    return h, c
