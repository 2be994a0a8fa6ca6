// SPDX-License-Identifier: Apache-2.0
// `shapevm bench`: ShapeVM's side of the benchmark suite (bench/run_all.py runs the peers and
// writes BENCHMARKS.md). Every suite checks its outputs against the reference path before it
// times anything; timings are medians over interleaved rounds, single thread.
#pragma once

#include <string>
#include <vector>

namespace shapevm {

struct BenchFlags {
  std::vector<std::string> suites;  // empty = all: workload, cold, matmul, elementwise, overhead, memory
  bool quick = false;               // < 2 minutes in all (CI smoke test; no thresholds asserted)
  std::string out;                  // directory for shapevm.json (printed summary either way)
  std::string examples;             // folder with lstm_cell.py / lstm_loop.py
};

int benchCommand(const BenchFlags& flags);

}  // namespace shapevm
