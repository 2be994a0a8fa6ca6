// SPDX-License-Identifier: Apache-2.0
// The tuning database: one JSON object per line in `tuning.jsonl` under the cache directory
// ($SHAPEVM_CACHE_DIR, else $XDG_CACHE_HOME/shapevm, else $HOME/.cache/shapevm). Each line records
// one winner: the kernel's key (a hash of its fingerprint, shape bucket, CPU model and features),
// the readable parts of that key, the chosen KernelParams and its timing.
// Invariant: nothing read from disk is trusted — a line that does not parse, lacks a field, has a
// key that does not match its own fields or params that do not parse is reported (one warning
// naming the file and line) and ignored. Appends are one write() of a whole line under flock().
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jit/bf16_variant.h"
#include "jit/kernel_abi.h"
#include "shapevm/status.h"

namespace shapevm::tune {

inline constexpr int kTuningDbVersion = 1;

// The cache directory named by the environment (see the file comment); "" when none can be named.
std::string defaultCacheDir();

// What identifies a tuned kernel. `kernel` is everything static about the kernel (family, op,
// attributes, operand dtypes, static dims, contiguity, epilogue); `bucket` is the ranges of its
// dynamic dims; `cpu`/`features` describe the host. `key()` hashes all four.
struct KernelKey {
  std::string family;
  std::string kernel;
  std::string bucket;
  std::string cpu;
  std::string features;
  std::string shape_class;  // the predictor compares shapes within it: family, op, dtypes, ranks
  std::string key() const;  // 16 hex digits
};

KernelKey kernelKey(const jit::KernelFamily& family, const jit::KernelSpec& spec, const std::string& cpu,
                    const std::string& features);

struct TuningRecord {
  std::string key;
  std::string family;
  std::string signature;
  std::string kernel;
  std::string bucket;
  std::string shape_class;
  std::vector<double> point;  // log2 of the example shapes' dims (the predictor's distance space)
  std::string cpu;
  std::string features;
  jit::KernelParams params;
  double us = 0;           // the winner's median time per call
  double default_us = 0;   // the default candidate's
  int candidates = 0;
  int timed = 0;
  // A bfloat16 matmul whose CPU has the pair dot products (jit/bf16_variant.h): the variant the
  // generated winner runs ("pairs" or "widening"; "" for a library winner and every other kernel),
  // and the default tile's median in each variant (0 unless both were timed). Older lines
  // without the fields are read.
  std::string bf16;
  double bf16_pairs_us = 0, bf16_widening_us = 0;
  // Every candidate the search timed and its median (the winner's included; failed ones left
  // out): the predictor learns from the whole table which candidates come close to the best, not
  // only which one won. Older lines without the field are read (empty).
  struct Timed {
    jit::KernelParams params;
    double us = 0;
    bool operator==(const Timed&) const = default;
  };
  std::vector<Timed> times;
  int version = kTuningDbVersion;
};

// A record of `key`'s kernel: its key and the key's parts (the rest left to fill in).
TuningRecord recordOf(const KernelKey& key);

// Which implementation `params` choose, as a record's "impl" field names it: "onednn",
// "onednn+tail", "sgemm", "sgemm+tail" (KernelParams::library) or "jit" (generated code). Older
// lines without it are read.
std::string_view implName(const jit::KernelParams& params);

class TuningDatabase {
 public:
  // An in-memory database with no file (nothing is read or written).
  TuningDatabase() = default;
  // Loads `path` if it exists (creating its directory is left to append()); every bad line
  // becomes one entry of warnings() and one "[WARN] tune: FILE:LINE: ..." log line.
  static TuningDatabase open(std::string path);

  const std::string& path() const { return path_; }
  bool hasFile() const { return !path_.empty(); }
  std::optional<TuningRecord> find(const std::string& key) const;
  // Records on this host in the same shape class (for the predictor).
  std::vector<TuningRecord> similar(const std::string& shape_class, const std::string& cpu,
                                    const std::string& features) const;
  // Every record, by key (the predictor's training set).
  std::vector<TuningRecord> records() const;
  // Adds the record in memory and, with a file, appends it as one line.
  Status append(const TuningRecord& record);
  // Drops a record from memory (the predictor/lookup found it unusable).
  void forget(const std::string& key);
  std::size_t size() const;
  std::vector<std::string> warnings() const;
  void warn(std::string message);

  TuningDatabase(TuningDatabase&& other) noexcept;
  TuningDatabase& operator=(TuningDatabase&& other) noexcept;

 private:
  std::string path_;
  mutable std::mutex mutex_;
  std::map<std::string, TuningRecord> records_;  // by key; a later line replaces an earlier one
  std::vector<std::string> warnings_;
};

// The bfloat16 matmul variant `cpu` with `features` measured faster: pairs when the geometric mean
// of bf16_pairs_us / bf16_widening_us over its records that timed both is at most 1, widening when
// above; Unmeasured without such a record. The AutoTuner sets it as the host's default.
jit::Bf16Variant bf16Verdict(const std::vector<TuningRecord>& records, const std::string& cpu,
                             const std::string& features);

// Record <-> one JSON line (no newline). parseRecord's error says what is wrong with the line.
std::string recordToJson(const TuningRecord& record);
Expected<TuningRecord> parseRecord(const std::string& line);

}  // namespace shapevm::tune
