#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# ResNet-style convolution layers (issue 21) through the ONNX importer against torch eager, one
# thread, in one script run: the 7x7/2 stem, 3x3 stride 1 and 2, the 1x1 down-projection and a
# depthwise 3x3, at batch 1 and 8. Each layer is a torch.nn.Conv2d exported with torch.onnx.export,
# imported by the shapevm module at O2 (the conv itself runs on the interpreted reference kernel),
# checked against torch, then each round times ShapeVM and torch back to back; the table gives
# medians over rounds and the ratio (torch time / ShapeVM time: above 1 = ShapeVM faster).
# Usage: PYTHONPATH=build/python /usr/bin/python3 bench/conv_layers.py [--rounds 5] [--calls 3]
import argparse
import os
import statistics
import tempfile
import timeit
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402

from shapevm import _core  # noqa: E402

# name: (in channels, out channels, kernel, stride, padding, groups, input side)
LAYERS = {
    "stem 7x7/2": (3, 64, 7, 2, 3, 1, 112),
    "3x3 s1": (64, 64, 3, 1, 1, 1, 56),
    "3x3 s2": (64, 128, 3, 2, 1, 1, 56),
    "1x1 down /2": (64, 128, 1, 2, 0, 1, 56),
    "depthwise 3x3": (128, 128, 3, 1, 1, 128, 28),
}


def timed(fn, calls):
    return timeit.timeit(fn, number=calls) / calls * 1e3  # ms per call


def export(layer, path):
    cin, cout, k, s, p, g, side = layer
    torch.manual_seed(0)
    module = torch.nn.Conv2d(cin, cout, k, stride=s, padding=p, groups=g).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(1, cin, side, side),), str(path), input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"}}, opset_version=14)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for key, value in (("warmup", 0), ("hot_count", 0), ("hot_ms", 0), ("kernel_threads", 1)):
        _core.set_tunable(key, str(value))
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, layer in LAYERS.items():
            path = Path(folder) / "layer.onnx"
            module = export(layer, path)
            program = _core.Program(jit_level="O2", jit_wait=True, autotune=False, tuning_cache=False)
            program.load(str(path))
            fn = _core.Function(program, 0, -1)
            for batch in (1, 8):
                x = np.random.default_rng(0).standard_normal((batch, layer[0], layer[6], layer[6])).astype(np.float32)
                xt = torch.from_numpy(x)
                got = fn(x=x)
                with torch.no_grad():
                    want = module(xt).numpy()
                err = np.linalg.norm(got - want) / np.linalg.norm(want)
                assert err < 1e-4, f"{name} batch {batch}: relative L2 {err:.2e}"
                svm, eager = [], []
                for _ in range(args.rounds):  # interleaved: both sides see the same machine state
                    svm.append(timed(lambda: fn(x=x), args.calls))
                    with torch.no_grad():
                        eager.append(timed(lambda: module(xt), args.calls))
                out = want.shape
                flops = 2.0 * out[0] * out[1] * out[2] * out[3] * (layer[0] // layer[5]) * layer[2] * layer[2]
                s_med, e_med = statistics.median(svm), statistics.median(eager)
                rows.append((name, batch, f"{layer[6]}x{layer[6]}", s_med, e_med, e_med / s_med,
                             flops / s_med / 1e6))
            program.close()
    print("| layer | batch | input | ShapeVM ms | torch eager ms | eager / ShapeVM | ShapeVM GFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for name, batch, side, s_med, e_med, ratio, gflops in rows:
        print(f"| {name} | {batch} | {side} | {s_med:.2f} | {e_med:.2f} | {ratio:.2f}x | {gflops:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
