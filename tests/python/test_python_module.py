# SPDX-License-Identifier: Apache-2.0
# The Python module `shapevm` (issue 19, docs/python.md) from build/python: @shapevm.jit against
# CPython on the numpy oracle (the frontend corpus at O0 and O2), shapevm.Module on the reference
# cell, zero-copy arguments and results, weight reassignment, threads, leaks, a module dropped
# while its compile is in flight, the error classes with their lines, bad input, logging,
# set_context/get_context and shapevm.load.
import gc
import logging
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from conftest import ROOT

import shapevm  # the built package (conftest put build/python first)

if getattr(shapevm, "_core", None) is None:
    if os.environ.get("SHAPEVM_PYTHON_DIR") == "":
        pytest.skip("this build has no Python module (SHAPEVM_BUILD_PYTHON=OFF, or a sanitizer build)",
                    allow_module_level=True)
    pytest.fail(f"shapevm was imported from {shapevm.__path__[0]}, which has no native extension; build the "
                "svm_python_core target (build/python/shapevm) or set SHAPEVM_PYTHON_DIR", pytrace=False)

import pymodule_programs as progs  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
import lstm_cell_module  # noqa: E402
from frontend_harness import (compare, entry_params, find_entry, load_module, make_case, parse_header,  # noqa: E402
                              run_cpython, runnable_corpus, to_numpy)

CORPUS = ROOT / "tests" / "frontend_corpus"


@pytest.fixture
def context():
    """set_context for one test; the previous values come back afterwards."""
    before = shapevm.get_context()
    yield shapevm.set_context
    changed = {k: v for k, v in shapevm.get_context().items() if before.get(k) != v}
    shapevm.set_context(**{k: before[k] for k in changed})


def eager(context):
    """Every region hot at once; the AutoTuner times only the default candidate."""
    context(warmup=0, hot_count=0, hot_ms=0, tune_budget_ms=0, tune_cache=0)


def rel_l2(actual, expected):
    return float(np.linalg.norm(np.asarray(actual, np.float64) - expected) / max(np.linalg.norm(expected), 1e-30))


# ---- the package ----

def test_package_layout_and_error_classes():
    assert shapevm.__path__[0].endswith(os.path.join("python", "shapevm"))
    table = shapevm._core.error_table()
    assert table[0][0] == "Ok" and len(table) >= 15
    for code, meaning in table[1:]:
        cls = shapevm.errors.BY_CODE[code]
        assert issubclass(cls, shapevm.Error) and cls.__doc__ == meaning
        assert getattr(shapevm, cls.__name__) is cls
    for name in ("ShapeError", "DTypeError", "VerifyError", "LimitExceeded", "CompileError", "KindError"):
        assert issubclass(getattr(shapevm, name), shapevm.Error)
    assert shapevm.ops is not None and shapevm.Tensor is shapevm.ops.Tensor


