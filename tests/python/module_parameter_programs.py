# SPDX-License-Identifier: Apache-2.0
# Modules for test_module_parameters.py: construct methods whose parameter-only expressions
# (casts, transposes, reshapes, arithmetic) the Module hoists into derived parameters.
import numpy as np

import shapevm
from pymodule_programs import Affine  # (tests/python) its weight and bias
from shapevm import Tensor, ops

HIDDEN = 32
ROWS = 128  # 4 * HIDDEN


class Bf16Affine(Affine):
    """x @ W.T + b in bfloat16: the weight's cast and transpose are computed once per assignment."""

    def construct(self, x: Tensor[None, None]):
        w = ops.cast(self.weight, ops.bfloat16)
        b = ops.cast(self.bias, ops.bfloat16)
        return ops.cast(x, ops.bfloat16) @ w.T + b


class LstmCell(shapevm.Module):
    """The reference cell (hidden 32), in float32 or in bfloat16 (casts inside, like
    bench/bf16_cell.py's), its bias sum a derived parameter too."""

    def __init__(self, weights, **options):
        super().__init__(**options)
        for name, value in weights.items():
            setattr(self, name, value)

    def construct(self, x: Tensor["batch", "seq", 16], h: Tensor["batch", 32], c: Tensor["batch", 32]):
        batch, seq, _ = x.shape
        rows = ops.reshape(x, (batch * seq, 16))
        gx = rows @ self.W_ih.T + (self.b_ih + self.b_hh)
        gates = ops.reshape(gx, (batch, seq, ROWS)) + ops.unsqueeze(h @ self.W_hh.T, 1)
        i, f, g, o = ops.split(gates, 4, axis=2)
        c_next = ops.sigmoid(f) * ops.unsqueeze(c, 1) + ops.sigmoid(i) * ops.tanh(g)
        return ops.sigmoid(o) * ops.tanh(c_next), c_next


class Bf16LstmCell(LstmCell):
    def construct(self, x: Tensor["batch", "seq", 16], h: Tensor["batch", 32], c: Tensor["batch", 32]):
        w_ih, w_hh = ops.cast(self.W_ih, ops.bfloat16), ops.cast(self.W_hh, ops.bfloat16)
        bias = ops.cast(self.b_ih + self.b_hh, ops.bfloat16)
        batch, seq, _ = x.shape
        rows = ops.reshape(ops.cast(x, ops.bfloat16), (batch * seq, 16))
        gx = rows @ w_ih.T + bias
        gates = ops.reshape(gx, (batch, seq, ROWS)) + ops.unsqueeze(ops.cast(h, ops.bfloat16) @ w_hh.T, 1)
        i, f, g, o = ops.split(gates, 4, axis=2)
        c_next = ops.sigmoid(f) * ops.unsqueeze(ops.cast(c, ops.bfloat16), 1) + ops.sigmoid(i) * ops.tanh(g)
        return ops.sigmoid(o) * ops.tanh(c_next), c_next


class HeldBf16Affine(shapevm.Module):
    """A weight held in bfloat16 directly (shapevm.Parameter): nothing to cast inside."""

    def __init__(self, weight, bias, **options):
        super().__init__(**options)
        self.weight = shapevm.Parameter(weight, "bfloat16")
        self.bias = shapevm.Parameter(bias, "bfloat16")

    def construct(self, x: Tensor[None, None]):
        return ops.cast(x, ops.bfloat16) @ self.weight.T + self.bias


class GuardedReshape(shapevm.Module):
    """A derived parameter that fails for this weight (64 * 32 != 64 * 64) on a branch the call
    may not take: the Module falls back to reading its parameters at every call."""

    def __init__(self, **options):
        super().__init__(**options)
        self.weight = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)

    def construct(self, x: Tensor[None, 64], flag: int):
        if flag > 0:
            return x @ ops.reshape(self.weight, (64, 32))
        return x @ self.weight.T


class Shadowing(shapevm.Module):
    """`x` is construct's argument until it is assigned from a parameter: its reads before that
    are the argument's, so `x` is never a derived name (`self.weight * 2.0` itself is derived)."""

    def __init__(self, **options):
        super().__init__(**options)
        self.weight = np.random.default_rng(4).standard_normal((8, 8)).astype(np.float32)

    def construct(self, x: Tensor[None, 8]):
        y = x @ self.weight
        x = self.weight * 2.0
        return y @ x
