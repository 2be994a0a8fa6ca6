# SPDX-License-Identifier: Apache-2.0
# The numpy oracle (python/shapevm/ops.py) against the op table: `shapevm ops --json` gives every
# ops.def row with its Python binding (derived by the frontend from the table). Each bound op
# must exist in the oracle with the same parameters and defaults, the oracle must define no op
# the table lacks, and its result dtypes must follow each op's dtype rule.
import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))

from shapevm import ops  # noqa: E402  (the numpy oracle)


@pytest.fixture(scope="module")
def table(shapevm_bin):
    out = subprocess.run([shapevm_bin, "ops", "--json"], capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)
    assert len(rows) >= 50
    return rows


def test_json_lists_every_row_of_ops_def_with_every_column(table):
    text = (ROOT / "src" / "ops" / "ops.def").read_text()
    names = [line.split('"')[1] for line in text.splitlines() if line.startswith("SVM_OP(")]
    assert [row["name"] for row in table] == names
    for row in table:
        assert row["class"] and row["dtype_rule"] and row["shape_fn"].startswith("shape") and row["jit"], row["name"]


def _oracle_ops():
    return {name for name in ops.__all__ if callable(getattr(ops, name)) and name not in ("Tensor", "DType")
            and not isinstance(getattr(ops, name), ops.DType)}


def test_oracle_defines_exactly_the_bound_ops(table):
    bound = {row["name"] for row in table if row["python"] is not None}
    oracle = _oracle_ops()
    assert bound - oracle == set(), f"ops in ops.def without a numpy oracle in python/shapevm/ops.py: {sorted(bound - oracle)}"
    assert oracle - bound == set(), f"oracle functions that are not ops.def ops: {sorted(oracle - bound)}"


def _same_default(text, value):
    if text is None:
        return value is inspect.Parameter.empty
    if value is inspect.Parameter.empty:
        return False
    if text == "None":
        return value is None
    if text in ("True", "False"):
        return value is (text == "True")
    if isinstance(value, ops.DType):
        return value.name == text
    try:
        return float(text) == float(value)
    except (TypeError, ValueError):
        return False


def test_oracle_signatures_match_the_frontend_bindings(table):
    for row in table:
        if row["python"] is None:
            continue
        params = list(inspect.signature(getattr(ops, row["name"])).parameters.values())
        want = row["python"]
        if len(params) == 1 and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
            # add_n(*xs) also takes the one list the frontend binds
            assert [p["name"] for p in want] == ["tensors"], row["name"]
            continue
        assert [p.name for p in params] == [p["name"] for p in want], row["name"]
        for p, w in zip(params, want):
            assert _same_default(w["default"], p.default), f"{row['name']}({p.name}): oracle {p.default!r}, table {w['default']}"


DTYPES = [ops.bool, ops.int32, ops.int64, ops.float16, ops.float32, ops.float64]


def _tensor(dtype, shape=(2, 3)):
    values = np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape) % 3
    return ops.cast(values.view(ops.Tensor), dtype)


def _expected(rule, dtypes):
    first = dtypes[0]
    promoted = first
    for d in dtypes[1:]:
        promoted = ops._promote(promoted, d)
    return {
        "same": first,
        "promote": promoted,
        "bool": ops.bool,
        "float": first if first.is_float else ops.float32,
        "int64": ops.int64,
        "sum": first if first.is_float else ops.int64,
        "mean": first if first.is_float else ops.float32,
    }.get(rule)


@pytest.mark.parametrize("klass", ["unary", "binary", "compare", "reduction", "nary", "copy"])
def test_oracle_dtypes_follow_the_dtype_rules(table, klass):
    checked = 0
    for row in table:
        if row["class"] != klass or row["python"] is None:
            continue
        fn = getattr(ops, row["name"])
        arity = 2 if klass in ("binary", "compare", "nary") else 1
        for a in DTYPES:
            for b in (DTYPES if arity == 2 else [a]):
                inputs = [_tensor(a), _tensor(b)][:arity]
                want = _expected(row["dtype_rule"], [a, b][:arity])
                if want is None:
                    continue
                try:
                    got = (fn(inputs) if klass == "nary" else fn(*inputs)).svm_dtype
                except (TypeError, ValueError, ZeroDivisionError):
                    continue  # the op rejects these dtypes (e.g. logical ops on non-bool, neg on bool)
                assert got is want, f"{row['name']}({a.name}{', ' + b.name if arity == 2 else ''}): oracle {got.name}, rule {row['dtype_rule']} says {want.name}"
                checked += 1
    assert checked >= 10
