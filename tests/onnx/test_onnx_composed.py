# SPDX-License-Identifier: Apache-2.0
# Ops the importer composes from existing ShapeVM ops (src/onnx/onnx_composed.cc) and the LSTM
# options onnx_recurrent.cc maps, on dynamic dims the ONNX node tests do not use: Einsum's
# exporter equations, CumSum (exclusive/reverse), TopK (largest/smallest) and an LSTM with
# peepholes, clip, input_forget and parameterized activations, each against a numpy reference.
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
TOLERANCE = 1e-5


def model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def run(run_cli, tmp_path, m, level="O0", **inputs):
    onnx.save(m, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", **inputs)
    code, _, err = run_cli("run", tmp_path / "m.onnx", "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz",
                           "--jit-level", level, "-q")
    assert code == 0, err
    out = np.load(tmp_path / "out.npz")
    return [out[f"out{k}"] for k in range(len(out.files))]


def close(got, want):
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert err <= TOLERANCE, f"relative L2 {err:.2e}"


@pytest.mark.parametrize("equation,shapes", [
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)]),
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)]),
    ("ij,jk", [(4, 5), (5, 3)]),
    ("bi,bi->b", [(4, 6), (4, 6)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(3, 5)]),
    ("bij->bj", [(2, 3, 4)]),
])
def test_einsum(run_cli, tmp_path, equation, shapes):
    rng = np.random.default_rng(0)
    names = ["a", "b"][:len(shapes)]
    xs = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    want = np.einsum(equation, *xs.values())
    inputs = [(n, F, [f"{n}{i}" for i in range(len(s))]) for n, s in zip(names, shapes)]
    m = model([helper.make_node("Einsum", names, ["y"], equation=equation)], inputs, [("y", F, None)])
    for level in ("O0", "O2"):
        close(run(run_cli, tmp_path, m, level, **xs)[0], want)


def test_einsum_refuses_a_diagonal(run_cli, tmp_path):
    m = model([helper.make_node("Einsum", ["a"], ["y"], equation="ii->i")], [("a", F, [3, 3])], [("y", F, None)])
    onnx.save(m, tmp_path / "m.onnx")
    code, _, err = run_cli("dis", tmp_path / "m.onnx")
    assert code != 0 and "Einsum" in err and "diagonal" in err, err


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum(run_cli, tmp_path, exclusive, reverse, axis):
    x = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    m = model([helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
              [("x", F, ["n", "m"])], [("y", F, None)], [("axis", np.array(axis, np.int64))])
    y = np.flip(x, axis) if reverse else x
    want = np.cumsum(y, axis)
    if exclusive:
        want = want - y
    if reverse:
        want = np.flip(want, axis)
    close(run(run_cli, tmp_path, m, x=x)[0], want)


@pytest.mark.parametrize("largest", [1, 0])
def test_topk(run_cli, tmp_path, largest):
    x = np.random.default_rng(2).permutation(6 * 9).reshape(6, 9).astype(np.float32)  # distinct values
    m = model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=largest)],
              [("x", F, ["n", "m"])], [("v", F, None), ("i", TensorProto.INT64, None)], [("k", np.array([3], np.int64))])
    order = np.argsort(-x if largest else x, axis=-1, kind="stable")[:, :3]
    v, i = run(run_cli, tmp_path, m, x=x)
    np.testing.assert_array_equal(i, order)
    np.testing.assert_array_equal(v, np.take_along_axis(x, order, -1))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def lstm_ref(x, w, r, b, p, clip, input_forget, f, g, h):
    hidden = r.shape[-1]
    hs, cs = np.zeros((x.shape[1], hidden), np.float64), np.zeros((x.shape[1], hidden), np.float64)
    ys = []
    for t in range(x.shape[0]):
        gates = x[t] @ w[0].T + hs @ r[0].T + b[0, :4 * hidden] + b[0, 4 * hidden:]
        gi, go, gf, gc = np.split(gates, 4, axis=-1)
        pi, po, pf = np.split(p[0], 3)
        cl = (lambda v: np.clip(v, -clip, clip))
        i = f(cl(gi + pi * cs))
        fg = 1 - i if input_forget else f(cl(gf + pf * cs))
        cs = fg * cs + i * g(cl(gc))
        o = f(cl(go + po * cs))
        hs = o * h(cs)
        ys.append(hs)
    return np.stack(ys)[:, None]


