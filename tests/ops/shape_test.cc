// SPDX-License-Identifier: Apache-2.0
// Tests for the shape and data-movement kernels: random inputs (seeded), several shapes,
// dtypes and non-contiguous layouts, checked against index loops written here, plus checks that
// views share storage and that every must-fail case names the offending values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
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

// Row-major element `linear` of each tensor agrees.
void expectSameRowMajor(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.numel(), expected.numel());
  for (std::int64_t i = 0; i < actual.numel(); ++i) {
    ASSERT_EQ(actual.elementAsDouble(i), expected.elementAsDouble(i)) << "element " << i;
  }
}

Shape randomShape(std::mt19937& rng, int rank, int max_extent = 5) {
  Shape shape;
  for (int d = 0; d < rank; ++d) shape.push_back(std::uniform_int_distribution<int>(1, max_extent)(rng));
  return shape;
}

constexpr DType kAllDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                                DType::Int32,   DType::Int64,   DType::Bool};

// ---- reshape ----

TEST(ShapeReshape, ContiguousIsAViewWithInferredExtent) {
  std::mt19937 rng(1);
  for (DType dtype : kAllDTypes) {
    Tensor x = randomTensor(dtype, Shape{2, 3, 4}, rng);
    for (const Index& target : {Index{6, 4}, Index{-1, 2}, Index{24}, Index{2, -1, 3}, Index{1, 24, 1}}) {
      Tensor y = run1("reshape", {tv(x), ints(target)});
      ASSERT_TRUE(y.defined());
      EXPECT_TRUE(y.sharesStorageWith(x));
      EXPECT_EQ(y.numel(), 24);
      for (std::size_t d = 0; d < target.size(); ++d) {
        if (target[d] != -1) {
          EXPECT_EQ(y.dim(static_cast<int>(d)), target[d]);
        }
      }
      expectSameRowMajor(y, x);
    }
  }
}

TEST(ShapeReshape, NonContiguousCopiesOrViews) {
  std::mt19937 rng(2);
  Tensor transposed = randomTensor(DType::Float32, Shape{3, 4}, rng, Layout::Transposed);
  Tensor copied = run1("reshape", {tv(transposed), ints({12})});
  ASSERT_TRUE(copied.defined());
  EXPECT_FALSE(copied.sharesStorageWith(transposed));
  EXPECT_TRUE(copied.isContiguous());
  expectSameRowMajor(copied, transposed);

  // Rows with a gap: splitting the inner axis needs no copy.
  Tensor base = randomTensor(DType::Float32, Shape{4, 10}, rng);
  Tensor rows = base.asStrided(Shape{4, 6}, Shape{10, 1}, 2).value();
  Tensor split_inner = run1("reshape", {tv(rows), ints({4, 2, 3})});
  ASSERT_TRUE(split_inner.defined());
  EXPECT_TRUE(split_inner.sharesStorageWith(base));
  expectSameRowMajor(split_inner, rows);
  Tensor merged = run1("reshape", {tv(rows), ints({24})});
  ASSERT_TRUE(merged.defined());
  EXPECT_FALSE(merged.sharesStorageWith(base));
  expectSameRowMajor(merged, rows);
}

TEST(ShapeReshape, ZeroExtentsAndScalars) {
  Tensor empty = Tensor::zeros(DType::Float32, Shape{2, 0, 3}).value();
  Tensor y = run1("reshape", {tv(empty), ints({0, 5})});
  ASSERT_TRUE(y.defined());
  EXPECT_EQ(y.shape(), (Shape{0, 5}));
  Tensor scalar = Tensor::scalar(7.0, DType::Int64);
  Tensor one = run1("reshape", {tv(scalar), ints({1, 1})});
  ASSERT_TRUE(one.defined());
  EXPECT_EQ(one.shape(), (Shape{1, 1}));
  EXPECT_EQ(one.elementAsDouble(0), 7.0);
  Tensor back = run1("reshape", {tv(one), Value::fromTuple({})});
  ASSERT_TRUE(back.defined());
  EXPECT_EQ(back.rank(), 0);
}

