// SPDX-License-Identifier: Apache-2.0
// matmul against a naive double-precision reference with numpy semantics written here: random
// inputs of every dtype, 1-D promotion, batch broadcasting, transposed / strided views, sizes that
// cross the kernel's cache blocks and register tiles, and the shape error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace shapevm {
namespace {

enum class Layout { Contiguous, Transposed, Strided };

Tensor randomTensor(DType dtype, const Shape& shape, std::mt19937& rng, Layout layout) {
  if (shape.rank() < 2 && layout == Layout::Transposed) layout = Layout::Strided;
  Shape base_shape = shape;
  if (layout == Layout::Transposed) std::swap(base_shape[shape.rank() - 1], base_shape[shape.rank() - 2]);
  if (layout == Layout::Strided) base_shape[shape.rank() - 1] = shape[shape.rank() - 1] * 3 + 2;
  Tensor base = Tensor::empty(dtype, base_shape).value();
  std::uniform_real_distribution<double> real(-2.0, 2.0);
  std::uniform_int_distribution<int> integer(-7, 7);
  for (std::int64_t i = 0; i < base.numel(); ++i) {
    double v = isFloating(dtype) ? real(rng) : integer(rng);
    if (dtype == DType::Bool) v = integer(rng) > 2 ? 1 : 0;
    storeFromDouble(base.rawData(), dtype, i, v);
  }
  if (layout == Layout::Contiguous) return base;
  Shape strides = base.strides();
  std::int64_t offset = 0;
  if (layout == Layout::Transposed) {
    std::swap(strides[shape.rank() - 1], strides[shape.rank() - 2]);
  } else {
    strides[shape.rank() - 1] = 3;
    offset = 2;
  }
  return base.asStrided(shape, strides, offset).value();
}

// numpy matmul in double: returns the output shape and values, plus sum |a||b| per element
// (the scale of the rounding error).
struct Reference {
  Shape shape;
  std::vector<double> values;
  std::vector<double> magnitudes;
};

Reference referenceMatmul(const Tensor& a, const Tensor& b) {
  const bool a_vector = a.rank() == 1, b_vector = b.rank() == 1;
  const std::int64_t m = a_vector ? 1 : a.dim(a.rank() - 2);
  const std::int64_t k = a.dim(a.rank() - 1);
  const std::int64_t n = b_vector ? 1 : b.dim(b.rank() - 1);
  const int a_batch = a_vector ? 0 : a.rank() - 2, b_batch = b_vector ? 0 : b.rank() - 2;
  const int batch_rank = std::max(a_batch, b_batch);
  Shape batch;
  for (int i = 0; i < batch_rank; ++i) {
    const int ia = i - (batch_rank - a_batch), ib = i - (batch_rank - b_batch);
    const std::int64_t da = ia >= 0 ? a.dim(ia) : 1, db = ib >= 0 ? b.dim(ib) : 1;
    batch.push_back(da == 1 ? db : da);
  }
  Reference ref;
  ref.shape = batch;
  if (!a_vector) ref.shape.push_back(m);
  if (!b_vector) ref.shape.push_back(n);
  std::vector<double> a_values(static_cast<std::size_t>(a.numel())), b_values(static_cast<std::size_t>(b.numel()));
  for (std::int64_t i = 0; i < a.numel(); ++i) a_values[static_cast<std::size_t>(i)] = a.elementAsDouble(i);
  for (std::int64_t i = 0; i < b.numel(); ++i) b_values[static_cast<std::size_t>(i)] = b.elementAsDouble(i);
  for (std::int64_t bi = 0; bi < batch.numel(); ++bi) {
    std::vector<std::int64_t> batch_index(static_cast<std::size_t>(batch_rank));
    for (std::int64_t rest = bi, d = batch_rank - 1; d >= 0; --d) {
      batch_index[static_cast<std::size_t>(d)] = rest % batch[static_cast<int>(d)];
      rest /= batch[static_cast<int>(d)];
    }
    // Row-major index of the selected matrix within each operand's batch dims.
    std::int64_t a_matrix = 0, b_matrix = 0;
    for (int d = 0; d < a_batch; ++d) {
      const std::int64_t v = batch_index[static_cast<std::size_t>(d + batch_rank - a_batch)];
      a_matrix = a_matrix * a.dim(d) + (a.dim(d) == 1 ? 0 : v);
    }
    for (int d = 0; d < b_batch; ++d) {
      const std::int64_t v = batch_index[static_cast<std::size_t>(d + batch_rank - b_batch)];
      b_matrix = b_matrix * b.dim(d) + (b.dim(d) == 1 ? 0 : v);
    }
    const double* a_base = a_values.data() + a_matrix * m * k;
    const double* b_base = b_values.data() + b_matrix * k * n;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0.0, magnitude = 0.0;
        for (std::int64_t p = 0; p < k; ++p) {
          const double product = a_base[i * k + p] * b_base[p * n + j];
          sum += product;
          magnitude += std::fabs(product);
        }
        ref.values.push_back(sum);
        ref.magnitudes.push_back(magnitude);
      }
    }
  }
  return ref;
}

