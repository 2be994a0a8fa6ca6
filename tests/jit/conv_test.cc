// SPDX-License-Identifier: Apache-2.0
// The conv family (src/jit/llvm_cpu/codegen_conv.cc): pointwise convs compiled as the matmul
// kernel and dense convs as im2col tiles through it, checked against the reference conv kernel
// on random data — 1-D to 3-D, odd sizes, strides, dilations, padding at every border, tiles
// that split rows, with and without a bias, one kernel over several batch and spatial extents
// (dynamic dims), every tuning candidate, fused epilogues — and the convs it leaves to the reference.
#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>

#include "conv_test_util.h"
#include "jit/conv_family.h"
#include "jit/shape_infer.h"
#include "jit_test_util.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

// bias: 0 none, 1 a random bias, 2 an omitted (None) third input.
std::vector<Value> convInputs(DType dtype, const Shape& x, std::int64_t cout, int bias, std::mt19937& rng,
                              std::int64_t kernel = 1) {
  Shape w{cout, x[1]};
  for (int d = 2; d < x.rank(); ++d) w.push_back(kernel);
  std::vector<Value> inputs{operand(dtype, x, rng), operand(dtype, w, rng)};
  if (bias == 1) inputs.push_back(operand(dtype, Shape{cout}, rng));
  if (bias == 2) inputs.push_back(Value{});
  return inputs;
}

TEST(ConvJit, PointwiseConvsMatchTheReference) {
  std::mt19937 rng(21);
  struct Case {
    Shape x;
    std::int64_t cout;
  };
  const std::vector<Case> cases = {{Shape{1, 3, 5, 7}, 4},    {Shape{2, 16, 9, 11}, 33}, {Shape{1, 64, 14, 14}, 128},
                                   {Shape{3, 7, 1, 1}, 5},    {Shape{2, 5, 17}, 9},      {Shape{1, 6, 3, 4, 5}, 7},
                                   {Shape{1, 130, 6, 6}, 20}, {Shape{0, 4, 3, 3}, 2}};
  // Each case once (keeps the test's compiles few): the bias cycles through present, absent and
  // omitted, the spec through static and dynamic N/H/W.
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const int bias = static_cast<int>(i % 3);
    const std::vector<Value> inputs = convInputs(DType::Float32, c.x, c.cout, bias, rng);
    const KernelSpec spec = i % 2 == 0 ? specFor("conv", inputs) : dynamicSpec(inputs);
    EXPECT_TRUE(matchesReference(spec, inputs)) << c.x.toString() << " bias " << bias;
  }
}

TEST(ConvJit, HalfPrecision) {
  std::mt19937 rng(22);
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    const std::vector<Value> inputs = convInputs(dtype, Shape{2, 12, 5, 9}, 10, 1, rng);
    EXPECT_TRUE(matchesReference(specFor("conv", inputs), inputs)) << dtypeName(dtype);
  }
}

// One kernel (dynamic N, H, W) over several batches and image sizes, explicit zero pads, unit
// strides and SAME/VALID auto_pad (all mean no padding for a 1x1 kernel).
TEST(ConvJit, OneKernelOverSeveralSizes) {
  std::mt19937 rng(23);
  for (const Attrs& attrs :
       {Attrs{}, Attrs{{"strides", AttrValue::ofInts({1, 1})}, {"pads", AttrValue::ofInts({0, 0, 0, 0})}},
        Attrs{{"auto_pad", AttrValue::ofInt(1)}}, Attrs{{"auto_pad", AttrValue::ofInt(3)}}}) {
    std::vector<std::vector<Value>> sets;
    for (auto [n, h, w] :
         {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 7, 7}, {3, 13, 5}, {2, 1, 31}, {1, 24, 20}}) {
      Tensor x = randomTensor(DType::Float32, Shape{n, 24, h, w}, rng, Layout::Contiguous, 1.0);
      sets.push_back({Value::fromTensor(x), Value{}, Value{}});
    }
    const std::vector<Value> params = convInputs(DType::Float32, Shape{1, 24, 1, 1}, 40, 1, rng);
    for (std::vector<Value>& set : sets) {
      set[1] = params[1];
      set[2] = params[2];
    }
    EXPECT_TRUE(sameKernelMatches(dynamicSpec(sets[0], attrs), sets));
  }
}

// The tuner's candidates (the matmul's generated tiles, then oneDNN's primitive last): the first,
// the last generated one and a few between (each is a compile); library_onednn_conv_test.cc checks
// the library candidate.
TEST(ConvJit, TuningCandidatesMatchTheReference) {
  std::mt19937 rng(24);
  const std::vector<Value> inputs = convInputs(DType::Float32, Shape{1, 32, 10, 12}, 48, 1, rng);
  const KernelSpec spec = sharedBackend().targetSpec(specFor("conv", inputs));
  const std::vector<KernelParams> candidates = familyFor(OpId::Conv)->searchSpace(spec);
  ASSERT_GE(candidates.size(), 2u);
  std::size_t n = candidates.size();
  if (candidates.back().library != 0) --n;  // LibraryCandidates=1: one, last
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(candidates[i].library, 0) << candidates[i].toString();
  std::vector<std::size_t> picked = {0, n / 3, 2 * n / 3, n - 1};
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  for (std::size_t i : picked) {
    const KernelParams& params = candidates[i];
    KernelSpec tuned = spec;
    tuned.params = params;
    EXPECT_TRUE(matchesReference(tuned, inputs)) << params.toString();
  }
}

TEST(ConvJit, DenseConvsMatchTheReference) {
  std::mt19937 rng(26);
  struct Case {
    Shape x;
    std::int64_t cout, kernel;
    Attrs attrs;
  };
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  const std::vector<Case> cases = {
      {Shape{1, 3, 9, 11}, 5, 3, {{"pads", ints({1, 1, 1, 1})}}},
      {Shape{2, 4, 10, 9}, 6, 3, {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}},
      {Shape{1, 3, 23, 17}, 8, 7, {{"strides", ints({2, 2})}, {"pads", ints({3, 3, 3, 3})}}},
      {Shape{1, 5, 12, 13}, 7, 3, {{"dilations", ints({2, 3})}, {"pads", ints({2, 0, 1, 3})}}},
      {Shape{1, 2, 8, 8}, 3, 3, {{"pads", ints({0, 2, 2, 0})}, {"strides", ints({1, 3})}}},
      {Shape{2, 6, 7, 7}, 4, 5, {}},
      {Shape{1, 16, 6, 5}, 9, 3, {{"auto_pad", AttrValue::ofInt(1)}}},
      {Shape{1, 16, 6, 5}, 9, 2, {{"auto_pad", AttrValue::ofInt(2)}, {"strides", ints({2, 2})}}},
      {Shape{1, 4, 5, 6}, 3, 1, {{"strides", ints({2, 2})}}},
      {Shape{1, 4, 5, 6}, 3, 1, {{"pads", ints({1, 0, 0, 1})}}},
      {Shape{3, 5, 19}, 4, 3, {{"pads", ints({1, 2})}, {"dilations", ints({2})}}},
      {Shape{1, 64, 14, 15}, 32, 3, {{"pads", ints({1, 1, 1, 1})}}},
      {Shape{0, 3, 5, 5}, 2, 3, {}}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const int bias = static_cast<int>(i % 3);
    const std::vector<Value> inputs = convInputs(DType::Float32, c.x, c.cout, bias, rng, c.kernel);
    const KernelSpec spec = i % 2 == 0 ? specFor("conv", inputs, c.attrs) : dynamicSpec(inputs, c.attrs);
    EXPECT_TRUE(matchesReference(spec, inputs)) << c.x.toString() << " bias " << bias;
  }
}

