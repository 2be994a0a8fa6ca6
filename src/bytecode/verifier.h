// SPDX-License-Identifier: Apache-2.0
// The bytecode verifier, run on every load. A verified function never makes
// the interpreter index out of range, read an unwritten register, fall off its end or return
// with an unstored output slot. Messages name function, PC and a stable rule name:
//   verify: function 'f', PC 0x0003: rule def-before-use: register r4 may be read before it is written
// Rules (stable names; see verifier.cc for the exact conditions):
//   module:      constant, function-name
//   function:    limits, line-table, param, dim-name, op-site-use, call-site-use, falls-off-end,
//                loop-balance
//   instruction: opcode, unused-field, register-range, constant-range, param-range, output-range,
//                loop-range, op-site-range, call-site-range, operand-list-range,
//                jump-target, param-kind, assert-message, op-arity, op-attrs,
//                op-tokens, call-callee, call-arity
//   dataflow:    def-before-use, kind, output-stored
#pragma once

#include "bytecode/module.h"

namespace shapevm {

// Upper bounds the verifier enforces (rule limits).
inline constexpr int kMaxRegisters = 65535;
inline constexpr int kMaxOutputs = 65535;
inline constexpr int kMaxLoopIds = 65535;
inline constexpr std::size_t kMaxCodeSize = std::size_t{1} << 24;

Status verifyModule(const Module& module);
Status verifyFunction(const Module& module, int function);

}  // namespace shapevm
