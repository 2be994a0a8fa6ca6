#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds ShapeVM and runs the reference workload (SYSTEM.md section 4): batch 32, seq cycling
# 10 -> 20 -> 30, interpreted (O0), printing per-seq latency and run statistics, for both the
# flattened and the looped variant.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
for variant in lstm_cell lstm_loop; do
  echo "== ${variant}: batch 32, seq 10/20/30 =="
  ./build/tools/shapevm run "examples/${variant}.svasm" --dim batch=32 --dim seq=10,20,30 --iters 30 --stats --quiet
done
