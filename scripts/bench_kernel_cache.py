#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Measures the compiled-kernel cache and validation cost (issue 23, BENCHMARKS.md) on the
# reference cell: per-kernel validation at O1, and a second process's per-region install at O2
# from a warm cache, for this build and a peer build (e.g. main's), interleaved, medians.
# Usage: scripts/bench_kernel_cache.py --shapevm build/tools/shapevm [--peer OTHER/shapevm] [--repeats 3]
#        [--peer-set region_plan_smallest=0] [--hot-count 12] [--o1-warm] [--o1-only]
import argparse
import re
import statistics
import subprocess
import sys
import tempfile

ARGS = ["run", "examples/lstm_cell.py", "--dim", "batch=32", "--dim", "seq=10,20,30", "--iters", "30",
        "--jit-wait", "--stats", "-q", "--jit-log"]
# Per O1 install: codegen, validation+patch wall and (builds that log it) the compile thread's CPU.
INSTALLED = re.compile(r" for (\S+) \(.*codegen ([0-9.]+)ms, validation\+patch ([0-9.]+)ms(?:, ([0-9.]+)ms compile-thread CPU)?")
COMPILE = re.compile(r"jit: compile time ([0-9.]+) ms \(shape inference ([0-9.]+) ms, codegen ([0-9.]+) ms, "
                     r"validation\+patch ([0-9.]+) ms\)")
INSTALLS = re.compile(r"(\d+) kernels installed")
CACHE = re.compile(r"kernel cache: (\d+) kernels from the cache, (\d+) LLVM codegens")
REGION_CPU = re.compile(r"Installed (?:tuned )?fused region .*; ([0-9.]+)ms wall, ([0-9.]+)ms compile-thread CPU\)")


def run(binary, cache_dir, level, extra=()):
    env = {"SHAPEVM_CACHE_DIR": cache_dir, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([binary] + ARGS + ["--jit-level", level, *extra], env=env, capture_output=True, text=True,
                         timeout=900)
    if out.returncode != 0:
        sys.exit(f"{binary} failed: {out.stderr[-2000:]}")
    return out.stdout + out.stderr


def o1_validation(binary, extra=(), warm=False):
    """Per-kernel validation+patch (wall ms, compile-thread CPU ms or None) of an O1 process; with
    `warm`, of a second process on the first one's kernel cache (validation is then nearly all of
    each install)."""
    with tempfile.TemporaryDirectory() as d:
        if warm:
            run(binary, d, "O1", extra)
        text = run(binary, d, "O1", extra)
    return [(float(v), float(c) if c else None, sig) for sig, _, v, c in INSTALLED.findall(text)]


def o2_second_process(binary, extra=()):
    with tempfile.TemporaryDirectory() as d:
        run(binary, d, "O2", extra)  # warms the tuning database (and, with a kernel cache, the kernels)
        text = run(binary, d, "O2", extra)
    total, plan, codegen, validate = (float(x) for x in COMPILE.search(text).groups())
    installs = int(INSTALLS.search(text).group(1))
    cache = CACHE.search(text)
    # The compile thread's own CPU per region install (builds that log it): its work without the
    # waits for a core that its lowered priority makes long on a busy host.
    cpu = [float(c) for _, c in REGION_CPU.findall(text)]
    return {"per_region_ms": total / max(installs, 1), "plan_ms": plan / max(installs, 1),
            "codegen_ms": codegen / max(installs, 1), "validate_ms": validate / max(installs, 1),
            "cpu_ms": statistics.median(cpu) if cpu else float("nan"),
            "codegens": int(cache.group(2)) if cache else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapevm", required=True)
    parser.add_argument("--peer", help="another build's shapevm, measured interleaved")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peer-set", action="append", default=[],
                        help="NAME=VALUE: measure this build again with --set NAME=VALUE as the peer (e.g. "
                             "region_plan_smallest=0), interleaved")
    parser.add_argument("--hot-count", type=int,
                        help="the hot threshold (12: the region compiles after seq 10 and 20 were seen)")
    parser.add_argument("--o1-warm", action="store_true",
                        help="O1 validation measured in a second process (kernels from the cache)")
    parser.add_argument("--per-kernel", action="store_true", help="O1 validation per kernel signature too")
    parser.add_argument("--o1-only", action="store_true", help="skip the O2 second-process measurement")
    args = parser.parse_args()
    binaries = {"this": (args.shapevm, ())}
    if args.peer:
        binaries["peer"] = (args.peer, ())
    for setting in args.peer_set:
        binaries[setting] = (args.shapevm, ("--set", setting))
    if args.hot_count is not None:
        ARGS.extend(["--hot-count", str(args.hot_count), "--warmup", "0"])
    validation = {k: [] for k in binaries}
    second = {k: [] for k in binaries}
    for _ in range(args.repeats):
        for name, (binary, extra) in binaries.items():
            validation[name].extend(o1_validation(binary, extra, args.o1_warm))
            if not args.o1_only:
                second[name].append(o2_second_process(binary, extra))
    for name in binaries:
        v = [wall for wall, _, _ in validation[name]]
        cpu = [c for _, c, _ in validation[name] if c is not None]
        cpu_text = f"; compile-thread CPU median {statistics.median(cpu):.1f} ms, max {max(cpu):.1f} ms" if cpu else ""
        print(f"{name}: O1 validation+patch per kernel: median {statistics.median(v):.1f} ms, "
              f"max {max(v):.1f} ms over {len(v)} kernels{cpu_text}")
        if args.per_kernel:
            for sig in sorted({sig for _, _, sig in validation[name]}):
                walls = [w for w, _, s2 in validation[name] if s2 == sig]
                cpus = [c for _, c, s2 in validation[name] if s2 == sig and c is not None]
                cpu_part = f", CPU {statistics.median(cpus):.1f} ms" if cpus else ""
                print(f"  {sig}: median {statistics.median(walls):.1f} ms wall{cpu_part} ({len(walls)} installs)")
        s = second[name]
        if not s:
            continue
        keys = ("per_region_ms", "plan_ms", "codegen_ms", "validate_ms", "cpu_ms")
        med = {k: statistics.median(r[k] for r in s) for k in keys}
        print(f"{name}: O2 second process per region install: median {med['per_region_ms']:.1f} ms wall (planning "
              f"{med['plan_ms']:.1f}, codegen/link {med['codegen_ms']:.1f}, validation+patch {med['validate_ms']:.1f}); "
              f"compile-thread CPU {med['cpu_ms']:.1f} ms; LLVM codegens {[r['codegens'] for r in s]}")


if __name__ == "__main__":
    main()
