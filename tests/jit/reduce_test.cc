// SPDX-License-Identifier: Apache-2.0
// Differential tests of the JIT's reduce family (sum / mean / max / min / softmax / log_softmax)
// against the reference kernels: every axis set of rank-3 inputs, keepdims both ways, negative
// axes, contiguous / transposed / strided inputs, float32 / float16 / bfloat16, static and
// symbolic specs (one symbolic kernel run on several shapes), odd sizes, long rows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "jit_test_util.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

constexpr DType kFloatDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16};
constexpr const char* kReductions[] = {"sum", "mean", "max", "min"};

std::string layoutName(Layout layout) {
  switch (layout) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Transposed:
      return "transposed";
    case Layout::Strided:
      return "strided";
  }
  return "?";
}

Value input(DType dtype, const Shape& shape, std::mt19937& rng, Layout layout = Layout::Contiguous,
            double spread = 4.0) {
  return Value::fromTensor(randomTensor(dtype, shape, rng, layout, spread));
}

Attrs reduceAttrs(std::vector<std::int64_t> axes, bool keepdims) {
  return {{"axes", AttrValue::ofInts(std::move(axes))}, {"keepdims", AttrValue::ofBool(keepdims)}};
}
Attrs axisAttr(std::int64_t axis) {
  return {{"axis", AttrValue::ofInt(axis)}};
}

// Runs a compiled kernel on one input and returns its output (for checks the reference
// comparison cannot make, e.g. NaN results).
Expected<Tensor> runKernel(const KernelSpec& spec, const Value& x) {
  const KernelFamily* family = familyFor(spec.op);
  if (family == nullptr) return makeError(ErrorCode::Internal, "no family");
  SVM_ASSIGN_OR_RETURN(auto kernel, compileKernel(sharedBackend(), *family, spec));
  const Value* pointers[1] = {&x};
  std::vector<Value> actual(1);
  Status run = invokeCompiled(*kernel, pointers, actual);
  Status removed = sharedBackend().free(kernel->handle);
  SVM_RETURN_IF_ERROR(run);
  SVM_RETURN_IF_ERROR(removed);
  return actual[0].tensor();
}

// Tails and odd sizes at the very edge of mapped memory, for every loop shape.
TEST(ReduceJit, NoAccessOutsideTheOperands) {
  std::mt19937 rng(14);
  for (DType dtype : {DType::Float32, DType::Float16}) {
    for (const Shape& shape : {Shape{3, 17}, Shape{17, 3}, Shape{5, 67}, Shape{2, 3, 5}}) {
      if (dtype == DType::Float16 && shape.rank() == 3) continue;
      std::vector<Value> x = {input(dtype, shape, rng)};
      for (const std::vector<std::int64_t>& axes : {std::vector<std::int64_t>{-1}, {0}, {}}) {
        EXPECT_TRUE(guardedRunMatches(specFor("sum", x, reduceAttrs(axes, false)), x)) << shape.toString();
      }
      for (std::int64_t axis : {-1, 0}) {
        EXPECT_TRUE(guardedRunMatches(specFor("softmax", x, axisAttr(axis)), x)) << shape.toString();
      }
      // Strided kernels on transposed storage (gathered lanes, scattered stores).
      std::vector<Value> t = {Value::fromTensor(guardedCopy(x[0].tensor(), false, true))};
      EXPECT_TRUE(guardedRunMatches(specFor("max", t, reduceAttrs({-1}, false)), x, true)) << shape.toString();
      EXPECT_TRUE(guardedRunMatches(specFor("log_softmax", t, axisAttr(0)), x, true)) << shape.toString();
    }
  }
}

// ---- sum / mean / max / min ----

