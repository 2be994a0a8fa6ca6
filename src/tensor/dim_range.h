// SPDX-License-Identifier: Apache-2.0
// DimRange: which extents one tensor dim may take — lo..hi, each a multiple of `divisor`. It is
// the one representation behind the three places that say "which shapes a tensor may have": a
// shape token's dynamic dim (bytecode DimToken), a compiled entry's guard (vm InputGuard) and a
// kernel specialization's dim (jit DimSpec). Each of those adds only what is its own (a token's
// dim id, a spec's baked-in static size). Invariant: 0 <= lo <= hi and divisor >= 1; the default
// accepts every extent; hi == kUnbounded means no upper bound.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace shapevm {

struct DimRange {
  static constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max();

  std::int64_t lo = 0;
  std::int64_t hi = kUnbounded;
  std::int64_t divisor = 1;

  static constexpr DimRange exactly(std::int64_t extent) { return DimRange{extent, extent, 1}; }
  static constexpr DimRange between(std::int64_t lo, std::int64_t hi, std::int64_t divisor = 1) {
    return DimRange{lo, hi, divisor};
  }

  bool operator==(const DimRange&) const = default;
  bool accepts(std::int64_t extent) const {
    return extent >= lo && extent <= hi && (divisor <= 1 || extent % divisor == 0);
  }
  bool bounded() const { return hi != kUnbounded; }
  bool unconstrained() const { return lo == 0 && hi == kUnbounded && divisor <= 1; }
  bool single() const { return lo == hi; }
  // Every extent `other` accepts, this accepts too (for ranges with divisors, as far as the
  // divisibility constraints show it: other's divisor is a multiple of this one's).
  bool covers(const DimRange& other) const {
    return other.lo >= lo && other.hi <= hi && (divisor <= 1 || other.divisor % divisor == 0);
  }
  // The smallest and largest accepted extents (a range's ends rounded inward to the divisor);
  // largestAccepted() of an unbounded range is kUnbounded rounded down.
  std::int64_t smallestAccepted() const { return divisor > 1 ? (lo + divisor - 1) / divisor * divisor : lo; }
  std::int64_t largestAccepted() const { return divisor > 1 ? hi / divisor * divisor : hi; }
  // The accepted extent nearest above `extent` after clamping it into lo..hi (an example value
  // for a dim that must satisfy the range).
  std::int64_t nearestAccepted(std::int64_t extent) const {
    std::int64_t value = extent < lo ? lo : extent > hi ? hi : extent;
    if (divisor > 1 && value % divisor != 0) value = (value / divisor + 1) * divisor;
    return value;
  }
  // "320..960", "16.." (no upper bound), then "%8" when a divisor is set; "" when unconstrained.
  std::string toString() const {
    std::string text;
    if (lo != 0 || hi != kUnbounded) text = std::to_string(lo) + ".." + (bounded() ? std::to_string(hi) : "");
    if (divisor > 1) text += "%" + std::to_string(divisor);
    return text;
  }
};

}  // namespace shapevm
