// SPDX-License-Identifier: Apache-2.0
// Session::exportCache / importCache: the compiled-kernel cache and the tuning database of a cache
// directory as one archive (DIR/kernels, DIR/tuning.jsonl) that another machine or process imports
// (`shapevm cache export|import`, shapevm.export_cache/import_cache, shapevm.dask's warm start).
// Invariant: only entries that pass their checks (checksum, key, record syntax) are copied; a
// record the destination already has is not appended again.
#include <fstream>

#include "shapevm/shapevm.h"
#include "support/cache_dir.h"
#include "support/logging.h"
#if SHAPEVM_HAVE_JIT
#include "jit/kernel_cache.h"
#include "tune/tuning_db.h"
#endif

namespace shapevm {

namespace {

#if SHAPEVM_HAVE_JIT
// The cache directory: `cache_dir`, else the environment's.
Expected<std::string> cacheRoot(const std::string& cache_dir) {
  std::string root = cache_dir.empty() ? defaultCacheDir() : cache_dir;
  if (root.empty()) return makeError(ErrorCode::InvalidArgument, "no cache directory (set SHAPEVM_CACHE_DIR or HOME)");
  return root;
}

// The tuning records of `from` that `to` lacks, appended to `to`; how many.
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
      logAt(LogLevel::Warn, "JIT", "tuning database: skipping {}:{}: {}", from, number, record.status().message());
      continue;
    }
    if (db.find(record->key)) continue;
    SVM_RETURN_IF_ERROR(db.append(*record));
    ++added;
  }
  return added;
}
#endif

// Export (`out`: the cache -> dir) or import (dir -> the cache).
Expected<CacheTransfer> transfer(bool out, const std::string& dir, const std::string& cache_dir) {
#if SHAPEVM_HAVE_JIT
  if (dir.empty())
    return makeError(ErrorCode::InvalidArgument, "{} needs a directory",
                     out ? "exporting the cache" : "importing a cache");
  SVM_ASSIGN_OR_RETURN(const std::string root, cacheRoot(cache_dir));
  jit::KernelCache cache(root);
  CacheTransfer done;
  const std::string kernels = dir + "/kernels", archive_db = dir + "/tuning.jsonl", db = root + "/tuning.jsonl";
  SVM_ASSIGN_OR_RETURN(done.kernels, out ? cache.exportTo(kernels) : cache.importFrom(kernels));
  SVM_ASSIGN_OR_RETURN(done.tuning_records, out ? mergeTuning(db, archive_db) : mergeTuning(archive_db, db));
  return done;
#else
  (void)out;
  (void)dir;
  (void)cache_dir;
  return makeError(ErrorCode::Unsupported, "this ShapeVM was built without the JIT: it has no kernel cache");
#endif
}

}  // namespace

Expected<CacheTransfer> Session::exportCache(const std::string& dir, const std::string& cache_dir) {
  return transfer(true, dir, cache_dir);
}

Expected<CacheTransfer> Session::importCache(const std::string& dir, const std::string& cache_dir) {
  return transfer(false, dir, cache_dir);
}

}  // namespace shapevm
