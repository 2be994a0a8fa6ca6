# SPDX-License-Identifier: Apache-2.0
# Gate math at the output's precision (issue 25): a bfloat16 or float16 kernel whose sigmoid, tanh or
# exp result is rounded to 16 bits takes ir_math's 16-bit variants (relative error <= 2^-13,
# ir_math.h), in the fused family (O2) and in the elementwise family (O1). Element by element
# against the correctly rounded float64 value: within 1 ulp of the 16-bit format, equal but for a
# small share of elements, NaN where float64 gives NaN, and the limits exact (sigmoid(0) = 0.5,
# saturation to 1 and -1, tanh(-0) = -0, exp's overflow and underflow). And the bfloat16 LSTM cell
# (hidden 32) against float64 at validation's bfloat16 tolerance, no further from it than the
# interpreter.
import numpy as np
import pytest

import shapevm
from shapevm import Tensor, ops

import module_parameter_programs as progs  # noqa: E402  (tests/python): the bfloat16 cell, hidden 32

if getattr(shapevm, "_core", None) is None:
    pytest.skip("this build has no Python module", allow_module_level=True)

BF16_TOLERANCE = 1.6e-2  # validate.cc's relative L2 bound for bfloat16
FORMATS = {"bfloat16": (8, -126, np.finfo(np.float32).max), "float16": (11, -14, 65504.0)}
# The share of results 1 ulp off the correctly rounded one: the exact value lies within 2^-13 of
# a rounding boundary (measured at most ~0.2% in bfloat16 and ~1.4% in float16, whose ulp is 8x
# finer).
MAX_OFF_SHARE = {"bfloat16": 0.01, "float16": 0.03}


def round_to_format(v, digits, min_exponent):
    """float64 values rounded to nearest even on a format with `digits` significant bits and
    denormals below 2^min_exponent (overflow is left to the caller)."""
    v = np.asarray(v, np.float64)
    finite = np.isfinite(v) & (v != 0)
    exponent = np.full(v.shape, min_exponent, np.float64)
    exponent[finite] = np.maximum(np.floor(np.log2(np.abs(v[finite]))), min_exponent)
    quantum = np.exp2(exponent - digits + 1)
    out = v.copy()
    out[finite] = np.round(v[finite] / quantum[finite]) * quantum[finite]
    return out, quantum


class GatesBf16(shapevm.Module):
    def construct(self, x: Tensor["rows", 64]):
        y = ops.cast(x, ops.bfloat16) * 2.0
        return ops.sigmoid(y), ops.tanh(y), ops.exp(y)


class GatesF16(shapevm.Module):
    def construct(self, x: Tensor["rows", 64]):
        y = ops.cast(x, ops.float16) * 2.0
        return ops.sigmoid(y), ops.tanh(y), ops.exp(y)


def inputs(rng, dtype_name):
    limit = 5.0 if dtype_name == "float16" else 60.0  # exp(2x) stays finite in float16 up to x = 5.5
    x = np.concatenate([
        rng.uniform(-0.5, 0.5, 4096), rng.uniform(-10, 10, 4096), rng.uniform(-limit, limit, 2048),
        np.sign(rng.standard_normal(2048)) * np.exp(rng.uniform(-30, 3, 2048)),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 50.0, -50.0, 4.5, -4.5, 8.5, -8.5, 1e30, -1e30, 0.25],
    ]).astype(np.float32)
    pad = (-x.size) % 64
    return np.concatenate([x, rng.uniform(-3, 3, pad).astype(np.float32)]).reshape(-1, 64)


