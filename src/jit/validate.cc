// SPDX-License-Identifier: Apache-2.0
// Kernel validation against the reference kernels (see validate.h).
#include "jit/validate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <fmt/format.h>

namespace shapevm::jit {

double toleranceFor(DType dtype) {
  switch (dtype) {
    case DType::Float32: return 1e-5;
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    case DType::Float64: return 1e-12;
    default: return 0.0;
  }
}

Comparison compareOutputs(std::span<const Value> expected, std::span<const Value> actual) {
  Comparison result;
  if (expected.size() != actual.size()) {
    result.ok = false;
    result.reason = fmt::format("{} outputs, expected {}", actual.size(), expected.size());
    return result;
  }
  for (std::size_t o = 0; o < expected.size(); ++o) {
    if (!expected[o].isTensor() || !actual[o].isTensor()) {
      result.ok = false;
      result.reason = fmt::format("output {}: {} where {} was expected", o, actual[o].describe(), expected[o].describe());
      return result;
    }
    const Tensor& want = expected[o].tensor();
    const Tensor& got = actual[o].tensor();
    if (want.dtype() != got.dtype() || want.shape() != got.shape()) {
      result.ok = false;
      result.reason = fmt::format("output {}: {} where {} was expected", o, got.describe(), want.describe());
      return result;
    }
    const std::int64_t n = want.numel();
    const double tolerance = toleranceFor(want.dtype());
    double diff2 = 0.0;
    double ref2 = 0.0;
    // Contiguous float32 (the common case) is read directly; everything else element by element.
    const bool direct = want.dtype() == DType::Float32 && want.isContiguous() && got.isContiguous();
    const float* want_f32 = direct ? want.data<float>() : nullptr;
    const float* got_f32 = direct ? got.data<float>() : nullptr;
    for (std::int64_t i = 0; i < n; ++i) {
      const double w = direct ? static_cast<double>(want_f32[i]) : want.elementAsDouble(i);
      const double g = direct ? static_cast<double>(got_f32[i]) : got.elementAsDouble(i);
      if (std::isnan(g)) {
        result.ok = false;
        result.reason = fmt::format("output {}: NaN at element {} (expected {})", o, i, w);
        return result;
      }
      if (std::isnan(w)) {
        result.ok = false;
        result.reason = fmt::format("output {}: the reference produced NaN at element {}; cannot validate", o, i);
        return result;
      }
      if (tolerance == 0.0 && w != g) {
        result.ok = false;
        result.reason = fmt::format("output {}: element {} is {}, expected {} (exact match required)", o, i, g, w);
        return result;
      }
      if (std::isinf(w) || std::isinf(g)) {
        if (w != g) {
          result.ok = false;
          result.reason = fmt::format("output {}: element {} is {}, expected {}", o, i, g, w);
          return result;
        }
        continue;
      }
      diff2 += (g - w) * (g - w);
      ref2 += w * w;
    }
    const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    result.rel_l2 = std::max(result.rel_l2, rel);
    if (!(rel <= tolerance)) {
      result.ok = false;
      result.reason = fmt::format("output {}: relative L2 error {:.3g} > {:.3g} ({})", o, rel, tolerance,
                                  dtypeName(want.dtype()));
      return result;
    }
  }
  return result;
}

namespace {
enum class Domain { Normal, Positive, Bool };

// The input's value domain from ops.def (`@pos`: log, sqrt, rsqrt, pow's base, div's divisor —
// no division by ~0; `@bool`: where's condition, logical ops). A variadic input's spec covers
// every input from it on.
Domain domainFor(OpId op, std::size_t input) {
  const OpSchema& schema = OpRegistry::global().schema(op);
  if (schema.inputs.empty()) return Domain::Normal;
  switch (schema.inputs[std::min(input, schema.inputs.size() - 1)].domain) {
    case InputDomain::Any: return Domain::Normal;
    case InputDomain::Positive: return Domain::Positive;
    case InputDomain::Bool: return Domain::Bool;
  }
  return Domain::Normal;
}
}  // namespace

bool needsPositiveInput(OpId op, std::size_t input) { return domainFor(op, input) == Domain::Positive; }

Expected<std::vector<Value>> randomInputs(const KernelSpec& spec, std::span<const Shape> shapes, std::uint64_t seed,
                                          std::span<const bool> positive) {
  std::mt19937_64 generator(seed * 0x9E3779B97F4A7C15ULL + 1);
  std::vector<Value> values;
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    const OperandSpec& in = spec.inputs[i];
    if (!in.is_tensor) {
      // A scalar of the compiled kind: the observed example, or a fresh value of its domain.
      const bool use_example = generator() % 2 == 0 && in.scalar_example != 0.0;
      switch (in.scalar_kind) {
        case ValueKind::Int:
          values.push_back(Value::fromInt(use_example ? static_cast<std::int64_t>(in.scalar_example)
                                                      : static_cast<std::int64_t>(1 + generator() % 9)));
          break;
        case ValueKind::Float: {
          std::uniform_real_distribution<double> positive(0.1, 3.0);
          values.push_back(Value::fromFloat(use_example ? in.scalar_example : positive(generator)));
          break;
        }
        case ValueKind::Bool: values.push_back(Value::fromBool(generator() % 2 == 0)); break;
        case ValueKind::None: values.push_back(Value()); break;
        default: return makeError(ErrorCode::Unsupported, "cannot draw a random {} input", valueKindName(in.scalar_kind));
      }
      continue;
    }
    if (i >= shapes.size()) return makeError(ErrorCode::Internal, "no shape for input {}", i);
    SVM_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(in.dtype, shapes[i]));
    const Domain domain = in.dtype == DType::Bool                 ? Domain::Bool
                          : i < positive.size() && positive[i] ? Domain::Positive
                                                               : domainFor(spec.op, i);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> positive(0.1, 3.0);
    std::uniform_int_distribution<int> small_int(-9, 9);
    const std::int64_t n = t.numel();
    bool any_nonzero = false;
    for (std::int64_t k = 0; k < n; ++k) {
      double v;
      if (domain == Domain::Bool || in.dtype == DType::Bool) {
        v = static_cast<double>(generator() & 1);
      } else if (isInteger(in.dtype)) {
        v = domain == Domain::Positive ? static_cast<double>(1 + (generator() % 9)) : small_int(generator);
      } else {
        v = domain == Domain::Positive ? positive(generator) : normal(generator);
      }
      if (k == n - 1 && !any_nonzero) v = 1.0;  // never all zeros
      any_nonzero = any_nonzero || v != 0.0;
      storeFromDouble(t.rawData(), in.dtype, k, v);
    }
    values.push_back(Value::fromTensor(std::move(t)));
  }
  return values;
}

