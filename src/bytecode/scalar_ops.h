// SPDX-License-Identifier: Apache-2.0
// Python-semantics scalar arithmetic on int/float/bool Values: THE definition of the scalar
// opcodes, used by the interpreter, the JIT's region prelude and the frontend's constant folding
// (which folds exactly what this computes and leaves errors to run time). int op int stays int
// (overflow is an error, not UB), // floors, % takes the divisor's sign, / is true division,
// division by zero is an error as in Python.
#pragma once

#include "bytecode/opcodes.h"
#include "shapevm/value.h"

namespace shapevm {

Expected<Value> scalarBinary(Opcode op, const Value& a, const Value& b);
Expected<Value> scalarUnary(Opcode op, const Value& a);
// Python truthiness for BranchIf/Assert: bool, nonzero int/float, a one-element tensor.
Expected<bool> truthValue(const Value& v);

}  // namespace shapevm
