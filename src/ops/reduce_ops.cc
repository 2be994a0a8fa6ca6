// SPDX-License-Identifier: Apache-2.0
// Reference kernels for reductions (sum, mean, max, min, argmax) and normalizations (softmax,
// log_softmax, layer_norm) over inputs of any strides. Accumulation is wider than storage:
// float32 and float64 in double, float16/bfloat16 in float32 (stored back in their dtype),
// integers and bool in int64; outputs are fresh contiguous tensors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ops/kernel_util.h"
#include "ops/registry.h"

namespace shapevm {
namespace {

// ---- element access per dtype ----

// Storage: the C++ type in memory. Compute: the type a loaded element has (float for the 16-bit
// floats, int64 for integers and bool). store() converts a result back to Storage.
template <DType D>
struct Element;
template <>
struct Element<DType::Float32> {
  using Storage = float;
  using Compute = float;
  static Compute load(Storage v) { return v; }
  template <typename A> static Storage store(A v) { return static_cast<float>(v); }
};
template <>
struct Element<DType::Float16> {
  using Storage = std::uint16_t;
  using Compute = float;
  static Compute load(Storage v) { return halfToFloat(v); }
  template <typename A> static Storage store(A v) { return floatToHalf(static_cast<float>(v)); }
};
template <>
struct Element<DType::BFloat16> {
  using Storage = std::uint16_t;
  using Compute = float;
  static Compute load(Storage v) { return bf16ToFloat(v); }
  template <typename A> static Storage store(A v) { return floatToBf16(static_cast<float>(v)); }
};
template <>
struct Element<DType::Float64> {
  using Storage = double;
  using Compute = double;
  static Compute load(Storage v) { return v; }
  template <typename A> static Storage store(A v) { return static_cast<double>(v); }
};
template <>
struct Element<DType::Int32> {
  using Storage = std::int32_t;
  using Compute = std::int64_t;
  static Compute load(Storage v) { return v; }
  template <typename A> static Storage store(A v) { return static_cast<std::int32_t>(v); }
};
template <>
struct Element<DType::Int64> {
  using Storage = std::int64_t;
  using Compute = std::int64_t;
  static Compute load(Storage v) { return v; }
  template <typename A> static Storage store(A v) { return static_cast<std::int64_t>(v); }
};
template <>
struct Element<DType::Bool> {
  using Storage = bool;
  using Compute = std::int64_t;
  static Compute load(Storage v) { return v ? 1 : 0; }
  template <typename A> static Storage store(A v) { return v != 0; }
};

constexpr bool isFloatType(DType d) {
  return d == DType::Float32 || d == DType::Float16 || d == DType::BFloat16 || d == DType::Float64;
}

// Calls f.template operator()<D>() for the runtime dtype.
template <typename F>
Status dispatchDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f.template operator()<DType::Float32>();
    case DType::Float16: return f.template operator()<DType::Float16>();
    case DType::BFloat16: return f.template operator()<DType::BFloat16>();
    case DType::Float64: return f.template operator()<DType::Float64>();
    case DType::Int32: return f.template operator()<DType::Int32>();
    case DType::Int64: return f.template operator()<DType::Int64>();
    case DType::Bool: return f.template operator()<DType::Bool>();
  }
  return makeError(ErrorCode::Internal, "unknown dtype {}", static_cast<int>(dtype));
}

template <typename F>
Status dispatchFloat(std::string_view op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f.template operator()<DType::Float32>();
    case DType::Float16: return f.template operator()<DType::Float16>();
    case DType::BFloat16: return f.template operator()<DType::BFloat16>();
    case DType::Float64: return f.template operator()<DType::Float64>();
    default: break;
  }
  return makeError(ErrorCode::DTypeMismatch, "{} needs a floating-point tensor, got {}", op, dtypeName(dtype));
}

template <typename T>
bool isNan(T v) {
  return v != v;  // NOLINT(misc-redundant-expression): true only for NaN
}

std::string formatInts(std::span<const std::int64_t> values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]);
  return text + "]";
}

bool isPresent(const OpContext& ctx, std::size_t index) {
  return index < ctx.inputs.size() && ctx.inputs[index] != nullptr && !ctx.inputs[index]->isNone();
}

