#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# ResNet-style convolution layers (issue 21) through the ONNX importer against torch eager and
# oneDNN's conv primitive, one thread, in one script run: the 7x7/2 stem, 3x3 stride 1 (at 56x56
# with 64 channels, 14x14 with 256 and 7x7 with 512, as resnet18's stages) and stride 2, 1x1
# projections (stride 1 and the stride-2 down-projection) and a depthwise 3x3, at batch 1 and 8.
# Each layer is a torch.nn.Conv2d exported with torch.onnx.export, imported by the shapevm module
# at O0 (the reference conv kernel) and at O2 (the JIT's conv family:
# src/jit/llvm_cpu/codegen_conv.cc), checked against torch, then each round times ShapeVM, torch
# eager and oneDNN (Debian's libdnnl, through torch's aten::mkldnn_convolution: NCHW as is, and on
# oneDNN's blocked layouts) back to back; the table gives medians over rounds and the ratios
# (peer time / ShapeVM time: above 1 = ShapeVM faster).
# --resnet: torchvision resnet18 (random weights, dynamic batch/H/W) at batch 1 over a stream of
# image sides drawn from 96-320: a first pass compiles (--warm-passes: that many untimed passes),
# --passes more time ShapeVM O2 and torch image by image (interleaved; per-image medians over the
# passes); it reports both totals, the spread of ShapeVM's (and torch's) per-pixel time, a fit of
# time = a + b x pixels (a: the cost per image whatever its size) and the kernels installed for
# the whole stream.
# --autotune: the O2 programs run the AutoTuner (tuning waited for at install, a fresh in-memory
# tuning database), whose candidates include oneDNN's conv primitive (library_onednn_conv.h) with
# --library 1; the table's "O2 impl" column names what it installed (onednn: the primitive).
# Usage: PYTHONPATH=build/python /usr/bin/python3 bench/conv_layers.py [--rounds 5] [--calls 3]
#        [--resnet] [--images 16] [--passes 1] [--warm-passes 1] [--miss-recompile N] [--no-layers]
#        [--levels O0,O2] [--only NAMES]
#        [--cpu-time] [--autotune] [--library 0|1] [--dtype float32|bfloat16]
# --dtype bfloat16: each layer's conv in bfloat16 between float32 casts (the library candidate runs
# oneDNN's AMX kernels), against torch eager's bfloat16 conv; no oneDNN columns.
import argparse
import os
import statistics
import tempfile
import time
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
    "3x3 s1 256": (256, 256, 3, 1, 1, 1, 14),
    "3x3 s1 512": (512, 512, 3, 1, 1, 1, 7),
    "1x1 s1": (256, 64, 1, 1, 0, 1, 56),
    "1x1 down /2": (64, 128, 1, 2, 0, 1, 56),
    "depthwise 3x3": (128, 128, 3, 1, 1, 128, 28),
}


CLOCK = {"clock": time.perf_counter}
OPTIONS = {"autotune": False, "dtype": "float32"}
# relative L2 against torch's float32 (bfloat16: against its own bfloat16 conv)
TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2}


class Bf16Conv(torch.nn.Module):
    """A conv in bfloat16 between float32 casts (--dtype bfloat16): the ONNX graph casts x, the conv's
    initializers are bfloat16, the output is cast back."""

    def __init__(self, conv):
        super().__init__()
        self.conv = conv.to(torch.bfloat16)

    def forward(self, x):
        return self.conv(x.to(torch.bfloat16)).to(torch.float32)


def program_for(level):
    tune = OPTIONS["autotune"] and level == "O2"
    return _core.Program(jit_level=level, jit_wait=True, autotune=tune, tuning_cache=False)


def library_kernels(program):
    """The loaded kernels the JIT report names as oneDNN library kernels (conv ones are named svm_conv...)."""
    for line in program.stats()["jit_report"].splitlines():
        if "library kernels (impl=onednn)" in line and ": " in line.split("loaded", 1)[-1]:
            return [k.strip() for k in line.split("loaded: ", 1)[1].split(",")]
    return []


