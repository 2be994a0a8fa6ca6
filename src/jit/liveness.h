// SPDX-License-Identifier: Apache-2.0
// Register liveness over a function's bytecode (classic backward dataflow to a fixed point), from
// the reads, writes and successors of bytecode/instruction_info.h: which registers may still be
// read after a given PC. Region fusion uses it to decide which values a fused range must write back to registers;
// everything else stays inside the kernels and is never materialized.
#pragma once

#include <cstdint>
#include <vector>

#include "bytecode/module.h"

namespace shapevm::jit {

class Liveness {
 public:
  explicit Liveness(const Function& function);
  // True when register `reg` may be read on some path that starts at `pc` before being written.
  bool liveAt(int pc, int reg) const;

 private:
  int words_ = 0;
  std::vector<std::uint64_t> live_in_;  // per PC, words_ words
};

}  // namespace shapevm::jit