// Calls f(in_offset, out_offset) for every position of `shape` with `axis` held at 0, in
// row-major order of the other axes; offsets use the given strides (in elements).
template <typename F>
void forEachRow(const Shape& shape, int axis, const Shape& in_strides, const Shape& out_strides, F&& f) {
  const int rank = shape.rank();
  std::int64_t rows = 1;
  for (int d = 0; d < rank; ++d) rows *= d == axis ? 1 : shape[d];
  std::int64_t index[kMaxRank] = {};
  std::int64_t in_offset = 0, out_offset = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    f(in_offset, out_offset);
    for (int d = rank - 1; d >= 0; --d) {
      if (d == axis) continue;
      if (++index[d] < shape[d]) {
        in_offset += in_strides[d];
        out_offset += out_strides[d];
        break;
      }
      in_offset -= (shape[d] - 1) * in_strides[d];
      out_offset -= (shape[d] - 1) * out_strides[d];
      index[d] = 0;
    }
  }
}

// ---- sum / mean / max / min ----

enum class ReduceKind { Sum, Mean, Max, Min };

std::string_view reduceName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::Sum: return "sum";
    case ReduceKind::Mean: return "mean";
    case ReduceKind::Max: return "max";
    case ReduceKind::Min: return "min";
  }
  return "?";
}

// One loop of the reduction walk: `extent` steps of `in_stride` through the input and
// `acc_stride` through the accumulators (0 on reduced axes).
struct WalkDim {
  std::int64_t extent;
  std::int64_t in_stride;
  std::int64_t acc_stride;
};

// Orders the loops so the smallest input stride is innermost, and fuses loops that step
// through both the input and the accumulators as one.
std::vector<WalkDim> planWalk(const Tensor& x, const Shape& acc_strides) {
  std::vector<WalkDim> dims;
  for (int d = 0; d < x.rank(); ++d) {
    if (x.dim(d) != 1) dims.push_back({x.dim(d), x.stride(d), acc_strides[d]});
  }
  std::stable_sort(dims.begin(), dims.end(), [](const WalkDim& a, const WalkDim& b) {
    return std::abs(a.in_stride) > std::abs(b.in_stride);
  });
  std::vector<WalkDim> fused;
  for (const WalkDim& dim : dims) {
    if (!fused.empty()) {
      WalkDim& outer = fused.back();
      if (outer.in_stride == dim.in_stride * dim.extent && outer.acc_stride == dim.acc_stride * dim.extent) {
        outer = {outer.extent * dim.extent, dim.in_stride, dim.acc_stride};
        continue;
      }
    }
    fused.push_back(dim);
  }
  return fused;
}

// acc[position] = combine(acc[position], element) for every element of x (x.numel() > 0).
// combine must be associative and commutative with `identity` as its neutral element.
template <DType D, typename Acc, typename Combine>
void walkReduce(const Tensor& x, const Shape& acc_strides, Acc* acc, Acc identity, Combine combine) {
  using E = Element<D>;
  const typename E::Storage* in = x.data<typename E::Storage>();
  const std::vector<WalkDim> dims = planWalk(x, acc_strides);
  if (dims.empty()) {
    acc[0] = combine(acc[0], static_cast<Acc>(E::load(in[0])));
    return;
  }
  const WalkDim inner = dims.back();
  const int outer_rank = static_cast<int>(dims.size()) - 1;
  std::int64_t rows = 1;
  for (int d = 0; d < outer_rank; ++d) rows *= dims[static_cast<std::size_t>(d)].extent;
  std::int64_t index[kMaxRank] = {};
  std::int64_t in_offset = 0, acc_offset = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    const typename E::Storage* in_row = in + in_offset;
    Acc* acc_row = acc + acc_offset;
    if (inner.acc_stride == 0 && inner.in_stride == 1) {
      // Contiguous run into one output: four independent chains, merged at the end.
      Acc lanes[4] = {*acc_row, identity, identity, identity};
      std::int64_t j = 0;
      for (; j + 4 <= inner.extent; j += 4) {
        for (int lane = 0; lane < 4; ++lane) lanes[lane] = combine(lanes[lane], static_cast<Acc>(E::load(in_row[j + lane])));
      }
      for (; j < inner.extent; ++j) lanes[0] = combine(lanes[0], static_cast<Acc>(E::load(in_row[j])));
      *acc_row = combine(combine(lanes[0], lanes[1]), combine(lanes[2], lanes[3]));
    } else if (inner.acc_stride == 0) {
      Acc local = *acc_row;
      for (std::int64_t j = 0; j < inner.extent; ++j) local = combine(local, static_cast<Acc>(E::load(in_row[j * inner.in_stride])));
      *acc_row = local;
    } else {
      for (std::int64_t j = 0; j < inner.extent; ++j) {
        Acc& slot = acc_row[j * inner.acc_stride];
        slot = combine(slot, static_cast<Acc>(E::load(in_row[j * inner.in_stride])));
      }
    }
    for (int d = outer_rank - 1; d >= 0; --d) {
      const WalkDim& dim = dims[static_cast<std::size_t>(d)];
      if (++index[d] < dim.extent) {
        in_offset += dim.in_stride;
        acc_offset += dim.acc_stride;
        break;
      }
      in_offset -= (dim.extent - 1) * dim.in_stride;
      acc_offset -= (dim.extent - 1) * dim.acc_stride;
      index[d] = 0;
    }
  }
}

