// SPDX-License-Identifier: Apache-2.0
// `shapevm run`'s generated inputs (tools/cli_inputs.h): a fill is a function of (dtype, shape,
// seed) alone and pinned to known values (the same on every host), iterations, parameters and
// seeds get different data, weights are drawn once, float fills are roughly N(0, 1), and every
// dtype gets a varied, never all-zero fill.
#include "tools/cli_inputs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>

#include "frontend/frontend.h"

namespace shapevm {
namespace {

std::vector<double> valuesOf(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    out[static_cast<std::size_t>(i)] = loadAsDouble(t.rawData(), t.dtype(), i);
  }
  return out;
}

Tensor draw(DType dtype, const Shape& shape, std::uint64_t seed) {
  auto t = randomTensor(dtype, shape, seed);
  EXPECT_TRUE(t) << t.status().toString();
  return t ? *t : Tensor();
}

TEST(CliInputs, AFillIsAFunctionOfItsSeed) {
  const Tensor a = draw(DType::Float32, Shape{1000, 37}, 7);
  const Tensor b = draw(DType::Float32, Shape{1000, 37}, 7);
  ASSERT_EQ(std::memcmp(a.rawData(), b.rawData(), 1000 * 37 * sizeof(float)), 0);
  // Neighbouring seeds (splitmix64 streams one step apart unless mixed) give unrelated fills.
  for (std::uint64_t other : {6ULL, 8ULL, 7ULL + 0x9E3779B97F4A7C15ULL}) {
    const std::vector<double> x = valuesOf(a), y = valuesOf(draw(DType::Float32, Shape{1000, 37}, other));
    std::int64_t same = 0, shifted = 0;  // equal elements, and equal a run (509) apart
    for (std::size_t i = 0; i < x.size(); ++i) same += x[i] == y[i] ? 1 : 0;
    for (std::size_t i = 0; i + 509 < x.size(); ++i) shifted += x[i + 509] == y[i] ? 1 : 0;
    EXPECT_LT(same, 1000) << "seed " << other;
    EXPECT_LT(shifted, 1000) << "seed " << other;
  }
}

TEST(CliInputs, FillsArePinnedAcrossHosts) {
  // `--seed` reproduces a run's inputs on any host: these bits must not change silently
  // (docs/cli.md says what a seed produces).
  const Tensor t = draw(DType::Float32, Shape{4}, 1);
  // The bits of 0.0530, 1.4737, -0.8312 and -0.0551.
  const std::vector<std::uint32_t> pinned = {0x3d59439e, 0x3fbca34f, 0xbf54cc76, 0xbd61d0ee};
  for (std::size_t i = 0; i < pinned.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(t.data<float>()[i]), pinned[i]) << i << ": " << t.data<float>()[i];
  }
}

TEST(CliInputs, FloatFillsAreRoughlyStandardNormal) {
  const std::vector<double> x = valuesOf(draw(DType::Float32, Shape{1 << 20}, 3));
  double sum = 0, squares = 0, fourth = 0;
  std::int64_t within_one = 0;
  for (double v : x) {
    sum += v;
    squares += v * v;
    fourth += v * v * v * v;
    within_one += std::abs(v) < 1.0 ? 1 : 0;
    ASSERT_LE(std::abs(v), 3.5);
  }
  const double n = static_cast<double>(x.size());
  const double mean = sum / n, variance = squares / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(variance, 1.0, 0.03);
  EXPECT_NEAR(fourth / n, 2.7, 0.1);  // Irwin-Hall of four: kurtosis 3 - 1.2 / 4 (a normal's is 3)
  EXPECT_NEAR(static_cast<double>(within_one) / n, 0.683, 0.02);
  std::set<double> distinct(x.begin(), x.end());
  EXPECT_GT(distinct.size(), 10000U);
}

