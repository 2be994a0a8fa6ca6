// SPDX-License-Identifier: Apache-2.0
// Inlining of user functions and methods (src/frontend/inline.cc): the callee's ops land in the
// caller (no Call left), results equal those with inlining off, keyword arguments and defaults,
// early returns, loops and scalar conversions survive it; recursion, large callees and calls
// whose parameter checks are not proven stay calls; inlined ops keep the callee's source lines.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_util.h"

namespace shapevm::testing {
namespace {

FrontendOptions withoutInlining() {
  FrontendOptions options;
  options.inline_calls = false;
  return options;
}

int countCalls(const Module& m) {
  int calls = 0;
  for (const Function& fn : m.functions) {
    for (const Instruction& inst : fn.code) calls += inst.op == Opcode::Call ? 1 : 0;
  }
  return calls;
}

// Runs `fn` of the program compiled with and without inlining; both must succeed and agree.
std::vector<Value> runBoth(const std::string& source, const std::string& fn, const std::vector<Value>& args,
                           FrontendOptions options = {}) {
  Module inlined = compileOk(source, options);
  FrontendOptions off = options;
  off.inline_calls = false;
  Module called = compileOk(source, off);
  auto a = runModule(inlined, fn, args);
  auto b = runModule(called, fn, args);
  EXPECT_TRUE(a) << a.status().toString() << "\n" << disassemble(inlined);
  EXPECT_TRUE(b) << b.status().toString();
  if (!a || !b) return {};
  EXPECT_EQ(a->size(), b->size());
  for (std::size_t i = 0; i < a->size() && i < b->size(); ++i) {
    if ((*a)[i].isTensor()) {
      EXPECT_EQ(elements((*a)[i]), elements((*b)[i])) << "output " << i;
    } else {
      EXPECT_EQ((*a)[i].describe(), (*b)[i].describe()) << "output " << i;
    }
  }
  return std::move(*a);
}

constexpr const char* kGateCell =
    "from shapevm import ops, Tensor\n"
    "class Cell:\n"
    "    def construct(self, x: Tensor['b', 8], c: Tensor['b', 2]):\n"
    "        i, f, g, o = ops.split(x @ self.w + self.bias, 4, axis=1)\n"
    "        c_next = self.gate(f) * c + self.gate(i) * ops.tanh(g)\n"
    "        return self.gate(o) * ops.tanh(c_next), c_next\n"
    "    def gate(self, z: Tensor):\n"
    "        return ops.sigmoid(z)\n";

TEST(Inline, AGateMethodJoinsTheCallersOps) {
  FrontendOptions options;
  options.entry = "Cell.construct";
  Module m = compileOk(kGateCell, options);
  ASSERT_EQ(m.functions.size(), 1u) << disassemble(m);  // the gate method is no longer needed
  EXPECT_EQ(countCalls(m), 0);
  const Function& fn = m.functions[0];
  int sigmoids = 0;
  for (std::size_t pc = 0; pc < fn.code.size(); ++pc) {
    if (fn.code[pc].op != Opcode::CallOp) continue;
    const OpSite& site = fn.op_sites[static_cast<std::size_t>(fn.code[pc].a)];
    if (site.op != OpId::Sigmoid) continue;
    ++sigmoids;
    EXPECT_EQ(fn.locs[pc].line, 8);  // the line of ops.sigmoid in gate, not the call's
  }
  EXPECT_EQ(sigmoids, 3);
  // No Move between a sigmoid and its user: the op writes the call's result register.
  for (const Instruction& inst : fn.code) EXPECT_NE(inst.op, Opcode::Move) << disassemble(m);

  FrontendOptions off = options;
  off.inline_calls = false;
  Module called = compileOk(kGateCell, off);
  EXPECT_EQ(called.functions.size(), 2u);
  EXPECT_EQ(countCalls(called), 3);

  std::vector<double> x(3 * 8), c(3 * 2), w(8 * 8), bias(8);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1 * static_cast<double>(i % 7) - 0.3;
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = 0.5 - 0.2 * static_cast<double>(i);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.05 * static_cast<double>(i % 11) - 0.25;
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1 * static_cast<double>(i);
  std::vector<Value> args(4);
  args[static_cast<std::size_t>(fn.paramIndex("x"))] = Value::fromTensor(floats(x, {3, 8}));
  args[static_cast<std::size_t>(fn.paramIndex("c"))] = Value::fromTensor(floats(c, {3, 2}));
  args[static_cast<std::size_t>(fn.paramIndex("w"))] = Value::fromTensor(floats(w, {8, 8}));
  args[static_cast<std::size_t>(fn.paramIndex("bias"))] = Value::fromTensor(floats(bias, {8}));
  auto a = runModule(m, "construct", args);
  auto b = runModule(called, "construct", args);
  ASSERT_TRUE(a) << a.status().toString();
  ASSERT_TRUE(b) << b.status().toString();
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ(elements((*a)[0]), elements((*b)[0]));
  EXPECT_EQ(elements((*a)[1]), elements((*b)[1]));
}

TEST(Inline, KeywordsDefaultsEarlyReturnsLoopsAndConversions) {
  const std::string source =
      "from shapevm import ops, Tensor\n"
      "def helper(a, b, scale: float = 2.0, flip: bool = False):\n"
      "    if flip:\n"
      "        return b * scale, a\n"
      "    return a * scale, b + a\n"
      "def repeat(t, n: int):\n"
      "    acc = t\n"
      "    for i in range(n):\n"
      "        acc = acc + t\n"
      "    return acc\n"
      "def twice(a):\n"
      "    b = a * 2.0\n"
      "    return a + b\n"
      "def main(x: Tensor[2], y: Tensor[2], k: int):\n"
      "    p, q = helper(x, y)\n"
      "    r = helper(x, y, scale=3, flip=True)\n"
      "    s = helper(flip=k > 2, b=x, a=y)\n"
      "    x = twice(x)\n"
      "    return p + q + r[0] + s[1], repeat(x, k), repeat(y, n=True)\n";
  Module m = compileOk(source);
  EXPECT_EQ(countCalls(m), 0) << disassemble(m);
  auto r =
      runBoth(source, "main",
              {Value::fromTensor(floats({1, 2}, {2})), Value::fromTensor(floats({10, 20}, {2})), Value::fromInt(3)});
  ASSERT_EQ(r.size(), 3u);
  // p = 2x, q = y + x; r0 = 3y (scale 3 converted to float); s = helper(y, x, flip) -> s1 = y;
  // then x = 3x; repeat(t, n) = (n + 1) t, with n = True converted to 1.
  EXPECT_EQ(elements(r[0]), (std::vector<double>{2 + 11 + 30 + 10, 4 + 22 + 60 + 20}));
  EXPECT_EQ(elements(r[1]), (std::vector<double>{12, 24}));
  EXPECT_EQ(elements(r[2]), (std::vector<double>{20, 40}));
}

TEST(Inline, RecursionAndLargeCalleesStayCalls) {
  std::string source =
      "def down(x, n: int):\n"
      "    if n <= 0:\n"
      "        return x\n"
      "    return down(x * 2.0, n - 1)\n"
      "def ping(x, n: int):\n"
      "    if n <= 0:\n"
      "        return x\n"
      "    return pong(x + 1.0, n - 1)\n"
      "def pong(x, n: int):\n"
      "    return ping(x * 3.0, n)\n"
      "def big(x):\n";
  for (int i = 0; i < 70; ++i) source += "    x = x + 1.0\n";
  source +=
      "    return x\n"
      "def main(x: Tensor[1], n: int):\n"
      "    return down(x, n), ping(x, n), big(x)\n";
  FrontendOptions options;
  options.entry = "main";
  Module m = compileOk(source, options);
  // main calls down, ping and big; down and ping call themselves or each other.
  int main_calls = 0;
  for (const Instruction& inst : m.functions[0].code) main_calls += inst.op == Opcode::Call ? 1 : 0;
  EXPECT_EQ(main_calls, 3) << disassemble(m);
  EXPECT_GE(m.findFunction("down"), 0);
  EXPECT_GE(m.findFunction("big"), 0);
  auto r = runBoth(source, "main", {Value::fromTensor(floats({1}, {1})), Value::fromInt(2)}, options);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(elements(r[0]), (std::vector<double>{4}));
  EXPECT_EQ(elements(r[1]), (std::vector<double>{21}));  // ping(1, 2) -> pong(2, 1) -> ping(6, 1) -> pong(7, 0) -> 21
  EXPECT_EQ(elements(r[2]), (std::vector<double>{71}));
}

TEST(Inline, ParameterChecksMustBeProvenAtTheCall) {
  const std::string source =
      "from shapevm import Tensor\n"
      "def fixed(a: Tensor[3]):\n"
      "    return a * 2.0\n"
      "def pair(a: Tensor['n'], b: Tensor['n']):\n"
      "    return a + b\n"
      "def proven(q: Tensor['k'], x: Tensor[3], y: Tensor['m'], z: Tensor['m']):\n"
      "    return fixed(x), pair(y, z)\n"
      "def unproven(x, y: Tensor['m'], z: Tensor['k']):\n"
      "    return fixed(x), pair(y, z)\n";
  FrontendOptions options;
  options.entry = "proven";
  Module m = compileOk(source, options);
  EXPECT_EQ(countCalls(m), 0) << disassemble(m);
  // The caller's dims replace the callee's: pair's add works on [?1] of `proven` (m), not on
  // pair's own ?0 (n), which is `proven`'s k.
  const Function& fn = m.functions[0];
  int adds = 0;
  for (const OpSite& site : fn.op_sites) {
    if (site.op != OpId::Add) continue;
    ++adds;
    ASSERT_EQ(site.input_tokens.size(), 2u);
    EXPECT_EQ(site.input_tokens[0].toString(), "[?1]");
    EXPECT_EQ(site.output_tokens[0].toString(), "[?1]");
  }
  EXPECT_EQ(adds, 1);
  options.entry = "unproven";
  Module u = compileOk(source, options);
  EXPECT_EQ(countCalls(u), 2) << disassemble(u);
  // The callee's own checks still run: a [4] into `fixed`, different m and k into `pair`.
  auto bad_shape = runModule(u, "unproven",
                             {Value::fromTensor(floats({1, 2, 3, 4}, {4})), Value::fromTensor(floats({1}, {1})),
                              Value::fromTensor(floats({1}, {1}))});
  ASSERT_FALSE(bad_shape);
  EXPECT_NE(bad_shape.status().message().find("parameter 'a'"), std::string::npos) << bad_shape.status().message();
  auto bad_dim = runModule(u, "unproven",
                           {Value::fromTensor(floats({1, 2, 3}, {3})), Value::fromTensor(floats({1}, {1})),
                            Value::fromTensor(floats({1, 2}, {2}))});
  ASSERT_FALSE(bad_dim);
  EXPECT_NE(bad_dim.status().message().find("dynamic dim"), std::string::npos) << bad_dim.status().message();
}

TEST(Inline, AnErrorInAnInlinedCalleeNamesTheCalleesLine) {
  const std::string source =
      "from shapevm import ops, Tensor\n"
      "def project(z, w):\n"
      "    return z @ w\n"
      "def f(x: Tensor['n', 3], w: Tensor[4, 5]):\n"
      "    y = ops.relu(x * 2.0)\n"
      "    return project(y, w)\n";
  Module m = compileOk(source);
  const int f = m.findFunction("f");
  ASSERT_GE(f, 0);
  for (const Instruction& inst : m.functions[static_cast<std::size_t>(f)].code) EXPECT_NE(inst.op, Opcode::Call);
  auto r = runModule(m, "f",
                     {Value::fromTensor(floats({1, 2, 3, 4, 5, 6}, {2, 3})),
                      Value::fromTensor(floats(std::vector<double>(20, 1.0), {4, 5}))});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), ErrorCode::ShapeMismatch) << r.status().toString();
  EXPECT_NE(r.status().message().find("test.py line 3:"), std::string::npos) << r.status().message();
}

TEST(Inline, TheOptionSwitchesItOff) {
  auto parsed = FrontendOptions::parseList("dce,inline");
  ASSERT_TRUE(parsed);
  EXPECT_TRUE(parsed->inline_calls);
  EXPECT_FALSE(parsed->fold);
  auto without = FrontendOptions::parseList("dce,fold");
  ASSERT_TRUE(without);
  EXPECT_FALSE(without->inline_calls);
  EXPECT_FALSE(FrontendOptions::none().inline_calls);
  EXPECT_TRUE(FrontendOptions().inline_calls);
  Module m = compileOk("def h(a):\n    return a + 1.0\ndef f(x):\n    return h(x)\n", withoutInlining());
  EXPECT_EQ(countCalls(m), 1);
}

}  // namespace
}  // namespace shapevm::testing
