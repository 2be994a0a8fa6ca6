# SPDX-License-Identifier: Apache-2.0
# bench/cell_bound.py --parts times the reference cell's parts as Modules of their own (issue 19):
# x·W_ihᵀ + b_ih, h·W_hhᵀ + b_hh and the gate math. The table only means something if the parts
# compose to the cell: here they do, at O2 (compiled and fused) against the whole cell and the
# op-by-op float64 reference, at two seqs and with odd batch rows; and the parts table renders,
# with and without oneDNN's rate for a seq.
import importlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import shapevm

if getattr(shapevm, "_core", None) is None:
    pytest.skip("this build has no Python module", allow_module_level=True)
pytest.importorskip("torch")  # cell_bound.py compares against PyTorch eager

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def cell_bound(tmp_path_factory):
    saved = os.environ.get("SHAPEVM_CACHE_DIR")
    os.environ["SHAPEVM_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("cell_bound")
    finally:
        sys.path.remove(str(BENCH))
        if saved is None:
            os.environ.pop("SHAPEVM_CACHE_DIR", None)
        else:
            os.environ["SHAPEVM_CACHE_DIR"] = saved


def reference64(w, x, h, c):
    """The cell in float64, op by op (numpy)."""
    batch, seq, _ = x.shape
    gx = x.reshape(batch * seq, 128).astype(np.float64) @ w["W_ih"].T.astype(np.float64) + w["b_ih"]
    gh = h.astype(np.float64) @ w["W_hh"].T.astype(np.float64) + w["b_hh"]
    gates = gx.reshape(batch, seq, 1024) + gh[:, None, :]
    i, f, g, o = np.split(gates, 4, axis=2)
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    c_next = sig(f) * c[:, None, :] + sig(i) * np.tanh(g)
    return sig(o) * np.tanh(c_next), c_next


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def test_parts_compose_to_the_cell(cell_bound):
    shapevm.set_context(jit_level="O2", hot_count=0, hot_ms=0, warmup=0)
    rng = np.random.default_rng(19)
    w = cell_bound.cell_weights(rng)
    cell = cell_bound.ReferenceCell(w, wait=True)
    gx_part, gh_part = cell_bound.InputGates(w, wait=True), cell_bound.HiddenGates(w, wait=True)
    gates = cell_bound.GateMath(wait=True)
    for batch, seq in ((3, 10), (5, 7)):
        x = rng.standard_normal((batch, seq, 128), np.float32)
        h = rng.standard_normal((batch, 256), np.float32)
        c = rng.standard_normal((batch, 256), np.float32)
        want = reference64(w, x, h, c)
        for _ in range(3):  # interpreted, then compiled
            whole = cell(x, h, c)
            gx, gh = gx_part(x), gh_part(h)
            parts = gates(gx, gh, c, x)
        assert gx.shape == (batch * seq, 1024) and gh.shape == (batch, 1024)
        for got_whole, got_parts, expect in zip(whole, parts, want):
            assert got_parts.shape == expect.shape == (batch, seq, 256)
            assert rel(got_parts, expect) < 1e-5
            assert rel(got_whole, expect) < 1e-5
            assert rel(got_parts, got_whole) < 1e-5
    assert gates.stats()["launches_compiled"] > 0


def test_parts_table_renders(cell_bound, capsys):
    times = {10: {"S": [100.0, 120.0], "x·W_ihᵀ + b": [50.0, 60.0], "h·W_hhᵀ + b": [10.0, 10.0],
                  "gates": [30.0, 30.0], "boundary": [1.0, 1.0]}}
    times[7] = {k: [v * 2 for v in vs] for k, vs in times[10].items()}
    rates = [{"x*W_ih^T seq 10": 80.0, "h*W_hh^T": 70.0}]
    cell_bound.print_parts([10, 7], times, rates)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 10 ") or line.startswith("| 7 ")]
    assert len(rows) == 2
    fx, fh = cell_bound.flops(10)
    assert f"oneDNN's best {fx / 80.0 / 1e3:.0f}" in rows[0] and f"oneDNN's best {fh / 70.0 / 1e3:.0f}" in rows[0]
    assert rows[0].endswith("| 15 (14%) |")  # 110 - (55 + 10 + 30)
    assert rows[1].count("oneDNN's best") == 1  # no x·W_ihᵀ rate for seq 7
