# SPDX-License-Identifier: Apache-2.0
# Bad ONNX input: each case gets a clear error and a non-zero exit from `shapevm run` (or from
# the Python API for the input-name cases), never a crash.
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def model(nodes, inputs, outputs, initializers=(), opset=14, name="g"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def add_model(opset=14, shape=("batch", 4)):
    w = numpy_helper.from_array(np.ones((4,), np.float32), "w")
    return model([helper.make_node("Add", ["x", "w"], ["y"], name="add0")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], [w], opset=opset)


def save(m, path):
    onnx.save(m, str(path))
    return path


def expect_error(run_cli, args, *needles):
    code, out, err = run_cli(*args)
    assert code != 0, f"expected a failure: {out}{err}"
    assert "shapevm: error:" in err, err
    assert "Segmentation" not in err and "Abort" not in err
    for needle in needles:
        assert needle in err, f"{needle!r} not in: {err}"
    return err


def test_good_model_runs(run_cli, tmp_path):
    path = save(add_model(), tmp_path / "ok.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros((3, 4), np.float32))
    code, _, err = run_cli("run", path, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz", "-q")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["out0"], np.ones((3, 4), np.float32))


def test_malformed_protobuf(run_cli, tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\xff\xff\xff\x07 this is not a protobuf")
    expect_error(run_cli, ["run", path], "not a valid ONNX model")


def test_truncated_protobuf(run_cli, tmp_path):
    data = add_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    expect_error(run_cli, ["dis", path], "cut.onnx")


def test_missing_initializer(run_cli, tmp_path):
    m = add_model()
    del m.graph.initializer[:]
    expect_error(run_cli, ["run", save(m, tmp_path / "noinit.onnx")], "add0", "'w'")


def test_missing_external_data_file(run_cli, tmp_path):
    m = add_model()
    big = numpy_helper.from_array(np.ones((4,), np.float32), "w")
    onnx.external_data_helper.set_external_data(big, location="weights.bin")
    big.ClearField("raw_data")
    big.data_location = TensorProto.EXTERNAL
    m.graph.initializer[0].CopyFrom(big)
    path = save(m, tmp_path / "ext.onnx")
    expect_error(run_cli, ["run", path], "weights.bin")
    # with the file present the same model runs
    (tmp_path / "weights.bin").write_bytes(np.full((4,), 2, np.float32).tobytes())
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 4), np.float32))
    code, _, err = run_cli("run", path, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz", "-q")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["out0"], np.full((1, 4), 2, np.float32))


@pytest.mark.parametrize("opset", [10, 18])
def test_opset_outside_range(run_cli, tmp_path, opset):
    expect_error(run_cli, ["run", save(add_model(opset=opset), tmp_path / "op.onnx")], f"opset {opset}", "11..17")


def test_unsupported_ops_listed_at_once(run_cli, tmp_path):
    nodes = [helper.make_node("Hardmax", ["x"], ["a"], name="first_bad"),
             helper.make_node("Relu", ["a"], ["b"], name="fine"),
             helper.make_node("NonZero", ["b"], ["y"], name="second_bad")]
    m = model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    err = expect_error(run_cli, ["run", save(m, tmp_path / "unsup.onnx")], "first_bad", "Hardmax", "second_bad", "NonZero")
    assert "fine" not in err


def test_input_contradicts_static_dim(run_cli, tmp_path):
    path = save(add_model(), tmp_path / "ok.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros((3, 5), np.float32))
    expect_error(run_cli, ["run", path, "--inputs", tmp_path / "in.npz"], "'x'", "dim 1 is 5", "4")


def test_unknown_input_name(run_cli, tmp_path):
    path = save(add_model(), tmp_path / "ok.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros((3, 4), np.float32), nope=np.zeros((1,), np.float32))
    expect_error(run_cli, ["run", path, "--inputs", tmp_path / "in.npz"], "'nope'", "matches no parameter")


def test_missing_input_name_python(tmp_path):
    shapevm = pytest.importorskip("shapevm")
    if not hasattr(shapevm, "load"):
        pytest.skip("the shapevm Python module is not built")
    loaded = shapevm.load(str(save(add_model(), tmp_path / "ok.onnx")), jit_level="O0")
    with pytest.raises(shapevm.Error, match="x"):
        loaded.run()
    with pytest.raises(shapevm.Error, match="nope"):
        loaded.run(x=np.zeros((1, 4), np.float32), nope=np.zeros((1,), np.float32))


def test_cycle(run_cli, tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a0"], name="n0"),
             helper.make_node("Add", ["a0", "c"], ["b"], name="n1"),
             helper.make_node("Relu", ["b"], ["c"], name="n2"),
             helper.make_node("Relu", ["b"], ["y"], name="n3")]
    m = model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    expect_error(run_cli, ["run", save(m, tmp_path / "cycle.onnx")], "cycle", "n1", "n2")


def test_model_over_max_tensor_bytes(run_cli, tmp_path):
    w = numpy_helper.from_array(np.ones((1024,), np.float32), "w")  # 4096 bytes
    m = model([helper.make_node("Add", ["x", "w"], ["y"], name="add0")],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024])], [w])
    expect_error(run_cli, ["run", save(m, tmp_path / "big.onnx"), "--set", "max_tensor_bytes=1000"],
                 "initializer 'w'", "max_tensor_bytes")


def gather_model(path):
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(6, 2), "w")
    m = model([helper.make_node("Gather", ["w", "ids"], ["y"], name="embed")],
              [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return save(m, path)


def test_gather_ids_int64_negative_and_out_of_range(run_cli, tmp_path):
    path = gather_model(tmp_path / "embed.onnx")
    ids = np.array([[0, -1, 5], [2, -6, 3]], np.int64)  # ONNX: negative ids count from the end
    np.savez(tmp_path / "ok.npz", ids=ids)
    code, _, err = run_cli("run", path, "--inputs", tmp_path / "ok.npz", "--out", tmp_path / "out.npz", "-q")
    assert code == 0, err
    weights = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["out0"], np.take(weights, ids, axis=0))
    np.savez(tmp_path / "bad.npz", ids=np.array([[0, 6, 1]], np.int64))
    expect_error(run_cli, ["run", path, "--inputs", tmp_path / "bad.npz"], "index 6 is out of range", "extent 6")