TEST(ConvJit, DepthwiseConvsMatchTheReference) {
  std::mt19937 rng(28);
  struct Case {
    Shape x;
    std::int64_t kernel;
    Attrs attrs;
  };
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  const std::vector<Case> cases = {
      {Shape{1, 8, 9, 11}, 3, {{"pads", ints({1, 1, 1, 1})}}},
      {Shape{2, 5, 10, 9}, 3, {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}},
      {Shape{1, 3, 12, 13}, 3, {{"dilations", ints({2, 3})}, {"pads", ints({2, 0, 1, 3})}}},
      {Shape{1, 4, 8, 30}, 5, {{"pads", ints({0, 2, 2, 0})}, {"strides", ints({1, 3})}}},
      {Shape{1, 6, 7, 6}, 3, {{"auto_pad", AttrValue::ofInt(2)}, {"strides", ints({2, 2})}}},
      {Shape{2, 7, 19}, 3, {{"pads", ints({1, 2})}, {"dilations", ints({2})}}},
      {Shape{1, 4, 2, 2}, 3, {{"pads", ints({2, 2, 2, 2})}}},
      {Shape{1, 4, 5, 6}, 1, {}},
      {Shape{1, 3, 6, 45}, 3, {{"pads", ints({1, 2, 2, 1})}}}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Attrs attrs = c.attrs;
    attrs.emplace_back("groups", AttrValue::ofInt(c.x[1]));
    Shape w{c.x[1], 1};
    for (int d = 2; d < c.x.rank(); ++d) w.push_back(c.kernel);
    std::vector<Value> inputs{operand(DType::Float32, c.x, rng), operand(DType::Float32, w, rng)};
    if (i % 2 == 0) inputs.push_back(operand(DType::Float32, Shape{c.x[1]}, rng));
    const KernelSpec spec = i % 3 == 0 ? dynamicSpec(inputs, attrs) : specFor("conv", inputs, attrs);
    EXPECT_TRUE(matchesReference(spec, inputs)) << c.x.toString() << " bias " << (i % 2 == 0);
  }
}

// One kernel compiled from `spec` over every input set: each output element within 1e-4 of the
// reference's (relative to its magnitude), so that a single wrong column of a plane fails; x is
// also run from a copy that ends right before a PROT_NONE page and one that begins right after
// one (a read past the first or the last plane faults).
::testing::AssertionResult depthwiseMatchesEveryElement(const KernelSpec& spec,
                                                        const std::vector<std::vector<Value>>& input_sets) {
  auto kernel = compileKernel(sharedBackend(), *familyFor(spec.op), spec);
  if (!kernel) return ::testing::AssertionFailure() << spec.signature() << ": " << kernel.status().toString();
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (const std::vector<Value>& given : input_sets) {
    auto expected = referenceOutputs(spec, given);
    if (!expected) {
      result = ::testing::AssertionFailure() << expected.status().toString();
      break;
    }
    const Tensor& want = (*expected)[0].tensor();
    for (bool at_start : {false, true}) {
      std::vector<Value> inputs = given;
      inputs[0] = Value::fromTensor(guardedCopy(given[0].tensor(), at_start));
      std::vector<Value> actual(1);
      Status run = invokeCompiled(**kernel, pointersTo(inputs), actual);
      if (!run.isOk() || actual[0].tensor().shape() != want.shape()) {
        result = ::testing::AssertionFailure() << given[0].tensor().describe() << ": " << run.toString();
        break;
      }
      const float* w = want.data<float>();
      const float* g = actual[0].tensor().data<float>();
      for (std::int64_t i = 0; i < want.numel(); ++i) {
        if (!(std::abs(g[i] - w[i]) <= 1e-4f * (1.0f + std::abs(w[i])))) {
          result = ::testing::AssertionFailure() << spec.signature() << " on " << want.shape().toString()
                                                 << ": element " << i << " is " << g[i] << ", want " << w[i];
          break;
        }
      }
    }
    if (!result) break;
  }
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  return result;
}

// Stride 1 with the output as wide as the input: the inner rows run as one flat loop over the
// plane, whose border columns are computed again, checked. Odd widths and heights, rows as
// narrow as 1-3 columns (no column or one whose every tap is inside), planes of 1-3 rows,
// asymmetric pads that keep the width, dilations, 5x5 and 1x1 kernels, SAME padding; each static
// and dynamic (one kernel over several batches and image sizes).
TEST(ConvJit, DepthwiseSameWidthConvsMatchEveryElement) {
  std::mt19937 rng(29);
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  struct Case {
    std::vector<Shape> xs;  // N, H and W of each; the channels of the first
    std::int64_t kernel;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {{Shape{2, 5, 9, 28}, Shape{1, 5, 3, 17}, Shape{3, 5, 2, 17}, Shape{1, 5, 7, 3}, Shape{1, 5, 6, 1},
        Shape{2, 5, 5, 2}, Shape{1, 5, 1, 31}},
       3,
       {{"pads", ints({1, 1, 1, 1})}}},
      {{Shape{2, 3, 11, 13}, Shape{1, 3, 5, 5}, Shape{1, 3, 4, 6}}, 5, {{"pads", ints({2, 2, 2, 2})}}},
      {{Shape{1, 3, 10, 12}, Shape{2, 3, 5, 7}}, 3, {{"dilations", ints({2, 2})}, {"pads", ints({2, 2, 2, 2})}}},
      {{Shape{1, 4, 9, 10}, Shape{1, 4, 4, 3}}, 3, {{"pads", ints({0, 0, 2, 2})}}},
      {{Shape{1, 4, 9, 10}, Shape{2, 4, 3, 4}}, 3, {{"pads", ints({2, 2, 0, 0})}}},
      {{Shape{1, 3, 8, 9}, Shape{1, 3, 6, 5}}, 3, {{"dilations", ints({1, 2})}, {"pads", ints({1, 1, 1, 3})}}},
      {{Shape{1, 3, 6, 7}, Shape{2, 3, 1, 1}}, 1, {}},
      {{Shape{1, 6, 8, 15}, Shape{2, 6, 1, 2}, Shape{1, 6, 13, 4}}, 3, {{"auto_pad", AttrValue::ofInt(1)}}},
      {{Shape{1, 6, 9, 16}, Shape{1, 6, 2, 3}}, 4, {{"auto_pad", AttrValue::ofInt(2)}}}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::int64_t channels = c.xs[0][1];
    Attrs attrs = c.attrs;
    attrs.emplace_back("groups", AttrValue::ofInt(channels));
    const Value w = operand(DType::Float32, Shape{channels, 1, c.kernel, c.kernel}, rng);
    const Value bias = operand(DType::Float32, Shape{channels}, rng);
    std::vector<std::vector<Value>> sets;
    for (const Shape& x : c.xs) {
      sets.push_back({operand(DType::Float32, x, rng), w});
      if (i % 2 == 0) sets.back().push_back(bias);
    }
    for (std::size_t s = 0; s < sets.size(); ++s) {
      EXPECT_TRUE(depthwiseMatchesEveryElement(specFor("conv", sets[s], attrs), {sets[s]})) << c.xs[s].toString();
    }
    EXPECT_TRUE(depthwiseMatchesEveryElement(dynamicSpec(sets[0], attrs), sets)) << c.xs[0].toString();
  }
}

