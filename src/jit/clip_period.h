// SPDX-License-Identifier: Apache-2.0
// Validation's clip periods (validate.h): how often a family's code paths repeat along a dynamic
// dim. Extents that differ by a multiple of the period take the same paths (tiles, vector
// remainders, task splits) and only run other trip counts, so validation runs the dim at a small
// extent of the same residue. An optional interface beside KernelFamily (as LlvmKernelEmitter is):
// a family whose paths repeat sooner than kDefaultClipPeriod along some dims implements it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "jit/kernel_abi.h"

namespace shapevm::jit {

// Every family's code paths repeat with this period along any dynamic dim: every matmul register
// tile's rows (4/6/8/12/16) and every vector width times unroll up to 64 elements divide it.
constexpr std::int64_t kDefaultClipPeriod = 192;
// The longest block a flat loop's remainder is taken modulo: 64 lanes (a 512-bit vector of 8-bit
// values) interleaved 4 ways.
constexpr std::int64_t kFlatLoopBlock = 256;

class ClipPeriods {
 public:
  virtual ~ClipPeriods() = default;
  // The period of the family's code paths along dynamic dim `axis` of input `input` of `spec`.
  virtual std::int64_t clipPeriod(const KernelSpec& spec, std::size_t input, int axis) const = 0;
};

// The family's clip period for that dim: its ClipPeriods answer, else kDefaultClipPeriod.
std::int64_t clipPeriodOf(const KernelFamily& family, const KernelSpec& spec, std::size_t input, int axis);

// ClipPeriods for a kernel that walks its output in row-major order, as one flat loop or as a nest
// of outer loops (never unrolled) around a vectorized innermost axis, with numpy-broadcast inputs
// and rows split across tasks along axis 0 (the elementwise family). A dim on an output axis other
// than the first and the last, with every later output axis static, only changes the outer loops'
// trip counts and the flat loop's length by multiples of the later axes' product: the period keeps
// that length's remainder modulo kFlatLoopBlock (and the spec's vector width times unroll). Any
// other dim: kDefaultClipPeriod.
std::int64_t rowMajorClipPeriod(const KernelSpec& spec, std::size_t input, int axis);

}  // namespace shapevm::jit
