# SPDX-License-Identifier: Apache-2.0
# Shared by test_frontend_corpus.py and test_frontend_workload.py: reads the `# key: value`
# header of a corpus program (tests/frontend_corpus/README.md), finds the entry function and its
# annotated parameters with `ast`, draws random inputs/dims/weights, runs the program through
# `shapevm run prog.py` and through CPython (python/shapevm as `ops`), and compares the outputs.
import ast
import importlib.util
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))

from shapevm import ops  # noqa: E402  (the numpy oracle)
from shapevm.ops import Tensor  # noqa: E402

NP_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int32": np.int32,
             "int64": np.int64, "bool": np.bool_}
# (rtol, atol relative to max |expected|, max relative L2) per output dtype
TOLERANCES = {"float32": (1e-4, 1e-5, 1e-5), "float64": (1e-9, 1e-10, 1e-10), "float16": (1e-2, 1e-2, 5e-3)}
DEFAULT_DIM_RANGE = (1, 5)
CRASH_MARKERS = ("Segmentation", "Aborted", "AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:",
                 "terminate called", "core dumped", "LeakSanitizer")


@dataclass
class InputSpec:
    dtype: str = "float32"
    lo: float = None
    hi: float = None
    kind: str = "normal"  # normal | uniform | positive
    shape: str = None  # a fixed shape expression overriding the annotation


@dataclass
class Spec:
    path: Path
    fn: str = None
    run_args: list = field(default_factory=list)  # extra CLI flags from `# run:` other than --fn
    fixed_args: dict = field(default_factory=dict)  # --arg NAME=VALUE from `# run:`
    fixed_dims: dict = field(default_factory=dict)  # --dim NAME=V from `# run:`
    dims: dict = field(default_factory=dict)  # NAME -> (lo, hi); "_" = anonymous dims
    inputs: dict = field(default_factory=dict)  # NAME -> InputSpec
    params: dict = field(default_factory=dict)  # self.NAME -> (shape expr, InputSpec)
    arg_ranges: dict = field(default_factory=dict)  # NAME -> (lo, hi)
    expects: list = field(default_factory=list)  # (outN or 'outputs', what, text)
    compile_errors: list = field(default_factory=list)
    runtime_errors: list = field(default_factory=list)
    dis: list = field(default_factory=list)  # (flags, kind 'has'|'not'|'count', pattern, count)
    tol: tuple = None
    no_diff: str = None
    runs: int = 2
    xfail: str = None

    @property
    def runnable(self):
        return not self.compile_errors


HEADER = re.compile(r"^#\s*([a-z-]+)(\[[^\]]*\])?\s*:\s*(.*?)\s*$")


def parse_range(text):
    lo, hi = text.split("..")
    conv = float if any(c in text for c in ".eE") and not re.fullmatch(r"-?\d+\.\.-?\d+", text) else int
    return conv(lo), conv(hi)


def parse_header(path):
    """The leading block of `#` comment lines: `# key: value` or `# key[flags]: value`."""
    spec = Spec(Path(path))
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#"):
            break
        m = HEADER.match(line)
        if not m:
            continue
        key, flags, value = m.group(1), (m.group(2) or "[]")[1:-1].strip(), m.group(3)
        if key == "run":
            words = shlex.split(value)
            i = 0
            while i < len(words):
                w = words[i]
                if w == "--fn":
                    spec.fn = words[i + 1]
                    i += 2
                    continue
                if w in ("--arg", "--dim"):
                    name, val = words[i + 1].split("=", 1)
                    if w == "--arg":
                        spec.fixed_args[name] = ast.literal_eval(val) if val not in ("true", "false") else val == "true"
                    else:
                        spec.fixed_dims[name] = int(val)
                    spec.run_args += [w, words[i + 1]]
                    i += 2
                    continue
                spec.run_args.append(w)
                i += 1
        elif key == "dims":
            for item in value.split():
                name, rng = item.split("=")
                spec.dims[name] = parse_range(rng)
        elif key == "input":
            name, rest = value.split(None, 1) if " " in value else (value, "")
            spec.inputs[name] = parse_input(rest)
        elif key == "param":
            m2 = re.match(r"(\w+)\s+(\([^)]*\))\s*(.*)$", value)
            assert m2, f"{path}: bad param line {line!r}"
            spec.params[m2.group(1)] = (m2.group(2), parse_input(m2.group(3)))
        elif key == "arg":
            for item in value.split():
                name, rng = item.split("=")
                spec.arg_ranges[name] = parse_range(rng) if ".." in rng else ast.literal_eval(rng)
        elif key == "expect":
            m2 = re.match(r"(out\d+|outputs)\s*(\w*)\s*(.*)$", value)
            assert m2, f"{path}: bad expect line {line!r}"
            spec.expects.append((m2.group(1), m2.group(2), m2.group(3)))
        elif key == "expect-compile-error":
            spec.compile_errors.append(value)
        elif key == "expect-runtime-error":
            spec.runtime_errors.append(value)
        elif key in ("expect-dis", "expect-dis-not"):
            spec.dis.append((flags, "has" if key == "expect-dis" else "not", value, None))
        elif key == "expect-dis-count":
            n, pattern = value.split(None, 1)
            spec.dis.append((flags, "count", pattern, int(n)))
        elif key == "tol":
            kv = dict(item.split("=") for item in value.split())
            spec.tol = (float(kv.get("rtol", 1e-4)), float(kv.get("atol", 1e-5)), float(kv.get("l2", 1e-5)))
        elif key == "no-diff":
            spec.no_diff = value
        elif key == "runs":
            spec.runs = int(value)
        elif key == "xfail":
            spec.xfail = value
    return spec


