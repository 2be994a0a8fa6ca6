# SPDX-License-Identifier: Apache-2.0
# sigmoid and tanh in a compiled, fused kernel (issue 19's gate math): on AVX-512 the fused family
# takes the 16-lane reciprocal estimate without LLVM's Newton step (codegen_fused.cc), and ir_math
# refines it once itself. Element by element against float64 (relative 1e-6 wherever the result is
# a normal float32), with the limits exact: saturation to 1 and -1, sigmoid(0) = 0.5, tanh(-0) =
# -0, NaN in gives NaN out, and sigmoid's left tail down to the denormals.
import numpy as np
import pytest

import shapevm
from shapevm import Tensor, ops

if getattr(shapevm, "_core", None) is None:
    pytest.skip("this build has no Python module", allow_module_level=True)


class SigmoidTanh(shapevm.Module):
    """Two transcendentals after a multiply: one fused kernel (the gate kernel's shape of work)."""

    def construct(self, x: Tensor["rows", 64]):
        y = x * 2.0
        return ops.sigmoid(y), ops.tanh(y)


def inputs(rng):
    """Random values over the interesting ranges, plus the special ones (x is halved: y = 2x)."""
    x = np.concatenate([
        rng.uniform(-0.5, 0.5, 4096), rng.uniform(-10, 10, 4096), rng.uniform(-70, 70, 2048),
        np.sign(rng.standard_normal(2048)) * np.exp(rng.uniform(-60, 4, 2048)),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 50.0, -50.0, 4.55, -4.55, 8.5, -8.5, -43.5, -50.0, 1e30, -1e30, 1e-40],
    ]).astype(np.float32)
    pad = (-x.size) % 64
    return np.concatenate([x, rng.uniform(-3, 3, pad).astype(np.float32)]).reshape(-1, 64)


def check(name, got, want):
    """got (float32) against the float64 want, element by element."""
    want32 = want.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), name
    normal = ~nan & (np.abs(want) >= np.finfo(np.float32).tiny)
    rel = np.abs(got[normal].astype(np.float64) - want[normal]) / np.abs(want[normal])
    assert rel.max() <= 1e-6, (name, float(rel.max()), float(got[normal][rel.argmax()]))
    tiny = ~nan & ~normal
    assert np.all(np.abs(got[tiny] - want[tiny]) <= 1e-44), name
    saturated = ~nan & (np.abs(want32) == 1.0)
    assert np.array_equal(got[saturated], want32[saturated]), name


def test_fused_sigmoid_and_tanh_match_float64_and_keep_their_limits(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path))
    shapevm.set_context(jit_level="O2", hot_count=0, hot_ms=0, warmup=0)
    module = SigmoidTanh(wait=True)
    x = inputs(np.random.default_rng(19))
    y = (x * np.float32(2.0)).astype(np.float64)  # the float32 product, exact here
    with np.errstate(over="ignore", invalid="ignore"):
        want_s = 1.0 / (1.0 + np.exp(-y))
    want_t = np.tanh(y)
    for _ in range(4):
        s, t = module(x)
    assert module.stats()["launches_compiled"] > 0
    check("sigmoid", s, want_s)
    check("tanh", t, want_t)
    flat_x, flat_s, flat_t = x.ravel(), s.ravel(), t.ravel()
    at = {float(v): i for i, v in enumerate(flat_x) if not np.isnan(v)}
    assert flat_s[at[0.0]] == 0.5 and flat_t[at[0.0]] == 0.0
    assert np.signbit(flat_t[np.flatnonzero((flat_x == 0) & np.signbit(flat_x))[0]])
    assert flat_s[at[np.inf]] == 1.0 and flat_s[at[-np.inf]] == 0.0
    assert flat_t[at[np.inf]] == 1.0 and flat_t[at[-np.inf]] == -1.0
    assert 0.0 < flat_s[at[-50.0]] < np.finfo(np.float32).tiny  # sigmoid(-100), a denormal


class GateProducts(shapevm.Module):
    """sigmoid * tanh products as the LSTM cell has them: two a fused kernel computes with one
    shared reciprocal each (a sigmoid and a tanh nothing else reads; either operand order), and
    one it may not fold (its sigmoid is read twice)."""

    def construct(self, x: Tensor["rows", "cols"], y: Tensor["rows", "cols"]):
        folded = ops.sigmoid(x) * ops.tanh(y)
        swapped = ops.tanh(y * 0.5) * ops.sigmoid(x + y)
        s = ops.sigmoid(y)
        shared = s * ops.tanh(x) * s
        return folded, swapped, shared


@pytest.mark.parametrize("cols", [37, 256])
def test_fused_sigmoid_times_tanh_products_match_float64(tmp_path, monkeypatch, cols):
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path))
    shapevm.set_context(jit_level="O2", hot_count=0, hot_ms=0, warmup=0)
    module = GateProducts(wait=True)
    rng = np.random.default_rng(cols)
    rows = 4096 // cols + 3
    x = rng.uniform(-12, 12, (rows, cols)).astype(np.float32)
    y = rng.uniform(-12, 12, (rows, cols)).astype(np.float32)
    x[0, :4], y[0, :4] = [0.0, -0.0, -100.0, np.nan], [-0.0, 3.0, 1.5, 1.0]
    x[1, :3], y[1, :3] = [np.inf, -np.inf, 8.0], [np.inf, 2.0, np.nan]
    x64, y64 = x.astype(np.float64), y.astype(np.float64)

    def sig(v):
        return 1.0 / (1.0 + np.exp(-v))

    with np.errstate(over="ignore", invalid="ignore"):
        want = (sig(x64) * np.tanh(y64),
                np.tanh((y * np.float32(0.5)).astype(np.float64)) * sig((x + y).astype(np.float64)),
                sig(y64) * np.tanh(x64) * sig(y64))
    for _ in range(4):
        got = module(x, y)
    assert module.stats()["launches_compiled"] > 0
    for name, g, w in zip(("folded", "swapped", "shared"), got, want):
        assert np.array_equal(np.isnan(g), np.isnan(w)), name
        normal = ~np.isnan(w) & (np.abs(w) >= np.finfo(np.float32).tiny)
        rel = np.abs(g[normal].astype(np.float64) - w[normal]) / np.abs(w[normal])
        assert rel.max() <= 1e-6, (name, float(rel.max()))
        tiny = ~np.isnan(w) & ~normal
        assert np.all(np.abs(g[tiny] - w[tiny]) <= 1e-44), name
    folded = got[0]
    assert folded[0, 0] == 0.0 and np.signbit(folded[0, 0])  # sigmoid(0) * tanh(-0) = 0.5 * -0
    assert 0.0 < folded[0, 2] < np.finfo(np.float32).tiny  # sigmoid(-100) * tanh(1.5): a denormal
    assert np.isnan(folded[0, 3]) and np.isnan(folded[1, 2])
    assert folded[1, 0] == 1.0 and folded[1, 1] == 0.0
