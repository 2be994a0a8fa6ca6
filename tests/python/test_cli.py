# SPDX-License-Identifier: Apache-2.0
# End-to-end behaviour of the `shapevm` CLI: help for every subcommand,
# asm/dis/verify round trips of examples/*.svasm, `run` inputs and outputs (.npz/.npy incl.
# Fortran-order and big-endian files, --arg, --dim schedules, --seed, generated inputs), and
# must-fail cases that exit non-zero with a specific message and never crash.
import random
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from svasm_harness import Prog, assert_clean_failure, run_cli, token

EXAMPLES = sorted((ROOT / "examples").glob("*.svasm"))
CELL = ROOT / "examples" / "lstm_cell.svasm"
SMALL = ["--dim", "batch=2", "--dim", "seq=3"]  # keeps the reference cell cheap

# Generated inputs: shared dim ?0 with a range, a bool, a divisibility constraint, an open range,
# and scalar parameters of each kind.
GEN = """
.module "gen"
.func gen
  .param a : f32[?0:4..6,3]
  .param b : i32[?0,2]
  .param m : bool[5]
  .param d : f64[?1%8]
  .param e : f16[?2:20..]
  .param n : int
  .param s : float
  .param flag : bool
  .dim ?0 batch
  .outputs 8
  LoadTensor r0, a
  LoadTensor r1, b
  LoadTensor r2, m
  LoadTensor r3, d
  LoadTensor r4, e
  LoadArg r5, n
  LoadArg r6, s
  LoadArg r7, flag
  StoreTensor r0, o0
  StoreTensor r1, o1
  StoreTensor r2, o2
  StoreTensor r3, o3
  StoreTensor r4, o4
  StoreTensor r5, o5
  StoreTensor r6, o6
  StoreTensor r7, o7
  Return
.end
"""
GEN_ARGS = ["--arg", "n=3", "--arg", "s=2.5", "--arg", "flag=true"]

# Two functions and no `main`: `run` needs --fn.
TWO_FUNCS = """
.module "two"
.func first
  .param x : f32[2]
  .outputs 1
  LoadTensor r0, x
  StoreTensor r0, o0
  Return
.end
.func second
  .param x : f32[2]
  .outputs 1
  LoadTensor r0, x
  CallOp neg r1 = r0
  StoreTensor r1, o0
  Return
.end
"""

# Outputs stored out of slot order, of different kinds: the .npz keys follow the slots.
OUT_ORDER = """
.module "order"
.const k0 = int 7
.func order
  .param x : f32[2,3]
  .outputs 4
  LoadTensor r0, x
  LoadConst r3, k0
  CallOp cast r1 = r0 {dtype=int32}
  CallOp greater r2 = r0, r3
  StoreTensor r2, o2
  StoreTensor r3, o3
  StoreTensor r1, o1
  CallOp sum r4 = r0 {axes=[1], keepdims=true}
  StoreTensor r4, o0
  Return
.end
"""

# Exercises the text format broadly: constants of every kind, a loop with labels, a Call between
# functions, a none operand, attributes, shape tokens with ranges and constraints, .loc, .source.
KITCHEN = r"""
.module "kitchen \"sink\""
.source "kitchen.py"
.const k0 = none
.const k1 = int -5
.const k2 = float 2.5
.const k3 = bool true
.const msg = string "tab\there \"quoted\"\n"
.const k5 = ints [1,2,3]
.const k6 = tensor f32[2,2] {1, 2.5, -3, 4}
.const k7 = float nan
.const k8 = float -inf
.const k9 = int 0
.const k10 = int 1
.func helper
  .param y : f32[?0%8,?1:2..64]
  .outputs 1
  LoadTensor r0, y
  CallOp layer_norm r1 = r0, none, none {axis=-1, eps=0.001} : f32[?0%8,?1:2..64] x _ x _ -> f32[?0%8,?1:2..64]
  StoreTensor r1, o0
  Return
.end
.func main
  .param x : f32[?0,?1]
  .param n : int
  .dim ?0 rows
  .dim ?1
  .outputs 2
  .loc 3 5
  LoadTensor r0, x
  LoadArg r1, n
  LoadConst r2, k9
  LoadConst r3, k10
  LoadConst r9, k6
.loc 4 9
head:
  Lt r4, r2, r1
  BranchIf r4, @body, @done
body:
  LoopStart l0
  CallOp mul r0 = r0, r9 : f32[?0,?1] x f32[2,2] -> f32[?0,?1]
  LoopEnd l0
  Add r2, r2, r3
  Jump @head
done:
  Gt r5, r1, r2
  Not r6, r5
  Assert r6, msg
  Call helper r7 = r0
  ShapeOf r8, r7
  StoreTensor r7, o0
  StoreTensor r8, o1
  Return
.end
"""


@pytest.fixture
def cli(shapevm_bin):
    def call(*args, env=None, timeout=120):
        return run_cli(shapevm_bin, *args, timeout=timeout, env=env)
    call.binary = shapevm_bin
    return call


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def load_npz(path):
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


# ---------------------------------------------------------------------------------------------
# help, ops, tunables

@pytest.mark.parametrize("sub", ["asm", "dis", "verify", "run", "ops", "tunables"])
def test_help_for_every_subcommand(cli, sub):
    code, out, err = cli(sub, "--help")
    assert code == 0, err
    assert "Usage" in out and sub in out


