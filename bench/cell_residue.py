#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Where "cell − parts" of bench/cell_bound.py --parts goes (issue 19). Each part there runs in a
# loop of its own, so its weights and buffers stay in the L2 cache from call to call; in the cell
# they do not. Per seq, in interleaved rounds (the calling thread's CPU time, medians), this times:
# the cell; its three parts called one after the other as the cell runs them (x·W_ihᵀ + b_ih, then
# h·W_hhᵀ + b_hh, then the gates on their fresh outputs), each part's share timed on its own; each
# part in a loop of its own; and each part and the cell right after 8 MiB of other writes (the
# cache holds none of their data). With --threads: the cell at kernel_threads 1, 2 and auto against
# PyTorch eager at its default thread count and at 2, wall and process CPU time per call.
# Usage: PYTHONPATH=build/python:bench /usr/bin/python3 bench/cell_residue.py [--rounds 7]
#        [--seqs 10,20,30] [--threads]
import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

import shapevm  # noqa: E402
from cell_bound import BATCH, GateMath, HiddenGates, InputGates, cell_weights  # noqa: E402  (bench/)
from op_overhead import cpu_model  # noqa: E402  (bench/)
from python_module import ReferenceCell, torch_cell  # noqa: E402  (bench/)

NOW = time.thread_time_ns
KINDS = ("cell", "in order", "x·W_ihᵀ in order", "h·W_hhᵀ in order", "gates in order", "x·W_ihᵀ alone",
         "h·W_hhᵀ alone", "gates alone", "cell, cold", "x·W_ihᵀ, cold", "h·W_hhᵀ, cold", "gates, cold")


def round_times(cell, parts, args, calls, junk):
    """One round of every kind (µs per call)."""
    (ig, hg, gm), (x, h, c) = parts, args
    out = {}
    start = NOW()
    for _ in range(calls):
        cell(x, h, c)
    out["cell"] = (NOW() - start) / calls / 1e3
    spent = [0, 0, 0]
    start = NOW()
    for _ in range(calls):
        t0 = NOW()
        gx = ig(x)
        t1 = NOW()
        gh = hg(h)
        t2 = NOW()
        gm(gx, gh, c, x)
        spent[0] += t1 - t0
        spent[1] += t2 - t1
        spent[2] += NOW() - t2
        del gx, gh
    out["in order"] = (NOW() - start) / calls / 1e3
    for name, ns in zip(KINDS[2:5], spent):
        out[name] = ns / calls / 1e3
    gx, gh = ig(x), hg(h)
    loops = ((ig, (x,)), (hg, (h,)), (gm, (gx, gh, c, x)))
    for name, (fn, fn_args) in zip(KINDS[5:8], loops):
        start = NOW()
        for _ in range(calls):
            fn(*fn_args)
        out[name] = (NOW() - start) / calls / 1e3
    for name, (fn, fn_args) in zip(KINDS[8:], ((cell, args),) + loops):
        ns = 0
        for _ in range(calls):
            junk += 1.0  # 8 MiB written: what the cache held is gone
            t0 = NOW()
            fn(*fn_args)
            ns += NOW() - t0
        out[name] = ns / calls / 1e3
    return out


