# SPDX-License-Identifier: Apache-2.0
# Import-time recognition of exported LayerNorm and exact-GELU chains (src/onnx/onnx_fuse.cc):
# an exact chain imports as one layer_norm / gelu op and matches numpy; a chain with an outside
# consumer of an intermediate, or a wrong constant, is left as written and still matches.
import math

import numpy as np
import onnx
import pytest

from onnx_patterns import gelu_model, layer_norm_model

TOLERANCE = 1e-5


def layer_norm_ref(x, eps, w=None, b=None, exponent=2.0):
    mean = x.mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(((x - mean) ** exponent).mean(-1, keepdims=True) + eps)
    return y if w is None else y * w + b


def gelu_ref(x, sqrt2=2 ** 0.5, half=0.5):
    erf = np.vectorize(math.erf)
    return (x * half * (1 + erf(x / sqrt2))).astype(np.float32)


def import_and_run(run_cli, tmp_path, model, x, level="O0"):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    code, dis, err = run_cli("dis", path)
    assert code == 0, err
    np.savez(tmp_path / "in.npz", x=x)
    code, _, err = run_cli("run", path, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz",
                           "--jit-level", level, "-q")
    assert code == 0, err
    out = np.load(tmp_path / "out.npz")
    return dis, [out[f"out{k}"] for k in range(len(out.files))]


def close(got, want):
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert err <= TOLERANCE, f"relative L2 {err:.2e}"


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_chain_becomes_layer_norm(run_cli, tmp_path, affine):
    model = layer_norm_model(eps=1e-3, affine=affine)
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    for level in ("O0", "O2"):
        dis, (y,) = import_and_run(run_cli, tmp_path, model, x, level)
        assert dis.count("CallOp layer_norm ") == 1, dis
        for op in ("mean", "pow", "sqrt", "div"):
            assert f"CallOp {op} " not in dis, f"{op} left over:\n{dis}"
        w = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
        close(y, layer_norm_ref(x, 1e-3, w.get("w"), w.get("b")))


@pytest.mark.parametrize("variant", ["expose_mean", "exponent_4"])
def test_layer_norm_near_misses_stay_as_written(run_cli, tmp_path, variant):
    model = layer_norm_model(expose_mean=variant == "expose_mean", exponent=4.0 if variant == "exponent_4" else 2.0)
    x = np.random.default_rng(1).standard_normal((3, 4, 8)).astype(np.float32)
    dis, outs = import_and_run(run_cli, tmp_path, model, x)
    assert "CallOp layer_norm " not in dis and "CallOp mean " in dis, dis
    w = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    close(outs[0], layer_norm_ref(x, 1e-5, w["w"], w["b"], exponent=4.0 if variant == "exponent_4" else 2.0))
    if variant == "expose_mean":
        close(outs[1], x.mean(-1, keepdims=True))


@pytest.mark.parametrize("form", ["torch", "half_first", "phi_half"])
def test_gelu_chain_becomes_gelu(run_cli, tmp_path, form):
    x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32) * 3
    for level in ("O0", "O2"):
        dis, (y,) = import_and_run(run_cli, tmp_path, gelu_model(form=form), x, level)
        assert dis.count("CallOp gelu ") == 1 and "CallOp erf " not in dis, dis
        close(y, gelu_ref(x))


@pytest.mark.parametrize("variant", ["expose_erf", "wrong_sqrt2", "wrong_half"])
def test_gelu_near_misses_stay_as_written(run_cli, tmp_path, variant):
    kwargs = {"expose_erf": {"expose_erf": True}, "wrong_sqrt2": {"sqrt2": 1.5}, "wrong_half": {"half": 0.25}}[variant]
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    dis, outs = import_and_run(run_cli, tmp_path, gelu_model(**kwargs), x)
    assert "CallOp gelu " not in dis and "CallOp erf " in dis, dis
    close(outs[0], gelu_ref(x, kwargs.get("sqrt2", 2 ** 0.5), kwargs.get("half", 0.5)))