// Which axes a reduction covers and the shapes it produces.
struct ReducePlan {
  bool reduced[kMaxRank] = {};
  Shape out_shape;        // with keepdims applied
  Shape acc_strides;      // per input axis: row-major stride of the kept axes, 0 on reduced ones
  std::int64_t count = 1;  // elements combined into each output
};

Expected<ReducePlan> planReduce(std::string_view op, const Tensor& x, const std::vector<std::int64_t>& axes,
                                bool keepdims) {
  ReducePlan plan;
  const int rank = x.rank();
  if (axes.empty()) {
    for (int d = 0; d < rank; ++d) plan.reduced[d] = true;
  }
  for (std::int64_t entry : axes) {
    SVM_ASSIGN_OR_RETURN(int axis, normalizeAxis(op, entry, rank));
    if (rank == 0) continue;  // axis 0 / -1 of a 0-d tensor: the single element
    if (plan.reduced[axis]) {
      return makeError(ErrorCode::InvalidArgument, "axes {} name axis {} twice", formatInts(axes), axis);
    }
    plan.reduced[axis] = true;
  }
  plan.acc_strides.resize(rank);
  std::int64_t step = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (plan.reduced[d]) {
      plan.count *= x.dim(d);
      plan.acc_strides[d] = 0;
    } else {
      plan.acc_strides[d] = step;
      step *= x.dim(d);
    }
  }
  for (int d = 0; d < rank; ++d) {
    if (!plan.reduced[d]) plan.out_shape.push_back(x.dim(d));
    else if (keepdims) plan.out_shape.push_back(1);
  }
  return plan;
}

template <typename Acc>
Acc addWrapping(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) {
    // Integer sums wrap like numpy's int64 instead of overflowing (undefined behaviour).
    return static_cast<Acc>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
  } else {
    return a + b;
  }
}

