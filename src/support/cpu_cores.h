// SPDX-License-Identifier: Apache-2.0
// How many cores this process may use — its CPU affinity mask (sched_getaffinity) capped by a
// cgroup CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, on the process's cgroup
// and its ancestors) — the thread count compiled kernels split across: the KernelThreads
// tunable, whose 0 ("auto") means those cores minus the compile threads busy right now — and the
// cores spare for a compile's helper threads: neither a busy compile thread nor a thread running
// a program holds them.
// Invariant: every core count returned is >= 1 (spareCores() excepted: it may be <= 0 when the
// busy threads outnumber the cores); an unreadable or malformed source means "no limit".
#pragma once

#include <chrono>
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

// Threads a compiled kernel may split across now: a KernelThreadsOnThisThread scope's count, else
// KernelThreads when > 0, else availableCores() minus the compile threads busy compiling (a
// compile thread keeps its core), at least 1.
int kernelThreads();

// Holds kernelThreads() to `threads` (at least 1) on the calling thread for the scope's lifetime,
// over the tunable and the busy compile threads (validation runs kernels on one thread).
class KernelThreadsOnThisThread {
 public:
  explicit KernelThreadsOnThisThread(int threads);
  ~KernelThreadsOnThisThread();
  KernelThreadsOnThisThread(const KernelThreadsOnThisThread&) = delete;
  KernelThreadsOnThisThread& operator=(const KernelThreadsOnThisThread&) = delete;

 private:
  int saved_;
};

// Marks the calling compile thread busy for the scope's lifetime (kernelThreads() accounts for it).
class BusyCompileThread {
 public:
  BusyCompileThread();
  ~BusyCompileThread();
  BusyCompileThread(const BusyCompileThread&) = delete;
  BusyCompileThread& operator=(const BusyCompileThread&) = delete;
};
int busyCompileThreads();

// Marks the calling thread as running a program (a top-level run) for the scope's lifetime.
// Nested scopes on one thread count once.
class BusyProgramThread {
 public:
  BusyProgramThread();
  ~BusyProgramThread();
  BusyProgramThread(const BusyProgramThread&) = delete;
  BusyProgramThread& operator=(const BusyProgramThread&) = delete;
};
// Inside a BusyProgramThread scope: the thread blocks (waits for the JIT) and leaves its core free
// for the scope's lifetime. Elsewhere a no-op.
class ProgramThreadBlocked {
 public:
  ProgramThreadBlocked();
  ~ProgramThreadBlocked();
  ProgramThreadBlocked(const ProgramThreadBlocked&) = delete;
  ProgramThreadBlocked& operator=(const ProgramThreadBlocked&) = delete;

 private:
  bool counted_ = false;
};
int busyProgramThreads();

// A program whose last run ended less than this ago still holds a core: calls back to back leave
// gaps (argument preparation, the caller's own code) that are no idle core.
inline constexpr std::chrono::milliseconds kProgramPause{50};
// Cores a compile may add helper threads on now: availableCores() minus the busy compile threads
// and the threads running a program (at least one while a run ended under kProgramPause ago).
// <= 0: another thread would take a core from the program (or from a compile thread) on a
// machine with nothing else to run.
int spareCores();

}  // namespace shapevm
