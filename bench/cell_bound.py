#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Is "the reference cell ≥ 3× faster than PyTorch eager" (issue 19) reachable on this host in
# float32? One thread, the calling thread's CPU time, interleaved rounds, medians. Per seq it times
# eager's whole cell (E), eager's two `linear`s alone (L), ShapeVM's cell through shapevm.Module (S),
# and, between rounds, oneDNN's best float32 rate at the cell's two matmul shapes
# (build/bench/svm_bench_onednn_peak: the matmul primitive and dnnl_sgemm). The bound is E divided by
# the time of the cell's matmul flops at oneDNN's best rate, i.e. the speed-up over eager of a cell
# whose elementwise work cost nothing: if it is below 3, no float32 implementation reaches 3×.
# Usage: PYTHONPATH=build/python:bench /usr/bin/python3 bench/cell_bound.py [--rounds 5]
#        [--seqs 10,20,30,120] [--peak build/bench/svm_bench_onednn_peak]
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import shapevm  # noqa: E402
from op_overhead import cpu_model  # noqa: E402  (bench/)
from python_module import ReferenceCell, per_call_us, torch_cell  # noqa: E402  (bench/)

ROOT = Path(__file__).resolve().parents[1]
BATCH = 32


def flops(seq):
    """(x·W_ihᵀ, h·W_hhᵀ) flops of one cell call."""
    return 2.0 * BATCH * seq * 128 * 1024, 2.0 * BATCH * 256 * 1024


def cell_weights(rng):
    """The reference cell's parameters (float32, N(0, 0.01)); bench/bf16_cell.py uses them too."""
    return {"W_ih": rng.standard_normal((1024, 128), np.float32) * 0.1,
            "W_hh": rng.standard_normal((1024, 256), np.float32) * 0.1,
            "b_ih": rng.standard_normal(1024, np.float32) * 0.1,
            "b_hh": rng.standard_normal(1024, np.float32) * 0.1}


def onednn_rates(peak):
    """{row name: best float32 GFLOP/s} from one run of svm_bench_onednn_peak."""
    out = subprocess.run([str(peak)], capture_output=True, text=True, timeout=600, check=True).stdout
    rates = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and re.match(r"^[\d.]+$", cells[-1]):
            rates[cells[0]] = float(cells[-1])
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seqs", default="10,20,30,120")
    parser.add_argument("--peak", default=str(ROOT / "build" / "bench" / "svm_bench_onednn_peak"))
    args = parser.parse_args()
    seqs = [int(s) for s in args.seqs.split(",")]
    torch.set_num_threads(1)
    rng = np.random.default_rng(11)
    weights = cell_weights(rng)
    tw = {k: torch.from_numpy(v) for k, v in weights.items()}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SHAPEVM_CACHE_DIR"] = cache
        shapevm.set_context(jit_level="O2", kernel_threads=1)
        cell = ReferenceCell(weights, wait=True)
        data = {}
        for seq in seqs:
            x = rng.standard_normal((BATCH, seq, 128), np.float32)
            h = rng.standard_normal((BATCH, 256), np.float32)
            c = rng.standard_normal((BATCH, 256), np.float32)
            tx, th, tc = map(torch.from_numpy, (x, h, c))
            expect = torch_cell(tw, tx, th, tc)
            got = cell(x, h, c)
            for e, g in zip(expect, got):
                err = np.linalg.norm(g - e.numpy()) / np.linalg.norm(e.numpy())
                assert err < 1e-5, (seq, err)
            rows = tx.reshape(BATCH * seq, 128)

            def linears(rows=rows, th=th):
                torch.nn.functional.linear(rows, tw["W_ih"], tw["b_ih"])
                torch.nn.functional.linear(th, tw["W_hh"], tw["b_hh"])
            data[seq] = ((x, h, c), (tx, th, tc), linears, max(3, 300 // seq))
        times = {seq: {"E": [], "L": [], "S": []} for seq in seqs}
        rates = []
        for _ in range(args.rounds):
            for seq in seqs:
                (svm_args, torch_args, linears, calls) = data[seq]
                sink = [0.0, 0, 0]
                times[seq]["S"].append(per_call_us(cell, svm_args, calls, sink))
                times[seq]["E"].append(per_call_us(lambda *a: torch_cell(tw, *a), torch_args, calls, sink))
                times[seq]["L"].append(per_call_us(linears, (), calls, sink))
            rates.append(onednn_rates(args.peak))
        launches = cell.stats()
    print(f"Host: {cpu_model()}; one thread; thread CPU time; {args.rounds} interleaved rounds, medians.")
    print(f"ShapeVM cell: {launches['launches_compiled']} compiled, {launches['launches_interpreted']} interpreted"
          " launches in all.\n")
    print("| seq | eager cell µs | eager linears µs (share) | eager linear GFLOP/s | oneDNN best GFLOP/s (x·W_ihᵀ, h·W_hhᵀ)"
          " | matmul flops at oneDNN's best µs | bound: eager ÷ that | ShapeVM cell µs | eager ÷ ShapeVM |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for seq in seqs:
        e, l_, s = (statistics.median(times[seq][k]) for k in ("E", "L", "S"))
        fx, fh = flops(seq)
        rx = statistics.median(r[f"x*W_ih^T seq {seq}"] for r in rates) if f"x*W_ih^T seq {seq}" in rates[0] else None
        rh = statistics.median(r["h*W_hh^T"] for r in rates)
        if rx is None:
            print(f"| {seq} | {e:.0f} | {l_:.0f} ({l_ / e:.0%}) | {(fx + fh) / l_ / 1e3:.1f} | no peak row | | | {s:.0f} | "
                  f"{e / s:.2f}× |")
            continue
        ideal = fx / rx / 1e3 + fh / rh / 1e3
        print(f"| {seq} | {e:.0f} | {l_:.0f} ({l_ / e:.0%}) | {(fx + fh) / l_ / 1e3:.1f} | {rx:.1f}, {rh:.1f} | {ideal:.0f} | "
              f"**{e / ideal:.2f}×** | {s:.0f} | {e / s:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
