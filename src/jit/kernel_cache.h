// SPDX-License-Identifier: Apache-2.0
// The persistent compiled-kernel cache: code bytes a backend chose to keep (the LLVM CPU backend:
// relocatable objects), one file per kernel under <cache dir>/kernels, plus an in-process map so
// identical kernels of several sites and regions are compiled once. Files are written whole
// (temporary file + rename), carry their full key and a checksum, and are evicted least recently
// used beyond the cache_max_mb tunable; any number of processes may share a directory.
// Invariant: nothing read from disk is trusted — a file that is truncated, fails its checksum or
// holds another key is ignored with a warning (and removed), and the kernel is compiled again.
// A miss may be served by an entry of the same kernel whose dim ranges cover the request's
// (findCovering): which ranges a process asks for depends on the shapes it met first, so exact
// keys alone would make a cache warmed in one order useless to a process meeting another.
// The store knows bytes and keys only; the key's text (kernelCacheKey) is the only part that
// knows KernelSpec, and the backend alone decides what the bytes are.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "jit/backend.h"
#include "jit/kernel_abi.h"
#include "shapevm/status.h"

namespace shapevm::jit {

// One kept kernel: its key's text, the symbol the code defines and the backend's bytes.
struct CachedCode {
  std::string key;
  std::string symbol;
  std::string bytes;
};

// A file's bytes mapped copy-on-write (MAP_PRIVATE): read straight from the page cache (no copy,
// no fresh anonymous pages to fault in); a write changes this process's pages only. Unmapped when
// the last owner lets go. Files in the cache are only ever replaced by rename, never rewritten in
// place, so the mapped bytes stay the file's whole life.
class MappedFile {
 public:
  // nullptr when the file is absent, unreadable or empty.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  std::string_view bytes() const { return {data_, size_}; }
  // The mapping is private and writable: tensors over it may be handed out as ordinary tensors.
  char* data() const { return data_; }

 private:
  MappedFile(char* data, std::size_t size) : data_(data), size_(size) {}
  char* data_;
  std::size_t size_;
};

struct KernelCacheStats {
  std::string directory;          // where the files are ("" = in memory only)
  std::uint64_t entries = 0;      // files on disk now
  std::uint64_t bytes = 0;        // their size
  std::uint64_t cap_bytes = 0;    // cache_max_mb (0: nothing is written to disk)
  std::uint64_t disk_hits = 0;    // this process: entries read from disk
  std::uint64_t memory_hits = 0;  // this process: entries served from the in-process map
  std::uint64_t misses = 0;
  std::uint64_t covering_hits = 0;   // this process: misses served by an entry for wider ranges
  std::uint64_t stores = 0;          // files written
  std::uint64_t rejected = 0;        // files ignored: truncated, checksum, other key, unusable code
  std::uint64_t write_failures = 0;  // files that could not be written (read-only, full ...)
  std::uint64_t evictions = 0;       // files removed to stay under the cap
  std::uint64_t install_records = 0;  // install records on disk now (install_record.h)
  std::uint64_t layout_records = 0;   // their operand-layout companions (warm_start.cc)
};

class KernelCache {
 public:
  // The cache for `dir` (its files go in dir/kernels), shared by every user in this process;
  // "" = in memory only.
  static std::shared_ptr<KernelCache> forDirectory(const std::string& dir);
  explicit KernelCache(std::string dir);

