#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Whole-process wall clock and CPU of the reference cell at O0 and O2 (issue 23, items 5 and 7).

Runs `shapevm run examples/lstm_cell.py --dim batch=32 --dim seq=10,20,30 --iters N --quiet` as a
fresh process with a fresh SHAPEVM_CACHE_DIR each time (compile and tuning included, nothing
reused), for every binary given and every JIT level, interleaved round by round, and prints the
median wall time per configuration and the O0/O2 ratio of each binary (medians of the same rounds),
and the same for the process's CPU time (user + system, all threads: on a machine shared with other
work, wall time also counts waiting for a core; on one core the CPU ratio is the wall ratio an idle
machine would give). Each O2 run also writes --stats-json, from which the table takes the compile
threads' CPU (all installs, and the first region's install), the calls that ran before the first
region was installed, and the tuning CPU. With two or more --iters, the marginal CPU of one more
iteration per binary and level (the difference of the longest and shortest runs' medians).

--installs measures single installs instead (the targets "O1 op kernel, cold, end to end" and "O2
region, cold, untuned install"): `--jit-wait` runs at O1 and O2 with fresh caches, and per install
the wall time queued and compiling and the CPU of every thread that worked on it, split into shape
inference/planning, codegen, validation+patch and tuning. --per-kernel adds a table per kernel
signature (median and worst; the targets "every O1 kernel under 30 ms" and "every validation
under 5 ms").

Usage: /usr/bin/python3 bench/tierup_wallclock.py [--bin LABEL=PATH[@KEY=VALUE,...] ...] [--iters 60,300]
                                                   [--rounds 5] [--set KEY=VALUE ...] [--json FILE] [--installs]
                                                   [--per-kernel]
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


def one_run(binary, level, iters, sets, extra=()):
    """(wall s, process CPU s, the --stats-json document) of one fresh process."""
    with tempfile.TemporaryDirectory(prefix="svm-tierup-") as cache:
        env = dict(os.environ, SHAPEVM_CACHE_DIR=cache)
        stats = Path(cache) / "stats.json"
        cmd = [binary, "run", str(ROOT / "examples" / "lstm_cell.py"), "--dim", "batch=32", "--dim", "seq=10,20,30",
               "--iters", str(iters), "--quiet", "--jit-level", level, "--stats-json", str(stats), *extra]
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
        doc = json.loads(stats.read_text()) if stats.exists() else {}
        return wall, cpu, doc


def o2_figures(doc, iters):
    """What a run's stats say about its tier-up: compile CPU, the first region's install, calls before it."""
    compile_ = doc.get("compile", {})
    installs = compile_.get("installs", [])
    regions = [e for e in installs if e.get("region") and "(tuned)" not in e["signature"]]
    first = min(regions, key=lambda e: e["start_ms"]) if regions else None
    served = doc.get("regions", {}).get("runs", 0)
    return {
        "compile_cpu_ms": compile_.get("cpu_ms", 0.0),
        "tuning_cpu_ms": compile_.get("tuning_cpu_ms", 0.0),
        "installs": len(installs),
        "first_region_cpu_ms": first["cpu_ms"] if first else None,
        "first_region_done_ms": first["start_ms"] + first["wall_ms"] if first else None,
        # Runs of the cell the regions did not serve (each run enters the cell's region once).
        "calls_before_region": iters - served if regions else iters,
    }


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def run_pairs(args, bins, own_sets, iters):
    times, cpus, figs = {}, {}, {}  # (label, level, iters) -> [s], [CPU s], [o2_figures]
    for r in range(args.rounds):
        for n in iters:
            for label, path in bins:
                for level in ("O0", "O2"):
                    t, c, doc = one_run(path, level, n, args.set + own_sets[label])
                    key = (label, level, n)
                    times.setdefault(key, []).append(t)
                    cpus.setdefault(key, []).append(c)
                    f = o2_figures(doc, n)
                    figs.setdefault(key, []).append(f)
                    more = ""
                    if level == "O2":
                        more = (f", compile CPU {f['compile_cpu_ms']:.0f} ms (tuning {f['tuning_cpu_ms']:.0f}), "
                                f"{f['calls_before_region']} calls before the region")
                    print(f"round {r + 1}: {label} {level} --iters {n}: {t:.2f} s wall, {c:.2f} s CPU{more}",
                          file=sys.stderr, flush=True)
    doc = {"rounds": args.rounds, "sets": args.set, "results": []}
    print(f"{'binary':<12} {'iters':>5} {'O0 s':>7} {'O2 s':>7} {'O0/O2':>6}   {'O0 CPU':>6} {'O2 CPU':>6} {'O0/O2':>6}"
          f"  {'O2 compile CPU ms':>17} {'region CPU ms':>13} {'calls before':>12}   (medians of {args.rounds} "
          "interleaved rounds)")
    for n in iters:
        for label, _ in bins:
            o0, o2 = med(times[(label, "O0", n)]), med(times[(label, "O2", n)])
            ratios = [a / b for a, b in zip(times[(label, "O0", n)], times[(label, "O2", n)])]
            c0, c2 = med(cpus[(label, "O0", n)]), med(cpus[(label, "O2", n)])
            cratios = [a / b for a, b in zip(cpus[(label, "O0", n)], cpus[(label, "O2", n)])]
            f2 = figs[(label, "O2", n)]
            compile_cpu = med([f["compile_cpu_ms"] for f in f2])
            region_cpu = med([f["first_region_cpu_ms"] for f in f2])
            before = med([f["calls_before_region"] for f in f2])
            print(f"{label:<12} {n:>5} {o0:>7.2f} {o2:>7.2f} {o0 / o2:>5.2f}x   {c0:>6.2f} {c2:>6.2f} {c0 / c2:>5.2f}x"
                  f"  {compile_cpu:>17.0f} {region_cpu:>13.0f} {before:>12.0f}"
                  f"   (per-round ratios wall {min(ratios):.2f}..{max(ratios):.2f}, CPU {min(cratios):.2f}..{max(cratios):.2f})")
            doc["results"].append({"binary": label, "iters": n, "o0_s": times[(label, "O0", n)],
                                   "o2_s": times[(label, "O2", n)], "o0_median_s": o0, "o2_median_s": o2,
                                   "o0_cpu_s": cpus[(label, "O0", n)], "o2_cpu_s": cpus[(label, "O2", n)],
                                   "o2_tierup": f2})
    if len(iters) >= 2:
        # The cost of one more iteration once tiered up: the CPU difference between the longest and
        # the shortest runs over their iteration difference (start-up and compiles cancel out).
        lo, hi = min(iters), max(iters)
        print(f"marginal CPU per iteration, runs of {lo} vs {hi} iterations (medians):")
        for label, _ in bins:
            per = {lev: (med(cpus[(label, lev, hi)]) - med(cpus[(label, lev, lo)])) * 1000 / (hi - lo)
                   for lev in ("O0", "O2")}
            print(f"{label:<12} O0 {per['O0']:.2f} ms  O2 {per['O2']:.2f} ms  O0/O2 {per['O0'] / per['O2']:.2f}x")
            doc.setdefault("marginal_cpu_ms", {})[label] = per
    return doc


def run_installs(args, bins, own_sets):
    """--jit-wait at O1 and O2, fresh caches: every install's queue/compile wall time and CPU split."""
    keys = ("cpu_ms", "thread_cpu_ms", "shape_inference_cpu_ms", "codegen_cpu_ms", "validation_patch_cpu_ms",
            "tuning_cpu_ms", "wall_ms", "queued_ms")
    rows = {}  # (label, what) -> list of per-install dicts
    for r in range(args.rounds):
        for label, path in bins:
            for level in ("O1", "O2"):
                # Warm-up (3) and hot detection (5 runs) with default tunables; --jit-wait installs
                # before the next run, so the last runs see the installed kernels (and O2 its tuning).
                _, _, doc = one_run(path, level, 10, args.set + own_sets[label], ["--jit-wait"])
                for e in doc.get("compile", {}).get("installs", []):
                    # The compile thread's own CPU: with its helpers on free cores, what an idle machine waits.
                    e["thread_cpu_ms"] = e["cpu_ms"] - e.get("helper_cpu_ms", 0.0)
                    if level == "O1":
                        what = "O1 op kernel"
                    elif e["region"]:
                        what = "O2 region, tuned" if "(tuned)" in e["signature"] else "O2 region, untuned install"
                    else:
                        what = "O2 op kernel"
                    rows.setdefault((label, what), []).append(e)
                print(f"round {r + 1}: {label} {level}: {len(doc.get('compile', {}).get('installs', []))} installs",
                      file=sys.stderr, flush=True)
    print(f"{'binary':<8} {'what':<28} {'n':>3} {'CPU ms':>7} {'thread':>7} {'shape/plan':>10} {'codegen':>8} "
          f"{'valid+patch':>11} {'tuning':>7} {'wall ms':>8} {'queued ms':>9}   (medians over installs; max CPU; "
          "thread: the compile thread's share, helpers excluded)")
    out = []
    for (label, what), events in sorted(rows.items()):
        m = {k: med([e[k] for e in events]) for k in keys}
        worst = max(e["cpu_ms"] for e in events)
        print(f"{label:<8} {what:<28} {len(events):>3} {m['cpu_ms']:>7.1f} {m['thread_cpu_ms']:>7.1f} "
              f"{m['shape_inference_cpu_ms']:>10.1f} "
              f"{m['codegen_cpu_ms']:>8.1f} {m['validation_patch_cpu_ms']:>11.1f} {m['tuning_cpu_ms']:>7.1f} "
              f"{m['wall_ms']:>8.1f} {m['queued_ms']:>9.1f}   max {worst:.1f}")
        out.append({"binary": label, "what": what, "medians": m, "max_cpu_ms": worst, "installs": events})
    if args.per_kernel:
        print_per_kernel(rows, [label for label, _ in bins])
    return {"rounds": args.rounds, "sets": args.set, "installs": out}


def print_per_kernel(rows, labels):
    """Per O1 kernel and per O2 region: median and worst CPU, codegen and validation+patch of every
    binary, compiled installs only (an install whose codegen took under 1 ms reused code compiled
    earlier in the process; its validation is listed all the same)."""
    what_rows = sorted({what for _, what in rows if what != "O2 region, tuned"})
    print(f"{'what':<28} {'kernel':<44} {'binary':<8} {'n':>3} {'CPU med/max':>13} {'codegen med/max':>16} "
          f"{'valid med/max':>14}")
    for what in what_rows:
        signatures = sorted({e["signature"] for label in labels for e in rows.get((label, what), [])})
        for sig in signatures:
            for label in labels:
                events = [e for e in rows.get((label, what), []) if e["signature"] == sig]
                if not events:
                    continue
                compiled = [e for e in events if e["codegen_cpu_ms"] >= 1.0] or events

                def mm(key, es):
                    vals = [e[key] for e in es]
                    return f"{med(vals):.1f}/{max(vals):.1f}"

                print(f"{what:<28} {sig[:44]:<44} {label:<8} {len(events):>3} {mm('cpu_ms', compiled):>13} "
                      f"{mm('codegen_cpu_ms', compiled):>16} {mm('validation_patch_cpu_ms', events):>14}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", action="append", default=[], help="LABEL=PATH of a shapevm binary (default: build/tools/shapevm)")
    ap.add_argument("--iters", default="60,300")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE passed to every run as --set")
    ap.add_argument("--installs", action="store_true", help="per-install figures from --jit-wait runs at O1 and O2")
    ap.add_argument("--per-kernel", action="store_true",
                    help="with --installs: median and worst CPU, codegen and validation per kernel signature")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    bins = [b.split("=", 1) for b in args.bin] or [["this", str(ROOT / "build" / "tools" / "shapevm")]]
    own_sets = {}  # label -> tunables for that binary's runs only
    for b in bins:
        path, _, extra = b[1].partition("@")
        b[1] = path
        own_sets[b[0]] = [s for s in extra.split(",") if s]
    if args.installs:
        doc = run_installs(args, bins, own_sets)
    else:
        doc = run_pairs(args, bins, own_sets, [int(x) for x in args.iters.split(",")])
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
