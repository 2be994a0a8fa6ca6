#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The peers of ShapeVM's benchmark suite: PyTorch eager, TorchScript and numpy, float32, 1 thread.

What it measures (every peer's output is checked against a float64 numpy oracle first; a wrong
peer is an error, never a row):
  workload     the reference workload (docs/reference-workload.md), both variants (`lstm_cell` flat,
               `lstm_loop` recurrence), batch 32, seq 10/20/30/120 and a fixed shuffled stream of
               seq in 8..128 (--stream overrides it; run_all.py passes shapevm.json's); per-call ms
               (median, min-max) and us per token (row of batch*seq; stream: per call, as
               `shapevm bench` reports it)
  cold         fresh-process first-call costs (TorchScript: script, profiling and optimizing runs,
               first call after a new shape; PyTorch eager for comparison)
  matmul       torch.matmul and numpy @ at the benchmark shapes, GFLOP/s
  elementwise  sigmoid(a*b+c) and a*b+c over 16M float32 (idiomatic and out= forms), numpy
               memcpy (np.copyto) bandwidth
  overhead     torch.add on 1-element tensors, ns/op (the approach of bench/op_overhead.py)

BLAS configurations: numpy and PyTorch both call the BLAS behind libblas.so.3 (on Debian an
alternative: the netlib reference BLAS unless OpenBLAS is installed). Each configuration runs in
its own persistent worker process, because OpenBLAS reads OPENBLAS_CORETYPE when it loads:
  shipped                    what libblas.so.3 resolves to here (peer names without a suffix)
  +openblas                  an OpenBLAS found on disk but not the system default, loaded
                             through LD_LIBRARY_PATH (only when the shipped BLAS is not OpenBLAS)
  +OPENBLAS_CORETYPE=<FAM>   OpenBLAS forced to the CPU family's kernels (ZEN on AMD, SKYLAKEX /
                             COOPERLAKE / SAPPHIRERAPIDS / HASWELL on Intel)
Rounds interleave the peers and configurations of one case (worker by worker, call bursts), so all
see the same machine state; the figures are medians over those rounds.

Usage: /usr/bin/python3 bench/peers.py [--quick] [--out DIR] [--openblas-dir DIR] [--coretype NAME[,NAME]]
                                      [--stream SEQ,SEQ,...]
Writes DIR/peers.json (default build/bench-out) and prints a summary.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()
PY = "/usr/bin/python3"

BATCH = 32
SEED = 20261129
TOL = 1e-5  # relative L2 error allowed against the float64 oracle
FULL_SEQS = [10, 20, 30, 120]
QUICK_SEQS = [10, 30]
# The shuffled stream of seq (drawn once from 8..128 with random.Random(2026).randint and kept
# literally so that every run, and the ShapeVM side, see the same sequence).
STREAM = [77, 12, 103, 45, 128, 8, 64, 91, 23, 117, 36, 70]
VARIANTS = ["lstm_cell", "lstm_loop"]
BASE_PEERS = ["pytorch", "torchscript", "numpy"]
WORKLOAD_MATMULS = [(320, 128, 1024), (640, 128, 1024), (960, 128, 1024), (32, 256, 1024)]
MATMUL_SHAPES = [(640, 128, 1024), (32, 768, 4096), (256, 256, 256), (1024, 1024, 1024),
                 (320, 128, 1024), (960, 128, 1024), (32, 256, 1024)]

# What one run measures: the full suite, --quick (a smoke test, about 40 s on a quiet machine) and
# --tiny (the pytest's: tiny shapes, a handful of runs, seconds).
PLANS = {
    "full": {"batch": BATCH, "seqs": FULL_SEQS, "stream": STREAM, "matmul": MATMUL_SHAPES, "ew_n": 1 << 24,
             "overhead_loops": 20000, "overhead_rounds": 7, "workload": (2.0, 7, 60), "stream_budget": (6.0, 2, 8),
             "matmul_budget": (1.0, 7, 50), "ew_budget": (1.0, 7, 40), "burst": 4,
             "cold": [(p, v) for p in ["torchscript", "pytorch"] for v in VARIANTS]},
    "quick": {"batch": BATCH, "seqs": QUICK_SEQS, "stream": [], "matmul": MATMUL_SHAPES, "ew_n": 1 << 20,
              "overhead_loops": 5000, "overhead_rounds": 3, "workload": (0.25, 3, 12), "stream_budget": (0.75, 1, 2),
              "matmul_budget": (0.15, 2, 10), "ew_budget": (0.15, 3, 10), "burst": 3,
              "cold": [("torchscript", "lstm_cell")]},
    "tiny": {"batch": 2, "seqs": [3, 5], "stream": [4, 7, 3], "matmul": [(8, 16, 32), (16, 8, 8)], "ew_n": 4096,
             "overhead_loops": 200, "overhead_rounds": 2, "workload": (0.0, 2, 2), "stream_budget": (0.0, 1, 1),
             "matmul_budget": (0.0, 2, 2), "ew_budget": (0.0, 2, 2), "burst": 2,
             "cold": []},  # (the pytest calls cold_main in its own process)
}
# (peer, op, label, flops per element, nominal bytes per element)
ELEMENTWISE = [("pytorch", "chain", "sigmoid(a*b+c)", 6, 16), ("numpy", "chain", "sigmoid(a*b+c)", 6, 16),
               ("pytorch", "chain_out", "sigmoid(a*b+c) out=", 6, 16), ("numpy", "chain_out", "sigmoid(a*b+c) out=", 6, 16),
               ("pytorch", "axpy", "a*b+c", 2, 16), ("numpy", "axpy", "a*b+c", 2, 16),
               ("pytorch", "axpy_out", "a*b+c out=", 2, 16), ("numpy", "axpy_out", "a*b+c out=", 2, 16),
               ("numpy", "memcpy", "memcpy", 0, 8), ("pytorch", "memcpy", "memcpy", 0, 8)]
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "GOTO_NUM_THREADS": "1", "BLIS_NUM_THREADS": "1"}
OPENBLAS_DIRS = ["/usr/lib/x86_64-linux-gnu/openblas-pthread", "/usr/lib/x86_64-linux-gnu/openblas-serial",
                 "/usr/lib/x86_64-linux-gnu/openblas-openmp"]