def test_import_from_a_fresh_interpreter():
    env = dict(os.environ, PYTHONPATH=str(os.path.dirname(shapevm.__path__[0])))
    out = subprocess.run([sys.executable, "-c", "import shapevm; print(shapevm.jit.__name__, shapevm.ShapeError.code)"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["jit", "ShapeMismatch"]


def test_settings_roundtrip(context):
    ctx = shapevm.get_context()
    assert {"jit_level", "hot_count", "hot_ms", "jit_log", "kernel_threads"} <= set(ctx)
    following = shapevm.jit(progs.add)  # starts at the context's level
    pinned = shapevm.jit(progs.add, jit_level="O0")
    context(hot_count=7, jit_level="O1", jit_log=True)
    got = shapevm.get_context()
    assert (got["hot_count"], got["jit_level"], got["jit_log"]) == (7, 1, 1)
    assert following.program.get("jit_level") == 1 and following.stats()["jit_level"] == 1
    assert pinned.program.get("jit_level") == 0 and shapevm.jit(progs.add).program.get("jit_level") == 1
    with pytest.raises(shapevm.UnknownName, match="hot_count"):
        shapevm.set_context(no_such_tunable=1)
    with pytest.raises(shapevm.InvalidArgument, match="jit_level"):
        shapevm.set_context(jit_level="O7")


# ---- @shapevm.jit ----

def test_issue_example_and_same_module_callee():
    f = shapevm.jit(progs.scaled_softmax)
    x = np.random.default_rng(1).random((7, 33)).astype(np.float32)
    y = f(x, 0.5)
    z = np.exp(x * 0.5 - (x * 0.5).max(-1, keepdims=True))
    np.testing.assert_allclose(y, z / z.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert f.__name__ == "scaled_softmax" and f.__wrapped__ is progs.scaled_softmax
    g = shapevm.jit(progs.calls_helper)
    assert "def _double" in g.source  # the callee was compiled with it
    np.testing.assert_allclose(g(x), x * 2.0 + 1.0, rtol=1e-6)
    np.testing.assert_allclose(g(x=x), x * 2.0 + 1.0, rtol=1e-6)
    assert isinstance(progs.calls_later, shapevm.JitFunction)  # decorated in its file
    assert progs.calls_later(np.array([1.0, 2.0], np.float32)).tolist() == [4.0, 6.0]


def test_results_tuples_scalars_and_dtypes():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, b = shapevm.jit(progs.two_outputs)(x[0], x[1])
    np.testing.assert_array_equal(a, x[0] + x[1])
    np.testing.assert_array_equal(b, x[0] * x[1])
    shape, total, rows2, more = shapevm.jit(progs.shape_and_sum)(x)
    assert shape == (2, 3) and rows2 == 4 and more is True
    assert float(total) == 15.0
    h = shapevm.jit(progs.half_scale)(np.array([1, 2, 3], np.float16))
    assert h.dtype == np.float16 and h.tolist() == [2, 4, 6]
    d = shapevm.jit(progs.half_scale)(np.array([1, 2], np.float64))
    assert d.dtype == np.float64
    bf = shapevm.jit(progs.bf16_roundtrip)(np.array([1.0, 3.0, 1.0 / 3.0], np.float32))
    assert bf.dtype == np.float32  # numpy has no bfloat16: widened exactly
    np.testing.assert_allclose(bf, [2.0, 6.0, 2.0 / 3.0], rtol=1e-2)


def test_bfloat16_outputs_widen_exactly_dense_or_strided():
    # A dense bf16 result widens by shifting its bits, a strided one (the transpose) element by
    # element: both are exactly the bf16 values.
    x = np.random.default_rng(7).standard_normal((5, 7)).astype(np.float32)
    dense, strided = shapevm.jit(progs.bf16_dense_and_transposed)(x)
    want = shapevm.ops.round_bf16(x) * 2
    assert dense.dtype == strided.dtype == np.float32
    np.testing.assert_array_equal(dense, want)
    np.testing.assert_array_equal(strided, want.T)


def test_zero_copy_in_and_out():
    f = shapevm.jit(progs.identity)
    x = np.random.default_rng(2).random((6, 8)).astype(np.float32)
    y = f(x)
    assert np.shares_memory(x, y) and y.ctypes.data == x.ctypes.data  # the argument was wrapped
    strided = x[::2, 1::3]  # a non-contiguous view
    assert not strided.flags.c_contiguous
    z = f(strided)
    assert np.shares_memory(strided, z) and z.strides == strided.strides
    np.testing.assert_array_equal(z, strided)
    tail = shapevm.jit(progs.tail_rows)(strided)  # a view ShapeVM made of a strided input
    assert np.shares_memory(strided, tail)
    np.testing.assert_array_equal(tail, strided[1:])
    out = shapevm.jit(progs.add)(x[0], x[1])  # a fresh result: an array over ShapeVM's storage
    assert not out.flags.owndata and type(out.base).__name__ == "PyCapsule" and out.flags.writeable
    del x, strided
    gc.collect()
    np.testing.assert_array_equal(z, z.copy())  # still alive through the result


def oracle(fn, *args):
    """`fn` run by CPython on the numpy oracle (shapevm.ops), as a plain array."""
    return to_numpy(fn(*[np.array(a).view(shapevm.Tensor) for a in args]))


def test_transposed_and_broadcast_inputs():
    f = shapevm.jit(progs.poly)
    base = np.random.default_rng(3).standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(f(base.T), oracle(progs.poly, base.T), rtol=1e-5, atol=1e-6)
    row = np.broadcast_to(base[0], (4, 7))  # stride 0
    np.testing.assert_allclose(f(row), oracle(progs.poly, row), rtol=1e-5, atol=1e-6)
    flipped = base[::-1]  # negative strides: the one case that is copied
    np.testing.assert_allclose(f(flipped), oracle(progs.poly, flipped), rtol=1e-5, atol=1e-6)


# ---- the corpus through @shapevm.jit vs CPython ----

def _corpus_entry(path, spec):
    module = load_module(path)
    cls_name, fdef = find_entry(path.read_text(), spec.fn)
    if cls_name is None:
        return module, getattr(module, fdef.name), None
    if fdef.name != "construct":
        return module, None, None
    cls = getattr(module, cls_name)
    return module, None, type(cls_name, (cls, shapevm.Module), {})


CORPUS_PROGRAMS = [p for p in runnable_corpus(CORPUS)]


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_corpus_through_jit(context, level):
    """Every runnable corpus program whose entry is a function or a `construct` method, compiled
    with @shapevm.jit (a shapevm.Module subclass for classes), on fresh random inputs drawn from
    the annotations, against the same function run by CPython on the numpy oracle."""
    eager(context)
    rng = np.random.default_rng()
    checked, skipped = 0, []
    for path in CORPUS_PROGRAMS:
        spec = parse_header(path)
        if spec.no_diff or spec.run_args and any(a.startswith("--") and a not in ("--arg", "--dim")
                                                 for a in spec.run_args):
            skipped.append(path.stem)
            continue
        module, fn, module_cls = _corpus_entry(path, spec)
        if fn is None and module_cls is None:
            skipped.append(path.stem)
            continue
        params = entry_params(find_entry(path.read_text(), spec.fn)[1])
        compiled = shapevm.jit(fn, jit_level=level, wait=True) if fn else None
        obj = None
        if module_cls is not None:
            obj = module_cls.__new__(module_cls)
            shapevm.Module.__init__(obj, jit_level=level, wait=True)
        for run in range(2):
            case = make_case(spec, params, rng)
            kwargs = dict(case.inputs, **case.scalars)
            if obj is not None:
                for name, value in case.params.items():
                    setattr(obj, name, value)
                result = obj(**kwargs)
            else:
                result = compiled(**kwargs)
            fn_obj = compiled if compiled is not None else obj._shapevm_function()
            outputs = fn_obj.program.functions()[fn_obj.index]["num_outputs"]
            got = [to_numpy(v) for v in (list(result) if outputs > 1 else [result])]
            expected = run_cpython(spec, case, module)
            assert len(got) == len(expected), f"{path.name}: {len(got)} outputs vs {len(expected)}"
            for i, (a, e) in enumerate(zip(got, expected)):
                compare(a, e, spec.tol, f"{path.name} out{i} at {level} (run {run}, dims {case.dims})")
        checked += 1
    print(f"{level}: {checked} corpus programs checked, {len(skipped)} skipped: {skipped}")
    assert checked >= 60, f"only {checked} corpus programs checked; skipped {skipped}"


def test_corpus_runtime_errors_through_jit():
    """The corpus programs that must fail at run time fail through @shapevm.jit with a
    shapevm.Error whose message has what the program's header expects (lines included: the
    compiled text keeps the user's line numbers)."""
    rng = np.random.default_rng()
    checked = 0
    for path in sorted(CORPUS.glob("*.py")):
        spec = parse_header(path)
        if not spec.runtime_errors or spec.compile_errors or spec.xfail:
            continue
        module, fn, module_cls = _corpus_entry(path, spec)
        if fn is None and module_cls is None:
            continue
        params = entry_params(find_entry(path.read_text(), spec.fn)[1])
        case = make_case(spec, params, rng)
        kwargs = dict(case.inputs, **case.scalars, **spec.fixed_args)
        target = shapevm.jit(fn) if fn else module_cls.__new__(module_cls)
        for name, value in case.params.items():
            setattr(target, name, value)
        with pytest.raises(shapevm.Error) as info:
            target(**kwargs)
        text = f"{info.value.code}: {info.value}"  # as the CLI prints a Status
        for needle in spec.runtime_errors:
            assert needle in text, f"{path.name}: {needle!r} not in {text}"
        checked += 1
    assert checked >= 9, f"only {checked} runtime-error programs"


# ---- shapevm.Module ----

def test_reference_cell_module(context):
    eager(context)
    rng = np.random.default_rng(4)
    # wait=True: each call waits for the compiles it queued, so the tier-up happens within the 60
    # calls on a loaded machine too (without it, a busy host could leave every call interpreted).
    cell = lstm_cell_module.LstmCell(rng, jit_level="O2", wait=True)
    calls, worst = 0, 0.0
    for seq in [10, 20, 30] * 20:
        x = rng.standard_normal((32, seq, 128)).astype(np.float32)
        h = rng.standard_normal((32, 256)).astype(np.float32)
        c = rng.standard_normal((32, 256)).astype(np.float32)
        h2, c2 = cell(x, h, c)
        calls += 1
        if calls % 6 == 0 or calls > 54:  # the float64 reference on a sample of calls (and the last ones)
            p = {k: getattr(cell, k).astype(np.float64) for k in ("W_ih", "W_hh", "b_ih", "b_hh")}
            gx = (x.reshape(32 * seq, 128) @ p["W_ih"].T + p["b_ih"]).reshape(32, seq, 1024)
            gates = gx + (h.astype(np.float64) @ p["W_hh"].T + p["b_hh"])[:, None, :]
            i, f, g, o = np.split(gates, 4, axis=2)
            sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
            c_ref = sig(f) * c[:, None, :] + sig(i) * np.tanh(g)
            h_ref = sig(o) * np.tanh(c_ref)
            worst = max(worst, rel_l2(h2, h_ref), rel_l2(c2, c_ref))
    assert calls >= 60
    assert worst <= 1e-5, f"relative L2 error {worst:.3g}"
    stats = cell.stats()
    for key in ("runs", "launches_compiled", "launches_interpreted", "kernels_installed", "compile_ms",
                "allocations_requested", "allocations_system"):
        assert key in stats
    assert stats["runs"] == calls
    assert stats["launches_compiled"] > 0 and stats["kernels_installed"] > 0, stats


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_weights_are_owned_reassignment_takes_effect(context, level):
    eager(context)
    model = progs.Affine(256, 128, jit_level=level, wait=True)  # 32768 elements: a packable weight
    x = np.random.default_rng(5).standard_normal((9, 128)).astype(np.float32)
    for _ in range(4):  # compiled (and any packing cached) by now
        first = model(x)
    np.testing.assert_allclose(first, x @ model.weight.T + model.bias, rtol=1e-4, atol=1e-4)
    # The Module owns its parameters: a read-only copy, so in-place writes are refused ...
    assert not model.weight.flags.writeable and not np.shares_memory(model.weight, first)
    with pytest.raises(ValueError, match="read-only"):
        model.weight *= -1.0
    with pytest.raises(ValueError):
        model.weight.flags.writeable = True
    source = np.random.default_rng(6).standard_normal((256, 128)).astype(np.float32)
    model.weight = source
    assert not np.shares_memory(model.weight, source)
    source[:] = 0.0  # the caller's array is not the parameter
    second = model(x)
    # ... and a new array takes effect on the next call, packed weights included.
    np.testing.assert_allclose(second, x @ model.weight.T + model.bias, rtol=1e-4, atol=1e-4)
    assert not np.allclose(first, second)
    model.weight = -model.weight
    third = model(x)
    np.testing.assert_allclose(third, -second + 2 * model.bias, rtol=1e-4, atol=1e-4)
    model.weight = np.asfortranarray(model.weight)  # any layout is copied row-major
    np.testing.assert_allclose(model(x), third, rtol=1e-5, atol=1e-5)
    if level == "O2":
        assert model.stats()["launches_compiled"] > 0


def test_owned_weights_cross_as_shapevm_storage():
    """A Module parameter (and a view of it) crosses as ShapeVM's own storage, which the compiled
    matmul's packed-weight cache admits; the caller's arrays and results cross as adopted memory."""
    model = progs.Affine(256, 128)
    assert shapevm._core._crosses_owned(model.weight)
    assert shapevm._core._crosses_owned(model.weight.T) and shapevm._core._crosses_owned(model.weight[1:7, ::2])
    assert not shapevm._core._crosses_owned(model.weight.view(np.int32))  # another dtype: adopted
    plain = np.ones((4, 4), np.float32)
    assert not shapevm._core._crosses_owned(plain)
    result = model(np.ones((2, 128), np.float32))
    assert result.flags.writeable and not shapevm._core._crosses_owned(result)
    model.extra = [1.0, 2.0]  # not an array: kept as given
    assert model.extra == [1.0, 2.0]
    model.copy_of_weight = model.weight  # already a parameter: shared, not copied again
    assert model.copy_of_weight is model.weight


def test_module_attributes_are_checked():
    model = progs.Affine(4, 3)
    del model.bias
    with pytest.raises(shapevm.InvalidArgument, match="bias"):
        model(np.ones((2, 3), np.float32))
    model.bias = [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(shapevm.KindError, match="bias"):
        model(np.ones((2, 3), np.float32))
    assert not model.stats()["module"]["specialized"]  # these calls ran the plain program
    model.bias = np.ones(4, np.float32)  # an array again: derived parameters bound again
    np.testing.assert_allclose(model(np.ones((2, 3), np.float32)), np.ones((2, 3)) @ model.weight.T + 1, rtol=1e-5)
    assert model.stats()["module"]["specialized"]


# ---- threads, leaks, teardown ----

def test_eight_threads_one_function(context):
    eager(context)
    f = shapevm.jit(progs.poly, jit_level="O2")
    reference = shapevm.jit(progs.poly, jit_level="O0")
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((rng.integers(1, 9), 16)).astype(np.float32) for _ in range(16)]
    expected = [reference(x) for x in inputs]
    errors = []

    def worker(seed):
        try:
            for k in range(60):
                i = (seed + k) % len(inputs)
                np.testing.assert_allclose(f(inputs[i]), expected[i], rtol=1e-5, atol=1e-6)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert f.stats()["runs"] == 8 * 60


def test_a_settled_function_still_sees_new_shapes(context, tmp_path, monkeypatch):
    # Once every site is compiled, calls skip the JIT's scan and reuse each kernel's launch block;
    # a new shape must still miss the guard, run correctly and recompile.
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path))  # no install records of other runs
    context(warmup=0, hot_count=0, hot_ms=0, tune_budget_ms=0, tune_cache=0, miss_recompile=2)
    f = shapevm.jit(progs.add, jit_level="O2", wait=True)
    for n in (4,) * 24 + (9,) * 6:
        x = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(f(x, x), x + x)
    st = f.stats()
    assert st["kernels_installed"] >= 2, st
    assert st["guard_misses"] >= 1, st


def test_o2_leaves_a_tiny_op_interpreted_and_compiles_a_large_one(context, tmp_path, monkeypatch):
    # hot_ms=1 (not 0): O2 judges whether a launch pays. A 1-element add costs less interpreted
    # than a compiled launch, decided from its element counts (no clock, so a loaded host or a
    # sanitizer cannot tip it); a 1M-element add is timed far over a launch and compiles.
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path))  # no install records of other tests
    context(warmup=0, hot_count=0, hot_ms=1, tune_budget_ms=0, tune_cache=0)
    rng = np.random.default_rng(11)
    tiny = shapevm.jit(progs.add, jit_level="O2", wait=True)
    x, y = rng.standard_normal(1).astype(np.float32), rng.standard_normal(1).astype(np.float32)
    for _ in range(5000):  # over 1 ms at the site on any host: hot, but cheaper interpreted
        out = tiny(x, y)
    np.testing.assert_array_equal(out, x + y)
    st = tiny.stats()
    assert st["launches_compiled"] == 0 and st["kernels_installed"] == 0, st
    large = shapevm.jit(progs.add, jit_level="O2", wait=True)
    a, b = rng.standard_normal(1 << 20).astype(np.float32), rng.standard_normal(1 << 20).astype(np.float32)
    for _ in range(12):
        np.testing.assert_array_equal(large(a, b), a + b)
    st = large.stats()
    assert st["kernels_installed"] >= 1 and st["launches_compiled"] >= 1, st


