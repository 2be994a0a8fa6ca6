// SPDX-License-Identifier: Apache-2.0
// Region discovery and heat measurement (see hot_path.h).
#include "jit/hot_path.h"

#include <algorithm>

#include "ops/registry.h"
#include "support/tunables.h"
#include "vm/profile.h"

namespace shapevm::jit {

std::vector<Region> findRegions(const Function& function) {
  const int size = static_cast<int>(function.code.size());
  // Innermost loop of every PC: loops nest, so a stack over LoopStart/LoopEnd in PC order works
  // for the structured loops the frontend and assembler emit.
  std::vector<int> innermost(static_cast<std::size_t>(size), -1);
  std::vector<Region> loops(static_cast<std::size_t>(function.num_loops));
  std::vector<int> stack;
  std::vector<bool> leader(static_cast<std::size_t>(size) + 1, false);
  leader[0] = true;
  for (int pc = 0; pc < size; ++pc) {
    const Instruction& in = function.code[static_cast<std::size_t>(pc)];
    switch (in.op) {
      case Opcode::LoopStart: {
        Region& loop = loops[static_cast<std::size_t>(in.a)];
        loop.kind = Region::Kind::Loop;
        loop.loop = in.a;
        loop.start_pc = pc;
        stack.push_back(in.a);
        break;
      }
      case Opcode::LoopEnd: {
        loops[static_cast<std::size_t>(in.a)].end_pc = pc + 1;
        auto it = std::find(stack.rbegin(), stack.rend(), in.a);
        if (it != stack.rend()) stack.erase(std::next(it).base());
        break;
      }
      case Opcode::Jump: leader[static_cast<std::size_t>(in.a)] = true; leader[static_cast<std::size_t>(pc) + 1] = true; break;
      case Opcode::BranchIf:
        leader[static_cast<std::size_t>(in.b)] = true;
        leader[static_cast<std::size_t>(in.c)] = true;
        leader[static_cast<std::size_t>(pc) + 1] = true;
        break;
      case Opcode::Return: leader[static_cast<std::size_t>(pc) + 1] = true; break;
      default: break;
    }
    innermost[static_cast<std::size_t>(pc)] = stack.empty() ? -1 : stack.back();
  }
  std::vector<Region> regions;
  Region block;
  auto flush = [&] {
    if (!block.sites.empty()) regions.push_back(block);
    block = Region{};
  };
  for (int pc = 0; pc < size; ++pc) {
    if (leader[static_cast<std::size_t>(pc)]) flush();
    const Instruction& in = function.code[static_cast<std::size_t>(pc)];
    if (in.op != Opcode::CallOp) continue;
    const int loop = innermost[static_cast<std::size_t>(pc)];
    if (loop >= 0) {
      loops[static_cast<std::size_t>(loop)].sites.push_back(in.a);
      loops[static_cast<std::size_t>(loop)].pcs.push_back(pc);
      continue;
    }
    if (block.sites.empty()) block.start_pc = pc;
    block.end_pc = pc + 1;
    block.sites.push_back(in.a);
    block.pcs.push_back(pc);
  }
  flush();
  for (Region& loop : loops) {
    if (!loop.sites.empty()) regions.push_back(std::move(loop));
  }
  std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) { return a.start_pc < b.start_pc; });
  return regions;
}

RegionHeat measureRegion(const Region& region, const FunctionRuntime& runtime) {
  RegionHeat heat;
  if (region.kind == Region::Kind::Loop) {
    const LoopCounters& loop = runtime.loops[static_cast<std::size_t>(region.loop)];
    heat.executions = loop.iterations.load(std::memory_order_relaxed);
    heat.milliseconds = ticksToNanos(loop.ticks.load(std::memory_order_relaxed)) * 1e-6;
    return heat;
  }
  // A block runs as often as its first CallOp; its time is its sites' time.
  heat.executions = runtime.pc_counts[static_cast<std::size_t>(region.pcs.front())].load(std::memory_order_relaxed);
  heat.milliseconds = sitesMilliseconds(region.sites, runtime);
  return heat;
}

double sitesMilliseconds(const std::vector<int>& sites, const FunctionRuntime& runtime) {
  std::uint64_t ticks = 0;
  for (int site : sites) ticks += runtime.slots[static_cast<std::size_t>(site)].ticks.load(std::memory_order_relaxed);
  return ticksToNanos(ticks) * 1e-6;
}

double sitesMeanNanos(const std::vector<int>& sites, const FunctionRuntime& runtime) {
  if (sites.empty()) return -1.0;
  const std::uint64_t calls =
      runtime.slots[static_cast<std::size_t>(sites.front())].calls.load(std::memory_order_relaxed);
  const double ms = sitesMilliseconds(sites, runtime);
  if (calls == 0 || ms <= 0.0) return -1.0;  // not run yet, or not timed (profiling off)
  return ms * 1e6 / static_cast<double>(calls);
}

