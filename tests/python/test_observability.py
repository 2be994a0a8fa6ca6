# SPDX-License-Identifier: Apache-2.0
# Observability (docs/observability.md) through the CLI and the Python module: the --trace file
# checked against the Trace Event Format's rules (fields, phases, nesting per thread, thread-name
# metadata) with every compile phase present, the interpreter and compile threads overlapping
# during a tier-up, --trace-ops, a bad --trace path failing at start; --profile rows adding up to
# the run; --stats-json keys and values; the O2 hot-path log lines; perf seeing a kernel symbol.
import json
import os
import re
import shutil
import subprocess
import time

import numpy as np
import pytest

from conftest import ROOT
from test_jit import HOT_LINE, KERNEL_LINE
from test_reference_workload import make_inputs

LSTM = ROOT / "examples" / "lstm_cell.py"
EAGER = ["--warmup", "0", "--hot-count", "0", "--hot-ms", "0", "--jit-wait"]
PHASES = {"X", "B", "E", "i", "I", "M", "C", "b", "n", "e", "s", "t", "f", "P", "O", "N", "D"}
# The keys docs/observability.md documents for --stats-json / Session::statsJson / Python stats().
STATS_KEYS = {"runs", "instructions", "launches_compiled", "launches_interpreted", "guard_misses",
              "inline_cache_misses", "latency", "latency_by_shape", "allocations_requested", "allocations_system",
              "memory", "jit_level", "kernels_installed", "compile_failures", "compile_ms", "fused_regions",
              "tuning_ms", "kernels_from_cache", "codegen_count", "compiles_pending", "tuning_in_progress",
              "jit_report"}
JIT_STATS_KEYS = {"compile", "regions", "tuning", "fallbacks"}


