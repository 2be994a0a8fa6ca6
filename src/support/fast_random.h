// SPDX-License-Identifier: Apache-2.0
// A fast, seedable random stream for generated test and benchmark data (validation inputs,
// `shapevm run`'s inputs): splitmix64 with a cheap approximately-normal draw. Invariant: the
// values depend only on the seed and the calls made (integer arithmetic and one exact double
// product per draw), so the same seed gives the same values on every host and compiler.
#pragma once

#include <cstdint>

namespace shapevm {

// splitmix64: a fast, well-mixed stream (validation draws millions of elements per kernel).
struct FastRandom {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // About N(0, 1): the sum of four 16-bit uniforms (Irwin-Hall), centred and scaled; within +-3.5.
  double normal() {
    const std::uint64_t bits = next();
    const double sum =
        static_cast<double>((bits & 0xFFFF) + ((bits >> 16) & 0xFFFF) + ((bits >> 32) & 0xFFFF) + (bits >> 48));
    return (sum - 2.0 * 65535.0) * (1.7320508075688772 / 65536.0);
  }
};

}  // namespace shapevm