DEFAULT_BLAS = "/usr/lib/x86_64-linux-gnu/libblas.so.3"


class PeerError(RuntimeError):
    """A peer produced wrong outputs, or a worker failed."""


# --------------------------------------------------------------------------------------------
# Inputs and the float64 oracle (the same formulas as tests/python/test_reference_workload.py).

def make_workload(seed, batch, seq):
    """Inputs (x, h, c) and params (W_ih, W_hh, b_ih, b_hh), float32, deterministic in
    (seed, batch, seq); the weights depend on the seed only. run_all.py's correctness gate feeds
    the same arrays to `shapevm run`."""
    import numpy as np
    wr = np.random.default_rng([seed, 0])
    params = {
        "W_ih": (0.1 * wr.standard_normal((1024, 128))).astype(np.float32),
        "W_hh": (0.1 * wr.standard_normal((1024, 256))).astype(np.float32),
        "b_ih": wr.standard_normal(1024).astype(np.float32),
        "b_hh": wr.standard_normal(1024).astype(np.float32),
    }
    xr = np.random.default_rng([seed, 1, batch, seq])
    inputs = {
        "x": xr.standard_normal((batch, seq, 128)).astype(np.float32),
        "h": xr.standard_normal((batch, 256)).astype(np.float32),
        "c": xr.standard_normal((batch, 256)).astype(np.float32),
    }
    return inputs, params


def workload_args(inputs, params):
    return [inputs["x"], inputs["h"], inputs["c"], params["W_ih"], params["W_hh"], params["b_ih"], params["b_hh"]]


def _np_sigmoid(z):
    import numpy as np
    return 1.0 / (1.0 + np.exp(-z))


def numpy_lstm_cell(x, h, c, W_ih, W_hh, b_ih, b_hh):
    """Flat variant; float32 in, float32 out (float64 in: the oracle)."""
    import numpy as np
    batch, seq, _ = x.shape
    gx = (x.reshape(batch * seq, 128) @ W_ih.T + b_ih).reshape(batch, seq, 1024)
    gates = gx + (h @ W_hh.T + b_hh)[:, None, :]
    i, f, g, o = np.split(gates, 4, axis=2)
    c2 = _np_sigmoid(f) * c[:, None, :] + _np_sigmoid(i) * np.tanh(g)
    h2 = _np_sigmoid(o) * np.tanh(c2)
    return h2, c2


def numpy_lstm_loop(x, h, c, W_ih, W_hh, b_ih, b_hh):
    """Looped variant: a recurrence over t."""
    import numpy as np
    for t in range(x.shape[1]):
        gates = x[:, t, :] @ W_ih.T + b_ih + h @ W_hh.T + b_hh
        i, f, g, o = np.split(gates, 4, axis=1)
        c = _np_sigmoid(f) * c + _np_sigmoid(i) * np.tanh(g)
        h = _np_sigmoid(o) * np.tanh(c)
    return h, c


NUMPY_FNS = {"lstm_cell": numpy_lstm_cell, "lstm_loop": numpy_lstm_loop}


def oracle(variant, inputs, params):
    import numpy as np
    args = [a.astype(np.float64) for a in workload_args(inputs, params)]
    return NUMPY_FNS[variant](*args)


def rel_l2(actual, expected):
    import numpy as np
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return float("inf")
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


# PyTorch peers. `torch` and `F` are module globals bound by _import_torch() in worker processes
# only (the orchestrator and run_all.py import this module without torch); TorchScript resolves
# them through the function's globals when it scripts.
torch = None
F = None


def _import_torch():
    global torch, F
    if torch is None:
        import torch as _torch
        import torch.nn.functional as _F
        torch, F = _torch, _F
        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass  # already set (interop threads can be set once, before any parallel work)
    return torch


def torch_lstm_cell(x, h, c, W_ih, W_hh, b_ih, b_hh):
    batch, seq = x.size(0), x.size(1)
    gx = F.linear(x.reshape(batch * seq, 128), W_ih, b_ih).reshape(batch, seq, 1024)
    gates = gx + F.linear(h, W_hh, b_hh).unsqueeze(1)
    i, f, g, o = gates.chunk(4, 2)
    c2 = torch.sigmoid(f) * c.unsqueeze(1) + torch.sigmoid(i) * torch.tanh(g)
    h2 = torch.sigmoid(o) * torch.tanh(c2)
    return h2, c2


def torch_lstm_loop(x, h, c, W_ih, W_hh, b_ih, b_hh):
    for t in range(x.size(1)):
        gates = F.linear(x[:, t], W_ih, b_ih) + F.linear(h, W_hh, b_hh)
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    return h, c


TORCH_FNS = {"lstm_cell": torch_lstm_cell, "lstm_loop": torch_lstm_loop}


def torch_outputs(variant, inputs, params):
    """PyTorch eager's float32 outputs (h', c') as numpy arrays; run_all.py's gate compares
    `shapevm run` with these."""
    _import_torch()
    with torch.no_grad():
        h2, c2 = TORCH_FNS[variant](*[torch.from_numpy(a) for a in workload_args(inputs, params)])
    return h2.numpy(), c2.numpy()


# --------------------------------------------------------------------------------------------
# Machine and BLAS facts.

