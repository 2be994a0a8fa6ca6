# SPDX-License-Identifier: Apache-2.0
# The benchmark suite's Python side (bench/peers.py, bench/report.py, bench/run_all.py) on tiny
# sizes: the peers run and write peers.json, a wrong peer or a wrong ShapeVM output fails the run,
# the report turns a synthetic shapevm.json (complete, partial or absent) into markdown and PNGs,
# and BENCHMARKS.md's generated section is replaced between its markers with the rest kept.
# No shapevm binary is needed: a fake one (a Python script) stands in for `shapevm run/bench`.
import json
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import ROOT

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))
import peers  # noqa: E402
import report  # noqa: E402
import run_all  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def synthetic_shapevm(partial=False, seqs=(10, 20, 30, 120, "stream")):
    """A shapevm.json in the format `shapevm bench` writes (the numbers are made up)."""
    workload = []
    for variant in ("lstm_cell", "lstm_loop"):
        for level, base in (("O0", 6.0), ("O1", 2.0), ("O2", 1.5)):
            for seq in seqs:
                row = {"variant": variant, "level": level, "seq": seq, "batch": 32, "runs": 30,
                       "allocs_per_run": 14.0, "system_allocs_per_run": 0.1,
                       "compiled_calls_per_run": 0.0 if level == "O0" else 20.0,
                       "interpreted_calls_per_run": 21.0 if level == "O0" else 1.0}
                if seq == "stream":  # like shapevm bench: per-call us per token only
                    row.update(median_us_per_token=base * 100, min_us_per_token=base * 90, max_us_per_token=base * 130)
                else:
                    ms = base * (seq / 10 if level == "O0" else 1.0)
                    row.update(median_ms=ms, min_ms=ms * 0.9, max_ms=ms * 1.3, p99_ms=ms * 1.2,
                               median_us_per_token=ms * 1e3 / (32 * seq))
                workload.append(row)
    doc = {"cpu": "AMD EPYC (synthetic)", "features": "avx512f", "date": "2026-11-29", "quick": False, "threads": 1,
           "stream": peers.STREAM, "workload": workload}
    if partial:
        return doc
    doc.update({
        "cold": [{"variant": "lstm_cell", "level": "O1", "first_call_ms": 8.0, "first_after_new_shape_ms": 7.5,
                  "p50_during_compile_ms": 6.5, "p99_during_compile_ms": 9.0, "p50_steady_ms": 1.2}],
        "matmul": [{"m": 640, "k": 128, "n": 1024, "jit_gflops": 90.0, "reference_gflops": 50.0,
                    "onednn_gflops": 95.0, "peak_gflops": 120.0, "auto_gflops": 102.6, "jit_best_gflops": 104.0,
                    "jit_2t_gflops": 130.0, "onednn_matmul_gflops": 94.0, "onednn_matmul_2t_gflops": 117.5},
                   {"m": 8, "k": 16, "n": 32, "jit_gflops": 3.0, "reference_gflops": 1.0,
                    "onednn_gflops": 2.0, "peak_gflops": 120.0}],
        "matmul_bf16": [{"m": 640, "k": 128, "n": 1024, "jit_gflops": 180.0, "jit_widening_gflops": 100.0,
                         "onednn_matmul_gflops": 200.0, "f32_peak_gflops": 120.0, "bf16_pairs": True,
                         "jit_packed_once_gflops": 220.0}],
        "elementwise": [{"n": 4096, "chain": "sigmoid(a*b+c)", "chain_o2_gbps": 24.0, "chain_gbps": 10.0,
                         "chain_o0_gbps": 2.0, "axpy_gbps": 25.0, "memcpy_gbps": 30.0, "level": "O2"}],
        "overhead": [{"what": "CallOp add 1-elem f32", "ns": 70.0}],
        "compile": {"count": 14, "median_ms": 40.0, "p90_ms": 90.0, "shape_infer_ms": 0.1, "codegen_ms": 30.0,
                    "validate_patch_ms": 9.0},
        "memory": [{"module": "lstm_cell", "context_bytes": 150000, "llvm_code_bytes": 400000}],
        "workload_2t": [{"variant": "lstm_cell", "level": "O2", "threads": 2, "batch": 32, "seq": 10, "runs": 28,
                         "median_ms": 0.8, "min_ms": 0.7, "max_ms": 1.1, "floor_ms": 0.5, "vs_floor": 1.6,
                         "vs_two_core_floor": 3.2, "one_thread_ms": 1.5, "speedup_vs_one_thread": 1.875}],
        "timeline": [{"thread": "interpreter", "name": "run", "start_ms": 0.0, "dur_ms": 6.0},
                     {"thread": "interpreter", "name": "run", "start_ms": 6.2, "dur_ms": 6.0},
                     {"thread": "compile", "name": "MatMul", "start_ms": 12.0, "dur_ms": 40.0}],
    })
    return doc


