// SPDX-License-Identifier: Apache-2.0
// Core counting from the affinity mask and the cgroup CPU quota (see cpu_cores.h).
#include "support/cpu_cores.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "support/tunables.h"

namespace shapevm {

namespace {

std::atomic<int> busy_compile_threads{0};
std::atomic<int> busy_program_threads{0};
// When the last program run ended (steady clock, ns); a program running calls back to back keeps
// its core between them. A ProgramThreadBlocked scope clears it (that thread's core is free).
constexpr std::int64_t kNoRecentEnd = std::numeric_limits<std::int64_t>::min() / 2;
std::atomic<std::int64_t> last_program_end_ns{kNoRecentEnd};
thread_local int t_program_depth = 0;         // BusyProgramThread scopes open on this thread
thread_local bool t_program_blocked = false;  // a ProgramThreadBlocked scope took it off the count
thread_local int t_kernel_threads = 0;        // a KernelThreadsOnThisThread scope's count (0: none)

std::int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\n' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::optional<long long> parseInteger(std::string_view text) {
  text = trim(text);
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<int> quotaCores(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  const long long cores = (quota + period - 1) / period;  // rounded up, as the runtime of Go does
  return static_cast<int>(std::clamp<long long>(cores, 1, 1 << 20));
}

std::optional<std::string> readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int affinityCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// The tightest quota on `relative` (a cgroup path) and its ancestors under `root`.
template <typename Read>
std::optional<int> tightestQuota(const std::string& root, std::string relative, Read read) {
  std::optional<int> best;
  for (;;) {
    if (std::optional<int> cores = read(root + relative)) best = best ? std::min(*best, *cores) : *cores;
    if (relative.empty() || relative == "/") break;
    const std::size_t slash = relative.find_last_of('/');
    relative = slash == std::string::npos ? std::string() : relative.substr(0, slash);
  }
  return best;
}

std::optional<int> cgroupCores() {
  const std::optional<std::string> self = readFile("/proc/self/cgroup");
  if (!self) return std::nullopt;
  std::optional<int> best;
  std::istringstream lines(*self);
  std::string line;
  while (std::getline(lines, line)) {
    // "0::/path" (v2) or "4:cpu,cpuacct:/path" (v1).
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path == "/") path.clear();
    std::optional<int> cores;
    if (controllers.empty()) {
      cores = tightestQuota("/sys/fs/cgroup", path, [](const std::string& dir) -> std::optional<int> {
        const std::optional<std::string> text = readFile(dir + "/cpu.max");
        return text ? cgroupV2QuotaCores(*text) : std::nullopt;
      });
    } else {
      std::istringstream names(controllers);
      std::string name;
      bool cpu = false;
      while (std::getline(names, name, ',')) cpu = cpu || name == "cpu";
      if (!cpu) continue;
      for (const std::string mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
        cores = tightestQuota(mount, path, [](const std::string& dir) -> std::optional<int> {
          const std::optional<std::string> quota = readFile(dir + "/cpu.cfs_quota_us");
          const std::optional<std::string> period = readFile(dir + "/cpu.cfs_period_us");
          return quota && period ? cgroupV1QuotaCores(*quota, *period) : std::nullopt;
        });
        if (cores) break;
      }
    }
    if (cores) best = best ? std::min(*best, *cores) : *cores;
  }
  return best;
}

}  // namespace

std::optional<int> cgroupV2QuotaCores(std::string_view cpu_max) {
  cpu_max = trim(cpu_max);
  const std::size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view quota = cpu_max.substr(0, space);
  if (quota == "max") return std::nullopt;
  const std::optional<long long> q = parseInteger(quota);
  const std::optional<long long> p = parseInteger(cpu_max.substr(space + 1));
  if (!q || !p) return std::nullopt;
  return quotaCores(*q, *p);
}

std::optional<int> cgroupV1QuotaCores(std::string_view quota_us, std::string_view period_us) {
  const std::optional<long long> q = parseInteger(quota_us);
  const std::optional<long long> p = parseInteger(period_us);
  if (!q || !p) return std::nullopt;
  return quotaCores(*q, *p);
}

int detectAvailableCores() {
  int cores = affinityCores();
  if (std::optional<int> quota = cgroupCores()) cores = std::min(cores, *quota);
  return std::max(cores, 1);
}

int availableCores() {
  static const int cores = detectAvailableCores();
  return cores;
}

int kernelThreads() {
  if (t_kernel_threads > 0) return t_kernel_threads;
  const std::int64_t fixed = Tunables::get(Tunable::KernelThreads);
  if (fixed > 0) return static_cast<int>(fixed);
  return std::max(1, availableCores() - busy_compile_threads.load(std::memory_order_relaxed));
}

KernelThreadsOnThisThread::KernelThreadsOnThisThread(int threads)
    : saved_(std::exchange(t_kernel_threads, std::max(1, threads))) {}
KernelThreadsOnThisThread::~KernelThreadsOnThisThread() {
  t_kernel_threads = saved_;
}

BusyCompileThread::BusyCompileThread() {
  busy_compile_threads.fetch_add(1, std::memory_order_relaxed);
}
BusyCompileThread::~BusyCompileThread() {
  busy_compile_threads.fetch_sub(1, std::memory_order_relaxed);
}
int busyCompileThreads() {
  return busy_compile_threads.load(std::memory_order_relaxed);
}

BusyProgramThread::BusyProgramThread() {
  if (t_program_depth++ == 0 && !t_program_blocked) busy_program_threads.fetch_add(1, std::memory_order_relaxed);
}
BusyProgramThread::~BusyProgramThread() {
  if (--t_program_depth > 0 || t_program_blocked) return;
  last_program_end_ns.store(steadyNs(), std::memory_order_relaxed);
  busy_program_threads.fetch_sub(1, std::memory_order_relaxed);
}
ProgramThreadBlocked::ProgramThreadBlocked() : counted_(t_program_depth > 0 && !t_program_blocked) {
  if (!counted_) return;
  t_program_blocked = true;
  last_program_end_ns.store(kNoRecentEnd, std::memory_order_relaxed);
  busy_program_threads.fetch_sub(1, std::memory_order_relaxed);
}
ProgramThreadBlocked::~ProgramThreadBlocked() {
  if (!counted_) return;
  t_program_blocked = false;
  busy_program_threads.fetch_add(1, std::memory_order_relaxed);
}
int busyProgramThreads() {
  return busy_program_threads.load(std::memory_order_relaxed);
}

int spareCores() {
  const std::int64_t since_end = steadyNs() - last_program_end_ns.load(std::memory_order_relaxed);
  const bool recent = since_end < std::chrono::duration_cast<std::chrono::nanoseconds>(kProgramPause).count();
  return availableCores() - busyCompileThreads() - std::max(busyProgramThreads(), recent ? 1 : 0);
}

}  // namespace shapevm