// K = 64 * 7 * 7 = 3136: the 1 MiB tile budget holds 83 columns, so the larger images run in equal
// tiles of 80 columns that start mid-row, span rows and end in a partial tile, the smaller ones in
// one tile written straight into the output; one dynamic kernel over several sizes and batches.
TEST(ConvJit, SmallTilesAndOneKernelOverSeveralSizes) {
  std::mt19937 rng(27);
  const Attrs attrs = {{"strides", AttrValue::ofInts({2, 1})}, {"pads", AttrValue::ofInts({3, 2, 1, 3})}};
  const std::vector<Value> params = convInputs(DType::Float32, Shape{1, 64, 7, 7}, 5, 1, rng, 7);
  std::vector<std::vector<Value>> sets;
  for (auto [n, h, w] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 25, 30},
                         {2, 16, 7},
                         {3, 5, 21},
                         {2, 31, 40},
                         {1, 3, 3}}) {
    sets.push_back({operand(DType::Float32, Shape{n, 64, h, w}, rng), params[1], params[2]});
  }
  EXPECT_TRUE(sameKernelMatches(dynamicSpec(sets[0], attrs), sets));
}

// The product tiles are written straight into the output (C's rows a run-time stride apart, the
// image's pixels): several tiles per image whose widths are not whole register panels, Cout not a
// whole number of row tiles, three images split over two threads (a tile that wrote past its
// columns or rows would clobber a neighbour's, run by the other thread), and one tile per image.
// With AVX-512 (64-column panels) an image's last pixels % 64 <= 32 columns run on the narrow
// kernel: 11x25 = 4 x 64 + 19 pixels (four wide tiles, then a narrow one), 4x3 = 12 (only a
// narrow tile), and a residual epilogue read at the narrow tile's columns.
TEST(ConvJit, DenseTilesWriteStraightIntoTheOutput) {
  std::mt19937 rng(32);
  const Attrs attrs = {{"strides", AttrValue::ofInts({2, 1})}, {"pads", AttrValue::ofInts({3, 1, 2, 3})}};
  for (auto [cout, h, w] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{7, 23, 29}, {6, 9, 5}, {9, 23, 27}}) {
    const std::vector<Value> inputs = convInputs(DType::Float32, Shape{3, 64, h, w}, cout, 1, rng, 7);
    KernelSpec spec = dynamicSpec(inputs, attrs);
    spec.params.threads = 2;
    EXPECT_TRUE(matchesReference(spec, inputs)) << cout << " " << h << "x" << w;
  }
  EXPECT_TRUE(epilogueMatches(convInputs(DType::Float32, Shape{2, 64, 23, 27}, 5, 1, rng, 7), attrs,
                              {{OpId::Add, 3, false}, {OpId::Relu, -1, false}}, rng, true));
}

// Epilogues on dense convs (one tile per image and several tiles that start mid-row; padding at
// every border, strides) and on pointwise convs, static and dynamic specs: ReLU, SiLU, sigmoid,
// tanh, a residual add, a swapped subtract, two operands, and a unary step without a bias.
TEST(ConvJit, EpiloguesMatchTheOpByOpReference) {
  std::mt19937 rng(29);
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  const EpilogueStep relu{OpId::Relu, -1, false}, residual{OpId::Add, 3, false};
  struct Case {
    Shape x;
    std::int64_t cout, kernel;
    int bias;
    Attrs attrs;
    std::vector<EpilogueStep> steps;
  };
  const std::vector<Case> cases = {
      {Shape{1, 5, 9, 11}, 7, 3, 1, {{"pads", ints({1, 2, 2, 1})}}, {relu}},
      {Shape{2, 6, 13, 10}, 9, 3, 1, {{"pads", ints({2, 1, 0, 2})}, {"strides", ints({1, 2})}}, {residual, relu}},
      {Shape{1, 64, 25, 30},
       5,
       7,
       1,
       {{"strides", ints({2, 1})}, {"pads", ints({3, 2, 1, 3})}},
       {residual, {OpId::Silu, -1, false}}},
      {Shape{2, 7, 8, 9}, 11, 1, 1, {}, {residual, relu}},
      {Shape{1, 3, 7, 5}, 4, 1, 1, {{"strides", ints({2, 2})}}, {{OpId::Sigmoid, -1, false}}},
      {Shape{1, 4, 6, 7}, 6, 3, 1, {{"pads", ints({1, 1, 1, 1})}}, {{OpId::Sub, 3, true}, {OpId::Tanh, -1, false}}},
      {Shape{1, 8, 5, 5},
       8,
       3,
       1,
       {{"pads", ints({1, 0, 1, 2})}},
       {{OpId::Mul, 3, false}, {OpId::Add, 4, false}, relu}},
      {Shape{1, 4, 6, 6}, 5, 3, 0, {{"pads", ints({0, 1, 1, 0})}}, {relu}},
      {Shape{2, 12, 5, 3}, 6, 1, 0, {}, {relu}}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::vector<Value> own = convInputs(DType::Float32, c.x, c.cout, c.bias, rng, c.kernel);
    EXPECT_TRUE(epilogueMatches(own, c.attrs, c.steps, rng, i % 2 == 1)) << "case " << i << " " << c.x.toString();
  }
}