TEST(ShapeReshape, Errors) {
  Tensor x = Tensor::zeros(DType::Float32, Shape{2, 3}).value();
  expectError("reshape", {tv(x), ints({4, -1})}, {}, ErrorCode::ShapeMismatch, {"reshape", "[2,3]", "[4,-1]", "6"});
  expectError("reshape", {tv(x), ints({4, 2})}, {}, ErrorCode::ShapeMismatch, {"[2,3]", "[4,2]"});
  expectError("reshape", {tv(x), ints({-1, -1})}, {}, ErrorCode::InvalidArgument, {"more than one -1"});
  expectError("reshape", {tv(x), ints({-2, -3})}, {}, ErrorCode::InvalidArgument, {"-2"});
  Tensor empty = Tensor::zeros(DType::Float32, Shape{0, 3}).value();
  expectError("reshape", {tv(empty), ints({0, -1})}, {}, ErrorCode::InvalidArgument, {"-1", "[0,3]"});
}

// ---- transpose ----

TEST(ShapeTranspose, RandomPermutationsAreViews) {
  std::mt19937 rng(3);
  for (int rank = 0; rank <= 4; ++rank) {
    for (Layout layout : kLayouts) {
      for (DType dtype : {DType::Float32, DType::Int32, DType::BFloat16}) {
        Tensor x = randomTensor(dtype, randomShape(rng, rank), rng, layout);
        Index perm(static_cast<std::size_t>(rank));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        Tensor y = run1("transpose", {tv(x)}, {{"perm", AttrValue::ofInts(perm)}});
        ASSERT_TRUE(y.defined());
        EXPECT_TRUE(y.sharesStorageWith(x));
        for (std::int64_t i = 0; i < y.numel(); ++i) {
          Index out_index = unravel(i, y.shape());
          Index in_index(static_cast<std::size_t>(rank));
          for (int d = 0; d < rank; ++d) in_index[static_cast<std::size_t>(perm[static_cast<std::size_t>(d)])] = out_index[static_cast<std::size_t>(d)];
          ASSERT_EQ(at(y, out_index), at(x, in_index));
        }
      }
    }
  }
}

