// SPDX-License-Identifier: Apache-2.0
// Lowering and semantic checks: parameter tokens from annotations, control flow with loop
// markers, calls, classes with self.<name> parameters, compile errors with line/col, and
// runtime results of small programs against hand-computed values.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_util.h"

namespace shapevm::testing {
namespace {

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(Lowering, AnnotationsBecomeParamTokens) {
  Module m = compileOk(
      "from shapevm import ops, Tensor\n"
      "def f(x: Tensor['batch', None, 128], h: Tensor['batch', 256], n: int, s: float, b: bool, w):\n"
      "    return x\n");
  ASSERT_EQ(m.functions.size(), 1u);
  const Function& fn = m.functions[0];
  ASSERT_EQ(fn.params.size(), 6u);
  EXPECT_EQ(fn.params[0].token.toString(), "[?0,?1,128]");
  EXPECT_EQ(fn.params[1].token.toString(), "[?0,256]");
  EXPECT_EQ(fn.params[2].kind, ValueKind::Int);
  EXPECT_EQ(fn.params[3].kind, ValueKind::Float);
  EXPECT_EQ(fn.params[4].kind, ValueKind::Bool);
  EXPECT_EQ(fn.params[5].token.toString(), "[*]");
  ASSERT_EQ(fn.dim_names.size(), 2u);
  EXPECT_EQ(fn.dim_names[0], "batch");
  EXPECT_EQ(fn.dim_names[1], "");
}

TEST(Lowering, NamedDimMismatchIsCheckedOnEntry) {
  Module m = compileOk("def f(a: Tensor['n', 2], b: Tensor['n', 2]):\n    return a + b\n");
  auto result = runModule(m, "f", {Value::fromTensor(floats({1, 2, 3, 4}, {2, 2})), Value::fromTensor(floats({1, 2, 3, 4, 5, 6}, {3, 2}))});
  ASSERT_FALSE(result);
}

TEST(Lowering, LoopsHaveLoopMarkersAndBreakContinue) {
  Module m = compileOk(
      "def f(n: int):\n"
      "    total = 0\n"
      "    for i in range(n):\n"
      "        if i % 2 == 0:\n"
      "            continue\n"
      "        total += i\n"
      "    j = 0\n"
      "    while True:\n"
      "        j += 1\n"
      "        if j >= 5:\n"
      "            break\n"
      "    return total, j\n");
  std::string text = disassemble(m);
  EXPECT_EQ(count(text, "LoopStart l0"), 1);
  EXPECT_EQ(count(text, "LoopStart l1"), 1);
  EXPECT_GE(count(text, "LoopEnd l1"), 2);  // the normal end and the one before `break`
  auto r = runModule(m, "f", {Value::fromInt(7)});
  ASSERT_TRUE(r) << r.status().toString();
  EXPECT_EQ((*r)[0].asInt(), 1 + 3 + 5);
  EXPECT_EQ((*r)[1].asInt(), 5);
}

TEST(Lowering, PythonScalarSemantics) {
  Module m = compileOk(
      "def f(a: int, b: int, x: float):\n"
      "    return a // b, a % b, a / b, -a // b, a ** 2, min(a, b, 3), max(x, 1), abs(-a), int(x), float(a), bool(0), "
      "a > b and b > 0, a < b or x\n",
      FrontendOptions::none());
  auto r = runModule(m, "f", {Value::fromInt(-7), Value::fromInt(2), Value::fromFloat(2.5)});
  ASSERT_TRUE(r) << r.status().toString();
  EXPECT_EQ((*r)[0].asInt(), -4);
  EXPECT_EQ((*r)[1].asInt(), 1);
  EXPECT_DOUBLE_EQ((*r)[2].asFloat(), -3.5);
  EXPECT_EQ((*r)[3].asInt(), 3);
  EXPECT_EQ((*r)[4].asInt(), 49);
  EXPECT_EQ((*r)[5].asInt(), -7);
  EXPECT_DOUBLE_EQ((*r)[6].asFloat(), 2.5);
  EXPECT_EQ((*r)[7].asInt(), 7);
  EXPECT_EQ((*r)[8].asInt(), 2);
  EXPECT_DOUBLE_EQ((*r)[9].asFloat(), -7.0);
  EXPECT_FALSE((*r)[10].asBool());
  EXPECT_FALSE((*r)[11].asBool());
  EXPECT_TRUE((*r)[12].asBool());
}

TEST(Lowering, FoldedAndUnfoldedAgree) {
  const std::string src =
      "def f(x: Tensor[None, 6]):\n"
      "    n = x.shape[1] * 2 // 4 + 7 % 3\n"
      "    return x * n, n\n";
  for (FrontendOptions opts : {FrontendOptions(), FrontendOptions::none()}) {
    Module m = compileOk(src, opts);
    auto r = runModule(m, "f", {Value::fromTensor(floats({1, 2, 3, 4, 5, 6}, {1, 6}))});
    ASSERT_TRUE(r) << r.status().toString();
    EXPECT_EQ((*r)[1].asInt(), 4);
    EXPECT_EQ(elements((*r)[0]), (std::vector<double>{4, 8, 12, 16, 20, 24}));
  }
}

TEST(Lowering, TensorOpsMethodsAndSlicing) {
  Module m = compileOk(
      "from shapevm import ops\n"
      "def f(x: Tensor[2, 3]):\n"
      "    a = x[:, 1:3]\n"
      "    b = x[1]\n"
      "    c = x[:, ::-1]\n"
      "    d = x.T.reshape(3, 2).sum(axis=0)\n"
      "    e = ops.softmax(x, axis=-1).sum(axis=1)\n"
      "    g = ops.where(x > 2.0, x, ops.zeros((2, 3)))\n"
      "    return a, b, c, d, e, g\n");
  auto r = runModule(m, "f", {Value::fromTensor(floats({1, 2, 3, 4, 5, 6}, {2, 3}))});
  ASSERT_TRUE(r) << r.status().toString();
  EXPECT_EQ(elements((*r)[0]), (std::vector<double>{2, 3, 5, 6}));
  EXPECT_EQ(elements((*r)[1]), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(elements((*r)[2]), (std::vector<double>{3, 2, 1, 6, 5, 4}));
  // x.T = [[1,4],[2,5],[3,6]] -> reshape (3,2) same -> column sums 6, 15
  EXPECT_EQ(elements((*r)[3]), (std::vector<double>{6, 15}));
  auto e = elements((*r)[4]);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_NEAR(e[0], 1.0, 1e-6);
  EXPECT_EQ(elements((*r)[5]), (std::vector<double>{0, 0, 3, 4, 5, 6}));
}

TEST(Lowering, UserFunctionsAndTupleReturns) {
  Module m = compileOk(
      "def helper(a, b, scale: float = 2.0):\n"
      "    return a * scale, b + a\n"
      "def main(x: Tensor[2], y: Tensor[2]):\n"
      "    p, q = helper(x, y)\n"
      "    r = helper(x, y, scale=3.0)\n"
      "    return p + q + r[0]\n",
      [] {
        FrontendOptions calls;  // inlining would leave no Call (tests/frontend/inline_test.cc)
        calls.inline_calls = false;
        return calls;
      }());
  std::string text = disassemble(m);
  EXPECT_NE(text.find("Call helper"), std::string::npos);
  auto r = runModule(m, "main", {Value::fromTensor(floats({1, 2}, {2})), Value::fromTensor(floats({10, 20}, {2}))});
  ASSERT_TRUE(r) << r.status().toString();
  // p = 2x, q = x+y, r0 = 3x -> 6x + y
  EXPECT_EQ(elements((*r)[0]), (std::vector<double>{16, 32}));
}

TEST(Lowering, ClassMethodsReadSelfAttributesAsParameters) {
  Module m = compileOk(
      "class Cell:\n"
      "    SCALE = 2\n"
      "    def __init__(self):\n"
      "        self.w = None\n"
      "    def project(self, x):\n"
      "        return x @ self.w\n"
      "    def construct(self, x: Tensor[None, 2]):\n"
      "        return self.project(x) * self.SCALE + self.b\n");
  int index = m.findFunction("Cell.construct");
  ASSERT_GE(index, 0);
  const Function& fn = m.functions[static_cast<std::size_t>(index)];
  ASSERT_EQ(fn.params.size(), 3u);
  EXPECT_EQ(fn.params[1].name, "b");
  EXPECT_EQ(fn.params[2].name, "w");
  auto resolved = resolveFunction(m, "construct");
  ASSERT_TRUE(resolved);
  EXPECT_EQ(*resolved, index);
  auto r = runModule(m, "construct", {Value::fromTensor(floats({1, 2}, {1, 2})), Value::fromTensor(floats({100}, {1})),
                                      Value::fromTensor(floats({1, 0, 0, 1}, {2, 2}))});
  ASSERT_TRUE(r) << r.status().toString();
  EXPECT_EQ(elements((*r)[0]), (std::vector<double>{102, 104}));
}

TEST(Lowering, ControlFlowOnTensorValues) {
  Module m = compileOk(
      "def f(x: Tensor[3]):\n"
      "    s = x.sum()\n"
      "    while s < 100.0:\n"
      "        s = s * 2.0\n"
      "    if s > 150.0:\n"
      "        return s\n"
      "    return -s\n");
  auto r = runModule(m, "f", {Value::fromTensor(floats({1, 2, 3}, {3}))});
  ASSERT_TRUE(r) << r.status().toString();
  EXPECT_EQ(elements((*r)[0]), (std::vector<double>{192}));  // 6 -> 12 -> ... -> 96 -> 192
}

TEST(Lowering, AssertFailsWithMessageAndLine) {
  Module m = compileOk("def f(x: Tensor[None]):\n    n = x.shape[0]\n    assert n > 2, \"need more than 2\"\n    return x\n");
  auto r = runModule(m, "f", {Value::fromTensor(floats({1, 2}, {2}))});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), ErrorCode::AssertionFailed);
  EXPECT_NE(r.status().message().find("need more than 2"), std::string::npos);
  EXPECT_NE(r.status().message().find("test.py line 3:"), std::string::npos);
}

TEST(Lowering, RuntimeShapeErrorNamesSourceLine) {
  Module m = compileOk("from shapevm import ops\ndef f(a, b):\n    c = a * 2.0\n    return c @ b\n");
  auto r = runModule(m, "f", {Value::fromTensor(floats({1, 2, 3}, {1, 3})), Value::fromTensor(floats({1, 2}, {2, 1}))});
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("test.py line 4:"), std::string::npos) << r.status().message();
}

