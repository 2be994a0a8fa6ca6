# SPDX-License-Identifier: Apache-2.0
# An independent numpy oracle for every op in src/ops/ops.def, run through the real CLI: each
# case writes a tiny .svasm program (params with shape tokens, one or a few CallOps, StoreTensor
# outputs), fresh random inputs (.npz), runs `shapevm run`, and compares with numpy (float64
# math, per-dtype tolerances). Covers broadcasting, rank 0/4, in-program non-contiguous views,
# float32/float64/float16/bfloat16/int32/int64/bool, attributes, and a few error messages.
import math

import numpy as np
import pytest

from svasm_harness import Prog, assert_clean_failure, round_bf16, run_prog, token

# ---------------------------------------------------------------------------------------------
# dtypes, values, tolerances

NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32, "i32": np.int32,
      "i64": np.int64, "bool": np.bool_}
SVM = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16", "i32": "int32", "i64": "int64",
       "bool": "bool"}
TOL = {"f32": (1e-5, 1e-6), "f64": (1e-12, 1e-12), "f16": (1e-3, 1e-3), "bf16": (1e-2, 1e-2)}
INTS = ["i32", "i64"]


def is_float(dt):
    return dt in TOL


def values(rng, shape, dt, kind="normal"):
    """Random values of `dt` (bf16: float32 values already rounded to bfloat16); never all zeros."""
    shape = tuple(shape)
    for _ in range(100):
        if dt == "bool":
            x = rng.random(shape) < 0.5
        elif is_float(dt):
            if kind == "normal":
                x = rng.standard_normal(shape)
            elif kind == "positive":
                x = rng.uniform(0.5, 2.0, shape)
            elif kind == "nonzero":
                x = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.0, shape)
            elif kind == "discrete":  # small halves: exact in every float dtype, so ties happen
                x = rng.integers(-3, 4, shape) / 2.0
            elif kind == "exponent":
                x = rng.uniform(-2.0, 2.0, shape)
            else:
                raise ValueError(kind)
            x = np.asarray(x, dtype=NP[dt])
            if dt == "bf16":
                x = round_bf16(x)
        else:
            if kind == "positive":
                x = rng.integers(1, 6, shape)
            elif kind == "nonzero":
                x = rng.choice([-4, -3, -2, -1, 1, 2, 3, 4], shape)
            elif kind == "discrete":
                x = rng.integers(-3, 4, shape)
            elif kind == "exponent":
                x = rng.integers(0, 4, shape)
            else:
                x = rng.integers(-9, 10, shape)
            x = np.asarray(x, dtype=NP[dt])
        x = np.asarray(x)
        if x.size == 0 or np.any(x != 0):
            return x
    raise AssertionError("could not draw a nonzero sample")


class Case:
    """One program under construction plus its .npz inputs."""

    def __init__(self, rng):
        self.rng = rng
        self.p = Prog()
        self.inputs = {}
        self.out_dts = []

    def feed(self, name, x, dt, view=None):
        """Adds parameter `name` holding logical value `x` as dtype `dt`; `view` lays it out as a
        non-contiguous view made inside the program: "T" (transpose), "step" (slice step 2 on the
        last axis) or "neg" (slice step -1 on the last axis)."""
        p = self.p
        if view == "T":
            param = np.ascontiguousarray(np.transpose(x))
        elif view == "step":
            n = x.shape[-1]
            param = values(self.rng, x.shape[:-1] + (2 * n,), dt)
            param[..., ::2] = x
        elif view == "neg":
            param = np.ascontiguousarray(x[..., ::-1])
        else:
            param = x
        self.inputs[name] = param
        r = p.tensor(name, token(param))
        if dt == "bf16":
            r = p.op("cast", r, dtype="bfloat16")
        if view == "T":
            r = p.op("transpose", r)
        elif view == "step":
            r = p.op("slice", r, p.ints([0]), p.ints([2 * x.shape[-1]]), p.ints([2]), axes=[-1])
        elif view == "neg":
            r = p.op("slice", r, p.ints([-1]), p.ints([-(10 ** 9)]), p.ints([-1]), axes=[-1])
        return r

    def out(self, r, dt):
        """Stores register `r` (of dtype `dt`); bfloat16 goes back to float32 first (.npz has no bf16)."""
        if dt == "bf16":
            r = self.p.op("cast", r, dtype="float32")
        self.p.store(r)
        self.out_dts.append(dt)

    def run(self, binary, tmp_path, extra=()):
        code, outs, err = run_prog(binary, tmp_path, self.p, self.inputs, extra)
        assert code == 0, f"shapevm failed:\n{err}\nprogram:\n{self.p.text()}"
        assert len(outs) == len(self.out_dts)
        return outs


def check(actual, expected, dt, scale_atol=True):
    """`expected` is a float64/int/bool numpy result; `dt` is the ShapeVM dtype of the output."""
    expected = np.asarray(expected)
    want_dtype = np.dtype(NP[dt])
    assert actual.dtype == want_dtype, f"dtype {actual.dtype}, expected {want_dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape}"
    if not is_float(dt):
        np.testing.assert_array_equal(actual, expected.astype(want_dtype))
        return
    rtol, atol = TOL[dt]
    finite = expected[np.isfinite(expected)]
    if scale_atol and finite.size:
        atol = atol * max(1.0, float(np.max(np.abs(finite))))
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol)


@pytest.fixture
def rng():
    return np.random.default_rng()  # fresh every run


def case_ids(cases, fmt):
    """Test ids for a list of tuples, some of which may be pytest.param(...)."""
    return [fmt.format(*(c.values if hasattr(c, "marks") else c)) for c in cases]


def f64(x):
    return np.asarray(x).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# elementwise binary

def trunc_div(a, b):
    # ShapeVM's documented integer division truncates toward zero (ONNX Div), unlike numpy's //.
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def binary_oracle(op, a, b, dt):
    if op == "div" and not is_float(dt):
        return trunc_div(a.astype(np.int64), b.astype(np.int64))
    if op == "pow" and not is_float(dt):
        return np.power(a.astype(np.int64), b.astype(np.int64))
    if dt == "bool" and op in ("add", "mul"):
        return (np.logical_or if op == "add" else np.logical_and)(a, b)
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
          "maximum": np.maximum, "minimum": np.minimum, "equal": np.equal, "not_equal": np.not_equal,
          "less": np.less, "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
          "logical_and": np.logical_and, "logical_or": np.logical_or}[op]
    if is_float(dt):
        return fn(f64(a), f64(b))
    return fn(a, b)


COMPARISONS = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
ARITH = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]
LOGICAL = ["logical_and", "logical_or"]
BOOL_OK = ["add", "mul", "maximum", "minimum", *COMPARISONS, *LOGICAL]


def binary_kinds(op):
    if op in COMPARISONS or op in ("maximum", "minimum"):
        return "discrete", "discrete"
    if op == "div":
        return "normal", "nonzero"
    if op == "pow":
        return "positive", "exponent"
    return "normal", "normal"


BINARY_SHAPES = {
    "same": ((2, 3), (2, 3), None, None),
    "bcast_3x1x5_4x1": ((3, 1, 5), (4, 1), None, None),
    "rank0_lhs": ((), (2, 3), None, None),
    "rank0_both": ((), (), None, None),
    "rank4_bcast": ((2, 3, 1, 4), (3, 5, 1), None, None),
    "view_T_and_step": ((3, 4), (3, 4), "T", "step"),
    "view_neg_bcast": ((2, 1, 5), (3, 5), None, "neg"),
    "empty": ((0, 3), (3,), None, None),
}


def run_binary(binary, tmp_path, rng, op, dt, shape_a, shape_b, view_a=None, view_b=None):
    ka, kb = binary_kinds(op)
    a = values(rng, shape_a, dt, ka)
    b = values(rng, shape_b, dt, kb)
    c = Case(rng)
    ra = c.feed("a", a, dt, view_a)
    rb = c.feed("b", b, dt, view_b)
    out_dt = "bool" if op in COMPARISONS or op in LOGICAL else dt
    c.out(c.p.op(op, ra, rb), out_dt)
    (actual,) = c.run(binary, tmp_path)
    check(actual, binary_oracle(op, a, b, dt), out_dt)


