// SPDX-License-Identifier: Apache-2.0
// `shapevm bench ARGS`: a thin launcher for the benchmark executable (bench/shapevm_bench.cc), so
// the CLI links neither oneDNN nor OpenMP. It execs shapevm_bench with ARGS unchanged (same flags,
// same output); the executable is looked for beside this shapevm, then in the build tree's bench/.
#pragma once

namespace shapevm {

// argv[1] is "bench". Returns only on failure (a clear error on stderr, exit code 1).
int launchBench(int argc, char** argv);

}  // namespace shapevm
