// SPDX-License-Identifier: Apache-2.0
// Host cache sizes (see cpu_caches.h): the sysfs parser, the sysconf and constant fallbacks.
#include "support/cpu_caches.h"

#include <unistd.h>

#include <charconv>
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

CpuCaches detectCpuCaches(const std::string& cache_dir, bool use_sysconf) {
  CpuCaches caches = readSysfsCaches(cache_dir);
  auto fill = [&](std::int64_t& bytes, const char* name, int sysconf_name, std::int64_t fallback) {
    const char* from = "sysfs";
    if (bytes <= 0 && use_sysconf) {
      const long value = sysconf(sysconf_name);
      bytes = value > 0 ? value : 0;
      from = "sysconf";
    }
    if (bytes <= 0) {
      bytes = fallback;
      from = "fallback";
    }
    caches.source += fmt::format("{}{}={}", caches.source.empty() ? "" : " ", name, from);
    return std::string_view(from);
  };
  fill(caches.l1d_bytes, "l1d", _SC_LEVEL1_DCACHE_SIZE, kFallbackL1dBytes);
  fill(caches.l2_bytes, "l2", _SC_LEVEL2_CACHE_SIZE, kFallbackL2Bytes);
  const std::string_view l3_from = fill(caches.l3_bytes, "l3", _SC_LEVEL3_CACHE_SIZE, kFallbackL3Bytes);
  // sysconf gives the L3 but not who shares it: assume every online CPU (its size is often the
  // whole package's). The fallback constant is already per CPU.
  if (l3_from == "sysconf") caches.l3_sharing = std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  if (l3_from == "fallback") caches.l3_sharing = 1;
  return caches;
}

const CpuCaches& hostCpuCaches() {
  static const CpuCaches caches = detectCpuCaches("/sys/devices/system/cpu/cpu0/cache");
  return caches;
}

}  // namespace shapevm