@pytest.mark.parametrize("shape_case", list(BINARY_SHAPES))
@pytest.mark.parametrize("op", ARITH + COMPARISONS)
def test_binary_shapes_f32(shapevm_bin, tmp_path, rng, op, shape_case):
    sa, sb, va, vb = BINARY_SHAPES[shape_case]
    run_binary(shapevm_bin, tmp_path, rng, op, "f32", sa, sb, va, vb)


# logical ops take bool operands only; sub/div/pow are not defined on bool (both: see the error tests)
BINARY_DTYPE_CASES = [(op, dt) for op in ARITH + COMPARISONS + LOGICAL
                      for dt in ["f64", "f16", "bf16", "i32", "i64", "bool"]
                      if (op in LOGICAL) == (dt == "bool") or (dt == "bool" and op in BOOL_OK)]


@pytest.mark.parametrize("op,dt", BINARY_DTYPE_CASES, ids=[f"{op}-{dt}" for op, dt in BINARY_DTYPE_CASES])
def test_binary_dtypes(shapevm_bin, tmp_path, rng, op, dt):
    # broadcasting plus a transposed view, so the generic strided kernel runs for every dtype
    run_binary(shapevm_bin, tmp_path, rng, op, dt, (3, 1, 5), (4, 1), "T", None)


@pytest.mark.parametrize("op", LOGICAL)
@pytest.mark.parametrize("shape_case", ["same", "bcast_3x1x5_4x1", "rank0_lhs", "rank4_bcast", "view_T_and_step"])
def test_logical_shapes(shapevm_bin, tmp_path, rng, op, shape_case):
    sa, sb, va, vb = BINARY_SHAPES[shape_case]
    run_binary(shapevm_bin, tmp_path, rng, op, "bool", sa, sb, va, vb)


def test_integer_div_truncates_toward_zero(shapevm_bin, tmp_path, rng):
    # ops.def: integer division truncates toward zero (ONNX Div); numpy's // would floor.
    a = np.array([7, -7, 7, -7, 0, 9, -1], dtype=np.int64)
    b = np.array([2, 2, -2, -2, 3, -4, 5], dtype=np.int64)
    c = Case(rng)
    c.out(c.p.op("div", c.feed("a", a, "i64"), c.feed("b", b, "i64")), "i64")
    (actual,) = c.run(shapevm_bin, tmp_path)
    np.testing.assert_array_equal(actual, [3, -3, -3, 3, 0, -2, 0])


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_max_min_propagate_nan(shapevm_bin, tmp_path, rng, op):
    a = np.array([np.nan, 1.0, 2.0, np.nan], dtype=np.float32)
    b = np.array([1.0, np.nan, 3.0, np.nan], dtype=np.float32)
    c = Case(rng)
    c.out(c.p.op(op, c.feed("a", a, "f32"), c.feed("b", b, "f32")), "f32")
    (actual,) = c.run(shapevm_bin, tmp_path)
    np.testing.assert_array_equal(actual, getattr(np, op)(a, b))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "less"])
@pytest.mark.parametrize("side", ["lhs", "rhs"])
def test_binary_with_scalar_constant(shapevm_bin, tmp_path, rng, op, side):
    # A float scalar operand acts as a 0-d tensor of the other operand's dtype (weak scalar).
    x = values(rng, (2, 3), "f32", "nonzero")
    s = float(rng.uniform(0.5, 2.0))
    c = Case(rng)
    rx = c.feed("x", x, "f32")
    rs = c.p.const(f"float {s!r}")
    out_dt = "bool" if op == "less" else "f32"
    c.out(c.p.op(op, *((rs, rx) if side == "lhs" else (rx, rs))), out_dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    s32 = np.float64(np.float32(s))
    expected = binary_oracle(op, *((np.full((), s32), x) if side == "lhs" else (x, np.full((), s32))), "f32")
    check(actual, expected, out_dt)


PROMOTIONS = [
    # (dtype a, dtype b or scalar constant, result dtype)
    ("i32", "i64", "i64"),
    ("f32", "f64", "f64"),
    ("bool", "i32", "i32"),
    ("i32", "f32", "f32"),
    # ShapeVM promotes by category (promoteTypes in kernel_util.cc, torch-like): int64 with float32
    # stays float32, where numpy would give float64.
    ("i64", "f32", "f32"),
    ("f16", "f32", "f32"),
    # float16 with bfloat16 meets in float32 (promoteTypes).
    ("f16", "bf16", "f32"),
    # weak scalars: an int constant keeps the tensor's float dtype; a float constant turns an int
    # tensor into float32 (numpy 2 would give float64 for the latter).
    ("f16", "int", "f16"),
    ("i32", "float", "f32"),
    ("i64", "int", "i64"),
    # 0-d tensors of another dtype next to a contiguous float32 tensor (the specialized kernels
    # must not take them for float32 scalars)
    ("f32", "f64[]", "f64"),
    ("f32", "i32[]", "f32"),
    ("i32[]", "f32", "f32"),
]


@pytest.mark.parametrize("da,db,dout", PROMOTIONS, ids=[f"{a}+{b}" for a, b, _ in PROMOTIONS])
def test_binary_type_promotion(shapevm_bin, tmp_path, rng, da, db, dout):
    a = values(rng, () if da.endswith("[]") else (2, 3), da.rstrip("[]"), "discrete")
    c = Case(rng)
    ra = c.feed("a", a, da.rstrip("[]"))
    if db == "int":
        b, rb = np.int64(3), c.p.const("int 3")
    elif db == "float":
        b, rb = np.float64(0.5), c.p.const("float 0.5")
    else:
        b = values(rng, () if db.endswith("[]") else (3,), db.rstrip("[]"), "discrete")
        rb = c.feed("b", b, db.rstrip("[]"))
    c.out(c.p.op("add", ra, rb), dout)
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, f64(a) + f64(b), dout)


# ---------------------------------------------------------------------------------------------
# elementwise unary

def vec(fn):
    return np.vectorize(fn, otypes=[np.float64])


UNARY = {
    "neg": (np.negative, "normal"),
    "abs": (np.abs, "normal"),
    "exp": (np.exp, "normal"),
    "log": (np.log, "positive"),
    "sqrt": (np.sqrt, "positive"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), "positive"),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), "normal"),
    "tanh": (np.tanh, "normal"),
    "relu": (lambda x: np.maximum(x, 0), "normal"),
    "gelu": (lambda x: 0.5 * x * vec(math.erfc)(-x / math.sqrt(2.0)), "normal"),
    "erf": (vec(math.erf), "normal"),
    "silu": (lambda x: x / (1.0 + np.exp(-x)), "normal"),
}

UNARY_SHAPES = {
    "2x3": ((2, 3), None),
    "rank0": ((), None),
    "rank4": ((2, 3, 2, 4), None),
    "view_T": ((3, 4), "T"),
    "view_step": ((4, 6), "step"),
    "view_neg": ((2, 5), "neg"),
}


def run_unary(binary, tmp_path, rng, op, dt, shape, view, out_dt=None):
    fn, kind = UNARY[op]
    x = values(rng, shape, dt, kind)
    c = Case(rng)
    out_dt = out_dt or dt
    c.out(c.p.op(op, c.feed("x", x, dt, view)), out_dt)
    (actual,) = c.run(binary, tmp_path)
    expected = fn(f64(x)) if is_float(out_dt) else fn(x)
    check(actual, expected, out_dt)


@pytest.mark.parametrize("shape_case", list(UNARY_SHAPES))
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_shapes_f32(shapevm_bin, tmp_path, rng, op, shape_case):
    shape, view = UNARY_SHAPES[shape_case]
    run_unary(shapevm_bin, tmp_path, rng, op, "f32", shape, view)


@pytest.mark.parametrize("dt", ["f64", "f16", "bf16"])
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_float_dtypes(shapevm_bin, tmp_path, rng, op, dt):
    run_unary(shapevm_bin, tmp_path, rng, op, dt, (3, 4), "T")


@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("op", ["neg", "abs", "relu"])
def test_unary_int_dtypes(shapevm_bin, tmp_path, rng, op, dt):
    run_unary(shapevm_bin, tmp_path, rng, op, dt, (3, 4), "T")