def residue(args, seqs, rng, weights):
    shapevm.set_context(kernel_threads=1)
    cell = ReferenceCell(weights, wait=True)
    parts = (InputGates(weights, wait=True), HiddenGates(weights, wait=True), GateMath(wait=True))
    data = {}
    for seq in seqs:
        x = rng.standard_normal((BATCH, seq, 128), np.float32)
        h = rng.standard_normal((BATCH, 256), np.float32)
        c = rng.standard_normal((BATCH, 256), np.float32)
        for _ in range(5):
            cell(x, h, c)
            parts[2](parts[0](x), parts[1](h), c, x)
        data[seq] = (x, h, c)
    cell.wait_idle()
    for part in parts:
        part.wait_idle()
    junk = np.ones(8 << 18, np.float32)
    times = {seq: {k: [] for k in KINDS} for seq in seqs}
    for _ in range(args.rounds):
        for seq in seqs:
            for name, us in round_times(cell, parts, data[seq], max(3, 300 // seq), junk).items():
                times[seq][name].append(us)
    print("µs per call (medians). 'in order': the parts called one after the other as the cell runs them;"
          " 'alone': each part in a loop of its own (cell_bound.py --parts); 'cold': after 8 MiB of other writes.\n")
    print("| seq | " + " | ".join(KINDS) + " | cell − parts alone | cell − parts in order |")
    print("|---:|" + "---:|" * (len(KINDS) + 2))
    for seq in seqs:
        med = {k: statistics.median(v) for k, v in times[seq].items()}
        alone = sum(med[k] for k in KINDS[5:8])
        print(f"| {seq} | " + " | ".join(f"{med[k]:.0f}" for k in KINDS) +
              f" | {med['cell'] - alone:.0f} | {med['cell'] - med['in order']:.0f} |")


def threads(args, seqs, rng, weights):
    import torch
    default = torch.get_num_threads()
    shapevm.set_context(kernel_threads=0)
    cell = ReferenceCell(weights, wait=True)
    tw = {k: torch.from_numpy(v) for k, v in weights.items()}
    data = {}
    for seq in seqs:
        svm_args = tuple(rng.standard_normal(s, np.float32) for s in ((BATCH, seq, 128), (BATCH, 256), (BATCH, 256)))
        for _ in range(20):
            cell(*svm_args)
        data[seq] = (svm_args, tuple(map(torch.from_numpy, svm_args)))
    cell.wait_idle()
    configs = (("ShapeVM kernel_threads=1", 1), ("ShapeVM kernel_threads=2", 2), ("ShapeVM auto", 0),
               (f"eager, default ({default} thread{'s' if default > 1 else ''})", default), ("eager, 2 threads", 2))
    times = {(seq, name): ([], []) for seq in seqs for name, _ in configs}
    for _ in range(args.rounds):
        for seq in seqs:
            svm_args, torch_args = data[seq]
            for name, n in configs:
                if name.startswith("ShapeVM"):
                    shapevm.set_context(kernel_threads=n)
                    fn, fn_args = cell, svm_args
                else:
                    torch.set_num_threads(n)
                    fn, fn_args = (lambda *a: torch_cell(tw, *a)), torch_args
                for _ in range(3):
                    fn(*fn_args)
                calls = max(3, 300 // seq)
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(calls):
                    fn(*fn_args)
                times[(seq, name)][0].append((time.perf_counter() - wall) / calls * 1e6)
                times[(seq, name)][1].append((time.process_time() - cpu) / calls * 1e6)
    torch.set_num_threads(default)
    print("\nkernel_threads against eager: wall / process CPU µs per call (medians)\n")
    print("| seq | " + " | ".join(name for name, _ in configs) + " |")
    print("|---:|" + "---|" * len(configs))
    for seq in seqs:
        cells = [f"{statistics.median(times[(seq, n)][0]):.0f} / {statistics.median(times[(seq, n)][1]):.0f}"
                 for n, _ in configs]
        print(f"| {seq} | " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seqs", default="10,20,30")
    parser.add_argument("--threads", action="store_true", help="also kernel_threads 1/2/auto against eager")
    args = parser.parse_args()
    seqs = [int(s) for s in args.seqs.split(",")]
    rng = np.random.default_rng(11)
    weights = cell_weights(rng)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SHAPEVM_CACHE_DIR"] = cache  # the cell and the parts share one tuning database
        shapevm.set_context(jit_level="O2")
        print(f"Host: {cpu_model()}; {args.rounds} interleaved rounds.\n")
        residue(args, seqs, rng, weights)
        if args.threads:
            threads(args, seqs, rng, weights)
    return 0


if __name__ == "__main__":
    sys.exit(main())
