// SPDX-License-Identifier: Apache-2.0
// Name/format/meaning tables generated from opcodes.def.
#include "bytecode/opcodes.h"

#include <array>

namespace shapevm {
namespace {
struct OpcodeRow {
  std::string_view name, format, meaning;
};
constexpr std::array kRows = {
#define SVM_OPCODE(name, format, meaning) OpcodeRow{#name, format, meaning},
#include "bytecode/opcodes.def"
#undef SVM_OPCODE
};
static_assert(kRows.size() == kNumOpcodes, "opcode rows and enum disagree");
}  // namespace

std::string_view opcodeName(Opcode op) { return kRows[static_cast<std::size_t>(op)].name; }
std::string_view opcodeFormat(Opcode op) { return kRows[static_cast<std::size_t>(op)].format; }
std::string_view opcodeMeaning(Opcode op) { return kRows[static_cast<std::size_t>(op)].meaning; }

std::optional<Opcode> parseOpcode(std::string_view name) {
  for (std::size_t i = 0; i < kRows.size(); ++i) {
    if (kRows[i].name == name) return static_cast<Opcode>(i);
  }
  return std::nullopt;
}

OperandRole operandRole(Opcode op, int field) {
  std::string_view format = opcodeFormat(op);
  if (format.size() == 2 && field >= 1) return static_cast<OperandRole>(format[1]);
  return static_cast<OperandRole>(format[static_cast<std::size_t>(field)]);
}

}  // namespace shapevm
