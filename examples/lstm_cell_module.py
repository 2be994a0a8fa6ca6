# SPDX-License-Identifier: Apache-2.0
# The reference workload (docs/reference-workload.md) as a shapevm.Module (docs/python.md): the
# flattened cell of examples/lstm_cell.py with its weights as numpy attributes, read at every
# call. Used by tests/python/test_python_module.py and bench/python_module.py.
#   PYTHONPATH=build/python:examples /usr/bin/python3 -c "import lstm_cell_module as m; ..."
import numpy as np

import shapevm
from shapevm import Tensor, ops


class LstmCell(shapevm.Module):
    def __init__(self, rng, **options):
        super().__init__(**options)  # jit_level=..., wait=...
        self.W_ih = (0.1 * rng.standard_normal((1024, 128))).astype(np.float32)
        self.W_hh = (0.1 * rng.standard_normal((1024, 256))).astype(np.float32)
        self.b_ih = rng.standard_normal(1024).astype(np.float32)
        self.b_hh = rng.standard_normal(1024).astype(np.float32)

    def construct(self, x: Tensor["batch", "seq", 128], h: Tensor["batch", 256], c: Tensor["batch", 256]):
        batch, seq, _ = x.shape
        rows = ops.reshape(x, (batch * seq, 128))
        gx = rows @ self.W_ih.T + self.b_ih  # the hot matmul: [batch*seq, 128] x [128, 1024]
        gh = h @ self.W_hh.T + self.b_hh
        gates = ops.reshape(gx, (batch, seq, 1024)) + ops.unsqueeze(gh, 1)
        i, f, g, o = ops.split(gates, 4, axis=2)
        c_next = self.gate(f) * ops.unsqueeze(c, 1) + self.gate(i) * ops.tanh(g)
        h_next = self.gate(o) * ops.tanh(c_next)
        return h_next, c_next

    def gate(self, z: Tensor):
        return ops.sigmoid(z)