TEST(ShapeTranspose, EmptyPermReversesAndErrors) {
  std::mt19937 rng(4);
  Tensor x = randomTensor(DType::Float64, Shape{2, 3, 4}, rng);
  Tensor y = run1("transpose", {tv(x)});
  ASSERT_TRUE(y.defined());
  EXPECT_EQ(y.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(at(y, {3, 1, 0}), at(x, {0, 1, 3}));
  Tensor negative = run1("transpose", {tv(x)}, {{"perm", AttrValue::ofInts({-1, 0, 1})}});
  ASSERT_TRUE(negative.defined());
  EXPECT_EQ(negative.shape(), (Shape{4, 2, 3}));
  expectError("transpose", {tv(x)}, {{"perm", AttrValue::ofInts({0, 0, 1})}}, ErrorCode::InvalidArgument,
              {"transpose", "[0,0,1]", "not a permutation"});
  expectError("transpose", {tv(x)}, {{"perm", AttrValue::ofInts({1, 0})}}, ErrorCode::InvalidArgument, {"[1,0]", "rank 3"});
  expectError("transpose", {tv(x)}, {{"perm", AttrValue::ofInts({0, 1, 3})}}, ErrorCode::IndexOutOfRange, {"axis 3"});
}

// ---- squeeze / unsqueeze ----

TEST(ShapeSqueeze, DropsUnitAxes) {
  std::mt19937 rng(5);
  for (Layout layout : kLayouts) {
    Tensor x = randomTensor(DType::Float32, Shape{1, 3, 1, 2}, rng, layout);
    Tensor all = run1("squeeze", {tv(x)});
    ASSERT_TRUE(all.defined());
    EXPECT_EQ(all.shape(), (Shape{3, 2}));
    EXPECT_TRUE(all.sharesStorageWith(x));
    expectSameRowMajor(all, x);
    Tensor one = run1("squeeze", {tv(x)}, {{"axes", AttrValue::ofInts({-2})}});
    ASSERT_TRUE(one.defined());
    EXPECT_EQ(one.shape(), (Shape{1, 3, 2}));
    expectSameRowMajor(one, x);
  }
  Tensor x = Tensor::zeros(DType::Int64, Shape{1, 3}).value();
  expectError("squeeze", {tv(x)}, {{"axes", AttrValue::ofInts({1})}}, ErrorCode::ShapeMismatch, {"squeeze", "axis 1", "3"});
  expectError("squeeze", {tv(x)}, {{"axes", AttrValue::ofInts({2})}}, ErrorCode::IndexOutOfRange, {"axis 2", "rank 2"});
  expectError("squeeze", {tv(x)}, {{"axes", AttrValue::ofInts({0, -2})}}, ErrorCode::InvalidArgument, {"twice"});
}

TEST(ShapeUnsqueeze, InsertsAtOutputPositions) {
  std::mt19937 rng(6);
  Tensor x = randomTensor(DType::Float16, Shape{3, 4}, rng, Layout::Transposed);
  struct Case {
    Index axes;
    Shape expected;
  };
  for (const Case& c : {Case{{0}, Shape{1, 3, 4}}, Case{{1}, Shape{3, 1, 4}}, Case{{-1}, Shape{3, 4, 1}},
                        Case{{0, -1}, Shape{1, 3, 4, 1}}, Case{{3, 1}, Shape{3, 1, 4, 1}}, Case{{0, 1, 2}, Shape{1, 1, 1, 3, 4}}}) {
    Tensor y = run1("unsqueeze", {tv(x)}, {{"axes", AttrValue::ofInts(c.axes)}});
    ASSERT_TRUE(y.defined());
    EXPECT_EQ(y.shape(), c.expected);
    EXPECT_TRUE(y.sharesStorageWith(x));
    expectSameRowMajor(y, x);
  }
  Tensor scalar = Tensor::scalar(2.5, DType::Float32);
  Tensor lifted = run1("unsqueeze", {tv(scalar)}, {{"axes", AttrValue::ofInts({0})}});
  ASSERT_TRUE(lifted.defined());
  EXPECT_EQ(lifted.shape(), (Shape{1}));
  EXPECT_TRUE(lifted.isContiguous());
  expectError("unsqueeze", {tv(x)}, {{"axes", AttrValue::ofInts({3})}}, ErrorCode::IndexOutOfRange, {"axis 3", "rank 3"});
  expectError("unsqueeze", {tv(x)}, {{"axes", AttrValue::ofInts({1, -3})}}, ErrorCode::InvalidArgument, {"twice"});
}

// ---- split ----

TEST(ShapeSplit, SectionsAndSizesAreViews) {
  std::mt19937 rng(7);
  for (Layout layout : kLayouts) {
    Tensor x = randomTensor(DType::Float32, Shape{4, 6, 8}, rng, layout);
    for (int axis = -3; axis < 3; ++axis) {
      const int a = axis < 0 ? axis + 3 : axis;
      for (std::int64_t sections : {1, 2}) {
        auto parts = callOp("split", {tv(x)}, {{"axis", AttrValue::ofInt(axis)}, {"sections", AttrValue::ofInt(sections)}});
        ASSERT_TRUE(parts.hasValue()) << parts.status().toString();
        ASSERT_EQ(parts->size(), static_cast<std::size_t>(sections));
        const std::int64_t width = x.dim(a) / sections;
        for (std::size_t k = 0; k < parts->size(); ++k) {
          const Tensor& part = (*parts)[k].tensor();
          EXPECT_TRUE(part.sharesStorageWith(x));
          EXPECT_EQ(part.dim(a), width);
          for (std::int64_t i = 0; i < part.numel(); ++i) {
            Index index = unravel(i, part.shape());
            Index source = index;
            source[static_cast<std::size_t>(a)] += static_cast<std::int64_t>(k) * width;
            ASSERT_EQ(at(part, index), at(x, source));
          }
        }
      }
    }
    auto parts = callOp("split", {tv(x)}, {{"axis", AttrValue::ofInt(1)}, {"sizes", AttrValue::ofInts({1, 0, 5})}});
    ASSERT_TRUE(parts.hasValue()) << parts.status().toString();
    ASSERT_EQ(parts->size(), 3u);
    EXPECT_EQ((*parts)[1].tensor().shape(), (Shape{4, 0, 8}));
    const Tensor& last = (*parts)[2].tensor();
    EXPECT_EQ(last.shape(), (Shape{4, 5, 8}));
    EXPECT_EQ(at(last, {3, 4, 7}), at(x, {3, 5, 7}));
    EXPECT_EQ(at(last, {0, 0, 0}), at(x, {0, 1, 0}));
  }
}

TEST(ShapeSplit, Errors) {
  Tensor x = Tensor::zeros(DType::Float32, Shape{2, 6}).value();
  expectError("split", {tv(x)}, {{"axis", AttrValue::ofInt(1)}, {"sections", AttrValue::ofInt(4)}}, ErrorCode::ShapeMismatch,
              {"split", "extent 6", "4"});
  expectError("split", {tv(x)}, {{"axis", AttrValue::ofInt(1)}, {"sizes", AttrValue::ofInts({2, 3})}}, ErrorCode::ShapeMismatch,
              {"[2,3]", "5", "6"});
  expectError("split", {tv(x)}, {{"axis", AttrValue::ofInt(2)}, {"sections", AttrValue::ofInt(2)}}, ErrorCode::IndexOutOfRange,
              {"axis 2"});
  expectError("split", {tv(x)}, {{"axis", AttrValue::ofInt(1)}, {"sizes", AttrValue::ofInts({7, -1})}}, ErrorCode::InvalidArgument,
              {"-1"});
}

// ---- concat / stack ----

TEST(ShapeConcat, RandomInputsAllDTypes) {
  std::mt19937 rng(8);
  for (DType dtype : kAllDTypes) {
    for (int rank = 1; rank <= 3; ++rank) {
      const int axis = std::uniform_int_distribution<int>(0, rank - 1)(rng);
      Shape shape = randomShape(rng, rank);
      std::vector<Tensor> pieces;
      std::vector<Value> inputs;
      for (int k = 0; k < 3; ++k) {
        Shape piece_shape = shape;
        piece_shape[axis] = std::uniform_int_distribution<int>(0, 3)(rng);
        pieces.push_back(randomTensor(dtype, piece_shape, rng, kLayouts[k]));
        inputs.push_back(tv(pieces.back()));
      }
      Tensor y = run1("concat", inputs, {{"axis", AttrValue::ofInt(axis - rank)}});
      ASSERT_TRUE(y.defined());
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_TRUE(y.isContiguous());
      std::int64_t total = 0;
      for (const Tensor& p : pieces) total += p.dim(axis);
      ASSERT_EQ(y.dim(axis), total);
      for (std::int64_t i = 0; i < y.numel(); ++i) {
        Index index = unravel(i, y.shape());
        std::size_t k = 0;
        std::int64_t position = index[static_cast<std::size_t>(axis)];
        while (position >= pieces[k].dim(axis)) position -= pieces[k++].dim(axis);
        Index source = index;
        source[static_cast<std::size_t>(axis)] = position;
        ASSERT_EQ(at(y, index), at(pieces[k], source));
      }
    }
  }
}

TEST(ShapeConcat, Errors) {
  Tensor a = Tensor::zeros(DType::Float32, Shape{2, 3}).value();
  Tensor b = Tensor::zeros(DType::Float32, Shape{2, 3, 1}).value();
  Tensor c = Tensor::zeros(DType::Float64, Shape{2, 3}).value();
  Tensor d = Tensor::zeros(DType::Float32, Shape{4, 4}).value();
  expectError("concat", {tv(a), tv(b)}, {}, ErrorCode::ShapeMismatch, {"concat", "rank 3", "rank 2"});
  expectError("concat", {tv(a), tv(c)}, {}, ErrorCode::DTypeMismatch, {"float64", "float32"});
  expectError("concat", {tv(a), tv(d)}, {}, ErrorCode::ShapeMismatch, {"[4,4]", "[2,3]"});
  expectError("concat", {tv(a), tv(a)}, {{"axis", AttrValue::ofInt(2)}}, ErrorCode::IndexOutOfRange, {"axis 2"});
}

TEST(ShapeStack, RandomInputs) {
  std::mt19937 rng(9);
  for (DType dtype : {DType::Float32, DType::Int64, DType::Float16}) {
    Shape shape = randomShape(rng, 2);
    std::vector<Tensor> pieces;
    std::vector<Value> inputs;
    for (int k = 0; k < 3; ++k) {
      pieces.push_back(randomTensor(dtype, shape, rng, kLayouts[k]));
      inputs.push_back(tv(pieces.back()));
    }
    for (int axis = -3; axis <= 2; ++axis) {
      const int a = axis < 0 ? axis + 3 : axis;
      Tensor y = run1("stack", inputs, {{"axis", AttrValue::ofInt(axis)}});
      ASSERT_TRUE(y.defined());
      ASSERT_EQ(y.rank(), 3);
      EXPECT_EQ(y.dim(a), 3);
      for (std::int64_t i = 0; i < y.numel(); ++i) {
        Index index = unravel(i, y.shape());
        Index source = index;
        source.erase(source.begin() + a);
        ASSERT_EQ(at(y, index), at(pieces[static_cast<std::size_t>(index[static_cast<std::size_t>(a)])], source));
      }
    }
  }
  Tensor s = Tensor::scalar(1.0, DType::Float32);
  Tensor stacked = run1("stack", {tv(s), tv(s)});
  ASSERT_TRUE(stacked.defined());
  EXPECT_EQ(stacked.shape(), (Shape{2}));
}

TEST(ShapeStack, Errors) {
  Tensor a = Tensor::zeros(DType::Float32, Shape{2, 3}).value();
  Tensor b = Tensor::zeros(DType::Int32, Shape{2, 3}).value();
  Tensor c = Tensor::zeros(DType::Float32, Shape{3, 2}).value();
  expectError("stack", {tv(a), tv(b)}, {}, ErrorCode::DTypeMismatch, {"stack", "int32", "float32"});
  expectError("stack", {tv(a), tv(c)}, {}, ErrorCode::ShapeMismatch, {"[3,2]", "[2,3]"});
  expectError("stack", {tv(a), tv(a)}, {{"axis", AttrValue::ofInt(3)}}, ErrorCode::IndexOutOfRange, {"axis 3"});
}

// ---- slice ----

// Python's slice(start, stop, step).indices(extent), enumerated.
Index pythonSlice(std::int64_t extent, std::int64_t start, std::int64_t stop, std::int64_t step) {
  Index out;
  if (step > 0) {
    std::int64_t lo = start < 0 ? std::max<std::int64_t>(start + extent, 0) : std::min(start, extent);
    std::int64_t hi = stop < 0 ? std::max<std::int64_t>(stop + extent, 0) : std::min(stop, extent);
    for (std::int64_t i = lo; i < hi; i += step) out.push_back(i);
  } else {
    std::int64_t hi = start < 0 ? std::max<std::int64_t>(start + extent, -1) : std::min(start, extent - 1);
    std::int64_t lo = stop < 0 ? std::max<std::int64_t>(stop + extent, -1) : std::min(stop, extent - 1);
    for (std::int64_t i = hi; i > lo; i += step) out.push_back(i);
  }
  return out;
}

TEST(ShapeSlice, PythonReferenceCases) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(pythonSlice(5, kMax, kMin, -1), (Index{4, 3, 2, 1, 0}));
  EXPECT_EQ(pythonSlice(5, -2, kMax, 1), (Index{3, 4}));
  EXPECT_EQ(pythonSlice(5, 10, 0, -2), (Index{4, 2}));
  EXPECT_EQ(pythonSlice(5, 1, 100, 1), (Index{1, 2, 3, 4}));
  Tensor x = Tensor::empty(DType::Int64, Shape{5}).value();
  for (int i = 0; i < 5; ++i) x.data<std::int64_t>()[i] = i * 10;
  struct Case {
    std::int64_t start, stop, step;
    Index expected;
  };
  for (const Case& c : {Case{kMax, kMin, -1, {40, 30, 20, 10, 0}}, Case{-2, kMax, 1, {30, 40}}, Case{10, 0, -2, {40, 20}},
                        Case{1, 100, 1, {10, 20, 30, 40}}, Case{-100, 2, 1, {0, 10}}, Case{3, 3, 1, {}},
                        Case{0, 5, kMax, {0}}, Case{-1, -6, -kMax, {40}}}) {
    Tensor y = run1("slice", {tv(x), ints({c.start}), ints({c.stop}), ints({c.step})});
    ASSERT_TRUE(y.defined());
    ASSERT_EQ(y.numel(), static_cast<std::int64_t>(c.expected.size())) << c.start << ":" << c.stop << ":" << c.step;
    for (std::size_t i = 0; i < c.expected.size(); ++i) EXPECT_EQ(y.elementAsDouble(static_cast<std::int64_t>(i)), c.expected[i]);
    EXPECT_TRUE(y.sharesStorageWith(x));
  }
}