def parse_input(text):
    s = InputSpec()
    for word in text.split():
        if word in NP_DTYPES or word == "bfloat16":
            s.dtype = word
        elif word in ("normal", "uniform", "positive"):
            s.kind = word
        elif word.startswith("shape="):
            s.shape = word[len("shape="):]
        elif ".." in word:
            s.lo, s.hi = parse_range(word)
            if s.kind == "normal":
                s.kind = "uniform"
        else:
            raise AssertionError(f"bad input/param spec word {word!r}")
    return s


# ---------------------------------------------------------------------------------------------
# the entry function, found with ast

@dataclass
class Param:
    name: str
    kind: str  # tensor | int | float | bool
    dims: list = None  # per axis: int, str (named) or None (anonymous)


def find_entry(source, fn):
    """(class name or None, FunctionDef) for `fn` = NAME, Class.method, or a unique bare method."""
    tree = ast.parse(source)
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if "." in fn:
        cls, meth = fn.split(".", 1)
        for n in classes[cls].body:
            if isinstance(n, ast.FunctionDef) and n.name == meth:
                return cls, n
        raise KeyError(fn)
    if fn in funcs:
        return None, funcs[fn]
    hits = [(c, n) for c, cd in classes.items() for n in cd.body if isinstance(n, ast.FunctionDef) and n.name == fn]
    assert len(hits) == 1, f"method {fn!r} is not unique: {hits}"
    return hits[0]


def entry_params(fdef):
    params = []
    for i, a in enumerate(fdef.args.args):
        if i == 0 and a.arg == "self":
            continue
        ann = a.annotation
        if isinstance(ann, ast.Name) and ann.id in ("int", "float", "bool"):
            params.append(Param(a.arg, ann.id))
        elif isinstance(ann, ast.Subscript):
            sl = ann.slice
            elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            params.append(Param(a.arg, "tensor", [ast.literal_eval(e) for e in elts]))
        elif ann is None or (isinstance(ann, ast.Name) and ann.id == "Tensor"):
            params.append(Param(a.arg, "tensor", None))
        else:
            raise AssertionError(f"unsupported annotation on {a.arg}")
    return params


# ---------------------------------------------------------------------------------------------
# random inputs

def draw(rng, shape, s: InputSpec):
    shape = tuple(shape)
    for _ in range(100):
        if s.dtype == "bool":
            x = rng.random(shape) < 0.5
        elif s.dtype in ("int32", "int64"):
            lo, hi = (s.lo, s.hi) if s.lo is not None else (-9, 9)
            x = rng.integers(int(lo), int(hi) + 1, shape).astype(NP_DTYPES[s.dtype])
        else:
            if s.kind == "positive":
                x = rng.uniform(0.5, 2.0, shape)
            elif s.kind == "uniform":
                x = rng.uniform(s.lo, s.hi, shape)
            else:
                x = rng.standard_normal(shape)
            x = np.asarray(x).astype(NP_DTYPES.get(s.dtype, np.float32))
        if x.size == 0 or np.any(x != 0) or (s.lo is not None and s.lo == s.hi == 0):
            return np.asarray(x)
    raise AssertionError("could not draw a nonzero sample")


