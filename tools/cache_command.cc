// SPDX-License-Identifier: Apache-2.0
// `shapevm cache`: stats, clear, export and import of the kernel cache and tuning database.
#include "tools/cache_command.h"

#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "jit/kernel_cache.h"
#include "support/cache_dir.h"
#include "tune/tuning_db.h"

namespace shapevm {

namespace {

int fail(const Status& status) {
  fmt::print(stderr, "shapevm: error: cache: {}\n", status.toString());
  return 1;
}

// The tuning database records of `from` that `to` lacks, appended to `to`; how many.
Expected<int> mergeTuning(const std::string& from, const std::string& to) {
  std::ifstream in(from);
  if (!in) return 0;  // nothing to merge
  tune::TuningDatabase db = tune::TuningDatabase::open(to);
  int added = 0;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    Expected<tune::TuningRecord> record = tune::parseRecord(line);
    if (!record) {
      fmt::print(stderr, "shapevm: warning: cache: skipping {}:{}: {}\n", from, number, record.status().message());
      continue;
    }
    if (db.find(record->key)) continue;
    SVM_RETURN_IF_ERROR(db.append(*record));
    ++added;
  }
  return added;
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
    fmt::print("tuning database: {} ({} records)\n", tuning, db.size());
    return 0;
  }
  if (action == "clear") {
    const jit::KernelCacheStats before = cache.stats();
    if (Status s = cache.clear(); !s.isOk()) return fail(s);
    if (std::remove(tuning.c_str()) != 0 && errno != ENOENT) {
      return fail(makeError(ErrorCode::IoError, "cannot remove '{}'", tuning));
    }
    fmt::print("cleared {}: {} kernels and the tuning database\n", root, before.entries);
    return 0;
  }
  if (action == "export" || action == "import") {
    if (dir.empty()) return fail(makeError(ErrorCode::InvalidArgument, "`cache {}` needs a directory", action));
    if (action == "export") {
      Expected<int> kernels = cache.exportTo(dir + "/kernels");
      if (!kernels) return fail(kernels.status());
      Expected<int> records = mergeTuning(tuning, dir + "/tuning.jsonl");
      if (!records) return fail(records.status());
      fmt::print("exported {} kernels and {} tuning records to {}\n", *kernels, *records, dir);
      return 0;
    }
    Expected<int> kernels = cache.importFrom(dir + "/kernels");
    if (!kernels) return fail(kernels.status());
    Expected<int> records = mergeTuning(dir + "/tuning.jsonl", tuning);
    if (!records) return fail(records.status());
    fmt::print("imported {} kernels and {} tuning records into {}\n", *kernels, *records, root);
    return 0;
  }
  return fail(
      makeError(ErrorCode::InvalidArgument, "unknown action '{}' (stats, clear, export DIR, import DIR)", action));
}

}  // namespace shapevm