@pytest.mark.parametrize("dt", ["i32", "i64", "bool"])
@pytest.mark.parametrize("op", ["exp", "sqrt", "sigmoid"])
def test_unary_float_math_on_int_gives_float32(shapevm_bin, tmp_path, rng, op, dt):
    # elementwise_ops.cc: transcendental ops cast integer and bool inputs to float32 first.
    run_unary(shapevm_bin, tmp_path, rng, op, dt, (2, 3), None, out_dt="f32")


@pytest.mark.parametrize("shape,view", [((2, 3), None), ((), None), ((3, 4), "T"), ((2, 3, 1, 4), None)])
def test_logical_not(shapevm_bin, tmp_path, rng, shape, view):
    x = values(rng, shape, "bool")
    c = Case(rng)
    c.out(c.p.op("logical_not", c.feed("x", x, "bool", view)), "bool")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.logical_not(x), "bool")


def test_unary_special_values(shapevm_bin, tmp_path, rng):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1e-30], dtype=np.float32)
    c = Case(rng)
    rx = c.feed("x", x, "f32")
    for op in ["relu", "sigmoid", "tanh", "exp", "abs"]:
        c.out(c.p.op(op, rx), "f32")
    outs = c.run(shapevm_bin, tmp_path)
    for op, actual in zip(["relu", "sigmoid", "tanh", "exp", "abs"], outs):
        with np.errstate(all="ignore"):
            expected = UNARY[op][0](f64(x))
        np.testing.assert_allclose(actual, expected.astype(np.float32), rtol=1e-6, atol=1e-30, err_msg=op)


# ---------------------------------------------------------------------------------------------
# where, cast

@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "bf16", "i32", "i64", "bool"])
def test_where_broadcasts_all_three(shapevm_bin, tmp_path, rng, dt):
    cond = values(rng, (3, 1, 5), "bool")
    a = values(rng, (4, 1), dt)
    b = values(rng, (5,), dt, "nonzero" if dt != "bool" else "normal")
    c = Case(rng)
    c.out(c.p.op("where", c.feed("c", cond, "bool"), c.feed("a", a, dt), c.feed("b", b, dt, "neg")), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.where(cond, a, b), dt)


def test_where_nonbool_condition_and_scalar_branch(shapevm_bin, tmp_path, rng):
    # A non-bool condition counts nonzero as true (numpy); a float scalar branch takes a's dtype.
    cond = values(rng, (3, 4), "i32", "discrete")
    a = values(rng, (4, 3), "f32")
    c = Case(rng)
    c.out(c.p.op("where", c.feed("c", cond, "i32"), c.feed("a", a.T.copy(), "f32", "T"), c.p.const("float -2.5")),
          "f32")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.where(cond != 0, a.T, -2.5), "f32")


CASTS = [
    ("f32", "i32", "normal"), ("f32", "i64", "normal"), ("f64", "i32", "normal"), ("f16", "i64", "normal"),
    ("bf16", "i32", "normal"), ("f32", "f16", "normal"), ("f32", "bf16", "normal"), ("f64", "f32", "normal"),
    ("f16", "f64", "normal"), ("i64", "f32", "normal"), ("i32", "f64", "normal"), ("bool", "f32", "normal"),
    ("f32", "bool", "discrete"), ("i64", "bool", "discrete"), ("i32", "i64", "normal"), ("bool", "i64", "normal"),
    ("f32", "f32", "normal"), ("bf16", "f16", "normal"), ("f16", "bf16", "normal"),
]


@pytest.mark.parametrize("src,dst,kind", CASTS, ids=[f"{s}->{d}" for s, d, _ in CASTS])
def test_cast(shapevm_bin, tmp_path, rng, src, dst, kind):
    x = values(rng, (3, 4), src, kind)
    if is_float(src):
        x = (x * 3).astype(NP[src])  # values beyond +-1 so truncation matters
        if src == "bf16":
            x = round_bf16(x)
    c = Case(rng)
    c.out(c.p.op("cast", c.feed("x", x, src, "T" if src != "bf16" else None), dtype=SVM[dst]), dst)
    (actual,) = c.run(shapevm_bin, tmp_path)
    xv = x
    if dst == "bf16":
        expected = round_bf16(xv.astype(np.float32))
        np.testing.assert_array_equal(actual, expected)
    elif dst in INTS:
        np.testing.assert_array_equal(actual, np.trunc(f64(xv)).astype(NP[dst]))  # toward zero
        assert actual.dtype == NP[dst]
    elif is_float(dst):
        np.testing.assert_array_equal(actual, xv.astype(NP[dst]))  # conversion rounds exactly once
        assert actual.dtype == NP[dst]
    else:
        check(actual, xv != 0, dst)


def test_cast_documented_edge_cases(shapevm_bin, tmp_path, rng):
    # ops.def: float->int truncates toward zero and NaN -> 0 (numpy leaves NaN -> int undefined).
    # elementwise_ops.cc: out-of-range floats saturate, int64 -> int32 wraps, NaN -> bool is true.
    x = np.array([2.7, -2.7, 0.5, -0.5, np.nan, 3e9, -3e9, 1e30], dtype=np.float32)
    big = np.array([2 ** 31 + 5, -(2 ** 31) - 1, 7], dtype=np.int64)
    c = Case(rng)
    rx = c.feed("x", x, "f32")
    c.out(c.p.op("cast", rx, dtype="int32"), "i32")
    c.out(c.p.op("cast", rx, dtype="bool"), "bool")
    c.out(c.p.op("cast", c.feed("big", big, "i64"), dtype="int32"), "i32")
    to_i32, to_bool, wrapped = c.run(shapevm_bin, tmp_path)
    imax, imin = 2 ** 31 - 1, -(2 ** 31)
    np.testing.assert_array_equal(to_i32, [2, -2, 0, 0, 0, imax, imin, imax])
    np.testing.assert_array_equal(to_bool, [True, True, True, True, True, True, True, True])
    np.testing.assert_array_equal(wrapped, big.astype(np.int32))


# ---------------------------------------------------------------------------------------------
# shape and data movement

RESHAPES = [
    ((2, 3, 4), [4, -1], None),
    ((2, 3, 4), [24], None),
    ((1,), [], None),
    ((), [1, 1], None),
    ((2, 3, 2, 2), [6, 4], None),
    ((3, 4), [2, 6], "T"),  # non-contiguous input: reshape must copy
    ((4, 6), [-1], "step"),
]


@pytest.mark.parametrize("shape,target,view", RESHAPES, ids=[f"{s}->{t}-{v}" for s, t, v in RESHAPES])
@pytest.mark.parametrize("dt", ["f32", "i64", "bool", "bf16"])
def test_reshape(shapevm_bin, tmp_path, rng, shape, target, view, dt):
    x = values(rng, shape, dt)
    c = Case(rng)
    c.out(c.p.op("reshape", c.feed("x", x, dt, view), c.p.ints(target)), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.reshape(x, target), dt)


def test_reshape_shape_from_tuple_of_scalars(shapevm_bin, tmp_path, rng):
    x = values(rng, (2, 3, 4), "f32")
    src = """
.module "t"
.const k0 = int 4
.func t
  .param x : f32[?0,3,4]
  .outputs 1
  LoadTensor r0, x
  DimOf r1, r0, 0
  DimOf r2, r0, 1
  Mul r3, r1, r2
  LoadConst r4, k0
  TuplePack r5, [r3, r4]
  CallOp reshape r6 = r0, r5
  StoreTensor r6, o0
  Return
.end
"""
    code, outs, err = run_prog(shapevm_bin, tmp_path, src, {"x": x})
    assert code == 0, err
    check(outs[0], x.reshape(6, 4), "f32")


TRANSPOSES = [((2, 3, 4), [1, 0, 2]), ((2, 3, 4, 5), []), ((2, 3, 4), [-1, 0, 1]), ((), []), ((3, 4), [1, 0])]


@pytest.mark.parametrize("shape,perm", TRANSPOSES, ids=[f"{s}-{p}" for s, p in TRANSPOSES])
@pytest.mark.parametrize("dt", ["f32", "f16", "i32", "bool"])
def test_transpose(shapevm_bin, tmp_path, rng, shape, perm, dt):
    x = values(rng, shape, dt)
    c = Case(rng)
    rt = c.p.op("transpose", c.feed("x", x, dt), perm=perm)
    c.out(rt, dt)
    c.out(c.p.op("contiguous", rt), dt)
    viewed, copied = c.run(shapevm_bin, tmp_path)
    expected = np.transpose(x, [a % max(len(shape), 1) for a in perm] if perm else None)
    check(viewed, expected, dt)
    check(copied, expected, dt)


