// SPDX-License-Identifier: Apache-2.0
// The host's data cache sizes, as the kernel backends' cost hints read them: Linux sysfs
// (/sys/devices/system/cpu/cpu0/cache/index*/: level, type, size, shared_cpu_list) first, then
// sysconf(_SC_LEVEL*_CACHE_SIZE) for a level sysfs did not give, then fixed fallbacks.
// Invariant: every size detectCpuCaches() returns is > 0 and l3_sharing >= 1; `source` says
// where each level came from.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shapevm {

struct CpuCaches {
  std::int64_t l1d_bytes = 0;  // one core's L1 data cache
  std::int64_t l2_bytes = 0;   // one core's L2 (private on the x86-64 cores we target)
  std::int64_t l3_bytes = 0;   // the last level cache the core is in (all of it, shared)
  int l3_sharing = 1;          // logical CPUs sharing that L3
  std::string source;          // per level, e.g. "l1d=sysfs l2=sysfs l3=sysconf"
  // The L3 bytes per logical CPU sharing it (at least 1).
  std::int64_t l3PerCpu() const { return l3_bytes / (l3_sharing > 0 ? l3_sharing : 1); }
  std::string toString() const;  // "L1d 32 KiB, L2 512 KiB, L3 32 MiB / 2 CPUs (l1d=sysfs ...)"
};

// Used for a level neither sysfs nor sysconf gives (a common x86-64 server core).
constexpr std::int64_t kFallbackL1dBytes = std::int64_t{32} << 10;
constexpr std::int64_t kFallbackL2Bytes = std::int64_t{1} << 20;
constexpr std::int64_t kFallbackL3Bytes = std::int64_t{2} << 20;  // per CPU (l3_sharing 1)

// A sysfs cache size: "32K", "512K", "32768K", "1M", "4096" -> bytes; -1 when malformed.
std::int64_t parseCacheSize(std::string_view text);
// A sysfs CPU list ("0-1,4,6-7") -> CPUs it names (5); 0 when malformed or empty.
int countCpuList(std::string_view list);
// The caches one CPU's sysfs cache directory (".../cpu0/cache") describes; a level it lacks
// (missing directory, unreadable or malformed files) stays 0.
CpuCaches readSysfsCaches(const std::string& cache_dir);
// sysfs at `cache_dir`, then (when `use_sysconf`) sysconf for the levels still missing, then
// the kFallback constants: every field set.
CpuCaches detectCpuCaches(const std::string& cache_dir, bool use_sysconf = true);
// detectCpuCaches on this host's cpu0, once per process.
const CpuCaches& hostCpuCaches();

}  // namespace shapevm