// ReLU6 as the importer writes ONNX Clip: maximum and minimum against one-element bounds (rank 0,
// or every dim 1), alone or after a residual, on dense convs (several tiles; one tile) and
// pointwise ones, static and dynamic specs; the random outputs reach both bounds.
TEST(ConvJit, Relu6EpilogueMatchesTheOpByOpReference) {
  std::mt19937 rng(31);
  auto scalar = [](float v, const Shape& shape) {
    Tensor t = Tensor::empty(DType::Float32, shape).value();
    t.data<float>()[0] = v;
    return Value::fromTensor(t);
  };
  const std::vector<Value> bounds = {scalar(-0.5f, Shape{}), scalar(0.75f, Shape{})};
  const std::vector<EpilogueStep> relu6 = {{OpId::Maximum, 3, false}, {OpId::Minimum, 4, false}};
  EXPECT_TRUE(epilogueMatches(convInputs(DType::Float32, Shape{2, 64, 25, 30}, 5, 1, rng, 7),
                              {{"strides", AttrValue::ofInts({2, 1})}, {"pads", AttrValue::ofInts({3, 2, 1, 3})}},
                              relu6, rng, true, bounds));
  EXPECT_TRUE(epilogueMatches(convInputs(DType::Float32, Shape{2, 6, 5, 7}, 9, 1, rng), {},
                              {{OpId::Minimum, 3, true}, {OpId::Maximum, 4, false}}, rng, true,
                              {scalar(0.25f, Shape{1, 1, 1, 1}), scalar(-0.25f, Shape{1})}));
  // After a residual (its operand of the output's shape first).
  const std::vector<EpilogueStep> residual_relu6 = {
      {OpId::Add, 3, false}, {OpId::Maximum, 4, false}, {OpId::Minimum, 5, false}};
  const std::vector<Value> residual_bounds = {operand(DType::Float32, Shape{1, 4, 8, 10}, rng), bounds[0], bounds[1]};
  EXPECT_TRUE(epilogueMatches(convInputs(DType::Float32, Shape{1, 3, 8, 10}, 4, 1, rng, 3),
                              {{"pads", AttrValue::ofInts({1, 1, 1, 1})}}, residual_relu6, rng, false,
                              residual_bounds));
  // A bound of more than one element is not a scalar: it must be of the output's shape.
  const std::vector<Value> dense = convInputs(DType::Float32, Shape{1, 3, 6, 6}, 4, 1, rng, 3);
  KernelSpec spec = specFor("conv", dense);
  spec.inputs.push_back(specFor("relu", {scalar(0.0f, Shape{})}).inputs[0]);
  spec.epilogue = {relu6[0]};
  EXPECT_TRUE(familyFor(OpId::Conv)->supports(spec).isOk());
  spec.inputs[3] = specFor("relu", {operand(DType::Float32, Shape{1, 2}, rng)}).inputs[0];
  EXPECT_FALSE(familyFor(OpId::Conv)->supports(spec).isOk());
}

// What takes an epilogue: not a depthwise conv, not a binary step without a bias (its operand
// would be taken for the bias), not an operand of another rank; the planner's check agrees.
TEST(ConvJit, EpilogueSupport) {
  std::mt19937 rng(30);
  const KernelFamily* family = familyFor(OpId::Conv);
  const EpilogueStep relu{OpId::Relu, -1, false}, residual{OpId::Add, 3, false};
  auto spec = [&](const std::vector<Value>& inputs, const Attrs& attrs, std::vector<EpilogueStep> steps) {
    KernelSpec s = specFor("conv", inputs, attrs);
    s.epilogue = std::move(steps);
    return s;
  };
  const std::vector<Value> dense = convInputs(DType::Float32, Shape{1, 8, 6, 6}, 4, 1, rng, 3);
  std::vector<Value> with_residual = dense;
  with_residual.push_back(operand(DType::Float32, Shape{1, 4, 4, 4}, rng));
  KernelSpec ok = specFor("conv", dense);
  ok.inputs.push_back(specFor("relu", {with_residual.back()}).inputs[0]);
  ok.epilogue = {residual, relu};
  EXPECT_TRUE(family->supports(ok).isOk()) << family->supports(ok).message();
  KernelSpec flat = ok;
  flat.inputs[3].rank = 2;
  EXPECT_NE(family->supports(flat).message().find("rank"), std::string::npos);
  KernelSpec reversed = ok;
  reversed.epilogue = {{OpId::Add, 2, false}};
  EXPECT_NE(family->supports(reversed).message().find("after a bias"), std::string::npos);
  const std::vector<Value> unbiased = convInputs(DType::Float32, Shape{1, 8, 6, 6}, 4, 0, rng, 3);
  EXPECT_TRUE(family->supports(spec(unbiased, {}, {relu})).isOk());
  const Attrs groups{{"groups", AttrValue::ofInt(8)}};
  const std::vector<Value> depthwise = {operand(DType::Float32, Shape{1, 8, 6, 6}, rng),
                                        operand(DType::Float32, Shape{8, 1, 3, 3}, rng)};
  EXPECT_NE(family->supports(spec(depthwise, groups, {relu})).message().find("depthwise"), std::string::npos);
  EXPECT_FALSE(family->supports(spec(dense, {}, {{OpId::Exp, 3, false}})).isOk());
  // The planner's check, on operand shapes.
  auto operands = [](const std::vector<Value>& values) {
    std::vector<ConvOperand> out;
    for (const Value& v : values) out.push_back(ConvOperand{v.tensor().dtype(), v.tensor().shape()});
    return out;
  };
  EXPECT_TRUE(convStepSupported(ok.attrs, operands(with_residual), ok.epilogue));
  EXPECT_TRUE(convStepSupported(ok.attrs, operands(dense), {}));
  const KernelSpec grouped = spec(depthwise, groups, {});
  EXPECT_TRUE(convStepSupported(grouped.attrs, operands(depthwise), {}));
  EXPECT_FALSE(convStepSupported(grouped.attrs, operands(depthwise), {relu}));
  // A region's conv step (dense, pointwise, depthwise) takes any batch and image size; channels
  // and weight stay as inferred.
  KernelSpec open = ok;
  openConvExtents(open);
  EXPECT_FALSE(open.inputs[0].dims[0].isStatic());
  EXPECT_TRUE(open.inputs[0].dims[1].isStatic());
  EXPECT_FALSE(open.inputs[0].dims[3].isStatic());
  EXPECT_TRUE(open.inputs[1].dims[3].isStatic());
  KernelSpec opened = grouped;
  openConvExtents(opened);
  EXPECT_FALSE(opened.inputs[0].dims[2].isStatic());
  EXPECT_TRUE(opened.inputs[0].dims[1].isStatic());
  EXPECT_TRUE(opened.inputs[1].dims[2].isStatic());
}

// Grouped (not depthwise) convs, 16-bit dense convs and 3-D dense convs stay with the reference
// kernel, with the reason; the symbol names the kernel size (and a depthwise kernel).
TEST(ConvJit, SupportAndSymbols) {
  std::mt19937 rng(25);
  const KernelFamily* family = familyFor(OpId::Conv);
  ASSERT_NE(family, nullptr);
  const std::vector<Value> pointwise = convInputs(DType::Float32, Shape{1, 8, 6, 6}, 4, 1, rng);
  EXPECT_TRUE(family->supports(specFor("conv", pointwise)).isOk());
  EXPECT_NE(family->symbolStem(specFor("conv", pointwise)).find("conv1x1_"), std::string::npos);
  const std::vector<Value> dense = convInputs(DType::Float32, Shape{1, 8, 6, 6}, 4, 1, rng, 3);
  EXPECT_TRUE(family->supports(specFor("conv", dense)).isOk());
  EXPECT_NE(family->symbolStem(specFor("conv", dense)).find("conv3x3_"), std::string::npos);
  auto reason = [&](const std::vector<Value>& inputs, const Attrs& attrs) {
    Status status = family->supports(specFor("conv", inputs, attrs));
    return status.isOk() ? std::string("supported") : status.message();
  };
  std::vector<Value> grouped = {operand(DType::Float32, Shape{1, 8, 6, 6}, rng),
                                operand(DType::Float32, Shape{8, 4, 1, 1}, rng)};
  EXPECT_NE(reason(grouped, {{"groups", AttrValue::ofInt(2)}}).find("group"), std::string::npos);
  const std::vector<Value> half = convInputs(DType::Float16, Shape{1, 8, 6, 6}, 4, 1, rng, 3);
  EXPECT_NE(reason(half, {}).find("float32 1-D and 2-D"), std::string::npos);
  std::vector<Value> depthwise = {operand(DType::Float32, Shape{1, 8, 6, 6}, rng),
                                  operand(DType::Float32, Shape{8, 1, 3, 3}, rng)};
  EXPECT_EQ(reason(depthwise, {{"groups", AttrValue::ofInt(8)}}), "supported");
  EXPECT_NE(family->symbolStem(specFor("conv", depthwise, {{"groups", AttrValue::ofInt(8)}})).find("depthwise"),
            std::string::npos);
  const std::vector<Value> volume = convInputs(DType::Float32, Shape{1, 2, 4, 4, 4}, 4, 1, rng, 3);
  EXPECT_NE(reason(volume, {}).find("float32 1-D and 2-D"), std::string::npos);
  // A symbolic channel count cannot be baked in.
  EXPECT_FALSE(family->supports(symbolicSpec(specFor("conv", pointwise))).isOk());
}

