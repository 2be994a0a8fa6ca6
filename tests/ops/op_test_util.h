// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the op tests: random tensors in contiguous, transposed and strided layouts,
// element access by multi-index (the tests' own reference loops read through these, never
// through kernel code), and callOp wrappers that expect success or a specific error.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/registry.h"
#include "shapevm/tensor.h"
#include "shapevm/value.h"

namespace shapevm::testing {

using Index = std::vector<std::int64_t>;
using Attrs = std::vector<std::pair<std::string, AttrValue>>;

enum class Layout { Contiguous, Transposed, Strided };
inline constexpr Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided};

// Bools 0/1, integers in [-100, 100], floats uniform in [-spread, spread].
inline double randomValue(DType dtype, std::mt19937& rng, double spread = 4.0) {
  if (dtype == DType::Bool) return std::uniform_int_distribution<int>(0, 1)(rng);
  if (isInteger(dtype)) return std::uniform_int_distribution<int>(-100, 100)(rng);
  return std::uniform_real_distribution<double>(-spread, spread)(rng);
}

// A tensor of `shape` filled with random values, laid out contiguously, as a transposed view
// (axes stored in reverse order) or as a strided view (every other element, nonzero offset).
inline Tensor randomTensor(DType dtype, const Shape& shape, std::mt19937& rng, Layout layout = Layout::Contiguous,
                           double spread = 4.0) {
  const int rank = shape.rank();
  if (rank == 0) layout = Layout::Contiguous;
  Shape base_shape = shape;
  if (layout == Layout::Transposed) {
    for (int d = 0; d < rank; ++d) base_shape[d] = shape[rank - 1 - d];
  } else if (layout == Layout::Strided) {
    base_shape[0] += 1;
    base_shape[rank - 1] = 2 * shape[rank - 1] + 1;
  }
  Tensor base = Tensor::empty(dtype, base_shape).value();
  for (std::int64_t i = 0; i < base.numel(); ++i) storeFromDouble(base.rawData(), dtype, i, randomValue(dtype, rng, spread));
  if (layout == Layout::Contiguous) return base;
  Shape strides;
  strides.resize(rank);
  std::int64_t offset = 0;
  if (layout == Layout::Transposed) {
    for (int d = 0; d < rank; ++d) strides[d] = base.stride(rank - 1 - d);
  } else {
    strides = base.strides();
    strides[rank - 1] = 2;
    offset = base.stride(0) + 1;
  }
  return base.asStrided(shape, strides, offset).value();
}

inline Index unravel(std::int64_t linear, const Shape& shape) {
  Index index(static_cast<std::size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    index[static_cast<std::size_t>(d)] = linear % shape[d];
    linear /= shape[d];
  }
  return index;
}

inline std::int64_t positionOf(const Tensor& t, const Index& index) {
  std::int64_t position = t.offset();
  for (int d = 0; d < t.rank(); ++d) position += index[static_cast<std::size_t>(d)] * t.stride(d);
  return position;
}
inline double at(const Tensor& t, const Index& index) {
  return loadAsDouble(t.storage()->data(), t.dtype(), positionOf(t, index));
}
inline void setAt(const Tensor& t, const Index& index, double value) {
  storeFromDouble(t.storage()->data(), t.dtype(), positionOf(t, index), value);
}

// The single tensor output of a call that must succeed.
inline Tensor run1(std::string_view op, std::vector<Value> inputs, Attrs attrs = {}) {
  auto result = callOp(op, std::move(inputs), std::move(attrs));
  EXPECT_TRUE(result.hasValue()) << (result ? "" : result.status().toString());
  if (!result || result->empty() || !(*result)[0].isTensor()) return Tensor();
  return (*result)[0].tensor();
}

// A call that must fail with `code` and a message containing every fragment.
inline void expectError(std::string_view op, std::vector<Value> inputs, Attrs attrs, ErrorCode code,
                        const std::vector<std::string>& fragments) {
  auto result = callOp(op, std::move(inputs), std::move(attrs));
  ASSERT_FALSE(result.hasValue()) << op << " should have failed";
  const Status& status = result.status();
  EXPECT_EQ(status.code(), code) << status.toString();
  for (const std::string& fragment : fragments) {
    EXPECT_NE(status.message().find(fragment), std::string::npos) << "'" << fragment << "' missing from: " << status.message();
  }
}

inline Value tv(const Tensor& t) { return Value::fromTensor(t); }
inline Value ints(const Index& values) { return Value::fromInts(values); }

}  // namespace shapevm::testing
