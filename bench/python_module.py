#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# The Python module (`shapevm`, issue 19) against PyTorch eager, one thread, in one script run:
# per-call overhead of a jitted one-op function vs torch.add on 1-element arrays, a 20-op
# elementwise chain on 1-element arrays, and the reference cell through shapevm.Module at
# batch 32, seq 10/20/30/120. Each round times ShapeVM and PyTorch back to back; the table gives
# medians over rounds and the ratio, with each side's system time and page faults per call.
# The cell runs twice: as the reference cell op for op (ReferenceCell) and with a gate method
# (examples/lstm_cell_module.py). Outputs are checked against each other first.
# Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python_module.py [--rounds 7] [--quick]
#        [--cases one,chain,cell,method] [--seqs 10,20,30,120]
import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's BLAS threads spin beside the timed loop
import numpy as np  # noqa: E402
import torch  # noqa: E402

import shapevm  # noqa: E402
from op_overhead import cpu_model  # noqa: E402  (bench/)
from shapevm import Tensor, ops  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from lstm_cell_module import LstmCell  # noqa: E402


def add_one_op(x: Tensor[None], y: Tensor[None]):
    return x + y


# The 20-op chain, one table for both sides: (operator or function, constant).
CHAIN = [("*", 1.5), ("+", 0.25), ("tanh", None), ("*", 0.75), ("-", 0.125), ("sigmoid", None), ("*", 2.0),
         ("+", "x"), ("abs", None), ("+", 1.0), ("sqrt", None), ("*", 0.5), ("exp", None), ("-", 1.0),
         ("relu", None), ("+", 0.5), ("log", None), ("*", 3.0), ("tanh", None), ("+", "x")]


def chain_source(namespace, header):
    """The chain as a Python function `chain20(x)` calling `namespace`.tanh etc."""
    lines = [header, "def chain20(x" + (": Tensor[None]" if namespace == "ops" else "") + "):", "    y = x"]
    for op, operand in CHAIN:
        lines.append(f"    y = {namespace}.{op}(y)" if operand is None else f"    y = y {op} {operand}")
    return "\n".join(lines + ["    return y", ""])


def load_chains(folder):
    """(ShapeVM's chain20 via shapevm.load, PyTorch's chain20), both from generated files."""
    svm_file, torch_file = folder / "chain_shapevm.py", folder / "chain_torch.py"
    svm_file.write_text(chain_source("ops", "from shapevm import ops, Tensor\n"))
    torch_file.write_text(chain_source("torch", "import torch\n"))
    namespace = {}
    exec(compile(torch_file.read_text(), str(torch_file), "exec"), namespace)  # noqa: S102 - generated above
    return svm_file, namespace["chain20"]


def torch_cell(p, x, h, c):
    batch, seq, _ = x.shape
    gx = torch.nn.functional.linear(x.reshape(batch * seq, 128), p["W_ih"], p["b_ih"])
    gh = torch.nn.functional.linear(h, p["W_hh"], p["b_hh"])
    gates = gx.reshape(batch, seq, 1024) + gh.unsqueeze(1)
    i, f, g, o = gates.chunk(4, dim=2)
    c_next = torch.sigmoid(f) * c.unsqueeze(1) + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_next), c_next


CLOCK = [time.thread_time_ns]  # --wall: time.perf_counter_ns


def per_call_us(fn, args, calls, kernel):
    """µs per call; adds this thread's system time (µs) and minor page faults to `kernel`."""
    before = resource.getrusage(resource.RUSAGE_THREAD)
    start = CLOCK[0]()
    for _ in range(calls):
        fn(*args)
    elapsed = CLOCK[0]() - start
    after = resource.getrusage(resource.RUSAGE_THREAD)
    kernel[0] += (after.ru_stime - before.ru_stime) * 1e6
    kernel[1] += after.ru_minflt - before.ru_minflt
    kernel[2] += calls
    return elapsed / calls / 1e3


