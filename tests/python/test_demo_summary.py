# SPDX-License-Identifier: Apache-2.0
# scripts/demo.sh's summary step (scripts/demo_summary.py) on real `shapevm run --stats` output of
# the reference cell at O0 and O2 (small iteration counts, thresholds lowered so O2 tiers up): the
# JIT's hot-path and installed-kernel lines, one latency row per seq with both levels and the
# speedup, allocations per run for both; an output without the stats lines fails naming the file.
import re
import subprocess
import sys

from conftest import ROOT

SUMMARY = ROOT / "scripts" / "demo_summary.py"
WORKLOAD = ["run", ROOT / "examples" / "lstm_cell.py", "--dim", "batch=8", "--dim", "seq=2,3", "--stats", "--quiet"]


def summarize(*paths):
    return subprocess.run([sys.executable, str(SUMMARY), *map(str, paths)], capture_output=True, text=True,
                          check=False)


def test_summary_of_o0_and_o2_runs(run_cli, tmp_path):
    outputs = {}
    for level, extra in (("O0", ["--iters", "4"]),
                         ("O2", ["--iters", "12", "--jit-log", "--jit-wait", "--warmup", "1", "--hot-count", "2",
                                 "--hot-ms", "0", "--no-cache"])):
        code, out, err = run_cli(*WORKLOAD, "--jit-level", level, *extra)
        assert code == 0, err
        outputs[level] = tmp_path / f"{level}.txt"
        outputs[level].write_text(out + err)
    result = summarize(outputs["O0"], outputs["O2"])
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert re.search(r"^  \[INFO\] JIT: Hot path detected at PC=", text, re.MULTILINE), text
    assert re.search(r"^  \[INFO\] JIT: Installed fused region at PC=", text, re.MULTILINE), text
    for seq in (2, 3):
        assert re.search(rf"^batch=8 seq={seq}\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+x$", text, re.MULTILINE), text
    assert re.search(r"^allocation requests\s+[0-9.]+\s+[0-9.]+$", text, re.MULTILINE), text
    assert re.search(r"^O2 op calls: [0-9.]+ interpreted, [0-9.]+ compiled per run \(12 runs", text, re.MULTILINE)


def test_output_without_stats_fails_naming_the_file(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("stats: function 'f', 1 iterations\n  seq=1          median 1.0 ms  p99 1.0 ms  (1 runs)\n"
                    "  op calls: 7 (7/run; interpreted 7, compiled 0, guard misses 0, inline-cache misses 0)\n"
                    "  allocations: 3 requests, 1 system (3.0 requests/run, 1.0 system/run)\n")
    bad = tmp_path / "bad.txt"
    bad.write_text("error: no such file\n")
    result = summarize(good, bad)
    assert result.returncode == 1
    assert f"{bad}: no 'stats: function ...' line" in result.stderr
    assert summarize(good, good).returncode == 0
