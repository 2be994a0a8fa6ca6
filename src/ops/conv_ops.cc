// SPDX-License-Identifier: Apache-2.0
// Reference kernels for the convolution family on NC[D]HW tensors: conv and conv_transpose (1-D,
// 2-D, 3-D; strides, dilations, groups, pads, auto_pad, output_padding/output_shape), max_pool,
// avg_pool, global_avg_pool and global_max_pool. Every spatial rank runs as 3-D with leading unit
// axes. conv runs as per-tile im2col (a band of output rows at a time, ~1 MiB) + the reference
// matmul when it is dense enough, else (depthwise, thin) as a direct loop per (output channel,
// input channel, kernel tap) over the output rows with the valid range precomputed; a
// whole-tensor im2col buffer never exists. Compute is float (double for
// float64) and the output is a fresh contiguous tensor in the input's dtype.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
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

std::int64_t floorDiv(std::int64_t a, std::int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

std::int64_t ceilDiv(std::int64_t a, std::int64_t b) {
  return -floorDiv(-a, b);
}

// The spatial extents of an N, C, spatial... tensor.
std::vector<std::int64_t> spatialOf(const Tensor& t) {
  std::vector<std::int64_t> dims;
  for (int d = 2; d < t.rank(); ++d) dims.push_back(t.dim(d));
  return dims;
}

// Windows padded at the front to three axes (D, H, W), unit axes first.
std::array<AxisWindow, 3> asThree(const std::vector<AxisWindow>& windows) {
  std::array<AxisWindow, 3> out;
  for (AxisWindow& w : out) w = AxisWindow{1, 1, 1, 1, 1, 0, 0};
  const std::size_t lead = 3 - windows.size();
  for (std::size_t d = 0; d < windows.size(); ++d) out[lead + d] = windows[d];
  return out;
}

Shape outputShape(std::int64_t n, std::int64_t c, const std::vector<AxisWindow>& windows) {
  Shape shape{n, c};
  for (const AxisWindow& w : windows) shape.push_back(w.out);
  return shape;
}

// The [lo, hi) range of output positions o whose input position o * stride + offset lies in [0, in).
void validRange(std::int64_t in, std::int64_t out, std::int64_t stride, std::int64_t offset, std::int64_t& lo,
                std::int64_t& hi) {
  lo = std::max<std::int64_t>(0, ceilDiv(-offset, stride));
  hi = std::min<std::int64_t>(out, floorDiv(in - 1 - offset, stride) + 1);
  if (hi < lo) hi = lo;
}

// ---- conv / conv_transpose: shared input checks ----

struct ConvSetup {
  Tensor x, w;
  std::optional<Tensor> bias;
  std::int64_t groups = 1;
  std::int64_t out_channels = 0;
  std::vector<AxisWindow> windows;
};

Expected<ConvSetup> setupConv(OpContext& ctx, bool transpose) {
  const std::string_view op = transpose ? "conv_transpose" : "conv";
  ConvSetup s;
  s.x = tensorArg(*ctx.inputs[0]);
  s.w = tensorArg(*ctx.inputs[1]);
  const Tensor& x = s.x;
  const Tensor& w = s.w;
  if (!isFloating(x.dtype()) || x.dtype() != w.dtype()) {
    return makeError(ErrorCode::DTypeMismatch, "{}: input {} and weight {} must have the same floating-point dtype", op,
                     x.describe(), w.describe());
  }
  if (w.rank() < 3 || w.rank() > 5) {
    return makeError(ErrorCode::ShapeMismatch, "{}: the weight {} must have rank 3, 4 or 5 ({}, kernel...)", op,
                     w.describe(), transpose ? "C_in, C_out/groups" : "C_out, C_in/groups");
  }
  const int dims = w.rank() - 2;
  if (x.rank() != w.rank()) {
    return makeError(ErrorCode::ShapeMismatch,
                     "{}: input {} has rank {} but the weight {} is a {}-D kernel, which needs a rank-{} input "
                     "(N, C, {} spatial axes)",
                     op, x.describe(), x.rank(), w.describe(), dims, dims + 2, dims);
  }
  s.groups = ctx.attrs[3].i;
  const std::int64_t channels = x.dim(1);
  if (s.groups < 1 || channels % s.groups != 0) {
    return makeError(ErrorCode::ShapeMismatch, "{}: groups {} do not divide the {} channels of input {}", op, s.groups,
                     channels, x.describe());
  }
  if (!transpose) {
    if (w.dim(1) * s.groups != channels) {
      return makeError(ErrorCode::ShapeMismatch,
                       "{}: input {} has {} channels but the weight {} expects {} (C_in/groups {} x groups {})", op,
                       x.describe(), channels, w.describe(), w.dim(1) * s.groups, w.dim(1), s.groups);
    }
    if (w.dim(0) % s.groups != 0) {
      return makeError(ErrorCode::ShapeMismatch, "{}: groups {} do not divide the {} output channels of weight {}", op,
                       s.groups, w.dim(0), w.describe());
    }
    s.out_channels = w.dim(0);
  } else {
    if (w.dim(0) != channels) {
      return makeError(ErrorCode::ShapeMismatch, "{}: input {} has {} channels but the weight {} expects {}", op,
                       x.describe(), channels, w.describe(), w.dim(0));
    }
    s.out_channels = w.dim(1) * s.groups;
  }
  if (isPresent(ctx, 2)) {
    s.bias = tensorArg(*ctx.inputs[2]);
    if (s.bias->rank() != 1 || s.bias->dim(0) != s.out_channels) {
      return makeError(ErrorCode::ShapeMismatch, "{}: bias {} must be 1-D with the {} output channels", op,
                       s.bias->describe(), s.out_channels);
    }
  }
  WindowAttrs attrs;
  for (int d = 2; d < w.rank(); ++d) attrs.kernel.push_back(w.dim(d));
  attrs.strides = ctx.attrs[0].ints;
  attrs.pads = ctx.attrs[1].ints;
  attrs.dilations = ctx.attrs[2].ints;
  attrs.auto_pad = ctx.attrs[4].i;
  if (transpose) {
    attrs.output_padding = ctx.attrs[5].ints;
    attrs.output_shape = ctx.attrs[6].ints;
    SVM_ASSIGN_OR_RETURN(s.windows, transposeWindows(op, spatialOf(x), attrs));
  } else {
    SVM_ASSIGN_OR_RETURN(s.windows, forwardWindows(op, spatialOf(x), attrs));
  }
  return s;
}

// out planes start at the bias (or zero).
template <typename C>
Expected<std::vector<C>> initialOutput(const ConvSetup& s, std::int64_t batch, std::int64_t plane) {
  std::vector<C> out(static_cast<std::size_t>(batch * s.out_channels * plane), C(0));
  if (!s.bias) return out;
  SVM_ASSIGN_OR_RETURN(std::vector<C> bias, loadValues<C>(*s.bias));
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t m = 0; m < s.out_channels; ++m) {
      C* o = out.data() + (n * s.out_channels + m) * plane;
      std::fill(o, o + plane, bias[static_cast<std::size_t>(m)]);
    }
  }
  return out;
}

