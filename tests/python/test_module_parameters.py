# SPDX-License-Identifier: Apache-2.0
# A Module's parameters (docs/python.md "Derived parameters"): pure expressions of parameters are
# computed once per weight assignment and bound to a construct specialized to their shapes; the
# results equal the plain program's (which reads and casts them every call) bit for bit; a
# reassignment takes effect on the next call; threads and 10,000 calls; shapevm.Parameter holds a
# weight in bfloat16.
import gc
import os
import threading

import numpy as np
import pytest

import shapevm

if getattr(shapevm, "_core", None) is None:
    pytest.skip("this build has no Python module", allow_module_level=True)

import module_parameter_programs as progs  # noqa: E402  (tests/python)

BF16_TOLERANCE = 1.6e-2  # validate.cc's relative L2 bound for bfloat16


@pytest.fixture
def context(tmp_path):
    before = shapevm.get_context()
    saved = os.environ.get("SHAPEVM_CACHE_DIR")
    os.environ["SHAPEVM_CACHE_DIR"] = str(tmp_path)  # no install records from other tests
    shapevm.set_context(warmup=0, hot_count=0, hot_ms=0, tune_budget_ms=0, tune_cache=0)
    yield shapevm.set_context
    changed = {k: v for k, v in shapevm.get_context().items() if before.get(k) != v}
    shapevm.set_context(**{k: before[k] for k in changed})
    if saved is None:
        os.environ.pop("SHAPEVM_CACHE_DIR", None)
    else:
        os.environ["SHAPEVM_CACHE_DIR"] = saved


def plain(module, *args):
    """The unspecialized program: reads (and casts) every parameter at every call."""
    return module._shapevm_function().call_bound(module, *args)


def same(actual, expected, level, tolerance=BF16_TOLERANCE):
    """Bit for bit where both programs run the same reference kernels (O0); at O2 each program
    compiles its own kernels (the specialized one for static weight shapes), whose rounding may
    differ: within the dtype's tolerance."""
    if level == "O0":
        np.testing.assert_array_equal(actual, expected)
    else:
        assert rel_l2(actual, np.asarray(expected, np.float64)) < tolerance