def cpuinfo():
    info = {"model": platform.processor() or "unknown", "vendor": "", "family": None, "flags": []}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and info["model"] in ("unknown", platform.processor() or "unknown"):
                    info["model"] = value
                elif key == "vendor_id" and not info["vendor"]:
                    info["vendor"] = value
                elif key == "cpu family" and info["family"] is None:
                    info["family"] = int(value)
                elif key == "flags" and not info["flags"]:
                    info["flags"] = value.split()
                elif not line.strip() and info["flags"]:
                    break
    except OSError:
        pass
    return info


def family_coretype(info=None):
    """The OPENBLAS_CORETYPE naming this CPU's family (names OpenBLAS's DYNAMIC_ARCH accepts,
    case-insensitively: Haswell, Zen, SkylakeX, CooperLake, SapphireRapids, ...), or None."""
    info = info or cpuinfo()
    flags = set(info["flags"])
    if info["vendor"] == "AuthenticAMD":
        return "ZEN" if (info["family"] or 0) >= 0x17 else None
    if info["vendor"] == "GenuineIntel":
        if "amx_tile" in flags:
            return "SAPPHIRERAPIDS"
        if "avx512_bf16" in flags:
            return "COOPERLAKE"
        if "avx512f" in flags:
            return "SKYLAKEX"
        if "avx2" in flags:
            return "HASWELL"
    return None


def find_openblas(explicit=None):
    """A directory holding OpenBLAS's libblas.so.3, or None."""
    candidates = [explicit] if explicit else []
    if os.environ.get("SHAPEVM_BENCH_OPENBLAS_DIR"):
        candidates.append(os.environ["SHAPEVM_BENCH_OPENBLAS_DIR"])
    candidates += OPENBLAS_DIRS
    for d in candidates:
        if d and (Path(d) / "libblas.so.3").exists():
            return str(Path(d).resolve())
    return None


def shipped_blas_is_openblas():
    try:
        return "openblas" in os.path.realpath(DEFAULT_BLAS)
    except OSError:
        return False


def blas_configs(openblas_dir=None, coretypes=None):
    """[(suffix, env overrides)] to run the peers under; the first is the shipped BLAS."""
    configs = [("", {})]
    shipped_openblas = shipped_blas_is_openblas()
    found = None if shipped_openblas else find_openblas(openblas_dir)
    if found:
        inherited = os.environ.get("LD_LIBRARY_PATH")
        configs.append(("+openblas", {"LD_LIBRARY_PATH": found + (f":{inherited}" if inherited else "")}))
    if coretypes is None:
        fam = family_coretype()
        coretypes = [fam] if fam else []
    if shipped_openblas or found:
        base_suffix, base_env = ("", {}) if shipped_openblas else configs[-1]
        for ct in coretypes:
            configs.append((f"{base_suffix}+OPENBLAS_CORETYPE={ct}", {**base_env, "OPENBLAS_CORETYPE": ct}))
    return configs


def loaded_blas():
    """What BLAS this process loaded (numpy and torch both link libblas.so.3)."""
    import ctypes
    libs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if "blas" in path.lower() and path not in libs:
                    libs.append(path)
    except OSError:
        pass
    desc, corename, config = "unknown BLAS", None, None
    openblas = [p for p in libs if "libopenblas" in os.path.basename(p)]
    if openblas:
        try:
            lib = ctypes.CDLL(openblas[0])
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            corename = lib.openblas_get_corename().decode()
            config = lib.openblas_get_config().decode()
        except (OSError, AttributeError):
            pass
        version = (config or "OpenBLAS").split()
        desc = f"{version[0]} {version[1] if len(version) > 1 else ''}".strip() + f" (kernels: {corename})"
    elif libs:
        desc = "reference BLAS (netlib, " + os.path.realpath(libs[0]) + ")"
    return {"blas": desc, "corename": corename, "openblas_config": config, "blas_libs": libs}


# --------------------------------------------------------------------------------------------
# Worker: one persistent process per BLAS configuration, JSON lines over stdin/stdout.