TEST(ShapeSlice, RandomSlicesAreViews) {
  std::mt19937 rng(10);
  std::uniform_int_distribution<int> bound(-8, 8);
  std::uniform_int_distribution<int> step_pick(-3, 3);
  for (int trial = 0; trial < 60; ++trial) {
    const int rank = 1 + trial % 3;
    Layout layout = kLayouts[trial % 3];
    DType dtype = kAllDTypes[trial % 7];
    Tensor x = randomTensor(dtype, randomShape(rng, rank, 6), rng, layout);
    // Slice a random subset of axes in random order.
    Index axes(static_cast<std::size_t>(rank));
    std::iota(axes.begin(), axes.end(), 0);
    std::shuffle(axes.begin(), axes.end(), rng);
    axes.resize(static_cast<std::size_t>(std::uniform_int_distribution<int>(1, rank)(rng)));
    Index starts, stops, steps;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      starts.push_back(bound(rng));
      stops.push_back(bound(rng));
      int step = step_pick(rng);
      steps.push_back(step == 0 ? 1 : step);
    }
    Index named_axes = axes;
    if (trial % 2) {
      for (std::int64_t& a : named_axes) a -= rank;  // negative axis names
    }
    Tensor y = run1("slice", {tv(x), ints(starts), ints(stops), ints(steps)}, {{"axes", AttrValue::ofInts(named_axes)}});
    ASSERT_TRUE(y.defined());
    EXPECT_TRUE(y.sharesStorageWith(x));
    std::vector<Index> picks(static_cast<std::size_t>(rank));
    for (int d = 0; d < rank; ++d) {
      for (std::int64_t i = 0; i < x.dim(d); ++i) picks[static_cast<std::size_t>(d)].push_back(i);
    }
    for (std::size_t i = 0; i < axes.size(); ++i) {
      picks[static_cast<std::size_t>(axes[i])] = pythonSlice(x.dim(static_cast<int>(axes[i])), starts[i], stops[i], steps[i]);
    }
    for (int d = 0; d < rank; ++d) ASSERT_EQ(y.dim(d), static_cast<std::int64_t>(picks[static_cast<std::size_t>(d)].size()));
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      Index index = unravel(i, y.shape());
      Index source(index.size());
      for (std::size_t d = 0; d < index.size(); ++d) source[d] = picks[d][static_cast<std::size_t>(index[d])];
      ASSERT_EQ(at(y, index), at(x, source));
    }
  }
}