def timed(fn, calls):
    # ms per call; --cpu-time: the calling thread's CPU time (ShapeVM at kernel_threads=1 and torch
    # at one thread both run there), which time slices lost to other processes on a loaded host do
    # not inflate.
    return timeit.timeit(fn, number=calls, timer=CLOCK["clock"]) / calls * 1e3


def export(layer, path):
    cin, cout, k, s, p, g, side = layer
    torch.manual_seed(0)
    module = torch.nn.Conv2d(cin, cout, k, stride=s, padding=p, groups=g).eval()
    if OPTIONS["dtype"] == "bfloat16":
        module = Bf16Conv(module).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(1, cin, side, side),), str(path), input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"}}, opset_version=14)
    return module


def onednn_peers(module, layer, xt):
    """Debian's libdnnl conv primitive (oneDNN 2.6; torch's aten::mkldnn_convolution is its binding,
    the call torch eager's conv makes): on the NCHW tensors as they are, and on oneDNN's own blocked
    layouts (the weights and the input reordered once, outside the timing)."""
    import torch.utils.mkldnn as mkldnn

    _, _, _, s, p, g, _ = layer
    if OPTIONS["dtype"] == "bfloat16":  # torch's own bfloat16 conv (its bundled oneDNN), casts included
        return {}
    weight, bias = module.weight.detach(), module.bias.detach()
    blocked, xb = mkldnn.to_mkldnn(module), xt.to_mkldnn()
    return {
        "oneDNN": lambda: torch.ops.aten.mkldnn_convolution(xt, weight, bias, [p, p], [s, s], [1, 1], g),
        "oneDNN blocked": lambda: blocked(xb),
    }


