// SPDX-License-Identifier: Apache-2.0
// Reference kernels for the per-channel normalizations and resampling ops of vision models on
// NC[D]HW tensors: batch_norm (inference statistics), instance_norm, group_norm, resize (nearest
// with its rounding modes, linear, cubic; separable, one axis at a time) and the pixel shuffles
// depth_to_space / space_to_depth. Normalizations and resize compute in float (double for
// float64); the shuffles copy elements of any dtype. Outputs are fresh contiguous tensors.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/conv_geometry.h"
#include "ops/float_buffer.h"
#include "ops/kernel_util.h"
#include "ops/registry.h"

namespace shapevm {
namespace {

bool isPresent(const OpContext& ctx, std::size_t index) {
  return index < ctx.inputs.size() && ctx.inputs[index] != nullptr && !ctx.inputs[index]->isNone();
}

// A per-channel parameter: a 1-D tensor of `channels` values.
template <typename C>
Expected<std::vector<C>> channelParam(std::string_view op, std::string_view what, const Value& value,
                                      std::int64_t channels, const Tensor& x) {
  const Tensor t = tensorArg(value);
  if (t.rank() != 1 || t.dim(0) != channels) {
    return makeError(ErrorCode::ShapeMismatch, "{}: {} {} must be 1-D with the {} channels of input {}", op, what,
                     t.describe(), channels, x.describe());
  }
  return loadValues<C>(t);
}

Status needChannels(std::string_view op, const Tensor& x, int min_rank) {
  if (x.rank() < min_rank) {
    return makeError(ErrorCode::ShapeMismatch, "{}: input {} must have rank >= {} (N, C, ...)", op, x.describe(),
                     min_rank);
  }
  return Status::ok();
}

// ---- batch_norm / instance_norm / group_norm ----

Status batchNormKernel(OpContext& ctx) {
  const Tensor x = tensorArg(*ctx.inputs[0]);
  SVM_RETURN_IF_ERROR(needChannels("batch_norm", x, 2));
  const double eps = ctx.attrs[0].f;
  SVM_ASSIGN_OR_RETURN(Tensor out, outputBuffer(ctx, 0, x.dtype(), x.shape()));
  Status status = dispatchCompute("batch_norm", x, [&]<typename C>() -> Status {
    const std::int64_t channels = x.dim(1);
    SVM_ASSIGN_OR_RETURN(std::vector<C> scale, channelParam<C>("batch_norm", "scale", *ctx.inputs[1], channels, x));
    SVM_ASSIGN_OR_RETURN(std::vector<C> bias, channelParam<C>("batch_norm", "bias", *ctx.inputs[2], channels, x));
    SVM_ASSIGN_OR_RETURN(std::vector<C> mean, channelParam<C>("batch_norm", "mean", *ctx.inputs[3], channels, x));
    SVM_ASSIGN_OR_RETURN(std::vector<C> var, channelParam<C>("batch_norm", "var", *ctx.inputs[4], channels, x));
    SVM_ASSIGN_OR_RETURN(std::vector<C> values, loadValues<C>(x));
    const std::int64_t plane = channels == 0 ? 0 : x.numel() / std::max<std::int64_t>(1, x.dim(0) * channels);
    for (std::int64_t n = 0; n < x.dim(0); ++n) {
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::size_t k = static_cast<std::size_t>(c);
        const C mul = static_cast<C>(static_cast<double>(scale[k]) / std::sqrt(static_cast<double>(var[k]) + eps));
        const C add = bias[k] - mean[k] * mul;
        C* p = values.data() + (n * channels + c) * plane;
        for (std::int64_t i = 0; i < plane; ++i) p[i] = p[i] * mul + add;
      }
    }
    storeValues(values, out);
    return Status::ok();
  });
  SVM_RETURN_IF_ERROR(status);
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// Normalizes `groups` groups per sample (each a run of channels / groups channels) over their
// elements, then applies the per-channel scale and bias (either may be empty).
template <typename C>
void normalizeGroups(std::vector<C>& values, std::int64_t batch, std::int64_t channels, std::int64_t plane,
                     std::int64_t groups, double eps, const std::vector<C>& scale, const std::vector<C>& bias) {
  const std::int64_t per_group = channels / groups;
  const std::int64_t width = per_group * plane;
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t g = 0; g < groups; ++g) {
      C* p = values.data() + (n * channels + g * per_group) * plane;
      double sum = 0.0;
      for (std::int64_t i = 0; i < width; ++i) sum += static_cast<double>(p[i]);
      const double mean = width > 0 ? sum / static_cast<double>(width) : 0.0;
      double squares = 0.0;
      for (std::int64_t i = 0; i < width; ++i) {
        const double centered = static_cast<double>(p[i]) - mean;
        squares += centered * centered;
      }
      const double inverse_std = 1.0 / std::sqrt((width > 0 ? squares / static_cast<double>(width) : 0.0) + eps);
      for (std::int64_t c = 0; c < per_group; ++c) {
        const std::size_t k = static_cast<std::size_t>(g * per_group + c);
        const double mul = inverse_std * (scale.empty() ? 1.0 : static_cast<double>(scale[k]));
        const double add = bias.empty() ? 0.0 : static_cast<double>(bias[k]);
        C* q = p + c * plane;
        for (std::int64_t i = 0; i < plane; ++i) q[i] = static_cast<C>((static_cast<double>(q[i]) - mean) * mul + add);
      }
    }
  }
}