// Every axis set of a rank-3 input (positive and negative spellings), keepdims both ways.
TEST(ReduceJit, EveryAxisSetOfRank3) {
  std::mt19937 rng(1);
  const Shape shape{7, 17, 65};
  const std::vector<std::vector<std::int64_t>> axis_sets = {{},      {0},     {1},    {2},       {-1},        {0, 1},
                                                            {0, -1}, {-2, 2}, {2, 0}, {0, 1, 2}, {-3, -2, -1}};
  for (const char* op : kReductions) {
    for (const auto& axes : axis_sets) {
      for (bool keepdims : {false, true}) {
        std::vector<Value> inputs = {input(DType::Float32, shape, rng)};
        EXPECT_TRUE(matchesReference(specFor(op, inputs, reduceAttrs(axes, keepdims)), inputs))
            << op << " axes " << AttrValue::ofInts(axes).toString() << " keepdims " << keepdims;
      }
    }
  }
}

// Every dtype and layout on the loop shapes: row (last axis), column (first axis), mixed, all.
// Strided kernels pick their loop order from the actual strides (row or column style, unit or
// gathered lanes); float32 covers every op there, the 16-bit dtypes one op each.
TEST(ReduceJit, DTypesAndLayouts) {
  std::mt19937 rng(2);
  const Shape shape{9, 17, 33};
  const std::vector<std::vector<std::int64_t>> axis_sets = {{-1}, {0}, {0, 2}, {1}, {}};
  int rotation = 0;
  for (const char* op : kReductions) {
    for (DType dtype : kFloatDTypes) {
      for (Layout layout : shapevm::testing::kLayouts) {
        if (layout != Layout::Contiguous && dtype != DType::Float32 && kReductions[rotation++ % 4] != op) continue;
        for (const auto& axes : axis_sets) {
          // Strided mean/min: the loop shapes are sum's / max's; three axis sets suffice.
          const bool minor = std::string(op) == "mean" || std::string(op) == "min";
          if (layout != Layout::Contiguous && minor && (axes.size() == 2 || (axes.size() == 1 && axes[0] == 1)))
            continue;
          std::vector<Value> inputs = {input(dtype, shape, rng, layout)};
          const bool keepdims = axes.size() == 1;
          EXPECT_TRUE(matchesReference(specFor(op, inputs, reduceAttrs(axes, keepdims)), inputs))
              << op << " " << dtypeName(dtype) << " " << layoutName(layout) << " axes "
              << AttrValue::ofInts(axes).toString();
        }
      }
    }
  }
}

// A view sliced along its last axis: non-contiguous but with unit inner strides, so strided
// kernels take their vector (unit-stride) row and column paths.
Value sliced(DType dtype, const Shape& shape, std::mt19937& rng) {
  Shape base_shape = shape;
  base_shape[shape.rank() - 1] += 7;
  Tensor base = randomTensor(dtype, base_shape, rng);
  return Value::fromTensor(base.asStrided(shape, base.strides(), 3).value());
}

TEST(ReduceJit, SlicedInputs) {
  std::mt19937 rng(9);
  const std::vector<std::vector<std::int64_t>> axis_sets = {{-1}, {0}, {1}, {0, 2}, {}};
  for (const char* op : {"sum", "min"}) {
    for (const auto& axes : axis_sets) {
      std::vector<Value> inputs = {sliced(DType::Float32, Shape{5, 7, 70}, rng)};
      ASSERT_FALSE(inputs[0].tensor().isContiguous());
      EXPECT_TRUE(matchesReference(specFor(op, inputs, reduceAttrs(axes, false)), inputs))
          << op << " axes " << AttrValue::ofInts(axes).toString();
    }
  }
  for (auto [op, dtype] : {std::pair{"softmax", DType::Float32}, std::pair{"log_softmax", DType::BFloat16}}) {
    for (std::int64_t axis : {-1, 0, 1}) {
      std::vector<Value> inputs = {sliced(dtype, Shape{5, 7, 70}, rng)};
      EXPECT_TRUE(matchesReference(specFor(op, inputs, axisAttr(axis)), inputs)) << op << " axis " << axis;
    }
  }
}