TEST(CliInputs, EveryDtypeGetsAVariedNonZeroFill) {
  const std::vector<double> f32 = valuesOf(draw(DType::Float32, Shape{3, 300}, 11));
  for (DType dtype : {DType::Float64, DType::Float16, DType::BFloat16}) {
    const std::vector<double> v = valuesOf(draw(dtype, Shape{3, 300}, 11));
    ASSERT_EQ(v.size(), f32.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      // The float32 values, rounded to the dtype.
      ASSERT_NEAR(v[i], f32[i], dtype == DType::Float64 ? 0.0 : std::abs(f32[i]) / 64 + 1e-3)
          << dtypeName(dtype) << " " << i;
    }
  }
  for (DType dtype : {DType::Int32, DType::Int64, DType::Bool}) {
    const std::vector<double> v = valuesOf(draw(dtype, Shape{3, 300}, 11));
    std::set<double> distinct(v.begin(), v.end());
    EXPECT_EQ(distinct.size(), dtype == DType::Bool ? 2U : 8U) << dtypeName(dtype);
    EXPECT_GE(*distinct.begin(), 0.0);
    EXPECT_LE(*distinct.rbegin(), dtype == DType::Bool ? 1.0 : 7.0);
  }
  // A one-element fill that would be 0 is made 1: never all zeros.
  for (std::uint64_t seed = 0; seed < 64; ++seed) {
    EXPECT_NE(valuesOf(draw(DType::Int64, Shape{1}, seed))[0], 0.0) << seed;
    EXPECT_NE(valuesOf(draw(DType::Bool, Shape{1}, seed))[0], 0.0) << seed;
  }
  EXPECT_EQ(draw(DType::Float32, Shape{0, 5}, 1).numel(), 0);
}

constexpr const char* kCell = R"(from shapevm import ops, Tensor


def cell(x: Tensor["batch", 8], h: Tensor["batch", 8], w: Tensor[8, 8]):
    return x @ w + h
)";

TEST(CliInputs, IterationsGetFreshDataAndWeightsAreDrawnOnce) {
  auto module = compilePython(kCell, "cell.py", FrontendOptions{});
  ASSERT_TRUE(module) << module.status().toString();
  const Function& fn = module->functions.at(0);
  InputPlan plan;
  plan.seed = 5;
  plan.dims.push_back(DimSchedule{"batch", {3, 4}});
  ASSERT_TRUE(validatePlan(fn, plan).isOk());
  const auto run = [&](const InputPlan& p, std::int64_t iteration, DrawnOnce* once) {
    std::string label;
    auto args = buildArguments(fn, p, iteration, &label, once);
    EXPECT_TRUE(args) << args.status().toString();
    EXPECT_EQ(label, iteration % 2 == 0 ? "batch=3" : "batch=4");
    std::vector<std::vector<double>> values;
    for (const Value& v : *args) values.push_back(valuesOf(v.tensor()));
    return values;
  };
  DrawnOnce once;
  const auto first = run(plan, 0, &once), second = run(plan, 1, &once), third = run(plan, 2, &once);
  EXPECT_EQ(first[0].size(), 24U);
  EXPECT_EQ(second[0].size(), 32U);
  // Same shape, another iteration: fresh x and h; x and h differ from each other too.
  EXPECT_NE(first[0], third[0]);
  EXPECT_NE(first[1], third[1]);
  EXPECT_NE(first[0], first[1]);
  // The weight: one draw, the same with or without the cache, at any iteration.
  EXPECT_EQ(first[2], second[2]);
  EXPECT_EQ(first[2], third[2]);
  EXPECT_EQ(run(plan, 2, nullptr), third);
  // The same seed reproduces a run; another seed changes every generated input.
  DrawnOnce again;
  EXPECT_EQ(run(plan, 0, &again), first);
  InputPlan other = plan;
  other.seed = 6;
  const auto changed = run(other, 0, nullptr);
  for (std::size_t i = 0; i < changed.size(); ++i) EXPECT_NE(changed[i], first[i]) << i;
}

}  // namespace
}  // namespace shapevm
