#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Warm-start tier-up: time to the first compiled call, cold vs warm kernel cache (issue 23/26).

Runs the reference cell (examples/lstm_cell.py, batch 32, seq cycling 10/20/30) through
`shapevm.load(..., jit_level=2)` in a fresh Python process per run, for each build given, in two
modes: `cold` (a fresh SHAPEVM_CACHE_DIR) and `warm` (a cache directory that two earlier processes
of the same build filled, compiling at once and waiting for it). Rounds are interleaved; it prints medians of: calls until the program
first had compiled code (a kernel or region installed), the process CPU time (all threads:
time.process_time) and wall time to that point, and the whole run's CPU and wall time.

With --installs N it measures instead the first-sight install itself (issue 23, "warm install
<= 10 ms"): N `shapevm run --jit-wait --jit-log` processes per build on its warm cache, builds
interleaved (every build's cache filled with the first build's tuning database, so all install the same
kernel choices), each reporting the compile-thread CPU ms of its first-sight region install (JIT log:
"Installed fused region ... ms compile-thread CPU") and whether its planning run was kept by an
earlier process; it prints the median, min and max per build.

Usage: /usr/bin/python3 bench/first_sight_warm.py [--build LABEL=BUILD_DIR ...] [--iters 60] [--rounds 5]
                                                   [--installs N]
  (default: --build after=build; e.g. add --build before=/path/to/main/build)
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np
import shapevm
iters = int(sys.argv[1])
cpu0, wall0 = time.process_time(), time.perf_counter()
m = shapevm.load(sys.argv[2], jit_level=2, wait=sys.argv[3] == "1")
fn = m[m.functions[0]]
rng = np.random.default_rng(0)
p = {"W_ih": rng.standard_normal((1024, 128), dtype=np.float32) * 0.05,
     "W_hh": rng.standard_normal((1024, 256), dtype=np.float32) * 0.05,
     "b_ih": rng.standard_normal(1024, dtype=np.float32), "b_hh": rng.standard_normal(1024, dtype=np.float32)}
first = None
for i in range(iters):
    seq = (10, 20, 30)[i % 3]
    fn(x=rng.standard_normal((32, seq, 128), dtype=np.float32), h=rng.standard_normal((32, 256), dtype=np.float32),
       c=rng.standard_normal((32, 256), dtype=np.float32), **p)
    s = m.stats()
    if first is None and (s.get("kernels_installed", 0) > 0 or s.get("launches_compiled", 0) > 0):
        first = (i + 1, time.process_time() - cpu0, time.perf_counter() - wall0)
s = m.stats()
print(json.dumps({"first_calls": first[0] if first else None, "first_cpu": first[1] if first else None,
                  "first_wall": first[2] if first else None, "cpu": time.process_time() - cpu0,
                  "wall": time.perf_counter() - wall0, "stats": s}))
"""


def child(build, cache, iters, prime=False):
    env = dict(os.environ, SHAPEVM_CACHE_DIR=cache, PYTHONPATH=str(Path(build) / "python"))
    if prime:  # fill the cache: compile (and tune) at once and wait for it
        env.update(SHAPEVM_WARMUP="0", SHAPEVM_HOT_MS="0", SHAPEVM_HOT_COUNT="1")
    proc = subprocess.run(["/usr/bin/python3", "-c", CHILD, str(iters), str(ROOT / "examples" / "lstm_cell.py"),
                           "1" if prime else "0"],
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{build}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cli(build, cache, iters, prime=False):
    """One `shapevm run` of the cell (--jit-wait --jit-log): its log."""
    env = dict(os.environ, SHAPEVM_CACHE_DIR=cache)
    if prime:
        env.update(SHAPEVM_WARMUP="0", SHAPEVM_HOT_MS="0", SHAPEVM_HOT_COUNT="1")
    proc = subprocess.run([str(Path(build) / "tools" / "shapevm"), "run", str(ROOT / "examples" / "lstm_cell.py"),
                           "--dim", "batch=32", "--dim", "seq=10,20,30", "--jit-level", "O2", "--iters", str(iters),
                           "--jit-wait", "--jit-log"], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{build}: {proc.stderr[-2000:]}")
    return proc.stdout + proc.stderr


def install_cpu(build, cache):
    """One CLI process on a warm cache: (compile-thread CPU ms of its first-sight install, kept run?)."""
    log = cli(build, cache, 3)
    cpu = re.search(r"Installed fused region .*?([0-9.]+)ms compile-thread CPU", log)
    if cpu is None or "on first sight" not in log:
        raise SystemExit(f"{build}: no first-sight install:\n{log[-2000:]}")
    return float(cpu.group(1)), "kept by an earlier process" in log


def installs(builds, count):
    with tempfile.TemporaryDirectory(prefix="svm-install-") as tmp:
        caches = {}
        for label, build in builds:  # fill the cache, then one warm process (it keeps its planning run)
            caches[label] = os.path.join(tmp, label)
            if label != builds[0][0]:
                # The first build's tuning database: every build installs the same kernel choices (on
                # a loaded host the tuner's pick between near-equal candidates, e.g. oneDNN or the
                # JIT matmul, changes from run to run, and a oneDNN step costs its primitive's
                # creation in the validation run).
                os.makedirs(caches[label])
                shutil.copy(os.path.join(caches[builds[0][0]], "tuning.jsonl"), caches[label])
            cli(build, caches[label], 12, prime=True)
            install_cpu(build, caches[label])
        for label, _ in builds:
            with open(os.path.join(caches[label], "tuning.jsonl")) as db:
                picks = [json.loads(line) for line in db if line.strip()]
            print(f"{label}: tuned picks " + ", ".join(f"{p.get('signature', '?')[:40]} {p.get('impl', '?')}" for p in picks))
        runs = {label: [] for label, _ in builds}
        for _ in range(count):
            for label, build in builds:
                runs[label].append(install_cpu(build, caches[label]))
    print(f"{'build':8} {'installs':>8} {'kept runs':>9} {'median CPU ms':>14} {'min':>7} {'max':>7}")
    for label, values in runs.items():
        cpu = [v[0] for v in values]
        print(f"{label:8} {len(cpu):>8} {sum(v[1] for v in values):>9} {statistics.median(cpu):>14.1f} "
              f"{min(cpu):>7.1f} {max(cpu):>7.1f}")
    print(json.dumps(runs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="append", default=[], help="LABEL=BUILD_DIR (its python/ holds the module)")
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--installs", type=int, default=0, help="measure N first-sight installs per build instead")
    args = ap.parse_args()
    builds = [b.split("=", 1) for b in (args.build or ["after=build"])]
    if args.installs:
        installs(builds, args.installs)
        return
    results = {(label, mode): [] for label, _ in builds for mode in ("cold", "warm")}
    with tempfile.TemporaryDirectory(prefix="svm-sight-") as tmp:
        warm = {}
        for label, build in builds:  # two earlier processes fill each build's warm cache
            warm[label] = os.path.join(tmp, f"warm-{label}")
            for _ in range(2):
                child(build, warm[label], 12, prime=True)
        for _ in range(args.rounds):
            for label, build in builds:
                cold = os.path.join(tmp, f"cold-{label}")
                shutil.rmtree(cold, ignore_errors=True)
                results[(label, "cold")].append(child(build, cold, args.iters))
                results[(label, "warm")].append(child(build, warm[label], args.iters))
    print(f"{'build':8} {'mode':5} {'calls to 1st compiled':>22} {'CPU s to 1st':>13} {'wall s to 1st':>14} "
          f"{'run CPU s':>10} {'run wall s':>11}")
    for (label, mode), runs in results.items():
        def med(key):
            vals = [r[key] for r in runs if r[key] is not None]
            return statistics.median(vals) if vals else float("nan")
        print(f"{label:8} {mode:5} {med('first_calls'):>22.1f} {med('first_cpu'):>13.3f} {med('first_wall'):>14.3f} "
              f"{med('cpu'):>10.3f} {med('wall'):>11.3f}")
    print(json.dumps({f"{k[0]}/{k[1]}": [{kk: vv for kk, vv in r.items() if kk != "stats"} for r in v]
                      for k, v in results.items()}))


if __name__ == "__main__":
    main()