std::vector<std::vector<Shape>> validationShapes(const KernelSpec& spec, std::span<const Shape> observed) {
  std::vector<std::vector<Shape>> sets;
  sets.emplace_back(observed.begin(), observed.end());
  for (std::size_t i = 0; i < spec.inputs.size() && i < observed.size(); ++i) {
    const OperandSpec& in = spec.inputs[i];
    for (int d = 0; d < in.rank && d < observed[i].rank(); ++d) {
      const DimSpec& dim = in.dims[d];
      if (dim.isStatic() || dim.hi == INT64_MAX) continue;
      const std::int64_t from = observed[i][d];
      std::int64_t ends[2] = {dim.lo, dim.hi};
      if (dim.divisor > 1) {
        ends[0] = (dim.lo + dim.divisor - 1) / dim.divisor * dim.divisor;
        ends[1] = dim.hi / dim.divisor * dim.divisor;
      }
      for (std::int64_t to : ends) {
        if (to == from || to < 0) continue;
        std::vector<Shape> moved(observed.begin(), observed.end());
        for (std::size_t j = 0; j < spec.inputs.size() && j < moved.size(); ++j) {
          const OperandSpec& other = spec.inputs[j];
          for (int e = 0; e < other.rank && e < moved[j].rank(); ++e) {
            if (!other.dims[e].isStatic() && moved[j][e] == from) moved[j][e] = to;
          }
        }
        bool duplicate = false;
        for (const auto& existing : sets) duplicate = duplicate || existing == moved;
        if (!duplicate) sets.push_back(std::move(moved));
      }
    }
  }
  return sets;
}

