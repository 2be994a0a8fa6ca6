// SPDX-License-Identifier: Apache-2.0
// Each optimization on and off, with the disassembly showing it applied (or not) and the
// ops.identity anchor surviving; the reference workload sources against examples/*.svasm; the
// source-annotated listing; and the compiled module's text/binary round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "bytecode/binary_format.h"
#include "test_util.h"

namespace shapevm::testing {
namespace {

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

FrontendOptions only(bool dce, bool reshape, bool addn, bool fold) {
  FrontendOptions o;
  o.dce = dce;
  o.reshape = reshape;
  o.addn = addn;
  o.fold = fold;
  return o;
}

TEST(Optimize, DeadCodeElimination) {
  const std::string src =
      "from shapevm import ops\n"
      "def f(x: Tensor[None, 4]):\n"
      "    unused = ops.exp(x)\n"
      "    kept = ops.identity(ops.tanh(x))\n"
      "    return x * 2.0\n";
  std::string on = disassemble(compileOk(src, only(true, false, false, false)));
  std::string off = disassemble(compileOk(src, only(false, false, false, false)));
  EXPECT_EQ(count(on, "CallOp exp"), 0);
  EXPECT_EQ(count(off, "CallOp exp"), 1);
  // The anchor and what it reads survive DCE even though `kept` is never used.
  EXPECT_EQ(count(on, "CallOp identity"), 1);
  EXPECT_EQ(count(on, "CallOp tanh"), 1);
}

TEST(Optimize, MergeReshapes) {
  const std::string src =
      "from shapevm import ops\n"
      "def f(x: Tensor[4, 6]):\n"
      "    a = ops.reshape(ops.reshape(x, (24,)), (2, 12))\n"
      "    b = ops.reshape(ops.identity(ops.reshape(x, (24,))), (6, 4))\n"
      "    return a, b\n";
  Module on_module = compileOk(src, only(true, true, false, true));
  std::string on = disassemble(on_module);
  std::string off = disassemble(compileOk(src, only(true, false, false, true)));
  EXPECT_EQ(count(on, "CallOp reshape"), 3);   // a: merged into one; b: the anchor keeps both
  EXPECT_EQ(count(off, "CallOp reshape"), 4);
  EXPECT_EQ(count(on, "CallOp identity"), 1);
  EXPECT_NE(on.find("CallOp reshape r2 = r0, r1 : [4,6] x _ -> [2,12]"), std::string::npos) << on;
  auto r = runModule(on_module, "f", {Value::fromTensor(floats(std::vector<double>(24, 1.0), {4, 6}))});
  ASSERT_TRUE(r) << r.status().toString();
  EXPECT_EQ((*r)[0].tensor().shape().toString(), "[2,12]");
  EXPECT_EQ((*r)[1].tensor().shape().toString(), "[6,4]");
}

TEST(Optimize, AddChainToAddN) {
  const std::string src =
      "from shapevm import ops\n"
      "def f(a: Tensor[2], b: Tensor[2], c: Tensor[2], d: Tensor[2]):\n"
      "    s = a + b + c + d\n"
      "    t = ops.identity(a + b) + c + d\n"
      "    u = a + b\n"
      "    v = a + 1.0 + b\n"
      "    return s, t, u, v\n";
  Module on_module = compileOk(src, only(true, false, true, true));
  std::string on = disassemble(on_module);
  std::string off = disassemble(compileOk(src, only(true, false, false, true)));
  EXPECT_EQ(count(on, "CallOp add_n"), 2);
  EXPECT_NE(on.find("CallOp add_n r4 = r0, r1, r2, r3"), std::string::npos) << on;
  EXPECT_EQ(count(off, "CallOp add_n"), 0);
  EXPECT_EQ(count(on, "CallOp identity"), 1);
  auto r = runModule(on_module, "f", {Value::fromTensor(floats({1, 2}, {2})), Value::fromTensor(floats({10, 20}, {2})),
                                      Value::fromTensor(floats({100, 200}, {2})), Value::fromTensor(floats({1000, 2000}, {2}))});
  ASSERT_TRUE(r) << r.status().toString();
  EXPECT_EQ(elements((*r)[0]), (std::vector<double>{1111, 2222}));
  EXPECT_EQ(elements((*r)[1]), (std::vector<double>{1111, 2222}));
  EXPECT_EQ(elements((*r)[3]), (std::vector<double>{12, 23}));
}

TEST(Optimize, ConstantFolding) {
  const std::string src =
      "def f(x: Tensor[None, 128]):\n"
      "    n = x.shape[1] * 4 + 2 ** 3\n"
      "    m = x.shape[0] * 2\n"
      "    return n, m\n";
  Module on_module = compileOk(src, only(true, false, false, true));
  std::string on = disassemble(on_module);
  std::string off = disassemble(compileOk(src, only(true, false, false, false)));
  EXPECT_NE(on.find("int 520"), std::string::npos) << on;
  EXPECT_EQ(count(on, "Pow "), 0);
  EXPECT_EQ(count(on, "DimOf"), 1);  // the dynamic dim stays a runtime read
  EXPECT_EQ(count(off, "Pow "), 1);
  EXPECT_EQ(count(off, "DimOf"), 2);
  auto r = runModule(on_module, "f", {Value::fromTensor(floats(std::vector<double>(384, 0.0), {3, 128}))});
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)[0].asInt(), 520);
  EXPECT_EQ((*r)[1].asInt(), 6);
}

