// SPDX-License-Identifier: Apache-2.0
// Host cache sizes (see cpu_caches.h): the sysfs parser, the cpuid, sysconf and constant
// fallbacks with their sanity bounds.
#include "support/cpu_caches.h"

#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace shapevm {

namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  return text;
}

// A non-negative decimal filling all of `text`; -1 otherwise.
std::int64_t parseNumber(std::string_view text) {
  std::int64_t value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return -1;
  return value;
}

std::string readSmallFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string formatBytes(std::int64_t bytes) {
  if (bytes >= (std::int64_t{1} << 20) && bytes % (std::int64_t{1} << 20) == 0)
    return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

}  // namespace

std::string CpuCaches::toString() const {
  return fmt::format("L1d {}, L2 {}, L3 {} / {} CPUs ({})", formatBytes(l1d_bytes), formatBytes(l2_bytes),
                     formatBytes(l3_bytes), l3_sharing, source);
}

std::int64_t parseCacheSize(std::string_view text) {
  text = trim(text);
  if (text.empty()) return -1;
  std::int64_t scale = 1;
  switch (text.back()) {
    case 'K':
    case 'k': scale = std::int64_t{1} << 10; break;
    case 'M':
    case 'm': scale = std::int64_t{1} << 20; break;
    case 'G':
    case 'g': scale = std::int64_t{1} << 30; break;
    default: break;
  }
  if (scale != 1) text.remove_suffix(1);
  const std::int64_t number = parseNumber(text);
  if (number < 0 || number > (std::int64_t{1} << 40) / scale) return -1;
  return number * scale;
}

int countCpuList(std::string_view list) {
  list = trim(list);
  if (list.empty()) return 0;
  int count = 0;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    const std::size_t dash = item.find('-');
    const std::int64_t first = parseNumber(item.substr(0, dash));
    const std::int64_t last = dash == std::string_view::npos ? first : parseNumber(item.substr(dash + 1));
    if (first < 0 || last < first || last - first > 65535) return 0;
    count += static_cast<int>(last - first + 1);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return count;
}

CpuCaches readSysfsCaches(const std::string& cache_dir) {
  CpuCaches caches;
  std::error_code error;
  std::filesystem::directory_iterator it(cache_dir, error);
  if (error) return caches;
  for (const std::filesystem::directory_entry& entry : it) {
    if (entry.path().filename().string().rfind("index", 0) != 0) continue;
    const std::int64_t level = parseNumber(trim(readSmallFile(entry.path() / "level")));
    const std::string type(trim(readSmallFile(entry.path() / "type")));
    const std::int64_t size = parseCacheSize(readSmallFile(entry.path() / "size"));
    if (size <= 0 || (type != "Data" && type != "Unified")) continue;
    if (level == 1) caches.l1d_bytes = size;
    if (level == 2) caches.l2_bytes = size;
    if (level == 3) {
      caches.l3_bytes = size;
      caches.l3_sharing = std::max(1, countCpuList(readSmallFile(entry.path() / "shared_cpu_list")));
    }
  }
  return caches;
}

CpuidCache decodeCpuidCacheLeaf(std::uint32_t eax, std::uint32_t ebx, std::uint32_t ecx) {
  CpuidCache cache;
  const std::uint32_t type = eax & 0x1f;  // 0 none, 1 data, 2 instruction, 3 unified
  if (type == 0) return cache;
  cache.level = static_cast<int>((eax >> 5) & 0x7);
  cache.data = type == 1 || type == 3;
  cache.sharing = static_cast<int>((eax >> 14) & 0xfff) + 1;
  const std::int64_t ways = ((ebx >> 22) & 0x3ff) + 1;
  const std::int64_t partitions = ((ebx >> 12) & 0x3ff) + 1;
  const std::int64_t line = (ebx & 0xfff) + 1;
  const std::int64_t sets = std::int64_t{ecx} + 1;
  cache.bytes = ways * partitions * line * sets;
  return cache;
}