def check(name, got, want, fmt):
    digits, min_exponent, largest = FORMATS[fmt]
    got = np.asarray(got, np.float64).ravel()
    want = want.ravel()
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), name
    overflow = ~nan & (np.abs(want) > largest)
    assert np.all(np.isinf(got[overflow])), name
    rest = ~nan & ~overflow
    want16, quantum = round_to_format(want[rest], digits, min_exponent)
    inf = np.isinf(want16)
    assert np.array_equal(got[rest][inf], want16[inf]), name
    # Within one ulp of the correctly rounded value (at the smaller magnitude of the two).
    got16, got_quantum = round_to_format(got[rest][~inf], digits, min_exponent)
    assert np.array_equal(got16, got[rest][~inf]), name  # the outputs are 16-bit values
    ulp = np.minimum(quantum[~inf], got_quantum)
    diff = np.abs(got16 - want16[~inf])
    assert np.all(diff <= ulp), (name, fmt, float((diff / ulp).max()))
    share = float(np.mean(diff > 0))
    assert share < MAX_OFF_SHARE[fmt], (name, fmt, share)
    return share


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_16_bit_sigmoid_tanh_exp_within_one_ulp_of_correctly_rounded(fmt, level, tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path))
    before = shapevm.get_context()
    shapevm.set_context(jit_level=level, hot_count=0, hot_ms=0, warmup=0)
    try:
        module = (GatesBf16 if fmt == "bfloat16" else GatesF16)(wait=True)
        x = inputs(np.random.default_rng(25), fmt)
        digits, min_exponent, _ = FORMATS[fmt]
        xr, _ = round_to_format(x.astype(np.float64), digits, min_exponent)
        xr[np.abs(x) > FORMATS[fmt][2]] = np.copysign(np.inf, x[np.abs(x) > FORMATS[fmt][2]])
        xr[np.isnan(x)] = np.nan
        y = xr * 2.0  # exact in either format
        with np.errstate(over="ignore", invalid="ignore"):
            want = {"sigmoid": 1.0 / (1.0 + np.exp(-y)), "tanh": np.tanh(y), "exp": np.exp(y)}
        for _ in range(4):
            s, t, e = module(x)
        assert module.stats()["launches_compiled"] > 0
        for name, got in (("sigmoid", s), ("tanh", t), ("exp", e)):
            print(f"{level} {fmt} {name}: {100 * check(name, got, want[name], fmt):.3f}% one ulp off")
        flat_x, flat_s, flat_t, flat_e = (np.asarray(a, np.float64).ravel() for a in (x, s, t, e))
        at = {float(v): i for i, v in enumerate(flat_x) if not np.isnan(v)}
        assert flat_s[at[0.0]] == 0.5 and flat_t[at[0.0]] == 0.0 and flat_e[at[0.0]] == 1.0
        assert np.signbit(flat_t[np.flatnonzero((flat_x == 0) & np.signbit(flat_x))[0]])
        assert flat_s[at[np.inf]] == 1.0 and flat_s[at[-np.inf]] == 0.0
        assert flat_t[at[np.inf]] == 1.0 and flat_t[at[-np.inf]] == -1.0
        assert flat_t[at[8.5]] == 1.0 and flat_t[at[-8.5]] == -1.0
        assert flat_e[at[np.inf]] == np.inf and flat_e[at[-np.inf]] == 0.0
    finally:
        shapevm.set_context(**{k: before[k] for k in ("jit_level", "hot_count", "hot_ms", "warmup")})


def cell64(w, x, h, c):
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
    x, h, c = (a.astype(np.float64) for a in (x, h, c))
    gates = x @ w["W_ih"].T.astype(np.float64) + w["b_ih"] + (h @ w["W_hh"].T.astype(np.float64) + w["b_hh"])[:, None]
    i, f, g, o = np.split(gates, 4, axis=2)
    c_next = sig(f) * c[:, None, :] + sig(i) * np.tanh(g)
    return sig(o) * np.tanh(c_next), c_next


def rel_l2(actual, expected):
    return float(np.linalg.norm(np.asarray(actual, np.float64) - expected) / np.linalg.norm(expected))