TEST(Optimize, ParseOptList) {
  auto o = FrontendOptions::parseList("dce,fold");
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->dce);
  EXPECT_TRUE(o->fold);
  EXPECT_FALSE(o->reshape);
  EXPECT_FALSE(o->addn);
  EXPECT_FALSE(FrontendOptions::parseList("dce,bogus"));
}

// The examples' Python sources against the hand-written bytecode on the same random inputs.
void compareWithSvasm(const std::string& name, std::int64_t seq) {
  Module py = compileOk(readRepoFile("examples/" + name + ".py"));
  auto sv = assemble(readRepoFile("examples/" + name + ".svasm"), name + ".svasm");
  ASSERT_TRUE(sv) << sv.status().toString();
  std::mt19937 rng(static_cast<unsigned>(seq));
  std::normal_distribution<double> normal(0.0, 1.0);
  auto random = [&](std::vector<std::int64_t> dims, double scale) {
    std::int64_t n = 1;
    for (std::int64_t d : dims) n *= d;
    std::vector<double> v(static_cast<std::size_t>(n));
    for (double& x : v) x = normal(rng) * scale;
    return Value::fromTensor(floats(v, dims));
  };
  const std::int64_t batch = 3;
  std::vector<Value> args = {random({batch, seq, 128}, 1.0), random({batch, 256}, 1.0), random({batch, 256}, 1.0),
                             random({1024, 128}, 0.1),     random({1024, 256}, 0.1),  random({1024}, 1.0),
                             random({1024}, 1.0)};
  auto a = runModule(py, name, args);
  auto b = runModule(*sv, name, args);
  ASSERT_TRUE(a) << a.status().toString();
  ASSERT_TRUE(b) << b.status().toString();
  ASSERT_EQ(a->size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    auto x = elements((*a)[k]);
    auto y = elements((*b)[k]);
    ASSERT_EQ(x.size(), y.size());
    double num = 0, den = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      num += (x[i] - y[i]) * (x[i] - y[i]);
      den += y[i] * y[i];
    }
    EXPECT_LE(std::sqrt(num / den), 1e-5) << name << " seq " << seq << " output " << k;
  }
}

TEST(Examples, LstmCellMatchesSvasm) {
  for (std::int64_t seq : {10, 20, 30, 120}) compareWithSvasm("lstm_cell", seq);
}

TEST(Examples, LstmLoopMatchesSvasm) {
  for (std::int64_t seq : {10, 20, 30, 120}) compareWithSvasm("lstm_loop", seq);
}

TEST(Examples, LstmLoopHotRegionIsTheLoopBody) {
  std::string text = disassemble(compileOk(readRepoFile("examples/lstm_loop.py")));
  const auto start = text.find("LoopStart l0");
  const auto end = text.find("LoopEnd l0");
  ASSERT_NE(start, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  const std::string body = text.substr(start, end - start);
  EXPECT_EQ(count(body, "CallOp matmul"), 2);
  EXPECT_EQ(count(body, "CallOp split"), 1);
  EXPECT_EQ(count(text, "CallOp transpose"), 2);
  EXPECT_EQ(count(body, "CallOp transpose"), 0);  // hoisted by the source, kept outside the loop
}

TEST(Listing, SourceLinesAsComments) {
  const std::string src = "def f(x):\n    y = x * 2.0\n    return y\n";
  Module m = compileOk(src);
  std::string plain = disassemble(m);
  std::string annotated = disassemble(m, DisassembleOptions{src});
  EXPECT_EQ(plain.find("; 2:"), std::string::npos);
  EXPECT_NE(annotated.find("  ; 2: y = x * 2.0\n  .loc 2"), std::string::npos) << annotated;
  EXPECT_NE(annotated.find("  ; 3: return y\n"), std::string::npos) << annotated;
  // The annotated listing still assembles to the same module.
  auto back = assemble(annotated, "listing.svasm");
  ASSERT_TRUE(back) << back.status().toString();
  EXPECT_EQ(disassemble(*back), plain);
}

TEST(Listing, TextAndBinaryRoundTripOfCompiledClassModule) {
  Module m = compileOk(
      "class Net:\n"
      "    def helper(self, x):\n"
      "        return x @ self.w\n"
      "    def construct(self, x: Tensor[None, 2]):\n"
      "        return self.helper(x) + self.b\n");
  std::string text = disassemble(m);
  auto back = assemble(text, "net.svasm");
  ASSERT_TRUE(back) << back.status().toString() << "\n" << text;
  EXPECT_EQ(disassemble(*back), text);
  auto bytes = serializeModule(m);
  auto loaded = deserializeModule(bytes, "net.svm");
  ASSERT_TRUE(loaded) << loaded.status().toString();
  EXPECT_EQ(disassemble(*loaded), text);
}

}  // namespace
}  // namespace shapevm::testing
