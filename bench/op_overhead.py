#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Per-op overhead of the ShapeVM interpreter vs PyTorch eager, measured in one script run.
# ShapeVM: bench binary svm_bench_op_overhead (Google Benchmark, 100 CallOp add per VM run).
# PyTorch: torch.add in a Python loop, 1 thread. Rounds alternate the two; medians over rounds. Prints a markdown table with ns/op and the ratio (ShapeVM / PyTorch).
# Usage: /usr/bin/python3 bench/op_overhead.py [--bin build/bench/svm_bench_op_overhead]
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def shapevm_ns_per_op(binary, repetitions):
    args = [binary, "--benchmark_format=json", "--benchmark_min_time=0.2"]
    if repetitions > 1:
        args.append(f"--benchmark_repetitions={repetitions}")
    data = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    result = {}
    for b in data["benchmarks"]:
        if repetitions > 1 and b.get("aggregate_name") != "median":
            continue
        if repetitions == 1 and b.get("run_type") == "aggregate":
            continue
        name = b["run_name"].split("/")[-1] if "/" in b["run_name"] else b["run_name"]
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6}[b["time_unit"]]
        result[name.replace("benchAdd", "").strip("_/")] = b["real_time"] * scale / 100.0
    return result


def torch_ns_per_op(shape, repeats, loops, preallocated):
    """torch.add(a, b) per call; with `preallocated`, torch.add(a, b, out=c) (no allocation,
    the closest peer to ShapeVM reusing a site's uniquely owned output buffer)."""
    torch.set_num_threads(1)
    a = torch.randn(shape)
    b = torch.randn(shape)
    c = torch.empty(shape)
    # Correctness first: the op being timed computes the same as numpy.
    assert np.allclose(torch.add(a, b).numpy(), a.numpy() + b.numpy())
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        if preallocated:
            for _ in range(loops):
                torch.add(a, b, out=c)
        else:
            for _ in range(loops):
                torch.add(a, b)
        samples.append((time.perf_counter_ns() - start) / loops)
    return statistics.median(samples), min(samples), max(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="build/bench/svm_bench_op_overhead")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    # Rounds interleave ShapeVM and PyTorch so both see the same machine state (this shared VM's
    # speed drifts by up to 2x over minutes); each figure is the median over rounds.
    cases = [("1 element", (1,), "add_1elem"), ("64x64", (64, 64), "add_64x64")]
    peers = [("torch.add(a, b)", False), ("torch.add(a, b, out=c)", True)]
    svm_samples = {}
    torch_samples = {}
    for _ in range(args.repeats):
        for name, value in shapevm_ns_per_op(args.bin, 1).items():
            svm_samples.setdefault(name, []).append(value)
        for label, shape, key in cases:
            for peer, preallocated in peers:
                med, _, _ = torch_ns_per_op(shape, 1, 20000, preallocated)
                torch_samples.setdefault((key, peer), []).append(med)
    rows = []
    for label, shape, key in cases:
        for peer, _ in peers:
            t = torch_samples[(key, peer)]
            t_med = statistics.median(t)
            for variant in ("profiled", "unprofiled"):
                v = statistics.median(svm_samples[f"{key}_{variant}"])
                rows.append((label, variant, peer, v, t_med, min(t), max(t), v / t_med))
    print(f"CPU: {cpu_model()}; torch {torch.__version__}, 1 thread; date {time.strftime('%Y-%m-%d')}; "
          f"{args.repeats} interleaved rounds")
    print()
    print("| add on | ShapeVM profiling | ShapeVM ns/op (median) | PyTorch eager peer | PyTorch ns/op (median, min-max) | ratio ShapeVM/PyTorch |")
    print("|---|---|---:|---|---:|---:|")
    for label, variant, peer, v, t_med, t_min, t_max, ratio in rows:
        print(f"| {label} | {variant} | {v:.1f} | `{peer}` | {t_med:.0f} ({t_min:.0f}-{t_max:.0f}) | {ratio:.3f} (1/{1 / ratio:.0f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
