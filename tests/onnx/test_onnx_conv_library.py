# SPDX-License-Identifier: Apache-2.0
# Issue 21 at O2 with the AutoTuner on: a conv block (3x3 conv + bias + ReLU, a residual add, a
# strided 3x3 conv) and an AveragePool, exported with torch.onnx.export with dynamic batch and
# image size, against torch over several sizes. The tuner times oneDNN's conv primitive
# (library_onednn_conv.h, impl=onednn) against the generated kernels and installs whichever wins
# (by timing, so either may run; both must match torch); avg_pool runs compiled (count_include_pad
# and not, ceil_mode). bfloat16 convs with a spatial kernel run on the primitive untuned.
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
shapevm = pytest.importorskip("shapevm")
if not hasattr(shapevm, "load"):
    pytest.skip("the shapevm Python module is not built", allow_module_level=True)
from shapevm import _core  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, include_pad):
        super().__init__()
        self.a = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.b = torch.nn.Conv2d(32, 48, 3, stride=2, padding=1)
        self.pool = torch.nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=not include_pad,
                                       count_include_pad=include_pad)

    def forward(self, x):
        y = torch.relu(self.a(x)) + x
        return self.pool(torch.relu(self.b(y)))


def run_against_torch(module, path, shapes, tunables, autotune, tolerance, seed):
    """Exports `module` (dynamic n, h, w), runs it at O2 with `tunables` set (restored afterwards)
    on random inputs of `shapes`, three calls each (profiled, compiled and tuned, then compiled),
    each against torch within `tolerance` relative L2; returns the program's stats."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(*shapes[0]),), str(path), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}}, opset_version=14)
    saved = {key: _core.get_tunable(key) for key in tunables}
    for key, value in tunables.items():
        _core.set_tunable(key, str(value))
    try:
        program = _core.Program(jit_level="O2", jit_wait=True, autotune=autotune, tuning_cache=False)
        program.load(str(path))
        fn = _core.Function(program, 0, -1)
        rng = np.random.default_rng(seed)
        for shape in shapes:
            x = rng.standard_normal(shape).astype(np.float32)
            with torch.no_grad():
                want = module(torch.from_numpy(x)).numpy()
            for _ in range(3):
                got = fn(x=x)
                err = np.linalg.norm(got - want) / np.linalg.norm(want)
                assert err < tolerance, f"{shape}: relative L2 {err:.2e}"
        stats = program.stats()
        program.close()
    finally:
        for key, value in saved.items():
            _core.set_tunable(key, str(value))
    return stats


@pytest.mark.parametrize("include_pad", [True, False])
def test_tuned_conv_block_and_avg_pool_match_torch(tmp_path, include_pad):
    torch.manual_seed(21)
    tunables = {"warmup": 0, "hot_count": 0, "hot_ms": 0, "tune_budget_ms": 200, "library_candidates": 1}
    shapes = [(1, 32, 16, 16), (2, 32, 13, 19), (1, 32, 9, 7), (3, 32, 24, 20)]
    stats = run_against_torch(Block(include_pad).eval(), tmp_path / "block.onnx", shapes, tunables, True, 1e-4, 21)
    assert stats["launches_compiled"] > 0, stats["jit_report"]


class Bf16Block(torch.nn.Module):
    """3x3 convs in bfloat16 between float32 casts (a strided one, a bias and ReLU)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(16, 32, 3, padding=1).to(torch.bfloat16)
        self.b = torch.nn.Conv2d(32, 24, 3, stride=2, padding=(1, 0)).to(torch.bfloat16)

    def forward(self, x):
        return self.b(torch.relu(self.a(x.to(torch.bfloat16)))).to(torch.float32)


def test_bfloat16_convs_run_on_onednn(tmp_path):
    """bfloat16 convs with a spatial kernel, which the generated kernels do not compute, run on
    oneDNN's primitive (at the default parameters, untuned) and match torch's bfloat16 convs."""
    torch.manual_seed(22)
    tunables = {"warmup": 0, "hot_count": 0, "hot_ms": 0, "library_candidates": 1}
    shapes = [(1, 16, 12, 12), (2, 16, 15, 9), (1, 16, 7, 20)]
    stats = run_against_torch(Bf16Block().eval(), tmp_path / "bf16.onnx", shapes, tunables, False, 2e-2, 22)
    report = stats["jit_report"]
    library = [line for line in report.splitlines() if "library kernels (impl=onednn)" in line]
    assert library and library[0].count("_bf16_") == 2 and "svm_conv3x3" in library[0], report
