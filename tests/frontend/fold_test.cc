// SPDX-License-Identifier: Apache-2.0
// Constant folding agrees with the interpreter: every scalar binary/unary opcode on int, float and
// bool constants (negative operands of // and %, int overflow, division by zero included) gives
// the same value and kind folded at compile time as computed by the VM, and an operation that
// fails at run time is never folded away.
#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace shapevm::testing {
namespace {

// Scalar opcodes still present in `module`'s entry function (0 when everything folded).
int scalarInstructions(const Module& module) {
  int n = 0;
  for (const Instruction& inst : module.functions[0].code) {
    const auto op = static_cast<int>(inst.op);
    if (op >= static_cast<int>(Opcode::Add) && op <= static_cast<int>(Opcode::ToBool)) ++n;
  }
  return n;
}

struct Outcome {
  bool ok = false;
  Value value;
  std::string error;
};

Outcome runExpression(const std::string& expr, bool fold, int* scalar_ops) {
  FrontendOptions options = FrontendOptions::none();
  options.fold = fold;
  const std::string source = "def f():\n    return " + expr + "\n";
  Module m = compileOk(source, options);
  *scalar_ops = scalarInstructions(m);
  auto r = runModule(m, "f", {});
  if (!r) return Outcome{false, Value(), r.status().toString()};
  return Outcome{true, (*r)[0], ""};
}

// The error without its PC (folding the operands moves the failing instruction up).
std::string withoutPc(std::string error) {
  const std::size_t at = error.find(" at PC ");
  const std::size_t end = error.find(" (", at);
  if (at != std::string::npos && end != std::string::npos) error.erase(at, end - at);
  return error;
}

bool sameValue(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  if (a.isFloat()) return (std::isnan(a.asFloat()) && std::isnan(b.asFloat())) || a.asFloat() == b.asFloat();
  if (a.isInt()) return a.asInt() == b.asInt();
  return a.asBool() == b.asBool();
}

void expectAgreement(const std::string& expr, int* folded, int* errors) {
  int ops_folded = 0, ops_interpreted = 0;
  const Outcome with = runExpression(expr, true, &ops_folded);
  const Outcome without = runExpression(expr, false, &ops_interpreted);
  ASSERT_GT(ops_interpreted, 0) << expr << ": the unfolded program computes nothing";
  ASSERT_EQ(with.ok, without.ok) << expr << ": folded " << (with.ok ? with.value.describe() : with.error)
                                 << " vs interpreted " << (without.ok ? without.value.describe() : without.error);
  if (!without.ok) {
    // The error comes from the instruction at run time, so it was not folded away.
    EXPECT_GT(ops_folded, 0) << expr;
    EXPECT_EQ(withoutPc(with.error), withoutPc(without.error)) << expr;
    ++*errors;
    return;
  }
  EXPECT_TRUE(sameValue(with.value, without.value))
      << expr << ": folded " << with.value.describe() << " vs interpreted " << without.value.describe();
  EXPECT_EQ(ops_folded, 0) << expr << ": a constant expression that runs without error must fold";
  ++*folded;
}

TEST(ConstantFolding, AgreesWithTheInterpreterOnEveryScalarBinaryOp) {
  const std::vector<std::string> operands = {"7", "-7", "3", "-3", "0", "1", "7.5", "-2.0", "0.0", "True", "False"};
  const std::vector<std::string> ops = {"+", "-", "*", "/", "//", "%", "**", "<", "<=", ">", ">=", "==", "!="};
  int folded = 0, errors = 0;
  for (const std::string& op : ops) {
    for (const std::string& a : operands) {
      for (const std::string& b : operands) expectAgreement("(" + a + ") " + op + " (" + b + ")", &folded, &errors);
    }
  }
  for (const char* fn : {"min", "max"}) {
    for (const std::string& a : operands) {
      for (const std::string& b : operands)
        expectAgreement(std::string(fn) + "(" + a + ", " + b + ")", &folded, &errors);
    }
  }
  EXPECT_GT(folded, 1000);
  EXPECT_GT(errors, 20);  // division and modulo by zero, 0 ** -n ...
}

TEST(ConstantFolding, FloorDivisionAndModuloFollowPython) {
  int folded = 0, errors = 0;
  for (const char* expr : {"-7 // 2", "7 // -2", "-7 % 2", "7 % -2", "-7.5 // 2.0", "7.5 % -2.0", "-0.5 // 1.0",
                           "1e308 // 1e-308", "-1 % 3.0"}) {
    expectAgreement(expr, &folded, &errors);
  }
  EXPECT_EQ(errors, 0);
  int ops = 0;
  EXPECT_EQ(runExpression("-7 // 2", true, &ops).value.asInt(), -4);
  EXPECT_EQ(runExpression("7 % -2", true, &ops).value.asInt(), -1);
  EXPECT_EQ(runExpression("-7.5 % 2.0", true, &ops).value.asFloat(), 0.5);
}

TEST(ConstantFolding, OverflowAndDivisionByZeroStayRunTimeErrors) {
  int folded = 0, errors = 0;
  for (const char* expr : {"9223372036854775807 + 1", "(-9223372036854775807 - 1) - 1", "4611686018427387904 * 2",
                           "(-9223372036854775807 - 1) // -1", "(-9223372036854775807 - 1) % -1", "2 ** 63", "1 // 0",
                           "1 % 0", "1 / 0", "1.0 // 0.0", "1.5 % 0.0", "True / False", "-(-9223372036854775807 - 1)",
                           "abs(-9223372036854775807 - 1)", "int(1e300)"}) {
    expectAgreement(expr, &folded, &errors);
  }
  EXPECT_EQ(errors, 15);
}

TEST(ConstantFolding, AgreesWithTheInterpreterOnUnaryOps) {
  int folded = 0, errors = 0;
  for (const char* operand : {"7", "-7", "0", "2.5", "-2.5", "0.0", "True", "False"}) {
    for (const char* fn : {"-", "not ", "abs", "int", "float", "bool"}) {
      expectAgreement(std::string(fn) + "(" + operand + ")", &folded, &errors);
    }
  }
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(folded, 48);
}

}  // namespace
}  // namespace shapevm::testing
