#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# What the trace and debug hooks cost while they are off (docs/observability.md, BENCHMARKS.md).
# The baseline is `shapevm` built from the SAME source with the hooks compiled out
# (cmake -DSHAPEVM_TRACE_HOOKS=OFF); the candidate is the normal build with tracing off (and, with
# --with-trace, on). Two workloads:
#   chain  an interpreter-bound program at O0: a loop of 200 adds on f32[4] per run (200 op
#          dispatches, ~1,000 instructions of bytecode, almost no kernel time: a per-op or
#          per-instruction hook shows fully);
#   cell   the reference cell (examples/lstm_cell.py, batch 32, seq 10) at O2 after its tier-up
#          (--jit-wait, one kernel thread, a kernel cache warmed before measuring).
# Two measures:
#   wall   median run latency (`--stats`) per process; processes interleaved (A B A B ...); the
#          table gives the median of the per-process medians and the ratio to the baseline's;
#   instr  (--callgrind) instructions per run under valgrind's callgrind, which counts every
#          executed instruction (deterministic, independent of the machine's load): the
#          difference between runs with N2 and N1 iterations, divided by N2 - N1, so start-up,
#          compiles and the tier-up's first runs cancel out.
#
#   /usr/bin/python3 bench/trace_overhead.py --baseline build-nohooks/tools/shapevm \
#       --candidate build/tools/shapevm [--callgrind] [--with-trace] [--repeats 11] [--cpu 0]
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LATENCY = re.compile(r"latency ms: median ([0-9.]+)")
CHAIN = '''from shapevm import ops, Tensor


def chain(x: Tensor["n"]):
    y = x
    for i in range(200):
        y = y + x
    return y
'''


def workloads(tmp):
    chain = Path(tmp) / "chain.py"
    chain.write_text(CHAIN)
    return {
        "chain": {"what": "200 adds on f32[4] per run, O0", "iters": 2000, "callgrind_iters": (20, 220),
                  "args": [str(chain), "--dim", "n=4", "--jit-level", "O0"]},
        "cell": {"what": "reference cell, batch 32 seq 10, O2 after tier-up, 1 kernel thread", "iters": 300,
                 "callgrind_iters": (20, 60),
                 "args": [str(ROOT / "examples" / "lstm_cell.py"), "--dim", "batch=32", "--dim", "seq=10",
                          "--jit-level", "O2", "--jit-wait", "--set", "kernel_threads=1"]},
    }


def command(binary, work, iters, extra, cpu):
    cmd = [binary, "run", *work["args"], "--iters", str(iters), "--quiet", "--stats", *extra]
    return (["taskset", "-c", str(cpu)] if cpu is not None else []) + cmd


def median_ms(binary, work, extra, cpu, env):
    out = subprocess.run(command(binary, work, work["iters"], extra, cpu), capture_output=True, text=True, check=True,
                         env=env).stdout
    return float(LATENCY.search(out).group(1))


def instructions(binary, work, iters, cpu, env, tmp):
    out_file = Path(tmp) / "callgrind.out"
    cmd = ["valgrind", "--tool=callgrind", "--smc-check=all-non-file", f"--callgrind-out-file={out_file}",
           *command(binary, work, iters, [], None)]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu)] + cmd
    subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    text = out_file.read_text()
    out_file.unlink()
    totals = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
    return int(totals.group(1))


def main(argv=None):
    parser = argparse.ArgumentParser(description="what the trace/debug hooks cost while off, against a build "
                                                 "without them (same source, -DSHAPEVM_TRACE_HOOKS=OFF)")
    parser.add_argument("--baseline", required=True, help="shapevm built with -DSHAPEVM_TRACE_HOOKS=OFF")
    parser.add_argument("--candidate", required=True, help="shapevm built with the hooks (the default)")
    parser.add_argument("--repeats", type=int, default=11, help="interleaved processes per configuration")
    parser.add_argument("--workload", choices=["chain", "cell"], action="append",
                        help="default: both")
    parser.add_argument("--with-trace", action="store_true", help="also time --trace and --trace --trace-ops")
    parser.add_argument("--callgrind", action="store_true", help="also count instructions per run (valgrind)")
    parser.add_argument("--no-wall", action="store_true", help="only the instruction counts")
    parser.add_argument("--cpu", type=int, help="pin every process to this CPU (taskset)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, SHAPEVM_CACHE_DIR=str(Path(tmp) / "cache"))  # shared, warmed below
        trace = str(Path(tmp) / "t.json")
        works = workloads(tmp)
        for name in args.workload or ["chain", "cell"]:
            work = works[name]
            # Warm the kernel cache (and the tuning database) once, so that every process below
            # installs the same kernels without compiling.
            for binary in (args.baseline, args.candidate):
                subprocess.run(command(binary, work, 10, [], args.cpu), capture_output=True, check=True, env=env)
            print(f"\n### {name}: {work['what']}\n")
            if args.callgrind:
                n1, n2 = work["callgrind_iters"]
                print(f"instructions per run (callgrind, ({n2} runs - {n1} runs) / {n2 - n1}):\n")
                print("| build | instructions per run | vs hooks compiled out |")
                print("|---|---:|---:|")
                per_run = {}
                for label, binary in (("hooks compiled out", args.baseline), ("hooks in, tracing off", args.candidate)):
                    low = instructions(binary, work, n1, args.cpu, env, tmp)
                    high = instructions(binary, work, n2, args.cpu, env, tmp)
                    per_run[label] = (high - low) / (n2 - n1)
                base = per_run["hooks compiled out"]
                for label, value in per_run.items():
                    print(f"| {label} | {value:,.0f} | {value / base:.4f}x ({value - base:+,.0f}) |")
                print()
            if args.no_wall:
                continue
            configs = [("hooks compiled out", args.baseline, []), ("hooks in, tracing off", args.candidate, [])]
            if args.with_trace:
                configs += [("--trace (aggregated per run)", args.candidate, ["--trace", trace]),
                            ("--trace --trace-ops", args.candidate, ["--trace", trace, "--trace-ops"])]
            samples = {label: [] for label, _, _ in configs}
            for _ in range(args.repeats):
                for label, binary, extra in configs:
                    samples[label].append(median_ms(binary, work, extra, args.cpu, env))
            base = statistics.median(samples[configs[0][0]])
            print(f"wall clock: {work['iters']} runs per process, median of {args.repeats} interleaved processes:\n")
            print("| build | median run latency (us) | vs hooks compiled out | processes' spread (us) |")
            print("|---|---:|---:|---|")
            for label, _, _ in configs:
                values = samples[label]
                med = statistics.median(values)
                print(f"| {label} | {med * 1e3:.2f} | {med / base:.3f}x | "
                      f"{min(values) * 1e3:.2f} .. {max(values) * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    if shutil.which("valgrind") is None and "--callgrind" in sys.argv:
        sys.exit("bench/trace_overhead.py: --callgrind needs valgrind")
    sys.exit(main())
