# SPDX-License-Identifier: Apache-2.0
# Convolutional models through the ONNX importer: torchvision's resnet18 (random weights, dynamic
# batch/H/W, three image sizes), a small 3-D conv net over varying depth and a U-Net-style block
# (strided conv, ConvTranspose, bilinear Resize, skip concatenation, BatchNormalization kept by
# the exporter), exported here with torch.onnx.export and compared with torch at O0 and O2 within
# 1e-4 relative L2. Also: Conv + BatchNormalization folds at import (no batch_norm op remains),
# and the importer's errors for an unknown auto_pad or resize mode and a rank mismatch.
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

shapevm = pytest.importorskip("shapevm")
if not hasattr(shapevm, "load"):
    pytest.skip("the shapevm Python module is not built", allow_module_level=True)
from shapevm import _core  # noqa: E402

nn = torch.nn
TOLERANCE = 1e-4


class Net3d(nn.Module):
    """Conv3d + BatchNorm3d + ReLU, a strided max pool, a depthwise 3-D conv, global pooling."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv3d(2, 8, 3, padding=1)
        self.bn = nn.BatchNorm3d(8)
        self.pool = nn.MaxPool3d(2, stride=2, ceil_mode=True)
        self.dw = nn.Conv3d(8, 8, 3, padding=1, groups=8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        y = self.pool(torch.relu(self.bn(self.a(x))))
        y = torch.relu(self.dw(y)) + y
        return self.head(nn.functional.adaptive_avg_pool3d(y, 1).flatten(1))


class UNetBlock(nn.Module):
    """Encoder conv, strided down conv, ConvTranspose and bilinear Resize up, skip concatenation."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.mix = nn.Conv2d(24, 4, 3, padding=1)

    def forward(self, x):
        skip = torch.relu(self.bn(self.enc(x)))
        low = torch.relu(self.down(skip))
        up = self.up(low)
        resized = nn.functional.interpolate(low[:, :8], scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.mix(torch.cat([skip, up, resized], dim=1))


def resnet18():
    import torchvision  # pylint: disable=import-outside-toplevel

    return torchvision.models.resnet18(weights=None, num_classes=10)


# name: (constructor, dynamic axes, example shape, shapes to run, keep BatchNormalization nodes)
MODELS = {
    "resnet18": (resnet18, {0: "batch", 2: "height", 3: "width"}, (1, 3, 32, 32),
                 [(1, 3, 32, 32), (2, 3, 40, 32), (1, 3, 48, 40)], False),
    "net3d": (Net3d, {0: "batch", 2: "depth"}, (1, 2, 5, 8, 8), [(1, 2, 5, 8, 8), (2, 2, 8, 8, 8), (1, 2, 11, 8, 8)],
              True),
    "unet": (UNetBlock, {0: "batch", 2: "height", 3: "width"}, (1, 3, 16, 16),
             [(1, 3, 16, 16), (2, 3, 12, 20), (1, 3, 24, 8)], True),
}


def export(name, path):
    make, axes, example_shape, _, keep_bn = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    for m in module.modules():  # non-trivial running statistics, so a folded BatchNorm is visible
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    example = torch.randn(*example_shape)
    training = torch.onnx.TrainingMode.PRESERVE if keep_bn else torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), str(path), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": axes}, opset_version=14, training=training)
    return module


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx_conv")
    return {name: (folder / f"{name}.onnx", export(name, folder / f"{name}.onnx")) for name in MODELS}


def relative_l2(actual, expected):
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"shape {actual.shape} but torch gives {expected.shape}"
    return np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30)


@pytest.mark.parametrize("level", ["O0", "O2"])
@pytest.mark.parametrize("name", list(MODELS))
def test_conv_model_matches_torch(exported, name, level):
    path, module = exported[name]
    for key in ("warmup", "hot_count", "hot_ms"):
        _core.set_tunable(key, "0")
    program = _core.Program(jit_level=level, jit_wait=True, autotune=False, tuning_cache=False)
    program.load(str(path))
    fn = _core.Function(program, 0, -1)
    rng = np.random.default_rng()
    repeats = 2 if level == "O2" else 1
    for shape in MODELS[name][3]:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        for _ in range(repeats):
            err = relative_l2(fn(x=x), want)
            assert err <= TOLERANCE, f"{name} {level} shape {shape}: relative L2 {err:.2e}"
    assert program.stats()["runs"] == len(MODELS[name][3]) * repeats
    program.close()


def test_batch_norm_after_conv_folds_at_import(exported, run_cli):
    path, _ = exported["unet"]
    assert "BatchNormalization" in {n.op_type for n in onnx.load(str(path)).graph.node}
    code, out, err = run_cli("dis", path)
    assert code == 0, err
    assert "CallOp conv " in out
    assert "batch_norm" not in out, "the BatchNormalization after the encoder conv was not folded"