def test_bf16_cell_within_bf16_tolerance_of_float64_and_no_further_than_the_interpreter(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(125)
    scale = 1.0 / 16.0
    rows, hidden = progs.ROWS, progs.HIDDEN
    weights = {"W_ih": rng.uniform(-scale, scale, (rows, 16)), "W_hh": rng.uniform(-scale, scale, (rows, hidden)),
               "b_ih": rng.uniform(-scale, scale, rows), "b_hh": rng.uniform(-scale, scale, rows)}
    weights = {k: v.astype(np.float32) for k, v in weights.items()}
    before = shapevm.get_context()
    shapevm.set_context(hot_count=0, hot_ms=0, warmup=0)
    try:
        compiled = progs.Bf16LstmCell(weights, jit_level="O2", wait=True)
        interpreted = progs.Bf16LstmCell(weights, jit_level="O0")
        compare_cells(compiled, interpreted, weights, rng)
    finally:
        shapevm.set_context(**{k: before[k] for k in ("hot_count", "hot_ms", "warmup")})


def compare_cells(compiled, interpreted, weights, rng):
    for seq in (10, 10, 10, 30, 30):
        x = rng.standard_normal((32, seq, 16), np.float32)
        h = rng.standard_normal((32, progs.HIDDEN), np.float32)
        c = rng.standard_normal((32, progs.HIDDEN), np.float32)
        want = cell64(weights, x, h, c)
        got, ref = compiled(x, h, c), interpreted(x, h, c)
        for o in range(2):
            err, ref_err = rel_l2(got[o], want[o]), rel_l2(ref[o], want[o])
            assert err <= BF16_TOLERANCE, (seq, o, err)
            assert err <= 1.1 * ref_err, (seq, o, err, ref_err)
            print(f"seq {seq} output {o}: relative L2 vs float64 {err:.3e} compiled, {ref_err:.3e} interpreted")
    assert compiled.stats()["launches_compiled"] > 0


class BfGates(shapevm.Module):
    """The LSTM gates in bfloat16: every leaf bfloat16, so the adds, products, sigmoid and tanh
    round without the NaN test (codegen_math.cc)."""

    def construct(self, gx: Tensor["batch", "seq", 1024], gh: Tensor["batch", 1024], c: Tensor["batch", 256]):
        gates = ops.cast(gx, ops.bfloat16) + ops.unsqueeze(ops.cast(gh, ops.bfloat16), 1)
        i, f, g, o = ops.split(gates, 4, axis=2)
        c_next = ops.sigmoid(f) * ops.unsqueeze(ops.cast(c, ops.bfloat16), 1) + ops.sigmoid(i) * ops.tanh(g)
        return ops.sigmoid(o) * ops.tanh(c_next), c_next


def test_bf16_gates_keep_nan_and_inf_where_the_interpreter_has_them(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path))
    before = shapevm.get_context()
    shapevm.set_context(hot_count=0, hot_ms=0, warmup=0)
    try:
        compiled = BfGates(jit_level="O2", wait=True)
        interpreted = BfGates(jit_level="O0")
        rng = np.random.default_rng(26)
        special = np.array([np.nan, -np.nan, np.inf, -np.inf, 1e38, -1e38, 3e38, -3e38, 0.0, -0.0], np.float32)
        for _ in range(4):
            gx = rng.standard_normal((4, 10, 1024)).astype(np.float32) * 4
            gh = rng.standard_normal((4, 1024)).astype(np.float32)
            c = rng.standard_normal((4, 256)).astype(np.float32)
            for a in (gx.reshape(-1), gh.reshape(-1), c.reshape(-1)):
                at = rng.choice(a.size, 64, replace=False)
                a[at] = rng.choice(special, 64)
            got, ref = compiled(gx, gh, c), interpreted(gx, gh, c)
            for g, r in zip(got, ref):
                g, r = np.asarray(g), np.asarray(r)
                assert np.array_equal(np.isnan(g), np.isnan(r))
                assert np.array_equal(g[np.isinf(r)], r[np.isinf(r)])
                assert np.array_equal(np.isinf(g), np.isinf(r))
        assert compiled.stats()["launches_compiled"] > 0
    finally:
        shapevm.set_context(**{k: before[k] for k in ("hot_count", "hot_ms", "warmup")})
