#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""kernel_threads=auto against one thread and against PyTorch at its default thread count (issue 23, item 8).

Per-call latency of the reference cell (examples/lstm_cell.py, batch 32) at each seq: ShapeVM at O2
after tier-up (`shapevm run ... --jit-wait --stats`, the median of the calls after the first
quarter) with kernel_threads=1 and kernel_threads=auto, and PyTorch eager (bench/peers.py's
torch_lstm_cell) in a fresh process at its default thread count and at 1 thread. Configurations
are interleaved round by round; the figures are medians over the rounds.

Usage: /usr/bin/python3 bench/threads_vs_torch.py [--bin PATH] [--seqs 10,30,120] [--rounds 5] [--iters 200]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = "/usr/bin/python3"

TORCH_CHILD = r"""
import sys, time, statistics
sys.path.insert(0, {bench!r})
import torch
threads = {threads}
if threads > 0:
    torch.set_num_threads(threads)
import peers
inputs, params = peers.make_workload(peers.SEED, 32, {seq})
args = [torch.from_numpy(a) for a in peers.workload_args(inputs, params)]
f = peers.torch_lstm_cell
peers.F = torch.nn.functional
peers.torch = torch
with torch.no_grad():
    for _ in range(20):
        f(*args)
    samples = []
    for _ in range({iters}):
        t = time.perf_counter()
        f(*args)
        samples.append((time.perf_counter() - t) * 1e3)
print("threads", torch.get_num_threads(), "median_ms", statistics.median(samples))
"""


def shapevm_ms(binary, seq, iters, threads):
    with tempfile.TemporaryDirectory(prefix="svm-threads-") as cache:
        env = dict(os.environ, SHAPEVM_CACHE_DIR=cache)
        # One seq per process; --jit-wait makes tier-up deterministic; the last 3/4 of the calls are timed.
        proc = subprocess.run([binary, "run", str(ROOT / "examples" / "lstm_cell.py"), "--dim", "batch=32", "--dim",
                               f"seq={seq}", "--iters", str(iters), "--quiet", "--stats", "--jit-level", "O2",
                               "--jit-wait", "--set", f"kernel_threads={threads}", "--set", "tune_payoff=0"],
                              env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        m = re.search(r"latency ms: median ([0-9.]+)", proc.stdout)
        return float(m.group(1))


def torch_ms(seq, iters, threads):
    code = TORCH_CHILD.format(bench=str(ROOT / "bench"), threads=threads, seq=seq, iters=iters)
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    m = re.search(r"threads (\d+) median_ms ([0-9.]+)", proc.stdout)
    return float(m.group(2)), int(m.group(1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "build" / "tools" / "shapevm"))
    ap.add_argument("--seqs", default="10,30,120")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args(argv)
    seqs = [int(s) for s in args.seqs.split(",")]
    res = {}
    torch_threads = None
    for r in range(args.rounds):
        for seq in seqs:
            res.setdefault(("svm 1 thread", seq), []).append(shapevm_ms(args.bin, seq, args.iters, "1"))
            res.setdefault(("svm auto", seq), []).append(shapevm_ms(args.bin, seq, args.iters, "auto"))
            ms, torch_threads = torch_ms(seq, args.iters, 0)
            res.setdefault(("torch default", seq), []).append(ms)
            res.setdefault(("torch 1 thread", seq), []).append(torch_ms(seq, args.iters, 1)[0])
            print(f"round {r + 1} seq {seq}: " + ", ".join(f"{k[0]} {v[-1]:.3f} ms" for k, v in res.items() if k[1] == seq),
                  file=sys.stderr, flush=True)
    print(f"cores available: {len(os.sched_getaffinity(0))}; PyTorch default threads: {torch_threads}; "
          f"medians of {args.rounds} interleaved rounds (ms per call)")
    print(f"{'seq':>4} {'svm 1t':>8} {'svm auto':>9} {'torch dflt':>11} {'torch 1t':>9} {'auto/1t':>8} {'torch/auto':>11}")
    for seq in seqs:
        m = {k[0]: statistics.median(v) for k, v in res.items() if k[1] == seq}
        print(f"{seq:>4} {m['svm 1 thread']:>8.3f} {m['svm auto']:>9.3f} {m['torch default']:>11.3f} {m['torch 1 thread']:>9.3f} "
              f"{m['svm auto'] / m['svm 1 thread']:>8.2f} {m['torch default'] / m['svm auto']:>11.2f}")


if __name__ == "__main__":
    main()
