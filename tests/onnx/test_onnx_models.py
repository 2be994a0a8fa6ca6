# SPDX-License-Identifier: Apache-2.0
# Real models through the ONNX importer: torch.nn modules exported here with torch.onnx.export
# (random weights, dynamic axes), run by ShapeVM at >= 3 shapes per dynamic axis at O0 and at O2
# with zero thresholds (every region hot at once, each run waiting for its compiles), and
# compared with torch within 1e-4 relative L2. Also the CLI paths (run, dis, import).
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from onnx_models import MODELS, export  # noqa: E402

shapevm = pytest.importorskip("shapevm")
if not hasattr(shapevm, "load"):
    pytest.skip("the shapevm Python module is not built", allow_module_level=True)
from shapevm import _core  # noqa: E402

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx_models")
    models = {}
    for name in MODELS:
        path = folder / f"{name}.onnx"
        models[name] = (path, export(name, path))
    return models


def relative_l2(actual, expected):
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"shape {actual.shape} but torch gives {expected.shape}"
    return np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30)


def torch_outputs(module, x):
    with torch.no_grad():
        out = module(torch.from_numpy(x))
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def zero_thresholds():
    for key in ("warmup", "hot_count", "hot_ms"):
        _core.set_tunable(key, "0")


@pytest.mark.parametrize("level", ["O0", "O2"])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_torch(exported, name, level):
    path, module = exported[name]
    _, make, _, shapes = MODELS[name]
    zero_thresholds()
    program = _core.Program(jit_level=level, jit_wait=True, autotune=False, tuning_cache=False)
    program.load(str(path))
    fn = _core.Function(program, 0, -1)
    # At O2 each shape runs three times: the JIT profiles the first runs of a new shape and
    # compiles for it (jit_wait: before the run returns), so the last runs on compiled kernels.
    repeats = 3 if level == "O2" else 1
    for shape in shapes:
        x = make(shape).numpy()
        want = torch_outputs(module, x)
        for _ in range(repeats):
            got = fn(x=x)
            got = list(got) if isinstance(got, tuple) else [got]
            assert len(got) == len(want)
            for k, (g, w) in enumerate(zip(got, want)):
                err = relative_l2(g, w)
                assert err <= TOLERANCE, f"{name} {level} shape {shape} output {k}: relative L2 {err:.2e}"
    stats = program.stats()
    assert stats["runs"] == len(shapes) * repeats
    if level == "O2":
        assert stats["launches_compiled"] > 0, f"{name}: nothing ran compiled at O2: {stats}"
        if name != "mlp":  # JIT coverage: the attention block and the recurrent loops run fused regions
            served = int(re.search(r"(\d+) region executions served", stats["jit_report"]).group(1))
            assert stats["fused_regions"] >= 1 and served > 0, f"{name}: no fused region served a run:\n{stats['jit_report']}"
        if name in ("lstm", "bilstm", "gru", "lm"):  # the loop's Y assembly leaves the JIT nothing it fails on
            assert stats["compile_failures"] == 0, f"{name}: failed compiles:\n{stats['jit_report']}"
    program.close()


def test_python_load_run(exported):
    path, module = exported["mlp"]
    model = shapevm.load(str(path), jit_level="O0")
    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    want = torch_outputs(module, x)[0]
    assert relative_l2(model.run(x=x), want) <= TOLERANCE
    assert relative_l2(model(x), want) <= TOLERANCE


def test_named_dims_and_tokens(exported, run_cli):
    path, _ = exported["block"]
    code, out, err = run_cli("dis", path)
    assert code == 0, err
    assert "f32[?0,?1,32]" in out  # dim_param batch/seq -> named dynamic dims, 32 static
    assert "batch" in out and "seq" in out
    # --dim on a named dim of an imported model
    code, out, err = run_cli("run", path, "--dim", "seq=4,8,12", "--dim", "batch=2", "--iters", "3", "--jit-level", "O0")
    assert code == 0, err


def test_layer_norm_and_gelu_recognized(exported, run_cli):
    # The exported block's decomposed LayerNorms and erf GELU import as layer_norm / gelu
    # (src/onnx/onnx_fuse.cc; tests/onnx/test_onnx_patterns.py covers the matcher itself).
    path, _ = exported["block"]
    code, dis, err = run_cli("dis", path)
    assert code == 0, err
    assert dis.count("CallOp layer_norm ") == 2 and dis.count("CallOp gelu ") == 1, dis
    assert "CallOp erf " not in dis and "CallOp pow " not in dis, dis
    # both with scale and shift: torch writes ln2's parameters as Identity of ln1's (deduplicated)
    assert len(re.findall(r"CallOp layer_norm r\d+ = r\d+, r\d+, r\d+ ", dis)) == 2, dis


def test_shape_arithmetic_is_scalar_bytecode(exported, run_cli):
    # The exported block computes its reshape targets from x.shape (Shape -> Gather -> Unsqueeze
    # -> Concat -> Reshape): those must be scalar instructions, not tensor ops.
    path, _ = exported["block"]
    code, out, err = run_cli("dis", path)
    assert code == 0, err
    assert "DimOf" in out and "TuplePack" in out
    for op in ("stack", "full", "concat", "gather", "unsqueeze"):
        assert f"CallOp {op} " not in out, f"shape arithmetic became tensor op {op}:\n{out}"


def test_cli_run_and_import(exported, run_cli, tmp_path):
    path, module = exported["lstm"]
    x = np.random.default_rng(2).standard_normal((2, 50, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code, _, err = run_cli("run", path, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz", "--jit-level", "O0", "-q")
    assert code == 0, err
    got = np.load(tmp_path / "out.npz")
    want = torch_outputs(module, x)
    for k, w in enumerate(want):
        assert relative_l2(got[f"out{k}"], w) <= TOLERANCE
    for suffix in (".svm", ".svasm"):
        code, _, err = run_cli("import", path, "-o", tmp_path / f"lstm{suffix}")
        assert code == 0, err
        code, _, err = run_cli("run", tmp_path / f"lstm{suffix}", "--inputs", tmp_path / "in.npz",
                               "--out", tmp_path / "out2.npz", "--jit-level", "O0", "-q")
        assert code == 0, err
        assert relative_l2(np.load(tmp_path / "out2.npz")["out0"], want[0]) <= TOLERANCE
