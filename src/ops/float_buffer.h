// SPDX-License-Identifier: Apache-2.0
// Float staging for the convolution-family reference kernels: a tensor of any strides read into a
// contiguous row-major buffer of the compute type (float for float32/float16/bfloat16, double for
// float64) and written back in the output's dtype. Invariant: 16-bit floats are widened on load and
// rounded once on store, so every kernel computes in float.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "ops/registry.h"
#include "shapevm/tensor.h"

namespace shapevm {

template <typename C>
Expected<std::vector<C>> loadValues(const Tensor& t) {
  SVM_ASSIGN_OR_RETURN(Tensor source, t.contiguous());
  const std::size_t n = static_cast<std::size_t>(source.numel());
  std::vector<C> values(n);
  switch (source.dtype()) {
    case DType::Float32: {
      const float* p = source.data<float>();
      for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<C>(p[i]);
      break;
    }
    case DType::Float64: {
      const double* p = source.data<double>();
      for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<C>(p[i]);
      break;
    }
    case DType::Float16: {
      const std::uint16_t* p = source.data<std::uint16_t>();
      for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<C>(halfToFloat(p[i]));
      break;
    }
    case DType::BFloat16: {
      const std::uint16_t* p = source.data<std::uint16_t>();
      for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<C>(bf16ToFloat(p[i]));
      break;
    }
    default:
      for (std::size_t i = 0; i < n; ++i)
        values[i] = static_cast<C>(source.elementAsDouble(static_cast<std::int64_t>(i)));
  }
  return values;
}

// Writes `values` (row-major, out.numel() of them) into the contiguous tensor `out`.
template <typename C>
void storeValues(const std::vector<C>& values, Tensor& out) {
  const std::size_t n = static_cast<std::size_t>(out.numel());
  switch (out.dtype()) {
    case DType::Float32: {
      float* p = out.data<float>();
      for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>(values[i]);
      return;
    }
    case DType::Float64: {
      double* p = out.data<double>();
      for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<double>(values[i]);
      return;
    }
    case DType::Float16: {
      std::uint16_t* p = out.data<std::uint16_t>();
      for (std::size_t i = 0; i < n; ++i) p[i] = floatToHalf(static_cast<float>(values[i]));
      return;
    }
    case DType::BFloat16: {
      std::uint16_t* p = out.data<std::uint16_t>();
      for (std::size_t i = 0; i < n; ++i) p[i] = floatToBf16(static_cast<float>(values[i]));
      return;
    }
    default:
      for (std::size_t i = 0; i < n; ++i)
        storeFromDouble(out.rawData(), out.dtype(), static_cast<std::int64_t>(i), static_cast<double>(values[i]));
  }
}

// Calls f.template operator()<C>() with C = double for float64 and float for the other floating
// dtypes; any other dtype is an error naming the op and the input.
template <typename F>
Status dispatchCompute(std::string_view op, const Tensor& x, F&& f) {
  switch (x.dtype()) {
    case DType::Float64: return f.template operator()<double>();
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16: return f.template operator()<float>();
    default: break;
  }
  return makeError(ErrorCode::DTypeMismatch, "{} needs a floating-point input, got {}", op, x.describe());
}

}  // namespace shapevm