def test_lstm_peepholes_clip_input_forget_and_activation_parameters(run_cli, tmp_path):
    rng = np.random.default_rng(3)
    inputs, hidden = 3, 4
    w = rng.standard_normal((1, 4 * hidden, inputs)).astype(np.float32)
    r = rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32)
    b = rng.standard_normal((1, 8 * hidden)).astype(np.float32)
    p = rng.standard_normal((1, 3 * hidden)).astype(np.float32)
    x = rng.standard_normal((7, 2, inputs)).astype(np.float32)
    node = helper.make_node("LSTM", ["x", "w", "r", "b", "", "", "", "p"], ["y"], hidden_size=hidden, clip=1.5,
                            input_forget=1, activations=["HardSigmoid", "ScaledTanh", "LeakyRelu"],
                            activation_alpha=[0.3, 0.9, 0.05], activation_beta=[0.4, 1.1])
    m = model([node], [("x", F, ["seq", "batch", inputs])], [("y", F, None)],
              [("w", w), ("r", r), ("b", b), ("p", p)])
    want = lstm_ref(x.astype(np.float64), w, r, b, p, 1.5, True,
                    lambda v: np.clip(0.3 * v + 0.4, 0, 1),        # HardSigmoid(alpha 0.3, beta 0.4)
                    lambda v: 0.9 * np.tanh(1.1 * v),                # ScaledTanh(alpha 0.9, beta 1.1)
                    lambda v: np.where(v >= 0, v, 0.05 * v))          # LeakyRelu(alpha 0.05)
    for level in ("O0", "O2"):
        close(run(run_cli, tmp_path, m, level, x=x)[0], want.astype(np.float32))


def test_lstm_peepholes_default_activations(run_cli, tmp_path):
    rng = np.random.default_rng(4)
    inputs, hidden = 3, 5
    w = rng.standard_normal((1, 4 * hidden, inputs)).astype(np.float32) * 0.5
    r = rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32) * 0.5
    b = np.zeros((1, 8 * hidden), np.float32)
    p = rng.standard_normal((1, 3 * hidden)).astype(np.float32)
    x = rng.standard_normal((6, 3, inputs)).astype(np.float32)
    node = helper.make_node("LSTM", ["x", "w", "r", "", "", "", "", "p"], ["y"], hidden_size=hidden)
    m = model([node], [("x", F, ["seq", "batch", inputs])], [("y", F, None)], [("w", w), ("r", r), ("p", p)])
    want = lstm_ref(x.astype(np.float64), w, r, b, p, np.inf, False, sigmoid, np.tanh, np.tanh)
    close(run(run_cli, tmp_path, m, x=x)[0], want.astype(np.float32))


def test_bidirectional_lstm_with_sequence_lens_over_several_chunks(run_cli, tmp_path):
    """Y's rows collect in step registers that move onto Y every 32 steps (onnx_recurrent.cc):
    70 steps are two full chunks and a partial one, forward and reverse (which fills a chunk
    backwards in time), with sequences ending inside and before the last chunk."""
    rng = np.random.default_rng(5)
    inputs, hidden, seq, batch = 3, 4, 70, 3
    w = rng.standard_normal((2, 4 * hidden, inputs)).astype(np.float32) * 0.5
    r = rng.standard_normal((2, 4 * hidden, hidden)).astype(np.float32) * 0.5
    b = rng.standard_normal((2, 8 * hidden)).astype(np.float32) * 0.5
    lens = np.array([70, 45, 20], np.int32)
    x = rng.standard_normal((seq, batch, inputs)).astype(np.float32)
    node = helper.make_node("LSTM", ["x", "w", "r", "b", "lens"], ["y", "yh"], hidden_size=hidden,
                            direction="bidirectional")
    m = model([node], [("x", F, ["seq", "batch", inputs]), ("lens", TensorProto.INT32, ["batch"])],
              [("y", F, None), ("yh", F, None)], [("w", w), ("r", r), ("b", b)])
    xd = x.astype(np.float64)
    want_y, want_h = np.zeros((seq, 2, batch, hidden)), np.zeros((2, batch, hidden))
    for d, steps in ((0, range(seq)), (1, reversed(range(seq)))):
        hs, cs = np.zeros((batch, hidden)), np.zeros((batch, hidden))
        for t in steps:
            gi, go, gf, gc = np.split(xd[t] @ w[d].T + hs @ r[d].T + b[d, :4 * hidden] + b[d, 4 * hidden:], 4, axis=-1)
            c_new = sigmoid(gf) * cs + sigmoid(gi) * np.tanh(gc)
            h_new = sigmoid(go) * np.tanh(c_new)
            live = (t < lens)[:, None]
            hs, cs = np.where(live, h_new, hs), np.where(live, c_new, cs)
            want_y[t, d] = np.where(live, h_new, 0)
        want_h[d] = hs
    got_y, got_h = run(run_cli, tmp_path, m, x=x, lens=lens)
    close(got_y, want_y.astype(np.float32))
    close(got_h, want_h.astype(np.float32))
    # Rows are copied per chunk, not per step: per direction two chunk moves and the last one.
    code, _, err = run_cli("run", tmp_path / "m.onnx", "--inputs", tmp_path / "in.npz", "--jit-level", "O0", "-q",
                           "--profile-json", tmp_path / "profile.json")
    assert code == 0, err
    rows = json.loads((tmp_path / "profile.json").read_text())["functions"][0]["rows"]
    assert sum(row["calls"] for row in rows if row.get("name") == "concat") == 2 * 3


