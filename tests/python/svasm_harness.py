# SPDX-License-Identifier: Apache-2.0
# Helpers shared by test_ops_numpy.py and test_cli.py: a tiny .svasm program builder (one
# function, tensor/scalar parameters with static shape tokens, CallOps, StoreTensor outputs),
# a runner that feeds numpy inputs through `shapevm run --inputs/--out`, numpy emulation of
# bfloat16 rounding, and the check that a failing CLI run failed cleanly (no crash).
import os
import subprocess
from pathlib import Path

import numpy as np

SHORT = {
    np.dtype(np.float32): "f32",
    np.dtype(np.float16): "f16",
    np.dtype(np.float64): "f64",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64",
    np.dtype(np.bool_): "bool",
}

CRASH_MARKERS = ("Segmentation", "Aborted", "AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:",
                 "terminate called", "core dumped", "LeakSanitizer")


def token(arr):
    arr = np.asarray(arr)
    return f"{SHORT[arr.dtype]}[{','.join(str(d) for d in arr.shape)}]"


def round_bf16(x):
    """float32 -> nearest bfloat16 (round to nearest even), returned as float32."""
    x = np.array(x, dtype=np.float32)  # a C-order copy that keeps rank 0 (ascontiguousarray would not)
    bits = x.reshape(-1).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32).reshape(x.shape)


class Prog:
    """Builds one .svasm function. Registers are allocated in order; each helper returns them."""

    def __init__(self, name="t"):
        self.name = name
        self.consts = []
        self.params = []
        self.body = []
        self.outputs = 0
        self._next = 0

    def reg(self):
        r = f"r{self._next}"
        self._next += 1
        return r

    def const(self, text):
        """A constant-pool entry (`int 3`, `ints [1,2]`, `float 2.5`, `tensor i64[2] {0, 1}`) in a register."""
        k = f"k{len(self.consts)}"
        self.consts.append(f".const {k} = {text}")
        r = self.reg()
        self.body.append(f"LoadConst {r}, {k}")
        return r

    def ints(self, values):
        return self.const(f"ints [{','.join(str(int(v)) for v in values)}]")

    def tensor(self, name, tok):
        self.params.append(f".param {name} : {tok}")
        r = self.reg()
        self.body.append(f"LoadTensor {r}, {name}")
        return r

    def scalar(self, name, kind):
        self.params.append(f".param {name} : {kind}")
        r = self.reg()
        self.body.append(f"LoadArg {r}, {name}")
        return r

    def op(self, name, *inputs, nout=1, **attrs):
        outs = [self.reg() for _ in range(nout)]
        line = f"CallOp {name} {', '.join(outs)} = {', '.join(inputs)}"
        if attrs:
            line += " {" + ", ".join(f"{k}={fmt_attr(v)}" for k, v in attrs.items()) + "}"
        self.body.append(line)
        return outs[0] if nout == 1 else outs

    def store(self, *regs):
        for r in regs:
            self.body.append(f"StoreTensor {r}, o{self.outputs}")
            self.outputs += 1

    def text(self):
        lines = [f'.module "{self.name}"', *self.consts, f".func {self.name}"]
        lines += ["  " + p for p in self.params]
        lines.append(f"  .outputs {self.outputs}")
        lines += ["  " + b for b in self.body]
        lines += ["  Return", ".end", ""]
        return "\n".join(lines)


def fmt_attr(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(str(int(x)) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def run_cli(binary, *args, timeout=120, env=None):
    """(exit code, stdout, stderr); undecodable output bytes become U+FFFD instead of raising."""
    full_env = None if env is None else {**os.environ, **env}
    proc = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, errors="replace",
                          timeout=timeout, env=full_env)
    return proc.returncode, proc.stdout, proc.stderr


def run_prog(binary, tmp_path: Path, prog, inputs=None, extra=()):
    """Writes prog.svasm (+ in.npz), runs it; returns (code, [outputs in order] or None, stderr)."""
    src = tmp_path / "prog.svasm"
    src.write_text(prog.text() if isinstance(prog, Prog) else prog)
    args = ["run", src, "--quiet", "--out", tmp_path / "out.npz", *extra]
    if inputs:
        np.savez(tmp_path / "in.npz", **inputs)
        args += ["--inputs", tmp_path / "in.npz"]
    code, _, err = run_cli(binary, *args)
    if code != 0:
        return code, None, err
    with np.load(tmp_path / "out.npz") as data:
        outs = [data[f"out{i}"] for i in range(len(data.files))]
    return code, outs, err


def assert_clean_failure(code, out, err, *needles):
    """A CLI failure: non-zero exit, not killed by a signal, no crash text, the expected message."""
    assert code > 0, f"expected a clean non-zero exit, got {code}\nstdout: {out}\nstderr: {err}"
    for marker in CRASH_MARKERS:
        assert marker not in err and marker not in out, f"crash marker {marker!r} in output:\n{err}"
    for needle in needles:
        assert needle in err, f"{needle!r} not in stderr:\n{err}"