SQUEEZES = [((1, 3, 1, 4), []), ((1, 3, 1, 4), [0]), ((1, 3, 1, 4), [-2]), ((1, 3, 1, 4), [0, 2]), ((1,), []),
            ((), [])]


@pytest.mark.parametrize("shape,axes", SQUEEZES, ids=[f"{s}-{a}" for s, a in SQUEEZES])
def test_squeeze(shapevm_bin, tmp_path, rng, shape, axes):
    x = values(rng, shape, "f32")
    c = Case(rng)
    c.out(c.p.op("squeeze", c.feed("x", x, "f32"), axes=axes), "f32")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.squeeze(x, tuple(axes)) if axes else np.squeeze(x), "f32")


UNSQUEEZES = [((3, 4), [0]), ((3, 4), [-1]), ((3, 4), [0, 3]), ((3, 4), [1, -1]), ((), [0])]


@pytest.mark.parametrize("shape,axes", UNSQUEEZES, ids=[f"{s}-{a}" for s, a in UNSQUEEZES])
@pytest.mark.parametrize("view", [None, "T"])
def test_unsqueeze(shapevm_bin, tmp_path, rng, shape, axes, view):
    if view and len(shape) < 2:
        view = "neg" if len(shape) == 1 else None  # no transpose view below rank 2
    x = values(rng, shape, "i64")
    c = Case(rng)
    c.out(c.p.op("unsqueeze", c.feed("x", x, "i64", view), axes=axes), "i64")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.expand_dims(x, tuple(axes)), "i64")


SPLITS = [
    ((6, 4), dict(axis=0, sections=3)),
    ((2, 6), dict(axis=1, sizes=[1, 2, 3])),
    ((2, 3, 4), dict(axis=-1, sections=2)),
    ((5, 2), dict(sizes=[0, 4, 1])),
    ((4, 3), dict(axis=0, sections=1)),
]


@pytest.mark.parametrize("shape,attrs", SPLITS, ids=[f"{s}-{a}" for s, a in SPLITS])
@pytest.mark.parametrize("dt,view", [("f32", None), ("f32", "neg"), ("bf16", None), ("i32", None)])
def test_split(shapevm_bin, tmp_path, rng, shape, attrs, dt, view):
    x = values(rng, shape, dt)
    axis = attrs.get("axis", 0)
    if "sections" in attrs:
        n = attrs["sections"]
        expected = np.split(x, n, axis=axis)
    else:
        n = len(attrs["sizes"])
        expected = np.split(x, np.cumsum(attrs["sizes"])[:-1], axis=axis)
    c = Case(rng)
    rs = c.p.op("split", c.feed("x", x, dt, view), nout=n, **attrs)
    for r in ([rs] if n == 1 else rs):
        c.out(r, dt)
    outs = c.run(shapevm_bin, tmp_path)
    for actual, want in zip(outs, expected):
        check(actual, want, dt)


CONCATS = [
    ([(2, 3), (4, 3), (1, 3)], 0),
    ([(2, 3), (2, 2)], -1),
    ([(2, 3, 4), (2, 1, 4)], 1),
    ([(5,)], 0),
    ([(2, 3), (0, 3), (1, 3)], 0),
]


@pytest.mark.parametrize("shapes,axis", CONCATS, ids=[f"{s}-ax{a}" for s, a in CONCATS])
@pytest.mark.parametrize("dt", ["f32", "f64", "i32", "bool", "bf16"])
def test_concat(shapevm_bin, tmp_path, rng, shapes, axis, dt):
    xs = [values(rng, s, dt) for s in shapes]
    c = Case(rng)
    regs = [c.feed(f"x{i}", x, dt, "neg" if i == 0 else None) for i, x in enumerate(xs)]
    c.out(c.p.op("concat", *regs, axis=axis), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.concatenate(xs, axis=axis), dt)


STACKS = [((2, 3), 3, 0), ((2, 3), 2, -1), ((2, 3), 3, 1), ((), 3, 0), ((2, 2, 2), 2, 3)]


@pytest.mark.parametrize("shape,count,axis", STACKS, ids=[f"{s}x{n}-ax{a}" for s, n, a in STACKS])
@pytest.mark.parametrize("dt", ["f32", "i64", "f16"])
def test_stack(shapevm_bin, tmp_path, rng, shape, count, axis, dt):
    xs = [values(rng, shape, dt) for _ in range(count)]
    c = Case(rng)
    regs = [c.feed(f"x{i}", x, dt, "T" if (i == 1 and len(shape) >= 2) else None) for i, x in enumerate(xs)]
    c.out(c.p.op("stack", *regs, axis=axis), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.stack(xs, axis=axis), dt)


SLICES = [
    # (shape, starts, stops, steps or None, axes or None, numpy index)
    ((5, 6), [1, 0], [4, 6], [1, 2], None, np.s_[1:4, 0:6:2]),
    ((5, 6), [-1], [-1000], [-1], None, np.s_[::-1]),
    ((5, 6), [-1], [-1000], [-2], [1], np.s_[:, ::-2]),
    ((5, 6), [4, 5], [0, 1], [-1, -2], None, np.s_[4:0:-1, 5:1:-2]),
    ((5, 6), [0], [100], None, [-1], np.s_[:, 0:100]),
    ((5, 6), [-3], [-1], None, None, np.s_[-3:-1]),
    ((5, 6), [3], [1], [1], None, np.s_[3:1]),
    ((2, 3, 4, 5), [1, -4], [2, 5], [1, 3], [0, 3], np.s_[1:2, :, :, -4:5:3]),
    ((7,), [-100], [100], [3], None, np.s_[-100:100:3]),
    ((5, 6), [0], [5], [10], None, np.s_[0:5:10]),
    ((5, 6), [2], [-100], [-7], [1], np.s_[:, 2:-100:-7]),
]


@pytest.mark.parametrize("case", SLICES, ids=[f"{s[0]}-{s[1]}:{s[2]}:{s[3]}-ax{s[4]}" for s in SLICES])
@pytest.mark.parametrize("dt", ["f32", "i32", "bf16"])
def test_slice(shapevm_bin, tmp_path, rng, case, dt):
    shape, starts, stops, steps, axes, index = case
    x = values(rng, shape, dt)
    c = Case(rng)
    p = c.p
    args = [c.feed("x", x, dt), p.ints(starts), p.ints(stops)]
    if steps is not None:
        args.append(p.ints(steps))
    rs = p.op("slice", *args, **({"axes": axes} if axes else {}))
    c.out(rs, dt)
    c.out(p.op("mul", rs, p.const("int 2")), dt)  # an elementwise op over the strided view
    viewed, doubled = c.run(shapevm_bin, tmp_path)
    check(viewed, x[index], dt)
    check(doubled, f64(x[index]) * 2 if is_float(dt) else x[index] * 2, dt)


GATHERS = [
    # (shape, indices, index dtype or "int" for a scalar, axis)
    ((4, 5), [2, -1, 0], "i64", 0),
    ((4, 5), [[0, -2], [4, 1]], "i64", 1),
    ((3, 4, 5), [-5, 4], "i32", -1),
    ((4, 5), -1, "int", 0),
    ((3, 4, 5), 2, "int", 1),
    ((4,), [3, 3, -4, 0], "i32", 0),
]


@pytest.mark.parametrize("case", GATHERS, ids=[f"{g[0]}-{g[2]}-ax{g[3]}" for g in GATHERS])
@pytest.mark.parametrize("view", [None, "neg"])
def test_gather(shapevm_bin, tmp_path, rng, case, view):
    # ops.def: numpy take along axis, negative indices wrap, an int scalar index drops the axis.
    shape, indices, idt, axis = case
    x = values(rng, shape, "f32")
    c = Case(rng)
    rx = c.feed("x", x, "f32", view)
    if idt == "int":
        ri = c.p.const(f"int {indices}")
    else:
        ri = c.feed("idx", np.array(indices, dtype=NP[idt]), idt)
    c.out(c.p.op("gather", rx, ri, axis=axis), "f32")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.take(x, np.array(indices), axis=axis), "f32")