def test_a_new_function_object_installs_from_the_cache_on_first_sight(context, tmp_path, monkeypatch):
    # The first function's installs leave an install record beside the cached kernels; a second
    # function object over the same source (a new Session: as a new process would) installs the
    # recorded kernel after its first call, despite the default warm-up, with no LLVM codegen.
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path))
    defaults = {k: v for k, v in shapevm.get_context().items() if k in ("warmup", "hot_count", "hot_ms")}
    context(warmup=0, hot_count=0, hot_ms=0)
    x = np.linspace(-2.0, 2.0, 7, dtype=np.float32)
    f = shapevm.jit(progs.add, jit_level="O1", wait=True)
    for _ in range(3):
        f(x, x)
    assert f.stats()["codegen_count"] >= 1
    context(**defaults)
    g = shapevm.jit(progs.add, jit_level="O1", wait=True)
    for _ in range(2):
        np.testing.assert_array_equal(g(x, x), x + x)
    st = g.stats()
    assert st["compile"]["first_sight_installs"] >= 1, st["compile"]
    assert st["codegen_count"] == 0 and st["kernels_from_cache"] >= 1, st
    assert st["launches_compiled"] >= 1, st


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_ten_thousand_calls_flat_rss(context):
    eager(context)
    f = shapevm.jit(progs.two_outputs, jit_level="O2", wait=True)
    x, y = np.ones(64, np.float32), np.full(64, 2.0, np.float32)
    for _ in range(2000):
        f(x, y)
    gc.collect()
    before = _rss_kib()
    for _ in range(10000):
        a, b = f(x, y)
    gc.collect()
    grown = _rss_kib() - before
    assert grown < 4096, f"RSS grew by {grown} KiB over 10,000 calls"
    np.testing.assert_array_equal(a, x + y)