def test_top_level_help_lists_subcommands(cli):
    code, out, err = cli("--help")
    assert code == 0, err
    for sub in ["asm", "dis", "verify", "run", "ops", "tunables"]:
        assert sub in out


def test_ops_lists_the_op_table(cli):
    code, out, _ = cli("ops")
    assert code == 0
    text = (ROOT / "src" / "ops" / "ops.def").read_text()
    names = [line.split('"')[1] for line in text.splitlines() if line.startswith("SVM_OP(")]
    listed = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert listed == names  # every row, in table order
    assert "split" in out and "sections:int=0" in out


def test_tunables_lists_keys_defaults_and_env(cli):
    code, out, _ = cli("tunables")
    assert code == 0
    assert "default_dim" in out and "SHAPEVM_DEFAULT_DIM" in out and "default 8" in out


# ---------------------------------------------------------------------------------------------
# asm / dis / verify

@pytest.mark.parametrize("example", EXAMPLES + ["kitchen"], ids=[p.stem for p in EXAMPLES] + ["kitchen"])
def test_asm_dis_round_trip_is_stable(cli, tmp_path, example):
    src = write(tmp_path, "kitchen.svasm", KITCHEN) if example == "kitchen" else example
    svm = tmp_path / "m.svm"
    code, _, err = cli("asm", src, "-o", svm)
    assert code == 0, err
    code, dis_svm, err = cli("dis", svm)
    assert code == 0, err
    code, dis_src, err = cli("dis", src)
    assert code == 0, err
    assert dis_svm == dis_src  # the binary keeps everything the text has
    canon = write(tmp_path, "canon.svasm", dis_svm)
    svm2 = tmp_path / "m2.svm"
    code, _, err = cli("asm", canon, "-o", svm2)
    assert code == 0, err
    assert svm2.read_bytes() == svm.read_bytes()  # asm(dis(m)) == m, byte for byte
    code, dis_again, _ = cli("dis", canon)
    assert dis_again == dis_svm  # the canonical text is a fixed point
    assert "0x0000" in dis_svm and ".registers" in dis_svm


def test_dis_pseudo_prints_pcs(cli, tmp_path):
    svm = tmp_path / "cell.svm"
    assert cli("asm", CELL, "-o", svm)[0] == 0
    code, out, err = cli("dis", "--pseudo", svm)
    assert code == 0, err
    assert out.startswith("def lstm_cell(")
    assert "0x0000  r0 = x" in out
    assert "matmul(" in out and "# " in out  # op calls carry their shape tokens as comments
    pcs = [line.split()[0] for line in out.splitlines()[1:] if line.strip().startswith("0x")]
    assert pcs == [f"0x{i:04X}" for i in range(len(pcs))] and len(pcs) > 20


def test_dis_pseudo_shows_branches(cli, tmp_path):
    code, out, err = cli("dis", "--pseudo", ROOT / "examples" / "lstm_loop.svasm")
    assert code == 0, err
    assert "goto 0x" in out


def test_dis_fn_selects_one_function(cli, tmp_path):
    src = write(tmp_path, "two.svasm", TWO_FUNCS)
    code, out, err = cli("dis", "--fn", "second", src)
    assert code == 0, err
    assert ".func second" in out and ".func first" not in out


@pytest.mark.parametrize("fmt", ["svasm", "svm"])
def test_verify_prints_ok(cli, tmp_path, fmt):
    path = CELL
    if fmt == "svm":
        path = tmp_path / "cell.svm"
        assert cli("asm", CELL, "-o", path)[0] == 0
    code, out, err = cli("verify", path)
    assert code == 0, err
    assert out.startswith("OK") and "1 functions" in out


# ---------------------------------------------------------------------------------------------
# run: outputs and inputs