TEST(ShapeSlice, DefaultsAndErrors) {
  std::mt19937 rng(11);
  Tensor x = randomTensor(DType::Float32, Shape{4, 5}, rng);
  Tensor y = run1("slice", {tv(x), ints({1, -1}), ints({3, 0}), Value()});  // steps None, axes default
  ASSERT_TRUE(y.defined());
  EXPECT_EQ(y.shape(), (Shape{2, 0}));
  Tensor z = run1("slice", {tv(x), Value::fromInt(-1), Value::fromInt(-5), Value::fromInt(-1)}, {{"axes", AttrValue::ofInts({1})}});
  ASSERT_TRUE(z.defined());
  EXPECT_EQ(z.shape(), (Shape{4, 4}));
  EXPECT_EQ(at(z, {2, 0}), at(x, {2, 4}));
  EXPECT_EQ(at(z, {3, 3}), at(x, {3, 1}));
  expectError("slice", {tv(x), ints({0}), ints({2}), ints({0})}, {}, ErrorCode::InvalidArgument, {"slice", "step is 0", "axis 0"});
  expectError("slice", {tv(x), ints({0}), ints({2, 3})}, {}, ErrorCode::InvalidArgument, {"same length"});
  expectError("slice", {tv(x), ints({0}), ints({2})}, {{"axes", AttrValue::ofInts({2})}}, ErrorCode::IndexOutOfRange, {"axis 2"});
  expectError("slice", {tv(x), ints({0, 0}), ints({2, 2})}, {{"axes", AttrValue::ofInts({1, -1})}}, ErrorCode::InvalidArgument,
              {"twice"});
}

