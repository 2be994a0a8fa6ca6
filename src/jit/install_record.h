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
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shapevm/status.h"

namespace shapevm::jit {

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
  // The file's text and back; decode names what is wrong (bad syntax, checksum, truncation).
  std::string encode() const;
  static Expected<InstallRecord> decode(std::string_view text);
};

// The identity of a function's record (16 hex digits): a hash of its bytecode text, the JIT level,
// the backend's code identity and this ShapeVM build (shapevmBuildIdentity).
std::string installRecordIdentity(std::string_view function_text, int level, const std::string& code_identity);

// True when `text` decodes as a record (the cache's export/import copy only intact ones).
bool installRecordIntact(std::string_view text);

}  // namespace shapevm::jit
