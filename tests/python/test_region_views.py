# SPDX-License-Identifier: Apache-2.0
# A fused region remakes a step's leaf views from the layouts of an earlier execution when the
# region's inputs and the views' bases repeat them (region_executor.cc, ViewMemo): the views are
# then made over this execution's own buffers, at their own offsets. Here the inputs' layouts change
# from call to call (contiguous, column-major, slices at moving offsets, new shapes, back again) and
# every call must equal the float64 numpy reference, while the compiled region serves the calls.
import numpy as np
import pytest

import shapevm
from shapevm import Tensor, ops

if getattr(shapevm, "_core", None) is None:
    pytest.skip("this build has no Python module", allow_module_level=True)

# Zero thresholds, no tuning, and a cache folder of its own (no install records of other runs).
from test_module_parameters import context  # noqa: E402, F401  (the fixture)


def gates(gx: Tensor["rows", 64], gh: Tensor["batch", 64], c: Tensor["batch", 16], x: Tensor["batch", "seq", 8]):
    batch, seq, _ = x.shape
    g = ops.reshape(gx, (batch, seq, 64)) + ops.unsqueeze(gh, 1)
    i, f, u, o = ops.split(g, 4, axis=2)
    c_next = ops.sigmoid(f) * ops.unsqueeze(c, 1) + ops.sigmoid(i) * ops.tanh(u)
    return ops.sigmoid(o) * ops.tanh(c_next), c_next


def reference(gx, gh, c, x):
    batch, seq, _ = x.shape
    g = gx.astype(np.float64).reshape(batch, seq, 64) + gh.astype(np.float64)[:, None, :]
    i, f, u, o = np.split(g, 4, axis=2)
    sigmoid = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    c_next = sigmoid(f) * c.astype(np.float64)[:, None, :] + sigmoid(i) * np.tanh(u)
    return sigmoid(o) * np.tanh(c_next), c_next


class Buffers(shapevm.Module):
    """Holds arrays in ShapeVM-owned storage: a slice of one crosses into a call as a view of that
    storage at an offset (a slice of a plain numpy array crosses as memory starting at the slice)."""


def layouts(rng, batch, seq):
    """The same values of (gx, gh, c, x) in several layouts: contiguous, column-major, and slices of
    larger buffers (numpy's, and ShapeVM-owned ones, whose offset is the view's) at an offset that
    moves from call to call (same shape and strides)."""
    rows = batch * seq
    gx = rng.standard_normal((rows, 64), np.float32)
    gh = rng.standard_normal((batch, 64), np.float32)
    c = rng.standard_normal((batch, 16), np.float32)
    x = rng.standard_normal((batch, seq, 8), np.float32)
    yield "contiguous", (gx, gh, c, x)
    yield "column-major", (np.asfortranarray(gx), np.asfortranarray(gh), np.asfortranarray(c), x)
    for shift in (1, 3, 2):
        big_gx = rng.standard_normal((rows + 4, 70), np.float32)
        big_gx[shift:shift + rows, shift:shift + 64] = gx
        big_c = rng.standard_normal((batch + 4, 20), np.float32)
        big_c[shift:shift + batch, 4 - shift:20 - shift] = c
        yield f"offset {shift}", (big_gx[shift:shift + rows, shift:shift + 64], gh,
                                  big_c[shift:shift + batch, 4 - shift:20 - shift], x)
    owned = Buffers()
    owned.gx = rng.standard_normal((rows + 4, 70), np.float32)
    owned.gh = rng.standard_normal((batch + 4, 64), np.float32)
    for shift in (1, 3, 0, 2):
        yield f"owned, offset {shift}", (owned.gx[shift:shift + rows, shift:shift + 64],
                                         owned.gh[shift:shift + batch], c, x)


def test_views_follow_every_calls_layout_and_offset(context):
    fn = shapevm.jit(gates, jit_level="O2", wait=True)
    rng = np.random.default_rng(7)
    calls = 0
    for batch, seq in ((3, 5), (4, 2), (3, 5), (1, 7)):
        for name, args in layouts(rng, batch, seq):
            expect = reference(*args)
            for repeat in range(3):  # the first call of a layout (re)makes the views, the next ones reuse them
                got = fn(*args)
                calls += 1
                for k, (g, e) in enumerate(zip(got, expect)):
                    err = np.linalg.norm(g - e) / np.linalg.norm(e)
                    assert err < 1e-5, (batch, seq, name, repeat, k, err)
    stats = fn.program.stats()
    assert stats["regions"]["fused"] >= 1, stats["jit_report"]
    assert stats["regions"]["runs"] >= calls // 2, stats["jit_report"]  # the compiled region served the calls