// ---- gather ----

TEST(ShapeGather, RandomIndicesAlongEachAxis) {
  std::mt19937 rng(12);
  for (DType dtype : {DType::Float32, DType::Float16, DType::Int64, DType::Bool}) {
    for (Layout layout : kLayouts) {
      Tensor x = randomTensor(dtype, Shape{3, 4, 5}, rng, layout);
      for (int axis = 0; axis < 3; ++axis) {
        for (DType index_dtype : {DType::Int64, DType::Int32}) {
          const std::int64_t extent = x.dim(axis);
          Shape index_shape = randomShape(rng, 1 + axis % 2, 3);
          Tensor indices = Tensor::empty(index_dtype, index_shape).value();
          std::uniform_int_distribution<std::int64_t> pick(-extent, extent - 1);
          for (std::int64_t i = 0; i < indices.numel(); ++i) storeFromDouble(indices.rawData(), index_dtype, i, static_cast<double>(pick(rng)));
          Tensor y = run1("gather", {tv(x), tv(indices)}, {{"axis", AttrValue::ofInt(axis)}});
          ASSERT_TRUE(y.defined());
          ASSERT_EQ(y.rank(), 2 + index_shape.rank());
          for (std::int64_t i = 0; i < y.numel(); ++i) {
            Index index = unravel(i, y.shape());
            Index index_position(index.begin() + axis, index.begin() + axis + index_shape.rank());
            auto wrapped = static_cast<std::int64_t>(at(indices, index_position));
            if (wrapped < 0) wrapped += extent;
            Index source(index.begin(), index.begin() + axis);
            source.push_back(wrapped);
            source.insert(source.end(), index.begin() + axis + index_shape.rank(), index.end());
            ASSERT_EQ(at(y, index), at(x, source));
          }
        }
      }
    }
  }
}