def bf16(a):
    """float32 rounded to the nearest bfloat16 (ties to even), as float32."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def rel_l2(actual, expected):
    return float(np.linalg.norm(np.asarray(actual, np.float64) - expected) / np.linalg.norm(expected))


def cell_weights(seed):
    rng = np.random.default_rng(seed)
    return {"W_ih": rng.uniform(-0.3, 0.3, (128, 16)).astype(np.float32),
            "W_hh": rng.uniform(-0.3, 0.3, (128, 32)).astype(np.float32),
            "b_ih": rng.uniform(-0.3, 0.3, 128).astype(np.float32),
            "b_hh": rng.uniform(-0.3, 0.3, 128).astype(np.float32)}


def cell_reference(w, x, h, c):
    p = {k: v.astype(np.float64) for k, v in w.items()}
    batch, seq, _ = x.shape
    gx = (x.reshape(batch * seq, 16) @ p["W_ih"].T + p["b_ih"] + p["b_hh"]).reshape(batch, seq, 128)
    i, f, g, o = np.split(gx + (h @ p["W_hh"].T)[:, None, :], 4, axis=2)
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
    c_next = sig(f) * c[:, None, :] + sig(i) * np.tanh(g)
    return sig(o) * np.tanh(c_next), c_next


def in_threads(targets, meanwhile=None, stop=None):
    """Runs each target on a thread of its own (and `meanwhile` on this one, then sets `stop`)."""
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    try:
        if meanwhile is not None:
            meanwhile()
    finally:
        if stop is not None:
            stop.set()
        for t in threads:
            t.join()


def test_the_plan_hoists_casts_transposes_and_parameter_arithmetic():
    plan = progs.Bf16LstmCell._shapevm_plan
    assert plan is not None and plan.params == ["W_hh", "W_ih", "b_hh", "b_ih"]
    # w_ih.T, bias, w_hh.T: computed by the derive program; nothing is read raw.
    assert [kind for kind, _ in plan.items] == ["derived"] * 3
    source = plan.construct_source([(16, 128), (128,), (32, 128)])
    assert "self." not in source.split("def construct", 1)[1] and "Tensor[16, 128]" in source
    assert "ops.cast(self.W_ih" in plan.derive[0]
    # Lines stay the user's: construct's statements keep their line numbers.
    original = open(progs.__file__).read().splitlines()
    rewritten = source.splitlines()
    line = next(n for n, text in enumerate(original) if "gates = ops.reshape(gx, (batch, seq, ROWS)) + ops.unsqueeze("
                in text and "bfloat16" in text)
    assert rewritten[line].startswith(original[line][:original[line].index("ops.unsqueeze")])


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_derived_once_equal_bit_for_bit_and_reassignment_takes_effect(context, level):
    model = progs.Bf16Affine(256, 128, jit_level=level, wait=True)  # 32768 elements: packable
    x = np.random.default_rng(5).standard_normal((9, 128)).astype(np.float32)
    for _ in range(6):
        first = model(x)
    same(first, plain(model, x), level)
    stats = model.stats()
    assert stats["module"] == {"specialized": True, "derive_runs": 1, "derived": 2, "programs": 1}, stats["module"]
    want = bf16(bf16(x) @ bf16(model.weight).T.astype(np.float64) + bf16(model.bias))
    assert rel_l2(first, want) < BF16_TOLERANCE
    # The casts run once, not per call: the specialized program runs fewer instructions per call.
    specialized = stats["instructions"] / stats["runs"]
    unspecialized = model._shapevm_function().program.stats()
    assert specialized < unspecialized["instructions"] / unspecialized["runs"]
    if level == "O2":
        assert stats["launches_compiled"] > 0
    # A new weight takes effect on the next call (derived again, same program: same shapes) ...
    model.weight = -model.weight
    second = model(x)
    same(second, plain(model, x), level)
    assert not np.allclose(first, second)
    assert model.stats()["module"]["derive_runs"] == 2 and model.stats()["module"]["programs"] == 1
    # ... and a new shape gets a program of its own.
    model.weight = np.random.default_rng(6).standard_normal((256, 64)).astype(np.float32)
    y = np.random.default_rng(7).standard_normal((3, 64)).astype(np.float32)
    same(model(y), plain(model, y), level)
    assert model.stats()["module"] == {"specialized": True, "derive_runs": 3, "derived": 2, "programs": 2}
    # Calls between assignments compute nothing again.
    for _ in range(5):
        model(y)
    assert model.stats()["module"]["derive_runs"] == 3


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_bf16_cell_matches_the_f32_cell_within_bf16_tolerance(context, level):
    w = cell_weights(11)
    cell32 = progs.LstmCell(w, jit_level=level, wait=True)
    cell16 = progs.Bf16LstmCell(w, jit_level=level, wait=True)
    rng = np.random.default_rng(12)
    for seq in (3, 7, 3, 7, 5):
        x = rng.standard_normal((4, seq, 16)).astype(np.float32)
        h = rng.standard_normal((4, 32)).astype(np.float32)
        c = rng.standard_normal((4, 32)).astype(np.float32)
        want = cell_reference(w, x, h, c)
        got32, got16 = cell32(x, h, c), cell16(x, h, c)
        for a, b, r in zip(got32, got16, want):
            assert rel_l2(a, r) < 1e-5
            assert rel_l2(b, r) < BF16_TOLERANCE
            assert rel_l2(b, a) < BF16_TOLERANCE
        for got, module, tolerance in ((got32, cell32, 1e-5), (got16, cell16, BF16_TOLERANCE)):
            for a, b in zip(got, plain(module, x, h, c)):
                same(a, b, level, tolerance)
    for module in (cell32, cell16):
        stats = module.stats()
        assert stats["module"]["derive_runs"] == 1 and stats["module"]["specialized"]
        assert (stats["launches_compiled"] > 0) == (level == "O2")


def test_eight_threads_one_module(context):
    model = progs.Bf16Affine(128, 64, jit_level="O0")  # results equal the plain program's bit for bit
    rng = np.random.default_rng(8)
    inputs = [rng.standard_normal((5 + i, 64)).astype(np.float32) for i in range(8)]
    want = [plain(model, x) for x in inputs]
    errors = []

    def work(i):
        try:
            for _ in range(40):
                np.testing.assert_array_equal(model(inputs[i]), want[i])
        except Exception as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    in_threads([lambda i=i: work(i) for i in range(8)])
    assert not errors, errors[0]
    assert model.stats()["module"]["derive_runs"] == 1


def test_reassignment_while_eight_threads_call(context):
    """Calls racing with assignments see one weight or the other, never a stale derivation after
    the assignment returned."""
    model = progs.Bf16Affine(64, 32, jit_level="O0")
    x = np.random.default_rng(9).standard_normal((4, 32)).astype(np.float32)
    weights = [np.random.default_rng(s).standard_normal((64, 32)).astype(np.float32) for s in (1, 2)]
    results = []
    for w in weights:
        model.weight = w
        results.append(plain(model, x))
    stop = threading.Event()
    errors = []

    def call():
        while not stop.is_set():
            y = model(x)
            if not any(np.array_equal(y, r) for r in results):
                errors.append("a result from neither weight")

    def assign():
        for k in range(30):
            model.weight = weights[k % 2]
            np.testing.assert_array_equal(model(x), results[k % 2])  # this thread sees its assignment

    in_threads([call] * 8, assign, stop)
    assert not errors, errors[:3]


def test_held_bf16_parameter(context):
    rng = np.random.default_rng(10)
    weight = rng.standard_normal((96, 48)).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    model = progs.HeldBf16Affine(weight, bias, jit_level="O2", wait=True)
    assert isinstance(model.weight, shapevm.Parameter)
    assert model.weight.shape == (96, 48) and model.weight.dtype == "bfloat16" and model.weight.ndim == 2
    np.testing.assert_array_equal(np.asarray(model.weight), bf16(weight))  # rounded to nearest even, widened back
    with pytest.raises(shapevm.DTypeError):
        shapevm.Parameter(np.ones(3, np.complex64))
    with pytest.raises(ValueError, match="dtype"):
        shapevm.Parameter(weight, "nonsense")
    kept = shapevm.Parameter(weight)  # its own dtype: a read-only float32 copy
    assert kept.dtype == "float32" and not np.asarray(kept).flags.writeable
    assert np.asarray(kept).tolist() == weight.tolist()
    x = rng.standard_normal((7, 48)).astype(np.float32)
    for _ in range(4):
        got = model(x)
    same(got, plain(model, x), "O2")
    # The same as casting float32 weights inside (the weights round to the same bfloat16 values).
    cast_inside = progs.Bf16Affine(96, 48, jit_level="O0")
    cast_inside.weight, cast_inside.bias = weight, bias
    same(got, cast_inside(x), "O2")
    assert model.stats()["module"]["specialized"] and model.stats()["module"]["derive_runs"] == 1


def test_a_failing_derivation_falls_back_to_the_plain_program(context):
    model = progs.GuardedReshape(jit_level="O0")
    x = np.random.default_rng(11).standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(model(x, 0), x @ model.weight.T, rtol=1e-5, atol=1e-5)
    assert model.stats()["module"]["specialized"] is False
    with pytest.raises(shapevm.ShapeError):
        model(x, 1)
    model.weight = np.ones((32, 64), np.float32)  # now the reshape derives: specialized again
    np.testing.assert_array_equal(model(np.ones((3, 64), np.float32), 1), np.full((3, 32), 64, np.float32))
    assert model.stats()["module"]["specialized"] is True


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_ten_thousand_module_calls_and_reassignments_flat_rss(context):
    model = progs.Bf16Affine(64, 32, jit_level="O0")
    x = np.random.default_rng(12).standard_normal((2, 32)).astype(np.float32)
    weights = [np.random.default_rng(s).standard_normal((64, 32)).astype(np.float32) for s in (1, 2)]
    for k in range(2000):
        if k % 10 == 0:
            model.weight = weights[k // 10 % 2]
        model(x)
    gc.collect()
    before = _rss_kib()
    for k in range(10000):
        if k % 10 == 0:
            model.weight = weights[k // 10 % 2]
        y = model(x)
    gc.collect()
    grown = _rss_kib() - before
    assert grown < 4096, f"RSS grew by {grown} KiB over 10,000 calls and 1,000 assignments"
    np.testing.assert_array_equal(y, plain(model, x))


def test_a_name_that_shadows_an_argument_is_not_derived(context):
    plan = progs.Shadowing._shapevm_plan
    assert plan.items == [("attr", "weight"), ("derived", 0)]
    model = progs.Shadowing(jit_level="O0")
    x = np.random.default_rng(13).standard_normal((5, 8)).astype(np.float32)
    got = model(x)
    np.testing.assert_array_equal(got, plain(model, x))
    np.testing.assert_allclose(got, (x @ model.weight) @ (2.0 * model.weight), rtol=1e-4, atol=1e-4)
