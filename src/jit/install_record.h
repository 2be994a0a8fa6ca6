// SPDX-License-Identifier: Apache-2.0
// Install records: what an earlier process installed for one function, kept in the kernel cache's
// directory beside the compiled kernels (<cache dir>/kernels/<16 hex digits>.svmi), so that a later
// process installs the same sites and fused ranges on first sight (Jit::scan) instead of after
// the warm-up runs, hot-path detection and the pay-off deferral.
// A record is keyed by its identity: a fingerprint of the function's bytecode (its disassembly
// before any compile rewrites a token), the JIT level, the backend's code identity (compiler,
// target, CPU) and this ShapeVM build. Per op site and per fused range it lists the input
// signatures (ProfileRecord::toString, per range member) the installed code was compiled for,
// and whether it was tuned.
// Invariant: a record only decides what is queued early. The compile still goes through the
// kernel cache, validation (never skipped) and the guards, so a stale, damaged or foreign record
// costs at most a compile, never a wrong result; one that does not decode, or holds another
// identity, is ignored with a warning.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shapevm/status.h"
#include "shapevm/value.h"

namespace shapevm::jit {

class KernelCache;
class RegionExecutor;
struct RegionPlan;

inline constexpr std::string_view kInstallRecordSuffix = ".svmi";

struct InstallRecord {
  // What was installed at one op site (O1/O2 per-op kernel) or for one fused range (O2).
  struct Entry {
    int first_site = 0;                       // ranges: the range's first op site (a sanity check)
    bool tuned = false;                       // installed with tuned parameters
    std::vector<std::set<std::string>> sigs;  // per member (a site: one), the input signatures seen
  };
  std::string identity;         // installRecordIdentity's 16 hex digits (the file name's stem)
  std::map<int, Entry> sites;   // by op site index
  std::map<int, Entry> ranges;  // by fused-range index (Jit::rangeStates order)

  bool empty() const { return sites.empty() && ranges.empty(); }
  // Adds `other`'s signatures and tuned flags (two processes writing the same record).
  void merge(const InstallRecord& other);
  // The file name of the record for `identity` ("<identity>.svmi").
  static std::string fileName(const std::string& identity) { return identity + std::string(kInstallRecordSuffix); }
  // The identity of the operand-layout companion of `identity`'s record (warm_start.cc): the same
  // file format beside it, "<identity>-layouts.svmi".
  static std::string layoutsIdentity(const std::string& identity) { return identity + std::string(kLayoutsTag); }
  static bool isLayoutsFileName(std::string_view name) {
    return name.ends_with(std::string(kLayoutsTag) + std::string(kInstallRecordSuffix));
  }
  static constexpr std::string_view kLayoutsTag = "-layouts";
  // The file's text and back; decode names what is wrong (bad syntax, checksum, truncation).
  std::string encode() const;
  static Expected<InstallRecord> decode(std::string_view text);
};

// The identity of a function's record (16 hex digits): a hash of its bytecode text, the JIT level,
// the backend's code identity and this ShapeVM build (shapevmBuildIdentity).
std::string installRecordIdentity(std::string_view function_text, int level, const std::string& code_identity);

// True when `text` decodes as a record (the cache's export/import copy only intact ones).
bool installRecordIntact(std::string_view text);

inline constexpr std::string_view kReferenceRunSuffix = ".svmv";

// A fused range's planning run kept beside its install record (<identity>-r<range>.svmv), so a
// later process installing the range on first sight plans without running the reference kernels:
// per op of the plan, either the layout of its outputs (dtype and shape of a fresh contiguous
// tensor: what planning reads), the contents of an output the range writes back (what validation
// compares with), or nothing (a view op, run again: it only makes views of its inputs).
// Invariant: the run is replayed only for planning inputs with the same fingerprint (their values
// and layouts, inputsKey) under the same record identity (bytecode, level, CPU, build), so the
// replayed values are the ones the reference kernels computed from these very inputs; validation
// of the compiled region against them is unchanged. A damaged file is ignored with a warning.
class ReferenceRunStore {
 public:
  // `file`: the file's name in the kernel cache's directory (fileName).
  ReferenceRunStore(KernelCache& cache, std::string file) : cache_(cache), file_(std::move(file)) {}
  static std::string fileName(const std::string& identity, int range) {
    return identity + "-r" + std::to_string(range) + std::string(kReferenceRunSuffix);
  }
  // The fingerprint of a plan's planning inputs: op count, and each input's kind, dtype, shape,
  // strides, offset and storage bytes.
  static std::uint64_t inputsKey(const RegionPlan& plan, std::span<const Value> inputs);
  // Per op of `plan`, the outputs the kept run gives (empty: run the op); nullopt when there is
  // none for `key` (no file, another key or plan, or a damaged file: warned). Kept contents are
  // tensors over the mapped file (copy-on-write), layout-only outputs over an anonymous mapping
  // that nothing touches: loading faults in no fresh memory.
  std::optional<std::vector<std::vector<Value>>> load(std::uint64_t key, const RegionPlan& plan) const;
  // Keeps `reference`'s run of `plan` (planned: its steps known) for `key`. Nothing is kept for a
  // plan it cannot replay: a non-tensor or strided op output, a written-back view, a statistic
  // step (computed from the values' contents).
  void keep(std::uint64_t key, const RegionPlan& plan, const RegionExecutor& reference) const;
  // The checksum a file ends with (8 bytes), of the bytes before it.
  static std::uint64_t checksum(std::string_view bytes);

 private:
  KernelCache& cache_;
  std::string file_;
};

}  // namespace shapevm::jit
