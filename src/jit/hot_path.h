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
// Hot when executions >= hot_count and time >= hot_ms (tunables HotCount, HotMs).
bool isHot(const RegionHeat& heat);

}  // namespace shapevm::jit