CacheProbe hostCacheProbe() {
  CacheProbe probe;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) != 0) {
    const unsigned max_leaf = eax;
    char vendor[13] = {};
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    if (max_leaf >= 1 && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (edx & (1u << 28)) != 0)
      probe.package_cpus = static_cast<int>((ebx >> 16) & 0xff);
    // The deterministic cache leaf: 4 on Intel, 0x8000001D on AMD/Hygon (topology extensions).
    unsigned leaf = 0;
    if (std::strcmp(vendor, "GenuineIntel") == 0 && max_leaf >= 4) leaf = 4;
    if (std::strcmp(vendor, "AuthenticAMD") == 0 || std::strcmp(vendor, "HygonGenuine") == 0) {
      const unsigned max_extended = __get_cpuid_max(0x80000000u, nullptr);
      if (max_extended >= 0x8000001Du && __get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) != 0 &&
          (ecx & (1u << 22)) != 0)
        leaf = 0x8000001Du;
    }
    for (unsigned sub = 0; leaf != 0 && sub < 16; ++sub) {
      __cpuid_count(leaf, sub, eax, ebx, ecx, edx);
      const CpuidCache cache = decodeCpuidCacheLeaf(eax, ebx, ecx);
      if (cache.level == 0) break;
      if (!cache.data) continue;
      if (cache.level == 1) probe.cpuid_l1d = cache.bytes;
      if (cache.level == 2) probe.cpuid_l2 = cache.bytes;
      if (cache.level == 3) {
        probe.cpuid_l3 = cache.bytes;
        probe.cpuid_l3_sharing = cache.sharing;
      }
    }
  }
#endif
  auto config = [](int name) { return std::max<std::int64_t>(0, sysconf(name)); };
  probe.sysconf_l1d = config(_SC_LEVEL1_DCACHE_SIZE);
  probe.sysconf_l2 = config(_SC_LEVEL2_CACHE_SIZE);
  probe.sysconf_l3 = config(_SC_LEVEL3_CACHE_SIZE);
  probe.online_cpus = static_cast<int>(std::max<long>(0, sysconf(_SC_NPROCESSORS_ONLN)));
  return probe;
}

CpuCaches detectCpuCaches(const std::string& cache_dir, const CacheProbe& probe) {
  CpuCaches caches = readSysfsCaches(cache_dir);
  // The first plausible figure of sysfs, cpuid, sysconf, else the fallback.
  auto fill = [&](std::int64_t& bytes, const char* name, std::int64_t from_cpuid, std::int64_t from_sysconf,
                  std::int64_t fallback, std::int64_t low, std::int64_t high) {
    auto plausible = [&](std::int64_t value) { return value >= low && value <= high; };
    const char* from = "sysfs";
    if (!plausible(bytes)) {
      from = plausible(from_cpuid) ? "cpuid" : plausible(from_sysconf) ? "sysconf" : "fallback";
      bytes = plausible(from_cpuid) ? from_cpuid : plausible(from_sysconf) ? from_sysconf : fallback;
    }
    caches.source += fmt::format("{}{}={}", caches.source.empty() ? "" : " ", name, from);
    return std::string_view(from);
  };
  fill(caches.l1d_bytes, "l1d", probe.cpuid_l1d, probe.sysconf_l1d, kFallbackL1dBytes, kMinL1dBytes, kMaxL1dBytes);
  fill(caches.l2_bytes, "l2", probe.cpuid_l2, probe.sysconf_l2, kFallbackL2Bytes, kMinL2Bytes, kMaxL2Bytes);
  const std::string_view l3_from =
      fill(caches.l3_bytes, "l3", probe.cpuid_l3, probe.sysconf_l3, kFallbackL3Bytes, kMinL3Bytes, kMaxL3Bytes);
  if (l3_from == "cpuid") caches.l3_sharing = std::max(1, probe.cpuid_l3_sharing);
  // sysconf gives the L3 but not who shares it (often the whole package's, every CCX's L3
  // together on AMD): the package's logical CPUs, at least the online ones.
  if (l3_from == "sysconf") caches.l3_sharing = std::max({1, probe.package_cpus, probe.online_cpus});
  if (l3_from == "fallback") caches.l3_sharing = 1;
  // No CPU has more L3 per logical CPU than kMaxL3PerCpuBytes: a larger share means the sharing
  // is undercounted (sysconf) and would size blocks for a cache the core does not have.
  if (l3_from != "sysfs" && caches.l3PerCpu() > kMaxL3PerCpuBytes) {
    caches.l3_sharing = static_cast<int>((caches.l3_bytes + kMaxL3PerCpuBytes - 1) / kMaxL3PerCpuBytes);
    caches.source += " (l3 share capped)";
  }
  return caches;
}

CpuCaches detectCpuCaches(const std::string& cache_dir, bool use_sysconf) {
  return detectCpuCaches(cache_dir, use_sysconf ? hostCacheProbe() : CacheProbe{});
}

const CpuCaches& hostCpuCaches() {
  static const CpuCaches caches = detectCpuCaches("/sys/devices/system/cpu/cpu0/cache");
  return caches;
}

}  // namespace shapevm
