# SPDX-License-Identifier: Apache-2.0
# The reference workload (docs/reference-workload.md) as Python source: examples/lstm_cell.py (flattened
# cell) and examples/lstm_loop.py (looped recurrence) run through `shapevm run` with batch 32 and
# seq 10, 20, 30, 120, compared with the same files executed by CPython with python/shapevm as
# `ops`: relative L2 <= 1e-5 in float32; float16 inputs within relative L2 <= 3e-3.
import ast

import numpy as np
import pytest

from frontend_harness import ROOT, Case, compare, load_module, parse_header, rel_l2, run_cpython, run_shapevm

EXAMPLES = ROOT / "examples"
BATCH = 32
HIDDEN, INPUT, GATES = 256, 128, 1024
# float16: ShapeVM rounds every op result to float16 (computing in float32), the oracle rounds
# from float64; observed relative L2 ~3e-5 (cell) and ~4e-4 (loop, 120 recurrent steps).
F16_REL_L2 = 3e-3


def tensor_shape(name, seq):
    """The workload's shapes by parameter name (docs/reference-workload.md)."""
    key = name.lower()
    shapes = {"x": (BATCH, seq, INPUT), "h": (BATCH, HIDDEN), "c": (BATCH, HIDDEN), "w_ih": (GATES, INPUT),
              "w_hh": (GATES, HIDDEN), "b_ih": (GATES,), "b_hh": (GATES,)}
    for prefix in ("h", "c"):
        if key in (f"{prefix}0", f"{prefix}_0", f"{prefix}_prev", f"{prefix}x"):
            return shapes[prefix]
    return shapes.get(key)


def entry_of(path):
    """(spec, entry parameter names, self.* names): `# run: --fn` if the file says, else the
    construct method of its class, else its only function."""
    spec = parse_header(path)
    tree = ast.parse(path.read_text())
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not spec.fn:
        ctor = [(c, m) for c in classes for m in c.body if isinstance(m, ast.FunctionDef) and m.name == "construct"]
        if ctor:
            spec.fn = f"{ctor[0][0].name}.construct"
        elif len(funcs) == 1:
            spec.fn = funcs[0].name
        else:
            pytest.skip(f"{path.name}: cannot tell the entry function; add `# run: --fn NAME`")
    name = spec.fn.split(".")[-1]
    scope = [m for c in classes for m in c.body if isinstance(m, ast.FunctionDef)] + funcs
    fdef = next(f for f in scope if f.name == name)
    params = [a.arg for a in fdef.args.args if a.arg != "self"]
    attrs = sorted({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                    and n.value.id == "self"})
    methods = {m.name for c in classes for m in c.body if isinstance(m, ast.FunctionDef)}
    return spec, params, [a for a in attrs if a not in methods]


def make_workload_case(rng, params, attrs, seq, dtype):
    def draw(name, scale):
        shape = tensor_shape(name, seq)
        if shape is None:
            pytest.skip(f"parameter {name!r} is not one of the workload's (x, h, c, W_ih, W_hh, b_ih, b_hh)")
        return (scale * rng.standard_normal(shape)).astype(dtype)

    scale = {"w_ih": 0.1, "w_hh": 0.1}
    inputs = {p: draw(p, scale.get(p.lower(), 1.0)) for p in params}
    weights = {a: draw(a, scale.get(a.lower(), 1.0)) for a in attrs}
    return Case(inputs, {}, weights, {"seq": seq})


# float32 at every seq; float16 at the shortest and the longest
CASES = [(v, s, "float32") for v in ("lstm_cell", "lstm_loop") for s in (10, 20, 30, 120)] + \
        [(v, s, "float16") for v in ("lstm_cell", "lstm_loop") for s in (10, 120)]


@pytest.mark.parametrize("variant,seq,dtype", CASES, ids=[f"{v}-seq{s}-{d}" for v, s, d in CASES])
def test_workload_matches_cpython(run_cli, tmp_path, variant, seq, dtype):
    path = EXAMPLES / f"{variant}.py"
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} does not exist yet (written with the frontend)")
    spec, params, attrs = entry_of(path)
    rng = np.random.default_rng()  # fresh inputs every run
    case = make_workload_case(rng, params, attrs, seq, np.float32 if dtype == "float32" else np.float16)
    code, outs, err = run_shapevm(run_cli, spec, case, tmp_path)
    assert code == 0, f"shapevm run {path.name} failed:\n{err}"
    expected = run_cpython(spec, case, load_module(path))
    assert len(outs) == len(expected) >= 1
    for i, (a, e) in enumerate(zip(outs, expected)):
        assert a.dtype == e.dtype == np.dtype(dtype), f"out{i}: dtype {a.dtype} vs {e.dtype}"
        assert a.shape == e.shape, f"out{i}: shape {a.shape} vs {e.shape}"
        assert a.shape[0] == BATCH and a.shape[-1] == HIDDEN, f"out{i}: unexpected shape {a.shape}"
        if variant == "lstm_cell" and a.ndim == 3:
            assert a.shape[1] == seq
        err = rel_l2(a, e.astype(np.float64))
        limit = 1e-5 if dtype == "float32" else F16_REL_L2
        assert err <= limit, f"out{i}: relative L2 {err:.3g} > {limit:g} ({variant}, seq {seq}, {dtype})"
        if dtype == "float32":
            compare(a, e, None, f"out{i}")
    if dtype == "float32":
        check_against_reference(variant, case, expected)


def check_against_reference(variant, case, expected):
    """The CPython run agrees with the independent float64 numpy model of test_reference_workload.py
    (so the example files implement the workload, not just agree with themselves)."""
    from test_reference_workload import lstm_flat, lstm_loop

    values = {k.lower(): v.astype(np.float64) for k, v in {**case.inputs, **case.params}.items()}
    values.update({k: values[a] for a in list(values) for k in ("h", "c") if tensor_shape(a, 1) and a != k
                   and a.startswith(k) and k not in values})
    names = ["x", "h", "c", "w_ih", "w_hh", "b_ih", "b_hh"]
    if not all(n in values for n in names):
        return
    reference = (lstm_flat if variant == "lstm_cell" else lstm_loop)(*(values[n] for n in names))
    for i, (e, r) in enumerate(zip(expected, reference)):
        if e.shape == r.shape:
            assert rel_l2(e, r) <= 1e-5, f"out{i}: the CPython run differs from the float64 reference"