// Every input signature profiled at these sites is tiny (InterpretedCost): each site
// has a tensor operand, the product of its tensor operands' element counts is at most
// kTinyElements, and its other operands are floats, bools or omitted (an int or a tuple may be a
// size: zeros(n) reads nothing but writes n elements).
bool tinyOperandSites(const std::vector<int>& sites, const FunctionRuntime& runtime) {
  if (runtime.profiles == nullptr) return false;
  for (int site : sites) {
    const std::vector<ProfileRecord> records = runtime.profiles[static_cast<std::size_t>(site)].snapshot();
    if (records.empty()) return false;
    for (const ProfileRecord& record : records) {
      std::int64_t product = 1;
      bool tensor = false;
      for (const OperandProfile& operand : record.inputs) {
        if (!operand.is_tensor) {
          if (operand.kind == ValueKind::Int || operand.kind == ValueKind::Tuple) return false;
          continue;
        }
        tensor = true;
        product *= operand.shape.numel();
        if (product > InterpretedCost::kTinyElements) return false;
      }
      if (!tensor) return false;
    }
  }
  return true;
}

bool cheaperInterpreted(InterpretedCost& cost, const std::vector<int>& sites, const FunctionRuntime& runtime,
                        int level) {
  if (level < 2 || Tunables::get(Tunable::HotMs) <= 0 || sites.empty()) return false;
  // Tiny operands: the op's work is nothing next to its dispatch, so the count of ops decides,
  // not a clock that preemption and a loaded host inflate.
  const std::uint64_t calls =
      runtime.slots[static_cast<std::size_t>(sites.front())].calls.load(std::memory_order_relaxed);
  if (tinyOperandSites(sites, runtime)) {
    // Judged (the JIT's settle check asks for a verdict); were the shapes to grow, the clock's
    // first interval would start here.
    cost.calls = std::max<std::uint64_t>(calls, 1);
    cost.nanos = sitesMilliseconds(sites, runtime) * 1e6;
    return sites.size() < InterpretedCost::kTinyRangeOps;
  }
  const double ms = sitesMilliseconds(sites, runtime);
  if (calls == 0 || ms <= 0.0) return false;  // not run, or not timed (profiling off): no evidence
  const double total_ns = ms * 1e6;
  // Other load only ever adds time, so a cumulative mean below a launch is proof enough (and a
  // verdict: the first interval starts here, as the JIT's settle check wants one).
  if (total_ns / static_cast<double>(calls) < kCompiledLaunchNs) {
    if (cost.calls == 0) {
      cost.calls = calls;
      cost.nanos = total_ns;
    }
    return true;
  }
  if (cost.calls == 0 && cost.early_calls > 0 && calls > cost.early_calls) {
    cost.calls = cost.early_calls;  // the interval started before the sites were hot
    cost.nanos = cost.early_nanos;
  }
  if (cost.calls > 0 && calls >= cost.calls + InterpretedCost::kMinInterval) {
    const double interval = (total_ns - cost.nanos) / static_cast<double>(calls - cost.calls);
    cost.best_ns = cost.best_ns < 0.0 ? interval : std::min(cost.best_ns, interval);
    ++cost.intervals;
  }
  if (cost.calls == 0 || calls >= cost.calls + InterpretedCost::kMinInterval) {
    cost.calls = calls;  // the next interval starts here
    cost.nanos = total_ns;
  }
  if (cost.best_ns < 0.0 || cost.best_ns < kCompiledLaunchNs) return true;  // no interval yet, or cheap
  // Over the launch: clearly (10x) at once, else only once several intervals agree.
  return cost.best_ns < 10 * kCompiledLaunchNs && cost.intervals < InterpretedCost::kIntervals;
}

void startInterpretedCost(InterpretedCost& cost, const std::vector<int>& sites, const FunctionRuntime& runtime) {
  if (cost.calls > 0 || cost.early_calls > 0 || sites.empty()) return;
  cost.early_calls = runtime.slots[static_cast<std::size_t>(sites.front())].calls.load(std::memory_order_relaxed);
  cost.early_nanos = sitesMilliseconds(sites, runtime) * 1e6;
}

int estimatedRegionKernels(const Function& function, const std::vector<int>& sites) {
  int contractions = 0;
  bool rest = false;
  for (int site : sites) {
    const OpId op = function.op_sites[static_cast<std::size_t>(site)].op;
    const bool contraction = OpRegistry::global().schema(op).cls == shapevm::OpClass::Contraction;
    contractions += contraction ? 1 : 0;
    rest = rest || !contraction;
  }
  return contractions + (rest ? 1 : 0);
}

double countedCompileCost(double cost_ms, int spare_cores) {
  return spare_cores > 0 ? cost_ms * kSpareCoreCostFraction : cost_ms;
}

bool compilePaysOff(double interpreted_ms, double cost_ms) {
  return cost_ms <= 0.0 || interpreted_ms * kCompiledGain >= cost_ms;
}

bool paysOffBeforeHot(double ran_ms, double mean_ns, double cost_ms) {
  const auto hot_ms = static_cast<double>(Tunables::get(Tunable::HotMs));
  if (hot_ms <= 0 || cost_ms <= 0 || ran_ms < hot_ms || mean_ns < kEarlyCompileMinCallNs) return false;
  return compilePaysOff(ran_ms, cost_ms);
}

bool isHot(const RegionHeat& heat) {
  return heat.executions >= static_cast<std::uint64_t>(Tunables::get(Tunable::HotCount)) &&
         heat.milliseconds >= static_cast<double>(Tunables::get(Tunable::HotMs));
}

}  // namespace shapevm::jit