namespace {
// A NaN-filled (or, for integer/bool outputs, 0x5A-byte-filled) buffer of the given shape, so
// the kernel writes into it and an element it skips shows.
Expected<Tensor> poisoned(DType dtype, const Shape& shape) {
  SVM_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(dtype, shape));
  const std::int64_t n = t.numel();
  if (dtype == DType::Float32) {
    std::fill_n(t.data<float>(), n, std::numeric_limits<float>::quiet_NaN());
  } else if (isFloating(dtype)) {
    for (std::int64_t k = 0; k < n; ++k) storeFromDouble(t.rawData(), dtype, k, std::numeric_limits<double>::quiet_NaN());
  } else {
    std::memset(t.rawData(), 0x5A, static_cast<std::size_t>(n) * t.itemSize());
    if (dtype == DType::Bool) std::memset(t.rawData(), 2, static_cast<std::size_t>(n));  // neither false nor true
  }
  return t;
}
}  // namespace

Status validateKernel(const CompiledKernel& kernel, std::span<const std::vector<Shape>> shape_sets, std::uint64_t seed) {
  // The packings of validation inputs are of no use afterwards (and hold the inputs alive).
  struct DropPackings {
    const CompiledKernel& kernel;
    ~DropPackings() { kernel.packed.clear(); }
  } drop{kernel};
  std::uint64_t round = 0;
  int compared = 0;
  for (const std::vector<Shape>& shapes : shape_sets) {
    SVM_ASSIGN_OR_RETURN(std::vector<Value> inputs, randomInputs(kernel.spec, shapes, seed + round++));
    std::vector<const Value*> pointers;
    for (const Value& v : inputs) pointers.push_back(v.isNone() ? nullptr : &v);  // None = an omitted input
    std::string described = describeInputs(pointers);
    // Reference first: an input combination the op itself rejects is not a validation case.
    std::vector<Value> expected(static_cast<std::size_t>(kernel.num_outputs));
    if (!kernel.family->reference(kernel.spec, pointers, expected).isOk()) continue;
    ++compared;
    // Poisoned output buffers of the reference's shapes, handed to the kernel for in-place use.
    std::vector<Value> actual(static_cast<std::size_t>(kernel.num_outputs));
    for (std::size_t o = 0; o < actual.size(); ++o) {
      SVM_ASSIGN_OR_RETURN(Tensor buffer, poisoned(expected[o].tensor().dtype(), expected[o].tensor().shape()));
      actual[o] = Value::fromTensor(std::move(buffer));
    }
    // A call that packed an operand for the kernel's cache runs again: the second one reads the
    // cached packing, and both must match.
    const std::uint64_t packs = kernel.packed.stats().packs;
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) {
        if (kernel.packed.stats().packs == packs) break;
        for (std::size_t o = 0; o < actual.size(); ++o) {
          SVM_ASSIGN_OR_RETURN(Tensor buffer, poisoned(expected[o].tensor().dtype(), expected[o].tensor().shape()));
          actual[o] = Value::fromTensor(std::move(buffer));
        }
      }
      Status run = invokeCompiled(kernel, pointers, actual);
      if (!run.isOk()) return run.withContext(fmt::format("validation run on {}", described));
      Comparison comparison = compareOutputs(expected, actual);
      if (!comparison.ok) {
        return makeError(ErrorCode::JitError, "kernel {} disagrees with the reference on {}{}: {}", kernel.handle.symbol,
                         described, pass == 1 ? " (packed operand cached)" : "", comparison.reason);
      }
    }
  }
  if (compared == 0) {
    return makeError(ErrorCode::JitError, "no validation case for kernel {} could run (the reference rejected every input set)",
                     kernel.handle.symbol);
  }
  return Status::ok();
}

}  // namespace shapevm::jit