def test_module_dropped_while_compiling(context):
    eager(context)
    context(jit_test_compile_delay_ms=300)
    for _ in range(3):
        model = progs.Affine(64, 32, jit_level="O2")
        model(np.ones((3, 32), np.float32))  # queues compiles; the compile thread sleeps first
        del model
        gc.collect()
    f = shapevm.jit(progs.poly, jit_level="O2")
    f(np.ones((2, 2), np.float32))
    del f
    gc.collect()
    assert shapevm.jit(progs.add)(np.ones(2, np.float32), np.ones(2, np.float32)).tolist() == [2, 2]


# ---- errors ----

def _raises(cls, fn, *args, line=None, match=None):
    with pytest.raises(cls, match=match) as info:
        fn(*args)
    err = info.value
    if line is not None:
        assert err.line == line, f"{type(err).__qualname__}: line {err.line}, expected {line}: {err}"
    return err


def test_error_classes_with_lines(context):
    f32 = np.float32
    err = _raises(shapevm.ShapeError, shapevm.jit(progs.bad_matmul), np.ones((2, 3), f32), np.ones((4, 5), f32),
                  line=progs.line_of("LINE_MATMUL"), match=r"\[2,3\]")
    assert err.function == "bad_matmul" and err.pc is not None and err.file.endswith("pymodule_programs.py")
    _raises(shapevm.AssertionFailed, shapevm.jit(progs.checked), np.ones(2, f32), line=progs.line_of("LINE_ASSERT"),
            match="more than 3")
    _raises(shapevm.DTypeError, shapevm.jit(progs.take), np.ones(3, f32), np.zeros(2, f32),
            line=progs.line_of("LINE_GATHER"), match="int32 or int64")
    _raises(shapevm.IndexOutOfRange, shapevm.jit(progs.pick), np.ones(3, f32), 7, line=progs.line_of("LINE_INDEX"))
    context(max_steps=50)
    _raises(shapevm.LimitExceeded, shapevm.jit(progs.grow), np.ones(3, f32), 1000, line=progs.line_of("LINE_LOOP"))
    context(max_steps=0, max_tensor_bytes=1 << 20)
    _raises(shapevm.OutOfMemory, shapevm.jit(progs.big), 4096, line=progs.line_of("LINE_ALLOC"))
    context(max_tensor_bytes=16 << 30)
    # compile time: CompileError and the code's class, at the user's line
    for fn, code, marker in [(progs.unknown_op, "UnknownName", "LINE_UNKNOWN"),
                             (progs.uses_try, "Unsupported", "LINE_TRY"),
                             (progs.uses_comprehension, None, "LINE_COMPREHENSION"),
                             (progs.uses_numpy, None, "LINE_NUMPY")]:
        err = _raises(shapevm.CompileError, shapevm.jit, fn, line=progs.line_of(marker))
        assert err.function == fn.__name__ and err.file.endswith("pymodule_programs.py"), (err.function, err.file)
        if code:
            assert isinstance(err, shapevm.errors.BY_CODE[code]), type(err).__qualname__
    # arguments
    _raises(shapevm.DTypeError, shapevm.jit(progs.add), np.ones(2, np.complex64), np.ones(2, f32), match="complex64")
    _raises(shapevm.KindError, shapevm.jit(progs.add), [1.0, 2.0], np.ones(2, f32), match="list")