// Small images go several to a tile when the weight is large (64 x 128 x 3 x 3: 288 KiB): five
// 5x7 images run as tiles of 3 and 2 images over two threads, or as one tile of 5 on one thread
// (175 columns: two whole register panels and a partial one), the product staged in the tile
// buffer and copied out to each image; then a residual add (staged in per tile) and ReLU on three
// 5x5 images after a stride-2 conv, and a one-element operand (left in place).
TEST(ConvJit, SmallImagesShareATile) {
  std::mt19937 rng(34);
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  const Attrs attrs = {{"pads", ints({1, 1, 1, 1})}};
  const std::vector<Value> inputs = convInputs(DType::Float32, Shape{5, 128, 5, 7}, 64, 1, rng, 3);
  for (int threads : {2, 1}) {
    KernelSpec spec = dynamicSpec(inputs, attrs);
    spec.params.threads = threads;
    EXPECT_TRUE(matchesReference(spec, inputs)) << threads << " threads";
  }
  const Attrs strided = {{"strides", ints({2, 2})}, {"pads", ints({1, 0, 1, 2})}};
  EXPECT_TRUE(epilogueMatches(convInputs(DType::Float32, Shape{3, 128, 9, 8}, 64, 1, rng, 3), strided,
                              {{OpId::Add, 3, false}, {OpId::Relu, -1, false}}, rng, true));
  const Value bound = Value::fromTensor(randomTensor(DType::Float32, Shape{1}, rng, Layout::Contiguous, 1.0));
  EXPECT_TRUE(epilogueMatches(convInputs(DType::Float32, Shape{4, 128, 6, 6}, 64, 1, rng, 3), attrs,
                              {{OpId::Maximum, 3, false}, {OpId::Add, 4, false}}, rng, false, {bound}));
}

// ---- max_pool and avg_pool (the window loop of depthwise convs, taking the max or the mean) ----

// The spec of a pool (`op`) on `x`, static or with N, H and W dynamic.
KernelSpec poolSpec(const Value& x, const Attrs& attrs, bool dynamic, std::string_view op = "max_pool") {
  KernelSpec spec = specFor(op, {x}, attrs);
  for (int d = 0; d < spec.inputs[0].rank && dynamic; ++d) {
    if (d != 1) spec.inputs[0].dims[d] = DimSpec{};
  }
  return spec;
}

// `x` with values on a coarse grid (ties, +0 and -0) and, when `nan`, a few NaNs; float32, or
// those values as float16 / bfloat16. `bits_at(i)`, when given, sets element i to those float32
// bits (NaNs with payloads, infinities) where it returns some.
Value poolInput(const Shape& shape, std::mt19937& rng, bool nan, DType dtype = DType::Float32,
                const std::function<std::optional<std::uint32_t>(std::int64_t)>& bits_at = {}) {
  Tensor x = randomTensor(DType::Float32, shape, rng, Layout::Contiguous, 1.0);
  float* data = x.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    data[i] = std::round(data[i] * 2.0f) / 2.0f;
    if (nan && i % 13 == 5) data[i] = std::numeric_limits<float>::quiet_NaN();
    if (bits_at) {
      if (const std::optional<std::uint32_t> bits = bits_at(i)) data[i] = std::bit_cast<float>(*bits);
    }
  }
  if (dtype == DType::Float32) return Value::fromTensor(x);
  Tensor narrow = Tensor::empty(dtype, shape).value();
  auto* bits = narrow.data<std::uint16_t>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    bits[i] = dtype == DType::Float16 ? floatToHalf(data[i]) : floatToBf16(data[i]);
  }
  return Value::fromTensor(narrow);
}

// One compiled pool against the reference on every input: the same bits (the kernel takes the
// taps in the reference's order, so ties of +0 and -0, NaN and avg_pool's float32 sums come out
// as there).
::testing::AssertionResult poolMatchesExactly(const KernelSpec& spec, const std::vector<Value>& xs) {
  auto kernel = compileKernel(sharedBackend(), *familyFor(spec.op), spec);
  if (!kernel) return ::testing::AssertionFailure() << spec.signature() << ": " << kernel.status().toString();
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (const Value& x : xs) {
    const std::vector<Value> inputs{x};
    auto expected = referenceOutputs(spec, inputs);
    std::vector<Value> actual(1);
    Status run = invokeCompiled(**kernel, pointersTo(inputs), actual);
    if (!expected || !run.isOk()) {
      result = ::testing::AssertionFailure() << x.tensor().describe() << ": " << run.toString();
      break;
    }
    const Tensor& want = (*expected)[0].tensor();
    const Tensor& got = actual[0].tensor();
    if (want.shape() != got.shape()) {
      result = ::testing::AssertionFailure() << want.shape().toString() << " vs " << got.shape().toString();
      break;
    }
    const auto* w = static_cast<const std::uint8_t*>(want.rawData());
    const auto* g = static_cast<const std::uint8_t*>(got.rawData());
    const auto bytes = static_cast<std::int64_t>(want.numel() * want.itemSize());
    const std::int64_t at = std::mismatch(w, w + bytes, g).first - w;
    if (want.dtype() != got.dtype() || at < bytes) {
      result = ::testing::AssertionFailure() << spec.signature() << " on " << x.tensor().describe() << ": element "
                                             << at / static_cast<std::int64_t>(want.itemSize()) << " differs";
      break;
    }
  }
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  return result;
}