def test_run_outputs_in_return_order_with_dtypes(cli, tmp_path):
    src = write(tmp_path, "order.svasm", OUT_ORDER)
    x = np.random.default_rng().uniform(-20, 20, (2, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, out, err = cli("run", src, "--input", f"x={tmp_path / 'x.npy'}", "--out", tmp_path / "o.npz")
    assert code == 0, err
    res = load_npz(tmp_path / "o.npz")
    assert sorted(res) == ["out0", "out1", "out2", "out3"]
    assert res["out0"].dtype == np.float32 and res["out0"].shape == (2, 1)
    np.testing.assert_allclose(res["out0"], x.astype(np.float64).sum(axis=1, keepdims=True), rtol=1e-5)
    assert res["out1"].dtype == np.int32
    np.testing.assert_array_equal(res["out1"], np.trunc(x).astype(np.int32))
    assert res["out2"].dtype == np.bool_
    np.testing.assert_array_equal(res["out2"], x > 7)
    assert res["out3"].dtype == np.int64 and res["out3"].shape == () and int(res["out3"]) == 7
    # the printed summary follows the same order
    assert [line.split(":")[0] for line in out.splitlines()] == ["out0", "out1", "out2", "out3"]


def test_run_reference_cell_outputs(cli, tmp_path):
    code, _, err = cli("run", CELL, *SMALL, "--out", tmp_path / "o.npz", "--quiet")
    assert code == 0, err
    res = load_npz(tmp_path / "o.npz")
    assert list(res) == ["out0", "out1"]
    for key in res:
        assert res[key].dtype == np.float32 and res[key].shape == (2, 3, 256)
    assert np.all(np.abs(res["out0"]) < 1)  # h' = o * tanh(c'): inside (-1, 1)


def echo_program(arr):
    p = Prog("echo")
    r = p.tensor("x", token(arr))
    p.store(r)
    if arr.dtype != np.bool_:
        p.store(p.op("neg", p.op("transpose", r)))
    return p.text()


LAYOUT_ARRAYS = {
    "f32": lambda rng: rng.standard_normal((3, 4)).astype(np.float32),
    "f64": lambda rng: rng.standard_normal((2, 3, 4)),
    "f16": lambda rng: rng.standard_normal((3, 5)).astype(np.float16),
    "i32": lambda rng: rng.integers(-1000, 1000, (4, 3)).astype(np.int32),
    "i64": lambda rng: rng.integers(-2 ** 40, 2 ** 40, (3, 4)),
    "bool": lambda rng: rng.random((3, 4)) < 0.5,
}


@pytest.mark.parametrize("layout", ["fortran", "big_endian", "fortran_big_endian"])
@pytest.mark.parametrize("dt", list(LAYOUT_ARRAYS))
def test_npy_fortran_and_big_endian_match_c_order(cli, tmp_path, dt, layout):
    rng = np.random.default_rng()
    x = LAYOUT_ARRAYS[dt](rng)
    src = write(tmp_path, "echo.svasm", echo_program(x))
    variant = x
    if "fortran" in layout:
        variant = np.asfortranarray(variant)
    if "big_endian" in layout:
        variant = variant.astype(variant.dtype.newbyteorder(">"))
    if "fortran" in layout:
        variant = np.asfortranarray(variant)
    np.save(tmp_path / "c.npy", x)
    np.save(tmp_path / "v.npy", variant)
    header = (tmp_path / "v.npy").read_bytes()[:128]
    if "fortran" in layout and x.ndim > 1:
        assert b"'fortran_order': True" in header
    if "big_endian" in layout and x.dtype.itemsize > 1:
        assert b"'descr': '>" in header
    results = []
    for name in ["c.npy", "v.npy"]:
        code, _, err = cli("run", src, "-q", "--input", f"x={tmp_path / name}", "--out", tmp_path / f"{name}.npz")
        assert code == 0, err
        results.append(load_npz(tmp_path / f"{name}.npz"))
    for key in results[0]:
        assert results[1][key].dtype == results[0][key].dtype
        np.testing.assert_array_equal(results[1][key], results[0][key])
    np.testing.assert_array_equal(results[0]["out0"], x)


def test_npy_version_2_header(cli, tmp_path):
    x = np.random.default_rng().standard_normal((3, 4)).astype(np.float32)
    with open(tmp_path / "x.npy", "wb") as f:
        np.lib.format.write_array(f, x, version=(2, 0))
    src = write(tmp_path, "echo.svasm", echo_program(x))
    code, _, err = cli("run", src, "-q", "--input", f"x={tmp_path / 'x.npy'}", "--out", tmp_path / "o.npz")
    assert code == 0, err
    np.testing.assert_array_equal(load_npz(tmp_path / "o.npz")["out0"], x)


def test_input_npy_and_params_npz_combine(cli, tmp_path):
    rng = np.random.default_rng()
    np.save(tmp_path / "x.npy", rng.standard_normal((2, 3, 128)).astype(np.float32))
    np.savez(tmp_path / "w.npz", W_ih=(0.1 * rng.standard_normal((1024, 128))).astype(np.float32))
    code, _, err = cli("run", CELL, "-q", "--input", f"x={tmp_path / 'x.npy'}", "--params", tmp_path / "w.npz",
                       "--out", tmp_path / "o.npz")
    assert code == 0, err
    # batch and seq come from the given x; the generated h, c follow it
    assert load_npz(tmp_path / "o.npz")["out0"].shape == (2, 3, 256)


def test_scalar_args(cli, tmp_path):
    src = write(tmp_path, "gen.svasm", GEN)
    code, _, err = cli("run", src, "-q", "--arg", "n=-3", "--arg", "s=2.5", "--arg", "flag=false",
                       "--out", tmp_path / "o.npz")
    assert code == 0, err
    res = load_npz(tmp_path / "o.npz")
    assert res["out5"].dtype == np.int64 and int(res["out5"]) == -3
    assert res["out6"].dtype == np.float64 and float(res["out6"]) == 2.5
    assert res["out7"].dtype == np.bool_ and not bool(res["out7"])


def test_generated_inputs_respect_tokens(cli, tmp_path):
    src = write(tmp_path, "gen.svasm", GEN)
    code, _, err = cli("run", src, "-q", *GEN_ARGS, "--out", tmp_path / "o.npz")
    assert code == 0, err
    res = load_npz(tmp_path / "o.npz")
    # default_dim 8, clamped into ?0:4..6 -> 6 and shared by a and b; ?1%8 -> 8; ?2:20.. -> 20
    assert res["out0"].dtype == np.float32 and res["out0"].shape == (6, 3)
    assert res["out1"].dtype == np.int32 and res["out1"].shape == (6, 2)
    assert res["out2"].dtype == np.bool_ and res["out2"].shape == (5,)
    assert res["out3"].dtype == np.float64 and res["out3"].shape == (8,)
    assert res["out4"].dtype == np.float16 and res["out4"].shape == (20,)
    for key in ["out0", "out3", "out4"]:
        x = res[key].astype(np.float64)
        assert np.all(np.isfinite(x)) and np.std(x) > 0.1 and len(np.unique(x)) > x.size // 2  # never zeros
    assert np.all((res["out1"] >= 0) & (res["out1"] < 8)) and np.any(res["out1"] != 0)


@pytest.mark.parametrize("how", ["set", "env"])
def test_default_dim_tunable_shapes_generated_inputs(cli, tmp_path, how):
    src = write(tmp_path, "gen.svasm", GEN)
    extra, env = (["--set", "default_dim=3"], None) if how == "set" else ([], {"SHAPEVM_DEFAULT_DIM": "3"})
    code, _, err = cli("run", src, "-q", *GEN_ARGS, *extra, "--out", tmp_path / "o.npz", env=env)
    assert code == 0, err
    res = load_npz(tmp_path / "o.npz")
    assert res["out0"].shape == (4, 3)  # 3 raised into 4..6
    assert res["out3"].shape == (8,)  # 3 rounded up to a multiple of 8
    assert res["out4"].shape == (20,)


def test_given_input_binds_shared_dim(cli, tmp_path):
    src = write(tmp_path, "gen.svasm", GEN)
    b = np.arange(10, dtype=np.int32).reshape(5, 2)
    np.save(tmp_path / "b.npy", b)
    code, _, err = cli("run", src, "-q", *GEN_ARGS, "--input", f"b={tmp_path / 'b.npy'}", "--out", tmp_path / "o.npz")
    assert code == 0, err
    res = load_npz(tmp_path / "o.npz")
    assert res["out0"].shape == (5, 3)
    np.testing.assert_array_equal(res["out1"], b)


def test_dim_param_axis_and_named_forms_cycle(cli, tmp_path):
    code, out, err = cli("run", CELL, "--dim", "batch=1,2,3", "--dim", "x.1=2,4", "--iters", "6", "--stats",
                         "--quiet", "--out", tmp_path / "o.npz")
    assert code == 0, err
    for label in ["batch=1 x.1=2", "batch=2 x.1=4", "batch=3 x.1=2", "batch=1 x.1=4", "batch=2 x.1=2",
                  "batch=3 x.1=4"]:
        assert label in out, out
    assert "6 iterations" in out and "(1 runs)" in out
    assert load_npz(tmp_path / "o.npz")["out0"].shape == (3, 4, 256)  # iteration 5: batch=3, x.1=4


def test_dim_by_id(cli, tmp_path):
    code, out, err = cli("run", CELL, "--dim", "?0=2", "--dim", "?1=5,6", "--iters", "2", "--stats", "--quiet",
                         "--out", tmp_path / "o.npz")
    assert code == 0, err
    assert "?1=5" in out and "?1=6" in out
    assert load_npz(tmp_path / "o.npz")["out1"].shape == (2, 6, 256)


def test_stats_and_profile_sections(cli):
    code, out, err = cli("run", CELL, *SMALL, "--iters", "3", "--stats", "--profile", "--quiet")
    assert code == 0, err
    assert "stats: function 'lstm_cell', 3 iterations" in out
    assert "latency ms: median" in out and "op calls: 63 (21/run" in out and "allocations:" in out
    assert "profile of 'lstm_cell': 3 calls" in out and "matmul" in out


def test_seed_reproducibility(cli, tmp_path):
    outs = {}
    for name, seed in [("a", ["--seed", "7"]), ("b", ["--seed", "7"]), ("c", ["--seed", "8"]), ("d", []),
                       ("e", ["--seed", "0"])]:
        code, _, err = cli("run", CELL, *SMALL, "-q", *seed, "--out", tmp_path / f"{name}.npz")
        assert code == 0, err
        outs[name] = load_npz(tmp_path / f"{name}.npz")
    for key in ["out0", "out1"]:
        np.testing.assert_array_equal(outs["a"][key], outs["b"][key])
        assert not np.array_equal(outs["a"][key], outs["c"][key])
        np.testing.assert_array_equal(outs["d"][key], outs["e"][key])  # the default seed is 0
    # (the .npz files themselves differ in their zip timestamps; the arrays are what must match)


# A weight (static shape) and per-iteration data (a dynamic dim), both echoed.
WEIGHT_AND_DATA = """
.module "wd"
.func wd
  .param w : f32[4,3]
  .param x : f32[?0,3]
  .dim ?0 batch
  .outputs 2
  LoadTensor r0, w
  LoadTensor r1, x
  StoreTensor r0, o0
  StoreTensor r1, o1
  Return
.end
"""


def test_weights_are_drawn_once_per_run_and_data_every_iteration(cli, tmp_path):
    src = write(tmp_path, "wd.svasm", WEIGHT_AND_DATA)
    outs = {}
    for name, extra in [("one", ["--iters", "1"]), ("three", ["--iters", "3"]), ("three_again", ["--iters", "3"]),
                        ("seed5", ["--iters", "3", "--seed", "5"])]:
        code, _, err = cli("run", src, "-q", "--dim", "batch=2", *extra, "--out", tmp_path / f"{name}.npz")
        assert code == 0, err
        outs[name] = load_npz(tmp_path / f"{name}.npz")
    # The last iteration's weight is the first iteration's: drawn once, not per iteration.
    np.testing.assert_array_equal(outs["one"]["out0"], outs["three"]["out0"])
    # Per-iteration data is fresh: iteration 2's x differs from iteration 0's (same shape).
    assert outs["three"]["out1"].shape == outs["one"]["out1"].shape == (2, 3)
    assert not np.array_equal(outs["one"]["out1"], outs["three"]["out1"])
    # Both follow from --seed.
    for key in ["out0", "out1"]:
        np.testing.assert_array_equal(outs["three"][key], outs["three_again"][key])
        assert not np.array_equal(outs["three"][key], outs["seed5"][key])


def test_fn_selects_function(cli, tmp_path):
    src = write(tmp_path, "two.svasm", TWO_FUNCS)
    np.save(tmp_path / "x.npy", np.array([1.5, -2.0], dtype=np.float32))
    code, _, err = cli("run", src, "--fn", "second", "-q", "--input", f"x={tmp_path / 'x.npy'}",
                       "--out", tmp_path / "o.npz")
    assert code == 0, err
    np.testing.assert_array_equal(load_npz(tmp_path / "o.npz")["out0"], [-1.5, 2.0])


def test_run_accepts_svm(cli, tmp_path):
    svm = tmp_path / "cell.svm"
    assert cli("asm", CELL, "-o", svm)[0] == 0
    results = []
    for path in [svm, CELL]:
        code, _, err = cli("run", path, *SMALL, "-q", "--seed", "3", "--out", tmp_path / "o.npz")
        assert code == 0, err
        results.append(load_npz(tmp_path / "o.npz"))
    np.testing.assert_array_equal(results[0]["out0"], results[1]["out0"])


# ---------------------------------------------------------------------------------------------
# must-fail cases: non-zero exit, no crash, a specific message

def fails(cli, *args, needles=(), env=None):
    code, out, err = cli(*args, env=env)
    assert_clean_failure(code, out, err, *needles)
    return err


def test_missing_module_file(cli, tmp_path):
    fails(cli, "run", tmp_path / "nope.svasm", needles=["shapevm: error:", "cannot open", "nope.svasm"])
    fails(cli, "verify", tmp_path / "nope.svm", needles=["cannot open", "nope.svm"])
    fails(cli, "dis", tmp_path / "nope.svm", needles=["cannot open"])
    fails(cli, "asm", tmp_path / "nope.svasm", "-o", tmp_path / "x.svm", needles=["cannot open"])


def test_unknown_extension(cli, tmp_path):
    path = write(tmp_path, "prog.txt", CELL.read_text())
    fails(cli, "run", path, needles=["prog.txt", "unknown module file type", ".svm", ".svasm"])


MALFORMED = [
    ("unknown_opcode", ".module \"m\"\n.func f\n  .outputs 1\n  Bogus r0\n.end\n", ":4:3:", "unknown opcode 'Bogus'"),
    ("unknown_op", ".module \"m\"\n.func f\n  .param x : f32[2]\n  .outputs 1\n  LoadTensor r0, x\n"
                   "  CallOp frob r1 = r0\n  StoreTensor r1, o0\n  Return\n.end\n", ":6:10:", "unknown op 'frob'"),
    ("bad_token", ".module \"m\"\n.func f\n  .param x : f32[2,\n.end\n", ":3:14:", "shape token"),
    ("unterminated_string", ".module \"m\n", ":1:", ""),
    ("bad_register", ".module \"m\"\n.func f\n  .outputs 1\n  LoadConst rx, k0\n.end\n", ":4:", "register"),
]


@pytest.mark.parametrize("name,text,where,what", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_svasm_shows_file_line_col(cli, tmp_path, name, text, where, what):
    path = write(tmp_path, "bad.svasm", text)
    for sub in (["run", path], ["verify", path], ["asm", path, "-o", tmp_path / "x.svm"]):
        fails(cli, *sub, needles=["ParseError", f"bad.svasm{where}", what])
    assert not (tmp_path / "x.svm").exists()


def test_verifier_rejects_bad_module_with_function_pc_rule(cli, tmp_path):
    text = ".module \"m\"\n.func f\n  .param x : f32[2]\n  .outputs 1\n  LoadTensor r0, x\n  StoreTensor r5, o0\n" \
           "  Return\n.end\n"
    path = write(tmp_path, "bad.svasm", text)
    fails(cli, "verify", path, needles=["VerifyError", "function 'f'", "PC 0x0001", "rule"])


def real_svm(cli, tmp_path):
    svm = tmp_path / "cell.svm"
    assert cli("asm", CELL, "-o", svm)[0] == 0
    return svm.read_bytes()


@pytest.mark.parametrize("where", ["payload_middle", "payload_end", "crc_field"])
def test_corrupted_svm_is_rejected(cli, tmp_path, where):
    data = bytearray(real_svm(cli, tmp_path))
    pos = {"payload_middle": len(data) // 2, "payload_end": len(data) - 1, "crc_field": 9}[where]
    data[pos] ^= 0x5A
    bad = tmp_path / "bad.svm"
    bad.write_bytes(bytes(data))
    for sub in ("verify", "run", "dis"):
        fails(cli, sub, bad, needles=["BadFormat", "bad.svm", "checksum"])


@pytest.mark.parametrize("where", ["magic", "version", "truncated", "empty", "payload_size"])
def test_damaged_svm_header(cli, tmp_path, where):
    data = bytearray(real_svm(cli, tmp_path))
    if where == "magic":
        data[0:3] = b"XYZ"
    elif where == "version":
        data[4:8] = struct.pack("<I", 99)
    elif where == "truncated":
        data = data[: len(data) - 100]
    elif where == "empty":
        data = data[:10]
    else:
        data[12:20] = struct.pack("<Q", 1 << 40)
    bad = tmp_path / "bad.svm"
    bad.write_bytes(bytes(data))
    fails(cli, "verify", bad, needles=["BadFormat", "bad.svm"])


def test_svm_byte_flips_with_fixed_crc_never_crash(cli, tmp_path):
    # Flip payload bytes and repair the CRC so the reader and verifier see the damage: each module
    # either loads, verifies and runs, or is rejected with an error; nothing crashes.
    data = real_svm(cli, tmp_path)
    rnd = random.Random()
    seed = rnd.randrange(1 << 30)
    rnd.seed(seed)
    bad = tmp_path / "flip.svm"
    for _ in range(25):
        mutated = bytearray(data)
        pos = rnd.randrange(20, len(mutated))
        mutated[pos] ^= rnd.choice([0x01, 0x02, 0x10, 0x80, 0xFF])
        mutated[8:12] = struct.pack("<I", zlib.crc32(bytes(mutated[20:])) & 0xFFFFFFFF)
        bad.write_bytes(bytes(mutated))
        code, out, err = cli("verify", bad)
        context = f"(seed {seed}, byte {pos})"
        if code == 0:
            # A flip can legally declare a gigantic dim (generated inputs of many GiB) or a loop
            # that never ends: the limits turn both into the clear errors under test, not a hang.
            code, out, err = cli("run", bad, *SMALL, "-q", "--set", "max_tensor_bytes=268435456",
                                 "--set", "max_steps=50000000")
            if code == 0:
                continue
        assert code > 0, f"{context} exit {code}: {err}"
        assert "shapevm: error:" in err, f"{context}: {err}"
        for marker in ("Segmentation", "Aborted", "Sanitizer", "runtime error:"):
            assert marker not in err, f"{context}: {err}"


def test_svm_error_messages_escape_raw_bytes(cli, tmp_path):
    data = bytearray(real_svm(cli, tmp_path))
    pos = data.index(b"batch")
    data[pos] = 0x8C
    data[8:12] = struct.pack("<I", zlib.crc32(bytes(data[20:])) & 0xFFFFFFFF)
    bad = tmp_path / "bad.svm"
    bad.write_bytes(bytes(data))
    proc = subprocess.run([cli.binary, "verify", bad], capture_output=True)
    assert proc.returncode == 1 and b"dim-name" in proc.stderr
    proc.stderr.decode("ascii")  # printable: the byte shows up escaped, e.g. \x8c


def test_unknown_fn_lists_functions(cli, tmp_path):
    fails(cli, "run", CELL, "--fn", "nope", needles=["UnknownName", "'nope'", "functions: lstm_cell"])
    src = write(tmp_path, "two.svasm", TWO_FUNCS)
    fails(cli, "run", src, "--fn", "third", needles=["functions: first, second"])


def test_several_functions_need_fn(cli, tmp_path):
    src = write(tmp_path, "two.svasm", TWO_FUNCS)
    fails(cli, "run", src, needles=["several functions", "first, second", "--fn"])


def test_dis_unknown_fn_lists_functions(cli, tmp_path):
    src = write(tmp_path, "two.svasm", TWO_FUNCS)
    fails(cli, "dis", "--fn", "nope", src, needles=["'nope'", "first, second"])


def test_unknown_input_name_lists_parameters(cli, tmp_path):
    np.save(tmp_path / "h.npy", np.ones((2, 256), np.float32))
    fails(cli, "run", CELL, "--input", f"nope={tmp_path / 'h.npy'}",
          needles=["input 'nope'", "parameters: x, h, c, W_ih, W_hh, b_ih, b_hh"])
    np.savez(tmp_path / "extra.npz", h=np.ones((2, 256), np.float32), zzz=np.ones(3, np.float32))
    fails(cli, "run", CELL, "--inputs", tmp_path / "extra.npz", needles=["input 'zzz'", "parameters: x, h"])
    fails(cli, "run", CELL, "--arg", "zzz=1", needles=["--arg 'zzz'", "parameters: x, h"])


def test_parameter_given_twice(cli, tmp_path):
    h = tmp_path / "h.npy"
    np.save(h, np.ones((2, 256), np.float32))
    np.savez(tmp_path / "in.npz", h=np.ones((2, 256), np.float32))
    fails(cli, "run", CELL, "--input", f"h={h}", "--input", f"h={h}", needles=["parameter 'h' is given twice"])
    fails(cli, "run", CELL, "--inputs", tmp_path / "in.npz", "--input", f"h={h}",
          needles=["parameter 'h' is given twice"])
    fails(cli, "run", CELL, "--inputs", tmp_path / "in.npz", "--params", tmp_path / "in.npz",
          needles=["parameter 'h' is given twice"])


def test_scalar_parameter_errors(cli, tmp_path):
    src = write(tmp_path, "gen.svasm", GEN)
    fails(cli, "run", src, "--arg", "n=3", "--arg", "s=1.0", needles=["parameter 'flag'", "--arg flag=VALUE"])
    fails(cli, "run", src, *GEN_ARGS[:4], "--arg", "flag=maybe", needles=["'maybe' is not an int, float or bool"])
    fails(cli, "run", src, "--arg", "n=3.5", "--arg", "s=1.0", "--arg", "flag=true",
          needles=["parameter 'n' must be int", "3.5"])
    fails(cli, "run", src, *GEN_ARGS, "--arg", "noequals", needles=["--arg 'noequals'", "NAME=VALUE"])
    np.save(tmp_path / "n.npy", np.ones(2, np.int64))
    fails(cli, "run", src, *GEN_ARGS, "--input", f"n={tmp_path / 'n.npy'}", needles=["parameter 'n'", "--arg n=VALUE"])


def test_scalar_parameter_given_twice_is_rejected(cli, tmp_path):
    src = write(tmp_path, "gen.svasm", GEN)
    fails(cli, "run", src, *GEN_ARGS, "--arg", "n=4", needles=["'n'", "twice"])


DIM_ERRORS = [
    (["--dim", "batch"], ["--dim 'batch'", "NAME=V[,V...]"]),
    (["--dim", "batch="], ["--dim 'batch='"]),
    (["--dim", "=3"], ["--dim '=3'"]),
    (["--dim", "batch=x"], ["'x' is not a non-negative integer"]),
    (["--dim", "batch=2,-1"], ["'-1' is not a non-negative integer"]),
    (["--dim", "batch=2,,3"], ["is not a non-negative integer"]),
    (["--dim", "nope=3"], ["--dim nope", "no such dynamic dim", "x.0 (batch)", "x.1 (seq)"]),
    (["--dim", "x.2=5"], ["axis 2 of 'x' is static (128)", "f32[?0,?1,128]"]),
    (["--dim", "W_ih.0=5"], ["axis 0 of 'W_ih' is static (1024)"]),
    (["--dim", "x.7=5"], ["'x'", "has no axis 7"]),
    (["--dim", "zz.0=5"], ["--dim zz.0", "no such dynamic dim"]),
]


@pytest.mark.parametrize("args,needles", DIM_ERRORS, ids=[a[1] for a, _ in DIM_ERRORS])
def test_bad_dim_flags(cli, args, needles):
    fails(cli, "run", CELL, "-q", *args, needles=needles)


def test_dim_outside_token_range(cli, tmp_path):
    src = write(tmp_path, "gen.svasm", GEN)
    fails(cli, "run", src, "-q", *GEN_ARGS, "--dim", "batch=5,9", "--iters", "2",
          needles=["iteration 1 (batch=9)", "parameter 'a'", "9", "f32[?0:4..6,3]"])
    fails(cli, "run", src, "-q", *GEN_ARGS, "--dim", "d.0=12", needles=["parameter 'd'", "12", "?1%8"])


def make_bad_npy(tmp_path, kind):
    path = tmp_path / f"{kind}.npy"
    good = tmp_path / "good.npy"
    np.save(good, np.ones((2, 256), np.float32))
    raw = good.read_bytes()
    if kind == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif kind == "truncated_header":
        path.write_bytes(raw[:30])
    elif kind == "bad_magic":
        path.write_bytes(b"XXXXXX" + raw[6:])
    elif kind == "object_dtype":
        np.save(path, np.array([1, "a"], dtype=object), allow_pickle=True)
    elif kind == "uint8":
        np.save(path, np.ones((2, 256), np.uint8))
    elif kind == "complex":
        np.save(path, np.ones((2, 256), np.complex64))
    elif kind == "empty_file":
        path.write_bytes(b"")
    elif kind == "huge_shape":
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 256), }"
        header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
        path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * 64)
    elif kind == "bad_header":
        path.write_bytes(raw.replace(b"False", b"Nope!"))
    return path


BAD_NPY = [
    ("truncated", ["BadFormat", "truncated.npy", "data size mismatch"]),
    ("truncated_header", ["BadFormat", "truncated_header.npy"]),
    ("bad_magic", ["BadFormat", "bad_magic.npy", "bad magic"]),
    ("object_dtype", ["object_dtype.npy", "unsupported dtype", "'|O'"]),
    ("uint8", ["unsupported dtype", "'|u1'"]),
    ("complex", ["unsupported dtype", "'<c8'"]),
    ("empty_file", ["BadFormat", "empty_file.npy"]),
    ("huge_shape", ["BadFormat", "huge_shape.npy", "data size mismatch"]),
    ("bad_header", ["BadFormat", "bad_header.npy", "header"]),
]


@pytest.mark.parametrize("kind,needles", BAD_NPY, ids=[b[0] for b in BAD_NPY])
def test_bad_npy(cli, tmp_path, kind, needles):
    path = make_bad_npy(tmp_path, kind)
    fails(cli, "run", CELL, "-q", "--input", f"h={path}", needles=needles)


def test_npz_that_is_not_a_zip(cli, tmp_path):
    path = tmp_path / "notzip.npz"
    path.write_bytes(b"this is not a zip archive at all")
    fails(cli, "run", CELL, "--inputs", path, needles=["BadFormat", "notzip.npz", "zip"])
    fails(cli, "run", CELL, "--params", path, needles=["notzip.npz"])


def test_npz_member_with_object_dtype(cli, tmp_path):
    np.savez(tmp_path / "obj.npz", h=np.array([1, "a"], dtype=object))
    fails(cli, "run", CELL, "--inputs", tmp_path / "obj.npz", needles=["obj.npz", "unsupported dtype"])


def test_missing_npy_file(cli, tmp_path):
    fails(cli, "run", CELL, "--input", f"h={tmp_path / 'gone.npy'}", needles=["gone.npy", "cannot open"])


def test_input_flag_with_empty_file_name(cli):
    fails(cli, "run", CELL, "--input", "h=", needles=["--input 'h='", "NAME=FILE.npy"])


def test_input_flag_without_name(cli):
    fails(cli, "run", CELL, "--input", "=h.npy", needles=["--input '=h.npy'", "NAME=FILE.npy"])


WRONG_INPUTS = [
    ("dtype", lambda: np.ones((2, 256), np.float64), ["parameter 'h'", "f32[?0,256]", "f64[2,256]", "dtype"]),
    ("int_dtype", lambda: np.ones((2, 256), np.int32), ["parameter 'h'", "f32[?0,256]", "i32[2,256]"]),
    ("rank", lambda: np.ones((2, 256, 1), np.float32), ["parameter 'h'", "f32[?0,256]", "[2,256,1]", "rank"]),
    ("rank0", lambda: np.ones((), np.float32), ["parameter 'h'", "f32[?0,256]", "rank"]),
    ("static_dim", lambda: np.ones((2, 255), np.float32), ["parameter 'h'", "f32[?0,256]", "dim 1 is 255"]),
]


@pytest.mark.parametrize("name,make,needles", WRONG_INPUTS, ids=[w[0] for w in WRONG_INPUTS])
def test_wrong_input_vs_token(cli, tmp_path, name, make, needles):
    np.save(tmp_path / "h.npy", make())
    fails(cli, "run", CELL, "--input", f"h={tmp_path / 'h.npy'}", needles=needles)


def test_static_dim_mismatch_names_actual_shape(cli, tmp_path):
    np.save(tmp_path / "h.npy", np.ones((2, 255), np.float32))
    fails(cli, "run", CELL, "--input", f"h={tmp_path / 'h.npy'}", needles=["parameter 'h'", "[2,255]"])


def test_inconsistent_dynamic_dim_between_inputs(cli, tmp_path):
    np.save(tmp_path / "h.npy", np.ones((3, 256), np.float32))
    np.save(tmp_path / "c.npy", np.ones((4, 256), np.float32))
    fails(cli, "run", CELL, "--input", f"h={tmp_path / 'h.npy'}", "--input", f"c={tmp_path / 'c.npy'}",
          needles=["ShapeMismatch", "dynamic dim ?0 (batch)", "parameter 'c' [4,256]"])


@pytest.mark.parametrize("value", ["0", "-1"])
def test_iters_must_be_positive(cli, value):
    fails(cli, "run", CELL, "--iters", value, needles=[f"--iters must be >= 1, got {value}"])


def test_unknown_tunable_in_set(cli):
    fails(cli, "run", CELL, *SMALL, "--set", "nope=3", needles=["unknown tunable 'nope'", "default_dim"])
    fails(cli, "run", CELL, *SMALL, "--set", "default_dim", needles=["--set 'default_dim'", "KEY=VALUE"])
    fails(cli, "run", CELL, *SMALL, "--set", "warmup=abc", needles=["tunable warmup", "'abc' is not an integer"])


@pytest.mark.parametrize("var,value", [("SHAPEVM_WARMUP", "abc"), ("SHAPEVM_DEFAULT_DIM", "1.5"),
                                       ("SHAPEVM_MAX_STEPS", "")])
def test_bad_env_value(cli, var, value):
    fails(cli, "run", CELL, *SMALL, env={var: value}, needles=[f"environment variable {var}"])


def test_max_steps_limit_is_an_error_not_a_hang(cli):
    # seq=3 takes 7 branches (4 BranchIf, 3 Jump)
    fails(cli, "run", ROOT / "examples" / "lstm_loop.svasm", *SMALL, "--set", "max_steps=2",
          needles=["LimitExceeded", "max_steps"])
    fails(cli, "run", ROOT / "examples" / "lstm_loop.svasm", *SMALL, env={"SHAPEVM_MAX_STEPS": "2"},
          needles=["LimitExceeded"])


def test_max_steps_counts_instructions(cli):
    fails(cli, "run", ROOT / "examples" / "lstm_loop.svasm", *SMALL, "--set", "max_steps=10",
          needles=["LimitExceeded"])


def test_unknown_flag(cli):
    fails(cli, "run", CELL, "--frobnicate", needles=["--frobnicate"])
    fails(cli, "run", CELL, "--iters", "abc", needles=["--iters", "abc"])
    fails(cli, "asm", CELL, needles=["--output is required"])
    fails(cli, "run", needles=["module is required"])


def test_unknown_subcommand_is_named(cli):
    fails(cli, "frobnicate", needles=["frobnicate"])


def test_unknown_subcommand_fails(cli):
    fails(cli, "frobnicate")
    fails(cli)


def test_out_to_missing_directory(cli, tmp_path):
    fails(cli, "run", CELL, *SMALL, "-q", "--out", tmp_path / "no" / "such" / "o.npz",
          needles=["IoError", "o.npz"])


def test_runtime_op_error_names_op_shapes_and_pc(cli, tmp_path):
    p = Prog("bad")
    a = p.tensor("a", "f32[2,3]")
    b = p.tensor("b", "f32[4]")
    p.store(p.op("add", a, b))
    src = write(tmp_path, "bad.svasm", p.text())
    fails(cli, "run", src, needles=["ShapeMismatch", "in function 'bad' at PC 0x0002", "add(f32[2,3], f32[4])",
                                    "[2,3] and [4]"])


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("args", [["verify", CELL], ["dis", CELL]])
def test_output_to_a_full_disk_is_an_error(cli, args):
    """stdout on a full disk (/dev/full): exit 1 with a message, never a crash or a silent 0."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([cli.binary, *map(str, args)], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    assert_clean_failure(proc.returncode, "", proc.stderr, "cannot write the output", "No space left on device")