TEST(ReduceJit, OddSizes) {
  std::mt19937 rng(3);
  for (std::int64_t rows : {1, 7, 65}) {
    for (std::int64_t cols : {1, 7, 17, 63, 65, 129}) {
      for (const char* op : {"sum", "max"}) {
        for (const std::vector<std::int64_t>& axes : {std::vector<std::int64_t>{1}, {0}, {}}) {
          std::vector<Value> inputs = {input(DType::Float32, Shape{rows, cols}, rng)};
          EXPECT_TRUE(matchesReference(specFor(op, inputs, reduceAttrs(axes, false)), inputs))
              << op << " [" << rows << "," << cols << "] axes " << AttrValue::ofInts(axes).toString();
        }
      }
    }
  }
  // Rank 1 and rank 4 (two kept axes between reduced ones).
  for (std::int64_t n : {1, 7, 17, 63, 65, 129}) {
    std::vector<Value> inputs = {input(DType::Float16, Shape{n}, rng)};
    EXPECT_TRUE(matchesReference(specFor("mean", inputs, reduceAttrs({0}, true)), inputs)) << n;
  }
  std::vector<Value> rank4 = {input(DType::Float32, Shape{3, 5, 7, 9}, rng, Layout::Strided)};
  EXPECT_TRUE(matchesReference(specFor("sum", rank4, reduceAttrs({0, 2}, false)), rank4));
  EXPECT_TRUE(matchesReference(specFor("min", rank4, reduceAttrs({1, 3}, true)), rank4));
}

// A symbolic kernel compiled once is right on several shapes (and layouts, when non-contiguous).
TEST(ReduceJit, SymbolicKernelOnSeveralShapes) {
  std::mt19937 rng(4);
  const std::vector<Shape> shapes = {Shape{4, 5, 6}, Shape{1, 1, 1}, Shape{7, 17, 129}, Shape{2, 65, 3},
                                     Shape{3, 0, 4}};
  const std::vector<std::vector<std::int64_t>> axis_sets = {{-1}, {0}, {1}, {0, 2}, {}};
  for (const char* op : kReductions) {
    for (const auto& axes : axis_sets) {
      for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
        std::vector<std::vector<Value>> sets;
        for (const Shape& shape : shapes) {
          // max/min over an empty extent is an error and mean a NaN (both tested below), not
          // comparison cases.
          if (shape.numel() == 0 && std::string(op) != "sum") continue;
          sets.push_back({input(DType::Float32, shape, rng, layout)});
        }
        // The kernel was compiled for the first (non-contiguous when strided) input.
        KernelSpec spec = specFor(op, sets[0], reduceAttrs(axes, false), Dims::Symbolic);
        EXPECT_TRUE(sameKernelMatches(spec, sets)) << op << " " << layoutName(layout);
      }
    }
  }
}

// Contiguous and non-contiguous inputs both fit a strided kernel (the runtime stride check picks
// the vector path for the former).
TEST(ReduceJit, StridedKernelTakesContiguousInputs) {
  std::mt19937 rng(5);
  std::vector<Value> strided = {input(DType::Float32, Shape{5, 70}, rng, Layout::Strided)};
  KernelSpec spec = specFor("sum", strided, reduceAttrs({-1}, false), Dims::Symbolic);
  ASSERT_FALSE(spec.inputs[0].contiguous);
  std::vector<std::vector<Value>> sets = {strided,
                                          {input(DType::Float32, Shape{5, 70}, rng)},
                                          {input(DType::Float32, Shape{6, 200}, rng, Layout::Transposed)},
                                          {input(DType::Float32, Shape{3, 1000}, rng)}};
  EXPECT_TRUE(sameKernelMatches(spec, sets));
}

