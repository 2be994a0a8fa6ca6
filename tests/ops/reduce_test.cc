// SPDX-License-Identifier: Apache-2.0
// Tests for the reduction and normalization kernels: random inputs (seeded) over several
// shapes, axes, dtypes and non-contiguous layouts, checked against double-precision index loops
// written here; dtype rules, NaN handling, numerical stability and must-fail messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

constexpr DType kFloatDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

constexpr DType kAllDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                                DType::Int32,   DType::Int64,   DType::Bool};

Shape randomShape(std::mt19937& rng, int rank, int max_extent = 6) {
  Shape shape;
  for (int d = 0; d < rank; ++d) shape.push_back(std::uniform_int_distribution<int>(1, max_extent)(rng));
  return shape;
}

// Relative precision of results stored in each dtype (storage rounding plus accumulation).
double relativeTolerance(DType dtype) {
  switch (dtype) {
    case DType::Float64: return 1e-12;
    case DType::Float32: return 2e-6;
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    default: return 0.0;
  }
}

// ---- sum / mean / max / min ----

struct ReduceReference {
  Shape shape;
  std::vector<double> sum, sum_abs, max, min;
  std::int64_t count = 0;
};

ReduceReference referenceReduce(const Tensor& x, const std::vector<bool>& reduced, bool keepdims) {
  ReduceReference ref;
  Shape kept;
  for (int d = 0; d < x.rank(); ++d) {
    if (!reduced[static_cast<std::size_t>(d)]) kept.push_back(x.dim(d));
    if (!reduced[static_cast<std::size_t>(d)] || keepdims) ref.shape.push_back(reduced[static_cast<std::size_t>(d)] ? 1 : x.dim(d));
  }
  const auto outputs = static_cast<std::size_t>(kept.numel());
  ref.count = 1;
  for (int d = 0; d < x.rank(); ++d) {
    if (reduced[static_cast<std::size_t>(d)]) ref.count *= x.dim(d);
  }
  ref.sum.assign(outputs, 0.0);
  ref.sum_abs.assign(outputs, 0.0);
  ref.max.assign(outputs, -std::numeric_limits<double>::infinity());
  ref.min.assign(outputs, std::numeric_limits<double>::infinity());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    Index index = unravel(i, x.shape());
    std::int64_t out = 0;
    for (int d = 0; d < x.rank(); ++d) {
      if (!reduced[static_cast<std::size_t>(d)]) out = out * x.dim(d) + index[static_cast<std::size_t>(d)];
    }
    const double v = at(x, index);
    const auto o = static_cast<std::size_t>(out);
    ref.sum[o] += v;
    ref.sum_abs[o] += std::abs(v);
    if (std::isnan(v) || std::isnan(ref.max[o])) {
      ref.max[o] = ref.min[o] = std::numeric_limits<double>::quiet_NaN();
    } else {
      ref.max[o] = std::max(ref.max[o], v);
      ref.min[o] = std::min(ref.min[o], v);
    }
  }
  return ref;
}

void checkClose(double actual, double expected, double tolerance, const std::string& where) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << where << ": expected NaN, got " << actual;
    return;
  }
  EXPECT_NEAR(actual, expected, tolerance) << where;
}

