#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# What the timeline costs (docs/observability.md, BENCHMARKS.md): median run latency of an
# interpreter-bound run (examples/lstm_cell.py at batch 1, seq 1, O0: ~20 op dispatches per run,
# where a per-op hook would show most) for a baseline `shapevm` built without the trace hooks,
# this build with tracing off, with --trace and with --trace --trace-ops. Repeats are interleaved
# (A B C D A B C D ...); the table gives each median of per-repeat medians and its ratio to the
# baseline's.
#
#   /usr/bin/python3 bench/trace_overhead.py --baseline OLD/shapevm --candidate build/tools/shapevm
import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LATENCY = re.compile(r"latency ms: median ([0-9.]+)")


def median_ms(binary, extra, iters, level, batch, seq):
    cmd = [binary, "run", str(ROOT / "examples" / "lstm_cell.py"), "--dim", f"batch={batch}", "--dim", f"seq={seq}",
           "--iters", str(iters), "--jit-level", level, "--quiet", "--stats", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(LATENCY.search(out).group(1))


def main(argv=None):
    parser = argparse.ArgumentParser(description="what the timeline costs: run latency with tracing off and on")
    parser.add_argument("--baseline", required=True, help="a shapevm binary without the trace hooks")
    parser.add_argument("--candidate", required=True, help="this build's shapevm")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--iters", type=int, default=3000)
    parser.add_argument("--jit-level", default="O0")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trace = str(Path(tmp) / "t.json")
        configs = [
            ("baseline (no trace hooks)", args.baseline, []),
            ("tracing off", args.candidate, []),
            ("--trace (aggregated per run)", args.candidate, ["--trace", trace]),
            ("--trace --trace-ops", args.candidate, ["--trace", trace, "--trace-ops"]),
        ]
        samples = {name: [] for name, _, _ in configs}
        for _ in range(args.repeats):
            for name, binary, extra in configs:
                samples[name].append(median_ms(binary, extra, args.iters, args.jit_level, args.batch, args.seq))
    base = statistics.median(samples[configs[0][0]])
    print(f"lstm_cell.py batch={args.batch} seq={args.seq} {args.jit_level}, {args.iters} runs x {args.repeats} "
          "interleaved repeats")
    print("| configuration | median run latency (us) | vs baseline | repeats' spread (us) |")
    print("|---|---:|---:|---|")
    for name, _, _ in configs:
        values = samples[name]
        med = statistics.median(values)
        print(f"| {name} | {med * 1e3:.2f} | {med / base:.3f}x | {min(values) * 1e3:.2f} .. {max(values) * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