TEST(ConvJit, MaxPoolMatchesTheReferenceBitForBit) {
  std::mt19937 rng(33);
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  struct Case {
    Shape x;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {Shape{1, 3, 9, 11}, {{"kernel", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}},
      {Shape{2, 5, 10, 9}, {{"kernel", ints({2, 2})}}},
      {Shape{3, 4, 13, 12},
       {{"kernel", ints({3, 2})},
        {"strides", ints({2, 3})},
        {"pads", ints({1, 0, 2, 1})},
        {"ceil_mode", AttrValue::ofBool(true)}}},
      {Shape{1, 6, 12, 14}, {{"kernel", ints({3, 3})}, {"dilations", ints({2, 3})}, {"pads", ints({2, 1, 1, 2})}}},
      {Shape{2, 3, 7, 6}, {{"kernel", ints({3, 3})}, {"auto_pad", AttrValue::ofInt(1)}, {"strides", ints({2, 2})}}},
      {Shape{1, 2, 4, 5}, {{"kernel", ints({5, 5})}, {"pads", ints({2, 2, 2, 2})}}},
      {Shape{2, 4, 19},
       {{"kernel", ints({3})}, {"strides", ints({2})}, {"pads", ints({1, 2})}, {"dilations", ints({2})}}},
      {Shape{1, 3, 5, 40}, {{"kernel", ints({1, 3})}, {"pads", ints({0, 1, 0, 1})}}},
      {Shape{2, 2, 8, 7},
       {{"kernel", ints({2, 3})}, {"strides", ints({2, 2})}, {"ceil_mode", AttrValue::ofBool(true)}}}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      const Value x = poolInput(c.x, rng, i % 3 == 1, dtype);
      EXPECT_TRUE(poolMatchesExactly(poolSpec(x, c.attrs, i % 2 == 1), {x})) << c.x.toString();
    }
  }
}

// Stride 1 keeping the width (the flat loop over a plane's inner rows, its border columns
// computed again): the same bits as the reference, NaNs among the taps, narrow rows and few rows.
TEST(ConvJit, StrideOneMaxPoolsMatchTheReferenceBitForBit) {
  std::mt19937 rng(34);
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  const std::vector<Attrs> attrs = {
      {{"kernel", ints({3, 3})}, {"pads", ints({1, 1, 1, 1})}},
      {{"kernel", ints({3, 5})}, {"pads", ints({0, 1, 2, 3})}},
      {{"kernel", ints({3, 3})}, {"dilations", ints({2, 2})}, {"pads", ints({2, 2, 2, 2})}},
      {{"kernel", ints({2, 2})}, {"auto_pad", AttrValue::ofInt(1)}}};
  for (std::size_t i = 0; i < attrs.size(); ++i) {
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      std::vector<Value> xs;
      for (const Shape& shape : {Shape{2, 3, 9, 28}, Shape{1, 3, 3, 17}, Shape{1, 3, 7, 3}, Shape{2, 3, 5, 1}}) {
        xs.push_back(poolInput(shape, rng, i % 2 == 0, dtype));
      }
      for (const Value& x : xs) EXPECT_TRUE(poolMatchesExactly(poolSpec(x, attrs[i], false), {x})) << i;
      EXPECT_TRUE(poolMatchesExactly(poolSpec(xs[0], attrs[i], true), xs)) << i;
    }
  }
}

// One kernel (dynamic N, H and W: read per call, the pads too) over several batches and image
// sizes, SAME padding (its pads depend on the input) and resnet's 3x3/2 pad 1.
TEST(ConvJit, OneMaxPoolKernelOverSeveralSizes) {
  std::mt19937 rng(35);
  for (const Attrs& attrs : {Attrs{{"kernel", AttrValue::ofInts({3, 3})},
                                   {"strides", AttrValue::ofInts({2, 2})},
                                   {"pads", AttrValue::ofInts({1, 1, 1, 1})}},
                             Attrs{{"kernel", AttrValue::ofInts({3, 2})}, {"auto_pad", AttrValue::ofInt(2)}}}) {
    std::vector<Value> xs;
    for (const Shape& shape : {Shape{1, 3, 9, 11}, Shape{2, 3, 1, 1}, Shape{3, 3, 16, 7}, Shape{1, 3, 2, 30}}) {
      xs.push_back(poolInput(shape, rng, false));
    }
    EXPECT_TRUE(poolMatchesExactly(poolSpec(xs[0], attrs, true), xs));
  }
}

// Planes with NaNs (distinct payloads, both signs, at the plane's corners, an edge and inside)
// and planes without any in one call, 2-D (every third [n, c] plane) and 3-D (every third depth
// slice, so that some output slices read one and others none): the compiled max_pool matches the
// reference's bits, the last NaN tap's payload, +0/-0 ties kept as the first tap, windows of
// -inf only (a kernel that treats planes with and without a NaN apart must keep them so).
TEST(ConvJit, MaxPoolPlanesWithAndWithoutNaNMatchBitForBit) {
  std::mt19937 rng(36);
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  const std::uint32_t payloads[] = {0x7fc10000u, 0xffc30000u, 0x7fe50000u, 0xff840000u};
  for (const Shape& shape : {Shape{2, 3, 9, 11}, Shape{1, 4, 7, 6, 9}}) {
    const std::int64_t h = shape[shape.rank() - 2], w = shape[shape.rank() - 1], plane = h * w;
    auto nan_at = [&](std::int64_t i) -> std::optional<std::uint32_t> {
      const std::int64_t p = i / plane, at = i % plane;
      if (p % 3 == 2 && at < 2 * w) return 0xff800000u;  // -inf: output row 0's windows hold nothing else
      if (p % 3 != 1) return std::nullopt;
      const bool corner = at == 0 || at == w - 1 || at == plane - w || at == plane - 1;
      const bool inside = at == (h / 2) * w + w / 2 || at == (h / 2) * w + w / 2 + 1 || at == w * 3;
      if (!corner && !inside) return std::nullopt;
      return payloads[static_cast<std::size_t>(at + p) % 4];
    };
    const int spatial = shape.rank() - 2;
    const std::vector<Attrs> window = {
        {{"kernel", ints(std::vector<std::int64_t>(spatial, 3))},
         {"strides", ints(std::vector<std::int64_t>(spatial, 2))},
         {"pads", ints(std::vector<std::int64_t>(2 * spatial, 1))}},
        {{"kernel", ints(std::vector<std::int64_t>(spatial, 2))}, {"ceil_mode", AttrValue::ofBool(true)}}};
    for (const Attrs& attrs : window) {
      for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
        const Value x = poolInput(shape, rng, false, dtype, nan_at);
        const std::vector<Value> xs = {x, poolInput(shape, rng, false, dtype)};
        EXPECT_TRUE(poolMatchesExactly(poolSpec(x, attrs, dtype != DType::Float16), xs))
            << shape.toString() << " " << dtypeName(dtype);
      }
    }
  }
}

