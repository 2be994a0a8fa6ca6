// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the reference kernels: numpy broadcasting, axis normalization, scalar
// promotion and a strided odometer. Kernels compute float16/bfloat16 in float32.
#pragma once

#include <cstdint>
#include <span>

#include "ops/registry.h"
#include "shapevm/tensor.h"
#include "shapevm/value.h"

namespace shapevm {

// numpy broadcasting of two / many shapes; the error names every shape.
Expected<Shape> broadcastShapes(const Shape& a, const Shape& b);
Expected<Shape> broadcastShapes(std::span<const Shape> shapes);
// Strides that read `t` as if it had shape `out` (right-aligned; 0 where broadcast).
Shape broadcastStrides(const Tensor& t, const Shape& out);
// axis in [-rank, rank) -> [0, rank); error names the op, axis and rank.
Expected<int> normalizeAxis(std::string_view op, std::int64_t axis, int rank);
// A tensor input, or a scalar input (int/float/bool) as a 0-d tensor. A scalar takes the
// dtype `like` when given (numpy's weak scalars: 2.0 * f16 stays f16), else its own
// (int -> int64, float -> float32, bool -> bool); a float scalar with an integer `like` gives float32.
Tensor tensorArg(const Value& v, const Tensor* like = nullptr);
// The result dtype of a binary elementwise op on two tensors (numpy-like promotion among ShapeVM dtypes).
DType promoteTypes(DType a, DType b);

// Iterates the row-major multi-index of `shape`, calling f(linear_index, const int64_t* index).
// Cheap enough for reference kernels; hot kernels walk pointers directly.
template <typename F>
void forEachIndex(const Shape& shape, F&& f) {
  const int rank = shape.rank();
  const std::int64_t total = shape.numel();
  std::int64_t index[kMaxRank] = {};
  for (std::int64_t linear = 0; linear < total; ++linear) {
    f(linear, static_cast<const std::int64_t*>(index));
    for (int axis = rank - 1; axis >= 0; --axis) {
      if (++index[axis] < shape[axis]) break;
      index[axis] = 0;
    }
  }
}

inline std::int64_t offsetOf(const std::int64_t* index, const Shape& strides, std::int64_t base) {
  for (int axis = 0; axis < strides.rank(); ++axis) base += index[axis] * strides[axis];
  return base;
}

}  // namespace shapevm
