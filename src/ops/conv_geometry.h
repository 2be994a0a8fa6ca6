// SPDX-License-Identifier: Apache-2.0
// Sliding-window geometry of the convolution family (conv, conv_transpose, max_pool, avg_pool):
// strides, dilations, explicit pads and ONNX auto_pad resolved per spatial axis into the pads and
// output extents, as pure integer arithmetic. Invariant: the reference kernels and the shape
// functions call the same functions, so a static shape the schema infers is the kernel's shape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shapevm/status.h"

namespace shapevm {

// ONNX auto_pad, as the int the ops' `auto_pad` attribute holds.
enum class AutoPad : std::int64_t { NotSet = 0, SameUpper = 1, SameLower = 2, Valid = 3 };
inline constexpr std::string_view kAutoPadNames[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
// The attribute value for an ONNX auto_pad string; -1 when unknown.
std::int64_t autoPadCode(std::string_view name);

// The window attributes of one op, as given (empty lists take their defaults).
struct WindowAttrs {
  std::vector<std::int64_t> kernel;     // per spatial axis (from the weight or the `kernel` attribute)
  std::vector<std::int64_t> strides;    // [] = all 1
  std::vector<std::int64_t> pads;       // [] = 0; n values = symmetric; 2n = (before, after) per axis
  std::vector<std::int64_t> dilations;  // [] = all 1
  std::int64_t auto_pad = 0;
  bool ceil_mode = false;  // pools
  // conv_transpose only
  std::vector<std::int64_t> output_padding;  // [] = 0
  std::vector<std::int64_t> output_shape;    // [] = derived; else the spatial output extents
};

// Per spatial axis: the resolved window.
struct AxisWindow {
  std::int64_t in = 0, out = 0, kernel = 1, stride = 1, dilation = 1, pad_before = 0, pad_after = 0;
};

// Checks the attribute lists against the spatial rank (errors name `op`, the attribute and the
// shapes) and resolves each axis for input extents `in` (a forward window: conv and pools).
// `in` entries may be -1 (unknown): their `out` is then -1 as well.
Expected<std::vector<AxisWindow>> forwardWindows(std::string_view op, const std::vector<std::int64_t>& in,
                                                 const WindowAttrs& attrs);
// The same for conv_transpose (the output is the window's input).
Expected<std::vector<AxisWindow>> transposeWindows(std::string_view op, const std::vector<std::int64_t>& in,
                                                   const WindowAttrs& attrs);

std::string joinInts(const std::vector<std::int64_t>& values);  // "[1,2,3]"

}  // namespace shapevm
