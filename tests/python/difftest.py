# SPDX-License-Identifier: Apache-2.0
# Differential testing at scale (issue 24): draws random typed, shape-correct programs in the
# Python subset (tensor-valued control flow, loops, user-function calls, views, broadcasting,
# reductions, every npz-able dtype, a dynamic dim), runs each through `shapevm run` at O0, O1 and
# O2 (thresholds 0, --jit-wait, several iterations so compiled code runs) and under CPython with
# the numpy oracle, and compares within the dtype's tolerance (frontend_harness.compare). A
# --dim schedule run checks O2 against O0 while the dim changes every iteration. A mismatch is
# minimized (statements dropped while it persists) and written to OUT/mismatch_SEED.py in the
# corpus header format, ready to join tests/frontend_corpus once fixed.
# Usage: difftest.py N [--seed S] [--out DIR] [--bin PATH]
import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import frontend_harness as fh  # noqa: E402
from svasm_harness import run_cli  # noqa: E402

DTYPES = ["float32", "float32", "float64", "float16", "int32", "int64"]
COLS = 4
LEVELS = {  # name -> extra `shapevm run` flags
    "O0": ["--jit-level", "O0"],
    "O1": ["--jit-level", "O1", "--warmup", "0", "--hot-count", "0", "--hot-ms", "0", "--jit-wait", "--iters", "3"],
    "O2": ["--jit-level", "O2", "--warmup", "0", "--hot-count", "0", "--hot-ms", "0", "--jit-wait", "--iters", "3"],
}