def test_load_errors_and_formats(tmp_path):
    _raises(shapevm.IoError, shapevm.load, tmp_path / "missing.py")
    bad = tmp_path / "bad.svm"
    bad.write_bytes(b"not a module at all")
    _raises(shapevm.BadFormat, shapevm.load, bad)
    err = _raises(shapevm.VerifyError, shapevm.load, ROOT / "tests" / "must_fail" / "verify_jump_target.svasm")
    assert isinstance(err, shapevm.CompileError)
    _raises(shapevm.ParseError, shapevm.load, ROOT / "tests" / "must_fail" / "parse_bad_token.svasm")
    src = tmp_path / "prog.py"
    src.write_text("from shapevm import ops, Tensor\n\n\ndef f(x: Tensor[None]):\n    return ops.nope(x)\n")
    _raises(shapevm.UnknownName, shapevm.load, src, line=5)

    rng = np.random.default_rng(8)
    args = dict(x=rng.standard_normal((2, 3, 128)).astype(np.float32), h=rng.standard_normal((2, 256)).astype(np.float32),
                c=rng.standard_normal((2, 256)).astype(np.float32),
                W_ih=(0.1 * rng.standard_normal((1024, 128))).astype(np.float32),
                W_hh=(0.1 * rng.standard_normal((1024, 256))).astype(np.float32),
                b_ih=rng.standard_normal(1024).astype(np.float32), b_hh=rng.standard_normal(1024).astype(np.float32))
    py = shapevm.load(ROOT / "examples" / "lstm_cell.py")
    h_py, c_py = py.lstm_cell(**args)
    asm = shapevm.load(ROOT / "examples" / "lstm_cell.svasm")
    h_asm, _ = getattr(asm, asm.functions[0])(*args.values())
    np.testing.assert_allclose(h_asm, h_py, rtol=1e-5, atol=1e-6)
    py.program.save(str(tmp_path / "cell.svm"))
    binary = shapevm.load(tmp_path / "cell.svm")
    np.testing.assert_allclose(binary.lstm_cell(**args)[1], c_py, rtol=1e-5, atol=1e-6)
    with pytest.raises(AttributeError, match="lstm_cell"):
        py.no_such_function  # noqa: B018


