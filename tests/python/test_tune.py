# SPDX-License-Identifier: Apache-2.0
# The AutoTuner through the CLI: `shapevm tune` on the reference workload writes the tuning
# database and prints its summary, a following `shapevm run --stats` (a second process) answers
# from the database without timing and still equals O0; `--no-cache` neither reads nor writes;
# a corrupted database is reported with file:line and ignored; bad tune flags fail clearly.
# Every test points SHAPEVM_CACHE_DIR at a temporary folder, never the user's cache.
import json
import os
import re
import subprocess

import numpy as np
import pytest

from conftest import ROOT
from test_reference_workload import make_inputs, rel_l2

LSTM = ROOT / "examples" / "lstm_cell.py"
DIMS = ["--dim", "batch=32", "--dim", "seq=10,20,30"]
FIELDS = {"key", "family", "signature", "kernel", "bucket", "cpu", "features", "params", "us", "default_us",
          "candidates", "timed", "version", "check"}


@pytest.fixture
def cli_env(shapevm_bin, tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, SHAPEVM_CACHE_DIR=str(cache))
    for name in ("SHAPEVM_JIT_LEVEL", "SHAPEVM_TUNE_CACHE", "SHAPEVM_TUNE_BUDGET_MS"):
        env.pop(name, None)

    def run(*args, timeout=600):
        proc = subprocess.run([shapevm_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)
        return proc.returncode, proc.stdout, proc.stderr

    run.cache = cache
    run.bin = shapevm_bin
    return run


def params_file(tmp_path):
    inputs = make_inputs(np.random.default_rng(7), 32, 10)
    np.savez(tmp_path / "params.npz", **{k: inputs[k] for k in ["W_ih", "W_hh", "b_ih", "b_hh"]})
    return tmp_path / "params.npz"


def stat(out, pattern):
    m = re.search(pattern, out, re.M)
    assert m, out
    return m.group(1)


def test_tune_writes_the_database_and_a_second_process_reuses_it(cli_env, tmp_path):
    params = params_file(tmp_path)
    code, out, err = cli_env("tune", LSTM, "--params", params, *DIMS, "--budget-ms", "3000")
    assert code == 0, err
    if "nothing to tune" in out:
        pytest.skip("no kernel family declares a search space yet (KernelFamily::searchSpace)")
    db = cli_env.cache / "tuning.jsonl"
    assert db.exists(), out
    records = [json.loads(line) for line in db.read_text().splitlines() if line.strip()]
    assert records, out
    for r in records:
        assert FIELDS <= set(r), r
        assert r["version"] == 1 and r["us"] > 0 and r["timed"] >= 1 and r["candidates"] >= r["timed"]
        # A generated winner of the sweep is never slower than the default. A matmul's winner is
        # decided by the run-off when library candidates ran (the two fastest generated candidates
        # and the library ones timed again side by side, docs/tuning.md): the record keeps the
        # winner's sweep median, which may then lie above the default's (RunOffClock tests in C++).
        if r["family"] != "matmul":
            assert r.get("impl", "jit") != "jit" or r["us"] <= r["default_us"] * 1.0001, r
    assert any(r["family"] != "matmul" for r in records), "no record the sweep alone decided (the gates kernel)"
    # The summary names each kernel with its params and speedup; the progress goes to stderr.
    assert re.search(r"^tune: \d+ kernels \(\d+ tuned by timing, 0 from the tuning database\)", out, re.M), out
    assert any(r["signature"] in out for r in records), out
    assert "[tune] kernel 1 " in err, err
    assert f"tuning database: {db}" in out, out

    # A second process: same shapes at O2 with the default thresholds answers from the database.
    common = ["run", LSTM, "--params", params, *DIMS, "--iters", "30", "--quiet", "--seed", "3"]
    code, out, err = cli_env(*common, "--jit-level", "O2", "--jit-wait", "--stats", "--jit-log",
                             "--out", tmp_path / "o2.npz")
    assert code == 0, err
    # The AutoTuner's own stats line: every kernel tuned ahead of time is now a database hit.
    hits = int(stat(out, r"^autotuner: .* (\d+) tuning-database hits"))
    assert hits >= 1, out
    # Kernels the tuning run saw are not timed again (a different shape bucket would be).
    assert int(stat(out, r"^autotuner: (\d+) kernels tuned by timing")) < hits, out
    code, _, err = cli_env(*common, "--jit-level", "O0", "--out", tmp_path / "o0.npz")
    assert code == 0, err
    with np.load(tmp_path / "o0.npz") as a, np.load(tmp_path / "o2.npz") as b:
        for key in a.files:
            assert rel_l2(b[key], a[key].astype(np.float64)) <= 1e-5, key

    # --no-cache: neither read (no hits) nor written (the file is unchanged).
    before = db.read_text()
    code, out, err = cli_env(*common, "--jit-level", "O2", "--jit-wait", "--stats", "--no-cache")
    assert code == 0, err
    assert int(stat(out, r"^autotuner: .* (\d+) tuning-database hits")) == 0, out
    assert "database off (--no-cache)" in out, out
    assert db.read_text() == before


def test_tune_no_cache_writes_nothing(cli_env, tmp_path):
    code, out, err = cli_env("tune", LSTM, "--params", params_file(tmp_path), "--dim", "batch=4", "--dim", "seq=3",
                             "--no-cache", "--budget-ms", "200")
    assert code == 0, err
    assert not (cli_env.cache / "tuning.jsonl").exists()
    assert "tune:" in out, out
    if "nothing to tune" not in out:
        assert "tuning database: off (--no-cache)" in out, out


def test_a_corrupted_database_is_reported_and_ignored(cli_env, tmp_path):
    cli_env.cache.mkdir()
    db = cli_env.cache / "tuning.jsonl"
    db.write_text('{"key": "0000", "family": "matmul"}\nnot json at all\n{"version": 1, "key": "tru')
    common = ["run", LSTM, "--params", params_file(tmp_path), "--dim", "batch=4", "--dim", "seq=3", "--quiet",
              "--iters", "8", "--seed", "5"]
    code, _, err = cli_env(*common, "--jit-level", "O2", "--jit-wait", "--out", tmp_path / "o2.npz")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("[WARN] tune: tuning database ")]
    assert len(warnings) == 3, err
    for number in (1, 2, 3):
        assert any(f"{db}:{number}: " in w for w in warnings), err
    assert "truncated" in warnings[2], warnings
    code, _, err = cli_env(*common, "--jit-level", "O0", "--out", tmp_path / "o0.npz")
    assert code == 0, err
    with np.load(tmp_path / "o0.npz") as a, np.load(tmp_path / "o2.npz") as b:
        for key in a.files:
            assert rel_l2(b[key], a[key].astype(np.float64)) <= 1e-5, key
    # O0 and O1 never open the database.
    code, _, err = cli_env(*common, "--jit-level", "O1")
    assert code == 0 and "tuning database" not in err, err


