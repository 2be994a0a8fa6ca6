// SPDX-License-Identifier: Apache-2.0
// Reference kernels of the creation family: zeros, ones, full, arange (numpy semantics) and
// randn. randn is reproducible everywhere: std::mt19937_64 (fully specified by the standard)
// feeds a Box-Muller transform written here, never std::normal_distribution (whose algorithm
// is implementation-defined). Integer values are stored exactly; float -> int truncates and saturates.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ops/kernel_util.h"
#include "ops/registry.h"

namespace shapevm {
namespace {

Expected<Shape> shapeArg(std::string_view op, const Value& v) {
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> dims, v.toInts(fmt::format("{}: shape", op)));
  SVM_ASSIGN_OR_RETURN(Shape shape, Shape::from(dims));
  for (std::int64_t d : dims) {
    if (d < 0)
      return makeError(ErrorCode::InvalidArgument, "{}: negative extent {} in shape {}", op, d, shape.toString());
  }
  return shape;
}

// A `num` input: an int (exact) or a float.
struct Number {
  bool is_int = true;
  std::int64_t i = 0;
  double f = 0.0;
  double asDouble() const { return is_int ? static_cast<double>(i) : f; }
};

Number numberArg(const Value& v) {
  Number n;
  if (v.isInt()) {
    n.i = v.asInt();
  } else if (v.isBool()) {
    n.i = v.asBool() ? 1 : 0;
  } else if (v.isFloat()) {
    n.is_int = false;
    n.f = v.asFloat();
  } else {
    const Tensor& t = v.tensor();  // checkInputs guarantees one element
    if (t.dtype() == DType::Int64) {
      n.i = *static_cast<const std::int64_t*>(t.rawData());
    } else if (isFloating(t.dtype())) {
      n.is_int = false;
      n.f = t.elementAsDouble(0);
    } else {
      n.i = static_cast<std::int64_t>(t.elementAsDouble(0));  // int32 and bool are exact in double
    }
  }
  return n;
}

std::int64_t saturateToInt64(double v) {
  if (v != v) return 0;
  constexpr double kLimit = 9223372036854775808.0;  // 2^63
  if (v <= -kLimit) return std::numeric_limits<std::int64_t>::min();
  if (v >= kLimit) return std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(v);
}

std::int32_t saturateToInt32(double v) {
  if (v != v) return 0;
  if (v <= -2147483648.0) return std::numeric_limits<std::int32_t>::min();
  if (v >= 2147483648.0) return std::numeric_limits<std::int32_t>::max();
  return static_cast<std::int32_t>(v);
}

// Stores element `index`: ints exactly (int32 wraps like a cast), floats through double.
void storeNumber(Tensor& t, std::int64_t index, const Number& n) {
  switch (t.dtype()) {
    case DType::Int64:
      t.data<std::int64_t>()[index] = n.is_int ? n.i : saturateToInt64(n.f);
      break;
    case DType::Int32:
      t.data<std::int32_t>()[index] = n.is_int ? static_cast<std::int32_t>(n.i) : saturateToInt32(n.f);
      break;
    case DType::Bool:
      t.data<bool>()[index] = n.is_int ? n.i != 0 : n.f != 0.0;
      break;
    default:
      storeFromDouble(t.rawData(), t.dtype(), index, n.asDouble());
      break;
  }
}

// Fills a contiguous tensor with one value: the first element is converted once, then copied.
void fillWith(Tensor& t, const Number& n) {
  const std::int64_t count = t.numel();
  if (count == 0) return;
  storeNumber(t, 0, n);
  const std::size_t item = t.itemSize();
  char* data = static_cast<char*>(t.rawData());
  switch (item) {
    case 1:
      std::fill(data, data + count, data[0]);
      break;
    case 2:
      std::fill(t.data<std::uint16_t>(), t.data<std::uint16_t>() + count, t.data<std::uint16_t>()[0]);
      break;
    case 4:
      std::fill(t.data<std::uint32_t>(), t.data<std::uint32_t>() + count, t.data<std::uint32_t>()[0]);
      break;
    default:
      std::fill(t.data<std::uint64_t>(), t.data<std::uint64_t>() + count, t.data<std::uint64_t>()[0]);
      break;
  }
}

Status zerosKernel(OpContext& ctx) {
  SVM_ASSIGN_OR_RETURN(Shape shape, shapeArg(ctx.schema->name, *ctx.inputs[0]));
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::zeros(ctx.attrs[0].dtype, shape));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

Status onesKernel(OpContext& ctx) {
  SVM_ASSIGN_OR_RETURN(Shape shape, shapeArg(ctx.schema->name, *ctx.inputs[0]));
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(ctx.attrs[0].dtype, shape));
  fillWith(out, Number{true, 1, 1.0});
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

Status fullKernel(OpContext& ctx) {
  SVM_ASSIGN_OR_RETURN(Shape shape, shapeArg(ctx.schema->name, *ctx.inputs[0]));
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(ctx.attrs[0].dtype, shape));
  fillWith(out, numberArg(*ctx.inputs[1]));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

bool present(const OpContext& ctx, std::size_t i) {
  return ctx.inputs.size() > i && ctx.inputs[i] != nullptr && !ctx.inputs[i]->isNone();
}

// arange(stop) / arange(start, stop[, step]). All-int inputs with an integer dtype are computed
// exactly in int64; otherwise element i is start + i * step in double, converted to dtype.
Status arangeKernel(OpContext& ctx) {
  const DType dtype = ctx.attrs[0].dtype;
  Number start{true, 0, 0.0}, stop{}, step{true, 1, 1.0};
  if (present(ctx, 1)) {
    start = numberArg(*ctx.inputs[0]);
    stop = numberArg(*ctx.inputs[1]);
  } else {
    stop = numberArg(*ctx.inputs[0]);  // arange(stop) and arange(stop, None, step)
  }
  if (present(ctx, 2)) step = numberArg(*ctx.inputs[2]);
  if (step.asDouble() == 0.0) return makeError(ErrorCode::InvalidArgument, "arange: step must not be zero");
  const bool exact = start.is_int && stop.is_int && step.is_int && !isFloating(dtype);
  std::int64_t count = 0;
  if (exact) {
    // |stop - start| as an unsigned 64-bit value cannot overflow.
    const bool up = step.i > 0;
    if (up ? start.i < stop.i : start.i > stop.i) {
      const std::uint64_t distance = up ? static_cast<std::uint64_t>(stop.i) - static_cast<std::uint64_t>(start.i)
                                        : static_cast<std::uint64_t>(start.i) - static_cast<std::uint64_t>(stop.i);
      const std::uint64_t magnitude =
          up ? static_cast<std::uint64_t>(step.i) : std::uint64_t{0} - static_cast<std::uint64_t>(step.i);
      const std::uint64_t length = (distance - 1) / magnitude + 1;
      if (length > (std::uint64_t{1} << 53)) {
        return makeError(ErrorCode::OutOfMemory, "arange: {} elements are too many", length);
      }
      count = static_cast<std::int64_t>(length);
    }
  } else {
    const double first = start.asDouble(), last = stop.asDouble(), delta = step.asDouble();
    if (!std::isfinite(first) || !std::isfinite(last) || !std::isfinite(delta)) {
      return makeError(ErrorCode::InvalidArgument, "arange: start {}, stop {} and step {} must be finite", first, last,
                       delta);
    }
    const double length = std::ceil((last - first) / delta);
    if (length > 9007199254740992.0)
      return makeError(ErrorCode::OutOfMemory, "arange: {} elements are too many", length);
    count = length > 0 ? static_cast<std::int64_t>(length) : 0;
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(dtype, Shape{count}));
  for (std::int64_t i = 0; i < count; ++i) {
    Number value;
    if (exact) {
      value.i = static_cast<std::int64_t>(static_cast<std::uint64_t>(start.i) +
                                          static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(step.i));
    } else {
      value.is_int = false;
      value.f = start.asDouble() + static_cast<double>(i) * step.asDouble();
    }
    storeNumber(out, i, value);
  }
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// Standard normal samples: each pair of 53-bit uniforms u1 in (0, 1], u2 in [0, 1) gives
// r cos(2 pi u2), r sin(2 pi u2) with r = sqrt(-2 ln u1), in that order, row-major.
Status randnKernel(OpContext& ctx) {
  SVM_ASSIGN_OR_RETURN(Shape shape, shapeArg(ctx.schema->name, *ctx.inputs[0]));
  const DType dtype = ctx.attrs[1].dtype;
  if (!isFloating(dtype)) {
    return makeError(ErrorCode::DTypeMismatch, "randn: dtype must be a float dtype, got {}", dtypeName(dtype));
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(dtype, shape));
  std::mt19937_64 generator(static_cast<std::uint64_t>(ctx.attrs[0].i));
  constexpr double kTwoPi = 6.283185307179586476925;
  constexpr double kUnit = 1.0 / 9007199254740992.0;  // 2^-53
  const std::int64_t count = out.numel();
  void* data = out.rawData();
  for (std::int64_t i = 0; i < count; i += 2) {
    const double u1 = static_cast<double>((generator() >> 11) + 1) * kUnit;
    const double u2 = static_cast<double>(generator() >> 11) * kUnit;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    storeFromDouble(data, dtype, i, radius * std::cos(kTwoPi * u2));
    if (i + 1 < count) storeFromDouble(data, dtype, i + 1, radius * std::sin(kTwoPi * u2));
  }
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

}  // namespace

void registerCreationKernels(OpRegistry& registry) {
  registry.registerKernel(OpId::Zeros, KernelPattern{}, &zerosKernel, "zeros.generic");
  registry.registerKernel(OpId::Ones, KernelPattern{}, &onesKernel, "ones.generic");
  registry.registerKernel(OpId::Full, KernelPattern{}, &fullKernel, "full.generic");
  registry.registerKernel(OpId::Arange, KernelPattern{}, &arangeKernel, "arange.generic");
  registry.registerKernel(OpId::Randn, KernelPattern{}, &randnKernel, "randn.generic");
}

}  // namespace shapevm