TEST(ReduceSumMeanMaxMin, RandomShapesAxesDTypesLayouts) {
  std::mt19937 rng(21);
  int checked = 0;
  for (DType dtype : kAllDTypes) {
    for (int rank = 0; rank <= 4; ++rank) {
      for (Layout layout : kLayouts) {
        Tensor x = randomTensor(dtype, randomShape(rng, rank), rng, layout);
        // A random subset of axes (empty = all), named with random signs, in random order.
        Index axes;
        std::vector<bool> reduced(static_cast<std::size_t>(rank), false);
        for (int d = 0; d < rank; ++d) {
          if (std::uniform_int_distribution<int>(0, 1)(rng)) {
            axes.push_back(std::uniform_int_distribution<int>(0, 1)(rng) ? d : d - rank);
            reduced[static_cast<std::size_t>(d)] = true;
          }
        }
        std::shuffle(axes.begin(), axes.end(), rng);
        if (axes.empty()) reduced.assign(static_cast<std::size_t>(rank), true);
        const bool keepdims = std::uniform_int_distribution<int>(0, 1)(rng) != 0;
        const ReduceReference ref = referenceReduce(x, reduced, keepdims);
        const Attrs attrs = {{"axes", AttrValue::ofInts(axes)}, {"keepdims", AttrValue::ofBool(keepdims)}};
        const std::string where = std::string(dtypeName(dtype)) + x.describe() + " axes " + AttrValue::ofInts(axes).toString();

        Tensor sum = run1("sum", {tv(x)}, attrs);
        Tensor mean = run1("mean", {tv(x)}, attrs);
        Tensor max = run1("max", {tv(x)}, attrs);
        Tensor min = run1("min", {tv(x)}, attrs);
        ASSERT_TRUE(sum.defined() && mean.defined() && max.defined() && min.defined()) << where;
        for (const Tensor* t : {&sum, &mean, &max, &min}) ASSERT_EQ(t->shape(), ref.shape) << where;
        EXPECT_EQ(sum.dtype(), isFloating(dtype) ? dtype : DType::Int64) << where;
        EXPECT_EQ(mean.dtype(), isFloating(dtype) ? dtype : DType::Float32) << where;
        EXPECT_EQ(max.dtype(), dtype) << where;
        EXPECT_EQ(min.dtype(), dtype) << where;
        const double rel = relativeTolerance(dtype);
        const double mean_rel = isFloating(dtype) ? rel : 1e-6;
        for (std::size_t o = 0; o < ref.sum.size(); ++o) {
          const auto i = static_cast<std::int64_t>(o);
          const double count = static_cast<double>(ref.count);
          checkClose(sum.elementAsDouble(i), ref.sum[o], rel * (ref.sum_abs[o] + std::abs(ref.sum[o])), where + " sum");
          checkClose(mean.elementAsDouble(i), ref.sum[o] / count,
                     mean_rel * (ref.sum_abs[o] + std::abs(ref.sum[o])) / count + 1e-30, where + " mean");
          checkClose(max.elementAsDouble(i), ref.max[o], 0.0, where + " max");
          checkClose(min.elementAsDouble(i), ref.min[o], 0.0, where + " min");
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
}

TEST(ReduceSum, Float32AccumulatesAccurately) {
  const std::int64_t n = 1 << 21;
  Tensor x = Tensor::empty(DType::Float32, Shape{n}).value();
  for (std::int64_t i = 0; i < n; ++i) x.data<float>()[i] = 0.1f;
  Tensor sum = run1("sum", {tv(x)});
  ASSERT_TRUE(sum.defined());
  const double expected = static_cast<double>(0.1f) * static_cast<double>(n);
  EXPECT_NEAR(sum.elementAsDouble(0), expected, expected * 1e-7);
  // The same along rows of a 2-D view, over the outer axis (accumulators in the inner loop).
  Tensor grid = x.asStrided(Shape{n / 4, 4}, Shape{4, 1}, 0).value();
  Tensor columns = run1("sum", {tv(grid)}, {{"axes", AttrValue::ofInts({0})}});
  ASSERT_TRUE(columns.defined());
  for (std::int64_t j = 0; j < 4; ++j) EXPECT_NEAR(columns.elementAsDouble(j), expected / 4, expected / 4 * 1e-7);
}

TEST(ReduceSum, NegativeAndZeroStrideViews) {
  std::mt19937 rng(25);
  Tensor base = randomTensor(DType::Float32, Shape{5, 6}, rng);
  // Both axes reversed (negative strides), and a broadcast view (zero stride on axis 0).
  Tensor reversed = base.asStrided(Shape{5, 6}, Shape{-6, -1}, 29).value();
  Tensor broadcast = base.asStrided(Shape{4, 6}, Shape{0, 1}, 6).value();
  for (const Tensor& x : {reversed, broadcast}) {
    for (const Index& axes : {Index{}, Index{0}, Index{1}}) {
      std::vector<bool> reduced = {axes.empty() || axes[0] == 0, axes.empty() || axes[0] == 1};
      const ReduceReference ref = referenceReduce(x, reduced, false);
      Tensor sum = run1("sum", {tv(x)}, {{"axes", AttrValue::ofInts(axes)}});
      Tensor max = run1("max", {tv(x)}, {{"axes", AttrValue::ofInts(axes)}});
      ASSERT_TRUE(sum.defined() && max.defined());
      for (std::size_t o = 0; o < ref.sum.size(); ++o) {
        EXPECT_NEAR(sum.elementAsDouble(static_cast<std::int64_t>(o)), ref.sum[o], 1e-5 * ref.sum_abs[o]);
        EXPECT_EQ(max.elementAsDouble(static_cast<std::int64_t>(o)), ref.max[o]);
      }
    }
    Tensor soft = run1("softmax", {tv(x)}, {{"axis", AttrValue::ofInt(0)}});
    Tensor arg = run1("argmax", {tv(x)}, {{"axis", AttrValue::ofInt(1)}});
    ASSERT_TRUE(soft.defined() && arg.defined());
    for (std::int64_t j = 0; j < x.dim(1); ++j) {
      double total = 0.0;
      for (std::int64_t i = 0; i < x.dim(0); ++i) total += at(soft, {i, j});
      EXPECT_NEAR(total, 1.0, 1e-6);
    }
    for (std::int64_t i = 0; i < x.dim(0); ++i) {
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < x.dim(1); ++j) {
        if (at(x, {i, j}) > at(x, {i, best})) best = j;
      }
      EXPECT_EQ(arg.elementAsDouble(i), static_cast<double>(best));
    }
  }
}

TEST(ReduceSum, IntegerAndBoolDTypes) {
  Tensor flags = Tensor::empty(DType::Bool, Shape{2, 3}).value();
  const bool pattern[] = {true, false, true, true, true, false};
  for (int i = 0; i < 6; ++i) flags.data<bool>()[i] = pattern[i];
  Tensor count = run1("sum", {tv(flags)}, {{"axes", AttrValue::ofInts({1})}});
  ASSERT_TRUE(count.defined());
  EXPECT_EQ(count.dtype(), DType::Int64);
  EXPECT_EQ(count.data<std::int64_t>()[0], 2);
  EXPECT_EQ(count.data<std::int64_t>()[1], 2);
  Tensor big = Tensor::empty(DType::Int32, Shape{3}).value();
  for (int i = 0; i < 3; ++i) big.data<std::int32_t>()[i] = std::numeric_limits<std::int32_t>::max();
  Tensor total = run1("sum", {tv(big)});
  ASSERT_TRUE(total.defined());
  EXPECT_EQ(total.dtype(), DType::Int64);
  EXPECT_EQ(total.data<std::int64_t>()[0], 3LL * std::numeric_limits<std::int32_t>::max());
  Tensor any = run1("max", {tv(flags)}, {{"axes", AttrValue::ofInts({0})}});
  ASSERT_TRUE(any.defined());
  EXPECT_EQ(any.dtype(), DType::Bool);
  EXPECT_TRUE(any.data<bool>()[2]);
  Tensor all = run1("min", {tv(flags)}, {{"axes", AttrValue::ofInts({0})}});
  ASSERT_TRUE(all.defined());
  EXPECT_FALSE(all.data<bool>()[1]);
  EXPECT_TRUE(all.data<bool>()[0]);
}

TEST(ReduceMaxMin, NaNPropagatesAndEmptyExtents) {
  Tensor x = Tensor::empty(DType::Float32, Shape{2, 3}).value();
  const float values[] = {1.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f, -1.0f, -2.0f, -3.0f};
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = values[i];
  Tensor max = run1("max", {tv(x)}, {{"axes", AttrValue::ofInts({1})}});
  ASSERT_TRUE(max.defined());
  EXPECT_TRUE(std::isnan(max.elementAsDouble(0)));
  EXPECT_EQ(max.elementAsDouble(1), -1.0);
  Tensor min = run1("min", {tv(x)});
  ASSERT_TRUE(min.defined());
  EXPECT_TRUE(std::isnan(min.elementAsDouble(0)));

  Tensor rows_empty = Tensor::zeros(DType::Float32, Shape{0, 3}).value();
  expectError("max", {tv(rows_empty)}, {{"axes", AttrValue::ofInts({0})}}, ErrorCode::InvalidArgument,
              {"max", "empty", "[0,3]"});
  expectError("min", {tv(rows_empty)}, {}, ErrorCode::InvalidArgument, {"min", "empty"});
  Tensor none = run1("max", {tv(rows_empty)}, {{"axes", AttrValue::ofInts({1})}});
  ASSERT_TRUE(none.defined());
  EXPECT_EQ(none.shape(), (Shape{0}));
  Tensor zeros = run1("sum", {tv(rows_empty)}, {{"axes", AttrValue::ofInts({0})}, {"keepdims", AttrValue::ofBool(true)}});
  ASSERT_TRUE(zeros.defined());
  EXPECT_EQ(zeros.shape(), (Shape{1, 3}));
  EXPECT_EQ(zeros.elementAsDouble(2), 0.0);
  Tensor nan_mean = run1("mean", {tv(rows_empty)}, {{"axes", AttrValue::ofInts({0})}});
  ASSERT_TRUE(nan_mean.defined());
  EXPECT_TRUE(std::isnan(nan_mean.elementAsDouble(0)));
}

TEST(ReduceAxes, Errors) {
  Tensor x = Tensor::zeros(DType::Float32, Shape{2, 3}).value();
  for (const char* op : {"sum", "mean", "max", "min"}) {
    expectError(op, {tv(x)}, {{"axes", AttrValue::ofInts({2})}}, ErrorCode::IndexOutOfRange, {op, "axis 2", "rank 2"});
    expectError(op, {tv(x)}, {{"axes", AttrValue::ofInts({-3})}}, ErrorCode::IndexOutOfRange, {"axis -3"});
    expectError(op, {tv(x)}, {{"axes", AttrValue::ofInts({1, -1})}}, ErrorCode::InvalidArgument, {op, "[1,-1]", "twice"});
  }
  expectError("argmax", {tv(x)}, {{"axis", AttrValue::ofInt(2)}}, ErrorCode::IndexOutOfRange, {"argmax", "axis 2"});
  expectError("softmax", {tv(x)}, {{"axis", AttrValue::ofInt(-3)}}, ErrorCode::IndexOutOfRange, {"softmax", "axis -3"});
}

// ---- argmax ----

TEST(ReduceArgMax, FirstMaximumWithTies) {
  std::mt19937 rng(22);
  for (DType dtype : {DType::Float32, DType::Int32, DType::Float16, DType::Bool, DType::Int64}) {
    for (int rank = 1; rank <= 3; ++rank) {
      for (Layout layout : kLayouts) {
        Tensor x = randomTensor(dtype, randomShape(rng, rank), rng, layout);
        // Few distinct values so that ties are common.
        for (std::int64_t i = 0; i < x.numel(); ++i) {
          Index index = unravel(i, x.shape());
          setAt(x, index, dtype == DType::Bool ? std::uniform_int_distribution<int>(0, 1)(rng)
                                               : std::uniform_int_distribution<int>(-2, 2)(rng));
        }
        for (int axis = -rank; axis < rank; ++axis) {
          const int a = axis < 0 ? axis + rank : axis;
          const bool keepdims = (axis & 1) != 0;
          Tensor y = run1("argmax", {tv(x)}, {{"axis", AttrValue::ofInt(axis)}, {"keepdims", AttrValue::ofBool(keepdims)}});
          ASSERT_TRUE(y.defined());
          EXPECT_EQ(y.dtype(), DType::Int64);
          ASSERT_EQ(y.rank(), keepdims ? rank : rank - 1);
          for (std::int64_t i = 0; i < y.numel(); ++i) {
            Index out_index = unravel(i, y.shape());
            Index index = out_index;
            if (!keepdims) index.insert(index.begin() + a, 0);
            std::int64_t best = 0;
            for (std::int64_t j = 0; j < x.dim(a); ++j) {
              Index probe = index;
              probe[static_cast<std::size_t>(a)] = j;
              Index best_probe = index;
              best_probe[static_cast<std::size_t>(a)] = best;
              if (at(x, probe) > at(x, best_probe)) best = j;
            }
            ASSERT_EQ(y.elementAsDouble(i), static_cast<double>(best)) << x.describe() << " axis " << axis;
          }
        }
      }
    }
  }
}

TEST(ReduceArgMax, NaNCountsAsMaximum) {
  Tensor x = Tensor::empty(DType::Float64, Shape{4}).value();
  const double values[] = {1.0, std::numeric_limits<double>::quiet_NaN(), 5.0, std::numeric_limits<double>::quiet_NaN()};
  for (int i = 0; i < 4; ++i) x.data<double>()[i] = values[i];
  Tensor y = run1("argmax", {tv(x)});
  ASSERT_TRUE(y.defined());
  EXPECT_EQ(y.rank(), 0);
  EXPECT_EQ(y.data<std::int64_t>()[0], 1);
  Tensor empty = Tensor::zeros(DType::Float32, Shape{0, 2}).value();
  expectError("argmax", {tv(empty)}, {}, ErrorCode::InvalidArgument, {"argmax", "empty", "[0,2]"});
}

// ---- softmax / log_softmax ----

TEST(ReduceSoftmax, RandomAxesDTypesLayouts) {
  std::mt19937 rng(23);
  for (DType dtype : kFloatDTypes) {
    for (int rank = 1; rank <= 4; ++rank) {
      for (Layout layout : kLayouts) {
        Tensor x = randomTensor(dtype, randomShape(rng, rank, 7), rng, layout, 8.0);
        const int axis = std::uniform_int_distribution<int>(-rank, rank - 1)(rng);
        const int a = axis < 0 ? axis + rank : axis;
        Tensor soft = run1("softmax", {tv(x)}, {{"axis", AttrValue::ofInt(axis)}});
        Tensor log_soft = run1("log_softmax", {tv(x)}, {{"axis", AttrValue::ofInt(axis)}});
        ASSERT_TRUE(soft.defined() && log_soft.defined());
        EXPECT_EQ(soft.dtype(), dtype);
        EXPECT_EQ(log_soft.dtype(), dtype);
        ASSERT_EQ(soft.shape(), x.shape());
        const double rel = relativeTolerance(dtype);
        for (std::int64_t i = 0; i < x.numel(); ++i) {
          Index index = unravel(i, x.shape());
          double max_value = -std::numeric_limits<double>::infinity();
          for (std::int64_t j = 0; j < x.dim(a); ++j) {
            Index probe = index;
            probe[static_cast<std::size_t>(a)] = j;
            max_value = std::max(max_value, at(x, probe));
          }
          double sum = 0.0;
          for (std::int64_t j = 0; j < x.dim(a); ++j) {
            Index probe = index;
            probe[static_cast<std::size_t>(a)] = j;
            sum += std::exp(at(x, probe) - max_value);
          }
          const double expected = std::exp(at(x, index) - max_value) / sum;
          const double expected_log = at(x, index) - max_value - std::log(sum);
          ASSERT_NEAR(at(soft, index), expected, rel * expected + 1e-7) << x.describe() << " axis " << axis;
          ASSERT_NEAR(at(log_soft, index), expected_log, rel * (std::abs(expected_log) + 1.0)) << x.describe() << " axis " << axis;
        }
      }
    }
  }
}

TEST(ReduceSoftmax, StableForLargeInputs) {
  Tensor x = Tensor::empty(DType::Float32, Shape{2, 2}).value();
  const float values[] = {1000.0f, 1001.0f, -1000.0f, 0.0f};
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = values[i];
  Tensor soft = run1("softmax", {tv(x)});
  ASSERT_TRUE(soft.defined());
  EXPECT_NEAR(soft.elementAsDouble(0), 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(soft.elementAsDouble(1), 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(soft.elementAsDouble(2), 0.0);
  EXPECT_EQ(soft.elementAsDouble(3), 1.0);
  Tensor log_soft = run1("log_softmax", {tv(x)});
  ASSERT_TRUE(log_soft.defined());
  EXPECT_NEAR(log_soft.elementAsDouble(2), -1000.0, 1e-3);
  EXPECT_NEAR(log_soft.elementAsDouble(3), 0.0, 1e-6);
  EXPECT_NEAR(log_soft.elementAsDouble(0), -std::log1p(std::exp(1.0)), 1e-5);
  Tensor ints = Tensor::zeros(DType::Int64, Shape{3}).value();
  expectError("softmax", {tv(ints)}, {}, ErrorCode::DTypeMismatch, {"softmax", "int64"});
  expectError("log_softmax", {tv(ints)}, {}, ErrorCode::DTypeMismatch, {"log_softmax", "int64"});
}

// ---- layer_norm ----

TEST(ReduceLayerNorm, RandomShapesWeightsAndBiases) {
  std::mt19937 rng(24);
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (int axis : {-1, -2, 1}) {
        Tensor x = randomTensor(dtype, Shape{3, std::uniform_int_distribution<std::int64_t>(2, 6)(rng), 8}, rng, layout, 3.0);
        const int a = axis < 0 ? axis + 3 : axis;
        Shape norm_shape;
        for (int d = a; d < 3; ++d) norm_shape.push_back(x.dim(d));
        // weight over the full normalized shape; bias broadcast from its last axis.
        Tensor weight = randomTensor(DType::Float32, norm_shape, rng);
        Tensor bias = randomTensor(dtype, Shape{8}, rng);
        const double eps = 1e-3;
        for (int variant = 0; variant < 4; ++variant) {
          std::vector<Value> inputs = {tv(x)};
          const bool has_weight = variant & 1, has_bias = variant & 2;
          if (has_weight || has_bias) inputs.push_back(has_weight ? tv(weight) : Value());
          if (has_bias) inputs.push_back(tv(bias));
          Tensor y = run1("layer_norm", inputs, {{"axis", AttrValue::ofInt(axis)}, {"eps", AttrValue::ofFloat(eps)}});
          ASSERT_TRUE(y.defined());
          EXPECT_EQ(y.dtype(), dtype);
          ASSERT_EQ(y.shape(), x.shape());
          const std::int64_t width = norm_shape.numel();
          for (std::int64_t row = 0; row < x.numel() / width; ++row) {
            double mean = 0.0, variance = 0.0;
            for (std::int64_t j = 0; j < width; ++j) mean += at(x, unravel(row * width + j, x.shape()));
            mean /= static_cast<double>(width);
            for (std::int64_t j = 0; j < width; ++j) {
              const double centered = at(x, unravel(row * width + j, x.shape())) - mean;
              variance += centered * centered;
            }
            variance /= static_cast<double>(width);
            for (std::int64_t j = 0; j < width; ++j) {
              Index index = unravel(row * width + j, x.shape());
              double expected = (at(x, index) - mean) / std::sqrt(variance + eps);
              if (has_weight) expected *= at(weight, unravel(j, norm_shape));
              if (has_bias) expected += at(bias, {index[2]});
              ASSERT_NEAR(at(y, index), expected, relativeTolerance(dtype) * (std::abs(expected) + 4.0) + 1e-6)
                  << x.describe() << " axis " << axis << " variant " << variant;
            }
          }
        }
      }
    }
  }
}

TEST(ReduceLayerNorm, Errors) {
  Tensor x = Tensor::zeros(DType::Float32, Shape{2, 4}).value();
  Tensor bad = Tensor::zeros(DType::Float32, Shape{5}).value();
  expectError("layer_norm", {tv(x), tv(bad)}, {}, ErrorCode::ShapeMismatch, {"layer_norm", "[5]"});
  Tensor wide = Tensor::zeros(DType::Float32, Shape{3, 4}).value();
  expectError("layer_norm", {tv(x), Value(), tv(wide)}, {}, ErrorCode::ShapeMismatch, {"bias", "[3,4]", "[4]"});
  Tensor ints = Tensor::zeros(DType::Int32, Shape{2, 4}).value();
  expectError("layer_norm", {tv(ints)}, {}, ErrorCode::DTypeMismatch, {"layer_norm", "int32"});
  expectError("layer_norm", {tv(x)}, {{"axis", AttrValue::ofInt(2)}}, ErrorCode::IndexOutOfRange, {"axis 2"});
}

}  // namespace
}  // namespace shapevm