template <ReduceKind kKind>
Status reduceKernel(OpContext& ctx) {
  const Tensor x = tensorArg(*ctx.inputs[0]);
  const std::string_view op = reduceName(kKind);
  SVM_ASSIGN_OR_RETURN(ReducePlan plan, planReduce(op, x, ctx.attrs[0].ints, ctx.attrs[1].i != 0));
  const std::int64_t out_count = plan.out_shape.numel();
  if constexpr (kKind == ReduceKind::Max || kKind == ReduceKind::Min) {
    if (plan.count == 0 && out_count > 0) {
      return makeError(ErrorCode::InvalidArgument, "{} over an empty extent: axes {} of shape {} hold no elements", op,
                       formatInts(ctx.attrs[0].ints), x.shape().toString());
    }
  }
  const DType in_dtype = x.dtype();
  DType out_dtype = in_dtype;
  if (kKind == ReduceKind::Sum && !isFloating(in_dtype)) out_dtype = DType::Int64;
  if (kKind == ReduceKind::Mean && !isFloating(in_dtype)) out_dtype = DType::Float32;
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(out_dtype, plan.out_shape));
  Status status = dispatchDType(in_dtype, [&]<DType D>() -> Status {
    using E = Element<D>;
    using Compute = typename E::Compute;
    constexpr bool kAdds = kKind == ReduceKind::Sum || kKind == ReduceKind::Mean;
    // float32 sums in double; float16/bfloat16 in float32; float64 in double; ints in int64.
    using Acc = std::conditional_t<kAdds && D == DType::Float32, double, Compute>;
    Acc init{};
    if constexpr (kKind == ReduceKind::Max) {
      init = std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity()
                                                    : std::numeric_limits<Acc>::lowest();
    } else if constexpr (kKind == ReduceKind::Min) {
      init = std::numeric_limits<Acc>::has_infinity ? std::numeric_limits<Acc>::infinity()
                                                    : std::numeric_limits<Acc>::max();
    }
    std::vector<Acc> acc(static_cast<std::size_t>(out_count), init);
    if (x.numel() > 0) {
      if constexpr (kAdds) {
        walkReduce<D>(x, plan.acc_strides, acc.data(), init, [](Acc a, Acc v) { return addWrapping<Acc>(a, v); });
      } else if constexpr (kKind == ReduceKind::Max) {
        // NaN wins and then sticks (nothing compares greater than NaN).
        walkReduce<D>(x, plan.acc_strides, acc.data(), init, [](Acc a, Acc v) { return v > a || isNan(v) ? v : a; });
      } else {
        walkReduce<D>(x, plan.acc_strides, acc.data(), init, [](Acc a, Acc v) { return v < a || isNan(v) ? v : a; });
      }
    }
    const auto size = static_cast<std::size_t>(out_count);
    if constexpr (kKind == ReduceKind::Sum && !isFloatType(D)) {
      std::int64_t* dst = out.data<std::int64_t>();
      for (std::size_t i = 0; i < size; ++i) dst[i] = acc[i];
    } else if constexpr (kKind == ReduceKind::Mean && !isFloatType(D)) {
      float* dst = out.data<float>();
      for (std::size_t i = 0; i < size; ++i) {
        dst[i] = plan.count == 0 ? std::numeric_limits<float>::quiet_NaN()
                                 : static_cast<float>(static_cast<double>(acc[i]) / static_cast<double>(plan.count));
      }
    } else if constexpr (kKind == ReduceKind::Mean) {
      auto* dst = out.data<typename E::Storage>();
      for (std::size_t i = 0; i < size; ++i) {
        dst[i] = E::store(plan.count == 0 ? std::numeric_limits<Acc>::quiet_NaN() : acc[i] / static_cast<Acc>(plan.count));
      }
    } else {
      auto* dst = out.data<typename E::Storage>();
      for (std::size_t i = 0; i < size; ++i) dst[i] = E::store(acc[i]);
    }
    return Status::ok();
  });
  SVM_RETURN_IF_ERROR(status);
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- argmax ----