def test_gather_constant_index_tensor(shapevm_bin, tmp_path, rng):
    x = values(rng, (5, 3), "i64")
    c = Case(rng)
    rx = c.feed("x", x, "i64")
    c.out(c.p.op("gather", rx, c.p.const("tensor i64[3] {0, -1, 2}")), "i64")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, x[[0, -1, 2]], "i64")


BROADCASTS = [((3, 1), [2, 3, 4], None), ((), [2, 2], None), ((4,), [3, 4], None), ((4, 1), [2, 4, 3], "neg"),
              ((2, 3), [2, 3], None)]


@pytest.mark.parametrize("shape,target,view", BROADCASTS, ids=[f"{s}->{t}-{v}" for s, t, v in BROADCASTS])
@pytest.mark.parametrize("dt", ["f32", "bool"])
def test_broadcast_to(shapevm_bin, tmp_path, rng, shape, target, view, dt):
    x = values(rng, shape, dt)
    c = Case(rng)
    c.out(c.p.op("broadcast_to", c.feed("x", x, dt, view), c.p.ints(target)), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.broadcast_to(x, target), dt)


def np_pad(x, pads, value):
    """ShapeVM pads = (before0, after0, before1, after1, ...); negative entries crop."""
    index = []
    widths = []
    for d in range(x.ndim):
        before, after = pads[2 * d], pads[2 * d + 1]
        index.append(slice(max(0, -before), x.shape[d] - max(0, -after)))
        widths.append((max(0, before), max(0, after)))
    return np.pad(x[tuple(index)], widths, constant_values=value)


PADS = [
    ((2, 3), [1, 0, 2, 1], None),
    ((2, 3), [0, 2, 1, 1], -1.5),
    ((3, 4), [-1, 1, 0, -2], 2.0),
    ((2, 2, 3), [1, 1, 0, 0, 2, 0], 0.25),
    ((4,), [0, 0], 3.0),
]


@pytest.mark.parametrize("shape,pads,value", PADS, ids=[f"{s}-{p}-{v}" for s, p, v in PADS])
@pytest.mark.parametrize("dt,view", [("f32", None), ("f32", "T"), ("f16", None), ("i32", None)])
def test_pad(shapevm_bin, tmp_path, rng, shape, pads, value, dt, view):
    if view and len(shape) < 2:
        view = "neg" if len(shape) == 1 else None  # no transpose view below rank 2
    x = values(rng, shape, dt)
    value_used = value
    if dt in INTS and value is not None:
        value_used = float(int(value))  # whole values for int tensors
    attrs = {"pads": pads}
    if value_used is not None:
        attrs["value"] = float(value_used)
    c = Case(rng)
    c.out(c.p.op("pad", c.feed("x", x, dt, view), **attrs), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np_pad(x, pads, 0 if value_used is None else value_used), dt)


# ---------------------------------------------------------------------------------------------
# convolution family: each op once on a non-contiguous view against the numpy oracle of
# python/shapevm/ops.py (every attribute combination against torch: test_conv_ops.py)

CONV_FAMILY = [
    ("conv", [(2, 4, 7, 5), (6, 2, 3, 3), (6,)], {"strides": [2, 1], "pads": [1, 0, 2, 1], "groups": 2}),
    ("conv_transpose", [(2, 4, 5, 3), (4, 3, 3, 2), (6,)], {"strides": [2, 2], "groups": 2, "output_padding": [1, 0]}),
    ("max_pool", [(2, 3, 7, 6)], {"kernel": [3, 2], "strides": [2, 2], "pads": [1, 0], "ceil_mode": True}),
    ("avg_pool", [(2, 3, 7)], {"kernel": [3], "pads": [1], "count_include_pad": True}),
    ("global_avg_pool", [(2, 3, 4, 5)], {}),
    ("global_max_pool", [(2, 3, 4, 5, 2)], {}),
    ("batch_norm", [(2, 3, 4, 5), (3,), (3,), (3,), "var"], {"eps": 1e-3}),
    ("instance_norm", [(2, 3, 4, 5), (3,), (3,)], {}),
    ("group_norm", [(2, 4, 3, 5), (4,), (4,)], {"groups": 2}),
    ("resize", [(1, 2, 3, 5), "sizes"], {"mode": 1, "coordinate_mode": 2}),
    ("depth_to_space", [(1, 8, 3, 2)], {"blocksize": 2}),
    ("space_to_depth", [(1, 2, 4, 6)], {"blocksize": 2}),
]


@pytest.mark.parametrize("op,inputs,attrs", CONV_FAMILY, ids=[c[0] for c in CONV_FAMILY])
def test_conv_family_views(shapevm_bin, tmp_path, rng, op, inputs, attrs):
    import frontend_harness  # noqa: F401  (puts the oracle package on sys.path)
    from shapevm import ops as oracle

    c = Case(rng)
    args, regs = [], []
    for k, spec in enumerate(inputs):
        if spec == "sizes":
            args.append([5, 4])
            regs.append(c.p.ints([5, 4]))
            continue
        x = values(rng, (3,), "f32", "positive") if spec == "var" else values(rng, spec, "f32")
        args.append(x)
        regs.append(c.feed(f"x{k}", x, "f32", "T" if k == 0 else None))  # the data input as a strided view
    c.out(c.p.op(op, *regs, **attrs), "f32")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.asarray(getattr(oracle, op)(*args, **attrs), dtype=np.float64), "f32")


# ---------------------------------------------------------------------------------------------
# reductions and normalizations

# normalizeAxis (src/ops/kernel_util.cc) rejects axis 0 / -1 for a 0-d tensor through its first clause
# (`axis >= rank` is true for 0 >= 0) although its own third clause, planReduce ("axis 0 / -1 of a 0-d
# tensor: the single element") and argmaxKernel's rank-0 branch all mean to accept it; so
# argmax(x0d) with the default axis=0, and sum/mean/max/min(x0d, axes=[0]), fail with IndexOutOfRange.
REDUCE_FNS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
REDUCE_AXES = [
    ((2, 3, 4), [], False),
    ((2, 3, 4), [0], False),
    ((2, 3, 4), [-1], True),
    ((2, 3, 4), [0, 2], True),
    ((2, 3, 4), [1], False),
    ((2, 3, 4, 5), [1, 3], False),
    ((), [], False),
    pytest.param((), [0], True),
    ((5,), [0], True),
]


def reduce_out_dtype(op, dt):
    if op == "sum" and not is_float(dt):
        return "i64"  # ops.def: int inputs sum in int64
    if op == "mean" and not is_float(dt):
        return "f32"  # reduce_ops.cc: integer means come out as float32
    return dt


def run_reduce(binary, tmp_path, rng, op, dt, shape, axes, keepdims, view):
    x = values(rng, shape, dt)
    c = Case(rng)
    c.out(c.p.op(op, c.feed("x", x, dt, view), axes=axes, keepdims=keepdims), reduce_out_dtype(op, dt))
    (actual,) = c.run(binary, tmp_path)
    out_dt = reduce_out_dtype(op, dt)
    ax = tuple(a for a in axes) if axes else None
    if len(shape) == 0:
        ax = None
    src = f64(x) if is_float(out_dt) else x.astype(np.int64) if op == "sum" else x
    expected = REDUCE_FNS[op](src, axis=ax, keepdims=keepdims)
    check(actual, expected, out_dt)


@pytest.mark.parametrize("shape,axes,keepdims", REDUCE_AXES, ids=case_ids(REDUCE_AXES, "{}-{}-keep{}"))
@pytest.mark.parametrize("op", list(REDUCE_FNS))
def test_reduce_axes_f32(shapevm_bin, tmp_path, rng, op, shape, axes, keepdims):
    run_reduce(shapevm_bin, tmp_path, rng, op, "f32", shape, axes, keepdims, None)


@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "bf16", "i32", "i64", "bool"])
@pytest.mark.parametrize("op", list(REDUCE_FNS))
def test_reduce_dtypes_on_view(shapevm_bin, tmp_path, rng, op, dt):
    run_reduce(shapevm_bin, tmp_path, rng, op, dt, (3, 4, 5), [0, -1], False, "T")