// Output positions whose im2col columns one tile holds at most (per tile: C/groups x taps x this
// many values, ~1 MiB of float), so a big input never gets a whole-tensor im2col buffer.
constexpr std::int64_t kTileColumns = 1 << 18;
// Below these (output channels per group, input channels x taps per group) the direct loop wins.
constexpr std::int64_t kGemmMinOutputs = 4;
constexpr std::int64_t kGemmMinDepth = 8;

// A matrix over caller memory, for the reference matmul kernel.
template <typename C>
Value matrixOver(C* data, std::int64_t rows, std::int64_t cols) {
  const DType dtype = std::is_same_v<C, double> ? DType::Float64 : DType::Float32;
  return Value::fromTensor(Tensor::wrap(data, dtype, Shape{rows, cols}, Shape{cols, 1},
                                        static_cast<std::size_t>(rows * cols) * sizeof(C), nullptr, nullptr));
}

// conv as per-tile im2col + the reference matmul: for each (sample, group) and each band of
// output rows, col[(c, tap), position] gathers the input (zero outside), and
// result[m, position] += W[m, (c, tap)] x col.
template <typename C>
Status convTiledGemm(const ConvSetup& s, const std::array<AxisWindow, 3>& a, const std::vector<C>& in,
                     const std::vector<C>& weight, std::vector<C>& result) {
  const std::int64_t channels = s.x.dim(1), cg = channels / s.groups, mg = s.out_channels / s.groups;
  const std::int64_t taps = a[0].kernel * a[1].kernel * a[2].kernel, depth = cg * taps;
  const std::int64_t in_plane = a[0].in * a[1].in * a[2].in, out_plane = a[0].out * a[1].out * a[2].out;
  const std::int64_t rows_total = a[0].out * a[1].out, width = a[2].out;
  const std::int64_t tile_rows = std::max<std::int64_t>(1, kTileColumns / std::max<std::int64_t>(1, depth * width));
  std::vector<C> col(static_cast<std::size_t>(depth * std::min(tile_rows, rows_total) * width));
  std::vector<C> weight_copy(weight);  // the matrix views need mutable memory; never written
  const OpRegistry& registry = OpRegistry::global();
  const OpSchema& matmul = registry.schema(OpId::MatMul);
  Value product[1];
  for (std::int64_t n = 0; n < s.x.dim(0); ++n) {
    for (std::int64_t g = 0; g < s.groups; ++g) {
      const C* xg = in.data() + (n * channels + g * cg) * in_plane;
      for (std::int64_t r0 = 0; r0 < rows_total; r0 += tile_rows) {
        const std::int64_t rows = std::min(tile_rows, rows_total - r0), positions = rows * width;
        for (std::int64_t c = 0; c < cg; ++c) {
          for (std::int64_t t = 0; t < taps; ++t) {
            const std::int64_t kd = t / (a[1].kernel * a[2].kernel), kh = t / a[2].kernel % a[1].kernel,
                               kw = t % a[2].kernel;
            const std::int64_t off_w = kw * a[2].dilation - a[2].pad_before;
            std::int64_t w_lo, w_hi;
            validRange(a[2].in, width, a[2].stride, off_w, w_lo, w_hi);
            C* dst = col.data() + (c * taps + t) * positions;
            for (std::int64_t r = 0; r < rows; ++r) {
              const std::int64_t od = (r0 + r) / a[1].out, oh = (r0 + r) % a[1].out;
              const std::int64_t id = od * a[0].stride + kd * a[0].dilation - a[0].pad_before;
              const std::int64_t ih = oh * a[1].stride + kh * a[1].dilation - a[1].pad_before;
              C* row = dst + r * width;
              if (id < 0 || id >= a[0].in || ih < 0 || ih >= a[1].in) {
                std::fill(row, row + width, C(0));
                continue;
              }
              const C* src = xg + c * in_plane + (id * a[1].in + ih) * a[2].in + off_w;
              std::fill(row, row + w_lo, C(0));
              for (std::int64_t ow = w_lo; ow < w_hi; ++ow) row[ow] = src[ow * a[2].stride];
              std::fill(row + w_hi, row + width, C(0));
            }
          }
        }
        Value lhs = matrixOver(weight_copy.data() + g * mg * depth, mg, depth);
        Value rhs = matrixOver(col.data(), depth, positions);
        const Value* operands[2] = {&lhs, &rhs};
        OpContext call{&matmul, operands, {}, product};
        SVM_RETURN_IF_ERROR(registry.resolve(OpId::MatMul, operands).fn(call));
        const Tensor& tile = product[0].tensor();
        for (std::int64_t m = 0; m < mg; ++m) {
          const C* from = tile.data<C>() + m * positions;
          C* to = result.data() + (n * s.out_channels + g * mg + m) * out_plane + r0 * width;
          for (std::int64_t p = 0; p < positions; ++p) to[p] += from[p];
        }
      }
    }
  }
  return Status::ok();
}

