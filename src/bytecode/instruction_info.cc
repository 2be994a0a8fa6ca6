// SPDX-License-Identifier: Apache-2.0
// Register lists and successors of an instruction (see instruction_info.h).
#include "bytecode/instruction_info.h"

namespace shapevm {

RegisterLists<const std::int32_t> registerListsOf(const Function& function, const Instruction& inst) {
  RegisterLists<const std::int32_t> lists;
  for (int f = 0; f < 3; ++f) {
    switch (operandRole(inst.op, f)) {
      case OperandRole::OpSite: {
        const OpSite& site = function.op_sites[static_cast<std::size_t>(inst.a)];
        lists.site_inputs = site.inputs;
        lists.site_outputs = site.outputs;
        break;
      }
      case OperandRole::CallSite: {
        const CallSite& site = function.call_sites[static_cast<std::size_t>(inst.a)];
        lists.site_inputs = site.args;
        lists.site_outputs = site.results;
        break;
      }
      case OperandRole::RegListRead:
      case OperandRole::RegListWrite:
        lists.list = std::span<const std::int32_t>(function.operand_pool)
                         .subspan(static_cast<std::size_t>(inst.b), static_cast<std::size_t>(inst.c));
        break;
      default: break;
    }
  }
  return lists;
}

bool endsBlock(Opcode op) {
  if (op == Opcode::Return) return true;
  for (int f = 0; f < 3; ++f) {
    if (operandRole(op, f) == OperandRole::Target) return true;
  }
  return false;
}

Successors successors(const Instruction& inst, int pc) {
  Successors out;
  if (inst.op == Opcode::Return) return out;
  const std::int32_t fields[3] = {inst.a, inst.b, inst.c};
  for (int f = 0; f < 3; ++f) {
    if (operandRole(inst.op, f) == OperandRole::Target && out.count < 2) out.pcs[out.count++] = fields[f];
  }
  if (out.count == 0) out.pcs[out.count++] = pc + 1;
  return out;
}

}  // namespace shapevm
