#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Compiled avg_pool (issue 21; the conv family's window loop, src/jit/llvm_cpu/codegen_conv.cc)
# against the reference kernel (O0) and torch eager, one thread, in the calling thread's CPU time:
# torch.nn.AvgPool2d modules exported with torch.onnx.export (dynamic N/H/W), run at O0 and O2
# (autotune off), checked against torch, then 7 interleaved rounds of 5 calls each; medians in ms.
# Columns: O0, O2, torch, O0 / O2, torch / O2, and the O2 program's compiled launches.
# Then max_pool in float32 and float16, avg_pool in float16, and both in 3-D (ONNX
# MaxPool/AveragePool models, dynamic N and spatial dims; torch's CPU pools have no float16, so
# its column is float32 on the same values), the same rounds.
# Usage: PYTHONPATH=build/python /usr/bin/python3 bench/avg_pool_layers.py
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402
from shapevm import _core  # noqa: E402
for k, v in (("warmup", 0), ("hot_count", 0), ("hot_ms", 0), ("kernel_threads", 1)):
    _core.set_tunable(k, str(v))
torch.set_num_threads(1)
print("| pool | input | O0 ms | O2 ms | torch ms | O0 / O2 | torch / O2 | O2 compiled launches |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
d = tempfile.mkdtemp()


def measure(name, shape, path, x, matches, torch_fn):
    """Loads `path` at O0 and O2, checks each against `matches`, then times both and `torch_fn`
    (7 interleaved rounds of 5 calls) and prints the row."""
    fns = {}
    for level in ("O0", "O2"):
        p = _core.Program(jit_level=level, jit_wait=True, autotune=False, tuning_cache=False)
        p.load(path)
        f = _core.Function(p, 0, -1)
        for _ in range(8):
            got = f(x=x)
        assert matches(got), level
        fns[level] = (p, f)
    times = {"O0": [], "O2": [], "torch": []}
    for _ in range(7):
        for level, (p, f) in fns.items():
            t = time.thread_time(); [f(x=x) for _ in range(5)]; times[level].append((time.thread_time() - t) / 5e-3)
        t = time.thread_time(); [torch_fn() for _ in range(5)]; times["torch"].append((time.thread_time() - t) / 5e-3)
    m = {k: statistics.median(v) for k, v in times.items()}
    print(f"| {name} | {shape} | {m['O0']:.3f} | {m['O2']:.3f} | {m['torch']:.3f} | {m['O0']/m['O2']:.1f}x | {m['torch']/m['O2']:.2f}x | {fns['O2'][0].stats()['launches_compiled']} |")


for name, mod, shape in (("avg 3x3/2 pad 1 (count_include_pad)", torch.nn.AvgPool2d(3, 2, 1), (1, 64, 112, 112)),
                         ("avg 3x3/2 pad 1, exclude pad, ceil", torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), (8, 64, 56, 56)),
                         ("avg 2x2/2", torch.nn.AvgPool2d(2, 2), (8, 256, 28, 28))):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(mod, (torch.randn(*shape),), d + "/p.onnx", input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b", 2: "h", 3: "w"}}, opset_version=14)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    xt = torch.from_numpy(x)
    want = mod(xt).numpy()
    measure(name, shape, d + "/p.onnx", x, lambda got: np.array_equal(got, want) or np.max(np.abs(got - want)) < 1e-5,
            lambda: mod(xt))


def onnx_pool(op, shape, kernel, stride, pad, dtype):
    """An ONNX MaxPool/AveragePool over an input of `dtype` (float16: the exporter has no float16 CPU
    path) with dynamic N and spatial dims; 2-D or 3-D as `shape`."""
    from onnx import TensorProto, helper
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    spatial = len(shape) - 2
    x = helper.make_tensor_value_info("x", elem, ["b", shape[1]] + [f"s{i}" for i in range(spatial)])
    y = helper.make_tensor_value_info("y", elem, None)
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[kernel] * spatial, strides=[stride] * spatial,
                            pads=[pad] * (2 * spatial))
    model = helper.make_model(helper.make_graph([node], "pool", [x], [y]), opset_imports=[helper.make_opsetid("", 14)])
    with open(d + "/h.onnx", "wb") as f:
        f.write(model.SerializeToString())


for name, shape, (kernel, stride, pad) in (("max 3x3/2 pad 1 (resnet's)", (1, 64, 112, 112), (3, 2, 1)),
                                           ("max 3x3/2 pad 1", (8, 64, 56, 56), (3, 2, 1)),
                                           ("max 2x2/2", (8, 256, 28, 28), (2, 2, 0)),
                                           ("max 3x3/2 pad 1, float16", (1, 64, 112, 112), (3, 2, 1)),
                                           ("max 3x3/2 pad 1, float16", (8, 64, 56, 56), (3, 2, 1)),
                                           ("max 2x2/2, float16", (8, 256, 28, 28), (2, 2, 0)),
                                           ("avg 3x3/2 pad 1 (excluding pads), float16", (1, 64, 112, 112), (3, 2, 1)),
                                           ("avg 2x2/2, float16", (8, 256, 28, 28), (2, 2, 0)),
                                           ("max 3x3x3/2 pad 1, 3-D", (1, 32, 24, 64, 64), (3, 2, 1)),
                                           ("avg 3x3x3/2 pad 1 (excluding pads), 3-D", (1, 32, 24, 64, 64), (3, 2, 1)),
                                           ("avg 2x2x2/2, 3-D float16", (2, 32, 16, 48, 48), (2, 2, 0))):
    avg = name.startswith("avg")
    dtype = np.float16 if "float16" in name else np.float32
    tf = torch.nn.functional
    if len(shape) == 5:
        pool = (lambda t: tf.avg_pool3d(t, kernel, stride, pad, count_include_pad=False)) if avg else \
            (lambda t: tf.max_pool3d(t, kernel, stride, pad))
    else:
        pool = (lambda t: tf.avg_pool2d(t, kernel, stride, pad, count_include_pad=False)) if avg else \
            (lambda t: tf.max_pool2d(t, kernel, stride, pad))
    onnx_pool("AveragePool" if avg else "MaxPool", shape, kernel, stride, pad, dtype)
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    xt = torch.from_numpy(x).float()
    want = pool(xt).numpy().astype(dtype)
    measure(name, shape, d + "/h.onnx", x,
            lambda got: np.array_equal(got, want) or (avg and np.max(np.abs(got.astype(np.float32) - want)) < 2e-3),
            lambda: pool(xt))
