#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# What the timeline costs (docs/observability.md, BENCHMARKS.md): median run latency of an
# interpreter-bound program (a loop of 200 adds on 4-element tensors at O0: 200 op dispatches per
# run and almost no kernel time, so a per-op hook shows fully) for a baseline `shapevm` built
# without the trace hooks, this build with tracing off, with --trace and with --trace --trace-ops.
# Repeats are interleaved (A B C D A B C D ...); the table gives each median of per-repeat medians
# and the ratio to the baseline's.
#
#   /usr/bin/python3 bench/trace_overhead.py --baseline OLD/shapevm --candidate build/tools/shapevm
import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LATENCY = re.compile(r"latency ms: median ([0-9.]+)")
PROGRAM = '''from shapevm import ops, Tensor


def chain(x: Tensor["n"]):
    y = x
    for i in range(200):
        y = y + x
    return y
'''


def median_ms(binary, program, extra, iters, level):
    cmd = [binary, "run", program, "--dim", "n=4", "--iters", str(iters), "--jit-level", level, "--quiet", "--stats",
           *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(LATENCY.search(out).group(1))


def main(argv=None):
    parser = argparse.ArgumentParser(description="what the timeline costs: run latency with tracing off and on")
    parser.add_argument("--baseline", required=True, help="a shapevm binary without the trace hooks")
    parser.add_argument("--candidate", required=True, help="this build's shapevm")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--jit-level", default="O0")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trace = str(Path(tmp) / "t.json")
        program = str(Path(tmp) / "chain.py")
        Path(program).write_text(PROGRAM)
        configs = [
            ("baseline (no trace hooks)", args.baseline, []),
            ("tracing off", args.candidate, []),
            ("--trace (aggregated per run)", args.candidate, ["--trace", trace]),
            ("--trace --trace-ops", args.candidate, ["--trace", trace, "--trace-ops"]),
        ]
        samples = {name: [] for name, _, _ in configs}
        for _ in range(args.repeats):
            for name, binary, extra in configs:
                samples[name].append(median_ms(binary, program, extra, args.iters, args.jit_level))
    base = statistics.median(samples[configs[0][0]])
    print(f"200 adds on f32[4] per run, {args.jit_level}, {args.iters} runs x {args.repeats} interleaved repeats")
    print("| configuration | median run latency (us) | vs baseline | repeats' spread (us) |")
    print("|---|---:|---:|---|")
    for name, _, _ in configs:
        values = samples[name]
        med = statistics.median(values)
        print(f"| {name} | {med * 1e3:.2f} | {med / base:.3f}x | {min(values) * 1e3:.2f} .. {max(values) * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
