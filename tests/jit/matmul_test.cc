// SPDX-License-Identifier: Apache-2.0
// Differential tests of the JIT's matmul family against the reference kernel: odd and tile-sized
// shapes (M and N tails), batched with numpy broadcasting of batch dims, 1-D operands, transposed
// and strided operands (x @ W.T), float16 / bfloat16 / mixed dtypes, static and symbolic specs.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "jit_test_util.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

Value operand(DType dtype, const Shape& shape, std::mt19937& rng, Layout layout = Layout::Contiguous) {
  return Value::fromTensor(randomTensor(dtype, shape, rng, layout, 1.0));
}

// W.T for a contiguous W of shape [n, k]: a [k, n] view with strides (1, k).
Value transposedWeight(DType dtype, std::int64_t k, std::int64_t n, std::mt19937& rng) {
  Tensor w = randomTensor(dtype, Shape{n, k}, rng, Layout::Contiguous, 1.0);
  return Value::fromTensor(w.asStrided(Shape{k, n}, Shape{1, k}, 0).value());
}

::testing::AssertionResult matmulMatches(const Value& a, const Value& b, Dims dims = Dims::Static) {
  std::vector<Value> inputs = {a, b};
  return matchesReference(specFor("matmul", inputs, {}, dims), inputs);
}

// One symbolic kernel compiled for the first pair, run on every pair.
::testing::AssertionResult symbolicKernelMatches(const std::vector<std::vector<Value>>& pairs) {
  return sameKernelMatches(specFor("matmul", pairs[0], {}, Dims::Symbolic), pairs);
}

// Tails (M, N, K blocks, the dot path) at the very edge of mapped memory.
TEST(MatmulJit, NoAccessOutsideTheOperands) {
  std::mt19937 rng(8);
  const std::vector<std::pair<Shape, Shape>> cases = {{Shape{1, 1}, Shape{1, 1}},       {Shape{7, 13}, Shape{13, 5}},
                                                      {Shape{17, 300}, Shape{300, 33}}, {Shape{9, 40}, Shape{40, 50}},
                                                      {Shape{2, 3, 5, 6}, Shape{6, 7}}, {Shape{13}, Shape{13, 3}},
                                                      {Shape{3, 40}, Shape{40}}};
  for (const auto& [a_shape, b_shape] : cases) {
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      std::vector<Value> inputs = {operand(dtype, a_shape, rng), operand(dtype, b_shape, rng)};
      EXPECT_TRUE(guardedRunMatches(specFor("matmul", inputs), inputs)) << a_shape.toString() << b_shape.toString();
    }
    // Both operands stored transposed (a strided kernel; the dot path for B = W.T).
    std::vector<Value> inputs = {operand(DType::Float32, a_shape, rng), operand(DType::Float32, b_shape, rng)};
    std::vector<Value> t = {Value::fromTensor(guardedCopy(inputs[0].tensor(), false, true)),
                            Value::fromTensor(guardedCopy(inputs[1].tensor(), false, true))};
    EXPECT_TRUE(guardedRunMatches(specFor("matmul", t, {}, Dims::Symbolic), inputs, true))
        << a_shape.toString() << b_shape.toString();
  }
}

struct Case {
  Shape a, b;
};

TEST(MatmulJit, Shapes2D) {
  std::mt19937 rng(1);
  const std::vector<Case> cases = {
      {Shape{1, 1}, Shape{1, 1}},          {Shape{7, 13}, Shape{13, 5}},       {Shape{65, 129}, Shape{129, 33}},
      {Shape{320, 128}, Shape{128, 1024}}, {Shape{32, 256}, Shape{256, 1024}}, {Shape{9, 300}, Shape{300, 40}},
      {Shape{17, 513}, Shape{513, 64}},    {Shape{8, 32}, Shape{32, 32}},      {Shape{3, 0}, Shape{0, 5}}};
  for (const Case& c : cases) {
    for (Dims dims : {Dims::Static, Dims::Symbolic}) {
      EXPECT_TRUE(matmulMatches(operand(DType::Float32, c.a, rng), operand(DType::Float32, c.b, rng), dims))
          << c.a.toString() << " x " << c.b.toString() << (dims == Dims::Static ? " static" : " symbolic");
    }
  }
}

