# SPDX-License-Identifier: Apache-2.0
# The tiered JIT through the CLI: the reference workload at O1 with seq cycling 10, 20, 30 (log
# lines in the exact format, the matmul site compiled once per shape range, outputs equal to O0
# and to numpy), the frontend corpus at O1 with every threshold 0 equal to O0, the switches
# (flags and environment variables), rewritten shape tokens, and bad JIT flags.
import re

import numpy as np
import pytest

from conftest import ROOT
from frontend_harness import compare, entry_params, find_entry, make_case, parse_header, run_shapevm, runnable_corpus
from test_reference_workload import lstm_flat, lstm_loop, make_inputs, rel_l2

EXAMPLES = ROOT / "examples"
CORPUS = ROOT / "tests" / "frontend_corpus"
EAGER = ["--warmup", "0", "--hot-count", "0", "--hot-ms", "0", "--jit-wait"]

HOT_LINE = re.compile(r"^\[INFO\] JIT: Hot path detected at PC=0x[0-9A-F]{2,}, signature=(\w+):(\([0-9,]*\)(x\([0-9,]*\))*)$")
KERNEL_LINE = re.compile(r"^\[INFO\] JIT: Kernel generated in \d+ms, replaced dispatch entry$")
INSTALLED = re.compile(r"^\[INFO\] JIT: Installed svm_\w+ at PC=0x([0-9A-F]+) for (\w+):(\S+) \(")


def workload_files(tmp_path, rng, seq):
    inputs = make_inputs(rng, 32, seq)
    weights = {k: inputs.pop(k) for k in ["W_ih", "W_hh", "b_ih", "b_hh"]}
    np.savez(tmp_path / "params.npz", **weights)
    return inputs, weights


@pytest.mark.parametrize("program", ["lstm_cell.py", "lstm_loop.py"])
def test_reference_workload_at_o1_logs_compiles_once_per_range_and_equals_o0(run_cli, tmp_path, program):
    rng = np.random.default_rng()
    _, weights = workload_files(tmp_path, rng, 10)
    common = ["run", EXAMPLES / program, "--params", tmp_path / "params.npz", "--dim", "batch=32",
              "--dim", "seq=10,20,30", "--iters", "30", "--seed", str(int(rng.integers(1 << 30))), "--quiet"]
    code, _, err0 = run_cli(*common, "--jit-level", "O0", "--out", tmp_path / "o0.npz")
    assert code == 0, err0
    code, out, err = run_cli(*common, "--jit-level", "O1", "--jit-log", "--jit-wait", "--stats",
                             "--out", tmp_path / "o1.npz")
    assert code == 0, err
    lines = err.splitlines()
    hot = [m for m in map(HOT_LINE.match, lines) if m]
    generated = [line for line in lines if KERNEL_LINE.match(line)]
    assert any(m.group(1) == "MatMul" for m in hot), err
    assert generated, err
    # Every JIT line has the [INFO] JIT: prefix.
    assert all(line.startswith("[INFO] JIT: ") for line in lines if "JIT" in line), err
    # The input matmul ([batch*seq,128] x [128,1024] or the per-step [batch,128] x [128,1024]) is
    # compiled once for the whole seq range, not once per call or per seq.
    installed = [m for m in map(INSTALLED.match, lines) if m]
    matmul_by_pc = {}
    for m in installed:
        if m.group(2) == "MatMul":
            matmul_by_pc.setdefault(m.group(1), []).append(m.group(3))
    assert matmul_by_pc, err
    for pc, signatures in matmul_by_pc.items():
        assert len(signatures) == 1, f"matmul at PC=0x{pc} compiled {len(signatures)} times: {signatures}\n{err}"
    assert "jit: level O1" in out and "kernels installed" in out, out
    compiled = int(re.search(r"compiled (\d+)", out.split("op calls:")[1]).group(1))
    assert compiled > 0, out
    with np.load(tmp_path / "o0.npz") as a, np.load(tmp_path / "o1.npz") as b:
        for key in a.files:
            assert rel_l2(b[key], a[key].astype(np.float64)) <= 1e-5, key


def test_o1_workload_matches_numpy_on_every_seq(run_cli, tmp_path):
    """After tier-up, each seq of the cycle still matches the float64 numpy oracle."""
    rng = np.random.default_rng()
    for seq in (10, 20, 30):
        inputs, weights = workload_files(tmp_path, rng, seq)
        np.savez(tmp_path / "in.npz", **inputs)
        for program, oracle in (("lstm_cell.py", lstm_flat), ("lstm_loop.py", lstm_loop)):
            code, _, err = run_cli("run", EXAMPLES / program, "--inputs", tmp_path / "in.npz", "--params",
                                   tmp_path / "params.npz", "--iters", "3", "--jit-level", "O1", *EAGER, "--quiet",
                                   "--out", tmp_path / "out.npz")
            assert code == 0, err
            w64 = {k: v.astype(np.float64) for k, v in weights.items()}
            want = oracle(*(inputs[k].astype(np.float64) for k in ("x", "h", "c")), w64["W_ih"], w64["W_hh"],
                          w64["b_ih"], w64["b_hh"])
            with np.load(tmp_path / "out.npz") as got:
                for i, expected in enumerate(want):
                    assert rel_l2(got[f"out{i}"], expected) <= 1e-5, (program, seq, i)


