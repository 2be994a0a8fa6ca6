// SPDX-License-Identifier: Apache-2.0
// Inputs and comparisons the Session tests share (session_test.cc, concurrency_test.cc): random
// f32 tensors, random arguments for a function's parameters, and the relative L2 distance.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "shapevm/shapevm.h"

namespace shapevm::testing_inputs {

inline Tensor randomTensor(const Shape& shape, std::mt19937_64& rng) {
  Tensor t = std::move(Tensor::empty(DType::Float32, shape).value());
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

inline double relL2(const Tensor& got, const Tensor& want) {
  double diff = 0, ref = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.elementAsDouble(i), g = got.elementAsDouble(i);
    diff += (g - w) * (g - w);
    ref += w * w;
  }
  return std::sqrt(diff / std::max(ref, 1e-300));
}

// Random arguments for a function whose tensor parameters are f32 and whose dynamic dims take `dim`
// (float parameters get 0.75).
inline std::vector<Value> randomArgs(const FunctionInfo& fn, std::int64_t dim, std::mt19937_64& rng) {
  std::vector<Value> args;
  for (const ParamInfo& p : fn.params) {
    if (p.kind == ValueKind::Float) {
      args.push_back(Value::fromFloat(0.75));
      continue;
    }
    Shape shape;
    for (const DimInfo& d : p.dims) shape.push_back(d.size >= 0 ? d.size : dim);
    args.push_back(Value::fromTensor(randomTensor(shape, rng)));
  }
  return args;
}

}  // namespace shapevm::testing_inputs
