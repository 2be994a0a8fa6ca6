# SPDX-License-Identifier: Apache-2.0
# The golden corpus of the Python frontend (tests/frontend_corpus/*.py, format in its README.md):
# each program's inline expectations (outputs, compile errors, runtime errors, disassembly), and
# a differential check: every program that runs is executed by `shapevm run prog.py` and by
# CPython with python/shapevm as `ops`, on fresh random inputs and random dynamic dims.
import numpy as np
import pytest

from frontend_harness import (CRASH_MARKERS, ROOT, check_expectations, compare, dis_matches, entry_params, find_entry,
                              load_module, make_case, parse_header, run_cpython, run_shapevm, strip_dis)

CORPUS = ROOT / "tests" / "frontend_corpus"
PROGRAMS = sorted(CORPUS.glob("*.py"))


def _param(path):
    spec = parse_header(path)
    marks = [pytest.mark.xfail(strict=True, reason=spec.xfail)] if spec.xfail else []
    return pytest.param(path, id=path.stem, marks=marks)


def assert_clean_failure(code, err, needles, what):
    assert code != 0, f"{what}: expected a failure, got exit 0"
    assert code > 0, f"{what}: killed by signal {-code}\n{err}"
    for marker in CRASH_MARKERS:
        assert marker not in err, f"{what}: crash marker {marker!r}:\n{err}"
    for needle in needles:
        assert needle in err, f"{what}: {needle!r} not in the error message:\n{err}"


@pytest.mark.parametrize("path", [_param(p) for p in PROGRAMS])
def test_corpus_program(run_cli, tmp_path, path):
    spec = parse_header(path)
    rng = np.random.default_rng()  # fresh every run

    if spec.compile_errors:
        code, out, err = run_cli("compile", path, "-o", tmp_path / "prog.svm", *(["--fn", spec.fn] if spec.fn else []))
        assert_clean_failure(code, err + out, spec.compile_errors, "shapevm compile")
        code, out, err = run_cli("run", path, "--quiet", *(["--fn", spec.fn] if spec.fn else []))
        assert_clean_failure(code, err + out, spec.compile_errors, "shapevm run")
        return

    assert spec.fn, f"{path.name}: a runnable program needs `# run: --fn NAME`"
    entry = entry_params(find_entry(path.read_text(), spec.fn)[1])

    for flags, kind, pattern, count in spec.dis:
        code, out, err = run_cli("dis", path, "--fn", spec.fn, *flags.split())
        assert code == 0, f"shapevm dis {flags} failed:\n{err}"
        found = dis_matches(strip_dis(out), pattern)
        shown = f"shapevm dis {path.name} --fn {spec.fn} {flags}:\n{out}"
        if kind == "has":
            assert found, f"{pattern!r} not in the disassembly; {shown}"
        elif kind == "not":
            assert not found, f"{pattern!r} found {found}x in the disassembly; {shown}"
        else:
            assert found == count, f"{pattern!r} found {found}x, expected {count}; {shown}"

    module = None if spec.no_diff and spec.runtime_errors else load_module(path)
    for run in range(spec.runs):
        case = make_case(spec, entry, rng)
        code, outs, err = run_shapevm(run_cli, spec, case, tmp_path)
        if spec.runtime_errors:
            assert_clean_failure(code, err, spec.runtime_errors, "shapevm run")
            if not spec.no_diff:
                with pytest.raises(Exception):  # the oracle must reject the same input
                    run_cpython(spec, case, module)
            continue
        assert code == 0, f"shapevm run failed (dims {case.dims}):\n{err}"
        check_expectations(spec, outs, case.dims)
        if spec.no_diff:
            continue
        expected = run_cpython(spec, case, module)
        assert len(outs) == len(expected), f"{len(outs)} outputs (shapevm) vs {len(expected)} (cpython)"
        for i, (a, e) in enumerate(zip(outs, expected)):
            compare(a, e, spec.tol, f"out{i} (run {run}, dims {case.dims})")


def test_corpus_is_large_and_annotated():
    assert len(PROGRAMS) >= 60, f"only {len(PROGRAMS)} corpus programs"
    for path in PROGRAMS:
        spec = parse_header(path)
        assert spec.fn or spec.compile_errors, f"{path.name}: neither `# run:` nor `# expect-compile-error:`"
        assert spec.expects or spec.compile_errors or spec.runtime_errors or spec.dis, \
            f"{path.name}: states no expectation"


def test_every_op_is_used_by_a_running_program():
    """Each op of src/ops/ops.def (but the internal add_n and slice, reached through `+` and
    indexing) is called as ops.NAME by a corpus program that is not a known failure."""
    import re

    names = re.findall(r'^SVM_OP\(\w+,\s*"(\w+)"', (ROOT / "src" / "ops" / "ops.def").read_text(), flags=re.M)
    used = set()
    for path in PROGRAMS:
        spec = parse_header(path)
        if spec.runnable and not spec.xfail and not spec.runtime_errors:
            used |= set(re.findall(r"\bops\.(\w+)\(", path.read_text()))
    missing = [n for n in names if n not in used and n not in ("add_n", "slice")]
    assert not missing, f"ops without a passing corpus program: {missing}"