TEST(MatmulJit, Batched) {
  std::mt19937 rng(2);
  const std::vector<Case> cases = {{Shape{2, 3, 17, 9}, Shape{9, 11}},     {Shape{4, 1, 5, 6}, Shape{3, 6, 7}},
                                   {Shape{5, 6}, Shape{2, 3, 6, 33}},      {Shape{3, 8, 40}, Shape{3, 40, 35}},
                                   {Shape{2, 1, 9, 4}, Shape{1, 3, 4, 2}}, {Shape{2, 7}, Shape{3, 7, 5}},
                                   {Shape{2, 3, 5, 7}, Shape{7}}};
  for (const Case& c : cases) {
    for (Dims dims : {Dims::Static, Dims::Symbolic}) {
      EXPECT_TRUE(matmulMatches(operand(DType::Float32, c.a, rng), operand(DType::Float32, c.b, rng), dims))
          << c.a.toString() << " x " << c.b.toString();
    }
  }
}

TEST(MatmulJit, VectorOperands) {
  std::mt19937 rng(3);
  const std::vector<Case> cases = {{Shape{13}, Shape{13}}, {Shape{13}, Shape{13, 40}},  {Shape{40, 13}, Shape{13}},
                                   {Shape{1}, Shape{1}},   {Shape{129}, Shape{129, 1}}, {Shape{200}, Shape{200, 70}}};
  for (const Case& c : cases) {
    for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
      EXPECT_TRUE(matmulMatches(operand(DType::Float32, c.a, rng, layout), operand(DType::Float32, c.b, rng, layout)))
          << c.a.toString() << " x " << c.b.toString();
    }
  }
}

// x @ W.T (the common linear layer) and other layouts of either operand.
TEST(MatmulJit, TransposedAndStridedOperands) {
  std::mt19937 rng(4);
  for (auto [m, k, n] :
       {std::tuple<std::int64_t, std::int64_t, std::int64_t>{7, 13, 5}, {65, 129, 33}, {64, 128, 256}, {1, 300, 17}}) {
    EXPECT_TRUE(matmulMatches(operand(DType::Float32, Shape{m, k}, rng), transposedWeight(DType::Float32, k, n, rng)))
        << m << "x" << k << " @ W.T " << n;
    EXPECT_TRUE(matmulMatches(operand(DType::Float32, Shape{m, k}, rng), transposedWeight(DType::Float32, k, n, rng),
                              Dims::Symbolic));
    for (auto [la, lb] :
         {std::pair{Layout::Contiguous, Layout::Transposed}, std::pair{Layout::Transposed, Layout::Contiguous},
          std::pair{Layout::Contiguous, Layout::Strided}, std::pair{Layout::Strided, Layout::Strided},
          std::pair{Layout::Transposed, Layout::Transposed}}) {
      EXPECT_TRUE(
          matmulMatches(operand(DType::Float32, Shape{m, k}, rng, la), operand(DType::Float32, Shape{k, n}, rng, lb)))
          << m << "x" << k << "x" << n;
    }
  }
  // The dot-product path (few rows or columns, both operands contiguous along K), with K tails.
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1024, 70},
                         {3, 129, 9},
                         {7, 15, 4},
                         {1, 1, 1},
                         {200, 65, 3},
                         {5, 0, 6}}) {
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      EXPECT_TRUE(matmulMatches(operand(dtype, Shape{m, k}, rng), transposedWeight(dtype, k, n, rng)))
          << m << "x" << k << "x" << n;
    }
  }
  EXPECT_TRUE(matmulMatches(operand(DType::Float16, Shape{2, 4, 33}, rng),
                            transposedWeight(DType::Float32, 33, 21, rng), Dims::Symbolic));
  // Batched transposed operands.
  EXPECT_TRUE(matmulMatches(operand(DType::Float32, Shape{3, 9, 20}, rng, Layout::Transposed),
                            operand(DType::Float32, Shape{3, 20, 33}, rng, Layout::Strided)));
}