@dataclass
class Case:
    inputs: dict  # tensor params -> numpy
    scalars: dict  # scalar params -> python value
    params: dict  # self.* -> numpy
    dims: dict  # named dims and scalar args (for shape expectations)


def eval_shape(expr, env):
    return tuple(int(d) for d in eval(expr, {"__builtins__": {}}, dict(env)))  # noqa: S307 - test data


def make_case(spec: Spec, entry, rng):
    env = {}
    for name, (lo, hi) in spec.dims.items():
        if name != "_":
            env[name] = int(rng.integers(lo, hi + 1))
    env.update(spec.fixed_dims)
    anon = spec.dims.get("_", DEFAULT_DIM_RANGE)
    inputs, scalars = {}, {}
    for p in entry:
        if p.kind == "tensor":
            s = spec.inputs.get(p.name, InputSpec())
            if s.shape is not None:
                shape = eval_shape(s.shape, env)
            else:
                assert p.dims is not None, f"{p.name}: no annotation and no `# input: {p.name} shape=...`"
                shape = []
                for d in p.dims:
                    if isinstance(d, str):
                        if d not in env:
                            lo, hi = DEFAULT_DIM_RANGE
                            env[d] = int(rng.integers(lo, hi + 1))
                        shape.append(env[d])
                    elif d is None:
                        shape.append(int(rng.integers(anon[0], anon[1] + 1)))
                    else:
                        shape.append(int(d))
            inputs[p.name] = draw(rng, shape, s)
        else:
            if p.name in spec.fixed_args:
                v = spec.fixed_args[p.name]
            elif p.name in spec.arg_ranges:
                r = spec.arg_ranges[p.name]
                if isinstance(r, tuple):
                    v = int(rng.integers(r[0], r[1] + 1)) if isinstance(r[0], int) else float(rng.uniform(*r))
                else:
                    v = r
            elif p.kind == "int":
                v = int(rng.integers(1, 5))
            elif p.kind == "float":
                v = float(np.float32(rng.uniform(0.5, 2.0)))
            else:
                v = bool(rng.random() < 0.5)
            v = {"int": int, "float": float, "bool": bool}[p.kind](v)
            scalars[p.name] = v
            env[p.name] = v
    params = {name: draw(rng, eval_shape(shape, env), s) for name, (shape, s) in spec.params.items()}
    return Case(inputs, scalars, params, env)


def scalar_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v)


# ---------------------------------------------------------------------------------------------
# running both sides

def run_shapevm(run_cli, spec: Spec, case: Case, tmp_path, extra=()):
    """(code, outputs or None, stderr) of `shapevm run prog.py` on `case`."""
    args = ["run", spec.path, "--quiet", "--out", tmp_path / "out.npz"]
    if spec.fn:
        args += ["--fn", spec.fn]
    if case.inputs:
        np.savez(tmp_path / "in.npz", **case.inputs)
        args += ["--inputs", tmp_path / "in.npz"]
    if case.params:
        np.savez(tmp_path / "params.npz", **case.params)
        args += ["--params", tmp_path / "params.npz"]
    for name, v in case.scalars.items():
        if name not in spec.fixed_args:
            args += ["--arg", f"{name}={scalar_text(v)}"]
    args += [a for a in spec.run_args]
    args += list(extra)
    out_file = tmp_path / "out.npz"
    if out_file.exists():
        out_file.unlink()
    code, out, err = run_cli(*args)
    if code != 0:
        return code, None, err + out
    with np.load(out_file) as data:
        outs = [data[f"out{i}"] for i in range(len(data.files))]
    return code, outs, err


_module_counter = [0]


