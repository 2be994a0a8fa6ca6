// SPDX-License-Identifier: Apache-2.0
// Opcode enum, names, operand formats and meanings generated from opcodes.def, and the
// fixed 16-byte instruction encoding.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace shapevm {

enum class Opcode : std::uint8_t {
#define SVM_OPCODE(name, format, meaning) name,
#include "bytecode/opcodes.def"
#undef SVM_OPCODE
  kCount
};
inline constexpr int kNumOpcodes = static_cast<int>(Opcode::kCount);

static_assert(static_cast<int>(Opcode::Ne) - static_cast<int>(Opcode::Add) == 14,
              "scalar binary ops Add..Ne must stay contiguous in opcodes.def");

struct Instruction {
  Opcode op = Opcode::Nop;
  std::uint8_t reserved[3] = {0, 0, 0};
  std::int32_t a = 0;
  std::int32_t b = 0;
  std::int32_t c = 0;
};
static_assert(sizeof(Instruction) == 16, "instructions are 16 bytes");

// The role of one operand field (see the legend in opcodes.def).
enum class OperandRole : char {
  Unused = '_',
  RegWrite = 'D',
  RegRead = 'r',
  Constant = 'k',
  Param = 'p',
  Output = 'o',
  Target = 't',
  Loop = 'l',
  Immediate = 'n',
  OpSite = 's',
  CallSite = 'c',
  RegListRead = 'v',
  RegListWrite = 'V',
};

std::string_view opcodeName(Opcode op);
std::string_view opcodeFormat(Opcode op);   // three roles for a, b, c ("Drr"); list roles cover b and c
std::string_view opcodeMeaning(Opcode op);
std::optional<Opcode> parseOpcode(std::string_view name);
// Role of field 0 (a), 1 (b), 2 (c); for "Dv"/"rV" fields 1 and 2 are the list (offset, count).
OperandRole operandRole(Opcode op, int field);

}  // namespace shapevm
