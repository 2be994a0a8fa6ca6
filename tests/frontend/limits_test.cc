// SPDX-License-Identifier: Apache-2.0
// Issue 24's crash and hang classes, each through the public path a user takes: sources nested
// 100k deep (brackets, unary and `**` chains, operator chains, blocks, elif chains) end in a
// LimitExceeded naming the line; deep user recursion and endless loops end in LimitExceeded
// naming the function, PC and line; a 200k-statement function compiles (dead registers reused),
// and reusing registers never changes a result.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/ranges.h>

#include "support/tunables.h"
#include "test_util.h"

namespace shapevm::testing {
namespace {

std::string repeat(std::string_view piece, int times) {
  std::string out;
  out.reserve(piece.size() * static_cast<std::size_t>(times));
  for (int i = 0; i < times; ++i) out += piece;
  return out;
}

// `def f(x: int):` + a body line at line 3.
std::string function(const std::string& body_line) {
  return "import shapevm\ndef f(x: int):\n    " + body_line + "\n    return y\n";
}

void expectTooDeep(const std::string& source, int line) {
  const std::string error = compileError(source);
  EXPECT_NE(error.find("LimitExceeded"), std::string::npos) << error.substr(0, 300);
  EXPECT_NE(error.find("nested too deeply"), std::string::npos) << error.substr(0, 300);
  EXPECT_NE(error.find(fmt::format("(line {},", line)), std::string::npos) << error.substr(0, 300);
}

constexpr int kHuge = 100000;

// An int result, whether it comes back as an int or as a 0-d int64 tensor.
std::int64_t intResult(const Value& v) {
  return v.isTensor() ? static_cast<std::int64_t>(v.tensor().elementAsDouble(0)) : v.asInt();
}

TEST(Limits, DeepBracketsAreAnErrorNamingTheLine) {
  expectTooDeep(function("y = " + repeat("(", kHuge) + "x" + repeat(")", kHuge)), 3);
  expectTooDeep(function("y = " + repeat("[", kHuge) + "x" + repeat("]", kHuge)), 3);
  expectTooDeep(function("y = " + repeat("(", kHuge)), 3);  // unclosed: still no overflow
  expectTooDeep(function("y = ops.neg(" + repeat("ops.neg(", kHuge) + "x" + repeat(")", kHuge + 1)), 3);
}

TEST(Limits, ChainedOperatorsAreAnErrorNamingTheLine) {
  expectTooDeep(function("y = " + repeat("-", kHuge) + "x"), 3);
  expectTooDeep(function("y = " + repeat("not ", kHuge) + "x"), 3);
  expectTooDeep(function("y = x" + repeat(" ** x", kHuge)), 3);
  expectTooDeep(function("y = x" + repeat(" + x", kHuge)), 3);  // left-leaning: as deep to lowering
  expectTooDeep(function("y = x" + repeat(".T", kHuge)), 3);
  expectTooDeep(function("y = x" + repeat("[0]", kHuge)), 3);
}

TEST(Limits, DeepBlocksAndElifChainsAreAnErrorNamingTheLine) {
  std::string nested = "def f(x: int):\n";
  for (int i = 1; i <= 3000; ++i) nested += std::string(static_cast<std::size_t>(i), ' ') + "if x:\n";
  nested += std::string(3001, ' ') + "x = 1\n";
  EXPECT_NE(compileError(nested).find("nested too deeply"), std::string::npos);
  std::string elifs = "def f(x: int):\n    if x == 0:\n        y = 0\n";
  for (int i = 1; i < kHuge; ++i) elifs += fmt::format("    elif x == {}:\n        y = {}\n", i, i);
  elifs += "    return y\n";
  EXPECT_NE(compileError(elifs).find("nested too deeply"), std::string::npos);
}

TEST(Limits, NestingWithinTheLimitCompilesAndRuns) {
  const int depth = 150;  // well inside max_nesting, and inside the native stack even under ASan
  Module module =
      compileOk(function("y = " + repeat("-(", depth) + "x" + repeat(")", depth) + " + x" + repeat(" + 1", depth)));
  auto results = runModule(module, "f", {Value::fromInt(5)});
  ASSERT_TRUE(results) << results.status().toString();
  EXPECT_EQ(intResult((*results)[0]), 5 + 5 + depth);  // 150 negations of x cancel out
}

TEST(Limits, MaxNestingIsATunable) {
  ASSERT_TRUE(Tunables::set("max_nesting", "20").isOk());
  const std::string error = compileError(function("y = x" + repeat(" + 1", 30)));
  Tunables::resetToDefaults();
  EXPECT_NE(error.find("more than 20 levels"), std::string::npos) << error;
  EXPECT_EQ(compileError(function("y = x" + repeat(" + 1", 30))), "");
}

// Deep recursion: max_call_depth may be set far beyond what the native stack holds; the
// interpreter checks the stack it has left, so the error is LimitExceeded either way.
const char* const kRecursive =
    "def down(n: int) -> int:\n"
    "    if n == 0:\n"
    "        return 0\n"
    "    return down(n - 1) + 1\n";

TEST(Limits, DeepRecursionEndsInLimitExceededNotACrash) {
  Module module = compileOk(kRecursive);
  ASSERT_TRUE(Tunables::set("max_call_depth", "100000").isOk());
  auto results = runModule(module, "down", {Value::fromInt(99990)});
  Tunables::resetToDefaults();
  ASSERT_FALSE(results);
  const std::string message = results.status().toString();
  EXPECT_NE(message.find("LimitExceeded"), std::string::npos) << message.substr(0, 500);
  EXPECT_NE(message.find("native stack"), std::string::npos) << message.substr(0, 500);
  EXPECT_LT(message.size(), 2000u) << "the traceback elides the middle frames";
}

TEST(Limits, RecursionLimitTracebackIsShort) {
  Module module = compileOk(kRecursive);
  auto results = runModule(module, "down", {Value::fromInt(1000)});
  ASSERT_FALSE(results);
  const std::string message = results.status().message();
  // The outermost frames, the elided count, the innermost call and the limit.
  EXPECT_NE(message.find("more calls"), std::string::npos) << message;
  EXPECT_NE(message.find("call depth 200 exceeded entering function 'down'"), std::string::npos) << message;
  EXPECT_NE(message.find("line 4"), std::string::npos) << message;
  EXPECT_LT(message.size(), 1500u) << message;
  // Within the limit the same program runs.
  auto ok = runModule(module, "down", {Value::fromInt(150)});
  ASSERT_TRUE(ok) << ok.status().toString();
  EXPECT_EQ(intResult((*ok)[0]), 150);
}

TEST(Limits, EndlessLoopsEndByDefault) {
  EXPECT_GT(Tunables::get(Tunable::MaxSteps), 0) << "the default step budget is finite; 0 is the opt-in";
  Module module = compileOk(
      "def spin(n: int) -> int:\n"
      "    while True:\n"
      "        n = n + 1\n"
      "    return n\n");
  ASSERT_TRUE(Tunables::set("max_steps", "100000").isOk());
  auto results = runModule(module, "spin", {Value::fromInt(0)});
  Tunables::resetToDefaults();
  ASSERT_FALSE(results);
  const std::string message = results.status().toString();
  EXPECT_NE(message.find("LimitExceeded"), std::string::npos) << message;
  EXPECT_NE(message.find("in function 'spin' at PC 0x"), std::string::npos) << message;
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;  // the loop's branch
}

// A function body of `kStatements` assignments holds more values than the 65535 registers a
// bytecode function may have unless registers of dead values are reused.
TEST(Limits, TwoHundredThousandStatementsCompile) {
  constexpr int kStatements = 20000;  // ~100k values; the CLI test compiles 200k statements
  std::string source = "def f(x: int) -> int:\n    y = x\n";
  source.reserve(static_cast<std::size_t>(kStatements) * 24);
  for (int i = 0; i < kStatements; ++i) source += fmt::format("    y = (y * 3 + {}) % 1000003\n", i % 7);
  source += "    return y\n";
  FrontendOptions options;
  options.fold = false;  // every statement stays its own instructions and temporaries
  Module module = compileOk(source, options);
  ASSERT_EQ(module.functions.size(), 1u);
  EXPECT_LE(module.functions[0].num_registers, 16);
  std::int64_t expected = 5;
  for (int i = 0; i < kStatements; ++i) expected = (expected * 3 + i % 7) % 1000003;
  auto results = runModule(module, "f", {Value::fromInt(5)});
  ASSERT_TRUE(results) << results.status().toString();
  EXPECT_EQ(intResult((*results)[0]), expected);
}

// Every corpus program gives identical results with registers shared between dead values.
Tensor input(const Param& p, std::int64_t dynamic) {
  Shape shape;
  for (const DimToken& d : p.token.dims) shape.push_back(d.is_static ? d.size : dynamic);
  Tensor t = std::move(Tensor::zeros(p.token.dtype.value_or(DType::Float32), shape).value());
  if (t.dtype() == DType::Float32) {
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>((i * 7 % 11) - 5) / 4.0f;
  }
  return t;
}

TEST(Limits, ReusedRegistersGiveIdenticalResults) {
  const std::filesystem::path corpus = std::filesystem::path(SHAPEVM_SOURCE_DIR) / "tests" / "frontend_corpus";
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    if (entry.path().extension() != ".py" || entry.path().filename().string().rfind("err_", 0) == 0) continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    auto plain = compilePython(text.str(), entry.path().string(), FrontendOptions());
    FrontendOptions sharing;
    sharing.share_registers = true;
    auto shared = compilePython(text.str(), entry.path().string(), sharing);
    ASSERT_EQ(plain.hasValue(), shared.hasValue()) << entry.path();
    if (!plain) continue;
    ASSERT_TRUE(verifyModule(*shared).isOk()) << entry.path() << ": " << verifyModule(*shared).toString();
    for (std::size_t fi = 0; fi < plain->functions.size(); ++fi) {
      EXPECT_LE(shared->functions[fi].num_registers, plain->functions[fi].num_registers);
      const Function& fn = plain->functions[fi];
      std::vector<Value> args;
      bool runnable = true;
      for (const Param& p : fn.params) {
        if (p.kind == ValueKind::Tensor) {
          if (p.token.any_rank) runnable = false;
          else args.push_back(Value::fromTensor(input(p, 3)));
        } else {
          args.push_back(p.kind == ValueKind::Float  ? Value::fromFloat(1.5)
                         : p.kind == ValueKind::Bool ? Value::fromBool(true)
                                                     : Value::fromInt(3));
        }
      }
      if (!runnable) continue;
      auto a = runModule(*plain, fn.name, args);
      auto b = runModule(*shared, fn.name, args);
      ASSERT_EQ(a.hasValue(), b.hasValue()) << entry.path() << " " << fn.name;
      if (!a) {
        EXPECT_EQ(a.status().code(), b.status().code()) << entry.path();
        continue;
      }
      ASSERT_EQ(a->size(), b->size());
      for (std::size_t k = 0; k < a->size(); ++k) {
        EXPECT_EQ((*a)[k].describe(), (*b)[k].describe()) << entry.path() << " " << fn.name;
        EXPECT_EQ(fmt::format("{}", elements((*a)[k])), fmt::format("{}", elements((*b)[k])))  // NaN == NaN here
            << entry.path() << " " << fn.name << " output " << k;
      }
      ++compared;
    }
  }
  EXPECT_GE(compared, 30) << "most of the corpus runs with generated inputs";
}

// A loop in a function without registers or outputs: the verifier's dataflow used to take every
// (empty) state for an unvisited block and requeue the loop forever.
TEST(Limits, VerifierEndsOnALoopWithoutRegisters) {
  auto module = assemble(".module \"spin\"\n.func spin\n  .outputs 0\nloop:\n  Jump @loop\n.end\n", "spin.svasm");
  ASSERT_TRUE(module) << module.status().toString();
  EXPECT_TRUE(verifyModule(*module).isOk());
  ASSERT_TRUE(Tunables::set("max_steps", "1000").isOk());
  auto results = runModule(*module, "spin", {});
  Tunables::resetToDefaults();
  ASSERT_FALSE(results);
  EXPECT_NE(results.status().message().find("max_steps"), std::string::npos) << results.status().message();
}

// Found by fuzz_frontend: a dim name the verifier rejects was an internal compiler error.
TEST(Limits, DimNamesMustBeIdentifiers) {
  const std::string error = compileError("def f(x: Tensor[\"%n\", 3]):\n    return x\n");
  EXPECT_NE(error.find("dim name must be an identifier, got \"%n\""), std::string::npos) << error;
  EXPECT_NE(error.find("line 1"), std::string::npos) << error;
  compileOk("def f(x: Tensor[\"n_1\", 3]):\n    return x\n");
}

TEST(Limits, ByteOrderMarkIsAccepted) {
  Module module = compileOk(
      "\xEF\xBB\xBF"
      "def f(x: int) -> int:\n    return x + 1\n");
  auto results = runModule(module, "f", {Value::fromInt(1)});
  ASSERT_TRUE(results);
  EXPECT_EQ(intResult((*results)[0]), 2);
}

TEST(Limits, UnsupportedDecoratorsAreRejected) {
  const std::string error = compileError("class C:\n    @staticmethod\n    def f(x: int) -> int:\n        return x\n");
  EXPECT_NE(error.find("Unsupported"), std::string::npos) << error;
  EXPECT_NE(error.find("`@staticmethod`"), std::string::npos) << error;
  EXPECT_NE(error.find("line 2"), std::string::npos) << error;
  EXPECT_NE(compileError("import functools\n@functools.cache\ndef f(x: int):\n    return x\n"), "");
  EXPECT_NE(compileError("@property\ndef f(x: int):\n    return x\n").find("`@property`"), std::string::npos);
  // What the Python module's @shapevm.jit leaves in a source stays accepted.
  compileOk("import shapevm\n@shapevm.jit\ndef f(x: int) -> int:\n    return x\n");
  compileOk("from shapevm import jit\n@jit()\ndef f(x: int) -> int:\n    return x\n");
}

TEST(Limits, EmptyModulesAndDirectoriesSayWhatTheyAre) {
  Module empty;
  auto index = resolveFunction(empty, "");
  ASSERT_FALSE(index);
  EXPECT_NE(index.status().message().find("has no functions"), std::string::npos) << index.status().message();
  auto dir = loadProgram(std::filesystem::temp_directory_path().string(), FrontendOptions());
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos) << dir.status().message();
  auto dir_py = std::filesystem::temp_directory_path() / "svm_limits_dir.py";
  std::filesystem::create_directories(dir_py);
  auto loaded = loadProgram(dir_py.string(), FrontendOptions());
  std::filesystem::remove(dir_py);
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.status().message().find("is a directory"), std::string::npos) << loaded.status().message();
}

TEST(Limits, IntegerOverflowNamesTheOperands) {
  Module module = compileOk("def f(x: int, e: int) -> int:\n    return x ** e\n");
  auto results = runModule(module, "f", {Value::fromInt(3), Value::fromInt(100)});
  ASSERT_FALSE(results);
  EXPECT_NE(results.status().message().find("integer overflow in 3 Pow 100"), std::string::npos)
      << results.status().message();
}

}  // namespace
}  // namespace shapevm::testing