def conv_model(path, x_shape, w_shape, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, list(w_shape), np.ones(int(np.prod(w_shape)), np.float32))
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))
    return path


def resize_model(path, mode):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], [scales]),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("case,make,needles", [
    ("auto_pad", lambda p: conv_model(p, (1, 1, 5, 5), (1, 1, 3, 3), auto_pad="SAME_MIDDLE"),
     ["Conv", "unknown auto_pad 'SAME_MIDDLE'", "SAME_UPPER"]),
    ("resize_mode", lambda p: resize_model(p, "bilinear"), ["Resize", "unknown mode 'bilinear'", "cubic"]),
    ("rank", lambda p: conv_model(p, (1, 1, 5, 5), (1, 1, 3, 3, 3)), ["Conv", "rank 4", "3-D kernel"]),
    ("weight_rank", lambda p: conv_model(p, (1, 1, 5, 5), (3,)), ["Conv", "weight 'w' has rank 1", "rank 3 to 5"]),
    ("kernel_shape", lambda p: conv_model(p, (1, 1, 5, 5), (1, 1, 3, 3), kernel_shape=[3]),
     ["Conv", "kernel_shape [3]", "weight 'w' [1,1,3,3]"]),
])
def test_bad_conv_models(tmp_path, run_cli, case, make, needles):
    path = make(tmp_path / f"{case}.onnx")
    code, out, err = run_cli("dis", path)
    assert code != 0 and "shapevm: error:" in err, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in:\n{err}"


def test_channel_mismatch_at_run_time(tmp_path, run_cli):
    path = conv_model(tmp_path / "channels.onnx", ("n", 3, 5, 5), (4, 2, 3, 3))
    np.savez(tmp_path / "in.npz", x=np.ones((1, 3, 5, 5), np.float32))
    code, _, err = run_cli("run", path, "--inputs", tmp_path / "in.npz", "--jit-level", "O0", "-q")
    assert code != 0
    for needle in ("conv", "f32[1,3,5,5]", "f32[4,2,3,3]", "3 channels"):
        assert needle in err, f"{needle!r} not in:\n{err}"


def reference_conv(x, w, stride, pad, groups):
    with torch.no_grad():
        return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=stride, padding=pad,
                                          groups=groups).numpy()


# The JIT's conv kernels (src/jit/llvm_cpu/codegen_conv.cc) at O1 on a lone Conv with dynamic H
# and W: the kernel compiled for the first size is baked, the one compiled at the first guard
# miss (miss_recompile 1) is range-guarded, so five sizes in one power-of-two range need two
# compiles; every call but the profiled first and the missed second runs compiled and matches
# torch.
@pytest.mark.parametrize("kind,w_shape,stride,pad,groups", [
    ("pointwise", (16, 8, 1, 1), 1, 0, 1),
    ("dense", (16, 8, 3, 3), 2, 1, 1),
    ("depthwise", (8, 1, 3, 3), 1, 1, 8),
])
def test_conv_kernels_are_range_guarded(tmp_path, kind, w_shape, stride, pad, groups):
    rng = np.random.default_rng(21)
    w_values = rng.standard_normal(w_shape).astype(np.float32)
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "h", "w"])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, list(w_shape), w_values.ravel())
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride, stride], pads=[pad] * 4, group=groups)
    model = helper.make_model(helper.make_graph([node], "g", [x_info], [y_info], [w]),
                              opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / f"{kind}.onnx"
    onnx.save(model, str(path))
    for key in ("warmup", "hot_count", "hot_ms"):
        _core.set_tunable(key, "0")
    misses = _core.get_tunable("miss_recompile")
    _core.set_tunable("miss_recompile", "1")
    try:
        program = _core.Program(jit_level="O1", jit_wait=True, autotune=False, tuning_cache=False)
        program.load(str(path))
        fn = _core.Function(program, 0, -1)
        sizes = [(20, 20), (24, 28), (30, 18), (32, 17), (17, 31)]
        for h, w_side in sizes:
            x = rng.standard_normal((1, 8, h, w_side)).astype(np.float32)
            err = relative_l2(fn(x=x), reference_conv(x, w_values, stride, pad, groups))
            assert err <= TOLERANCE, f"{kind} {h}x{w_side}: relative L2 {err:.2e}"
        stats = program.stats()
        program.close()
    finally:
        _core.set_tunable("miss_recompile", str(misses))
    assert stats["kernels_installed"] == 2, stats["jit_report"]
    assert stats["launches_compiled"] >= len(sizes) - 2, stats["jit_report"]


# At O2 a conv's elementwise consumers run in its kernel's store (the region planner hands the
# conv family an epilogue, as a matmul's): Conv -> Relu alone is a region (one op folded; without
# the epilogue it would be a lone conv and a one-node pass, not worth a region), and Conv -> Add of
# a residual -> Relu folds two ops. ReLU6 (Clip with scalar bounds: maximum and minimum against
# one-element operands) folds two more. Dense (3x3, padded) and pointwise convs, several image
# sizes, against torch.
# A one-graph opset-13 model saved to `path` and loaded at O2 with every op hot at once (compiles
# waited for, no tuning): the Program and its entry function.
def compiled_at_o2(path, nodes, x_info, y_info, initializers):
    model = helper.make_model(helper.make_graph(nodes, "g", [x_info], [y_info], initializers),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))
    for key in ("warmup", "hot_count", "hot_ms"):
        _core.set_tunable(key, "0")
    program = _core.Program(jit_level="O2", jit_wait=True, autotune=False, tuning_cache=False)
    program.load(str(path))
    return program, _core.Function(program, 0, -1)


