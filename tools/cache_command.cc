// SPDX-License-Identifier: Apache-2.0
// `shapevm cache`: stats, clear, export and import of the kernel cache and tuning database.
#include "tools/cache_command.h"

#include <cstdio>

#include <fmt/format.h>

#include "jit/kernel_cache.h"
#include "shapevm/shapevm.h"
#include "support/cache_dir.h"
#include "tune/tuning_db.h"

namespace shapevm {

namespace {

int fail(const Status& status) {
  fmt::print(stderr, "shapevm: error: cache: {}\n", status.toString());
  return 1;
}

}  // namespace

int cacheCommand(const std::string& action, const std::string& dir, const std::string& cache_dir) {
  const std::string root = cache_dir.empty() ? defaultCacheDir() : cache_dir;
  if (root.empty()) {
    return fail(makeError(ErrorCode::InvalidArgument, "no cache directory (set SHAPEVM_CACHE_DIR or HOME)"));
  }
  jit::KernelCache cache(root);
  const std::string tuning = root + "/tuning.jsonl";
  if (action == "stats") {
    const jit::KernelCacheStats s = cache.stats();
    const tune::TuningDatabase db = tune::TuningDatabase::open(tuning);
    fmt::print("kernel cache: {}\n", s.directory);
    fmt::print("  {} kernels, {:.2f} MiB of {} MiB (cache_max_mb)\n", s.entries, s.bytes / 1048576.0,
               s.cap_bytes >> 20);
    fmt::print(
        "  {} install records (what earlier processes installed, for first-sight installs and warm starts), "
        "{} with operand layouts\n",
        s.install_records, s.layout_records);
    fmt::print("tuning database: {} ({} records)\n", tuning, db.size());
    return 0;
  }
  if (action == "clear") {
    const jit::KernelCacheStats before = cache.stats();
    if (Status s = cache.clear(); !s.isOk()) return fail(s);
    if (std::remove(tuning.c_str()) != 0 && errno != ENOENT) {
      return fail(makeError(ErrorCode::IoError, "cannot remove '{}'", tuning));
    }
    fmt::print("cleared {}: {} kernels, {} install records and the tuning database\n", root, before.entries,
               before.install_records);
    return 0;
  }
  if (action == "export" || action == "import") {
    if (dir.empty()) return fail(makeError(ErrorCode::InvalidArgument, "`cache {}` needs a directory", action));
    const bool out = action == "export";
    Expected<CacheTransfer> done = out ? Session::exportCache(dir, root) : Session::importCache(dir, root);
    if (!done) return fail(done.status());
    fmt::print("{} {} kernels and {} tuning records {} {}\n", out ? "exported" : "imported", done->kernels,
               done->tuning_records, out ? "to" : "into", out ? dir : root);
    return 0;
  }
  return fail(
      makeError(ErrorCode::InvalidArgument, "unknown action '{}' (stats, clear, export DIR, import DIR)", action));
}

}  // namespace shapevm