class Gen:
    """One random program: straight-line statements over typed values plus a loop, a branch on a
    tensor value and a call of a user function. Kinds: mat (n, COLS), row (COLS,), col (n, 1)."""

    def __init__(self, rng: random.Random, dtype: str):
        self.rng, self.dtype = rng, dtype
        self.is_float = dtype.startswith("float")
        self.vals = {"mat": ["x"], "row": ["w"], "col": []}
        self.lines, self.count = [], 0

    def new(self, kind, expr):
        name = f"t{self.count}"
        self.count += 1
        self.lines.append(f"    {name} = {expr}")
        self.vals[kind].append(name)
        return name

    def pick(self, kind):
        return self.rng.choice(self.vals[kind])

    def const(self):
        if self.is_float:
            return repr(self.rng.choice([0.5, 0.25, 1.5, 2.0, -0.75]))
        return str(self.rng.choice([1, 2, 3, -1]))

    def unary(self, a):
        ops = ["-{}", "ops.abs({})", "ops.neg({})"]
        if self.is_float:
            ops += ["ops.tanh({})", "ops.sigmoid({})", "ops.relu({})", "ops.sqrt(ops.abs({}) + 1.0)",
                    "ops.exp(ops.tanh({}))"]
        return self.rng.choice(ops).format(a)

    def binary(self, a, b):
        op = self.rng.choice(["+", "-", "*", "max", "min"] + (["/"] if self.is_float else []))
        if op == "max":
            return f"ops.maximum({a}, {b})"
        if op == "min":
            return f"ops.minimum({a}, {b})"
        if op == "/":
            return f"{a} / (ops.abs({b}) + 1.0)"
        if op == "*" and not self.is_float:
            return f"{a} * ops.minimum(ops.maximum({b}, -2), 2)"  # ints stay small
        return f"({a} {op} {b})"

    def statement(self):
        r = self.rng.random()
        if r < 0.25:
            return self.new("mat", self.unary(self.pick("mat")))
        if r < 0.5:  # broadcasting: (n,4) op (4,) or (n,1)
            other = self.pick("col") if self.vals["col"] and self.rng.random() < 0.5 else self.pick("row")
            return self.new("mat", self.binary(self.pick("mat"), other))
        if r < 0.6:
            return self.new("mat", self.binary(self.pick("mat"), self.const()))
        if r < 0.7:  # reductions
            how = self.rng.choice(["sum", "max", "min"] + (["mean"] if self.is_float else []))
            if self.rng.random() < 0.5:
                return self.new("col", f"{self.pick('mat')}.{how}(axis=1, keepdims=True)")
            return self.new("row", f"{self.pick('mat')}.{how}(axis=0)")
        if r < 0.8:  # views
            m = self.pick("mat")
            view = self.rng.choice([f"ops.concat([{m}[:, 2:], {m}[:, :2]], axis=1)", f"{m}[:, ::-1]",
                                    f"{m}.T.T", f"ops.reshape({m}, (-1, {COLS}))"])
            return self.new("mat", view)
        if r < 0.9:  # where on a comparison (bool values)
            a, b = self.pick("mat"), self.pick("mat")
            return self.new("mat", f"ops.where({a} > {b}, {a}, {b})")
        if self.is_float and self.dtype != "float16":
            return self.new("mat", f"{self.pick('mat')} @ {self.pick('sq')}" if "sq" in self.vals else self.unary(self.pick("mat")))
        return self.new("mat", self.unary(self.pick("mat")))

    def program(self, seed):
        rng = self.rng
        helper = ["def helper(a, b):", f"    return {self.binary('a', 'b')}, a"]
        if self.is_float and self.dtype != "float16" and rng.random() < 0.5:
            self.vals["sq"] = ["q"]
        for _ in range(rng.randint(2, 6)):
            self.statement()
        # a loop carrying a value, trip count from a scalar parameter
        acc = self.pick("mat")
        self.lines.append(f"    acc = {acc}")
        self.lines.append("    for i in range(k):")
        self.lines.append(f"        acc = {self.binary('acc', self.pick('row'))}")
        if self.is_float:
            self.lines.append("        acc = ops.tanh(acc)")
        else:
            self.lines.append("        acc = ops.minimum(ops.maximum(acc, -50), 50)")
        self.vals["mat"].append("acc")
        # control flow on a tensor value
        c = self.pick("mat")
        zero = "0.0" if self.is_float else "0"
        self.lines.append(f"    if ops.sum({c}) > {zero}:")
        self.lines.append(f"        br = {self.unary(self.pick('mat'))}")
        self.lines.append("    else:")
        self.lines.append(f"        br = {self.binary(self.pick('mat'), self.const())}")
        self.vals["mat"].append("br")
        self.lines.append(f"    u, v = helper({self.pick('mat')}, {self.pick('mat')})")
        self.vals["mat"] += ["u", "v"]
        for _ in range(rng.randint(1, 4)):
            self.statement()
        outs = [self.vals["mat"][-1], rng.choice(self.vals["mat"])]
        if self.vals["col"]:
            outs.append(self.vals["col"][-1])
        outs.append(f"{self.pick('mat')} > {self.pick('mat')}")  # a bool output
        params = f"x: Tensor[\"n\", {COLS}], w: Tensor[{COLS}], k: int"
        if "sq" in self.vals:
            params += f", q: Tensor[{COLS}, {COLS}]"
        lo_hi = "-2.0..2.0" if self.is_float else "-9..9"
        header = [f"# difftest program (seed {seed}, {self.dtype})", "# run: --fn main", "# dims: n=1..6",
                  f"# input: x {self.dtype} {lo_hi}", f"# input: w {self.dtype} {lo_hi}", "# arg: k=0..3"]
        if "sq" in self.vals:
            header.append(f"# input: q {self.dtype} -0.5..0.5")
        body = ["from shapevm import ops, Tensor", "", ""] + helper + ["", "", f"def main({params}):"]
        return "\n".join(header + body + self.lines + [f"    return {', '.join(outs)}", ""])