@pytest.mark.parametrize("op", ["max", "min"])
def test_reduce_max_min_nan(shapevm_bin, tmp_path, rng, op):
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -6.0]], dtype=np.float32)
    c = Case(rng)
    c.out(c.p.op(op, c.feed("x", x, "f32"), axes=[1]), "f32")
    (actual,) = c.run(shapevm_bin, tmp_path)
    np.testing.assert_array_equal(actual, REDUCE_FNS[op](x, axis=1))


ARGMAX = [((3, 4), 0, False), ((3, 4), 1, True), ((2, 3, 4), -1, False), ((2, 3, 4), 1, True), ((5,), 0, False),
          pytest.param((), 0, False)]


@pytest.mark.parametrize("shape,axis,keepdims", ARGMAX, ids=case_ids(ARGMAX, "{}-ax{}-keep{}"))
@pytest.mark.parametrize("dt,view", [("f32", None), ("f32", "T"), ("i32", None), ("f16", None), ("bf16", None),
                                     ("bool", None)])
def test_argmax(shapevm_bin, tmp_path, rng, shape, axis, keepdims, dt, view):
    if view and len(shape) < 2:
        view = "neg" if len(shape) == 1 else None  # no transpose view below rank 2
    x = values(rng, shape, dt, "discrete")  # ties: ShapeVM, like numpy, returns the first maximum
    c = Case(rng)
    c.out(c.p.op("argmax", c.feed("x", x, dt, view), axis=axis, keepdims=keepdims), "i64")
    (actual,) = c.run(shapevm_bin, tmp_path)
    expected = np.argmax(x, axis=axis if x.ndim else None, keepdims=keepdims if x.ndim else False)
    check(actual, expected, "i64")


def test_argmax_ties_and_nan(shapevm_bin, tmp_path, rng):
    x = np.array([[1.0, 3.0, 3.0, 0.0], [np.nan, 2.0, np.nan, 9.0], [2.0, 9.0, np.nan, 1.0]], dtype=np.float32)
    c = Case(rng)
    c.out(c.p.op("argmax", c.feed("x", x, "f32"), axis=1), "i64")
    (actual,) = c.run(shapevm_bin, tmp_path)
    np.testing.assert_array_equal(actual, np.argmax(x, axis=1))  # [1, 0, 2]


def np_softmax(x, axis):
    z = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def np_log_softmax(x, axis):
    z = x - np.max(x, axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("axis", [-1, 0, 1, None])
@pytest.mark.parametrize("dt,view", [("f32", None), ("f32", "T"), ("f64", None), ("f16", None), ("bf16", "neg")])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(shapevm_bin, tmp_path, rng, op, axis, dt, view):
    x = values(rng, (2, 3, 4), dt)
    c = Case(rng)
    attrs = {} if axis is None else {"axis": axis}
    c.out(c.p.op(op, c.feed("x", x, dt, view), **attrs), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    fn = np_softmax if op == "softmax" else np_log_softmax
    check(actual, fn(f64(x), -1 if axis is None else axis), dt)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_large_values_are_stable(shapevm_bin, tmp_path, rng, op):
    x = (values(rng, (3, 5), "f32") * 1000).astype(np.float32)
    c = Case(rng)
    c.out(c.p.op(op, c.feed("x", x, "f32")), "f32")
    (actual,) = c.run(shapevm_bin, tmp_path)
    assert np.all(np.isfinite(actual))
    fn = np_softmax if op == "softmax" else np_log_softmax
    check(actual, fn(f64(x), -1), "f32")


def np_layer_norm(x, axis, eps, weight=None, bias=None):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


LAYER_NORMS = [
    ("weight_bias", -1, True, True, None),
    ("no_affine", -1, False, False, None),
    ("bias_only", -1, False, True, None),
    ("weight_only", -1, True, False, None),
    ("axis_-2", -2, True, True, None),
    ("axis_1_eps", 1, True, False, 1e-2),
]


@pytest.mark.parametrize("name,axis,has_w,has_b,eps", LAYER_NORMS, ids=[c[0] for c in LAYER_NORMS])
@pytest.mark.parametrize("dt,view", [("f32", None), ("f32", "T"), ("f64", None), ("f16", None), ("bf16", None)])
def test_layer_norm(shapevm_bin, tmp_path, rng, name, axis, has_w, has_b, eps, dt, view):
    x = (values(rng, (2, 3, 4), dt) * 2 + 1).astype(NP[dt])
    if dt == "bf16":
        x = round_bf16(x)
    norm_shape = (2, 3, 4)[axis % 3:]
    c = Case(rng)
    args = [c.feed("x", x, dt, view)]  # "T": x arrives transposed and becomes a strided view again
    w = values(rng, norm_shape, dt) if has_w else None
    b = values(rng, norm_shape, dt) if has_b else None
    args.append(c.feed("w", w, dt) if has_w else "none")
    if has_b:
        args.append(c.feed("b", b, dt))
    attrs = {"axis": axis}
    if eps is not None:
        attrs["eps"] = eps
    c.out(c.p.op("layer_norm", *args, **attrs), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    expected = np_layer_norm(f64(x), axis, 1e-5 if eps is None else eps, None if w is None else f64(w),
                             None if b is None else f64(b))
    check(actual, expected, dt)


# ---------------------------------------------------------------------------------------------
# matmul, add_n, identity, contiguous

MATMULS = [
    ((3, 4), (4, 5), None),
    ((2, 1, 3, 4), (5, 4, 6), None),
    ((4,), (4, 5), None),
    ((3, 4), (4,), None),
    ((4,), (4,), None),
    ((2, 3, 4), (4,), None),
    ((3, 4), (4, 5), "T"),  # b arrives transposed, so the kernel reads a strided operand
    ((1, 3), (3, 1), None),
    ((2, 0), (0, 3), None),  # empty contraction: zeros
]


@pytest.mark.parametrize("sa,sb,view", MATMULS, ids=[f"{a}x{b}-{v}" for a, b, v in MATMULS])
@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "bf16", "i32", "i64"])
def test_matmul(shapevm_bin, tmp_path, rng, sa, sb, view, dt):
    a = values(rng, sa, dt)
    b = values(rng, sb, dt)
    c = Case(rng)
    c.out(c.p.op("matmul", c.feed("a", a, dt), c.feed("b", b, dt, view)), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.matmul(f64(a), f64(b)) if is_float(dt) else np.matmul(a, b), dt)


ADD_NS = [[(2, 3)], [(2, 3), (3,), ()], [(3, 1, 5), (4, 1)], [(2, 3), (2, 3), (2, 3), (2, 3)]]


@pytest.mark.parametrize("shapes", ADD_NS, ids=[str(s) for s in ADD_NS])
@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "bf16", "i32", "i64"])
def test_add_n(shapevm_bin, tmp_path, rng, shapes, dt):
    xs = [values(rng, s, dt) for s in shapes]
    c = Case(rng)
    regs = [c.feed(f"x{i}", x, dt, "neg" if (i == 1 and len(x.shape) >= 1) else None) for i, x in enumerate(xs)]
    c.out(c.p.op("add_n", *regs), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    # elementwise_ops.cc: add_n folds left with add, so 16-bit floats round after every step
    rounding = {"f16": lambda v: v.astype(np.float16), "bf16": round_bf16}.get(dt, lambda v: v)
    total = xs[0]
    for x in xs[1:]:
        total = rounding(np.add(total, x, dtype=np.float32) if dt in ("f16", "bf16") else np.add(total, x))
    check(actual, f64(total) if is_float(dt) else total, dt)


def test_add_n_with_scalar(shapevm_bin, tmp_path, rng):
    x = values(rng, (2, 3), "f32")
    c = Case(rng)
    c.out(c.p.op("add_n", c.feed("x", x, "f32"), c.p.const("float 1.5"), c.feed("y", x, "f32", "neg")), "f32")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, f64(x) + 1.5 + f64(x), "f32")


@pytest.mark.parametrize("op", ["identity", "contiguous"])
@pytest.mark.parametrize("dt,shape,view", [("f32", (2, 3), None), ("f32", (3, 4), "T"), ("i32", (4, 6), "step"),
                                           ("bool", (), None), ("bf16", (2, 5), "neg"), ("f16", (2, 3, 1, 4), None)])
