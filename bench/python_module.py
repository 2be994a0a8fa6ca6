#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# The Python module (`shapevm`, issue 19) against PyTorch eager, one thread, in one script run:
# per-call overhead of a jitted one-op function vs torch.add on 1-element arrays, a 20-op
# elementwise chain on 1-element arrays, and the reference cell through shapevm.Module at
# batch 32, seq 10/20/30/120. Each round times ShapeVM and PyTorch back to back; the table gives
# medians over rounds and the ratio. Outputs are checked against each other first.
# Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python_module.py [--rounds 7] [--quick]
import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import shapevm  # noqa: E402
from shapevm import Tensor, ops  # noqa: E402


def add_one_op(x: Tensor[None], y: Tensor[None]):
    return x + y


def chain20(x: Tensor[None]):
    y = x * 1.5
    y = y + 0.25
    y = ops.tanh(y)
    y = y * 0.75
    y = y - 0.125
    y = ops.sigmoid(y)
    y = y * 2.0
    y = y + x
    y = ops.abs(y)
    y = y + 1.0
    y = ops.sqrt(y)
    y = y * 0.5
    y = ops.exp(y)
    y = y - 1.0
    y = ops.relu(y)
    y = y + 0.5
    y = ops.log(y)
    y = y * 3.0
    y = ops.tanh(y)
    y = y + x
    return y


def torch_chain20(x):
    y = x * 1.5
    y = y + 0.25
    y = torch.tanh(y)
    y = y * 0.75
    y = y - 0.125
    y = torch.sigmoid(y)
    y = y * 2.0
    y = y + x
    y = torch.abs(y)
    y = y + 1.0
    y = torch.sqrt(y)
    y = y * 0.5
    y = torch.exp(y)
    y = y - 1.0
    y = torch.relu(y)
    y = y + 0.5
    y = torch.log(y)
    y = y * 3.0
    y = torch.tanh(y)
    y = y + x
    return y


class Cell(shapevm.Module):
    """The reference cell (docs/reference-workload.md, examples/lstm_cell.py) as a Module."""

    def __init__(self, rng):
        super().__init__(wait=True)  # each call waits for the compiles it queued: tier-up inside warm-up
        self.W_ih = (0.1 * rng.standard_normal((1024, 128))).astype(np.float32)
        self.W_hh = (0.1 * rng.standard_normal((1024, 256))).astype(np.float32)
        self.b_ih = rng.standard_normal(1024).astype(np.float32)
        self.b_hh = rng.standard_normal(1024).astype(np.float32)

    def construct(self, x: Tensor["batch", "seq", 128], h: Tensor["batch", 256], c: Tensor["batch", 256]):
        batch, seq, _ = x.shape
        rows = ops.reshape(x, (batch * seq, 128))
        gx = rows @ self.W_ih.T + self.b_ih
        gh = h @ self.W_hh.T + self.b_hh
        gates = ops.reshape(gx, (batch, seq, 1024)) + ops.unsqueeze(gh, 1)
        i, f, g, o = ops.split(gates, 4, axis=2)
        c_next = ops.sigmoid(f) * ops.unsqueeze(c, 1) + ops.sigmoid(i) * ops.tanh(g)
        h_next = ops.sigmoid(o) * ops.tanh(c_next)
        return h_next, c_next


def torch_cell(p, x, h, c):
    batch, seq, _ = x.shape
    gx = torch.nn.functional.linear(x.reshape(batch * seq, 128), p["W_ih"], p["b_ih"])
    gh = torch.nn.functional.linear(h, p["W_hh"], p["b_hh"])
    gates = gx.reshape(batch, seq, 1024) + gh.unsqueeze(1)
    i, f, g, o = gates.chunk(4, dim=2)
    c_next = torch.sigmoid(f) * c.unsqueeze(1) + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_next), c_next


def per_call_us(fn, args, calls):
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter_ns() - start) / calls / 1e3


def compare(rows, name, svm, peer, args_svm, args_peer, calls, rounds):
    for _ in range(3):  # warm up (tier-up happens here: the context waits for compiles)
        svm(*args_svm)
        peer(*args_peer)
    a, b = [], []
    for _ in range(rounds):
        a.append(per_call_us(svm, args_svm, calls))
        b.append(per_call_us(peer, args_peer, calls))
    ma, mb = statistics.median(a), statistics.median(b)
    rows.append((name, ma, mb, mb / ma))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="few calls per round (a smoke run)")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    shapevm.set_context(jit_level="O2", kernel_threads=1, warmup=0, hot_count=0, hot_ms=0)
    scale = 0.05 if opts.quick else 1.0
    rng = np.random.default_rng(0)
    rows = []

    one = shapevm.jit(add_one_op, wait=True)
    x1, y1 = np.ones(1, np.float32), np.full(1, 2.0, np.float32)
    t1, u1 = torch.from_numpy(x1.copy()), torch.from_numpy(y1.copy())
    assert np.allclose(one(x1, y1), torch.add(t1, u1).numpy())
    compare(rows, "one op (x + y), 1 element", one, torch.add, (x1, y1), (t1, u1), int(20000 * scale), opts.rounds)

    chain = shapevm.jit(chain20, wait=True)
    x = np.full(1, 0.3, np.float32)
    assert np.allclose(chain(x), torch_chain20(torch.from_numpy(x.copy())).numpy(), rtol=1e-5)
    compare(rows, "20-op elementwise chain, 1 element", chain, torch_chain20, (x,), (torch.from_numpy(x.copy()),),
            int(5000 * scale), opts.rounds)

    cell = Cell(rng)
    params = {k: torch.from_numpy(getattr(cell, k).copy()) for k in ("W_ih", "W_hh", "b_ih", "b_hh")}
    for seq in (10, 20, 30, 120):
        xs = rng.standard_normal((32, seq, 128)).astype(np.float32)
        hs = rng.standard_normal((32, 256)).astype(np.float32)
        cs = rng.standard_normal((32, 256)).astype(np.float32)
        got = cell(xs, hs, cs)
        want = torch_cell(params, torch.from_numpy(xs), torch.from_numpy(hs), torch.from_numpy(cs))
        assert np.allclose(got[0], want[0].numpy(), rtol=1e-4, atol=1e-4)
        compare(rows, f"reference cell via shapevm.Module, batch 32 seq {seq}", cell,
                lambda a, b, c: torch_cell(params, a, b, c), (xs, hs, cs),
                (torch.from_numpy(xs), torch.from_numpy(hs), torch.from_numpy(cs)), max(3, int(200 * scale)),
                opts.rounds)
    stats = cell.stats()

    print(f"CPU: {cpu_model()}; torch {torch.__version__}, numpy {np.__version__}; one thread; "
          f"{opts.rounds} interleaved rounds, medians")
    print()
    print("| case | ShapeVM µs/call | PyTorch eager µs/call | PyTorch / ShapeVM |")
    print("|---|---:|---:|---:|")
    for name, a, b, ratio in rows:
        print(f"| {name} | {a:.2f} | {b:.2f} | {ratio:.2f}× |")
    print()
    print(f"cell stats: runs {stats['runs']}, launches compiled {stats['launches_compiled']} / interpreted "
          f"{stats['launches_interpreted']}, kernels installed {stats['kernels_installed']}")


if __name__ == "__main__":
    main()