def if_model(cond_input):
    """y = x * 2 + 1 if cond else reshape(x, (-1,)) summed to a scalar * x (both branches read x
    and x's shape from the outer graph)."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    then_graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c2"], value=two), helper.make_node("Mul", ["x", "c2"], ["t0"]),
         helper.make_node("Add", ["t0", "one"], ["t_out"])], "then", [], [helper.make_tensor_value_info("t_out", F, None)])
    else_graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
         helper.make_node("Mul", ["x", "total"], ["e0"]), helper.make_node("Reshape", ["e0", "s"], ["e_out"])],
        "else", [], [helper.make_tensor_value_info("e_out", F, None)])
    inputs = [("x", F, ["n", 3])]
    inits = [("one", np.array(1.0, np.float32))]
    if cond_input:
        inputs.append(("cond", TensorProto.BOOL, []))
    else:
        inits.append(("cond", np.array(False)))
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph),
             helper.make_node("Add", ["y", "one"], ["z"])]  # a use after the branches join
    return model(nodes, inputs, [("z", F, None)], inits)


@pytest.mark.parametrize("cond", [True, False])
def test_if_runtime_condition(run_cli, tmp_path, cond):
    x = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
    want = (x * 2 + 1 if cond else x * x.sum()) + 1
    for level in ("O0", "O2"):
        close(run(run_cli, tmp_path, if_model(True), level, x=x, cond=np.array(cond))[0], want)


def test_if_constant_condition_imports_one_branch(run_cli, tmp_path):
    x = np.random.default_rng(6).standard_normal((5, 3)).astype(np.float32)
    close(run(run_cli, tmp_path, if_model(False), x=x)[0], x * x.sum() + 1)
    code, dis, err = run_cli("dis", tmp_path / "m.onnx")
    assert code == 0, err
    assert "CallOp sum " in dis and "Branch" not in dis, dis  # only the else branch, no branch


def loop_model(with_cond, scan_shape=("n",), scan_type=F):
    """acc_{i+1} = acc_i + x * i for i < trip (and, with_cond, while sum(acc) < limit); scan
    output: each iteration's acc. The body reads x from the outer graph."""
    body_nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "fi"], ["step"]),
        helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
        helper.make_node("Identity", ["acc_out"], ["scan"]),
    ]
    if with_cond:
        body_nodes += [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
                       helper.make_node("Less", ["total", "limit"], ["cond_out"])]
    else:
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, ["n"])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", F, ["n"]),
         helper.make_tensor_value_info("scan", scan_type, list(scan_shape))])
    node = helper.make_node("Loop", ["trip", "cond", "acc0"], ["acc", "scans"], body=body)
    inits = [("limit", np.array(40.0, np.float32)), ("cond", np.array(True))]
    return model([node], [("x", F, ["n"]), ("acc0", F, ["n"]), ("trip", TensorProto.INT64, [])],
                 [("acc", F, None), ("scans", F, None)], inits)