def compare(rows, name, svm, peer, args_svm, args_peer, calls, rounds):
    for _ in range(3):  # warm up (tier-up happens here: the context waits for compiles)
        svm(*args_svm)
        peer(*args_peer)
    a, b = [], []
    kernel_a, kernel_b = [0.0, 0, 0], [0.0, 0, 0]  # system µs, minor faults, calls
    for _ in range(rounds):
        a.append(per_call_us(svm, args_svm, calls, kernel_a))
        b.append(per_call_us(peer, args_peer, calls, kernel_b))
    ma, mb = statistics.median(a), statistics.median(b)
    rows.append((name, ma, mb, mb / ma, [k[0] / k[2] for k in (kernel_a, kernel_b)],
                 [k[1] / k[2] for k in (kernel_a, kernel_b)]))


class ReferenceCell(shapevm.Module):
    """examples/lstm_cell.py's cell as a shapevm.Module, op for op (the gates' sigmoids inline).
    LstmCell (examples/lstm_cell_module.py) is the same cell with a `gate` method. The frontend
    inlines the method (docs/python-subset.md), so both compile to one region; before inlining,
    each gate call was a boundary the JIT's regions did not cross (7 launches per call, not 1)."""

    def __init__(self, weights, **options):
        super().__init__(**options)
        for name, value in weights.items():
            setattr(self, name, value)

    def construct(self, x: Tensor["batch", "seq", 128], h: Tensor["batch", 256], c: Tensor["batch", 256]):
        batch, seq, _ = x.shape
        rows = ops.reshape(x, (batch * seq, 128))
        gx = rows @ self.W_ih.T + self.b_ih
        gh = h @ self.W_hh.T + self.b_hh
        gates = ops.reshape(gx, (batch, seq, 1024)) + ops.unsqueeze(gh, 1)
        i, f, g, o = ops.split(gates, 4, axis=2)
        i = ops.sigmoid(i)
        f = ops.sigmoid(f)
        g = ops.tanh(g)
        o = ops.sigmoid(o)
        c_next = f * ops.unsqueeze(c, 1) + i * g
        h_next = o * ops.tanh(c_next)
        return h_next, c_next


