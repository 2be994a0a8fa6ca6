#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds ShapeVM and runs the reference workload (docs/reference-workload.md: examples/lstm_cell.py,
# or the looped lstm_loop.py with --loop) at batch 32 with seq cycling 10 -> 20 -> 30: first
# interpreted (O0, 30 runs), then at O2 with the JIT log on (90 runs, --jit-wait so each compile
# finishes before the next run and tier-up happens at the same run every time). Prints on one
# screen the JIT's hot-path and kernel lines, median latency per seq for both levels side by side,
# the speedup, and allocations and op calls per run (scripts/demo_summary.py parses the two outputs).
# Usage: scripts/demo.sh [--loop]
set -euo pipefail
cd "$(dirname "$0")/.."
variant=lstm_cell
case "${1:-}" in
  --loop) variant=lstm_loop ;;
  "") ;;
  *) echo "usage: scripts/demo.sh [--loop]" >&2; exit 2 ;;
esac
bash scripts/build.sh
o0_iters=30
o2_iters=90
workload=(run "examples/${variant}.py" --dim batch=32 --dim seq=10,20,30 --stats --quiet)
outputs=$(mktemp -d)
trap 'rm -rf "$outputs"' EXIT

echo
echo "== ShapeVM demo: examples/${variant}.py, batch 32, seq 10 -> 20 -> 30 =="
echo "O0: ${o0_iters} runs, interpreted. O2: ${o2_iters} runs with --jit-log and --jit-wait (the interpreter"
echo "waits for each compile, so tier-up is reproducible; without it compiles run in the background)."
echo "The first runs at O2 are interpreted too: warm-up, then a region is hot after hot_count runs."
./build/tools/shapevm "${workload[@]}" --iters "$o0_iters" --jit-level O0 >"$outputs/o0.txt" 2>&1
./build/tools/shapevm "${workload[@]}" --iters "$o2_iters" --jit-level O2 --jit-log --jit-wait >"$outputs/o2.txt" 2>&1
echo
/usr/bin/python3 scripts/demo_summary.py "$outputs/o0.txt" "$outputs/o2.txt"
