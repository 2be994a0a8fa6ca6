// SPDX-License-Identifier: Apache-2.0
// Which registers an instruction reads and writes, and where control goes after it, derived
// from the operand roles of opcodes.def (r/D fields, v/V operand-pool lists, s op-site inputs and
// outputs, c call-site arguments and results, t targets). The verifier, liveness, the frontend's
// optimizer and the region finder all ask here; nothing else spells out per-opcode registers.
// Invariant: an omitted optional op input (-1) is never reported as a read.
#pragma once

#include <cstdint>
#include <span>

#include "bytecode/module.h"

namespace shapevm {

// The register lists an instruction refers to besides its fields, wherever they are kept: the
// op site's or call site's inputs/outputs (CallOp, Call) and the operand-pool list (v / V).
template <class T>  // std::int32_t (mutable, for renumbering) or const std::int32_t
struct RegisterLists {
  std::span<T> site_inputs;
  std::span<T> site_outputs;
  std::span<T> list;
};

// Calls cb(reg, is_write) for every register operand of an instruction with opcode `op` and
// fields a, b, c, in field order (a site's inputs before its outputs). `reg` is a T& so a caller
// may rewrite it (register renumbering).
template <class T, class F>
void visitRegisters(Opcode op, T& a, T& b, T& c, const RegisterLists<T>& lists, F&& cb) {
  T* fields[3] = {&a, &b, &c};
  for (int f = 0; f < 3; ++f) {
    switch (operandRole(op, f)) {
      case OperandRole::RegRead: cb(*fields[f], false); break;
      case OperandRole::RegWrite: cb(*fields[f], true); break;
      case OperandRole::OpSite:
      case OperandRole::CallSite:
        for (T& r : lists.site_inputs) {
          if (r >= 0) cb(r, false);  // -1: an omitted optional input
        }
        for (T& r : lists.site_outputs) cb(r, true);
        break;
      case OperandRole::RegListRead:
      case OperandRole::RegListWrite:
        if (f == 1) {  // b and c describe one list
          for (T& r : lists.list) cb(r, operandRole(op, f) == OperandRole::RegListWrite);
        }
        break;
      default: break;
    }
  }
}

// The lists of instruction `inst` of `function` (sites and operand pool; the verifier has
// checked their indices).
RegisterLists<const std::int32_t> registerListsOf(const Function& function, const Instruction& inst);

template <class F>
void forEachRead(const Function& function, const Instruction& inst, F&& cb) {
  const RegisterLists<const std::int32_t> lists = registerListsOf(function, inst);
  visitRegisters<const std::int32_t>(inst.op, inst.a, inst.b, inst.c, lists, [&](const std::int32_t& r, bool write) {
    if (!write) cb(static_cast<int>(r));
  });
}

template <class F>
void forEachWrite(const Function& function, const Instruction& inst, F&& cb) {
  const RegisterLists<const std::int32_t> lists = registerListsOf(function, inst);
  visitRegisters<const std::int32_t>(inst.op, inst.a, inst.b, inst.c, lists, [&](const std::int32_t& r, bool write) {
    if (write) cb(static_cast<int>(r));
  });
}

// The PCs control may reach after instruction `inst` at `pc`: its jump targets (t roles) when it
// has any, none after Return, else pc + 1. At most two.
struct Successors {
  int pcs[2] = {0, 0};
  int count = 0;
  const int* begin() const { return pcs; }
  const int* end() const { return pcs + count; }
};
Successors successors(const Instruction& inst, int pc);

// True when control never falls through to pc + 1 (Return, Jump, BranchIf): a basic block ends.
bool endsBlock(Opcode op);

}  // namespace shapevm