// instance_norm: inputs x scale bias, attrs eps; group_norm: inputs x scale? bias?, attrs groups eps.
template <bool kGroup>
Status groupNormKernel(OpContext& ctx) {
  constexpr std::string_view op = kGroup ? "group_norm" : "instance_norm";
  const Tensor x = tensorArg(*ctx.inputs[0]);
  SVM_RETURN_IF_ERROR(needChannels(op, x, kGroup ? 2 : 3));
  const std::int64_t channels = x.dim(1);
  const std::int64_t groups = kGroup ? ctx.attrs[0].i : channels;
  const double eps = ctx.attrs[kGroup ? 1 : 0].f;
  if (groups < 1 || channels % groups != 0) {
    return makeError(ErrorCode::ShapeMismatch, "{}: groups {} do not divide the {} channels of input {}", op, groups,
                     channels, x.describe());
  }
  if (!(eps >= 0.0)) return makeError(ErrorCode::InvalidArgument, "{}: eps {} must be >= 0", op, eps);
  SVM_ASSIGN_OR_RETURN(Tensor out, outputBuffer(ctx, 0, x.dtype(), x.shape()));
  Status status = dispatchCompute(op, x, [&]<typename C>() -> Status {
    std::vector<C> scale, bias;
    if (isPresent(ctx, 1)) {
      SVM_ASSIGN_OR_RETURN(scale, channelParam<C>(op, "scale", *ctx.inputs[1], channels, x));
    }
    if (isPresent(ctx, 2)) {
      SVM_ASSIGN_OR_RETURN(bias, channelParam<C>(op, "bias", *ctx.inputs[2], channels, x));
    }
    SVM_ASSIGN_OR_RETURN(std::vector<C> values, loadValues<C>(x));
    const std::int64_t plane = x.numel() == 0 ? 0 : x.numel() / (x.dim(0) * channels);
    normalizeGroups(values, x.dim(0), channels, plane, groups, eps, scale, bias);
    storeValues(values, out);
    return Status::ok();
  });
  SVM_RETURN_IF_ERROR(status);
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- resize ----

enum class ResizeMode : std::int64_t { Nearest = 0, Linear = 1, Cubic = 2 };
enum class CoordMode : std::int64_t {
  HalfPixel = 0,
  Asymmetric = 1,
  AlignCorners = 2,
  PytorchHalfPixel = 3,
  TfHalfPixelForNn = 4
};
enum class NearestMode : std::int64_t { RoundPreferFloor = 0, RoundPreferCeil = 1, Floor = 2, Ceil = 3 };

struct Taps {
  std::vector<std::int64_t> index;  // per output position, kTaps source indices
  std::vector<double> weight;       // and their weights
  int count = 1;
};

// The input coordinate of output position x. As ONNX's reference, align_corners and
// pytorch_half_pixel use the unrounded resized length `resized` (in * scale for given scales, which
// need not divide; the size itself for given sizes).
double sourceCoordinate(CoordMode mode, std::int64_t x, std::int64_t in, double scale, double resized) {
  const double xd = static_cast<double>(x);
  switch (mode) {
    case CoordMode::HalfPixel: return (xd + 0.5) / scale - 0.5;
    case CoordMode::Asymmetric: return xd / scale;
    case CoordMode::AlignCorners: return resized == 1.0 ? 0.0 : xd * static_cast<double>(in - 1) / (resized - 1.0);
    case CoordMode::PytorchHalfPixel: return resized > 1.0 ? (xd + 0.5) / scale - 0.5 : 0.0;
    case CoordMode::TfHalfPixelForNn: return (xd + 0.5) / scale;
  }
  return xd;
}

std::int64_t nearestIndex(NearestMode mode, double x) {
  switch (mode) {
    case NearestMode::RoundPreferFloor:
      return x == std::floor(x) + 0.5 ? static_cast<std::int64_t>(std::floor(x))
                                      : static_cast<std::int64_t>(std::round(x));
    case NearestMode::RoundPreferCeil: return static_cast<std::int64_t>(std::floor(x + 0.5));
    case NearestMode::Floor: return static_cast<std::int64_t>(std::floor(x));
    case NearestMode::Ceil: return static_cast<std::int64_t>(std::ceil(x));
  }
  return 0;
}

double cubicWeight(double d, double a) {
  d = std::abs(d);
  if (d <= 1.0) return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
  if (d < 2.0) return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
  return 0.0;
}

struct ResizeAttrs {
  ResizeMode mode = ResizeMode::Nearest;
  CoordMode coord = CoordMode::HalfPixel;
  NearestMode nearest = NearestMode::RoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
};

Taps axisTaps(const ResizeAttrs& r, std::int64_t in, std::int64_t out, double scale, double resized) {
  Taps t;
  t.count = r.mode == ResizeMode::Nearest ? 1 : r.mode == ResizeMode::Linear ? 2 : 4;
  for (std::int64_t x = 0; x < out; ++x) {
    const double src = sourceCoordinate(r.coord, x, in, scale, resized);
    if (r.mode == ResizeMode::Nearest) {
      t.index.push_back(std::clamp<std::int64_t>(nearestIndex(r.nearest, src), 0, in - 1));
      t.weight.push_back(1.0);
      continue;
    }
    const double base = std::floor(src);
    const double frac = src - base;
    const std::int64_t first = static_cast<std::int64_t>(base) - (t.count == 4 ? 1 : 0);
    double total = 0.0;
    const std::size_t start = t.weight.size();
    for (int k = 0; k < t.count; ++k) {
      const std::int64_t index = first + k;
      double w =
          t.count == 2 ? (k == 0 ? 1.0 - frac : frac) : cubicWeight(frac - static_cast<double>(k - 1), r.cubic_a);
      if (r.exclude_outside && (index < 0 || index >= in)) w = 0.0;
      total += w;
      t.index.push_back(std::clamp<std::int64_t>(index, 0, in - 1));
      t.weight.push_back(w);
    }
    if (r.exclude_outside && total != 0.0) {
      for (std::size_t k = start; k < t.weight.size(); ++k) t.weight[k] /= total;
    }
  }
  return t;
}

// Resamples axis `axis` of the row-major `values` of `shape` to `out` positions.
template <typename C>
std::vector<C> resampleAxis(const std::vector<C>& values, Shape& shape, int axis, const Taps& taps, std::int64_t out) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = axis + 1; d < shape.rank(); ++d) inner *= shape[d];
  const std::int64_t in = shape[axis];
  std::vector<C> result(static_cast<std::size_t>(outer * out * inner), C(0));
  for (std::int64_t o = 0; o < outer; ++o) {
    const C* src = values.data() + o * in * inner;
    C* dst = result.data() + o * out * inner;
    for (std::int64_t x = 0; x < out; ++x) {
      C* row = dst + x * inner;
      for (int k = 0; k < taps.count; ++k) {
        const std::size_t t = static_cast<std::size_t>(x * taps.count + k);
        const C w = static_cast<C>(taps.weight[t]);
        if (w == C(0)) continue;
        const C* from = src + taps.index[t] * inner;
        for (std::int64_t i = 0; i < inner; ++i) row[i] += w * from[i];
      }
    }
  }
  shape[axis] = out;
  return result;
}