@pytest.fixture(scope="module")
def tiny_peers(tmp_path_factory):
    """One tiny run of bench/peers.py (its own worker processes), shared by the report tests."""
    out = tmp_path_factory.mktemp("peers")
    env = {**os.environ, **peers.THREAD_ENV}
    env.pop("SHAPEVM_BENCH_FAULT", None)
    proc = subprocess.run(["/usr/bin/python3", str(BENCH / "peers.py"), "--tiny", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads((out / "peers.json").read_text())


def check_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 5000, path  # a real figure, not an empty canvas


def test_tiny_peer_run_writes_every_section(tiny_peers):
    _, doc = tiny_peers
    plan = peers.PLANS["tiny"]
    rows = doc["workload"]
    shipped = [r for r in rows if r["config"] == "shipped"]
    want = {(p, v, s) for p in peers.BASE_PEERS for v in peers.VARIANTS for s in plan["seqs"] + ["stream"]}
    assert {(r["peer"], r["variant"], r["seq"]) for r in shipped} == want
    for r in rows:
        assert r["min_ms"] <= r["median_ms"] <= r["max_ms"] and r["runs"] >= 1
        assert r["rel_l2_vs_oracle"] <= peers.TOL
        assert r["us_per_token"] > 0 and r["batch"] == plan["batch"]
    assert {(r["m"], r["k"], r["n"]) for r in doc["matmul"]} == set(plan["matmul"])
    assert all(r["median_gflops"] > 0 for r in doc["matmul"])
    ops = {(r["peer"], r["op"]) for r in doc["elementwise"]}
    assert ("numpy", "memcpy") in ops and ("pytorch", "chain") in ops and ("numpy", "axpy_out") in ops
    assert {r["what"] for r in doc["overhead"]} == {"torch.add(a, b) 1-elem f32", "torch.add(a, b, out=c) 1-elem f32"}
    meta = doc["meta"]
    assert meta["threads"] == 1 and meta["configs"][0]["torch_threads"] == 1 and meta["configs"][0]["blas"]


def test_cold_start_costs(capsys):
    assert peers.cold_main("torchscript", "lstm_cell", 2, peers.SEED, short=True) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["peer"] == "torchscript" and row["script_ms"] > 0 and len(row["calls"]) == 4 + 2 + 2 + 2
    assert [c["seq"] for c in row["calls"]] == [10] * 4 + [20] * 2 + [30] * 2 + [10] * 2
    for key in ("first_call_ms", "second_call_ms", "first_after_new_shape_ms", "first_at_third_shape_ms", "p50_steady_ms"):
        assert row[key] > 0


def test_peer_with_wrong_outputs_is_rejected(monkeypatch):
    # In-process worker: the fault hook perturbs TorchScript's h' by 0.1%; the check must fail.
    monkeypatch.setenv("SHAPEVM_BENCH_FAULT", "torchscript:lstm_loop")
    worker = peers.Worker()
    inputs, params = peers.make_workload(peers.SEED, 2, 3)
    h, c = peers.oracle("lstm_loop", inputs, params)
    oracle_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"svm_bench_oracle_{os.getpid()}.npz")
    np.savez(oracle_file, lstm_loop_3_h=h, lstm_loop_3_c=c)
    try:
        good = worker.cmd_check_workload({"peer": "pytorch", "variant": "lstm_loop", "seqs": [3], "batch": 2,
                                          "seed": peers.SEED, "oracle": oracle_file})["errors"]
        assert peers.check_errors(good, "pytorch lstm_loop") <= peers.TOL
        bad = worker.cmd_check_workload({"peer": "torchscript", "variant": "lstm_loop", "seqs": [3], "batch": 2,
                                         "seed": peers.SEED, "oracle": oracle_file})["errors"]
    finally:
        os.unlink(oracle_file)
    with pytest.raises(peers.PeerError, match="torchscript lstm_loop is wrong"):
        peers.check_errors(bad, "torchscript lstm_loop")
    # A float64 (or wrongly shaped) answer counts as wrong too.
    assert peers.rel_l2(np.zeros((2, 3)), np.zeros((3, 2))) == float("inf")


def test_report_full_synthetic(tiny_peers, tmp_path):
    src, _ = tiny_peers
    (tmp_path / "peers.json").write_text((src / "peers.json").read_text())
    # The tiny peers ran seq 3 and 5: give ShapeVM rows at those seqs so that ratios exist.
    (tmp_path / "shapevm.json").write_text(json.dumps(synthetic_shapevm(seqs=(3, 5, 10, "stream"))))
    (tmp_path / "gate.json").write_text(json.dumps({"checks": [
        {"variant": "lstm_cell", "seq": 10, "level": "O1", "ok": True, "rel_l2_h_vs_torch": 1.5e-7,
         "rel_l2_c_vs_torch": 1.25e-7, "rel_l2_vs_oracle": 2.5e-7}]}))
    md = report.build(tmp_path, "bench/run_all.py --test", image_prefix="img/")
    assert "| lstm_cell | 10 | O1 | 1.50e-07 | 1.25e-07 | 2.50e-07 | ok |" in md
    for png in report.PLOTS.values():
        check_png(tmp_path / png)
        assert f"(img/{png})" in md
    assert "bench/run_all.py --test" in md and "AMD EPYC (synthetic)" in md and "1 thread" in md
    # Ratio against PyTorch eager for the same variant/seq: O1 2.0 ms over the fastest PyTorch row.
    torch_rows = [r for r in json.loads((tmp_path / "peers.json").read_text())["workload"]
                  if r["base_peer"] == "pytorch" and r["variant"] == "lstm_cell" and r["seq"] == 3]
    best = min(r["median_ms"] for r in torch_rows)
    assert report.fratio(2.0, best) in md
    # The stream row compares us per token on both sides (ShapeVM O2: 150 (135-195)).
    stream_line = next(line for line in md.splitlines() if line.startswith("| stream 8..128 (µs/token) |"))
    assert "| 600 (540–780) | 200 (180–260) | 150 (135–195) |" in stream_line
    peer_stream = min(r["median_us_per_token"] for r in json.loads((tmp_path / "peers.json").read_text())["workload"]
                      if r["base_peer"] == "pytorch" and r["variant"] == "lstm_cell" and r["seq"] == "stream")
    assert stream_line.rstrip(" |").endswith(report.fratio(150.0, peer_stream))
    # Matmul: default and tuned JIT vs oneDNN (90/95, 102.6/95) and vs the measured peak (90/120,
    # 102.6/120); the shape without a tuned figure shows a dash.
    mm_line = next(line for line in md.splitlines() if line.startswith("| 640×128×1024 |"))
    assert mm_line.startswith("| 640×128×1024 | 90.0 | 103 | — | 50.0 | 95.0 |")
    for ratio in ("0.95", "1.08", "0.75", "0.85"):
        assert f"| {ratio} |" in mm_line
    assert next(line for line in md.splitlines() if line.startswith("| 8×16×32 |")).startswith("| 8×16×32 | 3.00 | — |")
    # bfloat16: pairs 180 vs widening 100 (1.80x), vs oneDNN 200 (0.90x), vs the f32 peak 120 (1.50x).
    bf16_line = next(line for line in md.splitlines() if line.startswith("| 640×128×1024 | 180 |"))
    assert bf16_line.startswith("| 640×128×1024 | 180 | bf16 pairs | 100 | 200 | 1.80 | 0.90 | 1.50 | 220 | 1.10 |"), bf16_line
    # 2 threads: JIT 130 vs oneDNN 117.5 (1.11x); 130 / the same params' 1 thread 104 (1.25x); oneDNN 117.5 / 94.
    assert "#### Matmul with 2 threads" in md
    assert "| 640×128×1024 | 130 | 118 | 1.11 | 1.25 | 1.25 |" in md, md
    two_threads = md.split("#### Matmul with 2 threads", 1)[1].split("The exhaustive search", 1)[0]
    assert "8×16×32" not in two_threads  # no 2-thread figures, no row
    # The workload with 2 kernel threads: 0.8 (0.7-1.1) ms against one thread's 1.5 ms (1.88x), 1.60x the
    # one-core floor, 3.20x a two-core floor.
    assert "#### O2 with 2 kernel threads" in md
    assert "| lstm_cell | 10 | 0.500 | 0.800 (0.700–1.10) | 1.50 | 1.88× | 1.60× | 3.20× |" in md, md
    ew_line = next(line for line in md.splitlines() if line.startswith("| sigmoid(a*b+c) | 4096 |"))
    assert ew_line.startswith("| sigmoid(a*b+c) | 4096 | 24.0 | 10.0 | 2.00 | 25.0 | 30.0 | 0.96 | 0.40 |"), ew_line
    assert "1/" in md  # per-op overhead as a fraction of torch.add
    assert "146.48 KiB" in md  # memory
    assert "| 14 | 40.0 | 90.0 | 0.100 | 30.0 | 9.00 |" in md  # compile latency


def test_report_missing_and_partial_inputs(tmp_path):
    # Nothing at all: still markdown and all plots, every section "not measured yet".
    md = report.build(tmp_path, "cmd")
    assert md.count(report.NOT_MEASURED) >= 8
    for png in report.PLOTS.values():
        check_png(tmp_path / png)
    # Only the workload section of shapevm.json, and sections of the wrong type.
    partial = synthetic_shapevm(partial=True)
    partial["matmul"] = None
    partial["compile"] = []
    (tmp_path / "shapevm.json").write_text(json.dumps(partial))
    md = report.build(tmp_path, "cmd")
    assert "| 10 | 6.00 (5.40–7.80) | 2.00 (1.80–2.60) | 1.50 (1.35–1.95) |" in md
    assert "O2 flatness over seq 10/20/30" in md
    assert md.count(report.NOT_MEASURED) >= 5


def test_splice_benchmarks_md():
    original = "# ShapeVM benchmarks\n\nHand-written section.\n"
    once = report.splice(original, "## Generated\n\nA\n")
    assert once.startswith(original) and report.BEGIN in once and once.rstrip().endswith(report.END)
    twice = report.splice(once + "\n## Later hand-written\n", "## Generated\n\nB\n")
    assert "A\n" not in twice.split(report.BEGIN)[1] and "B\n" in twice
    assert twice.startswith(original) and twice.endswith("\n## Later hand-written\n")
    assert report.splice(twice, "## Generated\n\nB\n") == twice  # idempotent
    with pytest.raises(ValueError):
        report.splice("x\n" + report.END + "\n", "y")


FAKE_SHAPEVM = textwrap.dedent('''\
    #!/usr/bin/python3
    # A stand-in for the shapevm binary: `run` computes the workload with numpy (float32);
    # FAKE_SHAPEVM_BREAK=LEVEL makes that level's h' 0.1% off; `bench` writes a synthetic JSON.
    import json, os, sys
    import numpy as np
    sys.path.insert(0, {bench!r})
    import peers
    args = sys.argv[1:]
    if args == ["--help"]:
        print("Subcommands:\\n  run                         run\\n" + ("  bench   bench\\n" if os.environ.get("FAKE_BENCH") else ""))
        sys.exit(0)
    if args == ["run", "--help"]:
        print("  --jit-level TEXT\\n  --jit-wait\\n")
        sys.exit(0)
    if args[0] == "bench":
        out = args[args.index("--out") + 1]
        with open(os.path.join(out, "shapevm.json"), "w") as f:
            f.write(os.environ["FAKE_BENCH"])
        sys.exit(0)
    opt = lambda name, default=None: args[args.index(name) + 1] if name in args else default
    variant = os.path.basename(args[1]).split(".")[0]
    inputs, params = dict(np.load(opt("--inputs"))), dict(np.load(opt("--params")))
    h, c = peers.NUMPY_FNS[variant](*peers.workload_args(inputs, params))
    if os.environ.get("FAKE_SHAPEVM_BREAK") == opt("--jit-level", "default"):
        h = h * np.float32(1.001)
    np.savez(opt("--out"), out0=h.astype(np.float32), out1=c.astype(np.float32))
    print("  op calls: 21 (21/run; interpreted 10, compiled 11, guard misses 0, inline-cache misses 0)")
''')


@pytest.fixture
def fake_shapevm(tmp_path):
    path = tmp_path / "fake_shapevm"
    path.write_text(FAKE_SHAPEVM.format(bench=str(BENCH)))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_run_all_gate_fails_on_wrong_shapevm_outputs(fake_shapevm, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SHAPEVM_BREAK", "O1")
    code = run_all.main(["--out", str(tmp_path / "out"), "--shapevm", str(fake_shapevm), "--skip", "peers",
                         "--gate-iters", "1", "--gate-seqs", "10"])
    assert code == 1
    text = capsys.readouterr().out
    assert "FAILED: ShapeVM's outputs differ from PyTorch eager's" in text
    gate = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert {c["level"] for c in gate["checks"] if not c["ok"]} == {"O1"}
    assert all(c["ok"] for c in gate["checks"] if c["level"] != "O1")
    assert not (tmp_path / "out" / "BENCHMARKS.generated.md").exists()  # no report for a wrong program


def test_run_all_end_to_end_writes_benchmarks_md(fake_shapevm, tmp_path, monkeypatch, capsys):
    # Gate and `shapevm bench` through the fake binary; the peers step is skipped (the fixture
    # covers it), so the report says the peers were not measured.
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_BENCH", json.dumps(synthetic_shapevm()))
    bench_md = tmp_path / "BENCHMARKS.md"
    bench_md.write_text("# ShapeVM benchmarks\n\n## Hand-written\n\nkept\n")
    docs = tmp_path / "docs" / "bench"
    code = run_all.main(["--out", str(out), "--shapevm", str(fake_shapevm), "--skip", "peers", "--gate-iters", "1",
                         "--gate-seqs", "10", "--write-benchmarks-md", "--benchmarks-md", str(bench_md),
                         "--docs-dir", str(docs)])
    assert code == 0, capsys.readouterr().out
    gate = json.loads((out / "gate.json").read_text())
    assert len(gate["checks"]) == 2 * 3 and all(c["ok"] for c in gate["checks"])  # 2 variants x O0/O1/O2
    assert all(c["compiled_calls"] == 11 for c in gate["checks"])  # parsed from --stats
    assert json.loads((out / "shapevm.json").read_text())["cpu"] == "AMD EPYC (synthetic)"
    assert (out / "BENCHMARKS.generated.md").exists()
    text = bench_md.read_text()
    assert text.startswith("# ShapeVM benchmarks\n\n## Hand-written\n\nkept\n") and text.count(report.BEGIN) == 1
    assert "### Correctness gate" in text and "| lstm_loop | 10 | O2 |" in text
    assert "Peers: not measured yet" in text and "| 10 | 6.00 (5.40–7.80) |" in text
    assert "(../docs/bench/latency_vs_seq.png)" not in text and "(docs/bench/latency_vs_seq.png)" in text
    for png in report.PLOTS.values():
        check_png(docs / png)


def test_shapevm_bench_applies_and_records_environment_tunables(shapevm_bin, tmp_path):
    # `shapevm bench` starts from the defaults, then applies SHAPEVM_* (an A/B needs no rebuild)
    # and records the settings that differ, so a report says what it measured.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHAPEVM_") or k == "SHAPEVM_CACHE_DIR"}
    runs = {}
    for name, extra in (("default", {}), ("two", {"SHAPEVM_KERNEL_THREADS": "2"})):
        out = tmp_path / name
        proc = subprocess.run([shapevm_bin, "bench", "--suite", "memory", "--quick", "--out", str(out)],
                              capture_output=True, text=True, timeout=300, env={**env, **extra})
        assert proc.returncode == 0, proc.stderr
        runs[name] = (json.loads((out / "shapevm.json").read_text()), proc.stdout)
    assert runs["default"][0]["tunables"] == {} and runs["default"][0]["threads"] == 1
    assert runs["two"][0]["tunables"] == {"kernel_threads": 2} and runs["two"][0]["threads"] == 2
    assert 'tunables from the environment: {"kernel_threads":2}' in runs["two"][1]
    assert "tunables from the environment" not in runs["default"][1]


def test_shapevm_bench_workload_times_o2_with_two_kernel_threads(shapevm_bin, tmp_path):
    # "Report both": the workload suite times the O2 instance again with kernel_threads=2 in the
    # same rounds, against the same floor, and compares it with O2's own one-thread median.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHAPEVM_") or k == "SHAPEVM_CACHE_DIR"}
    proc = subprocess.run([shapevm_bin, "bench", "--suite", "workload", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "shapevm.json").read_text())
    rows = doc["workload_2t"]
    fixed = {(r["variant"], r["seq"]): r for r in doc["workload"] if r["level"] == "O2" and r["seq"] != "stream"}
    assert {(r["variant"], r["seq"]) for r in rows} == set(fixed)
    for r in rows:
        one = fixed[(r["variant"], r["seq"])]
        assert r["threads"] == 2 and r["runs"] > 0 and 0 < r["min_ms"] <= r["median_ms"] <= r["max_ms"]
        assert r["floor_ms"] == pytest.approx(one["floor_ms"])
        assert r["one_thread_ms"] == pytest.approx(one["median_ms"])
        assert r["vs_floor"] == pytest.approx(r["median_ms"] / r["floor_ms"])
        assert r["vs_two_core_floor"] == pytest.approx(2 * r["vs_floor"])
        assert r["speedup_vs_one_thread"] == pytest.approx(one["median_ms"] / r["median_ms"])
        assert f"{r['variant']:<9} O2 seq {r['seq']:>6} with 2 kernel threads" in proc.stdout
    # The pass leaves the tunable as it found it: one thread is what the JSON records.
    assert doc["threads"] == 1 and doc["tunables"] == {}