@pytest.mark.parametrize("args, message", [
    (["--range", "seq=30..10"], "expected NAME=LO..HI"),
    (["--range", "seq"], "expected NAME=LO..HI"),
    (["--budget-ms", "-5"], "--budget-ms"),
    (["--dim", "nosuch=3"], "nosuch"),
])
def test_bad_tune_flags_fail_clearly(cli_env, args, message):
    code, _, err = cli_env("tune", LSTM, *args)
    assert code != 0
    assert err.startswith("shapevm: error: ") and message in err, err


def test_range_expands_to_bucket_edges(cli_env, tmp_path):
    # seq 3..9 runs 3, 4, 8 and 9; the run succeeds and reports what it tuned (or that nothing could be).
    code, out, err = cli_env("tune", LSTM, "--params", params_file(tmp_path), "--dim", "batch=2", "--range", "seq=3..9",
                             "--budget-ms", "100", "--stats")
    assert code == 0, err
    assert "tune:" in out and "stats: function 'lstm_cell', " in out, out
    assert "batch=2 seq=3" in out and "batch=2 seq=4" in out and "batch=2 seq=8" in out and "batch=2 seq=9" in out, out


def test_tune_then_run_on_a_single_matmul_hits_the_database(cli_env, tmp_path):
    """The per-op path (nothing to fuse): tune writes one record; a second process reuses it."""
    program = tmp_path / "mm.py"
    program.write_text("from shapevm import ops, Tensor\n\n\n"
                       "def f(x: Tensor[\"n\", 128], w: Tensor[128, 256]):\n    return x @ w\n")
    code, out, err = cli_env("tune", program, "--dim", "n=64,100", "--budget-ms", "1000")
    assert code == 0, err
    if "nothing to tune" in out:
        pytest.skip("the matmul family declares no search space on this host")
    assert re.search(r"^  MatMul:\(64\.\.128,128\)x\(128,256\) ", out, re.M), out
    lines = (cli_env.cache / "tuning.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["signature"] == "MatMul:(64..128,128)x(128,256)"
    # A tiny matmul never reaches the default 20 ms of heat: thresholds 0 make the compile certain.
    code, out, err = cli_env("run", program, "--dim", "n=64,100", "--iters", "20", "--quiet", "--stats", "--jit-wait",
                             "--hot-count", "0", "--hot-ms", "0")
    assert code == 0, err
    assert int(stat(out, r"^autotuner: .* (\d+) tuning-database hits")) == 1, out
    assert int(stat(out, r"^autotuner: (\d+) kernels tuned by timing")) == 0, out
    assert int(stat(out, r"jit: tuning .* (\d+) tuning-database hits")) == 1, out
    assert len((cli_env.cache / "tuning.jsonl").read_text().splitlines()) == 1


def test_debug_log_lists_every_timed_candidate_and_the_winner_among_them(cli_env, tmp_path):
    # SHAPEVM_JIT_LOG=2 adds the AutoTuner's per-candidate medians; the database records the
    # winner's time, which must be one of them (or the default's, when nothing beats it).
    env = dict(os.environ, SHAPEVM_CACHE_DIR=str(cli_env.cache), SHAPEVM_JIT_LOG="2", SHAPEVM_TUNE_BUDGET_MS="1500")
    proc = subprocess.run([cli_env.bin, "run", LSTM, "--dim", "batch=4", "--dim", "seq=3", "--iters", "8",
                           "--jit-level", "O2", "--jit-wait", "--quiet", "--warmup", "0", "--hot-count", "0", "--hot-ms", "0"], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    lines = re.findall(r"^\[DEBUG\] JIT: Tuning (.+): candidate (.+) median ([0-9.]+) us$", proc.stderr, re.M)
    assert lines, proc.stderr
    records = [json.loads(line) for line in (cli_env.cache / "tuning.jsonl").read_text().splitlines() if line.strip()]
    assert records
    for r in records:
        mine = {params: float(us) for signature, params, us in lines if signature == r["signature"]}
        assert "default" in mine and len(mine) == r["timed"], (r, mine)
        assert abs(mine["default"] - r["default_us"]) <= 0.05 + 1e-3 * r["default_us"], (r, mine)
        assert any(abs(us - r["us"]) <= 0.05 + 1e-3 * r["us"] for us in mine.values()), (r, mine)
        assert r["params"] in mine, (r, mine)
    # Without the debug level the candidates stay quiet.
    env["SHAPEVM_JIT_LOG"] = "1"
    env["SHAPEVM_CACHE_DIR"] = str(tmp_path / "other")
    proc = subprocess.run([cli_env.bin, "run", LSTM, "--dim", "batch=4", "--dim", "seq=3", "--iters", "8",
                           "--jit-level", "O2", "--jit-wait", "--quiet", "--warmup", "0", "--hot-count", "0", "--hot-ms", "0"], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0 and "[DEBUG]" not in proc.stderr, proc.stderr