// Per axis of x: the output extent and the scale, from `sizes` (ints) or `scales` (a float tensor),
// each with one entry per axis or per spatial axis (N and C then keep their extent).
Status resizeTargets(const Tensor& x, const OpContext& ctx, std::vector<std::int64_t>& out, std::vector<double>& scale,
                     std::vector<double>& resized) {
  const int rank = x.rank();
  std::vector<double> given;
  bool by_sizes = false;
  if (isPresent(ctx, 1)) {
    SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> sizes, ctx.inputs[1]->toInts("resize: sizes"));
    for (std::int64_t v : sizes) given.push_back(static_cast<double>(v));
    by_sizes = true;
  } else if (isPresent(ctx, 2)) {
    const Tensor s = tensorArg(*ctx.inputs[2]);
    for (std::int64_t i = 0; i < s.numel(); ++i) given.push_back(s.elementAsDouble(i));
  } else {
    return makeError(ErrorCode::InvalidArgument, "resize of {}: give sizes or scales", x.describe());
  }
  const int lead = static_cast<int>(given.size()) == rank ? 0 : static_cast<int>(given.size()) == rank - 2 ? 2 : -1;
  if (lead < 0) {
    return makeError(ErrorCode::ShapeMismatch,
                     "resize: {} has {} entries; input {} needs {} (all axes) or {} (spatial)",
                     by_sizes ? "sizes" : "scales", given.size(), x.describe(), rank, rank - 2);
  }
  out.assign(static_cast<std::size_t>(rank), 0);
  scale.assign(static_cast<std::size_t>(rank), 1.0);
  resized.assign(static_cast<std::size_t>(rank), 0.0);
  for (int d = 0; d < rank; ++d) {
    const std::size_t k = static_cast<std::size_t>(d);
    out[k] = x.dim(d);
    resized[k] = static_cast<double>(x.dim(d));
    if (d < lead) continue;
    const double v = given[static_cast<std::size_t>(d - lead)];
    if (!(v > 0.0)) {
      return makeError(ErrorCode::InvalidArgument, "resize: {} entry {} for axis {} of input {} must be > 0",
                       by_sizes ? "sizes" : "scales", v, d, x.describe());
    }
    if (by_sizes) {
      out[k] = static_cast<std::int64_t>(v);
      scale[k] = x.dim(d) > 0 ? v / static_cast<double>(x.dim(d)) : 1.0;
      resized[k] = v;
    } else {
      out[k] = static_cast<std::int64_t>(std::floor(static_cast<double>(x.dim(d)) * v));
      scale[k] = v;
      resized[k] = static_cast<double>(x.dim(d)) * v;
    }
  }
  return Status::ok();
}