TEST(MatmulJit, HalfPrecisionAndMixedDTypes) {
  std::mt19937 rng(5);
  const DType dtypes[] = {DType::Float16, DType::BFloat16};
  for (DType dtype : dtypes) {
    for (const Case& c : {Case{Shape{7, 13}, Shape{13, 5}}, Case{Shape{65, 129}, Shape{129, 33}},
                          Case{Shape{32, 256}, Shape{256, 1024}}, Case{Shape{2, 3, 17, 9}, Shape{9, 11}},
                          Case{Shape{300}, Shape{300, 20}}}) {
      EXPECT_TRUE(matmulMatches(operand(dtype, c.a, rng), operand(dtype, c.b, rng)))
          << dtypeName(dtype) << " " << c.a.toString();
    }
    EXPECT_TRUE(matmulMatches(operand(dtype, Shape{33, 64}, rng), transposedWeight(dtype, 64, 48, rng)))
        << dtypeName(dtype);
    EXPECT_TRUE(matmulMatches(operand(dtype, Shape{33, 64}, rng, Layout::Strided), operand(dtype, Shape{64, 50}, rng),
                              Dims::Symbolic));
  }
  // Mixed: f16 x f32 -> f32, bf16 x f16 -> f32, f32 x bf16 -> f32.
  EXPECT_TRUE(matmulMatches(operand(DType::Float16, Shape{17, 40}, rng), operand(DType::Float32, Shape{40, 35}, rng)));
  EXPECT_TRUE(matmulMatches(operand(DType::BFloat16, Shape{17, 40}, rng), operand(DType::Float16, Shape{40, 35}, rng)));
  EXPECT_TRUE(
      matmulMatches(operand(DType::Float32, Shape{5, 40}, rng), transposedWeight(DType::BFloat16, 40, 70, rng)));
}

TEST(MatmulJit, SymbolicKernelOnSeveralShapes) {
  std::mt19937 rng(6);
  // One kernel compiled for [?, ?] x [?, ?] (contiguous), run on many shapes incl. tails and K = 0.
  std::vector<std::vector<Value>> pairs;
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{8, 32, 32},
                         {1, 1, 1},
                         {7, 13, 5},
                         {17, 300, 65},
                         {64, 600, 100},
                         {3, 0, 4},
                         {0, 5, 6},
                         {9, 8, 0}}) {
    pairs.push_back({operand(DType::Float32, Shape{m, k}, rng), operand(DType::Float32, Shape{k, n}, rng)});
  }
  EXPECT_TRUE(symbolicKernelMatches(pairs));
  // The same strided kernel takes the tiled and the dot-product path by the runtime layout.
  std::vector<std::vector<Value>> paths = {
      {operand(DType::Float32, Shape{3, 40}, rng, Layout::Strided), transposedWeight(DType::Float32, 40, 50, rng)},
      {operand(DType::Float32, Shape{3, 40}, rng), transposedWeight(DType::Float32, 40, 50, rng)},
      {operand(DType::Float32, Shape{30, 40}, rng), transposedWeight(DType::Float32, 40, 50, rng)},
      {operand(DType::Float32, Shape{30, 40}, rng), transposedWeight(DType::Float32, 40, 5, rng)},
      {operand(DType::Float32, Shape{3, 40}, rng), operand(DType::Float32, Shape{40, 50}, rng)}};
  EXPECT_TRUE(symbolicKernelMatches(paths));
  // A strided kernel takes any layout.
  std::vector<std::vector<Value>> strided = {
      {operand(DType::Float32, Shape{9, 20}, rng, Layout::Strided), transposedWeight(DType::Float32, 20, 33, rng)},
      {operand(DType::Float32, Shape{40, 70}, rng), operand(DType::Float32, Shape{70, 20}, rng)},
      {operand(DType::Float32, Shape{3, 5}, rng, Layout::Transposed),
       operand(DType::Float32, Shape{5, 129}, rng, Layout::Strided)}};
  EXPECT_TRUE(symbolicKernelMatches(strided));
  // A batched kernel with different broadcasts per call.
  std::vector<std::vector<Value>> batched = {
      {operand(DType::Float32, Shape{2, 3, 5, 6}, rng), operand(DType::Float32, Shape{2, 3, 6, 7}, rng)},
      {operand(DType::Float32, Shape{1, 3, 5, 6}, rng), operand(DType::Float32, Shape{4, 1, 6, 9}, rng)},
      {operand(DType::Float32, Shape{4, 2, 17, 9}, rng), operand(DType::Float32, Shape{1, 1, 9, 40}, rng)}};
  EXPECT_TRUE(symbolicKernelMatches(batched));
}