// 100k-element rows: the accumulation error stays within float32's 1e-5 relative L2.
TEST(ReduceJit, LongRows) {
  std::mt19937 rng(6);
  for (DType dtype : kFloatDTypes) {
    std::vector<Value> row = {input(dtype, Shape{3, 100003}, rng)};
    for (const char* op : kReductions) {
      EXPECT_TRUE(matchesReference(specFor(op, row, reduceAttrs({-1}, false)), row)) << op << " " << dtypeName(dtype);
    }
    // A positive-mean input so the all-axes sum is well away from 0 (relative error of one number).
    Tensor shifted = randomTensor(dtype, Shape{100000}, rng, Layout::Contiguous, 1.0);
    for (std::int64_t i = 0; i < shifted.numel(); ++i) {
      storeFromDouble(shifted.rawData(), dtype, i, 0.5 + shifted.elementAsDouble(i));
    }
    std::vector<Value> all = {Value::fromTensor(shifted)};
    EXPECT_TRUE(matchesReference(specFor("sum", all, reduceAttrs({}, false)), all)) << dtypeName(dtype);
    EXPECT_TRUE(matchesReference(specFor("mean", all, reduceAttrs({}, false)), all)) << dtypeName(dtype);
    // A long column reduction.
    std::vector<Value> column = {input(dtype, Shape{20000, 5}, rng)};
    EXPECT_TRUE(matchesReference(specFor("sum", column, reduceAttrs({0}, false)), column)) << dtypeName(dtype);
  }
}

TEST(ReduceJit, ScalarAndEmptyInputs) {
  std::mt19937 rng(7);
  std::vector<Value> scalar = {input(DType::Float32, Shape{}, rng)};
  for (const char* op : kReductions) {
    EXPECT_TRUE(matchesReference(specFor(op, scalar, reduceAttrs({}, false)), scalar)) << op;
    EXPECT_TRUE(matchesReference(specFor(op, scalar, reduceAttrs({-1}, true)), scalar)) << op;
  }
  // Sum over an empty axis is 0; the kept axes still get written.
  std::vector<Value> empty = {input(DType::Float32, Shape{4, 0, 3}, rng)};
  EXPECT_TRUE(matchesReference(specFor("sum", empty, reduceAttrs({1}, false)), empty));
  // Mean over an empty axis is NaN (0 / 0), like the reference.
  auto mean = runKernel(specFor("mean", empty, reduceAttrs({1}, true)), empty[0]);
  ASSERT_TRUE(mean.hasValue()) << mean.status().toString();
  EXPECT_EQ(mean->shape(), (Shape{4, 1, 3}));
  for (std::int64_t i = 0; i < mean->numel(); ++i) EXPECT_TRUE(std::isnan(mean->elementAsDouble(i))) << i;
  // max over an empty extent: the kernel declines (the reference reports the error).
  KernelSpec spec = specFor("max", empty, reduceAttrs({1}, false));
  auto kernel = compileKernel(sharedBackend(), *familyFor(spec.op), spec);
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  const Value* pointers[1] = {&empty[0]};
  std::vector<Value> out(1);
  EXPECT_FALSE(invokeCompiled(**kernel, pointers, out).isOk());
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

// max/min: NaN wins (in every lane position and in the tail), infinities are ordinary values.
TEST(ReduceJit, NanAndInfinity) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : kFloatDTypes) {
    for (std::int64_t position : {0, 5, 16, 63, 64, 99}) {
      Tensor t = Tensor::zeros(dtype, Shape{2, 100}).value();
      for (std::int64_t i = 0; i < 200; ++i) storeFromDouble(t.rawData(), dtype, i, std::sin(static_cast<double>(i)));
      storeFromDouble(t.rawData(), dtype, position, nan);        // row 0
      storeFromDouble(t.rawData(), dtype, 100 + position, inf);  // row 1
      Value x = Value::fromTensor(t);
      for (const char* op : {"max", "min"}) {
        auto out = runKernel(specFor(op, {x}, reduceAttrs({-1}, false)), x);
        ASSERT_TRUE(out.hasValue()) << out.status().toString();
        EXPECT_TRUE(std::isnan(out->elementAsDouble(0))) << op << " " << dtypeName(dtype) << " NaN at " << position;
        if (std::string(op) == "max") {
          EXPECT_EQ(out->elementAsDouble(1), inf) << dtypeName(dtype);
        } else {
          EXPECT_LT(out->elementAsDouble(1), -0.9) << dtypeName(dtype);
        }
      }
      // Column reductions keep NaN per lane.
      auto column = runKernel(specFor("max", {x}, reduceAttrs({0}, false)), x);
      ASSERT_TRUE(column.hasValue()) << column.status().toString();
      for (std::int64_t j = 0; j < 100; ++j) {
        EXPECT_EQ(std::isnan(column->elementAsDouble(j)), j == position) << j;
      }
    }
  }
}