@pytest.mark.parametrize("kernel,residual,relu6", [(3, False, False), (3, True, False), (1, True, False),
                                                   (3, False, True), (1, True, True)])
def test_conv_epilogues_fuse_at_o2(tmp_path, kernel, residual, relu6):
    rng = np.random.default_rng(22)
    w_values = rng.standard_normal((8, 8, kernel, kernel)).astype(np.float32)
    b_values = rng.standard_normal(8).astype(np.float32)
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "h", "w"])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    initializers = [helper.make_tensor("w", TensorProto.FLOAT, list(w_values.shape), w_values.ravel()),
                    helper.make_tensor("b", TensorProto.FLOAT, [8], b_values)]
    pad = kernel // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4)]
    if residual:
        nodes.append(helper.make_node("Add", ["c", "x"], ["s"]))
    if relu6:
        initializers += [helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0]),
                         helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0])]
        nodes.append(helper.make_node("Clip", ["s" if residual else "c", "lo", "hi"], ["y"]))
    else:
        nodes.append(helper.make_node("Relu", ["s" if residual else "c"], ["y"]))
    program, fn = compiled_at_o2(tmp_path / "conv_epilogue.onnx", nodes, x_info, y_info, initializers)
    for h, w_side in [(9, 13), (20, 17), (9, 13), (33, 30)]:
        x = rng.standard_normal((1, 8, h, w_side)).astype(np.float32)
        want = reference_conv(x, w_values, 1, pad, 1) + b_values.reshape(1, 8, 1, 1)
        want = np.maximum(want + x if residual else want, 0)
        if relu6:
            want = np.minimum(want, 6)
        err = relative_l2(fn(x=x), want)
        assert err <= TOLERANCE, f"{kernel}x{kernel} {h}x{w_side}: relative L2 {err:.2e}"
    stats = program.stats()
    program.close()
    assert stats["fused_regions"] >= 1, stats["jit_report"]
    assert f"({int(residual) + (2 if relu6 else 1)} ops folded" in stats["jit_report"], stats["jit_report"]
    assert stats["launches_compiled"] >= 1, stats["jit_report"]


# At O2 a depthwise conv in a region is a conv step whose kernel takes any image size (as a dense
# conv's): Depthwise -> Relu -> pointwise -> Relu over several sizes, against the reference. (Before,
# it was an opaque step compiled for the first size, and every other size ran the reference conv
# inside the region: 5x slower at 240x240 after compiling on 20x20, same results.)
def test_depthwise_conv_step_serves_every_size_at_o2(tmp_path):
    rng = np.random.default_rng(23)
    dw = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    pw = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    b8, b16 = rng.standard_normal(8).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    initializers = [helper.make_tensor("dw", TensorProto.FLOAT, [8, 1, 3, 3], dw.ravel()),
                    helper.make_tensor("b8", TensorProto.FLOAT, [8], b8),
                    helper.make_tensor("pw", TensorProto.FLOAT, [16, 8, 1, 1], pw.ravel()),
                    helper.make_tensor("b16", TensorProto.FLOAT, [16], b16)]
    nodes = [helper.make_node("Conv", ["x", "dw", "b8"], ["a"], pads=[1, 0, 2, 1], group=8),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "pw", "b16"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "h", "w"])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    program, fn = compiled_at_o2(tmp_path / "depthwise_region.onnx", nodes, x_info, y_info, initializers)
    padded = lambda x: np.pad(x, ((0, 0), (0, 0), (1, 2), (0, 1)))  # noqa: E731
    for h, w_side in [(9, 13), (20, 17), (9, 13), (33, 30)]:
        x = rng.standard_normal((1, 8, h, w_side)).astype(np.float32)
        a = np.maximum(reference_conv(padded(x), dw, 1, 0, 8) + b8.reshape(1, 8, 1, 1), 0)
        want = np.maximum(reference_conv(a, pw, 1, 0, 1) + b16.reshape(1, 16, 1, 1), 0)
        err = relative_l2(fn(x=x), want)
        assert err <= TOLERANCE, f"{h}x{w_side}: relative L2 {err:.2e}"
    stats = program.stats()
    program.close()
    assert stats["fused_regions"] >= 1, stats["jit_report"]