TEST(MatmulJit, SupportAndSymbols) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(matmulFamily(OpId::Sum), nullptr);
  std::mt19937 rng(7);
  std::vector<Value> ints = {Value::fromTensor(randomTensor(DType::Int64, Shape{3, 4}, rng)),
                             Value::fromTensor(randomTensor(DType::Int64, Shape{4, 2}, rng))};
  Status status = family->supports(specFor("matmul", ints));
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("int64 x int64 stays interpreted"), std::string::npos) << status.message();
  std::vector<Value> rank5 = {operand(DType::Float32, Shape{1, 2, 2, 3, 4}, rng),
                              operand(DType::Float32, Shape{4, 2}, rng)};
  EXPECT_FALSE(family->supports(specFor("matmul", rank5)).isOk());
  std::vector<Value> mismatch = {operand(DType::Float32, Shape{3, 4}, rng), operand(DType::Float32, Shape{5, 2}, rng)};
  EXPECT_FALSE(family->supports(specFor("matmul", mismatch)).isOk());

  std::vector<Value> linear = {operand(DType::Float32, Shape{320, 128}, rng),
                               operand(DType::Float32, Shape{128, 1024}, rng)};
  KernelSpec spec = specFor("matmul", linear);
  spec.inputs[0].dims[0] = DimSpec{};
  EXPECT_EQ(family->symbolStem(spec), "matmul_f32_Mdyn_K128_N1024");
  std::vector<Value> batched = {operand(DType::BFloat16, Shape{2, 3, 17, 9}, rng),
                                transposedWeight(DType::BFloat16, 9, 11, rng)};
  EXPECT_EQ(family->symbolStem(specFor("matmul", batched)), "matmul_bf16_b2_M17_K9_N11_Bstrided");
  std::vector<Value> vec = {operand(DType::Float16, Shape{9}, rng), operand(DType::Float32, Shape{9, 4}, rng)};
  EXPECT_EQ(family->symbolStem(specFor("matmul", vec, {}, Dims::Symbolic)), "matmul_f16f32_Mvec_Kdyn_Ndyn");
  // A kernel declines inputs that do not fit its spec (the reference then runs).
  auto kernel = compileKernel(sharedEngine(), *family, specFor("matmul", linear));
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  std::vector<Value> other = {operand(DType::Float32, Shape{320, 64}, rng),
                              operand(DType::Float32, Shape{64, 1024}, rng)};
  std::vector<const Value*> pointers = {&other[0], &other[1]};
  std::vector<Value> out(1);
  EXPECT_FALSE(invokeCompiled(**kernel, pointers, out).isOk());
  EXPECT_TRUE(sharedEngine().remove((*kernel)->handle).isOk());
}

}  // namespace
}  // namespace shapevm::jit
