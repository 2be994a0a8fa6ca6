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
#   instr  (--callgrind) instructions per run on the interpreter thread under valgrind's
#          callgrind, which counts every executed instruction (deterministic, independent of the
#          machine's load): one dump per VirtualMachine::run, so each run is counted alone; the
#          last runs (after the tier-up) are paired by iteration (same inputs) and the table
#          gives the median count and the median paired difference. The compile thread is left
#          out (under valgrind a region's compile takes minutes, so the cell runs without
#          --jit-wait: its first runs are interpreted, the compiled ones follow).
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
        "chain": {"what": "200 adds on f32[4] per run, O0", "iters": 2000, "callgrind_iters": 60, "wall": [],
                  "callgrind": [],
                  "args": [str(chain), "--dim", "n=4", "--jit-level", "O0"]},
        "cell": {"what": "reference cell, batch 32 seq 10, O2 after tier-up, 1 kernel thread", "iters": 300,
                 "callgrind_iters": 60, "wall": ["--jit-wait"], "callgrind": ["--set", "tune_budget_ms=0"],
                 "args": [str(ROOT / "examples" / "lstm_cell.py"), "--dim", "batch=32", "--dim", "seq=10",
                          "--jit-level", "O2", "--set", "kernel_threads=1"]},
    }


def command(binary, work, iters, extra, cpu):
    cmd = [binary, "run", *work["args"], "--iters", str(iters), "--quiet", "--stats", *extra]
    return (["taskset", "-c", str(cpu)] if cpu is not None else []) + cmd


def median_ms(binary, work, extra, cpu, env):
    out = subprocess.run(command(binary, work, work["iters"], work["wall"] + extra, cpu), capture_output=True,
                         text=True, check=True, env=env).stdout
    return float(LATENCY.search(out).group(1))


def instructions(binary, work, iters, cpu, env, tmp):
    """Instructions of each run on the interpreter thread: {run number: count}."""
    folder = Path(tempfile.mkdtemp(dir=tmp))
    cmd = ["valgrind", "--tool=callgrind", "--smc-check=all-non-file", "--separate-threads=yes",
           "--dump-before=shapevm::VirtualMachine::run(int*", f"--callgrind-out-file={folder / 'cg.out'}",
           *command(binary, work, iters, work["callgrind"], None)]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu)] + cmd
    subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    runs = {}
    for part in folder.glob("cg.out.*-01"):  # thread 1: the interpreter; dump N is taken before run N
        number = int(re.search(r"cg\.out\.(\d+)-01", part.name).group(1)) - 1
        if number >= 1:
            runs[number] = int(re.search(r"^summary:\s*(\d+)", part.read_text(), re.M).group(1))
    shutil.rmtree(folder)
    return runs


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
                subprocess.run(command(binary, work, 20, work["wall"], args.cpu), capture_output=True, check=True,
                               env=env)
            print(f"\n### {name}: {work['what']}\n")
            if args.callgrind:
                iters = work["callgrind_iters"]
                base = instructions(args.baseline, work, iters, args.cpu, env, tmp)
                mine = instructions(args.candidate, work, iters, args.cpu, env, tmp)
                last = [k for k in range(iters - 10, iters) if k in base and k in mine]  # the last 10 runs
                b = statistics.median(base[k] for k in last)
                m = statistics.median(mine[k] for k in last)
                diff = statistics.median(mine[k] - base[k] for k in last)
                print(f"instructions per run on the interpreter thread (callgrind, the last {len(last)} of {iters} "
                      "runs, paired by iteration):\n")
                print("| hooks compiled out | hooks in, tracing off | median paired difference |")
                print("|---:|---:|---:|")
                print(f"| {b:,.0f} | {m:,.0f} | {diff:+,.0f} ({diff / b:+.4%}) |\n")
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
