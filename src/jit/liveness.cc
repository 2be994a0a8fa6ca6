// SPDX-License-Identifier: Apache-2.0
// Register liveness (see liveness.h).
#include "jit/liveness.h"

#include "bytecode/instruction_info.h"

namespace shapevm::jit {

Liveness::Liveness(const Function& function) {
  const int n = static_cast<int>(function.code.size());
  words_ = (function.num_registers + 63) / 64;
  live_in_.assign(static_cast<std::size_t>(n) * static_cast<std::size_t>(words_), 0);
  std::vector<std::uint64_t> set(static_cast<std::size_t>(words_));
  bool changed = true;
  while (changed) {
    changed = false;
    for (int pc = n - 1; pc >= 0; --pc) {
      std::fill(set.begin(), set.end(), 0);
      const Instruction& in = function.code[static_cast<std::size_t>(pc)];
      for (int s : successors(in, pc)) {
        if (s < 0 || s >= n) continue;
        for (int w = 0; w < words_; ++w) set[static_cast<std::size_t>(w)] |= live_in_[static_cast<std::size_t>(s * words_ + w)];
      }
      forEachWrite(function, in,
                   [&](int r) { set[static_cast<std::size_t>(r / 64)] &= ~(std::uint64_t{1} << (r % 64)); });
      forEachRead(function, in, [&](int r) { set[static_cast<std::size_t>(r / 64)] |= std::uint64_t{1} << (r % 64); });
      for (int w = 0; w < words_; ++w) {
        std::uint64_t& slot = live_in_[static_cast<std::size_t>(pc * words_ + w)];
        if (slot != set[static_cast<std::size_t>(w)]) {
          slot = set[static_cast<std::size_t>(w)];
          changed = true;
        }
      }
    }
  }
}

bool Liveness::liveAt(int pc, int reg) const {
  if (pc < 0 || static_cast<std::size_t>(pc) * static_cast<std::size_t>(words_) >= live_in_.size()) return false;
  return (live_in_[static_cast<std::size_t>(pc * words_ + reg / 64)] >> (reg % 64)) & 1;
}

}  // namespace shapevm::jit