TEST(SemanticErrors, NameLineAndCol) {
  struct Case { const char* source; const char* message; };
  const Case cases[] = {
      {"def f(x):\n    return y\n", "name `y` is not defined (line 2, col 12)"},
      {"def f(x):\n    return ops.matmul(x)\n", "is missing argument `b`"},
      {"def f(x):\n    return ops.matmul(x, x, x)\n", "takes at most 2 arguments, got 3 (line 2, col 12)"},
      {"def f(x):\n    return ops.frobnicate(x)\n", "`ops.frobnicate` is not a ShapeVM op (line 2, col 12)"},
      {"def g(a):\n    return a\ndef f(x):\n    return g(x, x)\n", "`g` takes 1 arguments, got 2 (line 4, col 12)"},
      {"def f(x):\n    print(x)\n", "`print` is not supported in ShapeVM functions (line 2, col 5)"},
      {"def f(x):\n    return ops.sum(x, axis=x)\n", "must be a constant int or tuple of ints (line 2, col 28)"},
      {"def f(x):\n    for v in x:\n        pass\n", "`for` loops must iterate over range(...) in ShapeVM functions (line 2, col 14)"},
      {"def f(x):\n    x[0] = 1\n", "item assignment (`x[...] = ...`) is not supported in ShapeVM functions (line 2, col 5)"},
      {"def f(x):\n    return x // 2\n", "`//` on tensors is not supported in ShapeVM functions (line 2, col 12)"},
      {"def f(x):\n    if x:\n        return x\n    return x, x\n", "this `return` gives 2 values but the one at line 3 gives 1 (line 4, col 5)"},
      {"x = 1\nprint(x)\n", "statements at module level are not supported"},
      {"def f(x):\n    break\n", "`break` outside a loop (line 2, col 5)"},
  };
  for (const Case& c : cases) {
    std::string message = compileError(c.source);
    EXPECT_NE(message.find(c.message), std::string::npos) << "source:\n" << c.source << "got: " << message;
    EXPECT_NE(message.find("test.py: "), std::string::npos) << message;
  }
}

