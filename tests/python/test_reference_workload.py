# SPDX-License-Identifier: Apache-2.0
# The reference workload (docs/reference-workload.md), both variants, hand-written in .svasm and run
# through `shapevm run`, compared with an independent numpy (float64) implementation on fresh
# random inputs: relative L2 error <= 1e-5 for batch 32 and seq 10, 20, 30.
import numpy as np
import pytest

from conftest import ROOT

EXAMPLES = ROOT / "examples"


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def lstm_flat(x, h, c, w_ih, w_hh, b_ih, b_hh):
    batch, seq, _ = x.shape
    gx = (x.reshape(batch * seq, 128) @ w_ih.T + b_ih).reshape(batch, seq, 1024)
    gates = gx + (h @ w_hh.T + b_hh)[:, None, :]
    i, f, g, o = np.split(gates, 4, axis=2)
    c2 = sigmoid(f) * c[:, None, :] + sigmoid(i) * np.tanh(g)
    h2 = sigmoid(o) * np.tanh(c2)
    return h2, c2


def lstm_loop(x, h, c, w_ih, w_hh, b_ih, b_hh):
    for t in range(x.shape[1]):
        gates = x[:, t, :] @ w_ih.T + b_ih + h @ w_hh.T + b_hh
        i, f, g, o = np.split(gates, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
    return h, c


def rel_l2(actual, expected):
    return float(np.linalg.norm(actual.astype(np.float64) - expected) / max(np.linalg.norm(expected), 1e-30))


def make_inputs(rng, batch, seq):
    scale = 0.1
    return {
        "x": rng.standard_normal((batch, seq, 128)).astype(np.float32),
        "h": rng.standard_normal((batch, 256)).astype(np.float32),
        "c": rng.standard_normal((batch, 256)).astype(np.float32),
        "W_ih": (scale * rng.standard_normal((1024, 128))).astype(np.float32),
        "W_hh": (scale * rng.standard_normal((1024, 256))).astype(np.float32),
        "b_ih": rng.standard_normal(1024).astype(np.float32),
        "b_hh": rng.standard_normal(1024).astype(np.float32),
    }


@pytest.mark.parametrize("variant,oracle", [("lstm_cell", lstm_flat), ("lstm_loop", lstm_loop)])
@pytest.mark.parametrize("seq", [10, 20, 30])
def test_reference_workload_matches_numpy(run_cli, tmp_path, variant, oracle, seq):
    rng = np.random.default_rng()  # fresh inputs every run
    inputs = make_inputs(rng, 32, seq)
    weights = {k: inputs.pop(k) for k in ["W_ih", "W_hh", "b_ih", "b_hh"]}
    np.savez(tmp_path / "in.npz", **inputs)
    np.savez(tmp_path / "params.npz", **weights)
    code, out, err = run_cli("run", EXAMPLES / f"{variant}.svasm", "--inputs", tmp_path / "in.npz",
                             "--params", tmp_path / "params.npz", "--out", tmp_path / "out.npz")
    assert code == 0, err
    result = np.load(tmp_path / "out.npz")
    args = {k: v.astype(np.float64) for k, v in {**inputs, **weights}.items()}
    h_expected, c_expected = oracle(args["x"], args["h"], args["c"], args["W_ih"], args["W_hh"], args["b_ih"], args["b_hh"])
    assert result["out0"].shape == h_expected.shape and result["out0"].dtype == np.float32
    assert result["out1"].shape == c_expected.shape
    assert rel_l2(result["out0"], h_expected) <= 1e-5
    assert rel_l2(result["out1"], c_expected) <= 1e-5


def test_seq_schedule_cycles_and_reports_per_seq_latency(run_cli):
    code, out, err = run_cli("run", EXAMPLES / "lstm_cell.svasm", "--dim", "batch=4", "--dim", "seq=3,5,7",
                             "--iters", "6", "--stats", "--quiet")
    assert code == 0, err
    for seq in (3, 5, 7):
        assert f"seq={seq}" in out
    assert "op calls: 126 (21/run" in out  # 21 CallOps per run, all interpreted at O0
    assert "allocations:" in out


def test_mismatched_batch_between_inputs_is_a_clear_error(run_cli, tmp_path):
    rng = np.random.default_rng()
    np.save(tmp_path / "x.npy", rng.standard_normal((4, 3, 128)).astype(np.float32))
    np.save(tmp_path / "h.npy", rng.standard_normal((5, 256)).astype(np.float32))
    code, out, err = run_cli("run", EXAMPLES / "lstm_cell.svasm", "--input", f"x={tmp_path / 'x.npy'}",
                             "--input", f"h={tmp_path / 'h.npy'}")
    assert code != 0
    assert "ShapeMismatch" in err and "batch" in err and "[4,3,128]" in err and "[5,256]" in err