TEST(ConvJit, MaxPoolSupport) {
  std::mt19937 rng(36);
  const KernelFamily* family = familyFor(OpId::MaxPool);
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(family, convFamily(OpId::MaxPool));
  EXPECT_EQ(familyFor(OpId::GlobalAvgPool), nullptr);
  const Attrs attrs = {{"kernel", AttrValue::ofInts({3, 3})}};
  const Value x = poolInput(Shape{1, 2, 6, 6}, rng, false);
  EXPECT_TRUE(family->supports(specFor("max_pool", {x}, attrs)).isOk());
  EXPECT_NE(family->symbolStem(specFor("max_pool", {x}, attrs)).find("max_pool_k3x3"), std::string::npos);
  const Value half = operand(DType::Float16, Shape{1, 2, 6, 6}, rng);
  EXPECT_TRUE(family->supports(specFor("max_pool", {half}, attrs)).isOk());
  const Value wide = operand(DType::Float64, Shape{1, 2, 6, 6}, rng);
  const Status declined = family->supports(specFor("max_pool", {wide}, attrs));
  EXPECT_NE(declined.message().find("pools of float32"), std::string::npos) << declined.toString();
  const Value volume = operand(DType::Float32, Shape{1, 2, 4, 4, 4}, rng);
  EXPECT_TRUE(family->supports(specFor("max_pool", {volume}, {{"kernel", AttrValue::ofInts({2, 2, 2})}})).isOk());
  // A strided input declines the call (the reference kernel runs it).
  KernelSpec spec = poolSpec(x, attrs, true);
  auto kernel = compileKernel(sharedBackend(), *family, spec);
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  const Value strided = Value::fromTensor(randomTensor(DType::Float32, Shape{1, 2, 6, 6}, rng, Layout::Strided, 1.0));
  std::vector<Value> out(1);
  EXPECT_FALSE(invokeCompiled(**kernel, pointersTo({strided}), out).isOk());
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

// avg_pool: float32 sums in the reference's tap order, divided by the count the reference takes
// (the taps inside the input, or with count_include_pad the window clipped to the padded input),
// bit for bit: padding at every border (asymmetric), strides, ceil_mode windows that run past the
// padded input, auto_pad, 1-D, a kernel as large as the padded input, and NaN inputs; static and
// dynamic specs.
TEST(ConvJit, AvgPoolMatchesTheReferenceBitForBit) {
  std::mt19937 rng(37);
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  const AttrValue yes = AttrValue::ofBool(true);
  struct Case {
    Shape x;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {Shape{1, 3, 9, 11}, {{"kernel", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}},
      {Shape{1, 3, 9, 11},
       {{"kernel", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}, {"count_include_pad", yes}}},
      {Shape{2, 5, 10, 9}, {{"kernel", ints({2, 2})}, {"strides", ints({2, 2})}}},
      {Shape{3, 4, 13, 12},
       {{"kernel", ints({3, 2})}, {"strides", ints({2, 3})}, {"pads", ints({1, 0, 2, 1})}, {"ceil_mode", yes}}},
      {Shape{3, 4, 13, 12},
       {{"kernel", ints({3, 2})},
        {"strides", ints({2, 3})},
        {"pads", ints({1, 0, 2, 1})},
        {"ceil_mode", yes},
        {"count_include_pad", yes}}},
      {Shape{2, 3, 7, 6}, {{"kernel", ints({3, 3})}, {"auto_pad", AttrValue::ofInt(1)}, {"strides", ints({2, 2})}}},
      {Shape{2, 3, 7, 6},
       {{"kernel", ints({3, 3})},
        {"auto_pad", AttrValue::ofInt(2)},
        {"strides", ints({2, 2})},
        {"count_include_pad", yes}}},
      {Shape{1, 2, 4, 5}, {{"kernel", ints({5, 5})}, {"pads", ints({2, 2, 2, 2})}}},
      {Shape{1, 2, 4, 5}, {{"kernel", ints({5, 5})}, {"pads", ints({2, 2, 2, 2})}, {"count_include_pad", yes}}},
      {Shape{2, 4, 19}, {{"kernel", ints({3})}, {"strides", ints({2})}, {"pads", ints({1, 2})}}},
      {Shape{2, 4, 19},
       {{"kernel", ints({4})},
        {"strides", ints({3})},
        {"pads", ints({1, 2})},
        {"ceil_mode", yes},
        {"count_include_pad", yes}}},
      {Shape{1, 3, 5, 40}, {{"kernel", ints({1, 3})}, {"pads", ints({0, 1, 0, 1})}}},
      {Shape{2, 2, 8, 7}, {{"kernel", ints({2, 3})}, {"strides", ints({2, 2})}, {"ceil_mode", yes}}}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      const Value x = poolInput(c.x, rng, i % 4 == 3, dtype);
      EXPECT_TRUE(poolMatchesExactly(poolSpec(x, c.attrs, i % 2 == 1, "avg_pool"), {x}))
          << "case " << i << " " << dtypeName(dtype);
    }
  }
  // Random values (not on a grid): the float32 sums' and means' rounding as the reference's
  // (float16/bfloat16: one rounding of the float32 mean).
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
    const Value x = operand(dtype, Shape{2, 3, 15, 17}, rng);
    EXPECT_TRUE(poolMatchesExactly(
        poolSpec(x, {{"kernel", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}, false,
                 "avg_pool"),
        {x}))
        << dtypeName(dtype);
  }
}

// One avg_pool kernel (dynamic N, H, W; the pads read per call) over several sizes.
// 3-D max_pool and avg_pool (CT volumes): odd sizes, strides, pads at every border of all three
// axes, ceil_mode, dilations (max), count_include_pad (avg), float32 / float16 / bfloat16, static
// and with N, D, H, W dynamic; the reference's bits.
TEST(ConvJit, ThreeDPoolsMatchTheReferenceBitForBit) {
  std::mt19937 rng(39);
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  const AttrValue yes = AttrValue::ofBool(true);
  struct Case {
    std::string_view op;
    Shape x;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {"max_pool",
       Shape{1, 3, 5, 9, 11},
       {{"kernel", ints({3, 3, 3})}, {"strides", ints({2, 2, 2})}, {"pads", ints({1, 1, 1, 1, 1, 1})}}},
      {"max_pool",
       Shape{2, 2, 7, 6, 9},
       {{"kernel", ints({2, 3, 2})},
        {"strides", ints({2, 1, 3})},
        {"pads", ints({1, 0, 1, 0, 2, 1})},
        {"dilations", ints({2, 1, 2})},
        {"ceil_mode", yes}}},
      {"max_pool", Shape{1, 2, 3, 4, 5}, {{"kernel", ints({3, 3, 3})}, {"auto_pad", AttrValue::ofInt(1)}}},
      {"avg_pool",
       Shape{1, 3, 5, 9, 11},
       {{"kernel", ints({3, 3, 3})}, {"strides", ints({2, 2, 2})}, {"pads", ints({1, 1, 1, 1, 1, 1})}}},
      {"avg_pool",
       Shape{2, 2, 7, 6, 9},
       {{"kernel", ints({2, 3, 4})},
        {"strides", ints({2, 1, 3})},
        {"pads", ints({1, 0, 2, 0, 2, 1})},
        {"ceil_mode", yes},
        {"count_include_pad", yes}}},
      {"avg_pool",
       Shape{1, 2, 6, 4, 5},
       {{"kernel", ints({3, 2, 3})}, {"pads", ints({2, 1, 0, 1, 0, 2})}, {"ceil_mode", yes}}}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      const Value x = i % 3 == 0 ? operand(dtype, c.x, rng) : poolInput(c.x, rng, i % 3 == 1, dtype);
      EXPECT_TRUE(poolMatchesExactly(poolSpec(x, c.attrs, (i + static_cast<std::size_t>(dtype)) % 2 == 1, c.op), {x}))
          << "case " << i << " " << dtypeName(dtype);
    }
  }
  // One kernel over several volumes (N, D, H, W dynamic; the depth pads read per call).
  for (std::string_view op : {"max_pool", "avg_pool"}) {
    const Attrs attrs = {{"kernel", ints({3, 3, 3})},
                         {"strides", ints({2, 2, 2})},
                         {"pads", ints({1, 1, 1, 1, 1, 1})},
                         {"ceil_mode", yes}};
    std::vector<Value> xs;
    for (const Shape& shape : {Shape{1, 2, 5, 6, 7}, Shape{2, 2, 1, 1, 1}, Shape{1, 2, 9, 3, 12}}) {
      xs.push_back(operand(DType::Float32, shape, rng));
    }
    EXPECT_TRUE(poolMatchesExactly(poolSpec(xs[0], attrs, true, op), xs)) << op;
  }
}