  // "" when in memory only.
  const std::string& directory() const { return kernels_dir_; }
  // The entry for `key`: from memory, else from disk (checked; counts as a use for eviction).
  std::optional<CachedCode> find(const std::string& key);
  // After a miss: the entry of `key`'s kernel (the same shape class: kernelShapeClass) whose dim
  // ranges cover `key`'s, each dim's guard admitting every extent key's admits; the narrowest of
  // them (fewest dynamic dims, then the tightest ranges), from memory or disk (checked like find).
  std::optional<CachedCode> findCovering(const std::string& key);
  // Keeps `code` in memory and, unless cache_max_mb is 0 or the directory is unusable (one
  // warning per process), on disk; evicts least recently used files beyond the cap.
  void store(const CachedCode& code);
  // Drops an entry that proved unusable (code that does not load, a failed validation).
  void forget(const std::string& key, std::string_view why);
  KernelCacheStats stats() const;
  // Removes every entry file, install record and kept reference run (and stale temporary files);
  // the in-process map too.
  Status clear();
  // Copies every intact entry into `dir` (created); returns how many. Damaged ones are skipped
  // with a warning. Intact install records travel with them (not counted).
  Expected<int> exportTo(const std::string& dir) const;
  // Checks and copies every entry file of `dir` into this cache; returns how many. Files that are
  // not intact entries are skipped with a warning. Install records are merged into this cache's.
  Expected<int> importFrom(const std::string& dir);
  // Install records (install_record.h), kept beside the entries: the file `name`'s text (nullopt
  // when absent or unreadable, or the cache is in memory only), and a whole-file write
  // (temporary file + rename; false when it failed, warned once per process).
  std::optional<std::string> readInstallRecord(const std::string& name) const;
  // The file `name` mapped (MappedFile), nullptr as readInstallRecord's nullopt.
  std::shared_ptr<const MappedFile> mapInstallRecord(const std::string& name) const;
  bool writeInstallRecord(const std::string& name, std::string_view text);

  // The file name of `key`'s entry ("<16 hex digits of its shape class>-<16 of the key>.svmk":
  // the entries of one kernel at different ranges share the prefix).
  static std::string fileName(const std::string& key);
  // An entry file's bytes and back (decode: error naming what is wrong).
  static std::string encode(const CachedCode& code);
  static Expected<CachedCode> decode(std::string_view file);

 private:
  // `key` "": whatever key the file name stands for (fileName(its key) must be the name).
  // `touch`: a successful read marks the file used (LRU order).
  std::optional<CachedCode> readFile(const std::string& key, const std::string& path, bool touch = true);
  void remember(const CachedCode& code);  // callers hold mutex_
  void evictIfNeeded(std::uint64_t cap);
  void warnOnce(const std::string& what);

  std::string kernels_dir_;
  mutable std::mutex mutex_;
  std::list<CachedCode> recent_;  // most recently used first
  std::unordered_map<std::string, std::list<CachedCode>::iterator> by_key_;
  std::uint64_t memory_bytes_ = 0;
  std::uint64_t disk_bytes_estimate_ = 0;  // what this process believes is on disk (rescanned)
  bool scanned_ = false;
  bool write_warned_ = false;
  KernelCacheStats counters_;
};

// Everything that fixes the code compiled for `spec` with `family` on a backend whose
// codeIdentity() is `code_identity`: the full spec (op, attributes, operands with dims, ranges and
// divisors, epilogue, fused program, parameters, target), the ShapeVM version and build, and the
// compiler and target. Equal keys mean interchangeable code. What a default resolves to beyond the
// spec is named too: a bfloat16 spec's default variant (pairs or widening, jit/bf16_variant.h)
// follows the measured verdict for `target_cpu` (the backend's BackendCapabilities::target).
// The dims of every operand are on a line of their own ("dims ...").
std::string kernelCacheKey(const KernelFamily& family, const KernelSpec& spec, const std::string& code_identity,
                           const std::string& target_cpu);
// A key without its dims line: equal for the kernels that differ only in static sizes and ranges.
std::string kernelShapeClass(std::string_view key);
// The dims of a key's operands, one list per operand in order (a scalar's is empty); nullopt
// when the key has no well-formed dims line.
using KeyDims = std::vector<std::vector<DimSpec>>;
std::optional<KeyDims> kernelKeyDims(std::string_view key);
// True when every dim of `outer` admits every extent the same dim of `inner` admits.
bool keyDimsCover(const KeyDims& outer, const KeyDims& inner);

// The kernel for `spec`, loaded, through the backend's kernel cache (KernelBackend::kernelCache):
// a kept entry when one loads (`from_cache` set; one that does not is dropped), else, with the
// cache_covering tunable, a kept entry for wider ranges (then `spec` gets its dims and `symbol`
// its symbol: the caller guards with them), else compiled and kept. `key` gets the cache key of
// the code returned ("" without a cache). Without a cache: backend.compile + load.
Expected<KernelHandle> compileThroughCache(KernelBackend& backend, const KernelFamily& family, KernelSpec& spec,
                                           std::string& symbol, std::string& key, bool& from_cache);

// This ShapeVM build: version and a hash of the executable code that holds the JIT, so a
// rebuilt ShapeVM never reuses another build's kernels.
const std::string& shapevmBuildIdentity();

}  // namespace shapevm::jit