TEST(ReduceJit, SupportAndSymbols) {
  const KernelFamily* family = reduceFamily(OpId::Sum);
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(reduceFamily(OpId::ArgMax), nullptr);
  EXPECT_EQ(reduceFamily(OpId::Add), nullptr);
  EXPECT_EQ(reduceFamily(OpId::LogSoftmax), family);
  std::mt19937 rng(8);
  std::vector<Value> ints = {Value::fromTensor(randomTensor(DType::Int32, Shape{3, 4}, rng))};
  Status status = family->supports(specFor("sum", ints, reduceAttrs({0}, false)));
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("int32 stays interpreted"), std::string::npos) << status.message();
  std::vector<Value> doubles = {Value::fromTensor(randomTensor(DType::Float64, Shape{3, 4}, rng))};
  EXPECT_FALSE(family->supports(specFor("softmax", doubles, axisAttr(-1))).isOk());
  std::vector<Value> x = {input(DType::Float32, Shape{3, 4}, rng)};
  EXPECT_FALSE(family->supports(specFor("sum", x, reduceAttrs({2}, false))).isOk());
  EXPECT_FALSE(family->supports(specFor("sum", x, reduceAttrs({1, -1}, false))).isOk());
  EXPECT_EQ(family->symbolStem(specFor("sum", x, reduceAttrs({1}, true), Dims::Symbolic)), "sum_f32_dynxdyn_ax1_keep");
  EXPECT_EQ(family->symbolStem(specFor("max", x, reduceAttrs({}, false))), "max_f32_3x4_all");
  EXPECT_EQ(family->symbolStem(specFor("log_softmax", x, axisAttr(-2))), "log_softmax_f32_3x4_ax0");
}

// ---- softmax / log_softmax ----

TEST(SoftmaxJit, EveryAxisDTypeAndLayout) {
  std::mt19937 rng(10);
  const Shape shape{5, 17, 35};
  for (const char* op : {"softmax", "log_softmax"}) {
    for (DType dtype : kFloatDTypes) {
      for (Layout layout : shapevm::testing::kLayouts) {
        // Strided kernels: every axis for float32, the first and last for 16-bit dtypes.
        // Every axis (negative spellings too) for float32; the 16-bit dtypes repeat the loop
        // shapes with fewer axes, and strided kernels one op each.
        const bool f32 = dtype == DType::Float32;
        if (layout != Layout::Contiguous && !f32 && (dtype == DType::Float16) != (std::string(op) == "softmax"))
          continue;
        const std::vector<std::int64_t> axes =
            f32 && layout == Layout::Contiguous   ? std::vector<std::int64_t>{0, 1, 2, -1, -3}
            : f32 || layout == Layout::Contiguous ? std::vector<std::int64_t>{0, 1, -1}
                                                  : std::vector<std::int64_t>{0, -1};
        for (std::int64_t axis : axes) {
          std::vector<Value> inputs = {input(dtype, shape, rng, layout)};
          EXPECT_TRUE(matchesReference(specFor(op, inputs, axisAttr(axis)), inputs))
              << op << " " << dtypeName(dtype) << " " << layoutName(layout) << " axis " << axis;
        }
      }
    }
  }
}

