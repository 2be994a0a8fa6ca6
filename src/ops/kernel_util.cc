// SPDX-License-Identifier: Apache-2.0
// Broadcasting, axis normalization and scalar promotion shared by the reference kernels.
#include "ops/kernel_util.h"

#include <algorithm>

namespace shapevm {

Expected<Shape> broadcastShapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  Shape out;
  out.resize(rank);
  for (int i = 0; i < rank; ++i) {
    std::int64_t da = i < rank - a.rank() ? 1 : a[i - (rank - a.rank())];
    std::int64_t db = i < rank - b.rank() ? 1 : b[i - (rank - b.rank())];
    if (da != db && da != 1 && db != 1) {
      return makeError(ErrorCode::ShapeMismatch, "shapes {} and {} cannot be broadcast together (axis {}: {} vs {})",
                       a.toString(), b.toString(), i, da, db);
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Expected<Shape> broadcastShapes(std::span<const Shape> shapes) {
  Shape out;
  for (const Shape& s : shapes) {
    auto next = broadcastShapes(out, s);
    if (!next) {
      std::string all;
      for (const Shape& t : shapes) all += (all.empty() ? "" : ", ") + t.toString();
      return makeError(ErrorCode::ShapeMismatch, "shapes {} cannot be broadcast together", all);
    }
    out = *next;
  }
  return out;
}

Shape broadcastStrides(const Tensor& t, const Shape& out) {
  Shape strides;
  strides.resize(out.rank());
  const int lead = out.rank() - t.rank();
  for (int i = 0; i < out.rank(); ++i) {
    if (i < lead) { strides[i] = 0; continue; }
    strides[i] = t.dim(i - lead) == 1 && out[i] != 1 ? 0 : t.stride(i - lead);
  }
  return strides;
}

Expected<int> normalizeAxis(std::string_view op, std::int64_t axis, int rank) {
  // A 0-d tensor accepts axis 0 and -1 (numpy-style reductions over "the" axis of a scalar).
  const bool in_range = rank == 0 ? (axis == 0 || axis == -1) : (axis >= -rank && axis < rank);
  if (!in_range) {
    return makeError(ErrorCode::IndexOutOfRange, "{}: axis {} is out of range for rank {}", op, axis, rank);
  }
  return rank == 0 ? 0 : static_cast<int>(axis < 0 ? axis + rank : axis);
}

Tensor tensorArg(const Value& v, const Tensor* like) {
  if (v.isTensor()) return v.tensor();
  DType dtype = v.isFloat() ? DType::Float32 : v.isInt() ? DType::Int64 : DType::Bool;
  if (like != nullptr) {
    const DType other = like->dtype();
    if (v.isFloat() && !isFloating(other)) dtype = DType::Float32;
    else if (v.isInt() && other == DType::Bool) dtype = DType::Int64;
    else dtype = other;
  }
  return Tensor::scalar(v.toDouble(), dtype);
}

DType promoteTypes(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType d) {
    switch (d) {
      case DType::Bool: return 0;
      case DType::Int32: return 1;
      case DType::Int64: return 2;
      case DType::BFloat16: return 3;
      case DType::Float16: return 3;
      case DType::Float32: return 4;
      case DType::Float64: return 5;
    }
    return 0;
  };
  if ((a == DType::Float16 && b == DType::BFloat16) || (a == DType::BFloat16 && b == DType::Float16)) return DType::Float32;
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace shapevm