Status argmaxKernel(OpContext& ctx) {
  const Tensor x = tensorArg(*ctx.inputs[0]);
  const bool keepdims = ctx.attrs[1].i != 0;
  SVM_ASSIGN_OR_RETURN(int axis, normalizeAxis("argmax", ctx.attrs[0].i, x.rank()));
  if (x.rank() == 0) {
    ctx.outputs[0] = Value::fromTensor(Tensor::scalar(0, DType::Int64));
    return Status::ok();
  }
  const std::int64_t extent = x.dim(axis);
  Shape out_shape;
  for (int d = 0; d < x.rank(); ++d) {
    if (d != axis) out_shape.push_back(x.dim(d));
    else if (keepdims) out_shape.push_back(1);
  }
  if (extent == 0 && out_shape.numel() > 0) {
    return makeError(ErrorCode::InvalidArgument, "argmax over an empty extent: axis {} of shape {} has no elements",
                     axis, x.shape().toString());
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(DType::Int64, out_shape));
  if (out_shape.numel() == 0) {
    ctx.outputs[0] = Value::fromTensor(std::move(out));
    return Status::ok();
  }
  // Row-major output strides over the input's axes (the reduced axis is never stepped).
  Shape out_strides;
  out_strides.resize(x.rank());
  std::int64_t step = 1;
  for (int d = x.rank() - 1; d >= 0; --d) {
    out_strides[d] = d == axis ? 0 : step;
    step *= d == axis ? 1 : x.dim(d);
  }
  std::int64_t* dst = out.data<std::int64_t>();
  const std::int64_t stride = x.stride(axis);
  Status status = dispatchDType(x.dtype(), [&]<DType D>() -> Status {
    using E = Element<D>;
    const typename E::Storage* in = x.data<typename E::Storage>();
    forEachRow(x.shape(), axis, x.strides(), out_strides, [&](std::int64_t in_offset, std::int64_t out_offset) {
      const typename E::Storage* row = in + in_offset;
      typename E::Compute best = E::load(row[0]);
      std::int64_t best_index = 0;
      // The first NaN counts as the maximum (numpy).
      for (std::int64_t j = 1; j < extent && !isNan(best); ++j) {
        const typename E::Compute v = E::load(row[j * stride]);
        if (v > best || isNan(v)) {
          best = v;
          best_index = j;
        }
      }
      dst[out_offset] = best_index;
    });
    return Status::ok();
  });
  SVM_RETURN_IF_ERROR(status);
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- softmax / log_softmax ----

template <bool kLog>
Status softmaxKernel(OpContext& ctx) {
  const Tensor x = tensorArg(*ctx.inputs[0]);
  const std::string_view op = kLog ? "log_softmax" : "softmax";
  SVM_ASSIGN_OR_RETURN(int axis, normalizeAxis(op, ctx.attrs[0].i, x.rank()));
  const DType dtype = x.dtype();
  if (!isFloating(dtype)) {
    return makeError(ErrorCode::DTypeMismatch, "{} needs a floating-point tensor, got {}", op, dtypeName(dtype));
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(dtype, x.shape()));
  if (out.numel() == 0) {
    ctx.outputs[0] = Value::fromTensor(std::move(out));
    return Status::ok();
  }
  const bool scalar = x.rank() == 0;
  const std::int64_t extent = scalar ? 1 : x.dim(axis);
  const std::int64_t in_stride = scalar ? 0 : x.stride(axis);
  const std::int64_t out_stride = scalar ? 0 : out.stride(axis);
  Status status = dispatchFloat(op, dtype, [&]<DType D>() -> Status {
    using E = Element<D>;
    using Compute = typename E::Compute;
    using Storage = typename E::Storage;
    const Storage* in = x.data<Storage>();
    Storage* dst = out.data<Storage>();
    std::vector<Compute> values(static_cast<std::size_t>(extent));
    Compute* buffer = values.data();
    forEachRow(x.shape(), scalar ? -1 : axis, x.strides(), out.strides(), [&](std::int64_t in_offset, std::int64_t out_offset) {
      const Storage* row = in + in_offset;
      Storage* out_row = dst + out_offset;
      Compute max_value = -std::numeric_limits<Compute>::infinity();
      if (in_stride == 1) {
        for (std::int64_t j = 0; j < extent; ++j) buffer[j] = E::load(row[j]);
      } else {
        for (std::int64_t j = 0; j < extent; ++j) buffer[j] = E::load(row[j * in_stride]);
      }
      for (std::int64_t j = 0; j < extent; ++j) {
        if (buffer[j] > max_value || isNan(buffer[j])) max_value = buffer[j];
      }
      double sum = 0.0;
      if constexpr (kLog) {
        for (std::int64_t j = 0; j < extent; ++j) sum += static_cast<double>(std::exp(buffer[j] - max_value));
        const double shift = static_cast<double>(max_value) + std::log(sum);
        for (std::int64_t j = 0; j < extent; ++j) out_row[j * out_stride] = E::store(static_cast<double>(buffer[j]) - shift);
      } else {
        for (std::int64_t j = 0; j < extent; ++j) {
          buffer[j] = std::exp(buffer[j] - max_value);
          sum += static_cast<double>(buffer[j]);
        }
        const double scale = 1.0 / sum;
        for (std::int64_t j = 0; j < extent; ++j) out_row[j * out_stride] = E::store(static_cast<double>(buffer[j]) * scale);
      }
    });
    return Status::ok();
  });
  SVM_RETURN_IF_ERROR(status);
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- layer_norm ----

// weight or bias as doubles over the normalized shape (numpy broadcasting onto it).
Expected<std::vector<double>> loadAffine(std::string_view what, const Value& value, const Shape& norm_shape) {
  const Tensor t = tensorArg(value);
  Expected<Shape> broadcast = broadcastShapes(t.shape(), norm_shape);
  if (!broadcast || *broadcast != norm_shape) {
    return makeError(ErrorCode::ShapeMismatch, "{} of shape {} does not broadcast to the normalized shape {}", what,
                     t.shape().toString(), norm_shape.toString());
  }
  std::vector<double> values(static_cast<std::size_t>(norm_shape.numel()));
  const Shape strides = broadcastStrides(t, norm_shape);
  const void* base = t.storage()->data();
  forEachIndex(norm_shape, [&](std::int64_t linear, const std::int64_t* index) {
    values[static_cast<std::size_t>(linear)] = loadAsDouble(base, t.dtype(), offsetOf(index, strides, t.offset()));
  });
  return values;
}

Status layerNormKernel(OpContext& ctx) {
  const Tensor x = tensorArg(*ctx.inputs[0]);
  if (!isFloating(x.dtype())) {
    return makeError(ErrorCode::DTypeMismatch, "layer_norm needs a floating-point tensor, got {}", dtypeName(x.dtype()));
  }
  SVM_ASSIGN_OR_RETURN(int axis, normalizeAxis("layer_norm", ctx.attrs[0].i, x.rank()));
  const double eps = ctx.attrs[1].f;
  if (!(eps >= 0.0)) return makeError(ErrorCode::InvalidArgument, "eps {} must be >= 0", eps);
  Shape norm_shape;
  for (int d = axis; d < x.rank(); ++d) norm_shape.push_back(x.dim(d));
  std::vector<double> weight, bias;
  if (isPresent(ctx, 1)) {
    SVM_ASSIGN_OR_RETURN(weight, loadAffine("weight", *ctx.inputs[1], norm_shape));
  }
  if (isPresent(ctx, 2)) {
    SVM_ASSIGN_OR_RETURN(bias, loadAffine("bias", *ctx.inputs[2], norm_shape));
  }
  const std::int64_t width = norm_shape.numel();
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(x.dtype(), x.shape()));
  if (out.numel() == 0) {
    ctx.outputs[0] = Value::fromTensor(std::move(out));
    return Status::ok();
  }
  SVM_ASSIGN_OR_RETURN(Tensor source, x.contiguous());
  const std::int64_t rows = x.numel() / width;
  Status status = dispatchFloat("layer_norm", x.dtype(), [&]<DType D>() -> Status {
    using E = Element<D>;
    using Storage = typename E::Storage;
    const Storage* in = source.data<Storage>();
    Storage* dst = out.data<Storage>();
    const double* w = weight.empty() ? nullptr : weight.data();
    const double* b = bias.empty() ? nullptr : bias.data();
    const double inverse_width = 1.0 / static_cast<double>(width);
    for (std::int64_t r = 0; r < rows; ++r) {
      const Storage* row = in + r * width;
      Storage* out_row = dst + r * width;
      double sum = 0.0;
      for (std::int64_t j = 0; j < width; ++j) sum += static_cast<double>(E::load(row[j]));
      const double mean = sum * inverse_width;
      double squares = 0.0;
      for (std::int64_t j = 0; j < width; ++j) {
        const double centered = static_cast<double>(E::load(row[j])) - mean;
        squares += centered * centered;
      }
      const double inverse_std = 1.0 / std::sqrt(squares * inverse_width + eps);
      for (std::int64_t j = 0; j < width; ++j) {
        double y = (static_cast<double>(E::load(row[j])) - mean) * inverse_std;
        if (w) y *= w[j];
        if (b) y += b[j];
        out_row[j] = E::store(y);
      }
    }
    return Status::ok();
  });
  SVM_RETURN_IF_ERROR(status);
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

}  // namespace

void registerReduceKernels(OpRegistry& registry) {
  registry.registerKernel(OpId::Sum, KernelPattern{}, reduceKernel<ReduceKind::Sum>, "sum.generic");
  registry.registerKernel(OpId::Mean, KernelPattern{}, reduceKernel<ReduceKind::Mean>, "mean.generic");
  registry.registerKernel(OpId::Max, KernelPattern{}, reduceKernel<ReduceKind::Max>, "max.generic");
  registry.registerKernel(OpId::Min, KernelPattern{}, reduceKernel<ReduceKind::Min>, "min.generic");
  registry.registerKernel(OpId::ArgMax, KernelPattern{}, argmaxKernel, "argmax.generic");
  registry.registerKernel(OpId::Softmax, KernelPattern{}, softmaxKernel<false>, "softmax.generic");
  registry.registerKernel(OpId::LogSoftmax, KernelPattern{}, softmaxKernel<true>, "log_softmax.generic");
  registry.registerKernel(OpId::LayerNorm, KernelPattern{}, layerNormKernel, "layer_norm.generic");
}

}  // namespace shapevm
