// SPDX-License-Identifier: Apache-2.0
// Window geometry of the convolution family (conv_geometry.h): attribute checks and per-axis pads
// and output extents, shared by the reference kernels and the shape functions.
#include "ops/conv_geometry.h"

#include <algorithm>

namespace shapevm {
namespace {

std::int64_t floorDiv(std::int64_t a, std::int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

std::int64_t ceilDiv(std::int64_t a, std::int64_t b) {
  return -floorDiv(-a, b);
}

// A per-axis list that may be empty (all `fallback`) or have one value per spatial axis.
Expected<std::vector<std::int64_t>> perAxis(std::string_view op, std::string_view name,
                                            const std::vector<std::int64_t>& values, std::size_t n,
                                            std::int64_t fallback, std::int64_t minimum) {
  if (values.empty()) return std::vector<std::int64_t>(n, fallback);
  if (values.size() != n) {
    return makeError(ErrorCode::InvalidArgument, "{}: {} {} has {} entries but the window has {} spatial axes", op,
                     name, joinInts(values), values.size(), n);
  }
  for (std::int64_t v : values) {
    if (v < minimum) {
      return makeError(ErrorCode::InvalidArgument, "{}: {} {} has an entry below {}", op, name, joinInts(values),
                       minimum);
    }
  }
  return values;
}

struct Common {
  std::vector<std::int64_t> strides, dilations, before, after;
  AutoPad auto_pad = AutoPad::NotSet;
};

Expected<Common> checkCommon(std::string_view op, std::size_t n, const WindowAttrs& attrs) {
  Common c;
  if (attrs.kernel.size() != n) {
    return makeError(ErrorCode::ShapeMismatch, "{}: the kernel {} has {} spatial axes but the input has {}", op,
                     joinInts(attrs.kernel), attrs.kernel.size(), n);
  }
  for (std::int64_t k : attrs.kernel) {
    if (k < 1)
      return makeError(ErrorCode::InvalidArgument, "{}: kernel extents {} must be >= 1", op, joinInts(attrs.kernel));
  }
  SVM_ASSIGN_OR_RETURN(c.strides, perAxis(op, "strides", attrs.strides, n, 1, 1));
  SVM_ASSIGN_OR_RETURN(c.dilations, perAxis(op, "dilations", attrs.dilations, n, 1, 1));
  if (attrs.auto_pad < 0 || attrs.auto_pad > 3) {
    return makeError(ErrorCode::InvalidArgument,
                     "{}: unknown auto_pad {} (0 = NOTSET, 1 = SAME_UPPER, 2 = SAME_LOWER, 3 = VALID)", op,
                     attrs.auto_pad);
  }
  c.auto_pad = static_cast<AutoPad>(attrs.auto_pad);
  const std::vector<std::int64_t>& pads = attrs.pads;
  if (!pads.empty() && pads.size() != n && pads.size() != 2 * n) {
    return makeError(ErrorCode::InvalidArgument,
                     "{}: pads {} has {} entries; {} spatial axes need {} (symmetric) or {} (before, after per axis)",
                     op, joinInts(pads), pads.size(), n, n, 2 * n);
  }
  for (std::int64_t p : pads) {
    if (p < 0) return makeError(ErrorCode::InvalidArgument, "{}: negative pads {}", op, joinInts(pads));
  }
  c.before.assign(n, 0);
  c.after.assign(n, 0);
  for (std::size_t d = 0; d < n && !pads.empty(); ++d) {
    c.before[d] = pads.size() == n ? pads[d] : pads[2 * d];
    c.after[d] = pads.size() == n ? pads[d] : pads[2 * d + 1];
  }
  return c;
}

// Axis d's input extent, kernel, stride and dilation (pads and output still to resolve).
AxisWindow startAxis(const Common& c, const WindowAttrs& attrs, const std::vector<std::int64_t>& in, std::size_t d) {
  AxisWindow w;
  w.in = in[d];
  w.kernel = attrs.kernel[d];
  w.stride = c.strides[d];
  w.dilation = c.dilations[d];
  return w;
}

// SAME padding of `total` split between the ends (the odd element after for SAME_UPPER, before
// otherwise). A negative total (conv_transpose's output_shape past the full extent) rounds the
// same way, so the extra positions come after the full output.
void splitSame(AutoPad mode, std::int64_t total, AxisWindow& w) {
  if (mode == AutoPad::SameUpper) {
    w.pad_before = floorDiv(total, 2);
    w.pad_after = total - w.pad_before;
  } else {
    w.pad_after = floorDiv(total, 2);
    w.pad_before = total - w.pad_after;
  }
}

}  // namespace

std::int64_t autoPadCode(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kAutoPadNames); ++i) {
    if (kAutoPadNames[i] == name) return static_cast<std::int64_t>(i);
  }
  return -1;
}