@pytest.mark.parametrize("with_cond", [False, True])
def test_loop(run_cli, tmp_path, with_cond):
    x = np.arange(1, 5, dtype=np.float32)
    acc0 = np.zeros(4, np.float32)
    for trip in (3, 6):
        acc, rows = acc0.copy(), []
        for i in range(trip):
            acc = acc + x * i
            rows.append(acc)
            if with_cond and not acc.sum() < 40:
                break
        for level in ("O0", "O2"):
            got_acc, got_scan = run(run_cli, tmp_path, loop_model(with_cond), level, x=x, acc0=acc0,
                                    trip=np.array(trip, np.int64))
            close(got_acc, acc)
            close(got_scan, np.stack(rows))


def test_a_zero_trip_loop_gives_empty_scan_outputs_of_the_declared_shape_and_type(run_cli, tmp_path):
    x = np.arange(1, 5, dtype=np.float32)
    acc0 = np.random.default_rng(7).standard_normal(4).astype(np.float32)
    for level in ("O0", "O2"):
        acc, scans = run(run_cli, tmp_path, loop_model(False, scan_shape=(4,)), level, x=x, acc0=acc0,
                         trip=np.array(0, np.int64))
        close(acc, acc0)
        assert scans.shape == (0, 4) and scans.dtype == np.float32, (scans.shape, scans.dtype)
    # A body whose scan output has a dynamic dim: nothing to read its size from, so [0].
    acc, scans = run(run_cli, tmp_path, loop_model(False), x=x, acc0=acc0, trip=np.array(0, np.int64))
    assert scans.shape == (0,) and scans.dtype == np.float32


def test_topk_on_a_dynamic_axis_checks_k_when_it_runs(run_cli, tmp_path):
    m = model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, name="top")],
              [("x", F, ["n", "m"])], [("v", F, None), ("i", TensorProto.INT64, None)], [("k", np.array([3], np.int64))])
    onnx.save(m, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(8).standard_normal((4, 2)).astype(np.float32))
    for level in ("O0", "O2"):
        code, _, err = run_cli("run", tmp_path / "m.onnx", "--inputs", tmp_path / "in.npz", "--jit-level", level, "-q")
        assert code != 0 and "top" in err and "TopK k 3 exceeds the length of axis 1" in err, err


@pytest.mark.parametrize("case", ["topk_k_too_large", "loop_without_limit", "cumsum_axis_out_of_range"])
def test_composed_ops_refuse_bad_input_with_the_node_named(run_cli, tmp_path, case):
    if case == "topk_k_too_large":
        m = model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top")], [("x", F, ["n", 4])],
                  [("v", F, None), ("i", TensorProto.INT64, None)], [("k", np.array([5], np.int64))])
        words = ["top", "exceeds the axis length 4"]
    elif case == "loop_without_limit":
        body = helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"]),
                                  helper.make_node("Identity", ["v"], ["v_out"])], "body",
                                 [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                  helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                  helper.make_tensor_value_info("v", F, [2])],
                                 [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                                  helper.make_tensor_value_info("v_out", F, [2])])
        m = model([helper.make_node("Loop", ["", "", "x"], ["y"], body=body, name="spin")], [("x", F, [2])],
                  [("y", F, None)])
        words = ["spin", "never ends"]
    else:
        m = model([helper.make_node("CumSum", ["x", "axis"], ["y"], name="cs")], [("x", F, ["n", 3])],
                  [("y", F, None)], [("axis", np.array(2, np.int64))])
        words = ["cs", "axis"]
    onnx.save(m, tmp_path / "m.onnx")
    code, _, err = run_cli("dis", tmp_path / "m.onnx")
    assert code != 0 and "error" in err and all(w in err for w in words), err


def test_a_node_missing_a_required_input_is_an_error(run_cli, tmp_path):
    # Found by fuzz_onnx (fuzz/regressions/onnx/reshape_missing_input.onnx): a Reshape without its
    # shape input reached the handler, which read past the node's inputs.
    m = model([helper.make_node("Reshape", ["x"], ["y"], name="r")], [("x", F, [2, 3])], [("y", F, None)])
    onnx.save(m, tmp_path / "m.onnx")
    code, _, err = run_cli("dis", tmp_path / "m.onnx")
    assert code != 0 and "node 'r' (Reshape): 1 inputs given, but Reshape takes 2 to 2" in err, err