def test_identity_and_contiguous(shapevm_bin, tmp_path, rng, op, dt, shape, view):
    x = values(rng, shape, dt)
    c = Case(rng)
    c.out(c.p.op(op, c.feed("x", x, dt, view)), dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, x, dt)


# ---------------------------------------------------------------------------------------------
# creation

@pytest.mark.parametrize("op", ["zeros", "ones"])
@pytest.mark.parametrize("dt", [None, "f64", "f16", "bf16", "i32", "i64", "bool"])
@pytest.mark.parametrize("shape", [(2, 3), (), (1, 2, 1, 3)])
def test_zeros_ones(shapevm_bin, tmp_path, rng, op, dt, shape):
    c = Case(rng)
    attrs = {} if dt is None else {"dtype": SVM[dt]}
    c.out(c.p.op(op, c.p.ints(shape), **attrs), dt or "f32")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, (np.zeros if op == "zeros" else np.ones)(shape), dt or "f32")


def test_creation_shape_forms(shapevm_bin, tmp_path, rng):
    # shape:ints accepts an int, a tuple of ints or a 1-D int tensor
    c = Case(rng)
    c.out(c.p.op("ones", c.p.const("int 4")), "f32")
    c.out(c.p.op("zeros", c.feed("s", np.array([2, 3], dtype=np.int64), "i64"), dtype="int32"), "i32")
    c.out(c.p.op("full", c.p.const("tensor i32[2] {3, 1}"), c.p.const("float 0.5")), "f32")
    a, b, d = c.run(shapevm_bin, tmp_path)
    check(a, np.ones(4), "f32")
    check(b, np.zeros((2, 3)), "i32")
    check(d, np.full((3, 1), 0.5), "f32")


FULLS = [("float 2.5", None, 2.5), ("int 7", "i32", 7), ("bool true", "bool", True), ("float -1.5", "f16", -1.5),
         ("int -3", "i64", -3), ("float 3.75", "bf16", 3.75), ("float 0.1", "f64", 0.1), ("int 2", None, 2.0)]


@pytest.mark.parametrize("value,dt,expected", FULLS, ids=[f"{v}-{d}" for v, d, _ in FULLS])
def test_full(shapevm_bin, tmp_path, rng, value, dt, expected):
    c = Case(rng)
    attrs = {} if dt is None else {"dtype": SVM[dt]}
    c.out(c.p.op("full", c.p.ints([3, 2]), c.p.const(value), **attrs), dt or "f32")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.full((3, 2), expected), dt or "f32")


ARANGES = [
    (["int 5"], None, np.arange(5)),
    (["int 2", "int 10", "int 3"], None, np.arange(2, 10, 3)),
    (["int 5", "int -3", "int -2"], None, np.arange(5, -3, -2)),
    (["int 3", "int 1"], None, np.arange(3, 1)),
    (["float 0.5", "float 2.0", "float 0.25"], "f32", np.arange(0.5, 2.0, 0.25)),
    (["int 0", "int 1", "float 0.1"], "f64", np.arange(0, 1, 0.1)),
    (["int 4"], "i32", np.arange(4)),
    (["int -2", "int 2"], "f16", np.arange(-2, 2)),
]


@pytest.mark.parametrize("args,dt,expected", ARANGES, ids=[f"{'_'.join(a)}-{d}" for a, d, _ in ARANGES])
def test_arange(shapevm_bin, tmp_path, rng, args, dt, expected):
    c = Case(rng)
    attrs = {} if dt is None else {"dtype": SVM[dt]}
    c.out(c.p.op("arange", *[c.p.const(a) for a in args], **attrs), dt or "i64")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, expected, dt or "i64")


def test_arange_stop_none_step(shapevm_bin, tmp_path, rng):
    # arange(stop, None, step): the None register is an omitted optional input
    c = Case(rng)
    c.out(c.p.op("arange", c.p.const("int 7"), "none", c.p.const("int 2")), "i64")
    (actual,) = c.run(shapevm_bin, tmp_path)
    check(actual, np.arange(0, 7, 2), "i64")


def randn_prog(seeds, shape, dtype=None):
    c = Case(None)
    for s in seeds:
        attrs = {"seed": s}
        if dtype:
            attrs["dtype"] = SVM[dtype]
        c.out(c.p.op("randn", c.p.ints(shape), **attrs), dtype or "f32")
    return c


def test_randn_same_seed_same_values(shapevm_bin, tmp_path):
    c = randn_prog([7, 7, 8], (3, 4))
    a, b, other = c.run(shapevm_bin, tmp_path)
    assert a.dtype == np.float32 and a.shape == (3, 4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, other)
    again = randn_prog([7], (3, 4)).run(shapevm_bin, tmp_path)[0]  # a second process agrees
    np.testing.assert_array_equal(a, again)


def test_randn_default_seed_is_deterministic(shapevm_bin, tmp_path):
    c = Case(None)
    c.out(c.p.op("randn", c.p.ints([5])), "f32")
    c.out(c.p.op("randn", c.p.ints([5]), seed=0), "f32")
    a, b = c.run(shapevm_bin, tmp_path)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "bf16"])
def test_randn_statistics(shapevm_bin, tmp_path, dt):
    n = 200_000
    (x,) = randn_prog([12345], (n,), dt if dt != "f32" else None).run(shapevm_bin, tmp_path)
    x = f64(x)
    assert np.all(np.isfinite(x))
    assert abs(x.mean()) < 0.02, x.mean()
    assert abs(x.std() - 1.0) < 0.02, x.std()
    assert abs(np.mean(np.abs(x) < 1.0) - 0.6827) < 0.01  # the shape of a normal, not just its moments
    assert len(np.unique(x)) > (n // 2 if dt in ("f32", "f64") else 100)


def test_randn_rank_and_distinct_seeds(shapevm_bin, tmp_path):
    outs = randn_prog([1, 2, 3], (2, 3, 4, 5)).run(shapevm_bin, tmp_path)
    for x in outs:
        assert x.shape == (2, 3, 4, 5)
    assert not np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[1], outs[2])


# ---------------------------------------------------------------------------------------------
# error behaviour through the CLI: non-zero exit, no crash, the op and its input shapes named

ERRORS = [
    ("add_shape_mismatch", "add", [("f32", (2, 3)), ("f32", (4,))], {}, ["add(f32[2,3], f32[4])", "ShapeMismatch"]),
    ("mul_broadcast", "mul", [("f32", (3, 1, 5)), ("f32", (4, 2))], {}, ["mul(f32[3,1,5], f32[4,2])"]),
    ("matmul_inner", "matmul", [("f32", (2, 3)), ("f32", (4, 5))], {}, ["matmul(f32[2,3], f32[4,5])"]),
    ("concat_shapes", "concat", [("f32", (2, 3)), ("f32", (2, 4))], {"axis": 0}, ["concat(f32[2,3], f32[2,4])"]),
    ("stack_shapes", "stack", [("i64", (2, 3)), ("i64", (3, 2))], {}, ["stack(i64[2,3], i64[3,2])"]),
    ("sub_bool", "sub", [("bool", (2,)), ("bool", (2,))], {}, ["sub(bool[2], bool[2])", "bool"]),
    ("logical_and_float", "logical_and", [("f32", (2,)), ("f32", (2,))], {}, ["logical_and(f32[2], f32[2])"]),
    ("layer_norm_int", "layer_norm", [("i32", (2, 3))], {}, ["layer_norm(i32[2,3]", "floating"]),
    ("softmax_axis", "softmax", [("f32", (2, 3))], {"axis": 2}, ["softmax(f32[2,3])", "axis 2"]),
    ("split_uneven", "split", [("f32", (5, 2))], {"sections": 2}, ["split(f32[5,2])", "5"]),
    ("transpose_perm", "transpose", [("f32", (2, 3))], {"perm": [0, 0]}, ["transpose(f32[2,3])"]),
    ("squeeze_non1", "squeeze", [("f32", (2, 3))], {"axes": [0]}, ["squeeze(f32[2,3])"]),
    ("pad_length", "pad", [("f32", (2, 3))], {"pads": [1, 1]}, ["pad(f32[2,3])", "pads"]),
    ("where_shapes", "where", [("bool", (2, 3)), ("f32", (4,)), ("f32", (2, 3))], {},
     ["where(bool[2,3], f32[4], f32[2,3])"]),
]


