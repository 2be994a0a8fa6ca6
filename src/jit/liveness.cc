// SPDX-License-Identifier: Apache-2.0
// Register liveness (see liveness.h).
#include "jit/liveness.h"

namespace shapevm::jit {

void Liveness::readsWrites(const Function& function, int pc, std::vector<int>& reads, std::vector<int>& writes) {
  reads.clear();
  writes.clear();
  const Instruction& in = function.code[static_cast<std::size_t>(pc)];
  if (in.op == Opcode::CallOp) {
    const OpSite& site = function.op_sites[static_cast<std::size_t>(in.a)];
    for (std::int32_t r : site.inputs) {
      if (r >= 0) reads.push_back(r);
    }
    for (std::int32_t r : site.outputs) writes.push_back(r);
    return;
  }
  if (in.op == Opcode::Call) {
    const CallSite& call = function.call_sites[static_cast<std::size_t>(in.a)];
    reads.assign(call.args.begin(), call.args.end());
    writes.assign(call.results.begin(), call.results.end());
    return;
  }
  const std::string_view format = opcodeFormat(in.op);
  const std::int32_t fields[3] = {in.a, in.b, in.c};
  for (std::size_t k = 0; k < format.size() && k < 3; ++k) {
    const auto role = static_cast<OperandRole>(format[k]);
    if (role == OperandRole::RegRead) reads.push_back(fields[k]);
    if (role == OperandRole::RegWrite) writes.push_back(fields[k]);
    if (role == OperandRole::RegListRead || role == OperandRole::RegListWrite) {
      // The list is b = offset into the operand pool, c = count.
      std::vector<int>& list = role == OperandRole::RegListRead ? reads : writes;
      for (std::int32_t i = 0; i < in.c; ++i) list.push_back(function.operand_pool[static_cast<std::size_t>(in.b + i)]);
    }
  }
}

void Liveness::successors(const Function& function, int pc, std::vector<int>& out) {
  out.clear();
  const Instruction& in = function.code[static_cast<std::size_t>(pc)];
  switch (in.op) {
    case Opcode::Return: return;
    case Opcode::Jump: out.push_back(in.a); return;
    case Opcode::BranchIf: out.push_back(in.b); out.push_back(in.c); return;
    case Opcode::JitEnter: out.push_back(pc + 1); out.push_back(in.b); return;
    default: out.push_back(pc + 1); return;
  }
}

Liveness::Liveness(const Function& function) {
  const int n = static_cast<int>(function.code.size());
  words_ = (function.num_registers + 63) / 64;
  live_in_.assign(static_cast<std::size_t>(n) * static_cast<std::size_t>(words_), 0);
  std::vector<int> reads, writes, next;
  std::vector<std::uint64_t> set(static_cast<std::size_t>(words_));
  bool changed = true;
  while (changed) {
    changed = false;
    for (int pc = n - 1; pc >= 0; --pc) {
      std::fill(set.begin(), set.end(), 0);
      successors(function, pc, next);
      for (int s : next) {
        if (s < 0 || s >= n) continue;
        for (int w = 0; w < words_; ++w) set[static_cast<std::size_t>(w)] |= live_in_[static_cast<std::size_t>(s * words_ + w)];
      }
      readsWrites(function, pc, reads, writes);
      for (int r : writes) set[static_cast<std::size_t>(r / 64)] &= ~(std::uint64_t{1} << (r % 64));
      for (int r : reads) set[static_cast<std::size_t>(r / 64)] |= std::uint64_t{1} << (r % 64);
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
