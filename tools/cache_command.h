// SPDX-License-Identifier: Apache-2.0
// `shapevm cache stats|clear|export DIR|import DIR`: the compiled-kernel cache and the tuning
// database under the cache directory ($SHAPEVM_CACHE_DIR ...), as one unit a fleet can ship.
// Invariant: export and import copy only entries that pass their checks (checksums, keys).
#pragma once

#include <string>

namespace shapevm {

// Runs one cache action ("stats", "clear", "export", "import"; `dir` for the last two) on the
// cache directory `cache_dir` ("" = defaultCacheDir()). Prints what it did; returns the exit code.
int cacheCommand(const std::string& action, const std::string& dir, const std::string& cache_dir = "");

}  // namespace shapevm
