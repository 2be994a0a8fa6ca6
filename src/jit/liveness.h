// SPDX-License-Identifier: Apache-2.0
// Register liveness over a function's bytecode (classic backward dataflow to a fixed point), from
// the operand roles of opcodes.def: which registers may still be read after a given PC. Region
// fusion uses it to decide which values a fused range must write back to registers; everything
// else stays inside the kernels and is never materialized.
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

  // The registers instruction `pc` reads / writes (CallOp and Call expand their sites).
  static void readsWrites(const Function& function, int pc, std::vector<int>& reads, std::vector<int>& writes);
  // The PCs control may go to after `pc` (none after Return).
  static void successors(const Function& function, int pc, std::vector<int>& out);

 private:
  int words_ = 0;
  std::vector<std::uint64_t> live_in_;  // per PC, words_ words
};

}  // namespace shapevm::jit