// attrs: mode coordinate_mode nearest_mode cubic_coeff_a exclude_outside.
Status resizeKernel(OpContext& ctx) {
  const Tensor x = tensorArg(*ctx.inputs[0]);
  ResizeAttrs r;
  const std::int64_t mode = ctx.attrs[0].i, coord = ctx.attrs[1].i, nearest = ctx.attrs[2].i;
  if (mode < 0 || mode > 2) {
    return makeError(ErrorCode::InvalidArgument, "resize of {}: unknown mode {} (0 = nearest, 1 = linear, 2 = cubic)",
                     x.describe(), mode);
  }
  if (coord < 0 || coord > 4) {
    return makeError(ErrorCode::InvalidArgument,
                     "resize of {}: unknown coordinate_mode {} (0 = half_pixel, 1 = asymmetric, 2 = align_corners, "
                     "3 = pytorch_half_pixel, 4 = tf_half_pixel_for_nn)",
                     x.describe(), coord);
  }
  if (nearest < 0 || nearest > 3) {
    return makeError(ErrorCode::InvalidArgument,
                     "resize of {}: unknown nearest_mode {} (0 = round_prefer_floor, 1 = round_prefer_ceil, 2 = floor, "
                     "3 = ceil)",
                     x.describe(), nearest);
  }
  r.mode = static_cast<ResizeMode>(mode);
  r.coord = static_cast<CoordMode>(coord);
  r.nearest = static_cast<NearestMode>(nearest);
  r.cubic_a = ctx.attrs[3].f;
  r.exclude_outside = ctx.attrs[4].i != 0;
  std::vector<std::int64_t> out_dims;
  std::vector<double> scales;
  std::vector<double> resized;
  SVM_RETURN_IF_ERROR(resizeTargets(x, ctx, out_dims, scales, resized));
  Shape shape(std::span<const std::int64_t>(out_dims.data(), out_dims.size()));
  for (int d = 0; d < x.rank(); ++d) {
    if (x.dim(d) == 0 && shape[d] > 0) {
      return makeError(ErrorCode::ShapeMismatch, "resize: axis {} of input {} is empty but the output needs {}", d,
                       x.describe(), shape[d]);
    }
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, outputBuffer(ctx, 0, x.dtype(), shape));
  Status status = dispatchCompute("resize", x, [&]<typename C>() -> Status {
    SVM_ASSIGN_OR_RETURN(std::vector<C> values, loadValues<C>(x));
    Shape current = x.shape();
    for (int d = 0; d < x.rank(); ++d) {
      const std::size_t k = static_cast<std::size_t>(d);
      if (out_dims[k] == x.dim(d) && scales[k] == 1.0) continue;
      values = resampleAxis(values, current, d, axisTaps(r, x.dim(d), out_dims[k], scales[k], resized[k]), out_dims[k]);
    }
    storeValues(values, out);
    return Status::ok();
  });
  SVM_RETURN_IF_ERROR(status);
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- depth_to_space / space_to_depth ----

// attrs: blocksize [mode (depth_to_space: 0 = DCR, 1 = CRD)].
template <bool kToSpace>
Status pixelShuffleKernel(OpContext& ctx) {
  constexpr std::string_view op = kToSpace ? "depth_to_space" : "space_to_depth";
  const Tensor x = tensorArg(*ctx.inputs[0]);
  const std::int64_t b = ctx.attrs[0].i;
  const std::int64_t mode = kToSpace ? ctx.attrs[1].i : 0;
  if (x.rank() != 4)
    return makeError(ErrorCode::ShapeMismatch, "{}: input {} must have rank 4 (N, C, H, W)", op, x.describe());
  if (b < 1) return makeError(ErrorCode::InvalidArgument, "{}: blocksize {} must be >= 1", op, b);
  if (mode < 0 || mode > 1) {
    return makeError(ErrorCode::InvalidArgument, "{}: unknown mode {} (0 = DCR, 1 = CRD)", op, mode);
  }
  const std::int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  Shape shape;
  if (kToSpace) {
    if (c % (b * b) != 0) {
      return makeError(ErrorCode::ShapeMismatch,
                       "{}: the {} channels of input {} are not a multiple of blocksize^2 = {}", op, c, x.describe(),
                       b * b);
    }
    shape = Shape{n, c / (b * b), h * b, w * b};
  } else {
    if (h % b != 0 || w % b != 0) {
      return makeError(ErrorCode::ShapeMismatch, "{}: H {} and W {} of input {} must be multiples of blocksize {}", op,
                       h, w, x.describe(), b);
    }
    shape = Shape{n, c * b * b, h / b, w / b};
  }
  SVM_ASSIGN_OR_RETURN(Tensor source, x.contiguous());
  SVM_ASSIGN_OR_RETURN(Tensor out, outputBuffer(ctx, 0, x.dtype(), shape));
  const std::size_t item = x.itemSize();
  const char* in = static_cast<const char*>(source.rawData());
  char* dst = static_cast<char*>(out.rawData());
  // (n, c_small, y, i, x, j) <-> the deep tensor's (n, depth channel, y, x) with spatial (y*b+i, x*b+j).
  const std::int64_t cs = kToSpace ? shape[1] : c;                                // channels of the spatial-side tensor
  const std::int64_t hs = kToSpace ? h : shape[2], ws = kToSpace ? w : shape[3];  // extents of the deep side
  for (std::int64_t in_n = 0; in_n < n; ++in_n) {
    for (std::int64_t ch = 0; ch < cs; ++ch) {
      for (std::int64_t i = 0; i < b; ++i) {
        for (std::int64_t j = 0; j < b; ++j) {
          const std::int64_t deep = mode == 1 ? (ch * b + i) * b + j : (i * b + j) * cs + ch;
          for (std::int64_t y = 0; y < hs; ++y) {
            for (std::int64_t xx = 0; xx < ws; ++xx) {
              const std::int64_t deep_index = ((in_n * cs * b * b + deep) * hs + y) * ws + xx;
              const std::int64_t wide_index = ((in_n * cs + ch) * hs * b + y * b + i) * ws * b + xx * b + j;
              const std::int64_t from = kToSpace ? deep_index : wide_index;
              const std::int64_t to = kToSpace ? wide_index : deep_index;
              std::memcpy(dst + to * static_cast<std::int64_t>(item), in + from * static_cast<std::int64_t>(item),
                          item);
            }
          }
        }
      }
    }
  }
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

}  // namespace

void registerVisionKernels(OpRegistry& registry) {
  registry.registerKernel(OpId::BatchNorm, KernelPattern{}, batchNormKernel, "batch_norm.generic");
  registry.registerKernel(OpId::InstanceNorm, KernelPattern{}, groupNormKernel<false>, "instance_norm.generic");
  registry.registerKernel(OpId::GroupNorm, KernelPattern{}, groupNormKernel<true>, "group_norm.generic");
  registry.registerKernel(OpId::Resize, KernelPattern{}, resizeKernel, "resize.generic");
  registry.registerKernel(OpId::DepthToSpace, KernelPattern{}, pixelShuffleKernel<true>, "depth_to_space.generic");
  registry.registerKernel(OpId::SpaceToDepth, KernelPattern{}, pixelShuffleKernel<false>, "space_to_depth.generic");
}

}  // namespace shapevm