def check(binary, path: Path, seed, work: Path):
    """None when every level agrees with the oracle, else a description of the first mismatch."""
    spec = fh.parse_header(path)
    entry = fh.entry_params(fh.find_entry(path.read_text(), spec.fn)[1])
    case = fh.make_case(spec, entry, np.random.default_rng(seed))

    def cli(*args):
        return run_cli(binary, *args, timeout=120, env={"SHAPEVM_CACHE_DIR": str(work / "cache")})

    try:
        expected = fh.run_cpython(spec, case)
    except Exception as e:  # noqa: BLE001 (the generator's own bug: not a ShapeVM finding)
        return f"oracle raised {type(e).__name__}: {e}" if not isinstance(e, (FloatingPointError, ZeroDivisionError)) else None
    for level, flags in LEVELS.items():
        code, outs, err = fh.run_shapevm(cli, spec, case, work, extra=flags)
        if code != 0 or any(m in err for m in fh.CRASH_MARKERS):
            return f"{level}: exit {code}: {err.strip()[-400:]}"
        if len(outs) != len(expected):
            return f"{level}: {len(outs)} outputs vs {len(expected)}"
        for i, (a, e) in enumerate(zip(outs, expected)):
            try:
                fh.compare(a, e, what=f"{level} out{i}")
            except AssertionError as failure:
                return str(failure)[:600]
    # Dynamic dims: the same generated inputs (seeded) at O0 and O2 while n changes every run.
    schedule = ["--dim", "n=2,7,3,7", "--iters", "4", "--seed", str(seed), "--arg", f"k={case.scalars['k']}"]
    results = {}
    for level in ("O0", "O2"):
        flags = [f for f in LEVELS[level] if f not in ("--iters", "3")]
        code, out, err = cli("run", path, "--fn", "main", "--quiet", "--out", work / f"sched_{level}.npz", *schedule, *flags)
        if code != 0:
            return f"{level} --dim schedule: exit {code}: {err.strip()[-400:]}"
        with np.load(work / f"sched_{level}.npz") as data:
            results[level] = [data[f"out{i}"] for i in range(len(data.files))]
    for i, (a, e) in enumerate(zip(results["O2"], results["O0"])):
        try:
            fh.compare(a, e, what=f"--dim schedule O2 vs O0 out{i}")
        except AssertionError as failure:
            return str(failure)[:600]
    return None


def minimize(binary, text, seed, work):
    """Drops body statements one at a time while the program still mismatches."""
    lines = text.split("\n")
    path = work / "min.py"
    changed = True
    while changed:
        changed = False
        for i in range(len(lines) - 1, -1, -1):
            if not lines[i].startswith("    t") or "=" not in lines[i]:
                continue
            trial = lines[:i] + lines[i + 1:]
            path.write_text("\n".join(trial))
            try:
                still = check(binary, path, seed, work)
            except Exception:  # noqa: BLE001 (a removed definition: not the same program)
                still = None
            if still and not still.startswith("oracle raised"):
                lines, changed = trial, True
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("count", type=int)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("DIFFTEST_SEED", "1")))
    parser.add_argument("--out", default="build/difftest")
    parser.add_argument("--bin", default=os.environ.get("SHAPEVM_BIN", str(fh.ROOT / "build" / "tools" / "shapevm")))
    parser.add_argument("--no-minimize", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mismatches, generator_errors = 0, 0
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for n in range(args.count):
            seed = args.seed + n
            rng = random.Random(seed)
            text = Gen(rng, rng.choice(DTYPES)).program(seed)
            path = work / f"p{seed}.py"
            path.write_text(text)
            if n and n % 50 == 0:
                print(f"difftest: {n} programs so far, {mismatches} mismatches, {time.time() - start:.0f} s", flush=True)
            problem = check(args.bin, path, seed, work)
            if problem and problem.startswith("oracle raised"):
                generator_errors += 1
                print(f"seed {seed}: generator error: {problem}", file=sys.stderr)
                continue
            if problem:
                mismatches += 1
                small = text if args.no_minimize else minimize(args.bin, text, seed, work)
                saved = out / f"mismatch_{seed}.py"
                saved.write_text(f"# {problem.splitlines()[0] if problem else ''}\n" + small)
                print(f"seed {seed}: MISMATCH ({problem.splitlines()[0]}) -> {saved}", file=sys.stderr)
    elapsed = time.time() - start
    print(f"difftest: {args.count} programs (seeds {args.seed}..{args.seed + args.count - 1}), {mismatches} mismatches, "
          f"{generator_errors} generator errors, {elapsed:.0f} s")
    return 1 if mismatches or generator_errors else 0


if __name__ == "__main__":
    sys.exit(main())