TEST(ConvJit, OneAvgPoolKernelOverSeveralSizes) {
  std::mt19937 rng(38);
  const Attrs attrs = {{"kernel", AttrValue::ofInts({3, 3})},
                       {"strides", AttrValue::ofInts({2, 2})},
                       {"pads", AttrValue::ofInts({1, 1, 1, 1})},
                       {"count_include_pad", AttrValue::ofBool(true)},
                       {"ceil_mode", AttrValue::ofBool(true)}};
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    std::vector<Value> xs;
    for (const Shape& shape : {Shape{1, 3, 9, 11}, Shape{2, 3, 1, 1}, Shape{3, 3, 16, 7}, Shape{1, 3, 2, 30}}) {
      xs.push_back(operand(dtype, shape, rng));
    }
    EXPECT_TRUE(poolMatchesExactly(poolSpec(xs[0], attrs, true, "avg_pool"), xs)) << dtypeName(dtype);
  }
}

// A region's pool step (an opaque step with its own kernel) is specified from the profiled size;
// openPoolExtents opens every extent (N, C, D, H, W): the step's guard then admits every other
// size of a multi-scale stream (before, each missed it and ran the reference kernel) and the one
// kernel compiled from the opened spec matches the reference bit for bit on all of them: 1-D to
// 3-D, max and avg, odd sizes, pads at every border, SAME padding (its pads depend on the input),
// float32 and bfloat16. Convs and other ops are left as they are.
TEST(ConvJit, OpenedPoolSpecsServeEverySizeWithOneKernel) {
  std::mt19937 rng(40);
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue::ofInts(std::move(v)); };
  struct Case {
    std::string_view op;
    std::vector<Shape> shapes;  // the first is the profiled size
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {"max_pool",
       {Shape{1, 8, 57, 61}, Shape{1, 8, 31, 29}, Shape{2, 5, 80, 77}, Shape{1, 8, 2, 3}},
       {{"kernel", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}},
      {"max_pool",
       {Shape{2, 3, 13, 11}, Shape{1, 4, 9, 20}, Shape{3, 3, 5, 5}},
       {{"kernel", ints({3, 2})}, {"strides", ints({2, 3})}, {"auto_pad", AttrValue::ofInt(1)}}},
      {"max_pool", {Shape{1, 3, 17}, Shape{2, 6, 40}, Shape{1, 1, 4}}, {{"kernel", ints({3})}, {"pads", ints({1, 2})}}},
      {"avg_pool",
       {Shape{1, 4, 15, 9}, Shape{2, 4, 7, 22}, Shape{1, 6, 3, 3}},
       {{"kernel", ints({3, 3})},
        {"strides", ints({2, 2})},
        {"pads", ints({1, 0, 2, 1})},
        {"count_include_pad", AttrValue::ofBool(true)},
        {"ceil_mode", AttrValue::ofBool(true)}}},
      {"avg_pool",
       {Shape{1, 2, 5, 6, 7}, Shape{2, 3, 9, 4, 5}, Shape{1, 2, 3, 3, 3}},
       {{"kernel", ints({2, 3, 2})}, {"pads", ints({1, 1, 0, 0, 1, 1})}}}};
  for (const Case& c : cases) {
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      SCOPED_TRACE(fmt::format("{} {} {}", c.op, c.shapes[0].toString(), dtypeName(dtype)));
      std::vector<Value> xs;
      for (const Shape& shape : c.shapes) xs.push_back(poolInput(shape, rng, c.op == "max_pool", dtype));
      KernelSpec spec = poolSpec(xs[0], c.attrs, /*dynamic=*/false, c.op);
      for (std::size_t i = 1; i < xs.size(); ++i) {
        const Value* x = &xs[i];
        EXPECT_FALSE(guardFor(spec).passes(std::span<const Value* const>(&x, 1))) << "the profiled size's spec";
      }
      openPoolExtents(spec);
      ASSERT_TRUE(familyFor(spec.op)->supports(spec).isOk());
      for (const Value& x : xs) {
        const Value* pointer = &x;
        EXPECT_TRUE(guardFor(spec).passes(std::span<const Value* const>(&pointer, 1))) << x.tensor().describe();
      }
      EXPECT_TRUE(poolMatchesExactly(spec, xs));
    }
  }
  const Value x = operand(DType::Float32, Shape{1, 4, 9, 9}, rng);
  const Value w = operand(DType::Float32, Shape{4, 4, 3, 3}, rng);
  KernelSpec conv = specFor("conv", {x, w}, {});
  const std::string before = conv.signature();
  openPoolExtents(conv);
  EXPECT_EQ(conv.signature(), before) << "a conv's spec is openConvExtents' business";
}

TEST(ConvJit, AvgPoolSupport) {
  std::mt19937 rng(39);
  const KernelFamily* family = familyFor(OpId::AvgPool);
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(family, convFamily(OpId::AvgPool));
  EXPECT_NE(family, familyFor(OpId::MaxPool));
  const Attrs attrs = {{"kernel", AttrValue::ofInts({2, 2})}};
  const Value x = operand(DType::Float32, Shape{1, 2, 6, 6}, rng);
  EXPECT_TRUE(family->supports(specFor("avg_pool", {x}, attrs)).isOk());
  EXPECT_FALSE(family->supports(specFor("max_pool", {x}, attrs)).isOk()) << "each pool family takes its own op";
  EXPECT_NE(family->symbolStem(specFor("avg_pool", {x}, attrs)).find("avg_pool_k2x2"), std::string::npos);
  Attrs padded = attrs;
  padded.push_back({"count_include_pad", AttrValue::ofBool(true)});
  EXPECT_NE(family->symbolStem(specFor("avg_pool", {x}, attrs)), family->symbolStem(specFor("avg_pool", {x}, padded)));
  const Value half = operand(DType::BFloat16, Shape{1, 2, 6, 6}, rng);
  EXPECT_TRUE(family->supports(specFor("avg_pool", {half}, attrs)).isOk());
  const Value wide = operand(DType::Float64, Shape{1, 2, 6, 6}, rng);
  const Status declined = family->supports(specFor("avg_pool", {wide}, attrs));
  EXPECT_NE(declined.message().find("pools of float32"), std::string::npos) << declined.toString();
  const Value volume = operand(DType::Float32, Shape{1, 2, 4, 4, 4}, rng);
  EXPECT_TRUE(family->supports(specFor("avg_pool", {volume}, {{"kernel", AttrValue::ofInts({2, 2, 2})}})).isOk());
}

}  // namespace
}  // namespace shapevm::jit