// The operands of one conv call in the compute type, with the windows as three axes.
template <typename C>
struct ConvData {
  std::vector<C> in, weight;
  std::array<AxisWindow, 3> a;
  std::int64_t in_plane = 0, out_plane = 0, taps = 0, cg = 0, mg = 0;
};

// Checks and loads the operands, starts the output at the bias, runs
// body.template operator()<C>(setup, data, result) and stores the result in x's dtype.
template <typename Body>
Status runConv(OpContext& ctx, bool transpose, Body&& body) {
  SVM_ASSIGN_OR_RETURN(ConvSetup s, setupConv(ctx, transpose));
  const Tensor& x = s.x;
  SVM_ASSIGN_OR_RETURN(Tensor out, outputBuffer(ctx, 0, x.dtype(), outputShape(x.dim(0), s.out_channels, s.windows)));
  Status status = dispatchCompute(transpose ? "conv_transpose" : "conv", x, [&]<typename C>() -> Status {
    ConvData<C> d;
    SVM_ASSIGN_OR_RETURN(d.in, loadValues<C>(x));
    SVM_ASSIGN_OR_RETURN(d.weight, loadValues<C>(s.w));
    d.a = asThree(s.windows);
    d.in_plane = d.a[0].in * d.a[1].in * d.a[2].in;
    d.out_plane = d.a[0].out * d.a[1].out * d.a[2].out;
    d.taps = d.a[0].kernel * d.a[1].kernel * d.a[2].kernel;
    d.cg = x.dim(1) / s.groups;
    d.mg = s.out_channels / s.groups;
    SVM_ASSIGN_OR_RETURN(std::vector<C> result, initialOutput<C>(s, x.dim(0), d.out_plane));
    SVM_RETURN_IF_ERROR(body.template operator()<C>(s, d, result));
    storeValues(result, out);
    return Status::ok();
  });
  SVM_RETURN_IF_ERROR(status);
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// The direct loops, per (sample, output channel, input channel, kernel tap) over rows. conv
// gathers: output position o reads input o * stride + tap offset. conv_transpose (kScatter)
// scatters: input position i adds into output i * stride + tap offset. `p` walks the driving side
// (output for conv, input for conv_transpose) over the range whose other side is in bounds.
template <bool kScatter, typename C>
Status convDirect(const ConvSetup& s, const ConvData<C>& d, std::vector<C>& result) {
  const std::array<AxisWindow, 3>& a = d.a;
  // [lo, hi) of the driving positions p on axis k whose partner p * stride + offset is in bounds.
  auto range = [&](int k, std::int64_t offset, std::int64_t& lo, std::int64_t& hi) {
    if (kScatter) validRange(a[k].out, a[k].in, a[k].stride, offset, lo, hi);
    else validRange(a[k].in, a[k].out, a[k].stride, offset, lo, hi);
  };
  for (std::int64_t n = 0; n < s.x.dim(0); ++n) {
    for (std::int64_t m = 0; m < s.out_channels; ++m) {
      const std::int64_t g = m / d.mg;
      C* o = result.data() + (n * s.out_channels + m) * d.out_plane;
      for (std::int64_t c = 0; c < d.cg; ++c) {
        const std::int64_t ic = g * d.cg + c;
        const C* xi = d.in.data() + (n * s.x.dim(1) + ic) * d.in_plane;
        const C* wk = d.weight.data() + (kScatter ? ic * d.mg + (m - g * d.mg) : m * d.cg + c) * d.taps;
        for (std::int64_t kd = 0; kd < a[0].kernel; ++kd) {
          const std::int64_t off_d = kd * a[0].dilation - a[0].pad_before;
          std::int64_t d_lo, d_hi;
          range(0, off_d, d_lo, d_hi);
          for (std::int64_t kh = 0; kh < a[1].kernel; ++kh) {
            const std::int64_t off_h = kh * a[1].dilation - a[1].pad_before;
            std::int64_t h_lo, h_hi;
            range(1, off_h, h_lo, h_hi);
            for (std::int64_t kw = 0; kw < a[2].kernel; ++kw) {
              const std::int64_t off_w = kw * a[2].dilation - a[2].pad_before;
              std::int64_t w_lo, w_hi;
              range(2, off_w, w_lo, w_hi);
              const C wv = wk[(kd * a[1].kernel + kh) * a[2].kernel + kw];
              const std::int64_t sw = a[2].stride;
              for (std::int64_t pd = d_lo; pd < d_hi; ++pd) {
                const std::int64_t qd = pd * a[0].stride + off_d;
                const std::int64_t od = kScatter ? qd : pd, id = kScatter ? pd : qd;
                for (std::int64_t ph = h_lo; ph < h_hi; ++ph) {
                  const std::int64_t qh = ph * a[1].stride + off_h;
                  const std::int64_t oh = kScatter ? qh : ph, ih = kScatter ? ph : qh;
                  C* orow = o + (od * a[1].out + oh) * a[2].out;
                  const C* irow = xi + (id * a[1].in + ih) * a[2].in;
                  if constexpr (kScatter) {
                    for (std::int64_t pw = w_lo; pw < w_hi; ++pw) orow[pw * sw + off_w] += wv * irow[pw];
                  } else if (sw == 1) {
                    for (std::int64_t pw = w_lo; pw < w_hi; ++pw) orow[pw] += wv * irow[pw + off_w];
                  } else {
                    for (std::int64_t pw = w_lo; pw < w_hi; ++pw) orow[pw] += wv * irow[pw * sw + off_w];
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return Status::ok();
}

Status convKernel(OpContext& ctx) {
  return runConv(ctx, false, []<typename C>(const ConvSetup& s, const ConvData<C>& d, std::vector<C>& result) {
    if (d.mg >= kGemmMinOutputs && d.cg * d.taps >= kGemmMinDepth) {  // dense enough for the matmul
      return convTiledGemm<C>(s, d.a, d.in, d.weight, result);
    }
    return convDirect<false, C>(s, d, result);  // depthwise and thin convs
  });
}

Status convTransposeKernel(OpContext& ctx) {
  return runConv(ctx, true, []<typename C>(const ConvSetup& s, const ConvData<C>& d, std::vector<C>& result) {
    return convDirect<true, C>(s, d, result);
  });
}

// ---- max_pool / avg_pool ----

enum class PoolKind { Max, Avg };

// One max_pool plane: each output row starts at -inf, then every window tap whose input row is
// inside takes the max over the output columns whose input column is inside ([lo, hi), from
// validRange), a branch-free loop over the row. The taps are visited in the generic loop's order,
// so NaN propagates as there (a NaN tap makes the output NaN) and an empty window stays -inf.
template <typename C>
void maxPoolPlane(const C* __restrict__ xi, C* __restrict__ o, const std::array<AxisWindow, 3>& a) {
  const std::array<std::int64_t, 3> dilation = {a[0].dilation, a[1].dilation, a[2].dilation};
  std::vector<std::int64_t> lo(static_cast<std::size_t>(a[2].kernel)), hi(lo.size());
  for (std::int64_t kw = 0; kw < a[2].kernel; ++kw) {
    const std::size_t k = static_cast<std::size_t>(kw);
    validRange(a[2].in, a[2].out, a[2].stride, kw * dilation[2] - a[2].pad_before, lo[k], hi[k]);
  }
  const std::int64_t sw = a[2].stride;
  for (std::int64_t od = 0; od < a[0].out; ++od) {
    const std::int64_t sd = od * a[0].stride - a[0].pad_before;
    for (std::int64_t oh = 0; oh < a[1].out; ++oh) {
      const std::int64_t sh = oh * a[1].stride - a[1].pad_before;
      C* orow = o + (od * a[1].out + oh) * a[2].out;
      std::fill(orow, orow + a[2].out, -std::numeric_limits<C>::infinity());
      for (std::int64_t kd = 0; kd < a[0].kernel; ++kd) {
        const std::int64_t id = sd + kd * dilation[0];
        if (id < 0 || id >= a[0].in) continue;
        for (std::int64_t kh = 0; kh < a[1].kernel; ++kh) {
          const std::int64_t ih = sh + kh * dilation[1];
          if (ih < 0 || ih >= a[1].in) continue;
          const C* row = xi + (id * a[1].in + ih) * a[2].in;
          for (std::int64_t kw = 0; kw < a[2].kernel; ++kw) {
            const std::size_t k = static_cast<std::size_t>(kw);
            const std::int64_t offset = kw * dilation[2] - a[2].pad_before;
            for (std::int64_t ow = lo[k]; ow < hi[k]; ++ow) {
              const C v = row[ow * sw + offset], current = orow[ow];
              orow[ow] = v > current || v != v ? v : current;
            }
          }
        }
      }
    }
  }
}

// max_pool attrs: kernel strides pads dilations ceil_mode auto_pad;
// avg_pool attrs: kernel strides pads ceil_mode count_include_pad auto_pad.
template <PoolKind K>
Status poolKernel(OpContext& ctx) {
  constexpr std::string_view op = K == PoolKind::Max ? "max_pool" : "avg_pool";
  const Tensor x = tensorArg(*ctx.inputs[0]);
  if (!isFloating(x.dtype())) {
    return makeError(ErrorCode::DTypeMismatch, "{} needs a floating-point input, got {}", op, x.describe());
  }
  WindowAttrs attrs;
  attrs.kernel = ctx.attrs[0].ints;
  attrs.strides = ctx.attrs[1].ints;
  attrs.pads = ctx.attrs[2].ints;
  bool count_include_pad = false;
  if constexpr (K == PoolKind::Max) {
    attrs.dilations = ctx.attrs[3].ints;
    attrs.ceil_mode = ctx.attrs[4].i != 0;
  } else {
    attrs.ceil_mode = ctx.attrs[3].i != 0;
    count_include_pad = ctx.attrs[4].i != 0;
  }
  attrs.auto_pad = ctx.attrs[5].i;
  const std::size_t dims = attrs.kernel.size();
  if (dims < 1 || dims > 3 || x.rank() != static_cast<int>(dims) + 2) {
    return makeError(ErrorCode::ShapeMismatch,
                     "{}: input {} must have rank {} (N, C and one spatial axis per kernel entry {}); kernels have "
                     "1 to 3 axes",
                     op, x.describe(), dims + 2, joinInts(attrs.kernel));
  }
  SVM_ASSIGN_OR_RETURN(std::vector<AxisWindow> windows, forwardWindows(op, spatialOf(x), attrs));
  const Shape shape = outputShape(x.dim(0), x.dim(1), windows);
  SVM_ASSIGN_OR_RETURN(Tensor out, outputBuffer(ctx, 0, x.dtype(), shape));
  if (K == PoolKind::Max && x.dtype() == DType::Float32 && x.isContiguous()) {
    // float32 as it is: no staging copies (the output is fresh and contiguous).
    const std::array<AxisWindow, 3> a = asThree(windows);
    const std::int64_t in_plane = a[0].in * a[1].in * a[2].in, out_plane = a[0].out * a[1].out * a[2].out;
    for (std::int64_t p = 0; p < x.dim(0) * x.dim(1); ++p) {
      maxPoolPlane(x.data<float>() + p * in_plane, out.data<float>() + p * out_plane, a);
    }
    ctx.outputs[0] = Value::fromTensor(std::move(out));
    return Status::ok();
  }
  Status status = dispatchCompute(op, x, [&]<typename C>() -> Status {
    SVM_ASSIGN_OR_RETURN(std::vector<C> in, loadValues<C>(x));
    const std::array<AxisWindow, 3> a = asThree(windows);
    const std::int64_t in_plane = a[0].in * a[1].in * a[2].in, out_plane = a[0].out * a[1].out * a[2].out;
    const std::int64_t planes = x.dim(0) * x.dim(1);
    std::vector<C> result(static_cast<std::size_t>(planes * out_plane));
    for (std::int64_t p = 0; p < planes; ++p) {
      const C* xi = in.data() + p * in_plane;
      C* o = result.data() + p * out_plane;
      if constexpr (K == PoolKind::Max) {
        maxPoolPlane(xi, o, a);
        continue;
      }
      for (std::int64_t od = 0; od < a[0].out; ++od) {
        const std::int64_t sd = od * a[0].stride - a[0].pad_before;
        for (std::int64_t oh = 0; oh < a[1].out; ++oh) {
          const std::int64_t sh = oh * a[1].stride - a[1].pad_before;
          for (std::int64_t ow = 0; ow < a[2].out; ++ow) {
            const std::int64_t sw = ow * a[2].stride - a[2].pad_before;
            C acc = K == PoolKind::Max ? -std::numeric_limits<C>::infinity() : C(0);
            std::int64_t count = 0;
            for (std::int64_t kd = 0; kd < a[0].kernel; ++kd) {
              const std::int64_t id = sd + kd * a[0].dilation;
              if (id < 0 || id >= a[0].in) continue;
              for (std::int64_t kh = 0; kh < a[1].kernel; ++kh) {
                const std::int64_t ih = sh + kh * a[1].dilation;
                if (ih < 0 || ih >= a[1].in) continue;
                const C* row = xi + (id * a[1].in + ih) * a[2].in;
                for (std::int64_t kw = 0; kw < a[2].kernel; ++kw) {
                  const std::int64_t iw = sw + kw * a[2].dilation;
                  if (iw < 0 || iw >= a[2].in) continue;
                  const C v = row[iw];
                  if constexpr (K == PoolKind::Max) {
                    if (v > acc || std::isnan(v)) acc = v;
                  } else {
                    acc += v;
                  }
                  ++count;
                }
              }
            }
            if constexpr (K == PoolKind::Avg) {
              if (count_include_pad) {  // the window clipped to the padded input (torch's divisor)
                count = 1;
                const std::int64_t starts[3] = {sd, sh, sw};
                for (int d = 0; d < 3; ++d) {
                  const std::int64_t end = std::min(starts[d] + a[d].kernel, a[d].in + a[d].pad_after);
                  count *= end - starts[d];
                }
              }
              acc = count > 0 ? acc / static_cast<C>(count) : std::numeric_limits<C>::quiet_NaN();
            }
            o[(od * a[1].out + oh) * a[2].out + ow] = acc;
          }
        }
      }
    }
    storeValues(result, out);
    return Status::ok();
  });
  SVM_RETURN_IF_ERROR(status);
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- global_avg_pool / global_max_pool ----

template <PoolKind K>
Status globalPoolKernel(OpContext& ctx) {
  constexpr std::string_view op = K == PoolKind::Max ? "global_max_pool" : "global_avg_pool";
  const Tensor x = tensorArg(*ctx.inputs[0]);
  if (x.rank() < 3) {
    return makeError(ErrorCode::ShapeMismatch, "{}: input {} must have rank >= 3 (N, C, spatial...)", op, x.describe());
  }
  Shape shape{x.dim(0), x.dim(1)};
  std::int64_t plane = 1;
  for (int d = 2; d < x.rank(); ++d) {
    shape.push_back(1);
    plane *= x.dim(d);
  }
  if (plane == 0)
    return makeError(ErrorCode::ShapeMismatch, "{}: input {} has an empty spatial extent", op, x.describe());
  SVM_ASSIGN_OR_RETURN(Tensor out, outputBuffer(ctx, 0, x.dtype(), shape));
  Status status = dispatchCompute(op, x, [&]<typename C>() -> Status {
    SVM_ASSIGN_OR_RETURN(std::vector<C> in, loadValues<C>(x));
    std::vector<C> result(static_cast<std::size_t>(x.dim(0) * x.dim(1)));
    for (std::size_t p = 0; p < result.size(); ++p) {
      const C* xi = in.data() + static_cast<std::int64_t>(p) * plane;
      if constexpr (K == PoolKind::Max) {
        C acc = -std::numeric_limits<C>::infinity();
        for (std::int64_t i = 0; i < plane; ++i) {
          if (xi[i] > acc || std::isnan(xi[i])) acc = xi[i];
        }
        result[p] = acc;
      } else {
        double sum = 0.0;
        for (std::int64_t i = 0; i < plane; ++i) sum += static_cast<double>(xi[i]);
        result[p] = static_cast<C>(sum / static_cast<double>(plane));
      }
    }
    storeValues(result, out);
    return Status::ok();
  });
  SVM_RETURN_IF_ERROR(status);
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

}  // namespace

void registerConvKernels(OpRegistry& registry) {
  registry.registerKernel(OpId::Conv, KernelPattern{}, convKernel, "conv.generic");
  registry.registerKernel(OpId::ConvTranspose, KernelPattern{}, convTransposeKernel, "conv_transpose.generic");
  registry.registerKernel(OpId::MaxPool, KernelPattern{}, poolKernel<PoolKind::Max>, "max_pool.generic");
  registry.registerKernel(OpId::AvgPool, KernelPattern{}, poolKernel<PoolKind::Avg>, "avg_pool.generic");
  registry.registerKernel(OpId::GlobalAvgPool, KernelPattern{}, globalPoolKernel<PoolKind::Avg>,
                          "global_avg_pool.generic");
  registry.registerKernel(OpId::GlobalMaxPool, KernelPattern{}, globalPoolKernel<PoolKind::Max>,
                          "global_max_pool.generic");
}

}  // namespace shapevm
