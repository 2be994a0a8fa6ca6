#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Turns the output of two `shapevm run --stats` runs of one workload (O0, then O2 with --jit-log)
# into scripts/demo.sh's one-screen summary: the JIT's hot-path and kernel lines, median latency
# per dim setting for both levels side by side with the speedup, allocations and op calls per run.
# Fails (exit 1, naming the file) when an output lacks the lines it needs, never prints a guess.
# Usage: demo_summary.py O0_OUTPUT O2_OUTPUT
import re
import sys

SETTING = re.compile(r"^\s+(\S+=\S+(?: \S+=\S+)*)\s+median ([0-9.]+) ms\s+p99 ([0-9.]+) ms\s+\((\d+) runs\)")
ALLOCATIONS = re.compile(r"allocations: \d+ requests, \d+ system \(([0-9.]+) requests/run, ([0-9.]+) system/run\)")
OP_CALLS = re.compile(r"op calls: \d+ \(\d+/run; interpreted (\d+), compiled (\d+)")
ITERATIONS = re.compile(r"^stats: function '([^']+)', (\d+) iterations")
JIT_LINE = re.compile(r"^\[INFO\] JIT: (Hot path detected|Installed|Kernel generated)")


class Parsed:
    """What one `shapevm run --stats` output says."""

    def __init__(self, path):
        self.path = path
        self.text = open(path, encoding="utf-8", errors="replace").read()
        lines = self.text.splitlines()
        self.settings = {}  # "batch=32 seq=10" -> median ms
        for line in lines:
            match = SETTING.match(line)
            if match:
                self.settings[match.group(1)] = float(match.group(2))
        self.function, self.iterations = self.need(ITERATIONS, "stats: function ...", re.MULTILINE)
        self.requests_per_run, self.system_per_run = map(float, self.need(ALLOCATIONS, "allocations: ..."))
        self.interpreted, self.compiled = map(int, self.need(OP_CALLS, "op calls: ..."))
        self.jit_lines = [line for line in lines if JIT_LINE.match(line)]
        self.compile_time = next((line for line in lines if line.startswith("jit: compile time")), None)
        if not self.settings:
            raise ValueError(f"{path}: no per-setting latency lines (run with --stats)")

    def need(self, pattern, what, flags=0):
        match = re.search(pattern.pattern, self.text, flags)
        if not match:
            raise ValueError(f"{self.path}: no '{what}' line in the output")
        return match.groups()


def summary(o0, o2):
    """The summary as a list of lines."""
    out = [f"JIT log at O2 (hot paths and installed kernels, {len(o2.jit_lines)} lines):"]
    out += [f"  {line}" for line in o2.jit_lines] or ["  (none: nothing became hot)"]
    if o2.compile_time:
        out.append(f"  {o2.compile_time}")
    out.append("")
    out.append(f"{'setting':<22}{'O0 median ms':>14}{'O2 median ms':>14}{'speedup':>10}")
    for setting, slow in o0.settings.items():
        fast = o2.settings.get(setting)
        if fast is None:
            raise ValueError(f"{o2.path}: no latency line for {setting}")
        out.append(f"{setting:<22}{slow:>14.3f}{fast:>14.3f}{slow / fast:>9.2f}x")
    out.append("")
    out.append(f"{'per run':<22}{'O0':>14}{'O2':>14}")
    out.append(f"{'allocation requests':<22}{o0.requests_per_run:>14.1f}{o2.requests_per_run:>14.1f}")
    out.append(f"{'system allocations':<22}{o0.system_per_run:>14.1f}{o2.system_per_run:>14.1f}")
    for name, level in (("O0", o0), ("O2", o2)):
        runs = int(level.iterations)
        out.append(f"{name} op calls: {level.interpreted / runs:.1f} interpreted, {level.compiled / runs:.1f} compiled "
                   f"per run ({runs} runs; medians and per-run figures include the warm-up runs)")
    return out


def main():
    if len(sys.argv) != 3:
        print("usage: demo_summary.py O0_OUTPUT O2_OUTPUT", file=sys.stderr)
        return 2
    try:
        lines = summary(Parsed(sys.argv[1]), Parsed(sys.argv[2]))
    except (OSError, ValueError) as error:
        print(f"demo_summary: {error}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
