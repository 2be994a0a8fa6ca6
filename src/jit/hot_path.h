// SPDX-License-Identifier: Apache-2.0
// HotPathDetector: the regions of a function — loop bodies (LoopStart..LoopEnd) and straight-line
// runs of CallOps in one basic block outside loops — and their heat (executions, cumulative time)
// from the interpreter's counters. Every CallOp site belongs to exactly one region: its innermost
// loop, else its basic block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bytecode/module.h"
#include "vm/vm.h"

namespace shapevm::jit {

struct Region {
  enum class Kind : std::uint8_t { Loop, Block };
  Kind kind = Kind::Block;
  int loop = -1;          // loop region id (Kind::Loop)
  int start_pc = 0;       // first instruction (LoopStart for loops)
  int end_pc = 0;         // one past the last instruction
  std::vector<int> sites; // op site indices, in PC order
  std::vector<int> pcs;   // the CallOp PC of each site
};

struct RegionHeat {
  std::uint64_t executions = 0;
  double milliseconds = 0.0;
};

std::vector<Region> findRegions(const Function& function);
RegionHeat measureRegion(const Region& region, const FunctionRuntime& runtime);
// Cumulative milliseconds spent at these op sites (a fused range's time: its runs are timed at its
// first site, the ops of a declined run at their own).
double sitesMilliseconds(const std::vector<int>& sites, const FunctionRuntime& runtime);
// Mean nanoseconds per execution spent at these op sites (executions: the calls of the first
// site; before a compile, all interpreted); -1 when they have not run or were not timed.
double sitesMeanNanos(const std::vector<int>& sites, const FunctionRuntime& runtime);

// About what one compiled launch costs beyond the kernel's own work (guards, the kernel ABI,
// output buffers): ~1 us measured on the reference host (BENCHMARKS.md, issue 19 follow-up).
inline constexpr double kCompiledLaunchNs = 1000.0;

// What an op site's (or fusible range's) interpreted executions cost.
// Tiny operands (every profiled signature: the product of each op's tensor operands' element
// counts <= kTinyElements, no int or tuple operand that could be a size): the ops' work is
// negligible next to their dispatch, so the cost is counted, not clocked: fewer than
// kTinyRangeOps ops stay interpreted. A one-op call on 1-element arrays stays interpreted on
// any host, however loaded or slowed (valgrind, sanitizers).
// Otherwise it is timed, and the cumulative mean alone misleads on a shared host: one preempted
// call adds its whole time slice to it. So the decision takes the least mean over intervals of
// >= kMinInterval executions (other load inflates some intervals, not all of them); a site over
// the launch compiles once kIntervals intervals agree, or at once when it is over 10x the launch.
struct InterpretedCost {
  static constexpr std::int64_t kTinyElements = 64;
  // Measured in instructions per Python call of n 1-element float32 ops, n = 1..4 (callgrind;
  // BENCHMARKS.md "One-op call overhead, round 3"): interpreted about 5.3k + 1.37k n, one compiled
  // region about 10.8k + 0.9k n, one compiled op 7.6k. The region repays itself at about 12 ops.
  static constexpr std::size_t kTinyRangeOps = 12;
  static constexpr std::uint64_t kMinInterval = 2;
  static constexpr int kIntervals = 4;
  std::uint64_t calls = 0;  // the counters at the current interval's start (0: none yet)
  double nanos = 0.0;
  // Counters noted before the sites were hot (startInterpretedCost): the first interval starts
  // there. Not a verdict: `calls` stays 0 until cheaperInterpreted is asked.
  std::uint64_t early_calls = 0;
  double early_nanos = 0.0;
  double best_ns = -1.0;  // least interval mean so far (-1: none)
  int intervals = 0;      // intervals measured
};
// True at O2 when these sites, interpreted, cost less per execution than a compiled launch
// (kCompiledLaunchNs): compiling them would make every call slower (a one-op call on 1-element
// arrays, a chain of tiny ops), so they stay interpreted while that holds. Also true while it
// is unknown: an over-the-launch cumulative mean waits for its intervals (InterpretedCost).
// hot_ms = 0 (compile whatever is hot, regardless of time) turns this off.
bool cheaperInterpreted(InterpretedCost& cost, const std::vector<int>& sites, const FunctionRuntime& runtime,
                        int level);
// Notes the sites' counters (once, after the warm-up, while they are not hot yet) as the start of
// the first interval cheaperInterpreted measures, so the run that makes them hot already ends one.
void startInterpretedCost(InterpretedCost& cost, const std::vector<int>& sites, const FunctionRuntime& runtime);
// Hot when executions >= hot_count and time >= hot_ms (tunables HotCount, HotMs).
bool isHot(const RegionHeat& heat);

// Pay-off aware compiling (O2, tunable CompilePayoffMs): a fused range's first compile starts once
// the time its ops spent interpreted, times the fraction of it a compiled region saves
// (kCompiledGain: the reference cell runs 4-9x faster compiled), repays the compile's estimated
// cost. The past predicts as much again to come: a run that ends right after the compile spent
// at most about twice what compiling at once would have, and a long run compiles early.
inline constexpr double kCompiledGain = 0.75;
// A warm kernel cache (entries on disk): compiles cost about this fraction of a cold one (the
// reference cell's region: ~30 ms of compile-thread CPU warm, ~280 ms cold).
inline constexpr double kWarmCacheCostFraction = 0.1;
// The kernels a fused range over these sites compiles into, estimated before planning: one per
// contraction (matmul, conv: each a step of its own), one for everything else (fused).
int estimatedRegionKernels(const Function& function, const std::vector<int>& sites);
// With a spare core (the process may use a core that neither the interpreter nor a busy compile
// thread holds) the compile runs beside the program, not in its time: what it still costs the
// program is the sharing of the physical core (two vCPUs may be hyperthreads of one core), the
// caches and memory bandwidth, counted as this fraction of its CPU.
inline constexpr double kSpareCoreCostFraction = 0.25;
// What of a compile's estimated `cost_ms` the program pays: all of it, or kSpareCoreCostFraction
// of it when `spare_cores` > 0.
double countedCompileCost(double cost_ms, int spare_cores);
// True when `interpreted_ms` of interpreted time times kCompiledGain repays `cost_ms`.
bool compilePaysOff(double interpreted_ms, double cost_ms);
// Pay-off aware hotness (O2, issue 23 item 7): a fused range whose calls are expensive is compiled
// before hot_count executions, right after the warm-up, once what its ops already spent
// interpreted repays the estimated compile (compilePaysOff on `cost_ms`, the counted estimate,
// which must be > 0) and is at least hot_ms, and its mean interpreted cost per execution,
// `mean_ns` (warm-up runs included), is at least kEarlyCompileMinCallNs: the count only waits for
// evidence, and a region costing milliseconds a call has given it. A range of cheap calls (a
// tiny op's 1-2 us) never gets there: its hot_ms alone takes thousands of calls, and hot_count
// comes first. hot_ms = 0 or a zero estimate (compile_payoff_ms = 0) turns this off (the range is
// hot at hot_count as before).
inline constexpr double kEarlyCompileMinCallNs = 100.0 * kCompiledLaunchNs;
bool paysOffBeforeHot(double ran_ms, double mean_ns, double cost_ms);
// True when every profiled signature at these sites has tiny operands (InterpretedCost): their
// cost is counted, not clocked, so a preempted run never makes them look expensive.
bool tinyOperandSites(const std::vector<int>& sites, const FunctionRuntime& runtime);

}  // namespace shapevm::jit