def layers(args, folder):
    rows = []
    levels = args.levels.split(",")
    for name, layer in LAYERS.items():
        if args.only and name not in args.only.split(","):
            continue
        path = Path(folder) / "layer.onnx"
        module = export(layer, path)
        programs = {level: program_for(level) for level in levels}
        fns = {}
        for level, program in programs.items():
            program.load(str(path))
            fns[level] = _core.Function(program, 0, -1)
        for batch in (1, 8):
            x = np.random.default_rng(0).standard_normal((batch, layer[0], layer[6], layer[6])).astype(np.float32)
            xt = torch.from_numpy(x)
            with torch.no_grad():
                want = module(xt).numpy()
                peers = {"eager": lambda: module(xt), **onednn_peers(module, layer, xt)}
                for peer, run in peers.items():
                    got = run()
                    got = (got.to_dense() if got.is_mkldnn else got).numpy()
                    err = np.linalg.norm(got - want) / np.linalg.norm(want)
                    assert err < TOLERANCE[OPTIONS["dtype"]], f"{name} batch {batch} {peer}: relative L2 {err:.2e}"
            for level, fn in fns.items():
                # Profile, compile (waited for), run compiled; batch 8 after batch 1 misses the
                # first kernel's guard miss_recompile (5) times before the wider one compiles.
                for _ in range(8):
                    got = fn(x=x)
                err = np.linalg.norm(got - want) / np.linalg.norm(want)
                assert err < TOLERANCE[OPTIONS["dtype"]], f"{name} batch {batch} {level}: relative L2 {err:.2e}"
            times = {side: [] for side in (*levels, *peers)}
            for _ in range(args.rounds):  # interleaved: every side sees the same machine state
                for level, fn in fns.items():
                    times[level].append(timed(lambda: fn(x=x), args.calls))
                with torch.no_grad():
                    for peer, run in peers.items():
                        times[peer].append(timed(run, args.calls))
            out = want.shape
            flops = 2.0 * out[0] * out[1] * out[2] * out[3] * (layer[0] // layer[5]) * layer[2] * layer[2]
            med = {k: statistics.median(v) for k, v in times.items()}
            impl = "onednn" if any("_conv" in k for k in library_kernels(programs["O2"])) else "jit"
            rows.append((name, batch, f"{layer[6]}x{layer[6]}", med, flops / med["O2"] / 1e6, impl))
        for program in programs.values():
            program.close()
    sides = [*levels, "eager", "oneDNN", "oneDNN blocked"]
    if OPTIONS["dtype"] == "bfloat16":
        sides = [*levels, "eager"]
        print("| layer | batch | input | " + " | ".join(f"{side} ms" for side in sides) + " | eager / O2 | O2 impl |")
        print("|---|---:|---|" + "---:|" * (len(sides) + 1) + "---|")
        for name, batch, side, med, _, impl in rows:
            print(f"| {name} | {batch} | {side} | " + " | ".join(f"{med[s]:.2f}" for s in sides) +
                  f" | {med['eager'] / med['O2']:.2f}x | {impl} |")
        return
    print("| layer | batch | input | " + " | ".join(f"{side} ms" for side in sides) +
          " | eager / O2 | oneDNN / O2 | best oneDNN / O2 | O2 GFLOP/s | O2 impl |")
    print("|---|---:|---|" + "---:|" * (len(sides) + 4) + "---|")
    for name, batch, side, med, gflops, impl in rows:
        best = min(med["oneDNN"], med["oneDNN blocked"])
        print(f"| {name} | {batch} | {side} | " + " | ".join(f"{med[s]:.2f}" for s in sides) +
              f" | {med['eager'] / med['O2']:.2f}x | {med['oneDNN'] / med['O2']:.2f}x | {best / med['O2']:.2f}x | "
              f"{gflops:.1f} | {impl} |")


def resnet_stream(args, folder):
    import torchvision

    torch.manual_seed(0)
    module = torchvision.models.resnet18(weights=None).eval()
    path = Path(folder) / "resnet18.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(1, 3, 128, 128),), str(path), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"}}, opset_version=14)
    sides = np.random.default_rng(21).integers(96, 321, size=args.images)
    images = [np.random.default_rng(int(s)).standard_normal((1, 3, int(s), int(s))).astype(np.float32) for s in sides]
    program = program_for("O2")
    program.load(str(path))
    fn = _core.Function(program, 0, -1)
    for x in images:  # the first pass profiles and compiles
        got = fn(x=x)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < 1e-4, f"resnet18 side {x.shape[2]}: relative L2 {err:.2e}"
    for _ in range(args.warm_passes - 1):  # more untimed passes: a size's first calls settle its kernels
        for x in images:
            fn(x=x)
            with torch.no_grad():
                module(torch.from_numpy(x))
    compiled_after_first = program.stats()["kernels_installed"]
    svm_runs, eager_runs = [[] for _ in images], [[] for _ in images]
    for _ in range(args.passes):  # each image: ShapeVM then torch, back to back
        for i, x in enumerate(images):
            xt = torch.from_numpy(x)
            svm_runs[i].append(timed(lambda: fn(x=x), 1))
            with torch.no_grad():
                eager_runs[i].append(timed(lambda: module(xt), 1))
    svm = [statistics.median(r) for r in svm_runs]
    eager = [statistics.median(r) for r in eager_runs]
    stats = program.stats()
    library = [k for k in library_kernels(program) if "_conv" in k]
    program.close()
    per_pixel = [t / (int(s) * int(s)) for t, s in zip(svm, sides)]
    median_pp = statistics.median(per_pixel)
    eager_pp = [t / (int(s) * int(s)) for t, s in zip(eager, sides)]
    print(f"\nresnet18, batch 1, {len(images)} images, sides {min(sides)}-{max(sides)} "
          f"({', '.join(str(int(s)) for s in sides)}):")
    print(f"- timed passes ({args.passes}, per-image medians): ShapeVM O2 {sum(svm):.1f} ms, torch eager {sum(eager):.1f} ms, "
          f"eager / ShapeVM {sum(eager) / sum(svm):.2f}x (median per image {statistics.median(eager) / statistics.median(svm):.2f}x)")
    print(f"- ShapeVM per-pixel time: max / median {max(per_pixel) / median_pp:.2f} "
          f"(min / median {min(per_pixel) / median_pp:.2f}; torch eager's max / median "
          f"{max(eager_pp) / statistics.median(eager_pp):.2f}); per side, ShapeVM / median and eager / ShapeVM: " +
          ", ".join(f"{int(s)}: {pp / median_pp:.2f} {e / t:.2f}x"
                    for s, pp, t, e in sorted(zip(sides, per_pixel, svm, eager))))
    # time = a + b * pixels, least squares: a is the cost per image whatever its size.
    pixels = np.array([int(s) * int(s) for s in sides], dtype=np.float64)
    fits = {side: np.polyfit(pixels, np.array(t), 1) for side, t in (("ShapeVM", svm), ("eager", eager))}
    print("- fit time = a + b x pixels: " + "; ".join(f"{side} a {fit[1]:.2f} ms, b {fit[0] * 1e3:.3f} us/pixel"
                                                      for side, fit in fits.items()))
    print("- per side ms, ShapeVM / eager: " + ", ".join(f"{int(s)}: {t:.1f} / {e:.1f}"
                                                        for s, t, e in sorted(zip(sides, svm, eager))))
    print(f"- kernels installed: {compiled_after_first} after the first pass, {stats['kernels_installed']} in all; "
          f"fused regions {stats['fused_regions']}; launches compiled {stats['launches_compiled']} / interpreted "
          f"{stats['launches_interpreted']}")
    print(f"- conv kernels installed as oneDNN's primitive: {len(library)}")
    print("\n".join(f"  {line}" for line in stats["jit_report"].splitlines() if "region" in line or "launches" in line))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--resnet", action="store_true", help="also run resnet18 over a multi-scale stream")
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--passes", type=int, default=1, help="timed passes over the stream (per-image medians)")
    parser.add_argument("--warm-passes", type=int, default=1,
                        help="untimed passes before the timed ones (the first compiles; a weight-bound oneDNN conv "
                             "times its two layouts on a size's first 4 calls)")
    parser.add_argument("--no-layers", action="store_true")
    parser.add_argument("--levels", default="O0,O2", help="ShapeVM levels timed per layer (O2 is required)")
    parser.add_argument("--only", default="", help="comma-separated layer names (default: all)")
    parser.add_argument("--miss-recompile", type=int, default=0,
                        help="the miss_recompile tunable for the stream (0: the default, 5 guard misses)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the calling thread's CPU time instead of wall time (a loaded host)")
    parser.add_argument("--autotune", action="store_true", help="O2 runs the AutoTuner (oneDNN's conv among its candidates)")
    parser.add_argument("--library", type=int, default=1, help="the library_candidates tunable (0: generated kernels only)")
    parser.add_argument("--dtype", default="float32", choices=sorted(TOLERANCE),
                        help="the layers' conv dtype (bfloat16: between float32 casts, against torch's bfloat16 conv)")
    args = parser.parse_args()
    OPTIONS["autotune"] = args.autotune
    OPTIONS["dtype"] = args.dtype
    _core.set_tunable("library_candidates", str(args.library))
    if args.cpu_time:
        CLOCK["clock"] = time.thread_time
    torch.set_num_threads(1)
    for key, value in (("warmup", 0), ("hot_count", 0), ("hot_ms", 0), ("kernel_threads", 1)):
        _core.set_tunable(key, str(value))
    with tempfile.TemporaryDirectory() as folder:
        if not args.no_layers:
            layers(args, folder)
        if args.resnet:
            if args.miss_recompile > 0:
                _core.set_tunable("miss_recompile", str(args.miss_recompile))
            resnet_stream(args, folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