DType promoted(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType d) {
    switch (d) {
      case DType::Bool:
        return 0;
      case DType::Int32:
        return 1;
      case DType::Int64:
        return 2;
      case DType::Float16:
      case DType::BFloat16:
        return 3;
      case DType::Float32:
        return 4;
      case DType::Float64:
        return 5;
    }
    return 0;
  };
  if (rank(a) == 3 && rank(b) == 3) return DType::Float32;
  return rank(a) >= rank(b) ? a : b;
}

void checkMatmul(const Tensor& a, const Tensor& b) {
  const std::string where = a.describe() + " @ " + b.describe();
  SCOPED_TRACE(where);
  auto result = callOp("matmul", {Value::fromTensor(a), Value::fromTensor(b)});
  ASSERT_TRUE(result.hasValue()) << result.status().toString();
  const Tensor& out = (*result)[0].tensor();
  const Reference ref = referenceMatmul(a, b);
  const DType dtype = promoted(a.dtype(), b.dtype());
  ASSERT_EQ(out.shape(), ref.shape);
  ASSERT_EQ(out.dtype(), dtype);
  const std::int64_t k = a.dim(a.rank() - 1);
  const double accumulate_eps = dtype == DType::Float64 ? 2.3e-16 : 1.2e-7;
  double output_eps = 0.0;
  if (dtype == DType::Float32) output_eps = 1.2e-7;
  if (dtype == DType::Float16) output_eps = 1e-3;
  if (dtype == DType::BFloat16) output_eps = 8e-3;
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    const double got = out.elementAsDouble(i);
    double want = ref.values[static_cast<std::size_t>(i)];
    if (dtype == DType::Bool) want = want != 0 ? 1 : 0;
    if (!isFloating(dtype)) {
      ASSERT_EQ(got, want) << "element " << i;
      continue;
    }
    const double tolerance = accumulate_eps * static_cast<double>(k + 1) * ref.magnitudes[static_cast<std::size_t>(i)] +
                             output_eps * std::fabs(want) + 1e-30;
    ASSERT_LE(std::fabs(got - want), tolerance) << "element " << i << ": got " << got << ", want " << want;
  }
}

struct ShapeCase {
  Shape a, b;
};

const ShapeCase kShapeCases[] = {
    {Shape{5, 7}, Shape{7, 3}},
    {Shape{1, 1}, Shape{1, 1}},
    {Shape{13, 29}, Shape{29, 37}},  // ragged against the 6 x 16 register tile
    {Shape{2, 3, 4, 5}, Shape{5, 6}},
    {Shape{3, 1, 4, 5}, Shape{2, 5, 6}},  // batch [3,1] x [2] -> [3,2]
    {Shape{7}, Shape{7}},
    {Shape{7}, Shape{2, 7, 3}},
    {Shape{2, 4, 7}, Shape{7}},
    {Shape{4, 0}, Shape{0, 3}},  // K = 0 -> zeros
    {Shape{0, 5}, Shape{5, 3}},
};

TEST(Matmul, EveryDTypeShapeAndLayout) {
  std::mt19937 rng(2024);
  const DType dtypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                          DType::Int32,   DType::Int64,   DType::Bool};
  const Layout layouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided};
  for (DType dtype : dtypes) {
    for (const ShapeCase& c : kShapeCases) {
      for (Layout la : layouts) {
        for (Layout lb : layouts) {
          checkMatmul(randomTensor(dtype, c.a, rng, la), randomTensor(dtype, c.b, rng, lb));
        }
      }
    }
  }
}