// A variable assigned on some paths only (an `if`/`elif` without `else`, a loop that may run zero
// times) and then read: an UnknownName error naming it and the read's line, not an internal
// compiler error from the verifier. Assigned on every path, the same shapes compile and run.
TEST(SemanticErrors, VariableUnassignedOnSomePathIsNamed) {
  const char* cases[] = {
      "def f(x: Tensor[3], mode: int):\n    if mode == 0:\n        y = x + 1.0\n    elif mode == 1:\n"
      "        y = x * 2.0\n    return y\n",
      "def f(x: Tensor[3], n: int):\n    for i in range(n):\n        y = x * 2.0\n    return y\n",
  };
  const int lines[] = {6, 4};
  for (int k = 0; k < 2; ++k) {
    auto module = compileAndVerifyPython(cases[k], "test.py", FrontendOptions{});
    ASSERT_FALSE(module.hasValue()) << cases[k];
    EXPECT_EQ(module.status().code(), ErrorCode::UnknownName) << module.status().toString();
    const std::string& message = module.status().message();
    EXPECT_NE(message.find("test.py: local variable `y` may be read before it is assigned"), std::string::npos)
        << message;
    EXPECT_NE(message.find(fmt::format("(line {})", lines[k])), std::string::npos) << message;
    EXPECT_EQ(message.find("internal compiler error"), std::string::npos) << message;
  }
  auto fixed = compileAndVerifyPython(
      "def f(x: Tensor[3], mode: int):\n    if mode == 0:\n        y = x + 1.0\n    else:\n        y = x * 2.0\n"
      "    return y\n",
      "test.py", FrontendOptions{});
  EXPECT_TRUE(fixed.hasValue()) << fixed.status().toString();
}

TEST(Lowering, EntrySelectsReachableFunctions) {
  FrontendOptions options;
  options.entry = "main";
  options.inline_calls = false;  // inlined, helper would not be needed either
  Module m = compileOk("def unused(x):\n    return x\ndef helper(x):\n    return x\ndef main(x):\n    return helper(x)\n", options);
  ASSERT_EQ(m.functions.size(), 2u);
  EXPECT_EQ(m.functions[0].name, "main");
  EXPECT_EQ(m.functions[1].name, "helper");
}

TEST(Lowering, EveryInstructionHasASourceLine) {
  Module m = compileOk(readRepoFile("examples/lstm_loop.py"));
  ASSERT_EQ(m.functions.size(), 1u);
  const Function& fn = m.functions[0];
  ASSERT_EQ(fn.locs.size(), fn.code.size());
  for (const SourceLoc& loc : fn.locs) EXPECT_GT(loc.line, 0);
  EXPECT_EQ(m.source_file, "test.py");
}

}  // namespace
}  // namespace shapevm::testing