TEST(SoftmaxJit, OddSizesAndLargeValues) {
  std::mt19937 rng(11);
  for (std::int64_t n : {1, 7, 17, 63, 65, 129}) {
    for (const char* op : {"softmax", "log_softmax"}) {
      std::vector<Value> row = {input(DType::Float32, Shape{3, n}, rng, Layout::Contiguous, 40.0)};
      EXPECT_TRUE(matchesReference(specFor(op, row, axisAttr(-1)), row)) << op << " n " << n;
      EXPECT_TRUE(matchesReference(specFor(op, row, axisAttr(0)), row)) << op << " n " << n;
    }
  }
  std::vector<Value> scalar = {input(DType::Float32, Shape{}, rng)};
  EXPECT_TRUE(matchesReference(specFor("softmax", scalar, axisAttr(-1)), scalar));
  EXPECT_TRUE(matchesReference(specFor("log_softmax", scalar, axisAttr(0)), scalar));
}

TEST(SoftmaxJit, LongRows) {
  std::mt19937 rng(12);
  for (DType dtype : kFloatDTypes) {
    for (const char* op : {"softmax", "log_softmax"}) {
      std::vector<Value> row = {input(dtype, Shape{2, 100003}, rng)};
      EXPECT_TRUE(matchesReference(specFor(op, row, axisAttr(-1)), row)) << op << " " << dtypeName(dtype);
    }
  }
  std::vector<Value> column = {input(DType::Float32, Shape{30000, 3}, rng)};
  EXPECT_TRUE(matchesReference(specFor("softmax", column, axisAttr(0)), column));
}

TEST(SoftmaxJit, SymbolicKernelOnSeveralShapes) {
  std::mt19937 rng(13);
  const std::vector<Shape> shapes = {Shape{4, 6, 10}, Shape{1, 1, 1}, Shape{3, 7, 129}, Shape{2, 65, 17},
                                     Shape{2, 0, 3}};
  for (const char* op : {"softmax", "log_softmax"}) {
    for (std::int64_t axis : {-1, 1, 0}) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        std::vector<std::vector<Value>> sets;
        for (const Shape& shape : shapes) sets.push_back({input(DType::BFloat16, shape, rng, layout)});
        KernelSpec spec = specFor(op, sets[0], axisAttr(axis), Dims::Symbolic);
        EXPECT_TRUE(sameKernelMatches(spec, sets)) << op << " axis " << axis << " " << layoutName(layout);
      }
    }
  }
}

TEST(SoftmaxJit, NanAndInfinityRows) {
  // Row 0 holds a NaN, row 1 +inf, row 2 -inf: the kernel gives what the reference gives (NaN included).
  for (const char* op : {"softmax", "log_softmax"}) {
    Tensor t = Tensor::zeros(DType::Float32, Shape{3, 40}).value();
    for (std::int64_t i = 0; i < 120; ++i)
      storeFromDouble(t.rawData(), DType::Float32, i, std::cos(static_cast<double>(i)));
    storeFromDouble(t.rawData(), DType::Float32, 17, std::numeric_limits<double>::quiet_NaN());
    storeFromDouble(t.rawData(), DType::Float32, 40 + 33, std::numeric_limits<double>::infinity());
    storeFromDouble(t.rawData(), DType::Float32, 80 + 3, -std::numeric_limits<double>::infinity());
    Value x = Value::fromTensor(t);
    auto out = runKernel(specFor(op, {x}, axisAttr(-1)), x);
    ASSERT_TRUE(out.hasValue()) << out.status().toString();
    auto expected = callOp(op, {x}, axisAttr(-1));
    ASSERT_TRUE(expected.hasValue());
    const Tensor& want = (*expected)[0].tensor();
    for (std::int64_t i = 0; i < 120; ++i) {
      const double w = want.elementAsDouble(i), g = out->elementAsDouble(i);
      if (std::isnan(w) || std::isinf(w)) {
        EXPECT_EQ(std::isnan(g), std::isnan(w)) << op << " element " << i;
        if (std::isinf(w)) {
          EXPECT_EQ(g, w) << op << " element " << i;
        }
      } else {
        EXPECT_NEAR(g, w, 1e-5 * (1 + std::abs(w))) << op << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace shapevm::jit
