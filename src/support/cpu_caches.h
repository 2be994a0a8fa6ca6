// SPDX-License-Identifier: Apache-2.0
// The host's data cache sizes, as the kernel backends' cost hints read them: Linux sysfs
// (/sys/devices/system/cpu/cpu0/cache/index*/: level, type, size, shared_cpu_list) first, then
// x86 cpuid's deterministic cache leaves (leaf 4 on Intel, 0x8000001D on AMD: size and the
// logical CPUs sharing it), then sysconf(_SC_LEVEL*_CACHE_SIZE), then fixed fallbacks. A size
// outside what a real core has (kMin/kMax bounds below) counts as missing. An L3 from sysconf
// says nothing of who shares it: the package's logical CPUs (cpuid leaf 1) or the online ones,
// whichever is more, and never less than an L3 share of kMaxL3PerCpuBytes per CPU (a VM may
// report the package's L3, every CCX's together: 508 MiB on a 2-vCPU Zen 5 EPYC guest).
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
// Plausible sizes; outside them a source's figure is ignored (the next source is asked).
constexpr std::int64_t kMinL1dBytes = std::int64_t{8} << 10, kMaxL1dBytes = std::int64_t{1} << 20;
constexpr std::int64_t kMinL2Bytes = std::int64_t{64} << 10, kMaxL2Bytes = std::int64_t{64} << 20;
constexpr std::int64_t kMinL3Bytes = std::int64_t{256} << 10, kMaxL3Bytes = std::int64_t{4} << 30;
// The most L3 one logical CPU has to itself (a 3D V-Cache CCX: 96 MiB over 8 cores, no SMT).
constexpr std::int64_t kMaxL3PerCpuBytes = std::int64_t{12} << 20;

// One cache as a cpuid deterministic cache leaf (4 or 0x8000001D, same layout) describes it.
struct CpuidCache {
  int level = 0;           // 1, 2, 3; 0 = no cache at this subleaf (the list ends)
  bool data = false;       // a data or unified cache (not instruction-only)
  std::int64_t bytes = 0;  // ways x partitions x line x sets
  int sharing = 1;         // logical CPUs sharing it (EAX[25:14] + 1)
};
// Decodes one subleaf's EAX, EBX, ECX.
CpuidCache decodeCpuidCacheLeaf(std::uint32_t eax, std::uint32_t ebx, std::uint32_t ecx);

// What this CPU and the OS say besides sysfs (injectable for tests).
struct CacheProbe {
  // From cpuid's deterministic cache leaf (0 = not given): sizes and the L3's sharing.
  std::int64_t cpuid_l1d = 0, cpuid_l2 = 0, cpuid_l3 = 0;
  int cpuid_l3_sharing = 0;
  int package_cpus = 0;  // cpuid leaf 1 EBX[23:16]: logical CPUs in the package (0 = unknown)
  // sysconf(_SC_LEVEL*_CACHE_SIZE) and _SC_NPROCESSORS_ONLN (0 = not given).
  std::int64_t sysconf_l1d = 0, sysconf_l2 = 0, sysconf_l3 = 0;
  int online_cpus = 0;
};
// This host's probe (cpuid on x86-64 only; elsewhere those fields stay 0).
CacheProbe hostCacheProbe();

// A sysfs cache size: "32K", "512K", "32768K", "1M", "4096" -> bytes; -1 when malformed.
std::int64_t parseCacheSize(std::string_view text);
// A sysfs CPU list ("0-1,4,6-7") -> CPUs it names (5); 0 when malformed or empty.
int countCpuList(std::string_view list);
// The caches one CPU's sysfs cache directory (".../cpu0/cache") describes; a level it lacks
// (missing directory, unreadable or malformed files) stays 0.
CpuCaches readSysfsCaches(const std::string& cache_dir);
// sysfs at `cache_dir`, then `probe`'s cpuid and sysconf figures for the levels still missing,
// then the kFallback constants: every field set.
CpuCaches detectCpuCaches(const std::string& cache_dir, const CacheProbe& probe);
// The same with this host's probe (`use_sysconf` false: no probe, sysfs and constants only).
CpuCaches detectCpuCaches(const std::string& cache_dir, bool use_sysconf = true);
// detectCpuCaches on this host's cpu0, once per process.
const CpuCaches& hostCpuCaches();

}  // namespace shapevm
