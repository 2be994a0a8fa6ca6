// SPDX-License-Identifier: Apache-2.0
// Tests for the convolution-family kernels that need no torch: every bad input the issue lists
// (channels not matching the weight, groups not dividing the channels, a kernel larger than the
// padded input, negative pads, an unknown auto_pad or resize mode, a 4-D input to a 3-D conv) gives
// an error naming the op and the shapes; the shape functions keep dynamic N/H/W/D dynamic and
// agree with the kernels on static ones; a few hand-computed values. The numerics against torch
// for every attribute combination are tests/python/test_conv_ops.py.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "op_test_util.h"
#include "ops/registry.h"
#include "shapevm/tensor.h"
#include "shapevm/value.h"

namespace shapevm {
namespace {

using namespace shapevm::testing;  // NOLINT(google-build-using-namespace)

Value filled(const Shape& shape, DType dtype = DType::Float32, double value = 1.0) {
  Tensor t = Tensor::empty(dtype, shape).value();
  for (std::int64_t i = 0; i < t.numel(); ++i) storeFromDouble(t.rawData(), dtype, i, value);
  return Value::fromTensor(t);
}

// The op fails, and its message holds every needle.
void expectError(std::string_view op, std::vector<Value> inputs, Attrs attrs, std::vector<std::string> needles) {
  auto result = callOp(op, std::move(inputs), std::move(attrs));
  ASSERT_FALSE(result.hasValue()) << op << " accepted a bad input";
  const std::string message = result.status().message();
  for (const std::string& needle : needles) EXPECT_NE(message.find(needle), std::string::npos) << message;
}

TEST(ConvBadInput, ChannelsThatDoNotMatchTheWeight) {
  expectError("conv", {filled({1, 3, 5, 5}), filled({4, 2, 3, 3})}, {},
              {"conv", "f32[1,3,5,5]", "f32[4,2,3,3]", "3 channels", "expects 2"});
  expectError("conv_transpose", {filled({1, 3, 5, 5}), filled({4, 2, 3, 3})}, {},
              {"conv_transpose", "f32[1,3,5,5]", "f32[4,2,3,3]", "expects 4"});
  expectError("conv", {filled({1, 4, 5, 5}), filled({4, 2, 3, 3}), filled({3})}, {{"groups", AttrValue::ofInt(2)}},
              {"conv", "bias", "f32[3]", "4 output channels"});
  expectError("batch_norm", {filled({2, 3, 4}), filled({3}), filled({3}), filled({4}), filled({3})}, {},
              {"batch_norm", "mean", "f32[4]", "f32[2,3,4]"});
}

TEST(ConvBadInput, GroupsThatDoNotDivideTheChannels) {
  expectError("conv", {filled({1, 3, 5, 5}), filled({4, 1, 3, 3})}, {{"groups", AttrValue::ofInt(2)}},
              {"conv", "groups 2 do not divide the 3 channels", "f32[1,3,5,5]"});
  expectError("conv", {filled({1, 4, 5, 5}), filled({3, 2, 3, 3})}, {{"groups", AttrValue::ofInt(2)}},
              {"conv", "groups 2 do not divide the 3 output channels", "f32[3,2,3,3]"});
  expectError("group_norm", {filled({1, 6, 5})}, {{"groups", AttrValue::ofInt(4)}},
              {"group_norm", "groups 4 do not divide the 6 channels", "f32[1,6,5]"});
}

TEST(ConvBadInput, KernelLargerThanThePaddedInput) {
  expectError("conv", {filled({1, 1, 2, 4}), filled({1, 1, 5, 3})}, {{"pads", AttrValue::ofInts({1, 1})}},
              {"conv", "kernel [5,3]", "larger than the padded input", "f32[1,1,2,4]"});
  expectError("max_pool", {filled({1, 1, 3})},
              {{"kernel", AttrValue::ofInts({3})}, {"dilations", AttrValue::ofInts({2})}},
              {"max_pool", "larger than the padded input", "f32[1,1,3]"});
}

TEST(ConvBadInput, NegativePads) {
  expectError("conv", {filled({1, 1, 5, 5}), filled({1, 1, 3, 3})}, {{"pads", AttrValue::ofInts({1, -1, 0, 0})}},
              {"conv", "negative pads [1,-1,0,0]", "f32[1,1,5,5]"});
  expectError("avg_pool", {filled({1, 1, 5})}, {{"kernel", AttrValue::ofInts({2})}, {"pads", AttrValue::ofInts({-1})}},
              {"avg_pool", "negative pads"});
  expectError("pad", {filled({3, 4})}, {{"pads", AttrValue::ofInts({0, 0, -1, 1})}, {"mode", AttrValue::ofInt(1)}},
              {"pad", "negative pads", "f32[3,4]"});
  expectError("pad", {filled({3, 4})}, {{"pads", AttrValue::ofInts({0, 0, 4, 1})}, {"mode", AttrValue::ofInt(1)}},
              {"reflect pad", "below its extent 4"});
}

TEST(ConvBadInput, UnknownAutoPadOrResizeMode) {
  expectError("conv", {filled({1, 1, 5, 5}), filled({1, 1, 3, 3})}, {{"auto_pad", AttrValue::ofInt(7)}},
              {"conv", "unknown auto_pad 7", "f32[1,1,5,5]"});
  expectError("max_pool", {filled({1, 1, 5})}, {{"kernel", AttrValue::ofInts({2})}, {"auto_pad", AttrValue::ofInt(-1)}},
              {"max_pool", "unknown auto_pad -1"});
  expectError("resize", {filled({1, 1, 2, 2}), Value::fromInts(std::vector<std::int64_t>{4, 4})},
              {{"mode", AttrValue::ofInt(5)}}, {"resize", "unknown mode 5", "f32[1,1,2,2]"});
  expectError("resize", {filled({1, 1, 2, 2}), Value::fromInts(std::vector<std::int64_t>{4, 4})},
              {{"coordinate_mode", AttrValue::ofInt(9)}}, {"resize", "unknown coordinate_mode 9"});
  expectError("pad", {filled({3})}, {{"pads", AttrValue::ofInts({1, 1})}, {"mode", AttrValue::ofInt(3)}},
              {"pad", "unknown pad mode 3"});
  expectError("depth_to_space", {filled({1, 4, 2, 2})},
              {{"blocksize", AttrValue::ofInt(2)}, {"mode", AttrValue::ofInt(2)}},
              {"depth_to_space", "unknown mode 2"});
}

TEST(ConvBadInput, FourDInputToAThreeDConv) {
  expectError("conv", {filled({1, 2, 4, 4}), filled({3, 2, 2, 2, 2})}, {},
              {"conv", "f32[1,2,4,4]", "rank 4", "3-D kernel", "rank-5 input", "f32[3,2,2,2,2]"});
  expectError("max_pool", {filled({1, 2, 4, 4})}, {{"kernel", AttrValue::ofInts({2, 2, 2})}},
              {"max_pool", "f32[1,2,4,4]", "must have rank 5"});
  expectError("conv", {filled({1, 2, 4, 4}, DType::Int64), filled({3, 2, 2, 2}, DType::Int64)}, {},
              {"conv", "floating-point", "i64[1,2,4,4]"});
}

TEST(ConvKernels, HandComputedValues) {
  // 1x1 input channel, all-ones 2x2 kernel over a 3x3 ramp with one pad on every side, stride 2.
  Tensor x = Tensor::empty(DType::Float32, {1, 1, 3, 3}).value();
  for (int i = 0; i < 9; ++i) x.data<float>()[i] = static_cast<float>(i + 1);
  auto y = callOp("conv", {Value::fromTensor(x), filled({1, 1, 2, 2})},
                  {{"pads", AttrValue::ofInts({1, 1})}, {"strides", AttrValue::ofInts({2, 2})}});
  ASSERT_TRUE(y.hasValue()) << y.status().toString();
  const Tensor& out = (*y)[0].tensor();
  ASSERT_EQ(out.shape(), Shape({1, 1, 2, 2}));
  EXPECT_EQ(out.data<float>()[0], 1.0f);
  EXPECT_EQ(out.data<float>()[1], 2.0f + 3.0f);
  EXPECT_EQ(out.data<float>()[2], 4.0f + 7.0f);
  EXPECT_EQ(out.data<float>()[3], 5.0f + 6.0f + 8.0f + 9.0f);
  // max_pool: padding never wins, even over negative values.
  auto m = callOp("max_pool", {filled({1, 1, 2, 2}, DType::Float32, -3.0)},
                  {{"kernel", AttrValue::ofInts({2, 2})}, {"pads", AttrValue::ofInts({1, 1})}});
  ASSERT_TRUE(m.hasValue());
  for (int i = 0; i < 9; ++i) EXPECT_EQ((*m)[0].tensor().data<float>()[i], -3.0f);
  // avg_pool: count_include_pad divides the corner by the whole window.
  auto a = callOp("avg_pool", {filled({1, 1, 2, 2})},
                  {{"kernel", AttrValue::ofInts({2, 2})},
                   {"pads", AttrValue::ofInts({1, 1})},
                   {"count_include_pad", AttrValue::ofBool(true)}});
  ASSERT_TRUE(a.hasValue());
  EXPECT_EQ((*a)[0].tensor().data<float>()[0], 0.25f);
}

// max_pool's row-wise loop (each tap over the output columns inside the row) against a plain
// per-output loop: 1-D to 3-D, odd sizes, asymmetric pads on every border, strides, dilations,
// ceil_mode, windows that lie wholly in the padding (-inf), and NaNs, which win wherever they are.
TEST(ConvKernels, MaxPoolMatchesAPerOutputLoop) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  struct Case {
    Shape x;
    std::vector<std::int64_t> kernel, strides, pads, dilations;
    bool ceil = false;
  };
  const std::vector<Case> cases = {{Shape{2, 3, 17}, {3}, {2}, {1, 2}, {2}, true},
                                   {Shape{1, 2, 13, 11}, {3, 3}, {2, 2}, {1, 0, 1, 1}, {}, false},
                                   {Shape{1, 3, 9, 14}, {2, 3}, {1, 3}, {1, 2, 0, 2}, {2, 1}, true},
                                   {Shape{2, 1, 5, 6, 7}, {2, 3, 2}, {2, 1, 2}, {1, 1, 0, 0, 1, 1}, {1, 2, 1}, false},
                                   {Shape{1, 2, 2, 3}, {2, 2}, {1, 1}, {2, 2, 2, 2}, {}, true}};
  for (const Case& c : cases) {
    Tensor x = Tensor::empty(DType::Float32, c.x).value();
    float* xv = x.data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) xv[i] = normal(rng);
    xv[x.numel() / 3 | 1] = std::numeric_limits<float>::quiet_NaN();
    Attrs attrs = {{"kernel", AttrValue::ofInts(c.kernel)},
                   {"strides", AttrValue::ofInts(c.strides)},
                   {"pads", AttrValue::ofInts(c.pads)},
                   {"dilations", AttrValue::ofInts(c.dilations)},
                   {"ceil_mode", AttrValue::ofBool(c.ceil)}};
    auto y = callOp("max_pool", {Value::fromTensor(x)}, attrs);
    ASSERT_TRUE(y.hasValue()) << y.status().toString();
    const Tensor& out = (*y)[0].tensor();
    // Every rank as 3-D: unit leading axes.
    const int spatial = c.x.rank() - 2, lead = 3 - spatial;
    std::int64_t in[3] = {1, 1, 1}, outs[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, pb[3] = {0, 0, 0},
                 dl[3] = {1, 1, 1};
    for (int d = 0; d < spatial; ++d) {
      const auto u = static_cast<std::size_t>(d);
      in[lead + d] = c.x[2 + d];
      outs[lead + d] = out.dim(2 + d);
      k[lead + d] = c.kernel[u];
      st[lead + d] = c.strides[u];
      pb[lead + d] = c.pads[2 * u];  // (before, after) per axis
      dl[lead + d] = c.dilations.empty() ? 1 : c.dilations[u];
    }
    const std::int64_t planes = c.x[0] * c.x[1], in_plane = in[0] * in[1] * in[2];
    std::int64_t index = 0, nans = 0, empty = 0;
    for (std::int64_t p = 0; p < planes; ++p) {
      for (std::int64_t o0 = 0; o0 < outs[0]; ++o0) {
        for (std::int64_t o1 = 0; o1 < outs[1]; ++o1) {
          for (std::int64_t o2 = 0; o2 < outs[2]; ++o2, ++index) {
            float want = -std::numeric_limits<float>::infinity();
            for (std::int64_t k0 = 0; k0 < k[0]; ++k0) {
              for (std::int64_t k1 = 0; k1 < k[1]; ++k1) {
                for (std::int64_t k2 = 0; k2 < k[2]; ++k2) {
                  const std::int64_t i0 = o0 * st[0] - pb[0] + k0 * dl[0], i1 = o1 * st[1] - pb[1] + k1 * dl[1],
                                     i2 = o2 * st[2] - pb[2] + k2 * dl[2];
                  if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                  const float v = xv[p * in_plane + (i0 * in[1] + i1) * in[2] + i2];
                  if (std::isnan(v) || v > want) want = v;
                  if (std::isnan(want)) break;
                }
              }
            }
            const float got = out.data<float>()[index];
            nans += std::isnan(want) ? 1 : 0;
            empty += std::isinf(want) ? 1 : 0;
            if (std::isnan(want)) {
              EXPECT_TRUE(std::isnan(got)) << c.x.toString() << " output " << index;
            } else {
              EXPECT_EQ(got, want) << c.x.toString() << " output " << index;
            }
          }
        }
      }
    }
    EXPECT_EQ(index, out.numel());
    EXPECT_GT(nans, 0) << c.x.toString();
    if (c.x == Shape{1, 2, 2, 3}) {
      EXPECT_GT(empty, 0) << "a window wholly in the padding";
    }
  }
}

// The shape functions on symbolic inputs: dynamic dims stay dynamic (with their id where the
// window maps each position to itself), static ones are computed.
TEST(ConvShapes, DynamicDimsStayDynamic) {
  const OpSchema& conv = *OpRegistry::global().find("conv");
  const SymShape x{true, {SymDim::dynamic(0), SymDim::fixed(4), SymDim::dynamic(1), SymDim::fixed(9)}};
  const SymShape w{true, {SymDim::fixed(8), SymDim::fixed(4), SymDim::fixed(3), SymDim::fixed(3)}};
  const std::vector<SymInput> inputs = {SymInput::tensor(x), SymInput::tensor(w)};
  const Attrs strided = {{"strides", AttrValue::ofInts({2, 2})}, {"pads", AttrValue::ofInts({1, 1})}};
  EXPECT_EQ(inferShape(conv, inputs, resolveAttrs(conv, strided).value()).toString(), "[?0,8,?,5]");
  const Attrs same = {{"auto_pad", AttrValue::ofInt(1)}};  // SAME, stride 1: H stays H
  EXPECT_EQ(inferShape(conv, inputs, resolveAttrs(conv, same).value()).toString(), "[?0,8,?1,9]");

  const OpSchema& pool = *OpRegistry::global().find("max_pool");
  const SymShape x3{true, {SymDim::fixed(1), SymDim::fixed(2), SymDim::dynamic(3), SymDim::fixed(7), SymDim::fixed(6)}};
  const std::vector<SymInput> pool_in = {SymInput::tensor(x3)};
  const Attrs window = {{"kernel", AttrValue::ofInts({1, 3, 3})},
                        {"strides", AttrValue::ofInts({1, 2, 2})},
                        {"ceil_mode", AttrValue::ofBool(true)}};
  EXPECT_EQ(inferShape(pool, pool_in, resolveAttrs(pool, window).value()).toString(), "[1,2,?3,3,3]");

  const OpSchema& resize = *OpRegistry::global().find("resize");
  const std::vector<SymInput> resize_in = {SymInput::tensor(x),
                                           SymInput::ints(SymShape{true, {SymDim::dynamic(5), SymDim::fixed(18)}})};
  EXPECT_EQ(inferShape(resize, resize_in, resolveAttrs(resize, Attrs{}).value()).toString(), "[?0,4,?5,18]");
}

}  // namespace
}  // namespace shapevm