class Worker:
    """The measuring side: one per BLAS configuration (a process of its own), driven by the
    orchestrator through cmd_* requests."""

    def __init__(self):
        _import_torch()
        import numpy as np
        np.seterr(over="ignore")  # float32 exp(-z) overflows to inf for z < -88: sigmoid is 0, correct
        self.np = np
        self.cases = {}  # (seq, batch, seed) -> (numpy args, torch args)
        self.scripted = {}
        self.mm = {}
        self.ew = {}

    # workload ---------------------------------------------------------------
    def _args(self, seq, batch, seed):
        key = (seq, batch, seed)
        if key not in self.cases:
            inputs, params = make_workload(seed, batch, seq)
            np_args = workload_args(inputs, params)
            self.cases[key] = (np_args, [torch.from_numpy(a) for a in np_args])
        return self.cases[key]

    def _fn(self, peer, variant):
        fn, kind = self._peer_fn(peer, variant)
        if os.environ.get("SHAPEVM_BENCH_FAULT") == f"{peer}:{variant}":
            # Test hook (tests/python/test_bench_scripts.py): this peer answers 0.1% off, which
            # the correctness check must reject.
            inner = fn

            def fn(*args):
                h2, c2 = inner(*args)
                return h2 * 1.001, c2
        return fn, kind

    def _peer_fn(self, peer, variant):
        if peer == "numpy":
            return NUMPY_FNS[variant], 0
        if peer == "pytorch":
            return TORCH_FNS[variant], 1
        if peer == "torchscript":
            if variant not in self.scripted:
                self.scripted[variant] = torch.jit.script(TORCH_FNS[variant])
            return self.scripted[variant], 1
        raise PeerError(f"unknown peer {peer}")

    def cmd_info(self, req):
        import numpy as np
        return {**loaded_blas(), "torch": torch.__version__, "numpy": np.__version__,
                "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
                "env": {k: os.environ.get(k) for k in [*THREAD_ENV, "OPENBLAS_CORETYPE", "LD_LIBRARY_PATH"]}}

    def cmd_oracle(self, req):
        """float64 oracle outputs for (variant, seq) pairs, saved to one .npz for all workers."""
        np = self.np
        arrays = {}
        for variant in req["variants"]:
            for seq in req["seqs"]:
                inputs, params = make_workload(req["seed"], req["batch"], seq)
                h2, c2 = oracle(variant, inputs, params)
                arrays[f"{variant}_{seq}_h"] = h2
                arrays[f"{variant}_{seq}_c"] = c2
        np.savez(req["path"], **arrays)
        return {}

    def cmd_check_workload(self, req):
        ref = self.np.load(req["oracle"])
        errors = []
        fn, kind = self._fn(req["peer"], req["variant"])
        with torch.no_grad():
            for seq in req["seqs"]:
                args = self._args(seq, req["batch"], req["seed"])[kind]
                h2, c2 = fn(*args)
                if kind:
                    h2, c2 = h2.numpy(), c2.numpy()
                eh = rel_l2(h2, ref[f"{req['variant']}_{seq}_h"])
                ec = rel_l2(c2, ref[f"{req['variant']}_{seq}_c"])
                if str(h2.dtype) != "float32" or str(c2.dtype) != "float32":
                    eh = ec = float("inf")
                errors.append({"seq": seq, "rel_l2_h": eh, "rel_l2_c": ec})
        return {"errors": errors}

    def cmd_time_workload(self, req):
        """Calls at req['seqs'] in order; per-call ms."""
        fn, kind = self._fn(req["peer"], req["variant"])
        all_args = [self._args(seq, req["batch"], req["seed"])[kind] for seq in req["seqs"]]
        samples = []
        clock = time.perf_counter_ns
        with torch.no_grad():
            for args in all_args:
                start = clock()
                fn(*args)
                samples.append((clock() - start) / 1e6)
        return {"ms": samples}

    # matmul -----------------------------------------------------------------
    def _mm_operands(self, m, k, n):
        key = (m, k, n)
        if key not in self.mm:
            rng = self.np.random.default_rng([SEED, 2, m, k, n])
            a = rng.standard_normal((m, k)).astype(self.np.float32)
            b = rng.standard_normal((k, n)).astype(self.np.float32)
            self.mm[key] = (a, b, torch.from_numpy(a), torch.from_numpy(b))
        return self.mm[key]

    def cmd_check_matmul(self, req):
        np = self.np
        a, b, ta, tb = self._mm_operands(req["m"], req["k"], req["n"])
        out = (a @ b) if req["peer"] == "numpy" else torch.matmul(ta, tb).numpy()
        rows = min(req["m"], 64)  # a float64 product of the first rows is the oracle
        expected = a[:rows].astype(np.float64) @ b.astype(np.float64)
        return {"rel_l2": rel_l2(out[:rows], expected) if out.dtype == np.float32 else float("inf")}

    def cmd_time_matmul(self, req):
        a, b, ta, tb = self._mm_operands(req["m"], req["k"], req["n"])
        clock = time.perf_counter_ns
        samples = []
        for _ in range(req["count"]):
            if req["peer"] == "numpy":
                start = clock()
                a @ b
            else:
                start = clock()
                torch.matmul(ta, tb)
            samples.append((clock() - start) / 1e6)
        return {"ms": samples}

    # elementwise ------------------------------------------------------------
    def _ew_operands(self, n):
        if n not in self.ew:
            np = self.np
            rng = np.random.default_rng([SEED, 3, n])
            a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
            y = np.empty(n, np.float32)
            t = np.empty(n, np.float32)
            self.ew[n] = {"np": (a, b, c, y, t),
                          "torch": tuple(torch.from_numpy(v) for v in (a, b, c, y, t))}
        return self.ew[n]

    def _ew_fn(self, peer, op, n):
        np = self.np
        ops = self._ew_operands(n)
        if peer == "numpy":
            a, b, c, y, t = ops["np"]
            if op == "chain":
                return lambda: 1.0 / (1.0 + np.exp(-(a * b + c)))
            if op == "chain_out":
                def chain_out():
                    np.multiply(a, b, out=y)
                    np.add(y, c, out=y)
                    np.negative(y, out=y)
                    np.exp(y, out=y)
                    np.add(y, 1.0, out=y)
                    np.reciprocal(y, out=y)
                    return y
                return chain_out
            if op == "axpy":
                return lambda: a * b + c
            if op == "axpy_out":
                def axpy_out():
                    np.multiply(a, b, out=y)
                    np.add(y, c, out=y)
                    return y
                return axpy_out
            if op == "memcpy":
                def memcpy():
                    np.copyto(y, a)
                    return y
                return memcpy
        else:
            a, b, c, y, t = ops["torch"]
            if op == "chain":
                return lambda: torch.sigmoid(a * b + c)
            if op == "chain_out":
                return lambda: torch.sigmoid(torch.addcmul(c, a, b, out=y), out=y)
            if op == "axpy":
                return lambda: a * b + c
            if op == "axpy_out":
                return lambda: torch.addcmul(c, a, b, out=y)
            if op == "memcpy":
                return lambda: y.copy_(a)
        raise PeerError(f"unknown elementwise {peer} {op}")

    def cmd_check_elementwise(self, req):
        np = self.np
        ops = self._ew_operands(req["n"])
        a, b, c = (v[:1 << 16].astype(np.float64) for v in ops["np"][:3])
        out = self._ew_fn(req["peer"], req["op"], req["n"])()
        out = out.numpy() if hasattr(out, "numpy") else out
        expected = {"chain": lambda: 1.0 / (1.0 + np.exp(-(a * b + c))), "axpy": lambda: a * b + c,
                    "memcpy": lambda: a}[req["op"].replace("_out", "")]()
        ok_dtype = out.dtype == np.float32 and out.shape == (req["n"],)
        return {"rel_l2": rel_l2(out[:1 << 16], expected) if ok_dtype else float("inf")}

    def cmd_time_elementwise(self, req):
        fn = self._ew_fn(req["peer"], req["op"], req["n"])
        clock = time.perf_counter_ns
        samples = []
        with torch.no_grad():
            for _ in range(req["count"]):
                start = clock()
                fn()
                samples.append((clock() - start) / 1e6)
        return {"ms": samples}

    def cmd_page_faults(self, req):
        """Microseconds per first touch of a fresh 4 KiB page (on some VMs this is 10-50 us and
        dominates every allocating peer op above glibc's mmap threshold)."""
        import mmap
        size = 8 << 20
        buf = mmap.mmap(-1, size)
        clock = time.perf_counter_ns
        start = clock()
        for offset in range(0, size, 4096):
            buf[offset] = 1
        elapsed = clock() - start
        buf.close()
        return {"us_per_page": elapsed / 1e3 / (size // 4096)}

    # per-op overhead --------------------------------------------------------
    def cmd_time_overhead(self, req):
        sys.path.insert(0, str(THIS.parent))
        from op_overhead import torch_ns_per_op  # bench/op_overhead.py: checks, then times
        med, _, _ = torch_ns_per_op((1,), 1, req["loops"], req["preallocated"])
        return {"ns": [med]}


def worker_main():
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed (warnings, C libraries) goes to stderr
    sys.stdout = sys.stderr
    worker = Worker()
    proto.write(json.dumps({"ok": True, "ready": True}) + "\n")
    proto.flush()
    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "exit":
            break
        try:
            reply = {"ok": True, **getattr(worker, "cmd_" + req["cmd"])(req)}
        except Exception:  # reported to the orchestrator, which raises
            reply = {"ok": False, "error": traceback.format_exc()}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()
    return 0


def cold_main(peer, variant, batch, seed, short=False):
    """A fresh process: first-call costs of one peer (before anything else ran here). Calls:
    seq 10 (first, second, ... then steady), seq 20 and 30 (new shapes), back to seq 10."""
    t0 = time.perf_counter()
    _import_torch()
    import_ms = (time.perf_counter() - t0) * 1e3
    n10, n_new, n_back = (4, 2, 2) if short else (8, 4, 4)
    phases = [(10, n10), (20, n_new), (30, n_new), (10, n_back)]
    args = {seq: [torch.from_numpy(a) for a in workload_args(*make_workload(seed, batch, seq))] for seq, _ in phases}
    script_ms = 0.0
    fn = TORCH_FNS[variant]
    if peer == "torchscript":
        t0 = time.perf_counter()
        fn = torch.jit.script(fn)
        script_ms = (time.perf_counter() - t0) * 1e3
    calls = []
    with torch.no_grad():
        for seq, count in phases:
            for _ in range(count):
                t0 = time.perf_counter_ns()
                fn(*args[seq])
                calls.append({"seq": seq, "ms": (time.perf_counter_ns() - t0) / 1e6})
    at = [c["ms"] for c in calls]
    back = n10 + 2 * n_new
    result = {"peer": peer, "variant": variant, "batch": batch, "import_torch_ms": import_ms,
              "script_ms": script_ms, "first_call_ms": at[0], "second_call_ms": at[1],
              "third_call_ms": at[2], "first_after_new_shape_ms": at[n10], "first_at_third_shape_ms": at[n10 + n_new],
              "p50_steady_ms": statistics.median(at[n10 // 2:n10]),
              "p50_back_to_first_shape_ms": statistics.median(at[back + 1:] or at[back:]), "calls": calls}
    print(json.dumps(result))
    return 0


# --------------------------------------------------------------------------------------------
# Orchestrator.

class WorkerProc:
    def __init__(self, suffix, env_overrides):
        self.suffix = suffix
        env = {**os.environ, **THREAD_ENV}
        env.pop("OPENBLAS_CORETYPE", None)
        env.update(env_overrides)
        self.proc = subprocess.Popen([PY, str(THIS), "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        self.info = None

    def wait_ready(self):
        reply = self.proc.stdout.readline()
        if not reply:
            raise PeerError(f"peer worker '{self.suffix or 'shipped'}' did not start (see stderr above)")
        self.info = self.call("info")

    def call(self, cmd, **req):
        self.proc.stdin.write(json.dumps({"cmd": cmd, **req}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise PeerError(f"peer worker '{self.suffix or 'shipped'}' died during {cmd} (see stderr above)")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise PeerError(f"peer worker '{self.suffix or 'shipped'}' failed in {cmd} {req}:\n{reply.get('error')}")
        return reply

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def stats_ms(samples):
    return {"median_ms": statistics.median(samples), "min_ms": min(samples), "max_ms": max(samples),
            "runs": len(samples)}


class Case:
    """One (worker, peer, ...) timed over interleaved rounds. `request(count)` gives the worker
    command and its arguments for a burst of `count` timed calls; the first `keep_from` samples of
    each burst re-warm caches after the other peers ran and are dropped. Calls slower than
    SLOW_MS run one per burst with nothing dropped (cache state is noise at that length)."""

    SLOW_MS = 20.0

    def __init__(self, worker, label, request, burst, keep_from=1, reply_key="ms", adaptive=True, warmup=None):
        self.worker, self.label, self.request = worker, label, request
        self.burst, self.keep_from, self.reply_key = burst, keep_from, reply_key
        self.adaptive, self.warmup = adaptive, warmup
        self.samples = []
        self.target = 1
        self.meta = {}

    def run(self, count):
        cmd, req = self.request(count)
        return self.worker.call(cmd, **req)[self.reply_key]

    def sample(self):
        values = self.run(self.burst)
        return values[self.keep_from:] if len(values) > self.keep_from else values


def run_interleaved(cases, budget_s, min_runs, max_runs, log):
    """A warm-up per case (one call, or case.warmup) whose timing sets the burst and the number
    of runs that fit the budget; then rounds: each case in turn runs one burst, until every case
    has its runs. Returns the number of rounds."""
    for case in cases:
        t0 = time.perf_counter()
        if case.warmup:
            case.warmup()
        else:
            case.run(1)
        per_call_ms = (time.perf_counter() - t0) * 1e3 / (1 if not case.warmup else case.burst)
        if case.adaptive and per_call_ms > Case.SLOW_MS:
            case.burst, case.keep_from = 1, 0
        kept_per_burst = max(1, case.burst - case.keep_from)
        fit = int(budget_s * 1e3 / max(per_call_ms, 1e-3) * kept_per_burst / case.burst)
        case.target = max(min_runs, min(max_runs, fit))
    rounds = 0
    while any(len(c.samples) < c.target for c in cases):
        for case in cases:
            if len(case.samples) < case.target:
                case.samples.extend(case.sample())
        rounds += 1
    unit = cases[0].reply_key if cases else ""
    log(f"    {rounds} rounds: " + ", ".join(f"{c.label} {statistics.median(c.samples):.3g} {unit}" for c in cases))
    return rounds


def check_errors(errors, label, tol=TOL):
    """The worst relative L2 error of a peer's check; PeerError when any is above tol (or not
    finite: a wrong dtype or shape reads as inf)."""
    worst = max(max(e["rel_l2_h"], e["rel_l2_c"]) for e in errors)
    if not worst <= tol:
        bad = [e for e in errors if not max(e["rel_l2_h"], e["rel_l2_c"]) <= tol]
        raise PeerError(f"peer {label} is wrong: relative L2 error vs the float64 oracle above {tol}: {bad}")
    return worst


def measure(args, log=print):
    """Runs every peer; returns the peers.json document."""
    mode = "tiny" if args.tiny else ("quick" if args.quick else "full")
    plan = PLANS[mode]
    batch, seqs, stream = plan["batch"], plan["seqs"], plan["stream"]
    if args.stream is not None and mode == "full":  # run_all.py passes shapevm.json's stream
        stream = args.stream
    info = cpuinfo()
    configs = blas_configs(args.openblas_dir, args.coretype.split(",") if args.coretype else None)
    doc = {"meta": {"cpu": info["model"], "vendor": info["vendor"], "cpu_family": info["family"],
                    "features": " ".join(f for f in info["flags"] if f.startswith(("avx", "fma", "amx"))),
                    "date": time.strftime("%Y-%m-%d"), "quick": mode != "full", "mode": mode, "threads": 1,
                    "batch": batch, "seed": SEED, "seqs": seqs, "stream": stream,
                    "command": "/usr/bin/python3 bench/peers.py" + "".join(f" {a}" for a in (args.argv or [])),
                    "load_average": list(os.getloadavg()), "configs": []},
           "workload": [], "cold": [], "matmul": [], "elementwise": [], "overhead": [], "notes": []}
    if len(configs) == 1 and family_coretype(info):
        doc["notes"].append("No OpenBLAS found (the shipped libblas.so.3 is " + os.path.realpath(DEFAULT_BLAS) +
                            "): the OPENBLAS_CORETYPE rows are skipped; install libopenblas0-pthread or pass --openblas-dir.")
    t_start = time.perf_counter()
    workers = [WorkerProc(suffix, env) for suffix, env in configs]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    oracle_path = out_dir / "peers_oracle.npz"
    try:
        for w, (_, env) in zip(workers, configs):
            w.wait_ready()
            doc["meta"]["configs"].append({"suffix": w.suffix, "env": dict(env), **{k: w.info[k] for k in (
                "blas", "corename", "openblas_config", "torch", "numpy", "torch_threads", "python")}})
            log(f"peer config '{w.suffix or 'shipped'}': {w.info['blas']}; torch {w.info['torch']} "
                f"({w.info['torch_threads']} thread), numpy {w.info['numpy']}")
        for key in ("torch", "numpy", "blas"):
            doc["meta"][key] = workers[0].info[key]
        doc["meta"]["page_fault_us"] = min(workers[0].call("page_faults")["us_per_page"] for _ in range(3))
        log(f"first touch of a fresh 4 KiB page: {doc['meta']['page_fault_us']:.2f} us")
        # The oracle worker: the fastest BLAS there is (float64 products at seq 128 are slow on the
        # reference BLAS); it saves the oracle's outputs for all workers.
        oracle_worker = next((w for w in workers if w.suffix == "+openblas"), workers[0])
        all_seqs = sorted(set(seqs) | set(stream))
        log(f"float64 oracle for seq {all_seqs} ...")
        oracle_worker.call("oracle", variants=VARIANTS, seqs=all_seqs, batch=batch, seed=SEED, path=str(oracle_path))

        # Correctness before any timing: every peer, every config, every seq it will run (the
        # stream's seqs are checked by the stream's warm-up pass, which comes before its timing).
        checks = {}

        def check(w, peer, variant, check_seqs):
            errors = w.call("check_workload", peer=peer, variant=variant, seqs=check_seqs, batch=batch,
                            seed=SEED, oracle=str(oracle_path))["errors"]
            worst = check_errors(errors, f"{peer}{w.suffix} {variant}")
            key = (w.suffix, peer, variant)
            checks[key] = max(checks.get(key, 0.0), worst)

        for w in workers:
            for peer in BASE_PEERS:
                for variant in VARIANTS:
                    check(w, peer, variant, seqs)
        log(f"correctness: every peer within {TOL} of the float64 oracle at seq {seqs}")

        # TorchScript warm-up (profiling executor) on a few seqs before timing.
        warm_seqs = [s for s in [10, 20, 30] if s in all_seqs] or all_seqs[:3]
        for w in workers:
            for variant in VARIANTS:
                w.call("time_workload", peer="torchscript", variant=variant, seqs=warm_seqs * 2, batch=batch, seed=SEED)

        burst = plan["burst"]
        for variant in VARIANTS:
            for seq in seqs + (["stream"] if stream else []):
                log(f"  workload {variant} seq {seq}")
                cases = []
                for w in workers:
                    for peer in BASE_PEERS:
                        if seq == "stream":
                            def req(count, peer=peer, variant=variant):
                                return "time_workload", {"peer": peer, "variant": variant, "seqs": stream,
                                                         "batch": batch, "seed": SEED}
                            case = Case(w, peer + w.suffix, req, burst=len(stream), keep_from=0, adaptive=False,
                                        warmup=lambda w=w, peer=peer, variant=variant: check(w, peer, variant, stream))
                        else:
                            def req(count, peer=peer, variant=variant, seq=seq):
                                return "time_workload", {"peer": peer, "variant": variant, "seqs": [seq] * count,
                                                         "batch": batch, "seed": SEED}
                            case = Case(w, peer + w.suffix, req, burst=burst)
                        case.meta = {"peer": peer + w.suffix, "base_peer": peer, "config": w.suffix or "shipped",
                                     "blas": w.info["blas"], "variant": variant, "seq": seq, "batch": batch}
                        cases.append(case)
                if seq == "stream":
                    n = len(stream)
                    budget_s, min_passes, max_passes = plan["stream_budget"]
                    run_interleaved(cases, budget_s, min_passes * n, max_passes * n, log)
                    for c in cases:  # whole passes only
                        c.samples = c.samples[: len(c.samples) // n * n]
                else:
                    run_interleaved(cases, *plan["workload"], log)
                for c in cases:
                    row = {**c.meta, **stats_ms(c.samples),
                           "rel_l2_vs_oracle": checks[(c.worker.suffix, c.meta["base_peer"], variant)]}
                    if seq == "stream":
                        # Calls follow the stream in order: per-call us per token, as shapevm bench
                        # reports its stream rows, and total time over total tokens.
                        per_token = sorted(ms * 1e3 / (batch * stream[i % len(stream)]) for i, ms in enumerate(c.samples))
                        row["stream"] = stream
                        row["tokens_per_call"] = batch * sum(stream) / len(stream)
                        row["us_per_token"] = sum(c.samples) * 1e3 / (row["tokens_per_call"] * len(c.samples))
                        row.update(median_us_per_token=statistics.median(per_token), min_us_per_token=per_token[0],
                                   max_us_per_token=per_token[-1])
                    else:
                        row["tokens_per_call"] = batch * seq
                        row["us_per_token"] = row["median_ms"] * 1e3 / (batch * seq)
                        row.update(median_us_per_token=row["us_per_token"], min_us_per_token=row["min_ms"] * 1e3 / (batch * seq),
                                   max_us_per_token=row["max_ms"] * 1e3 / (batch * seq))
                    doc["workload"].append(row)
        oracle_path.unlink()

        # Matmul.
        for (m, k, n) in plan["matmul"]:
            cases = []
            for w in workers:
                for peer in ["pytorch", "numpy"]:
                    err = w.call("check_matmul", peer=peer, m=m, k=k, n=n)["rel_l2"]
                    if not err <= TOL:
                        raise PeerError(f"matmul peer {peer}{w.suffix} {m}x{k}x{n} is wrong: relative L2 {err}")
                    case = Case(w, peer + w.suffix, lambda cnt, peer=peer, m=m, k=k, n=n:
                                ("time_matmul", {"peer": peer, "m": m, "k": k, "n": n, "count": cnt}), burst=burst)
                    case.meta = {"peer": peer + w.suffix, "base_peer": peer, "config": w.suffix or "shipped",
                                 "blas": w.info["blas"], "m": m, "k": k, "n": n, "rel_l2_vs_oracle": err}
                    cases.append(case)
            log(f"  matmul {m}x{k}x{n}")
            run_interleaved(cases, *plan["matmul_budget"], log)
            for c in cases:
                flops = 2.0 * m * k * n
                g = sorted(flops / (ms * 1e6) for ms in c.samples)
                doc["matmul"].append({**c.meta, **stats_ms(c.samples), "median_gflops": statistics.median(g),
                                      "min_gflops": g[0], "max_gflops": g[-1],
                                      "workload_shape": (m, k, n) in WORKLOAD_MATMULS})

        # Elementwise and memcpy: BLAS plays no part, so the shipped worker only.
        w = workers[0]
        n_elem = plan["ew_n"]
        cases = []
        for peer, op, name, flops, nbytes in ELEMENTWISE:
            err = w.call("check_elementwise", peer=peer, op=op, n=n_elem)["rel_l2"]
            if not err <= TOL:
                raise PeerError(f"elementwise peer {peer} {name} is wrong: relative L2 {err}")
            case = Case(w, f"{peer} {name}", lambda cnt, peer=peer, op=op:
                        ("time_elementwise", {"peer": peer, "op": op, "n": n_elem, "count": cnt}), burst=burst)
            case.meta = {"peer": peer, "op": op, "chain": name, "n": n_elem, "flops_per_elem": flops,
                         "bytes_per_elem": nbytes, "rel_l2_vs_oracle": err}
            cases.append(case)
        log(f"  elementwise n={n_elem}")
        run_interleaved(cases, *plan["ew_budget"], log)
        for c in cases:
            med = statistics.median(c.samples)
            nbytes = c.meta["bytes_per_elem"] * n_elem
            row = {**c.meta, **stats_ms(c.samples), "gbps": nbytes / (med * 1e6),
                   "max_gbps": nbytes / (min(c.samples) * 1e6), "min_gbps": nbytes / (max(c.samples) * 1e6),
                   "gelem_per_s": n_elem / (med * 1e6)}
            if c.meta["flops_per_elem"]:
                row["gflops"] = c.meta["flops_per_elem"] * n_elem / (med * 1e6)
            doc["elementwise"].append(row)

        # Per-op overhead, torch.add on 1-element tensors (rounds alternate the two forms).
        loops = plan["overhead_loops"]
        cases = []
        for name, pre in [("torch.add(a, b) 1-elem f32", False), ("torch.add(a, b, out=c) 1-elem f32", True)]:
            case = Case(w, name, lambda cnt, pre=pre: ("time_overhead", {"loops": loops, "preallocated": pre}),
                        burst=1, keep_from=0, reply_key="ns", adaptive=False)
            case.meta = {"peer": "pytorch", "what": name, "loops_per_round": loops}
            cases.append(case)
        log("  per-op overhead")
        run_interleaved(cases, 0.0, plan["overhead_rounds"], plan["overhead_rounds"], log)
        for c in cases:
            doc["overhead"].append({**c.meta, "ns": statistics.median(c.samples), "min_ns": min(c.samples),
                                    "max_ns": max(c.samples), "rounds": len(c.samples)})
    finally:
        for w in workers:
            w.close()
        if oracle_path.exists():
            oracle_path.unlink()

    # First-call costs, each in a fresh process (shipped BLAS).
    for peer, variant in plan["cold"]:
        env = {**os.environ, **THREAD_ENV}
        env.pop("OPENBLAS_CORETYPE", None)
        proc = subprocess.run([PY, str(THIS), "--cold", peer, variant, "--batch", str(batch)]
                              + (["--cold-short"] if mode != "full" else []),
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise PeerError(f"cold-start run {peer} {variant} failed:\n{proc.stderr}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        doc["cold"].append(row)
        log(f"  cold {peer} {variant}: first call {row['first_call_ms']:.1f} ms, second {row['second_call_ms']:.1f} ms, "
            f"new shape {row['first_after_new_shape_ms']:.1f} ms, steady {row['p50_steady_ms']:.2f} ms")
    doc["meta"]["wall_s"] = time.perf_counter() - t_start
    return doc


def print_summary(doc, out=sys.stdout):
    meta = doc["meta"]
    print(f"CPU: {meta['cpu']}; torch {meta.get('torch')}, numpy {meta.get('numpy')}, 1 thread; date {meta['date']}; "
          f"peers took {meta.get('wall_s', 0):.0f} s", file=out)
    for note in doc["notes"]:
        print(f"note: {note}", file=out)
    print("\n| peer | BLAS | variant | seq | ms/call median (min-max) | us/token | runs |", file=out)
    print("|---|---|---|---:|---:|---:|---:|", file=out)
    for r in doc["workload"]:
        print(f"| {r['peer']} | {r['blas']} | {r['variant']} | {r['seq']} | {r['median_ms']:.3g} "
              f"({r['min_ms']:.3g}-{r['max_ms']:.3g}) | {r['us_per_token']:.3g} | {r['runs']} |", file=out)
    print("\n| peer | m x k x n | GFLOP/s median (min-max) |", file=out)
    print("|---|---|---:|", file=out)
    for r in doc["matmul"]:
        print(f"| {r['peer']} | {r['m']}x{r['k']}x{r['n']} | {r['median_gflops']:.1f} "
              f"({r['min_gflops']:.1f}-{r['max_gflops']:.1f}) |", file=out)
    print("\n| peer | op | n | GB/s | GFLOP/s |", file=out)
    print("|---|---|---:|---:|---:|", file=out)
    for r in doc["elementwise"]:
        print(f"| {r['peer']} | {r['chain']} | {r['n']} | {r['gbps']:.1f} | {r.get('gflops', float('nan')):.1f} |", file=out)
    for r in doc["overhead"]:
        print(f"overhead: {r['what']}: {r['ns']:.0f} ns ({r['min_ns']:.0f}-{r['max_ns']:.0f})", file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="seq 10 and 30 only, fewer repeats, 1M elementwise")
    parser.add_argument("--out", default=str(ROOT / "build" / "bench-out"), help="directory for peers.json")
    parser.add_argument("--openblas-dir", default=None,
                        help="directory with OpenBLAS's libblas.so.3 when it is not the system default "
                             "(also SHAPEVM_BENCH_OPENBLAS_DIR; default: Debian's openblas-* dirs)")
    parser.add_argument("--coretype", default=None,
                        help="comma list of OPENBLAS_CORETYPE values to run (default: the CPU family's, e.g. ZEN)")
    parser.add_argument("--stream", type=lambda v: [int(x) for x in v.split(",") if x], default=None,
                        help="comma list of seq for the stream rows (default: peers.STREAM; run_all.py passes the "
                             "list from shapevm.json so both sides time the same stream)")
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # the pytest's plan
    parser.add_argument("--batch", type=int, default=BATCH, help=argparse.SUPPRESS)  # for --cold
    parser.add_argument("--cold-short", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cold", nargs=2, metavar=("PEER", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main()
    if args.cold:
        return cold_main(args.cold[0], args.cold[1], args.batch, SEED, args.cold_short)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        doc = measure(args, log)
    except PeerError as e:
        print(f"peers: ERROR: {e}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers.json").write_text(json.dumps(doc, indent=1))
    print_summary(doc)
    print(f"\nwrote {out / 'peers.json'}")
    return 0


if __name__ == "__main__":
    for key, value in THREAD_ENV.items():
        os.environ.setdefault(key, value)
    sys.exit(main())