std::string joinInts(const std::vector<std::int64_t>& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]);
  return text + "]";
}

Expected<std::vector<AxisWindow>> forwardWindows(std::string_view op, const std::vector<std::int64_t>& in,
                                                 const WindowAttrs& attrs) {
  const std::size_t n = in.size();
  SVM_ASSIGN_OR_RETURN(Common c, checkCommon(op, n, attrs));
  std::vector<AxisWindow> out(n);
  for (std::size_t d = 0; d < n; ++d) {
    AxisWindow& w = out[d] = startAxis(c, attrs, in, d);
    const std::int64_t extent = w.dilation * (w.kernel - 1) + 1;
    if (c.auto_pad == AutoPad::SameUpper || c.auto_pad == AutoPad::SameLower) {
      if (w.in < 0) {
        w.out = -1;
        continue;
      }
      w.out = ceilDiv(w.in, w.stride);
      splitSame(c.auto_pad, std::max<std::int64_t>(0, (w.out - 1) * w.stride + extent - w.in), w);
      continue;
    }
    if (c.auto_pad == AutoPad::NotSet) {
      w.pad_before = c.before[d];
      w.pad_after = c.after[d];
    }
    if (w.in < 0) {
      w.out = -1;
      continue;
    }
    const std::int64_t span = w.in + w.pad_before + w.pad_after - extent;
    if (span < 0) {
      return makeError(ErrorCode::ShapeMismatch,
                       "{}: the kernel {} (dilated extent {} on spatial axis {}) is larger than the padded input "
                       "extent {} ({} + pads {} + {})",
                       op, joinInts(attrs.kernel), extent, d, w.in + w.pad_before + w.pad_after, w.in, w.pad_before,
                       w.pad_after);
    }
    w.out = (attrs.ceil_mode ? ceilDiv(span, w.stride) : floorDiv(span, w.stride)) + 1;
    // The last window must start inside the input or its leading pad (torch and ONNX).
    if (attrs.ceil_mode && (w.out - 1) * w.stride >= w.in + w.pad_before) --w.out;
  }
  return out;
}

Expected<std::vector<AxisWindow>> transposeWindows(std::string_view op, const std::vector<std::int64_t>& in,
                                                   const WindowAttrs& attrs) {
  const std::size_t n = in.size();
  SVM_ASSIGN_OR_RETURN(Common c, checkCommon(op, n, attrs));
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> output_padding,
                       perAxis(op, "output_padding", attrs.output_padding, n, 0, 0));
  if (!attrs.output_shape.empty() && attrs.output_shape.size() != n) {
    return makeError(ErrorCode::InvalidArgument,
                     "{}: output_shape {} has {} entries but the window has {} spatial axes", op,
                     joinInts(attrs.output_shape), attrs.output_shape.size(), n);
  }
  std::vector<AxisWindow> out(n);
  for (std::size_t d = 0; d < n; ++d) {
    AxisWindow& w = out[d] = startAxis(c, attrs, in, d);
    const std::int64_t extent = w.dilation * (w.kernel - 1) + 1;
    if (output_padding[d] >= std::max(w.stride, w.dilation)) {
      return makeError(ErrorCode::InvalidArgument,
                       "{}: output_padding {} must be smaller than the stride or the dilation on spatial axis {}", op,
                       joinInts(output_padding), d);
    }
    if (w.in < 0) {
      w.out = attrs.output_shape.empty() ? -1 : attrs.output_shape[d];
      continue;
    }
    const std::int64_t full = w.stride * (w.in - 1) + output_padding[d] + extent;
    const bool same = c.auto_pad == AutoPad::SameUpper || c.auto_pad == AutoPad::SameLower;
    if (!attrs.output_shape.empty() || same) {
      w.out = attrs.output_shape.empty() ? w.in * w.stride : attrs.output_shape[d];
      if (w.out < 1) {
        return makeError(ErrorCode::InvalidArgument, "{}: output extent {} on spatial axis {} must be >= 1", op, w.out,
                         d);
      }
      const std::int64_t total = full - w.out;
      splitSame(c.auto_pad == AutoPad::SameUpper ? AutoPad::SameUpper : AutoPad::SameLower, total, w);
      continue;
    }
    if (c.auto_pad == AutoPad::NotSet) {
      w.pad_before = c.before[d];
      w.pad_after = c.after[d];
    }
    w.out = full - w.pad_before - w.pad_after;
    if (w.out < 1) {
      return makeError(ErrorCode::ShapeMismatch, "{}: pads {} + {} leave no output on spatial axis {} (extent {})", op,
                       w.pad_before, w.pad_after, d, full);
    }
  }
  return out;
}

}  // namespace shapevm