# ---- bad input: a clear exception, and the interpreter stays usable ----

def test_bad_input(context):
    f = shapevm.jit(progs.add)
    ok = lambda: f(np.ones(3, np.float32), np.ones(3, np.float32)).tolist() == [2.0, 2.0, 2.0]  # noqa: E731
    f32 = np.float32
    cases = [
        (shapevm.ShapeError, (np.ones((3, 1), f32), np.ones(3, f32)), {}, r"expected rank 1 .* got shape \[3,1\]"),
        (shapevm.ShapeError, (np.ones(3, f32), np.ones(4, f32)), {}, r"\[3\] and \[4\]"),  # do not broadcast
        (shapevm.KindError, ("abc", np.ones(3, f32)), {}, "str"),  # non-numpy objects
        (shapevm.KindError, (None, np.ones(3, f32)), {}, "NoneType"),
        (shapevm.DTypeError, (np.array([1, "a"], dtype=object), np.ones(2, f32)), {}, "object"),  # object arrays
        (shapevm.DTypeError, (np.ones(3, np.complex128), np.ones(3, f32)), {}, "complex128"),
        (shapevm.DTypeError, (np.ones(3, np.uint8), np.ones(3, f32)), {}, "uint8"),
        (shapevm.InvalidArgument, (np.ones(3, f32),), {}, "missing argument 'y'"),  # missing
        (shapevm.InvalidArgument, (np.ones(3, f32),) * 3, {}, "takes 2 arguments"),  # extra
        (shapevm.InvalidArgument, (np.ones(3, f32),), {"z": 1}, "unexpected keyword argument 'z'"),  # bad keyword
        (shapevm.InvalidArgument, (np.ones(3, f32),), {"x": np.ones(3, f32)}, "multiple values"),
    ]
    for cls, args, kwargs, match in cases:
        with pytest.raises(cls, match=match):
            f(*args, **kwargs)
        assert ok()
    with pytest.raises(shapevm.DTypeError, match="indices must be int32 or int64"):  # a dtype the op rejects
        shapevm.jit(progs.take)(np.ones(3, f32), np.zeros(2, f32))
    with pytest.raises(shapevm.ShapeError, match=r"parameter 'x'.*\[3,5\]"):  # a static dim
        shapevm.jit(progs.fixed_width)(np.ones((3, 5), f32))
    assert ok()
    # functions that cannot be compiled: CompileError at decoration time, naming the construct
    with pytest.raises(shapevm.CompileError, match=r"\*args") as info:
        shapevm.jit(progs.with_star_args)
    assert info.value.line == progs.with_star_args.__code__.co_firstlineno
    with pytest.raises(shapevm.CompileError, match="lambda"):
        shapevm.jit(lambda x: x)
    namespace = {}
    exec("def repl_function(x):\n    return x\n", namespace)  # no source file, as in the REPL
    with pytest.raises(shapevm.CompileError, match="source is not available"):
        shapevm.jit(namespace["repl_function"])
    with pytest.raises(shapevm.CompileError, match="only a Python function"):
        shapevm.jit(len)
    assert ok()


