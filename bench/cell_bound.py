#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Is "the reference cell ≥ 3× faster than PyTorch eager" (issue 19) reachable on this host in
# float32? One thread, the calling thread's CPU time, interleaved rounds, medians. Per seq it times
# eager's whole cell (E), eager's two `linear`s alone (L), ShapeVM's cell through shapevm.Module (S),
# and, between rounds, oneDNN's best float32 rate at the cell's two matmul shapes
# (build/bench/svm_bench_onednn_peak: the matmul primitive and dnnl_sgemm). The bound is E divided by
# the time of the cell's matmul flops at oneDNN's best rate, i.e. the speed-up over eager of a cell
# whose elementwise work cost nothing: if it is below 3, no float32 implementation reaches 3×.
# --parts adds, per seq, the cell's parts each as a Module of its own, timed in the same rounds:
# x·W_ihᵀ + b_ih, h·W_hhᵀ + b_hh, the gates (the fused elementwise kernel, from gx and gh), and a
# one-op Module (the call's boundary); each matmul part against its flops at oneDNN's best rate.
# Usage: PYTHONPATH=build/python:bench /usr/bin/python3 bench/cell_bound.py [--rounds 5]
#        [--seqs 10,20,30,120] [--peak build/bench/svm_bench_onednn_peak] [--parts]
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
from shapevm import Tensor, ops  # noqa: E402

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


class InputGates(shapevm.Module):
    """The cell's x·W_ihᵀ + b_ih alone."""

    def __init__(self, weights, **options):
        super().__init__(**options)
        self.W_ih, self.b_ih = weights["W_ih"], weights["b_ih"]

    def construct(self, x: Tensor["batch", "seq", 128]):
        batch, seq, _ = x.shape
        return ops.reshape(x, (batch * seq, 128)) @ self.W_ih.T + self.b_ih


class HiddenGates(shapevm.Module):
    """The cell's h·W_hhᵀ + b_hh alone."""

    def __init__(self, weights, **options):
        super().__init__(**options)
        self.W_hh, self.b_hh = weights["W_hh"], weights["b_hh"]

    def construct(self, h: Tensor["batch", 256]):
        return h @ self.W_hh.T + self.b_hh


class GateMath(shapevm.Module):
    """The cell after its two products: gx and gh in, h' and c' out (x only gives the shape)."""

    def construct(self, gx: Tensor["rows", 1024], gh: Tensor["batch", 1024], c: Tensor["batch", 256],
                  x: Tensor["batch", "seq", 128]):
        batch, seq, _ = x.shape
        gates = ops.reshape(gx, (batch, seq, 1024)) + ops.unsqueeze(gh, 1)
        i, f, g, o = ops.split(gates, 4, axis=2)
        c_next = ops.sigmoid(f) * ops.unsqueeze(c, 1) + ops.sigmoid(i) * ops.tanh(g)
        return ops.sigmoid(o) * ops.tanh(c_next), c_next


class Boundary(shapevm.Module):
    """One small op on the cell's arguments: what a call costs besides its kernels."""

    def construct(self, x: Tensor["batch", "seq", 128], h: Tensor["batch", 256], c: Tensor["batch", 256]):
        return h + c


PARTS = ("x·W_ihᵀ + b", "h·W_hhᵀ + b", "gates", "boundary")


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
    parser.add_argument("--parts", action="store_true", help="also time the cell's parts (see the header)")
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
        parts = dict(zip(PARTS, (InputGates(weights, wait=True), HiddenGates(weights, wait=True), GateMath(wait=True),
                                 Boundary(wait=True)))) if args.parts else {}
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
            part_args = {}
            if parts:
                gx, gh = parts[PARTS[0]](x), parts[PARTS[1]](h)
                got = parts[PARTS[2]](gx, gh, c, x)
                for e, g in zip(expect, got):
                    err = np.linalg.norm(g - e.numpy()) / np.linalg.norm(e.numpy())
                    assert err < 1e-5, (seq, "parts", err)
                part_args = dict(zip(PARTS, ((x,), (h,), (gx, gh, c, x), (x, h, c))))
            data[seq] = ((x, h, c), (tx, th, tc), linears, max(3, 300 // seq), part_args)
        times = {seq: {k: [] for k in ("E", "L", "S") + (PARTS if parts else ())} for seq in seqs}
        rates = []
        for _ in range(args.rounds):
            for seq in seqs:
                (svm_args, torch_args, linears, calls, part_args) = data[seq]
                sink = [0.0, 0, 0]
                times[seq]["S"].append(per_call_us(cell, svm_args, calls, sink))
                for name, module in parts.items():
                    times[seq][name].append(per_call_us(module, part_args[name], calls, sink))
                times[seq]["E"].append(per_call_us(lambda *a: torch_cell(tw, *a), torch_args, calls, sink))
                times[seq]["L"].append(per_call_us(linears, (), calls, sink))
            rates.append(onednn_rates(args.peak))
        launches = cell.stats()
        libraries = {name: library_kernels(m) for name, m in [("cell", cell)] + list(parts.items())[:2]}
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
    if parts:
        print_parts(seqs, times, rates)
        print("\nLibrary kernels each Module's tuner kept (the rest are generated):")
        for name, line in libraries.items():
            print(f"- {name}: {line}")
    return 0


def library_kernels(module):
    """The jit report's line naming the Module's oneDNN kernels (after its colon)."""
    for line in module.stats()["jit_report"].splitlines():
        if "library kernels" in line:
            return line.split("): ", 1)[-1]
    return "none"


def print_parts(seqs, times, rates):
    """The parts table: each part's µs, its share of the cell, and a matmul part's time at oneDNN's best."""
    print("\nThe cell's parts, each a Module of its own (µs per call; share of the whole cell's µs; a matmul part"
          " also as its flops at oneDNN's best rate):\n")
    print("| seq | cell µs | " + " | ".join(f"{p} µs" for p in PARTS) + " | cell − parts µs |")
    print("|---:|---:|" + "---:|" * (len(PARTS) + 1))
    for seq in seqs:
        s = statistics.median(times[seq]["S"])
        med = {p: statistics.median(times[seq][p]) for p in PARTS}
        fx, fh = flops(seq)
        best = {PARTS[1]: fh / statistics.median(r["h*W_hh^T"] for r in rates) / 1e3}
        if f"x*W_ih^T seq {seq}" in rates[0]:
            best[PARTS[0]] = fx / statistics.median(r[f"x*W_ih^T seq {seq}"] for r in rates) / 1e3
        cells = []
        for p in PARTS:
            cell = f"{med[p]:.0f} ({med[p] / s:.0%})"
            if p in best:
                cell += f", oneDNN's best {best[p]:.0f}"
            cells.append(cell)
        rest = s - sum(med[p] for p in PARTS[:3])
        print(f"| {seq} | {s:.0f} | " + " | ".join(cells) + f" | {rest:.0f} ({rest / s:.0%}) |")


if __name__ == "__main__":
    sys.exit(main())