TEST(ShapeGather, ScalarIndexDropsTheAxis) {
  std::mt19937 rng(13);
  Tensor x = randomTensor(DType::Float32, Shape{3, 4}, rng, Layout::Transposed);
  Tensor row = run1("gather", {tv(x), Value::fromInt(-1)});
  ASSERT_TRUE(row.defined());
  EXPECT_EQ(row.shape(), (Shape{4}));
  for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(at(row, {j}), at(x, {2, j}));
  Tensor column = run1("gather", {tv(x), Value::fromInt(1)}, {{"axis", AttrValue::ofInt(1)}});
  ASSERT_TRUE(column.defined());
  EXPECT_EQ(column.shape(), (Shape{3}));
  for (std::int64_t i = 0; i < 3; ++i) EXPECT_EQ(at(column, {i}), at(x, {i, 1}));
  Tensor zero_d = Tensor::scalar(2, DType::Int64);
  Tensor picked = run1("gather", {tv(x), tv(zero_d)});
  ASSERT_TRUE(picked.defined());
  EXPECT_EQ(picked.shape(), (Shape{4}));
  EXPECT_EQ(at(picked, {3}), at(x, {2, 3}));
}

TEST(ShapeGather, Errors) {
  Tensor x = Tensor::zeros(DType::Float32, Shape{3, 4}).value();
  Tensor indices = Tensor::empty(DType::Int64, Shape{2}).value();
  indices.data<std::int64_t>()[0] = 1;
  indices.data<std::int64_t>()[1] = 4;
  expectError("gather", {tv(x), tv(indices)}, {{"axis", AttrValue::ofInt(1)}}, ErrorCode::IndexOutOfRange,
              {"gather", "index 4", "axis 1", "extent 4"});
  expectError("gather", {tv(x), Value::fromInt(-4)}, {}, ErrorCode::IndexOutOfRange, {"index -4", "axis 0", "extent 3"});
  Tensor float_indices = Tensor::zeros(DType::Float32, Shape{2}).value();
  expectError("gather", {tv(x), tv(float_indices)}, {}, ErrorCode::DTypeMismatch, {"float32"});
  expectError("gather", {tv(x), Value::fromInt(0)}, {{"axis", AttrValue::ofInt(2)}}, ErrorCode::IndexOutOfRange, {"axis 2"});
}

