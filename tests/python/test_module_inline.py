# SPDX-License-Identifier: Apache-2.0
# Inlining of methods through shapevm.Module (src/frontend/inline.cc, issue 19): a cell whose
# gate is a method runs as one compiled launch per call at O2, like the same cell written op for
# op, and matches numpy; an error raised inside an inlined method or function names the method's
# line and the method (.function), as before inlining, and the caller it was inlined into.
import inspect

import numpy as np
import pytest

import shapevm  # the built package (conftest put build/python first)
from shapevm import Tensor, ops

if getattr(shapevm, "_core", None) is None:
    pytest.skip("this build has no Python module", allow_module_level=True)

HIDDEN = 16  # small: the test is about the launch count, not the kernels


class GateCell(shapevm.Module):
    def __init__(self, rng, **options):
        super().__init__(**options)
        self.W_ih = (0.1 * rng.standard_normal((4 * HIDDEN, 8))).astype(np.float32)
        self.W_hh = (0.1 * rng.standard_normal((4 * HIDDEN, HIDDEN))).astype(np.float32)
        self.b = rng.standard_normal(4 * HIDDEN).astype(np.float32)

    def construct(self, x: Tensor["batch", 8], h: Tensor["batch", 16], c: Tensor["batch", 16]):
        gates = x @ self.W_ih.T + h @ self.W_hh.T + self.b
        i, f, g, o = ops.split(gates, 4, axis=1)
        c_next = self.gate(f) * c + self.gate(i) * ops.tanh(g)
        return self.gate(o) * ops.tanh(c_next), c_next

    def gate(self, z: Tensor):
        return ops.sigmoid(z)


class BadGate(shapevm.Module):
    def __init__(self, **options):
        super().__init__(**options)
        self.w = np.ones((3, 5), np.float32)

    def construct(self, x: Tensor[None, 4]):
        return self.project(ops.relu(x))

    def project(self, z: Tensor):
        return z @ self.w  # LINE_PROJECT


def apply_rows(x: Tensor[None, 4], w: Tensor[None, 5]):
    return project_rows(x + 1.0, w)


def project_rows(z: Tensor, w: Tensor):
    return scale_rows(z, w) * 2.0


def scale_rows(z: Tensor, w: Tensor):
    return ops.relu(z) @ w  # LINE_SCALE_ROWS


def numpy_cell(cell, x, h, c):
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
    gates = x.astype(np.float64) @ cell.W_ih.T + h @ cell.W_hh.T + cell.b
    i, f, g, o = np.split(gates, 4, axis=1)
    c_next = sig(f) * c + sig(i) * np.tanh(g)
    return sig(o) * np.tanh(c_next), c_next


@pytest.fixture
def eager():
    """Every region hot at once; the AutoTuner times only the default candidate."""
    before = shapevm.get_context()
    shapevm.set_context(warmup=0, hot_count=0, hot_ms=0, tune_budget_ms=0, tune_cache=0)
    yield
    shapevm.set_context(**{k: before[k] for k in ("warmup", "hot_count", "hot_ms", "tune_budget_ms", "tune_cache")})


def test_gate_method_cell_runs_one_compiled_launch_per_call(eager, tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(3)
    cell = GateCell(rng, jit_level="O2", wait=True)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    h = rng.standard_normal((5, HIDDEN)).astype(np.float32)
    c = rng.standard_normal((5, HIDDEN)).astype(np.float32)
    for _ in range(4):  # tier-up: wait=True makes each call wait for the compiles it queued
        cell(x, h, c)
    before = cell.stats()
    calls = 5
    for _ in range(calls):
        h2, c2 = cell(x, h, c)
    after = cell.stats()
    h_ref, c_ref = numpy_cell(cell, x, h, c)
    np.testing.assert_allclose(h2, h_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c2, c_ref, rtol=1e-5, atol=1e-5)
    compiled = after["launches_compiled"] - before["launches_compiled"]
    interpreted = after["launches_interpreted"] - before["launches_interpreted"]
    # Without inlining each gate call is its own function, and its sigmoid its own launch (4+ per call).
    assert compiled == calls and interpreted == 0, (compiled, interpreted, after)


def test_an_error_in_an_inlined_method_names_its_line():
    line = next(n for n, text in enumerate(inspect.getsourcelines(BadGate)[0], inspect.getsourcelines(BadGate)[1])
                if "LINE_PROJECT" in text)
    model = BadGate(jit_level="O0")
    with pytest.raises(shapevm.ShapeError) as info:
        model(np.ones((2, 4), np.float32))
    assert info.value.line == line, (info.value.line, line, str(info.value))
    assert info.value.function.split(".")[-1] == "project", str(info.value)
    assert info.value.inlined_into is not None and info.value.inlined_into.split(".")[-1] == "construct", \
        str(info.value)


def source_line(fn, marker):
    lines, first = inspect.getsourcelines(fn)
    return next(n for n, text in enumerate(lines, first) if marker in text)


def test_an_error_in_a_nested_inlined_function_names_that_function():
    rng = np.random.default_rng(5)
    jitted = shapevm.jit(apply_rows, jit_level="O0")
    x = rng.standard_normal((2, 4)).astype(np.float32)
    w = rng.standard_normal((3, 5)).astype(np.float32)  # 3 rows: the matmul needs 4
    with pytest.raises(shapevm.ShapeError) as info:
        jitted(x, w)
    error = info.value
    # scale_rows was inlined into project_rows, and that into apply_rows: the failing matmul is
    # scale_rows' line, and the error names scale_rows, as its own frame did before inlining.
    assert error.line == source_line(scale_rows, "LINE_SCALE_ROWS"), str(error)
    assert error.function == "scale_rows", str(error)
    assert error.inlined_into == "apply_rows", str(error)
    assert "in function 'scale_rows' at PC" in str(error) and "inlined into 'apply_rows'" in str(error), str(error)
    # The function stays usable, and a correct call matches numpy.
    w = rng.standard_normal((4, 5)).astype(np.float32)
    want = np.maximum(x.astype(np.float64) + 1.0, 0.0) @ w * 2.0
    np.testing.assert_allclose(jitted(x, w), want, rtol=1e-5, atol=1e-5)
