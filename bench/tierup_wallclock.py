#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Whole-process wall clock of the reference cell at O0 and O2 (issue 23, items 5 and 7).

Runs `shapevm run examples/lstm_cell.py --dim batch=32 --dim seq=10,20,30 --iters N --quiet` as a
fresh process with a fresh SHAPEVM_CACHE_DIR each time (compile and tuning included, nothing
reused), for every binary given and every JIT level, interleaved round by round, and prints the
median wall time per configuration and the O0/O2 ratio of each binary (medians of the same rounds),
and the same for the process's CPU time (user + system, all threads: on a machine shared with other
work, wall time also counts waiting for a core).

Usage: /usr/bin/python3 bench/tierup_wallclock.py [--bin LABEL=PATH[@KEY=VALUE,...] ...] [--iters 60,300]
                                                   [--rounds 5] [--set KEY=VALUE ...] [--json FILE]
A binary's `@KEY=VALUE,...` suffix sets tunables for its runs only, so one build can be its own peer
(e.g. `--bin after=build/tools/shapevm --bin before=build/tools/shapevm@compile_payoff_ms=0`).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(binary, level, iters, sets):
    with tempfile.TemporaryDirectory(prefix="svm-tierup-") as cache:
        env = dict(os.environ, SHAPEVM_CACHE_DIR=cache)
        cmd = [binary, "run", str(ROOT / "examples" / "lstm_cell.py"), "--dim", "batch=32", "--dim", "seq=10,20,30",
               "--iters", str(iters), "--quiet", "--jit-level", level]
        for s in sets:
            cmd += ["--set", s]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return wall, cpu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", action="append", default=[], help="LABEL=PATH of a shapevm binary (default: build/tools/shapevm)")
    ap.add_argument("--iters", default="60,300")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE passed to every run as --set")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    bins = [b.split("=", 1) for b in args.bin] or [["this", str(ROOT / "build" / "tools" / "shapevm")]]
    own_sets = {}  # label -> tunables for that binary's runs only
    for b in bins:
        path, _, extra = b[1].partition("@")
        b[1] = path
        own_sets[b[0]] = [s for s in extra.split(",") if s]
    iters = [int(x) for x in args.iters.split(",")]
    times = {}  # (label, level, iters) -> [s]
    cpus = {}  # the same, CPU seconds
    for r in range(args.rounds):
        for n in iters:
            for label, path in bins:
                for level in ("O0", "O2"):
                    t, c = one_run(path, level, n, args.set + own_sets[label])
                    times.setdefault((label, level, n), []).append(t)
                    cpus.setdefault((label, level, n), []).append(c)
                    print(f"round {r + 1}: {label} {level} --iters {n}: {t:.2f} s wall, {c:.2f} s CPU", file=sys.stderr,
                          flush=True)
    doc = {"rounds": args.rounds, "sets": args.set, "results": []}
    print(f"{'binary':<12} {'iters':>5} {'O0 s':>8} {'O2 s':>8} {'O0/O2':>7}   {'O0 CPU':>7} {'O2 CPU':>7} {'O0/O2':>6}"
          f"   (medians of {args.rounds} interleaved rounds)")
    for n in iters:
        for label, _ in bins:
            o0 = statistics.median(times[(label, "O0", n)])
            o2 = statistics.median(times[(label, "O2", n)])
            ratios = [a / b for a, b in zip(times[(label, "O0", n)], times[(label, "O2", n)])]
            c0 = statistics.median(cpus[(label, "O0", n)])
            c2 = statistics.median(cpus[(label, "O2", n)])
            print(f"{label:<12} {n:>5} {o0:>8.2f} {o2:>8.2f} {o0 / o2:>6.2f}x   {c0:>7.2f} {c2:>7.2f} {c0 / c2:>5.2f}x"
                  f"  (per-round wall ratios {min(ratios):.2f}..{max(ratios):.2f})")
            doc["results"].append({"binary": label, "iters": n, "o0_s": times[(label, "O0", n)],
                                   "o2_s": times[(label, "O2", n)], "o0_median_s": o0, "o2_median_s": o2,
                                   "o0_cpu_s": cpus[(label, "O0", n)], "o2_cpu_s": cpus[(label, "O2", n)]})
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