@pytest.mark.parametrize("name,op,ins,attrs,needles", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_name_op_and_shapes(shapevm_bin, tmp_path, rng, name, op, ins, attrs, needles):
    c = Case(rng)
    regs = [c.feed(f"x{i}", values(rng, s, dt), dt) for i, (dt, s) in enumerate(ins)]
    result = c.p.op(op, *regs, nout=2 if op == "split" else 1, **attrs)
    c.out(result[0] if op == "split" else result, "f32")
    code, _, err = run_prog(shapevm_bin, tmp_path, c.p, c.inputs)
    assert_clean_failure(code, "", err, "shapevm: error:", *needles)
    assert "PC 0x" in err  # where: the PC of the failing CallOp


ERRORS_WITH_ARGS = [
    ("int_div_by_zero", lambda c: c.p.op("div", c.feed("a", np.array([4, 5], np.int64), "i64"),
                                         c.feed("b", np.array([1, 0], np.int64), "i64")), ["div(", "division by zero"]),
    ("gather_out_of_range", lambda c: c.p.op("gather", c.feed("x", np.ones((3, 2), np.float32), "f32"),
                                             c.feed("i", np.array([0, 3], np.int64), "i64")),
     ["gather(f32[3,2], i64[2])", "index 3 is out of range"]),
    ("gather_negative_out_of_range", lambda c: c.p.op("gather", c.feed("x", np.ones((3, 2), np.float32), "f32"),
                                                      c.p.const("int -4")), ["gather(", "index -4"]),
    ("reshape_count", lambda c: c.p.op("reshape", c.feed("x", np.ones((2, 3), np.float32), "f32"), c.p.ints([4, 2])),
     ["reshape(f32[2,3]", "cannot reshape [2,3]"]),
    ("max_empty", lambda c: c.p.op("max", c.p.op("slice", c.feed("x", np.ones((3, 2), np.float32), "f32"),
                                                 c.p.ints([2]), c.p.ints([1])), axes=[0]),
     ["max(f32[0,2])", "empty"]),
    ("broadcast_to_bad", lambda c: c.p.op("broadcast_to", c.feed("x", np.ones((3,), np.float32), "f32"),
                                          c.p.ints([2, 4])), ["broadcast_to(f32[3]", "cannot broadcast"]),
    ("randn_int_dtype", lambda c: c.p.op("randn", c.p.ints([2]), dtype="int32"), ["randn", "float"]),
    ("arange_zero_step", lambda c: c.p.op("arange", c.p.const("int 0"), c.p.const("int 4"), c.p.const("int 0")),
     ["arange", "step"]),
    ("zeros_negative", lambda c: c.p.op("zeros", c.p.ints([2, -1])), ["zeros", "negative"]),
    ("int_pow_negative", lambda c: c.p.op("pow", c.feed("a", np.array([2, 3], np.int32), "i32"),
                                          c.feed("b", np.array([1, -1], np.int32), "i32")), ["pow(", "negative"]),
]


@pytest.mark.parametrize("name,build,needles", ERRORS_WITH_ARGS, ids=[e[0] for e in ERRORS_WITH_ARGS])
def test_errors_runtime(shapevm_bin, tmp_path, rng, name, build, needles):
    c = Case(rng)
    c.out(build(c), "f32")
    code, _, err = run_prog(shapevm_bin, tmp_path, c.p, c.inputs)
    assert_clean_failure(code, "", err, "shapevm: error:", *needles)


def test_every_op_in_the_table_is_covered(shapevm_bin):
    """Guards this file against new rows in ops.def: every op listed by `shapevm ops` appears here."""
    import subprocess
    from pathlib import Path

    listing = subprocess.run([shapevm_bin, "ops"], capture_output=True, text=True, check=True).stdout
    names = [line.split()[0] for line in listing.splitlines() if line.strip()]
    assert len(names) >= 50
    source = Path(__file__).read_text()
    missing = [n for n in names if f'"{n}"' not in source]
    assert not missing, f"ops without a numpy oracle case here: {missing}"


# ---------------------------------------------------------------------------------------------
# views feeding ops, and one call site seeing different layouts

def test_views_of_broadcast_feed_copies_and_reductions(shapevm_bin, tmp_path, rng):
    x = values(rng, (3, 1), "f32")
    c = Case(rng)
    p = c.p
    rb = p.op("broadcast_to", c.feed("x", x, "f32"), p.ints([2, 3, 4]))  # zero strides
    c.out(p.op("reshape", rb, p.ints([6, -1])), "f32")
    c.out(p.op("contiguous", rb), "f32")
    c.out(p.op("sum", rb, axes=[0, 2]), "f32")
    c.out(p.op("transpose", p.op("slice", rb, p.ints([1]), p.ints([-1000]), p.ints([-2]), axes=[1]), perm=[2, 0, 1]),
          "f32")
    reshaped, copied, summed, sliced = c.run(shapevm_bin, tmp_path)
    full = np.broadcast_to(x, (2, 3, 4))
    check(reshaped, full.reshape(6, -1), "f32")
    check(copied, full, "f32")
    check(summed, f64(full).sum(axis=(0, 2)), "f32")
    check(sliced, np.transpose(full[:, 1::-2], (2, 0, 1)), "f32")


LAYOUT_LOOP = """
.module "t"
.const k0 = int 0
.const k1 = int 1
.const k2 = int ITERATIONS
.const k3 = ints [0]
.const k4 = ints [1]
.func t
  .param x : f32[3,3]
  .param y : f32[3,3]
  .outputs 3
  LoadTensor r0, x
  LoadTensor r1, y
  CallOp transpose r2 = r0
  LoadConst r12, k3
  LoadConst r13, k4
  LoadConst r4, k0
  LoadConst r5, k1
  LoadConst r6, k2
  Move r7, r0
  Move r9, r0
  Move r10, r0
head:
  Lt r8, r4, r6
  BranchIf r8, @body, @done
body:
  CallOp OPNAME r9 = r7, r1
  CallOp neg r10 = r7
  ; iteration 0: x (contiguous); 1: x.T (strided, same shape); 2: x[0:1] (broadcast [1,3])
  Move r7, r2
  Eq r11, r4, r5
  BranchIf r11, @second, @next
second:
  CallOp slice r7 = r0, r12, r13
next:
  Add r4, r4, r5
  Jump @head
done:
  StoreTensor r9, o0
  StoreTensor r10, o1
  StoreTensor r4, o2
  Return
.end
"""


@pytest.mark.parametrize("iterations", [1, 2, 3])
@pytest.mark.parametrize("op", ["add", "mul", "less"])
def test_one_site_sees_changing_layouts(shapevm_bin, tmp_path, rng, op, iterations):
    # One CallOp site gets a contiguous operand, then a transposed view of the same shape, then a
    # broadcast [1,3] slice: the inline cache and the contiguous float32 kernels must not mix them up.
    x = values(rng, (3, 3), "f32")
    y = values(rng, (3, 3), "f32")
    src = LAYOUT_LOOP.replace("OPNAME", op).replace("ITERATIONS", str(iterations))
    code, outs, err = run_prog(shapevm_bin, tmp_path, src, {"x": x, "y": y})
    assert code == 0, err
    last = [x, x.T, x[0:1]][iterations - 1]
    out_dt = "bool" if op == "less" else "f32"
    check(outs[0], binary_oracle(op, last, y, "f32"), out_dt)
    check(outs[1], -f64(last), "f32")
    assert int(outs[2]) == iterations




@pytest.mark.parametrize("op", [pytest.param("softmax"),
                                pytest.param("log_softmax"),
                                pytest.param("argmax"), "sum", "max"])
def test_rank0_with_default_attributes(shapevm_bin, tmp_path, rng, op):
    # Defaults: softmax/log_softmax axis=-1, argmax axis=0, sum/max axes=[] (all).
    x = values(rng, (), "f32")
    c = Case(rng)
    out_dt = "i64" if op == "argmax" else "f32"
    c.out(c.p.op(op, c.feed("x", x, "f32")), out_dt)
    (actual,) = c.run(shapevm_bin, tmp_path)
    expected = {"softmax": 1.0, "log_softmax": 0.0, "argmax": 0, "sum": f64(x), "max": f64(x)}[op]
    check(actual, np.asarray(expected), out_dt)
