#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Exported ONNX models (issue 20) at O2 against PyTorch eager running the same torch.nn module,
# one thread, in one script run: an nn.LSTM (batch_first, 128 -> 128) at batch 32, seq
# 10/30/120, and the pre-norm transformer block of tests/onnx (dim 128, 4 heads) at batch 8,
# seq 16/64/256. Each model is exported with torch.onnx.export, imported by shapevm.load, warmed
# up per shape (zero hot thresholds, waiting for compiles), checked against torch, then each
# round times ShapeVM and torch back to back; the table gives medians over rounds and the ratio.
# Two ShapeVM configurations: "tuner off" (every kernel at its default parameters) and "default"
# (O2's defaults: the AutoTuner on, oneDNN's matmul primitive among its candidates; tuning waited
# for before timing, a fresh in-memory tuning database). --matmuls first times
# each matmul shape of the models alone: ShapeVM's kernel (tuner off, default) against torch's.
# Every row gives wall-clock and CPU-time medians (the CPU time leaves out waiting for a core on a
# loaded host; both sides are one thread).
# Usage: PYTHONPATH=build/python /usr/bin/python3 bench/onnx_models.py [--rounds 5] [--calls 5]
#        [--config off|default|both] [--models lstm,block] [--matmuls]
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
    """(wall ms, CPU ms) per call. The CPU time is the process's (all threads): kernel_threads=1
    and one torch thread keep both sides to one core's work, and compiles are waited for before
    timing, so it leaves out the time spent waiting for a core on a loaded host."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - wall) / calls * 1e3, (time.process_time() - cpu) / calls * 1e3


def medians(samples):
    return tuple(statistics.median(s[k] for s in samples) for k in (0, 1))


def matmul_shapes(name, shape):
    """(label, A shape, B shape) of each matmul the exported model runs per call (per step for
    the LSTM's recurrent product)."""
    batch, seq, dim = shape
    if name == "lstm":
        return [("input projection", (seq * batch, dim), (dim, 4 * dim)), ("step H @ R^T", (batch, dim), (dim, 4 * dim))]
    heads, head = 4, dim // 4
    return [("qkv", (batch * seq, dim), (dim, 3 * dim)), ("q @ k^T", (batch * heads, seq, head), (batch * heads, head, seq)),
            ("attn @ v", (batch * heads, seq, seq), (batch * heads, seq, head)), ("proj", (batch * seq, dim), (dim, dim)),
            ("fc1", (batch * seq, dim), (dim, 4 * dim)), ("fc2", (batch * seq, 4 * dim), (4 * dim, dim))]


def matmul_model(path, a_shape, b_shape):
    """An ONNX model of one matmul as the exported model has it: a Linear (x @ W + b, W an
    initializer) for a 2-D B, else a product of two inputs scaled by a constant (the attention's
    q @ k^T / sqrt(d); attn @ v the same, so both are a matmul with a one-op epilogue)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))]
    if len(b_shape) == 2:
        inits = [numpy_helper.from_array(rng.standard_normal(b_shape).astype(np.float32), "w"),
                 numpy_helper.from_array(rng.standard_normal(b_shape[-1]).astype(np.float32), "bias")]
        nodes = [helper.make_node("MatMul", ["a", "w"], ["p"]), helper.make_node("Add", ["p", "bias"], ["y"])]
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape)))
        inits = [numpy_helper.from_array(np.array(0.5, np.float32), "s")]
        nodes = [helper.make_node("MatMul", ["a", "b"], ["p"]), helper.make_node("Mul", ["p", "s"], ["y"])]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "matmul", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    Path(path).write_bytes(model.SerializeToString())


def matmuls(args, folder):
    """Each matmul shape of the models: the compiled kernel at its default parameters (tuner off),
    the tuner's pick (default configuration) and torch's matmul with the same epilogue."""
    print("CPU ms per call (medians over rounds):\n")
    print("| model, shape | matmul | A x B | tuner off ms | default ms | torch ms | torch / off | torch / default |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name, _, shapes in CASES:
        if name not in args.models.split(","):
            continue
        for shape in shapes:
            for label, a_shape, b_shape in matmul_shapes(name, shape):
                path = Path(folder) / "matmul.onnx"
                matmul_model(path, a_shape, b_shape)
                a = np.random.default_rng(2).standard_normal(a_shape).astype(np.float32)
                feeds = {"a": a}
                if len(b_shape) > 2:
                    feeds["b"] = np.random.default_rng(3).standard_normal(b_shape).astype(np.float32)
                ta = torch.from_numpy(a)
                if len(b_shape) == 2:
                    w, bias = torch.randn(*b_shape), torch.randn(b_shape[-1])
                    torch_fn = lambda: torch.addmm(bias, ta, w)  # noqa: E731
                else:
                    tb = torch.from_numpy(feeds["b"])
                    torch_fn = lambda: torch.matmul(ta, tb) * 0.5  # noqa: E731
                fns, programs = [], []
                for autotune in (False, True):
                    program = _core.Program(jit_level="O2", jit_wait=True, autotune=autotune, tuning_cache=False)
                    program.load(str(path))
                    fn = _core.Function(program, 0, -1)
                    for _ in range(4):
                        fn(**feeds)
                    program.wait_idle()
                    fns.append(lambda fn=fn: fn(**feeds))
                    programs.append(program)
                times = [[], [], []]
                for _ in range(args.rounds):
                    for k, f in enumerate(fns + [torch_fn]):
                        times[k].append(timed(f, args.calls))
                off, tuned, ref = (medians(t)[1] for t in times)  # CPU time
                print(f"| {name} seq {shape[1]} | {label} | {a_shape}x{b_shape} | {off:.3f} | {tuned:.3f} | {ref:.3f} | "
                      f"{ref / off:.2f} | {ref / tuned:.2f} |", flush=True)
                for program in programs:
                    program.close()


def run_config(config, name, sizes, shapes, path, module, args, rows):
    autotune = config == "default"
    program = _core.Program(jit_level="O2", jit_wait=True, autotune=autotune, tuning_cache=False)
    program.load(str(path))
    fn = _core.Function(program, 0, -1)
    for shape in shapes:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        xt = torch.from_numpy(x)
        for _ in range(4):  # profile, compile (waited for, tuning too), run compiled
            got = fn(x=x)
        program.wait_idle()
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
        rows.append((f"{name} batch {shape[0]} seq {shape[1]}, {CONFIGS[config]}", medians(svm_ms), medians(torch_ms)))
    stats = program.stats()
    rows.append((f"{name}, {CONFIGS[config]}: launches compiled {stats['launches_compiled']} / interpreted "
                 f"{stats['launches_interpreted']}, fused regions {stats['fused_regions']}", None, None))
    program.close()


CONFIGS = {"off": "tuner off", "default": "default (tuner on)"}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--config", choices=["off", "default", "both"], default="both")
    parser.add_argument("--models", default="lstm,block")
    parser.add_argument("--matmuls", action="store_true", help="time each matmul of the models alone first")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for key, value in (("warmup", 0), ("hot_count", 0), ("hot_ms", 0), ("kernel_threads", 1)):
        _core.set_tunable(key, str(value))
    configs = ["off", "default"] if args.config == "both" else [args.config]
    wanted = args.models.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        if args.matmuls:
            matmuls(args, folder)
        for name, sizes, shapes in CASES:
            if name not in wanted:
                continue
            path = Path(folder) / f"{name}.onnx"
            module = export(name, path, **sizes)
            for config in configs:
                run_config(config, name, sizes, shapes, path, module, args, rows)
    print("\n| model, shape, ShapeVM configuration | ShapeVM O2 wall ms | torch eager wall ms | speedup (wall) "
          "| ShapeVM CPU ms | torch CPU ms | speedup (CPU) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, s, t in rows:
        if s is None:
            print(f"\n{label}\n")
            continue
        print(f"| {label} | {s[0]:.3f} | {t[0]:.3f} | {t[0] / s[0]:.2f}× | {s[1]:.3f} | {t[1]:.3f} | {t[1] / s[1]:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