def validate_trace(doc):
    """The Trace Event Format's rules for what ShapeVM writes; returns {tid: thread name}."""
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), "top level: {traceEvents: [...]}"
    events = doc["traceEvents"]
    names, spans, used = {}, {}, set()
    open_b = {}
    for e in events:
        for field in ("name", "ph", "pid", "tid"):
            assert field in e, f"event without '{field}': {e}"
        assert e["ph"] in PHASES, e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert isinstance(e.get("args", {}), dict), e
        if e["ph"] == "M":
            assert e["name"] in ("thread_name", "process_name", "thread_sort_index", "process_sort_index"), e
            assert isinstance(e["args"].get("name", ""), str), e
            if e["name"] == "thread_name":
                assert e["tid"] not in names, f"two thread_name records for tid {e['tid']}"
                names[e["tid"]] = e["args"]["name"]
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        assert isinstance(e.get("cat", ""), str), e
        used.add(e["tid"])
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            spans.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
        elif e["ph"] == "i":
            assert e.get("s", "t") in ("t", "p", "g"), e
        elif e["ph"] == "B":
            open_b.setdefault(e["tid"], []).append(e)
        elif e["ph"] == "E":
            assert open_b.get(e["tid"]), f"E without B on tid {e['tid']}"
            open_b[e["tid"]].pop()
    assert not any(open_b.values()), "B events never closed"
    assert used <= set(names), f"threads without thread_name metadata: {used - set(names)}"
    # Complete events on one thread nest: each lies inside the enclosing one or after it.
    eps = 0.01  # us (the file's 3 decimals)
    for tid, intervals in spans.items():
        stack = []
        for start, end, name in sorted(intervals, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start + eps:
                stack.pop()
            if stack:
                assert end <= stack[-1][1] + eps, f"tid {tid}: '{name}' [{start}, {end}] overlaps '{stack[-1][2]}' {stack[-1][:2]}"
            stack.append((start, end, name))
    return names


def events(doc, tid=None, ph=None, cat=None):
    return [e for e in doc["traceEvents"] if e["ph"] != "M" and (tid is None or e["tid"] == tid)
            and (ph is None or e["ph"] == ph) and (cat is None or e.get("cat") == cat)]


def workload_npz(tmp_path, batch=32, seq=20):
    inputs = make_inputs(np.random.default_rng(7), batch, seq)
    np.savez(tmp_path / "in.npz", **inputs)
    return ["--inputs", tmp_path / "in.npz"]


def test_trace_of_an_o2_tier_up_is_valid_with_every_compile_phase(run_cli, tmp_path):
    trace = tmp_path / "trace.json"
    code, _, err = run_cli("run", LSTM, *workload_npz(tmp_path), "--iters", "4", *EAGER, "--no-cache",
                           "--set", "tune_budget_ms=100", "--quiet", "--trace", trace)
    assert code == 0, err
    doc = json.loads(trace.read_text())
    names = validate_trace(doc)
    interpreter = [t for t, n in names.items() if n == "interpreter"]
    compilers = [t for t, n in names.items() if n.startswith("jit compile")]
    assert len(interpreter) == 1 and compilers, names
    runs = events(doc, interpreter[0], "X", "run")
    assert len(runs) == 4 and all(e["name"] == "lstm_cell" and e["args"]["status"] == "ok" for e in runs), runs
    # Regions aggregated per run once installed; ops before.
    assert events(doc, interpreter[0], "X", "region"), "no region execution event"
    assert events(doc, interpreter[0], "X", "op"), "no op event"
    compile_events = {e["name"] for e in events(doc, cat="compile")}
    for phase in ("queued", "compile", "shape inference (region plan)", "codegen + tuning", "validation", "install"):
        assert phase in compile_events, (phase, compile_events)
    install = [e for e in events(doc, cat="compile") if e["name"] == "install"]
    assert install[0]["args"]["pc"].startswith("0x") and install[0]["args"]["kernel"], install
    candidates = events(doc, ph="X", cat="tune")
    assert candidates and all(e["name"].startswith("candidate ") and "signature" in e["args"] for e in candidates)
    queued = [e for e in events(doc, cat="jit") if e["name"] == "compile queued"]
    assert queued and queued[0]["args"]["signature"].startswith("MatMul:("), queued
    # bench/trace_plot.py renders it.
    png = tmp_path / "timeline.png"
    plot = subprocess.run(["/usr/bin/python3", str(ROOT / "bench" / "trace_plot.py"), str(trace), "-o", str(png)],
                          capture_output=True, text=True, timeout=120)
    assert plot.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot.stderr


def test_trace_ops_has_one_event_per_op_execution(run_cli, tmp_path):
    trace = tmp_path / "trace.json"
    code, out, err = run_cli("run", LSTM, *workload_npz(tmp_path, 4, 3), "--iters", "3", "--jit-level", "O0",
                             "--quiet", "--stats", "--trace", trace, "--trace-ops")
    assert code == 0, err
    doc = json.loads(trace.read_text())
    validate_trace(doc)
    per_op = [e for e in events(doc, ph="X", cat="op") if "path" in e["args"]]
    op_calls = int(re.search(r"op calls: (\d+)", out).group(1))
    assert len(per_op) == op_calls, (len(per_op), op_calls)
    assert all(e["args"]["path"] == "interpreted" and e["args"]["pc"].startswith("0x") for e in per_op)


def test_unwritable_trace_path_fails_at_start(run_cli, tmp_path):
    code, out, err = run_cli("run", LSTM, "--dim", "batch=2", "--dim", "seq=2", "--trace",
                             tmp_path / "no-such-dir" / "t.json")
    assert code == 1 and out == "", (out, err)
    assert "shapevm: error:" in err and "cannot open trace file" in err and "no-such-dir" in err, err
    code, _, err = run_cli("run", LSTM, "--dim", "batch=2", "--dim", "seq=2", "--trace-ops")
    assert code == 1 and "--trace-ops needs --trace" in err, err


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_profile_rows_add_up_to_the_run(run_cli, tmp_path, level):
    profile = tmp_path / "profile.json"
    flags = EAGER if level == "O2" else []
    code, out, err = run_cli("run", LSTM, *workload_npz(tmp_path), "--iters", "4", "--jit-level", level, *flags,
                             "--quiet", "--profile", "--profile-json", profile)
    assert code == 0, err
    assert "profile of 'lstm_cell'" in out and "matmul" in out, out
    functions = json.loads(profile.read_text())["functions"]
    assert [f["function"] for f in functions] == ["lstm_cell"]
    fp = functions[0]
    assert fp["calls"] == 4
    rows = [r for r in fp["rows"] if r["kind"] != "other"]
    measured = sum(r["total_ms"] for r in rows)
    assert abs(measured - fp["run_ms"]) <= 0.05 * fp["run_ms"], (measured, fp["run_ms"], out)
    for r in rows:
        assert r["compiled"] + r["interpreted"] == r["calls"] or r["kind"] == "region", r
        assert abs(r["share"] - r["total_ms"] / fp["run_ms"]) < 1e-4, r
    matmul = [r for r in rows if r["name"] == "matmul"]
    assert matmul and matmul[0]["signatures"].startswith("f32(640,128) x f32(128,1024)"), matmul
    regions = [r for r in rows if r["kind"] == "region"]
    if level == "O2":
        assert regions and regions[0]["compiled"] > 0 and regions[0]["end_pc"] > regions[0]["pc"], fp["rows"]
        assert f"0x{regions[0]['pc']:04X}..0x{regions[0]['end_pc']:04X}" in out, out
    else:
        assert not regions and all(r["compiled"] == 0 for r in rows)
        assert sum(r["allocations"] for r in rows) > 0, rows


def test_stats_json_has_every_documented_key(run_cli, tmp_path):
    stats = tmp_path / "stats.json"
    code, out, err = run_cli("run", LSTM, "--dim", "batch=4", "--dim", "seq=3,5", "--iters", "6", *EAGER,
                             "--quiet", "--stats", "--stats-json", stats)
    assert code == 0, err
    doc = json.loads(stats.read_text())
    assert STATS_KEYS | JIT_STATS_KEYS <= set(doc), (STATS_KEYS | JIT_STATS_KEYS) - set(doc)
    assert doc["runs"] == 6 and doc["jit_level"] == 2
    op_calls = int(re.search(r"op calls: (\d+)", out).group(1))
    assert doc["launches_compiled"] + doc["launches_interpreted"] == op_calls
    assert doc["kernels_installed"] >= 1 and doc["fused_regions"] >= 1 and doc["regions"]["runs"] > 0, doc
    assert doc["compiles_pending"] == 0 and doc["tuning_in_progress"] is False  # --jit-wait: all finished
    assert doc["compile"]["total_ms"] >= doc["compile"]["codegen_ms"] > 0, doc["compile"]
    # CPU beside wall time: every install's, split by phase, and the process's.
    compile_ = doc["compile"]
    installs = compile_["installs"]
    assert len(installs) == doc["compile"]["kernels_installed"], installs
    assert compile_["cpu_ms"] >= compile_["codegen_cpu_ms"] > 0, compile_
    assert abs(compile_["cpu_ms"] - sum(e["cpu_ms"] for e in installs)) < 1e-3 * max(1, compile_["cpu_ms"]), compile_
    assert compile_["median_cpu_ms"] <= compile_["max_cpu_ms"], compile_
    for e in installs:
        assert e["queued_ms"] >= 0 and e["wall_ms"] > 0 and e["cpu_ms"] > 0, e
        parts = e["shape_inference_cpu_ms"] + e["codegen_cpu_ms"] + e["validation_patch_cpu_ms"] + e["tuning_cpu_ms"]
        assert parts <= e["cpu_ms"] * 1.001 + 1e-3, e
    assert any(e["region"] and e["kernels"] >= 2 for e in installs), installs
    assert doc["process_cpu_ms"] >= compile_["cpu_ms"], doc["process_cpu_ms"]
    shapes = [s["shape"] for s in doc["latency_by_shape"]]
    assert shapes == ["x=(4,3,128) h=(4,256) c=(4,256)", "x=(4,5,128) h=(4,256) c=(4,256)"], shapes
    assert all(s["runs"] == 3 and s["min_ms"] <= s["median_ms"] <= s["max_ms"] for s in doc["latency_by_shape"])
    assert doc["latency"]["runs"] == 6 and doc["allocations_requested"] > 0 and doc["memory"]["peak_bytes"] > 0
    assert doc["jit_report"].startswith("jit: level O2")


def test_stats_while_a_tune_is_still_running_say_so(run_cli, tmp_path):
    # The compile thread sleeps before each per-op compile (O1): the run ends with one pending.
    code, out, err = run_cli("run", LSTM, "--dim", "batch=2", "--dim", "seq=2", "--iters", "2", "--jit-level", "O1",
                             "--warmup", "0", "--hot-count", "0", "--hot-ms", "0", "--set",
                             "jit_test_compile_delay_ms=5000", "--quiet", "--stats", "--stats-json",
                             tmp_path / "s.json")
    assert code == 0, err
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["compiles_pending"] > 0 and doc["tuning_in_progress"] is True, doc
    assert "still queued or running in the background" in out, out


def test_o2_log_has_the_hot_path_line_with_shapes_and_the_region_ops(run_cli, tmp_path):
    code, _, err = run_cli("run", LSTM, *workload_npz(tmp_path), "--iters", "3", *EAGER, "--jit-log", "--quiet")
    assert code == 0, err
    lines = err.splitlines()
    hot = [(i, m) for i, m in enumerate(map(HOT_LINE.match, lines)) if m]
    assert hot and hot[0][1].group(1) == "MatMul" and hot[0][1].group(2) == "(640,128)x(128,1024)", err
    region_line = lines[hot[0][0] + 1]
    assert re.match(r"^\[INFO\] JIT: Region at PC=0x[0-9A-F]+\.\.0x[0-9A-F]+: \d+ ops: (\w+\+)+\w+$", region_line), err
    assert "MatMul" in region_line and "Sigmoid" in region_line, region_line
    assert any(KERNEL_LINE.match(line) for line in lines), err
    assert all(line.startswith("[INFO] JIT: ") for line in lines if "JIT" in line), err


def test_perf_report_shows_a_kernel_symbol(shapevm_bin, tmp_path):
    perf = shutil.which("perf")
    if perf is None:
        pytest.skip("perf is not installed (linux-perf)")
    data = tmp_path / "perf.data"
    env = dict(os.environ, SHAPEVM_JIT_PERF="1", JITDUMPDIR=str(tmp_path))
    record = subprocess.run([perf, "record", "-k", "1", "-o", str(data), "--", shapevm_bin, "run",
                             str(LSTM), "--dim", "batch=64", "--dim", "seq=20", "--iters", "40", "--jit-level", "O1",
                             *EAGER, "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    if record.returncode != 0 or not data.exists():
        pytest.skip(f"perf cannot record here: {(record.stderr.strip().splitlines() or ['?'])[-1]}")
    injected = tmp_path / "perf.jit.data"
    inject = subprocess.run([perf, "inject", "--jit", "-i", str(data), "-o", str(injected)], capture_output=True,
                            text=True, timeout=300)
    assert inject.returncode == 0, inject.stderr
    report = subprocess.run([perf, "report", "-i", str(injected), "--stdio", "--no-children", "--sort", "sym"],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert re.search(r"svm_\w+", report.stdout), report.stdout[-3000:]


def _python_module():
    import shapevm  # conftest put the built package first
    if getattr(shapevm, "_core", None) is None:
        pytest.skip("this build has no Python module")
    return shapevm


def test_python_trace_shows_interpreter_and_compile_threads_overlapping(tmp_path, monkeypatch):
    shapevm = _python_module()
    # A private cache: a kernel another test left in the shared one would install without a compile.
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(tmp_path / "cache"))
    before = shapevm.get_context()
    trace = tmp_path / "py.json"
    inputs = make_inputs(np.random.default_rng(3), 8, 4)
    try:
        shapevm.set_context(warmup=0, hot_count=0, hot_ms=0, tune_budget_ms=0, tune_cache=0)
        module = shapevm.load(LSTM, jit_level="O2")
        shapevm.set_context(trace=str(trace))
        deadline = time.monotonic() + 120
        after_install = 0
        while after_install < 3 and time.monotonic() < deadline:
            module.lstm_cell(*inputs.values())
            if module.stats()["kernels_installed"] >= 1:
                after_install += 1
        # The compile span closes after its install: a starved compile thread may not have closed it yet.
        module.program.wait_idle()
        shapevm.set_context(trace=None)
        stats = module.stats()
        module.program.write_stats_json(str(tmp_path / "stats.json"))
    finally:
        shapevm.set_context(trace=None)
        shapevm.set_context(**{k: v for k, v in before.items() if shapevm.get_context()[k] != v})
    assert stats["kernels_installed"] >= 1, stats
    # stats() and the JSON file carry the same keys (the documented ones).
    written = json.loads((tmp_path / "stats.json").read_text())
    assert set(stats) == set(written) and STATS_KEYS <= set(stats)
    doc = json.loads(trace.read_text())
    names = validate_trace(doc)
    interpreter = [t for t, n in names.items() if n == "interpreter"]
    compilers = [t for t, n in names.items() if n.startswith("jit compile")]
    assert interpreter and compilers, names
    runs = [(e["ts"], e["ts"] + e["dur"]) for e in events(doc, interpreter[0], "X", "run")]
    compiles = [(e["ts"], e["ts"] + e["dur"]) for t in compilers for e in events(doc, t, "X", "compile")
                if e["name"] == "compile"]
    assert runs and compiles, (len(runs), len(compiles))
    overlapping = [r for r in runs for c in compiles if r[0] < c[1] and c[0] < r[1]]
    assert overlapping, f"no run overlaps a compile: runs {runs[:5]}..., compiles {compiles}"


PERF_FROM_PYTHON = """
import sys
import numpy as np
import shapevm
from shapevm import Tensor, ops
shapevm.set_context(jit_level="O1", jit_perf=1, warmup=0, hot_count=0, hot_ms=0)
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"))
x = np.random.default_rng(5).standard_normal((48, 40)).astype(np.float32)
y = doubled_tanh(x)
doubled_tanh.wait_idle()
for _ in range(3):
    y = doubled_tanh(x)
assert np.allclose(y, np.tanh(2 * x), atol=1e-6)
print(doubled_tanh.stats()["launches_compiled"])
"""


def test_jit_perf_from_python_keeps_the_jit_and_writes_a_jitdump(tmp_path):
    """jit_perf=1 in a Python process (LLVM loaded privately by the extension) used to fail the
    JIT's creation, so everything ran interpreted without a word; now kernels compile and the
    jitdump is written."""
    shapevm = _python_module()
    source = tmp_path / "fn.py"
    source.write_text("from shapevm import Tensor, ops\n\n@shapevm.jit\n"
                      "def doubled_tanh(x: Tensor[None, None]):\n    return ops.tanh(x * 2.0)\n")
    env = dict(os.environ, PYTHONPATH=str(os.path.dirname(shapevm.__path__[0])), JITDUMPDIR=str(tmp_path),
               SHAPEVM_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run(["/usr/bin/python3", "-c", PERF_FROM_PYTHON, str(source)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert int(run.stdout.split()[-1]) > 0, run.stderr[-3000:]
    assert "no JIT" not in run.stderr and "no perf jitdump" not in run.stderr, run.stderr[-3000:]
    assert list(tmp_path.rglob("jit-*.dump")), sorted(str(p) for p in tmp_path.rglob("*"))
