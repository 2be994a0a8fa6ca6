# SPDX-License-Identifier: Apache-2.0
# The reference workload (docs/reference-workload.md), flattened variant, in the ShapeVM Python subset.
# The same file runs under CPython with the numpy-backed `shapevm.ops` (the test oracle) and
# compiles with `shapevm compile examples/lstm_cell.py -o lstm_cell.svm` to the bytecode of
# examples/lstm_cell.svasm: x [batch, seq, 128] is flattened for the hot [batch*seq,128]x[128,1024]
# matmul, the hidden projection is broadcast over seq, gates split four ways, h', c' come back
# as [batch, seq, 256].
from shapevm import ops, Tensor


def lstm_cell(x: Tensor["batch", "seq", 128], h: Tensor["batch", 256], c: Tensor["batch", 256],
              W_ih: Tensor[1024, 128], W_hh: Tensor[1024, 256], b_ih: Tensor[1024], b_hh: Tensor[1024]):
    batch, seq, _ = x.shape
    rows = ops.reshape(x, (batch * seq, 128))
    gx = rows @ W_ih.T + b_ih                      # the hot matmul: [batch*seq, 128] x [128, 1024]
    gh = h @ W_hh.T + b_hh                         # [batch, 1024]
    gates = ops.reshape(gx, (batch, seq, 1024)) + ops.unsqueeze(gh, 1)
    i, f, g, o = ops.split(gates, 4, axis=2)
    i = ops.sigmoid(i)
    f = ops.sigmoid(f)
    g = ops.tanh(g)
    o = ops.sigmoid(o)
    c_next = f * ops.unsqueeze(c, 1) + i * g
    h_next = o * ops.tanh(c_next)
    return h_next, c_next