CORPUS_PROGRAMS = runnable_corpus(CORPUS)


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in CORPUS_PROGRAMS])
def test_corpus_at_o1_with_zero_thresholds_equals_o0(run_cli, tmp_path, path):
    spec = parse_header(path)
    rng = np.random.default_rng()
    entry = entry_params(find_entry(path.read_text(), spec.fn)[1])
    case = make_case(spec, entry, rng)
    code, o0, err = run_shapevm(run_cli, spec, case, tmp_path, extra=["--jit-level", "O0"])
    assert code == 0, err
    code, o1, err = run_shapevm(run_cli, spec, case, tmp_path,
                                extra=["--jit-level", "O1", "--iters", "3", *EAGER])
    assert code == 0, err
    assert len(o0) == len(o1)
    for i, (a, b) in enumerate(zip(o1, o0)):
        compare(a, b, spec.tol, f"out{i} at O1 vs O0 (dims {case.dims})")


def test_corpus_at_o1_really_compiles(run_cli, tmp_path):
    """The O1-equals-O0 check is not vacuous: most corpus programs run compiled kernels."""
    compiled_programs = 0
    for path in CORPUS_PROGRAMS:
        spec = parse_header(path)
        case = make_case(spec, entry_params(find_entry(path.read_text(), spec.fn)[1]), np.random.default_rng(1))
        code, _, err = run_shapevm(run_cli, spec, case, tmp_path, extra=["--jit-level", "O1", "--iters", "2", *EAGER,
                                                                         "--jit-log"])
        assert code == 0, err
        compiled_programs += "replaced dispatch entry" in err
    assert compiled_programs >= len(CORPUS_PROGRAMS) // 2, f"only {compiled_programs} of {len(CORPUS_PROGRAMS)}"


def test_environment_variables_switch_the_jit_and_its_log(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEVM_JIT_LOG", "1")
    monkeypatch.setenv("SHAPEVM_JIT_LEVEL", "O1")
    monkeypatch.setenv("SHAPEVM_WARMUP", "0")
    monkeypatch.setenv("SHAPEVM_HOT_MS", "0")
    monkeypatch.setenv("SHAPEVM_HOT_COUNT", "1")
    code, _, err = run_cli("run", EXAMPLES / "lstm_cell.py", "--dim", "batch=4", "--dim", "seq=3", "--iters", "3",
                           "--jit-wait", "--quiet")
    assert code == 0, err
    assert any(HOT_LINE.match(line) for line in err.splitlines()), err
    monkeypatch.setenv("SHAPEVM_JIT_LEVEL", "O0")
    code, _, err = run_cli("run", EXAMPLES / "lstm_cell.py", "--dim", "batch=4", "--dim", "seq=3", "--iters", "3",
                           "--jit-wait", "--quiet")
    assert code == 0 and "JIT" not in err, err


def test_dump_shows_the_ranges_the_jit_compiled_for(run_cli, tmp_path, monkeypatch):
    # A cache of its own: an install record from another test's run of this program would queue the
    # matmul on first sight, for the shapes that run met, not for this run's warm-up.
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path / "cache"))
    code, _, err = run_cli("run", EXAMPLES / "lstm_cell.svasm", "--dim", "batch=8", "--dim", "seq=10,20,30",
                           "--iters", "6", "--jit-level", "O1", "--warmup", "3", "--hot-count", "0", "--hot-ms", "0",
                           "--jit-wait", "--quiet", "--dump", tmp_path / "after.svasm")
    assert code == 0, err
    text = (tmp_path / "after.svasm").read_text()
    # After 3 warm-up runs (seq 10, 20, 30) the hot matmul's [batch*seq, 128] input ?2 was
    # observed as 80, 160, 240 -> compiled for the bucket 64..256; batch stays 8 (specialized).
    assert re.search(r"CallOp matmul r14 = r12, r13 : f32\[\?2:64\.\.256,128\]", text), text
    code, out, err = run_cli("verify", tmp_path / "after.svasm")
    assert code == 0, err


@pytest.mark.parametrize("flags,needle", [
    (["--jit-level", "O7"], "jit_level"),
    (["--jit-level", "fast"], "jit_level"),
    (["--warmup", "-1"], "warmup"),
    (["--hot-ms", "-5"], "hot_ms"),
])
def test_bad_jit_flags_are_clear_errors(run_cli, flags, needle):
    code, out, err = run_cli("run", EXAMPLES / "lstm_cell.py", "--dim", "batch=2", "--dim", "seq=2", *flags)
    assert code != 0 and code > 0
    assert needle in err, err


def test_no_profile_says_the_jit_is_off_and_runs_interpreted(run_cli):
    # The JIT compiles from the interpreter's shape profiles: without them nothing is compiled,
    # and the CLI says so instead of silently running at O0.
    args = ["run", EXAMPLES / "lstm_cell.py", "--dim", "batch=2", "--dim", "seq=3", "--iters", "4", "--quiet",
            "--no-profile", "--stats", *EAGER]
    code, out, err = run_cli(*args)
    assert code == 0, err
    assert "[WARN] JIT: --no-profile" in err and "interpreted (O0)" in err, err
    assert "compiled 0" in out and "jit:" not in out, out
    code, out, err = run_cli(*args, "--jit-level", "O0")
    assert code == 0 and "JIT" not in err, err
