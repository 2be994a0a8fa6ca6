#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# The LSTM gate math alone (issue 19): the cell's gates as a Module (bench/cell_bound.py's GateMath:
# gx, gh, c in; h', c' out) at seq 10 and 120, and sigmoid/tanh/silu/gelu on 256 Ki float32 (L2-
# resident), each alone (the elementwise family) and after a multiply (the fused family). One
# thread, the calling thread's CPU time, interleaved rounds, medians (µs per call). Run it once per
# build and alternate builds (BENCHMARKS.md, "Cheaper gate math: sigmoid and tanh (issue 19)").
# Usage: PYTHONPATH=build/python:bench /usr/bin/python3 bench/gate_math.py [--rounds 7]
import argparse
import os
import statistics
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402

import shapevm  # noqa: E402
from cell_bound import BATCH, GateMath  # noqa: E402  (bench/)
from python_module import per_call_us  # noqa: E402  (bench/)
from shapevm import Tensor, ops  # noqa: E402


def sigmoid(x: Tensor[None]):
    return ops.sigmoid(x)


def tanh(x: Tensor[None]):
    return ops.tanh(x)


def silu(x: Tensor[None]):
    return ops.silu(x)


def gelu(x: Tensor[None]):
    return ops.gelu(x)


def sigmoid_fused(x: Tensor[None]):
    return ops.sigmoid(x * 1.5)


def tanh_fused(x: Tensor[None]):
    return ops.tanh(x * 1.5)


def silu_fused(x: Tensor[None]):
    return ops.silu(x * 1.5)


def gelu_fused(x: Tensor[None]):
    return ops.gelu(x * 1.5)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SHAPEVM_CACHE_DIR"] = cache
        shapevm.set_context(jit_level="O2", kernel_threads=1, hot_count=2)
        gates = GateMath(wait=True)
        cases = {}
        for seq in (10, 120):
            x = rng.standard_normal((BATCH, seq, 128), np.float32)
            gx = rng.standard_normal((BATCH * seq, 1024), np.float32) * 2
            gh = rng.standard_normal((BATCH, 1024), np.float32)
            c = rng.standard_normal((BATCH, 256), np.float32)
            cases[f"gates seq {seq}"] = (gates, (gx, gh, c, x), max(3, 600 // seq))
        v = (rng.standard_normal(1 << 18) * 4).astype(np.float32)
        for f in (sigmoid, tanh, silu, gelu, sigmoid_fused, tanh_fused, silu_fused, gelu_fused):
            cases[f.__name__] = (shapevm.jit(f), (v,), 50)
        for fn, a, _ in cases.values():  # tier-up and tuning
            for _ in range(40):
                fn(*a)
        times = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, (fn, a, calls) in cases.items():
                times[name].append(per_call_us(fn, a, calls, [0.0, 0, 0]))
    print("| case | µs per call |\n|---|---:|")
    for name, t in times.items():
        print(f"| {name} | {statistics.median(t):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
