// SPDX-License-Identifier: Apache-2.0
// Shape tokens: the formal TensorDescriptor operand field of LoadTensor parameters and CallOp
// sites. Per tensor: dtype (or any), rank (or any), and per dim either a static extent or a
// dynamic dim (id ?N or anonymous) with an optional range lo..hi and divisibility constraint.
// Text forms (parse/print round-trip exactly):
//   f32[?0,128,768]   [16..64,128,768]   [?0%8,128]   bf16[?1:320..960,128]   [*]   _
// `_` marks an operand that is not a tensor (an int, tuple, ...). Dims: `128`, `?` (anonymous),
// `?3`, `?3%8`, `16..64`, `16..` (no upper bound), `?3:16..64`, `?3:16..64%8`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shapevm/dtype.h"
#include "shapevm/status.h"
#include "shapevm/tensor.h"
#include "tensor/dim_range.h"

namespace shapevm {

// A dynamic dim's constraints (range, divisor) are its DimRange (tensor/dim_range.h); a static
// dim is its size alone (its range stays unconstrained).
struct DimToken : DimRange {
  bool is_static = true;
  std::int64_t size = 0;      // static extent
  std::int32_t id = -1;       // dynamic dim id (?N); -1 = anonymous

  static DimToken fixed(std::int64_t size) { DimToken d; d.size = size; return d; }
  static DimToken dynamic(std::int32_t id) { DimToken d; d.is_static = false; d.id = id; return d; }
  bool operator==(const DimToken& other) const = default;
  // True when `extent` satisfies this token (static size, range, divisibility).
  bool accepts(std::int64_t extent) const;
  std::string toString() const;
};

struct TensorDescriptor {
  bool is_tensor = true;                // false: the `_` token (a non-tensor operand)
  std::optional<DType> dtype;           // nullopt = any dtype
  bool any_rank = false;                // `[*]`
  std::vector<DimToken> dims;

  bool operator==(const TensorDescriptor& other) const = default;
  static TensorDescriptor notTensor() { TensorDescriptor d; d.is_tensor = false; return d; }
  static TensorDescriptor anyTensor() { TensorDescriptor d; d.any_rank = true; return d; }
  int rank() const { return static_cast<int>(dims.size()); }
  std::string toString() const;
  // Checks dtype, rank, static dims, ranges and divisibility; the message names `what`,
  // the token and the actual shape. (Dynamic-id consistency is checked by the caller.)
  Status check(const Tensor& tensor, std::string_view what) const;
};

Expected<TensorDescriptor> parseTensorDescriptor(std::string_view text);

}  // namespace shapevm