// ---- broadcast_to ----

TEST(ShapeBroadcastTo, ZeroStrideViews) {
  std::mt19937 rng(14);
  for (Layout layout : kLayouts) {
    Tensor x = randomTensor(DType::Int32, Shape{3, 1}, rng, layout);
    Tensor y = run1("broadcast_to", {tv(x), ints({2, 3, 4})});
    ASSERT_TRUE(y.defined());
    EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
    EXPECT_TRUE(y.sharesStorageWith(x));
    EXPECT_EQ(y.stride(0), 0);
    EXPECT_EQ(y.stride(2), 0);
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      Index index = unravel(i, y.shape());
      ASSERT_EQ(at(y, index), at(x, {index[1], 0}));
    }
  }
  Tensor x = Tensor::zeros(DType::Float32, Shape{3}).value();
  Tensor empty = run1("broadcast_to", {tv(Tensor::zeros(DType::Float32, Shape{1}).value()), ints({0})});
  ASSERT_TRUE(empty.defined());
  EXPECT_EQ(empty.shape(), (Shape{0}));
  expectError("broadcast_to", {tv(x), ints({4})}, {}, ErrorCode::ShapeMismatch, {"broadcast_to", "[3]", "[4]"});
  expectError("broadcast_to", {tv(x), ints({2, 1})}, {}, ErrorCode::ShapeMismatch, {"[3]", "[2,1]"});
  expectError("broadcast_to", {tv(x), Value::fromTuple({})}, {}, ErrorCode::ShapeMismatch, {"lower rank"});
}

// ---- pad ----

TEST(ShapePad, RandomPadsIncludingCrops) {
  std::mt19937 rng(15);
  std::uniform_int_distribution<int> pad_pick(-2, 3);
  for (int trial = 0; trial < 30; ++trial) {
    const int rank = 1 + trial % 3;
    DType dtype = kAllDTypes[trial % 7];
    Tensor x = randomTensor(dtype, randomShape(rng, rank, 5), rng, kLayouts[trial % 3]);
    Index pads;
    for (int d = 0; d < rank; ++d) {
      for (int side = 0; side < 2; ++side) pads.push_back(std::max<std::int64_t>(pad_pick(rng), -x.dim(d) / 2));
    }
    const double value = dtype == DType::Bool ? 1.0 : isInteger(dtype) ? -7.0 : 0.5;
    Tensor y = run1("pad", {tv(x)}, {{"pads", AttrValue::ofInts(pads)}, {"value", AttrValue::ofFloat(value)}});
    ASSERT_TRUE(y.defined());
    EXPECT_FALSE(y.sharesStorageWith(x));
    for (int d = 0; d < rank; ++d) {
      ASSERT_EQ(y.dim(d), x.dim(d) + pads[2 * static_cast<std::size_t>(d)] + pads[2 * static_cast<std::size_t>(d) + 1]);
    }
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      Index index = unravel(i, y.shape());
      Index source(index.size());
      bool inside = true;
      for (std::size_t d = 0; d < index.size(); ++d) {
        source[d] = index[d] - pads[2 * d];
        inside = inside && source[d] >= 0 && source[d] < x.dim(static_cast<int>(d));
      }
      ASSERT_EQ(at(y, index), inside ? at(x, source) : value) << "trial " << trial << " element " << i;
    }
  }
}

TEST(ShapePad, Errors) {
  Tensor x = Tensor::zeros(DType::Float32, Shape{2, 3}).value();
  expectError("pad", {tv(x)}, {{"pads", AttrValue::ofInts({1, 1})}}, ErrorCode::InvalidArgument, {"pad", "[1,1]", "rank 2"});
  expectError("pad", {tv(x)}, {{"pads", AttrValue::ofInts({0, 0, -2, -2})}}, ErrorCode::InvalidArgument, {"axis 1", "extent 3"});
  Tensor whole_crop = run1("pad", {tv(x)}, {{"pads", AttrValue::ofInts({-1, -1, 0, 0})}});
  ASSERT_TRUE(whole_crop.defined());
  EXPECT_EQ(whole_crop.shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace shapevm