def test_wrong_shape_names_the_parameter():
    f = shapevm.jit(progs.scaled_softmax)
    with pytest.raises(shapevm.Error) as info:
        f(np.ones(3, np.float32), 0.5)
    assert "x" in str(info.value) and "[3]" in str(info.value)
    with pytest.raises(shapevm.KindError, match="'t'"):
        f(np.ones((2, 2), np.float32), "half")


# ---- logging ----

def test_jit_log_goes_to_python_logging(context, caplog):
    eager(context)
    context(jit_log=True)
    caplog.set_level(logging.INFO, logger="shapevm.jit")
    f = shapevm.jit(progs.poly, jit_level="O1", wait=True)
    x = np.ones((3, 4), np.float32)
    for _ in range(3):
        f(x)
    shapevm._core._flush()
    records = [r for r in caplog.records if r.name == "shapevm.jit"]
    assert records, "no JIT log line reached logging.getLogger('shapevm.jit')"
    assert any("compiled" in r.getMessage().lower() or "hot" in r.getMessage().lower() for r in records)


def test_jit_copies_only_free_module_names_and_the_shapevm_import():
    # Module-level `x` and `y` (numpy arrays, not constants) share names with the function's
    # parameter and local; `import numpy as np, shapevm` shares a line with numpy. Only SCALE is free.
    import pymodule_scoping as prog
    fn = shapevm.jit(prog.softmax_of_param)
    a = np.random.default_rng(7).standard_normal((5, 9)).astype(np.float32)
    got = fn(a, 2.0)
    z = a * 2.0 * prog.SCALE
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-6)
