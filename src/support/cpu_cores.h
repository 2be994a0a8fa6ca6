// SPDX-License-Identifier: Apache-2.0
// How many cores this process may use — its CPU affinity mask (sched_getaffinity) capped by a
// cgroup CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, on the process's cgroup
// and its ancestors) — and the thread count compiled kernels split across: the KernelThreads
// tunable, whose 0 ("auto") means those cores minus the compile threads busy right now.
// Invariant: every count returned is >= 1; an unreadable or malformed source means "no limit".
#pragma once

#include <optional>
#include <string_view>

namespace shapevm {

// Cores of the affinity mask capped by the cgroup quota (computed once per process).
int availableCores();
// The same, uncached (tests; a process whose affinity changed).
int detectAvailableCores();
// A cgroup quota as cores, rounded up: cgroup v2 `cpu.max` text ("max 100000", "150000 100000")
// or v1 quota/period numbers (quota -1 = none). nullopt = no limit or unparsable.
std::optional<int> cgroupV2QuotaCores(std::string_view cpu_max);
std::optional<int> cgroupV1QuotaCores(std::string_view quota_us, std::string_view period_us);

// Threads a compiled kernel may split across now: KernelThreads when > 0, else availableCores()
// minus the compile threads busy compiling (a compile thread keeps its core), at least 1.
int kernelThreads();

// Marks the calling compile thread busy for the scope's lifetime (kernelThreads() accounts for it).
class BusyCompileThread {
 public:
  BusyCompileThread();
  ~BusyCompileThread();
  BusyCompileThread(const BusyCompileThread&) = delete;
  BusyCompileThread& operator=(const BusyCompileThread&) = delete;
};
int busyCompileThreads();

}  // namespace shapevm