TEST(Matmul, CrossesCacheBlocks) {
  std::mt19937 rng(77);
  // K > 256, M > 96, N > 1024 exercise every blocking loop and the partial blocks.
  checkMatmul(randomTensor(DType::Float32, Shape{101, 300}, rng, Layout::Contiguous),
              randomTensor(DType::Float32, Shape{300, 1030}, rng, Layout::Transposed));
  checkMatmul(randomTensor(DType::Float64, Shape{2, 97, 260}, rng, Layout::Strided),
              randomTensor(DType::Float64, Shape{260, 40}, rng, Layout::Contiguous));
  checkMatmul(randomTensor(DType::Int64, Shape{20, 270}, rng, Layout::Transposed),
              randomTensor(DType::Int64, Shape{270, 19}, rng, Layout::Contiguous));
}

TEST(Matmul, MixedDTypesPromote) {
  std::mt19937 rng(5);
  checkMatmul(randomTensor(DType::Float16, Shape{4, 6}, rng, Layout::Contiguous),
              randomTensor(DType::Float32, Shape{6, 5}, rng, Layout::Transposed));
  checkMatmul(randomTensor(DType::Int32, Shape{3, 6}, rng, Layout::Strided),
              randomTensor(DType::Float64, Shape{6, 2}, rng, Layout::Contiguous));
  checkMatmul(randomTensor(DType::Int32, Shape{3, 6}, rng, Layout::Contiguous),
              randomTensor(DType::Int64, Shape{6, 2}, rng, Layout::Contiguous));
  checkMatmul(randomTensor(DType::Float16, Shape{3, 6}, rng, Layout::Contiguous),
              randomTensor(DType::BFloat16, Shape{6, 2}, rng, Layout::Contiguous));
}

TEST(Matmul, LayoutDoesNotChangeTheBits) {
  std::mt19937 rng(9);
  Tensor a = randomTensor(DType::Float32, Shape{33, 70}, rng, Layout::Transposed);
  Tensor b = randomTensor(DType::Float32, Shape{70, 45}, rng, Layout::Strided);
  auto viewed = callOp("matmul", {Value::fromTensor(a), Value::fromTensor(b)});
  auto copied = callOp("matmul", {Value::fromTensor(a.clone().value()), Value::fromTensor(b.clone().value())});
  ASSERT_TRUE(viewed.hasValue() && copied.hasValue());
  const Tensor& x = (*viewed)[0].tensor();
  const Tensor& y = (*copied)[0].tensor();
  for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(x.elementAsDouble(i), y.elementAsDouble(i)) << i;
}

Status matmulStatus(const Shape& a, const Shape& b) {
  auto result = callOp("matmul", {Value::fromTensor(Tensor::zeros(DType::Float32, a).value()),
                                  Value::fromTensor(Tensor::zeros(DType::Float32, b).value())});
  return result.hasValue() ? Status::ok() : std::move(result).status();
}

TEST(MatmulErrors, ShapeMismatchNamesShapesAndContractingDims) {
  Status status = matmulStatus(Shape{2, 3}, Shape{4, 5});
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.code(), ErrorCode::ShapeMismatch);
  EXPECT_NE(status.message().find("[2,3]"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("[4,5]"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("contracting"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("matmul"), std::string::npos) << status.message();
  Status vector_status = matmulStatus(Shape{3}, Shape{4});
  EXPECT_EQ(vector_status.code(), ErrorCode::ShapeMismatch);
  Status batch_status = matmulStatus(Shape{2, 3, 4}, Shape{3, 4, 5});
  EXPECT_EQ(batch_status.code(), ErrorCode::ShapeMismatch);
  EXPECT_NE(batch_status.message().find("batch"), std::string::npos) << batch_status.message();
  auto scalar =
      callOp("matmul", {Value::fromFloat(2.0), Value::fromTensor(Tensor::zeros(DType::Float32, Shape{2}).value())});
  ASSERT_FALSE(scalar.hasValue());
  EXPECT_EQ(scalar.status().code(), ErrorCode::ShapeMismatch);
}

}  // namespace
}  // namespace shapevm