CASES = ("one", "chain", "cell", "method", "pair")  # --cases: which rows to run


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="few calls per round (a smoke run)")
    parser.add_argument("--wall", action="store_true",
                        help="wall-clock time (default: the calling thread's CPU time, which other load on a shared "
                             "host does not inflate; both sides run on this thread: one kernel thread, one torch thread)")
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma-separated rows to run: one (x + y at O2 and O0), chain (20 ops), cell (the "
                             "reference cell as a Module), method (the same cell with a gate method, "
                             "examples/lstm_cell_module.py), pair (the gate-method cell against the op-for-op cell, "
                             "both ShapeVM: the cost of the method calls)")
    parser.add_argument("--progress", action="store_true", help="print each cell row to stderr as it finishes")
    parser.add_argument("--seqs", default="10,20,30,120", help="sequence lengths of the cell rows")
    opts = parser.parse_args()
    cases = set(opts.cases.split(","))
    if cases - set(CASES):
        parser.error(f"unknown cases {sorted(cases - set(CASES))} (known: {', '.join(CASES)})")
    if opts.wall:
        CLOCK[0] = time.perf_counter_ns
    torch.set_num_threads(1)
    # hot_ms=1, not 0: the JIT then judges by time, and leaves ops cheaper than a compiled launch
    # interpreted (hot_ms=0 would force every hot op to compile; docs/python.md, Settings).
    shapevm.set_context(jit_level="O2", kernel_threads=1, warmup=0, hot_count=0, hot_ms=1)
    scale = 0.05 if opts.quick else 1.0
    rng = np.random.default_rng(0)
    rows = []

    if "one" in cases:
        one = shapevm.jit(add_one_op, wait=True)
        x1, y1 = np.ones(1, np.float32), np.full(1, 2.0, np.float32)
        t1, u1 = torch.from_numpy(x1.copy()), torch.from_numpy(y1.copy())
        assert np.allclose(one(x1, y1), torch.add(t1, u1).numpy())
        compare(rows, "one op (x + y), 1 element", one, torch.add, (x1, y1), (t1, u1), int(20000 * scale),
                opts.rounds)
        one_o0 = shapevm.jit(add_one_op, jit_level="O0")
        compare(rows, "one op (x + y), 1 element, O0 (interpreted)", one_o0, torch.add, (x1, y1), (t1, u1),
                int(20000 * scale), opts.rounds)

    if "chain" in cases:
        with tempfile.TemporaryDirectory() as folder:
            svm_file, torch_chain20 = load_chains(Path(folder))
            chains = shapevm.load(svm_file, wait=True)
            chain = chains.chain20
        x = np.full(1, 0.3, np.float32)
        assert np.allclose(chain(x), torch_chain20(torch.from_numpy(x.copy())).numpy(), rtol=1e-5)
        compare(rows, "20-op elementwise chain, 1 element", chain, torch_chain20, (x,), (torch.from_numpy(x.copy()),),
                int(5000 * scale), opts.rounds)

    stats = {}
    method_cell = LstmCell(rng, wait=True)  # each call waits for the compiles it queued: tier-up inside warm-up
    weights = {k: getattr(method_cell, k) for k in ("W_ih", "W_hh", "b_ih", "b_hh")}
    params = {k: torch.from_numpy(v.copy()) for k, v in weights.items()}
    cells = []
    if "cell" in cases:
        cells.append(("reference cell via shapevm.Module", ReferenceCell(weights, wait=True)))
    if "method" in cases:
        cells.append(("cell with a gate method (lstm_cell_module.py)", method_cell))
    if "pair" in cases:  # the gate-method cell against the op-for-op cell, both ShapeVM, interleaved
        reference = ReferenceCell(weights, wait=True)
        for seq in (int(s) for s in opts.seqs.split(",")):
            args = (rng.standard_normal((32, seq, 128)).astype(np.float32),
                    rng.standard_normal((32, 256)).astype(np.float32),
                    rng.standard_normal((32, 256)).astype(np.float32))
            np.testing.assert_allclose(method_cell(*args)[0], reference(*args)[0], rtol=1e-5, atol=1e-5)
            compare(rows, f"pair: gate-method cell (ShapeVM) vs op-for-op cell (ShapeVM as the peer), seq {seq}",
                    method_cell, reference, args, args, max(3, int(2000 / seq * scale)), opts.rounds)
            stats[f"pair seq {seq} gate-method cell"] = method_cell.stats()
    for seq in (int(s) for s in opts.seqs.split(",")) if cells else ():
        xs = rng.standard_normal((32, seq, 128)).astype(np.float32)
        hs = rng.standard_normal((32, 256)).astype(np.float32)
        cs = rng.standard_normal((32, 256)).astype(np.float32)
        want = torch_cell(params, torch.from_numpy(xs), torch.from_numpy(hs), torch.from_numpy(cs))
        for name, cell in cells:
            got = cell(xs, hs, cs)
            assert np.allclose(got[0], want[0].numpy(), rtol=1e-4, atol=1e-4)
            compare(rows, f"{name}, batch 32 seq {seq}", cell, lambda a, b, c: torch_cell(params, a, b, c),
                    (xs, hs, cs), (torch.from_numpy(xs), torch.from_numpy(hs), torch.from_numpy(cs)),
                    max(3, int(2000 / seq * scale)), opts.rounds)  # about the same time per round at any seq
            if opts.progress:
                print(f"  {rows[-1][0]}: {rows[-1][1]:.0f} vs {rows[-1][2]:.0f} µs", file=sys.stderr, flush=True)
            stats[name] = cell.stats()

    print(f"CPU: {cpu_model()}; torch {torch.__version__}, numpy {np.__version__}; one thread; "
          f"{opts.rounds} interleaved rounds, medians; {'wall' if opts.wall else 'thread CPU'} time")
    print("(system µs and minor page faults per call: this thread's, over all rounds; eager allocates its "
          "outputs afresh each call, ShapeVM reuses its pool)")
    print()
    print("| case | ShapeVM µs/call | PyTorch eager µs/call | PyTorch / ShapeVM | system µs/call ShapeVM / eager "
          "| page faults/call ShapeVM / eager |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, a, b, ratio, system, faults in rows:
        print(f"| {name} | {a:.2f} | {b:.2f} | {ratio:.2f}× | {system[0]:.0f} / {system[1]:.0f} "
              f"| {faults[0]:.0f} / {faults[1]:.0f} |")
    print()
    for name, st in stats.items():
        print(f"{name} stats: runs {st['runs']}, launches compiled {st['launches_compiled']} / interpreted "
              f"{st['launches_interpreted']} ({st['launches_compiled'] / max(st['runs'], 1):.2f} compiled per call), "
              f"kernels installed {st['kernels_installed']}")


if __name__ == "__main__":
    main()
