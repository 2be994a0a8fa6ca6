# SPDX-License-Identifier: Apache-2.0
# The synchronous warm start from Python and the CLI (issues 23, 26; docs/python.md):
# shapevm.load(path, warm_start=True), LoadedModule/Module/JitFunction .warm_start() and
# `shapevm run --warm-start` install, before the first call, what an earlier process left in the
# kernel cache (install records), from the cached code with zero LLVM codegen: the first call runs
# compiled at the default tunables and equals O0 on random inputs. A corrupted cache entry is
# rejected (compiled afresh, results right), an empty cache or another program's record installs
# nothing and stops nothing. Every test has its own SHAPEVM_CACHE_DIR.
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

import shapevm

if getattr(shapevm, "_core", None) is None:
    pytest.skip("this build has no Python module", allow_module_level=True)
if not shapevm._core.jit_available():
    pytest.skip("built without the JIT", allow_module_level=True)

import pymodule_programs as progs  # noqa: E402

CELL = ROOT / "examples" / "lstm_cell.py"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private kernel cache and tuning database; the tunables come back afterwards."""
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path))
    before = shapevm.get_context()
    yield tmp_path
    changed = {k: v for k, v in shapevm.get_context().items() if before.get(k) != v}
    shapevm.set_context(**{k: before[k] for k in changed})


def cell_inputs(rng, batch=4, seq=3):
    shapes = {"x": (batch, seq, 128), "h": (batch, 256), "c": (batch, 256), "W_ih": (1024, 128),
              "W_hh": (1024, 256), "b_ih": (1024,), "b_hh": (1024,)}
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def fill_cache(level):
    """An earlier process: the cell tiered up at once on one shape, every compile waited for."""
    defaults = {k: v for k, v in shapevm.get_context().items() if k in ("warmup", "hot_count", "hot_ms")}
    shapevm.set_context(warmup=0, hot_count=0, hot_ms=0, tune_budget_ms=0)
    earlier = shapevm.load(CELL, jit_level=level, wait=True)
    rng = np.random.default_rng(1)
    for _ in range(3):
        earlier.lstm_cell(**cell_inputs(rng))
    earlier.program.wait_idle()
    assert earlier.stats()["kernels_installed"] > 0
    earlier.program.close()
    shapevm.set_context(**defaults)  # the later process tiers up as usual (3 warm-up calls)


def assert_matches_o0(module, calls, seed):
    reference = shapevm.load(CELL, jit_level="O0")
    rng = np.random.default_rng(seed)
    for _ in range(calls):
        inputs = cell_inputs(rng)
        got, want = module.lstm_cell(**inputs), reference.lstm_cell(**inputs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_load_warm_start_runs_the_first_call_compiled(cache):
    fill_cache("O2")
    module = shapevm.load(CELL, jit_level="O2", warm_start=True)
    result = module.warm_start_result
    assert result["installed"] > 0 and result["failed"] == 0, result["summary"]
    assert result["codegens"] == 0, result["summary"]
    assert any(e["kind"] == "region" and e["outcome"] == "installed" for e in result["entries"]), result
    assert module.stats()["runs"] == 0
    assert_matches_o0(module, 1, 2)
    stats = module.stats()
    assert stats["launches_compiled"] > 0, stats
    assert stats["codegen_count"] == 0, stats


def test_a_corrupted_cache_entry_is_compiled_afresh_and_results_stay_right(cache):
    fill_cache("O2")
    entries = list((cache / "kernels").glob("*.svmk"))
    assert entries
    for entry in entries:
        data = bytearray(entry.read_bytes())
        data[len(data) // 2] ^= 0x5A
        entry.write_bytes(bytes(data))
    module = shapevm.load(CELL, jit_level="O2")
    result = module.warm_start()
    assert result is module.warm_start_result
    assert result["codegens"] > 0, result["summary"]  # the damaged entries were not used
    assert_matches_o0(module, 3, 3)


def test_an_empty_cache_is_a_no_op(cache):
    module = shapevm.load(CELL, jit_level="O2", warm_start=True)
    result = module.warm_start_result
    assert result["installed"] == 0 and result["entries"] == [], result
    assert "no install record" in result["note"], result
    assert_matches_o0(module, 2, 4)


def test_another_programs_record_is_not_used(cache):
    fill_cache("O1")
    f = shapevm.jit(progs.add, jit_level="O1", warm_start=True)
    result = f.warm_start_result
    assert result["installed"] == 0 and "no install record" in result["note"], result
    x = np.linspace(-1.0, 1.0, 9, dtype=np.float32)
    np.testing.assert_array_equal(f(x, x), x + x)


def test_jit_and_module_warm_start(cache):
    shapevm.set_context(warmup=0, hot_count=0, hot_ms=0)
    x = np.random.default_rng(5).standard_normal(33).astype(np.float32)
    f = shapevm.jit(progs.add, jit_level="O1", wait=True)
    for _ in range(2):
        f(x, x)
    model = progs.Affine(64, 32, jit_level="O1", wait=True)
    rows = np.random.default_rng(6).standard_normal((5, 32)).astype(np.float32)
    for _ in range(2):
        model(rows)
    assert f.stats()["kernels_installed"] >= 1 and model.stats()["kernels_installed"] >= 1
    shapevm.set_context(warmup=3, hot_count=5, hot_ms=20)

    g = shapevm.jit(progs.add, jit_level="O1", warm_start=True)
    assert g.warm_start_result["installed"] >= 1, g.warm_start_result["summary"]
    np.testing.assert_array_equal(g(x, x), x + x)
    assert g.stats()["launches_compiled"] >= 1 and g.stats()["codegen_count"] == 0, g.stats()

    again = progs.Affine(64, 32, jit_level="O1")
    result = again.warm_start(timeout=60)
    assert result["installed"] >= 1 and result["codegens"] == 0, result["summary"]
    np.testing.assert_allclose(again(rows), rows @ again.weight.T + again.bias, rtol=1e-5, atol=1e-5)
    assert again.stats()["launches_compiled"] >= 1, again.stats()
    with pytest.raises(ValueError):
        again.warm_start(timeout=-1)


def test_cli_run_warm_start(cache, shapevm_bin):
    env = dict(os.environ, SHAPEVM_CACHE_DIR=str(cache))
    args = [shapevm_bin, "run", str(CELL), "--jit-level", "O2", "--dim", "batch=4", "--dim", "seq=3", "--quiet"]
    cold = subprocess.run([*args, "--jit-wait", "--warmup", "0", "--hot-count", "0", "--hot-ms", "0", "--iters", "3"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert cold.returncode == 0, cold.stderr
    warm = subprocess.run([shapevm_bin, "run", str(CELL), "--jit-level", "O2", "--dim", "batch=4", "--dim", "seq=3",
                           "--warm-start", "--iters", "1", "--stats-json", str(cache / "stats.json")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert warm.returncode == 0, warm.stderr
    line = re.search(r"warm start: (\d+) installed, \d+ declined, (\d+) failed, \d+ skipped; (\d+) LLVM codegens",
                     warm.stderr)
    assert line, warm.stderr
    assert int(line.group(1)) > 0 and int(line.group(2)) == 0 and int(line.group(3)) == 0, line.group(0)
    import json
    stats = json.loads((cache / "stats.json").read_text())
    assert stats["launches_compiled"] > 0, stats
    # A cold cache: a no-op with a note, the run still succeeds.
    empty = dict(env, SHAPEVM_CACHE_DIR=str(cache / "empty"))
    none = subprocess.run([*args[:-1], "--warm-start"], env=empty, capture_output=True, text=True, timeout=600)
    assert none.returncode == 0, none.stderr
    assert "no install record" in none.stderr, none.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
