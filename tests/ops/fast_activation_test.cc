// SPDX-License-Identifier: Apache-2.0
// The vectorized float32 tanh of the reference kernels (fast_activation.h) gives the scalar
// path's float (tanh in double, rounded once) bit for bit: on a sweep over every kind of float
// (bit patterns on a stride through all 2^32, both lane widths), on the boundaries of its
// branches and the special values, and through the Tanh op on contiguous and strided tensors.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "op_test_util.h"
#include "ops/fast_activation.h"

namespace shapevm {
namespace {

float scalarTanh(float x) {
  return static_cast<float>(std::tanh(static_cast<double>(x)));
}

using BlockFn = void (*)(const float*, float*, unsigned char*, int);

// Every element `fn` marks exact equals the scalar path's float, bit for bit; returns how many
// were marked exact.
std::int64_t expectExactWhereMarked(BlockFn fn, const std::vector<float>& values) {
  std::int64_t marked = 0;
  float in[fastmath::kBlock], out[fastmath::kBlock];
  unsigned char exact[fastmath::kBlock];
  for (std::size_t i = 0; i < values.size(); i += fastmath::kBlock) {
    const int n = static_cast<int>(std::min<std::size_t>(fastmath::kBlock, values.size() - i));
    for (int k = 0; k < fastmath::kBlock; ++k) in[k] = k < n ? values[i + static_cast<std::size_t>(k)] : 0.0f;
    fn(in, out, exact, n);
    for (int k = 0; k < n; ++k) {
      if (exact[k] == 0) continue;
      ++marked;
      const float want = scalarTanh(in[k]);
      if (std::bit_cast<std::uint32_t>(out[k]) != std::bit_cast<std::uint32_t>(want)) {
        ADD_FAILURE() << "tanh(" << std::hexfloat << in[k] << ") = " << out[k] << ", the scalar path gives " << want;
        return marked;
      }
    }
  }
  return marked;
}

std::vector<float> sweepAndSpecialValues() {
  std::vector<float> values;
  // Bit patterns on a prime stride through all 2^32 (every exponent, both signs, NaNs).
  for (std::uint64_t bits = 12345; bits < (std::uint64_t{1} << 32); bits += 65537) {
    values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
  }
  // Typical activations, densely.
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int k = 0; k < 20000; ++k) values.push_back(normal(rng));
  // Around the branch point, the clamp, libm's saturation, and the special values.
  for (const float centre : {0.55f, 40.0f, 19.1f, 1e-30f, 1.1754944e-38f}) {
    float below = centre, above = centre;
    for (int k = 0; k < 64; ++k) {
      below = std::nextafter(below, 0.0f);
      above = std::nextafter(above, 100.0f);
      values.insert(values.end(), {below, above, -below, -above});
    }
  }
  constexpr float kInf = std::numeric_limits<float>::infinity();
  values.insert(values.end(),
                {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                 -std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), 1.0f, -1.0f});
  return values;
}

TEST(FastTanh, MarkedElementsAreBitForBitTheScalarPath) {
  const std::vector<float> values = sweepAndSpecialValues();
  const std::int64_t baseline = expectExactWhereMarked(&fastmath::detail::tanhBaseline, values);
  // Nearly every finite value above the float normal range's floor is served by the fast form.
  EXPECT_GT(baseline, static_cast<std::int64_t>(values.size()) * 9 / 10);
  if (fastmath::detail::hasAvx2Fma()) {
    EXPECT_EQ(expectExactWhereMarked(&fastmath::detail::tanhAvx2, values), baseline);
  }
}

TEST(FastTanh, TheTanhOpEqualsTheScalarPathOnAnyLayout) {
  std::mt19937 rng(23);
  for (const testing::Layout layout : testing::kLayouts) {
    // 1000 rows of 37: runs that are not multiples of the block or of four lanes.
    const Tensor x = testing::randomTensor(DType::Float32, Shape{1000, 37}, rng, layout, 8.0);
    const Tensor y = testing::run1("tanh", {testing::tv(x)});
    ASSERT_EQ(y.shape(), x.shape());
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const testing::Index index = testing::unravel(i, x.shape());
      const auto got = static_cast<float>(testing::at(y, index));
      const float want = scalarTanh(static_cast<float>(testing::at(x, index)));
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want)) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace shapevm
