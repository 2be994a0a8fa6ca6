#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Exported ONNX models (issue 20) at O2 against PyTorch eager running the same torch.nn module,
# one thread, in one script run: an nn.LSTM (batch_first, 128 -> 128) at batch 32, seq
# 10/30/120, and the pre-norm transformer block of tests/onnx (dim 128, 4 heads) at batch 8,
# seq 16/64/256. Each model is exported with torch.onnx.export, imported by shapevm.load, warmed
# up per shape (zero hot thresholds, waiting for compiles), checked against torch, then each
# round times ShapeVM and torch back to back; the table gives medians over rounds and the ratio.
# Usage: PYTHONPATH=build/python /usr/bin/python3 bench/onnx_models.py [--rounds 5] [--calls 5]
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402

from shapevm import _core  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "onnx"))
from onnx_models import export  # noqa: E402  (tests/onnx: the models the tests export)

CASES = [("lstm", {"inputs": 128, "hidden": 128}, [(32, s, 128) for s in (10, 30, 120)]),
         ("block", {"dim": 128}, [(8, s, 128) for s in (16, 64, 256)])]


def timed(fn, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for key, value in (("warmup", 0), ("hot_count", 0), ("hot_ms", 0), ("kernel_threads", 1)):
        _core.set_tunable(key, str(value))
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, sizes, shapes in CASES:
            path = Path(folder) / f"{name}.onnx"
            module = export(name, path, **sizes)
            program = _core.Program(jit_level="O2", jit_wait=True, autotune=False, tuning_cache=False)
            program.load(str(path))
            fn = _core.Function(program, 0, -1)
            for shape in shapes:
                x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
                xt = torch.from_numpy(x)
                for _ in range(4):  # profile, compile (waited for), run compiled
                    got = fn(x=x)
                got = got[0] if isinstance(got, tuple) else got
                with torch.no_grad():
                    want = module(xt)
                want = (want[0] if isinstance(want, tuple) else want).numpy()
                err = np.linalg.norm(got - want) / np.linalg.norm(want)
                assert err < 1e-4, f"{name} {shape}: relative L2 {err:.2e}"
                svm_ms, torch_ms = [], []
                for _ in range(args.rounds):
                    svm_ms.append(timed(lambda: fn(x=x), args.calls))
                    with torch.no_grad():
                        torch_ms.append(timed(lambda: module(xt), args.calls))
                s, t = statistics.median(svm_ms), statistics.median(torch_ms)
                rows.append((f"{name} batch {shape[0]} seq {shape[1]}", s, t))
            stats = program.stats()
            rows.append((f"{name} stats: launches compiled {stats['launches_compiled']} / interpreted "
                         f"{stats['launches_interpreted']}, fused regions {stats['fused_regions']}", None, None))
            program.close()
    print("| model, shape | ShapeVM O2 ms | torch eager ms | speedup |")
    print("|---|---:|---:|---:|")
    for label, s, t in rows:
        if s is None:
            print(f"\n{label}\n")
            continue
        print(f"| {label} | {s:.3f} | {t:.3f} | {t / s:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