def load_module(path):
    _module_counter[0] += 1
    name = f"_svm_corpus_{Path(path).stem}_{_module_counter[0]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_cpython(spec: Spec, case: Case, module=None):
    """Outputs (a list of numpy values, ShapeVM's order and dtypes) of the same file under CPython."""
    module = module or load_module(spec.path)
    fn = spec.fn
    if "." in fn or not hasattr(module, fn):
        cls_name, fdef = find_entry(spec.path.read_text(), fn)
        cls = getattr(module, cls_name)
        obj = cls.__new__(cls)
        for name, value in case.params.items():
            setattr(obj, name, np.asarray(value).view(Tensor))
        target = getattr(obj, fdef.name)
    else:
        target = getattr(module, fn)
    kwargs = {k: np.array(v).view(Tensor) for k, v in case.inputs.items()}
    kwargs.update(case.scalars)
    result = target(**kwargs)
    values = list(result) if isinstance(result, tuple) else [result]
    return [to_numpy(v) for v in values]


def to_numpy(v):
    if isinstance(v, Tensor):
        if v._bf16:
            raise AssertionError("a bfloat16 output cannot go through .npz; cast it to float32 in the program")
        return np.array(v)
    if isinstance(v, bool):
        return np.array(v, dtype=np.bool_)
    if isinstance(v, int):
        return np.array(v, dtype=np.int64)
    if isinstance(v, float):
        return np.array(v, dtype=np.float64)
    if isinstance(v, tuple):
        return np.array(v, dtype=np.int64)
    if isinstance(v, np.ndarray):
        return np.array(v)
    raise AssertionError(f"output of unexpected type {type(v).__name__}")


def rel_l2(actual, expected):
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    return float(np.linalg.norm(a - e) / max(np.linalg.norm(e), 1e-30))


def compare(actual, expected, tol=None, what="out"):
    """ShapeVM output vs oracle output: same dtype and shape; ints/bools exact; floats within tol."""
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} (shapevm) vs {expected.dtype} (cpython)"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} (shapevm) vs {expected.shape} (cpython)"
    if actual.dtype.kind != "f":
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    rtol, atol, l2 = tol or TOLERANCES[actual.dtype.name]
    finite = expected[np.isfinite(expected)]
    scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected), err_msg=f"{what}: NaN positions")
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol * scale,
                               err_msg=what)
    ok = np.isfinite(expected) & np.isfinite(actual)
    if ok.any():
        err = rel_l2(actual[ok], expected[ok])
        assert err <= l2, f"{what}: relative L2 error {err:.3g} > {l2:g}"


def check_expectations(spec, outs, env):
    for target, what, text in spec.expects:
        if target == "outputs":
            assert len(outs) == int(text or what), f"{len(outs)} outputs, expected {text or what}"
            continue
        index = int(target[3:])
        assert index < len(outs), f"no {target}: the program returned {len(outs)} outputs"
        out = outs[index]
        if what == "shape":
            assert out.shape == eval_shape(text, env), f"{target} shape {out.shape}, expected {text} with {env}"
        elif what == "dtype":
            assert out.dtype == np.dtype(text), f"{target} dtype {out.dtype}, expected {text}"
        elif what == "value":
            expected = np.asarray(eval(text, SAFE_EVAL, dict(env)))  # noqa: S307
            if out.dtype.kind == "f":
                np.testing.assert_allclose(out, expected.astype(out.dtype), rtol=1e-5, atol=1e-6, err_msg=target)
            else:
                np.testing.assert_array_equal(out, expected.astype(out.dtype), err_msg=target)
        else:
            raise AssertionError(f"unknown expectation {what!r}")


SAFE_EVAL = {"__builtins__": {}, "nan": np.nan, "inf": np.inf, "sum": sum, "range": range, "min": min,
             "max": max, "abs": abs, "len": len, "list": list, "int": int, "float": float, "bool": bool}


def strip_dis(text):
    """Disassembly without comments (`; ...` and `# ...`), so source lines shown there never match."""
    lines = []
    for line in text.splitlines():
        s = line.split(";", 1)[0]
        if s.lstrip().startswith("#"):
            continue
        lines.append(s)
    return "\n".join(lines)


def dis_matches(text, pattern):
    if len(pattern) > 1 and pattern.startswith("/") and pattern.endswith("/"):
        return len(re.findall(pattern[1:-1], text, flags=re.M))
    return text.count(pattern)


def runnable_corpus(corpus):
    """The corpus programs that compile and run cleanly (the JIT level tests run these at O1/O2 vs O0)."""
    def runnable(path):
        spec = parse_header(path)
        return spec.runnable and not spec.xfail and not spec.runtime_errors and not spec.compile_errors
    return [p for p in sorted(corpus.glob("*.py")) if runnable(p)]
