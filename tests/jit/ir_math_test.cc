// SPDX-License-Identifier: Apache-2.0
// ir_math: every float32 function, compiled into a vectorized map kernel (and an explicit
// <16 x float> one), against double-precision libm on dense sweeps and special values.
// Bound asserted: relative error <= 1e-6 wherever the double result is a normal float32
// (measured worst cases: exp/log ~8e-8, sigmoid/erf ~2e-7, tanh/silu ~2.5e-7, erfc/gelu ~5e-7 in their
// far tails); where the result is a denormal, absolute error <= 1e-44 (a few denormal ulps).
// float64 goes to libm, and must be bit-identical to the reference kernels' formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/ir_math.h"
#include "jit_test_util.h"

namespace shapevm::jit {
namespace {

using testing::sharedEngine;
using MathFn = llvm::Value* (*)(ir::Builder&, llvm::Value*);

constexpr double kMaxRelError = 1e-6;
constexpr double kMaxDenormalError = 1e-44;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct MathCase {
  const char* name;
  MathFn fn;
  double (*reference)(double);  // the reference kernels' double formula
};

double sigmoidRef(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}
double siluRef(double v) {
  return v / (1.0 + std::exp(-v));
}
double geluRef(double v) {
  return 0.5 * v * std::erfc(-v * 0.70710678118654752440);
}
double expRef(double v) {
  return std::exp(v);
}
double logRef(double v) {
  return std::log(v);
}
double tanhRef(double v) {
  return std::tanh(v);
}
double erfRef(double v) {
  return std::erf(v);
}
double erfcRef(double v) {
  return std::erfc(v);
}

const MathCase kCases[] = {
    {"exp", &ir::expF, &expRef},    {"log", &ir::logF, &logRef},
    {"tanh", &ir::tanhF, &tanhRef}, {"sigmoid", &ir::sigmoidF, &sigmoidRef},
    {"silu", &ir::siluF, &siluRef}, {"erf", &ir::erfF, &erfRef},
    {"erfc", &ir::erfcF, &erfcRef}, {"gelu", &ir::geluF, &geluRef},
};

// A compiled `out[i] = fn(in[i])` over args.shape[0][0] elements of `dtype` (float32 or float64).
// lanes == 1: a scalar loop the O3 pipeline vectorizes; lanes > 1: explicit <lanes x T> steps
// (the element count must then be a multiple of lanes). bare_estimate: the function is marked
// like the fused family's 16-lane kernels, so LLVM does not refine the reciprocal estimate.
class MapKernel {
 public:
  MapKernel(MathFn fn, DType dtype, unsigned lanes, const std::string& name, bool bare_estimate = false) {
    const std::string symbol = "svm_test_math_" + name;
    auto handle = sharedEngine().compile(symbol, [&](llvm::Module& module) {
      ir::Builder b(module.getContext());
      llvm::Function* function = ir::beginKernel(module, symbol, b);
      if (bare_estimate) function->addFnAttr("reciprocal-estimates", "vec-divf:0");
      ir::ArgsView args(b, function->getArg(0));
      llvm::Value* in = args.data(0);
      llvm::Value* out = args.data(1);
      ir::emitLoop(b, b.getInt64(0), args.dim(0, 0), lanes, [&](llvm::Value* i) {
        llvm::Value* x = ir::loadCompute(b, dtype, ir::elementPtr(b, dtype, in, i), lanes);
        ir::storeCompute(b, dtype, fn(b, x), ir::elementPtr(b, dtype, out, i));
      });
      b.CreateRetVoid();
      return Status::ok();
    });
    EXPECT_TRUE(handle.hasValue()) << handle.status().toString();
    if (handle) handle_ = *handle;
  }
  ~MapKernel() {
    if (handle_.address != nullptr) {
      EXPECT_TRUE(sharedEngine().remove(handle_).isOk());
    }
  }
  MapKernel(const MapKernel&) = delete;
  MapKernel& operator=(const MapKernel&) = delete;

  template <typename T>
  std::vector<T> operator()(const std::vector<T>& in) const {
    std::vector<T> out(in.size(), T(-12345));
    if (handle_.address == nullptr) return out;
    KernelArgs args{};
    args.data[0] = const_cast<T*>(in.data());
    args.data[1] = out.data();
    args.shape[0][0] = static_cast<std::int64_t>(in.size());
    reinterpret_cast<GeneratedKernelFn>(handle_.address)(&args);
    return out;
  }

 private:
  KernelHandle handle_;
};

// Worst relative error of got[i] against reference(x[i]) over results that are normal floats;
// denormal / zero results must be within kMaxDenormalError; NaN and inf must match exactly.
struct ErrorStats {
  double worst = 0.0;
  float worst_at = 0.0f;
  int failures = 0;
  std::string first_failure;
};

ErrorStats measure(const MathCase& c, const std::vector<float>& x, const std::vector<float>& got) {
  ErrorStats stats;
  auto fail = [&](std::size_t i, double want) {
    if (stats.failures++ == 0) {
      stats.first_failure = std::string(c.name) + "(" + std::to_string(x[i]) + ") = " + std::to_string(got[i]) +
                            ", expected " + std::to_string(want);
      char buffer[128];
      std::snprintf(buffer, sizeof(buffer), " [x = %.9g, got %.9g, want %.17g]", x[i], got[i], want);
      stats.first_failure += buffer;
    }
  };
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = c.reference(static_cast<double>(x[i]));
    const double g = got[i];
    if (std::isnan(want)) {
      if (!std::isnan(g)) fail(i, want);
      continue;
    }
    if (std::isinf(want) || std::isinf(static_cast<float>(want))) {
      if (g != static_cast<double>(static_cast<float>(want))) fail(i, want);
      continue;
    }
    if (std::fabs(want) < FLT_MIN) {
      if (!(std::fabs(g - want) <= kMaxDenormalError)) fail(i, want);
      continue;
    }
    const double rel = std::fabs(g - want) / std::fabs(want);
    if (!(rel <= kMaxRelError)) fail(i, want);
    if (rel > stats.worst || std::isnan(rel)) {
      stats.worst = rel;
      stats.worst_at = x[i];
    }
  }
  return stats;
}

// Evenly spaced points on [lo, hi] plus, for wide ranges, log-spaced magnitudes of both signs.
std::vector<float> sweep(float lo, float hi, int n) {
  std::vector<float> x;
  x.reserve(static_cast<std::size_t>(n) + 1);
  for (int i = 0; i <= n; ++i) x.push_back(static_cast<float>(lo + (static_cast<double>(hi) - lo) * i / n));
  return x;
}

std::vector<float> magnitudes(double from, double to, int n, bool negative_too) {
  std::vector<float> x;
  const double step = std::log(to / from) / n;
  for (int i = 0; i <= n; ++i) {
    const float v = static_cast<float>(from * std::exp(step * i));
    x.push_back(v);
    if (negative_too) x.push_back(-v);
  }
  return x;
}

const std::vector<float>& specialValues() {
  static const std::vector<float> values = {
      0.0f,        -0.0f,      kInf,   -kInf,   kNaN,   -kNaN,   1.0f,    -1.0f,    0.5f,       -0.5f,
      FLT_MIN,     -FLT_MIN,   1e-40f, -1e-40f, 1e-45f, -1e-45f, FLT_MAX, -FLT_MAX, 1e30f,      -1e30f,
      1e-30f,      -1e-30f,    88.0f,  88.7f,   89.0f,  -87.0f,  -103.0f, -104.0f,  -110.0f,    100.0f,
      -100.0f,     9.0f,       -9.0f,  10.0f,   -10.0f, 10.1f,   -14.0f,  0.625f,   -0.625f,    0.62499994f,
      0.99999994f, 1.0000001f, 4.0f,   -4.0f,   3.9f,   2.0f,    1e-7f,   -1e-7f,   1.4142135f, 0.70710677f};
  return values;
}

TEST(IrMath, Float32DenseSweepsWithinBound) {
  for (const MathCase& c : kCases) {
    MapKernel kernel(c.fn, DType::Float32, 1, c.name);
    std::vector<float> x;
    const std::string name = c.name;
    if (name == "log") {
      x = sweep(1e-6f, 8.0f, 800000);
      for (float v : sweep(0.5f, 2.0f, 300000)) x.push_back(v);
      for (float v : sweep(0.9999f, 1.0001f, 20000)) x.push_back(v);
      for (float v : magnitudes(1e-45, 3e38, 200000, false)) x.push_back(v);
    } else {
      const float range = name == "exp" ? 104.0f : name == "erfc" || name == "gelu" ? 16.0f : 40.0f;
      x = sweep(-range, range, 1000000);
      for (float v : sweep(-2.0f, 2.0f, 200000)) x.push_back(v);
      for (float v : magnitudes(1e-38, 1e3, 100000, true)) x.push_back(v);
    }
    // Odd length: the vector body, its epilogue and the scalar remainder all run.
    if (x.size() % 2 == 0) x.push_back(0.25f);
    const std::vector<float> got = kernel(x);
    const ErrorStats stats = measure(c, x, got);
    EXPECT_EQ(stats.failures, 0) << stats.failures << " points out of bound; first: " << stats.first_failure;
    EXPECT_LE(stats.worst, kMaxRelError) << c.name << " at " << stats.worst_at;
    std::printf("[ IrMath   ] %-8s max relative error %.3g at x = %.9g over %zu points\n", c.name, stats.worst,
                stats.worst_at, x.size());
  }
}

TEST(IrMath, Float32SpecialValues) {
  for (const MathCase& c : kCases) {
    MapKernel kernel(c.fn, DType::Float32, 1, std::string(c.name) + "_special");
    const std::vector<float>& x = specialValues();
    const std::vector<float> got = kernel(x);
    const ErrorStats stats = measure(c, x, got);
    EXPECT_EQ(stats.failures, 0) << stats.first_failure;
  }
}

// The exact limits of sigmoid and tanh (sigmoid 0 -> 0.5, saturation to exactly 1 / -1, the
// denormal tail, NaN, -0) hold on the scalar path and on explicit 16-lane vectors alike.
TEST(IrMath, SigmoidAndTanhLimitsOnScalarsAndVectors) {
  const std::vector<float> x = {-100.0f, -kInf, kInf, 0.0f, kNaN, 100.0f, 17.0f, 20.0f,
                                -20.0f,  9.5f,  10.0f, 11.0f, -0.0f, 0.625f, 1.0f, -3.0f};
  for (unsigned lanes : {1u, 16u}) {
    MapKernel sigmoid(&ir::sigmoidF, DType::Float32, lanes, "sigmoid_limits_" + std::to_string(lanes));
    MapKernel tanh(&ir::tanhF, DType::Float32, lanes, "tanh_limits_" + std::to_string(lanes));
    const std::vector<float> s = sigmoid(x);
    const std::vector<float> t = tanh(x);
    SCOPED_TRACE(lanes);
    EXPECT_GT(s[0], 0.0f);  // 3.78e-44, a denormal: not 0, not NaN
    EXPECT_NEAR(s[0], 3.7835e-44, 3e-45);
    EXPECT_EQ(s[1], 0.0f);
    EXPECT_EQ(s[2], 1.0f);
    EXPECT_EQ(s[3], 0.5f);
    EXPECT_TRUE(std::isnan(s[4]));
    EXPECT_EQ(s[5], 1.0f);
    EXPECT_EQ(s[7], 1.0f);
    EXPECT_EQ(t[2], 1.0f);
    EXPECT_EQ(t[7], 1.0f);
    EXPECT_EQ(t[8], -1.0f);
    EXPECT_EQ(t[10], 1.0f);
    EXPECT_EQ(t[11], 1.0f);
    EXPECT_TRUE(std::isnan(t[4]));
    EXPECT_TRUE(std::signbit(t[12]) && t[12] == 0.0f);
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) continue;
      const double want_s = sigmoidRef(x[i]);
      const double want_t = std::tanh(static_cast<double>(x[i]));
      if (want_s >= FLT_MIN) {
        EXPECT_LE(std::abs(s[i] - want_s) / want_s, kMaxRelError) << "sigmoid(" << x[i] << ")";
      }
      if (want_t != 0.0) {
        EXPECT_LE(std::abs(t[i] - want_t) / std::abs(want_t), kMaxRelError) << "tanh(" << x[i] << ")";
      }
    }
  }
}

TEST(IrMath, Float32Limits) {
  MapKernel exp_kernel(&ir::expF, DType::Float32, 1, "exp_limits");
  MapKernel log_kernel(&ir::logF, DType::Float32, 1, "log_limits");
  MapKernel tanh_kernel(&ir::tanhF, DType::Float32, 1, "tanh_limits");
  MapKernel erf_kernel(&ir::erfF, DType::Float32, 1, "erf_limits");
  MapKernel erfc_kernel(&ir::erfcF, DType::Float32, 1, "erfc_limits");
  MapKernel gelu_kernel(&ir::geluF, DType::Float32, 1, "gelu_limits");

  const auto e = exp_kernel(std::vector<float>{-kInf, kInf, 0.0f, 89.0f, -110.0f, kNaN});
  EXPECT_EQ(e[0], 0.0f);
  EXPECT_EQ(e[1], kInf);
  EXPECT_EQ(e[2], 1.0f);
  EXPECT_EQ(e[3], kInf);
  EXPECT_EQ(e[4], 0.0f);
  EXPECT_TRUE(std::isnan(e[5]));

  const auto l = log_kernel(std::vector<float>{0.0f, -0.0f, -1.0f, -kInf, kInf, 1.0f, kNaN, 1e-45f});
  EXPECT_EQ(l[0], -kInf);
  EXPECT_EQ(l[1], -kInf);
  EXPECT_TRUE(std::isnan(l[2]));
  EXPECT_TRUE(std::isnan(l[3]));
  EXPECT_EQ(l[4], kInf);
  EXPECT_EQ(l[5], 0.0f);
  EXPECT_TRUE(std::isnan(l[6]));
  EXPECT_NEAR(l[7], std::log(1.4012984643e-45), 1e-5);

  const auto t = tanh_kernel(std::vector<float>{20.0f, -20.0f, kInf, -kInf, -0.0f, 1e-30f, kNaN});
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[1], -1.0f);
  EXPECT_EQ(t[2], 1.0f);
  EXPECT_EQ(t[3], -1.0f);
  EXPECT_EQ(t[4], 0.0f);
  EXPECT_TRUE(std::signbit(t[4]));
  EXPECT_EQ(t[5], 1e-30f);
  EXPECT_TRUE(std::isnan(t[6]));

  // sigmoid: SigmoidAndTanhLimitsOnScalarsAndVectors.

  const auto r = erf_kernel(std::vector<float>{kInf, -kInf, 5.0f, -0.0f, kNaN});
  EXPECT_EQ(r[0], 1.0f);
  EXPECT_EQ(r[1], -1.0f);
  EXPECT_EQ(r[2], 1.0f);
  EXPECT_TRUE(std::signbit(r[3]) && r[3] == 0.0f);
  EXPECT_TRUE(std::isnan(r[4]));

  const auto rc = erfc_kernel(std::vector<float>{kInf, -kInf, 0.0f, 20.0f, kNaN});
  EXPECT_EQ(rc[0], 0.0f);
  EXPECT_EQ(rc[1], 2.0f);
  EXPECT_EQ(rc[2], 1.0f);
  EXPECT_EQ(rc[3], 0.0f);
  EXPECT_TRUE(std::isnan(rc[4]));

  // gelu(-inf) is the reference's -inf * erfc(inf) = -inf * 0 = NaN; gelu(+inf) = inf.
  const auto g = gelu_kernel(std::vector<float>{kInf, -kInf, 0.0f, -30.0f, kNaN});
  EXPECT_EQ(g[0], kInf);
  EXPECT_TRUE(std::isnan(g[1]));
  EXPECT_EQ(g[2], 0.0f);
  EXPECT_EQ(g[3], 0.0f);
  EXPECT_TRUE(std::isnan(g[4]));
}

// The functions take <N x float> too (what the vectorizer produces from the scalar form).
TEST(IrMath, ExplicitVectorsAgreeWithTheBound) {
  for (const MathCase& c : kCases) {
    MapKernel kernel(c.fn, DType::Float32, 16, std::string(c.name) + "_v16");
    std::vector<float> x = sweep(std::string(c.name) == "log" ? 1e-3f : -12.0f, 12.0f, 16 * 4096 - 1);
    for (float v : specialValues()) x.push_back(v);
    while (x.size() % 16 != 0) x.push_back(1.5f);
    const ErrorStats stats = measure(c, x, kernel(x));
    EXPECT_EQ(stats.failures, 0) << stats.first_failure;
  }
}

// Inputs whose sigmoid and tanh are exact limits, and the check of them: sigmoid(0) = 0.5,
// saturation to 1 and -1 (at 17, 20, 10, 9.5, inf), sigmoid(-inf) = 0, tanh(-0) = -0, NaN; the
// 12th is sigmoid's denormal tail (-100).
const std::vector<float> kLimitInputs = {0.0f,  100.0f, 17.0f, 20.0f,   kInf, -kInf, kNaN,  -0.0f,
                                         10.0f, -10.0f, 9.5f,  -100.0f, 1.0f, -1.0f, 89.0f, -110.0f};

void expectSigmoidTanhLimits(const std::vector<float>& s, const std::vector<float>& t) {
  EXPECT_EQ(s[0], 0.5f);
  EXPECT_EQ(s[1], 1.0f);
  EXPECT_EQ(s[2], 1.0f);
  EXPECT_EQ(s[4], 1.0f);
  EXPECT_EQ(s[5], 0.0f);
  EXPECT_TRUE(std::isnan(s[6]));
  EXPECT_EQ(s[7], 0.5f);
  EXPECT_EQ(t[0], 0.0f);
  EXPECT_EQ(t[3], 1.0f);
  EXPECT_EQ(t[4], 1.0f);
  EXPECT_EQ(t[5], -1.0f);
  EXPECT_TRUE(std::isnan(t[6]));
  EXPECT_TRUE(std::signbit(t[7]) && t[7] == 0.0f);
  EXPECT_EQ(t[8], 1.0f);
  EXPECT_EQ(t[9], -1.0f);
}

// The fused family's 16-lane kernels on AVX-512 take vrcp14ps without LLVM's Newton step
// (codegen_fused.cc): ir_math's own step must still keep every sigmoid/tanh/silu within the bound
// and the limits exact (sigmoid(0) = 0.5 and saturation to 1 come from exact reciprocals).
TEST(IrMath, SixteenLanesWithTheBareReciprocalEstimate) {
  if (!sharedEngine().hasAvx512()) GTEST_SKIP() << "the fused family marks only AVX-512 kernels so";
  for (const MathCase& c : kCases) {
    const std::string name = c.name;
    if (name != "sigmoid" && name != "tanh" && name != "silu") continue;
    MapKernel kernel(c.fn, DType::Float32, 16, name + "_bare_v16", /*bare_estimate=*/true);
    std::vector<float> x = sweep(-30.0f, 30.0f, 16 * 16384 - 1);
    for (float v : magnitudes(1e-30, 130.0, 40000, true)) x.push_back(v);
    for (float v : specialValues()) x.push_back(v);
    while (x.size() % 16 != 0) x.push_back(0.0f);
    const ErrorStats stats = measure(c, x, kernel(x));
    EXPECT_EQ(stats.failures, 0) << stats.first_failure;
    EXPECT_LT(stats.worst, 5e-7) << name << " at " << stats.worst_at;
  }
  MapKernel sigmoid(&ir::sigmoidF, DType::Float32, 16, "sigmoid_bare_limits", true);
  MapKernel tanh(&ir::tanhF, DType::Float32, 16, "tanh_bare_limits", true);
  const std::vector<float> s = sigmoid(kLimitInputs);
  EXPECT_NEAR(s[11], 3.7835e-44, 3e-45);
  expectSigmoidTanhLimits(s, tanh(kLimitInputs));
}

// ---- The 16-bit variants (exp16F, sigmoid16F, tanh16F): for a result rounded to bfloat16/float16 ----

constexpr double kMax16RelError = 0x1p-13;        // ir_math.h's contract
constexpr double kMax16DenormalError = 0x1p-139;  // 2^-13 of the smallest normal float

const MathCase k16Cases[] = {
    {"exp16", &ir::exp16F, &expRef},
    {"sigmoid16", &ir::sigmoid16F, &sigmoidRef},
    {"tanh16", &ir::tanh16F, &tanhRef},
};

// v rounded to nearest even on a float format with `digits` significant bits whose normal range
// starts at 2^min_exponent (denormals below it keep its spacing): bfloat16 8, -126; float16 11, -14.
double roundToFormat(double v, int digits, int min_exponent) {
  if (v == 0.0 || !std::isfinite(v)) return v;
  const int exponent = std::max(std::ilogb(v), min_exponent);
  const double quantum = std::ldexp(1.0, exponent - digits + 1);
  return std::nearbyint(v / quantum) * quantum;
}

// The spacing of the format at v's magnitude (as roundToFormat).
double formatUlp(double v, int digits, int min_exponent) {
  const int exponent = v == 0.0 ? min_exponent : std::max(std::ilogb(v), min_exponent);
  return std::ldexp(1.0, exponent - digits + 1);
}

// Points with a normal float result within the relative bound, the rest as measure() checks them
// (NaN, inf and denormal results as the float32 functions'); and rounded to bfloat16 and to float16,
// every result within 1 ulp of the correctly rounded exact value. Returns the share of results
// whose bfloat16 rounding differs from the correctly rounded one.
struct Stats16 {
  ErrorStats error;
  int off_by_more = 0;
  std::string first_off;
  std::size_t bf16_different = 0;
};

Stats16 measure16(const MathCase& c, const std::vector<float>& x, const std::vector<float>& got) {
  Stats16 stats;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = c.reference(static_cast<double>(x[i]));
    const double g = got[i];
    if (std::isnan(want)) {
      if (!std::isnan(g) && stats.error.failures++ == 0) stats.error.first_failure = std::string(c.name) + " NaN";
      continue;
    }
    if (std::isinf(static_cast<float>(want))) {
      if (g != static_cast<double>(static_cast<float>(want)) && stats.error.failures++ == 0) {
        stats.error.first_failure = std::string(c.name) + "(" + std::to_string(x[i]) + ") not " + std::to_string(want);
      }
      continue;
    }
    if (std::fabs(want) >= FLT_MIN) {
      const double rel = std::fabs(g - want) / std::fabs(want);
      if (!(rel <= kMax16RelError) && stats.error.failures++ == 0) {
        char buffer[160];
        std::snprintf(buffer, sizeof(buffer), "%s(%.9g) = %.9g, want %.17g", c.name, x[i], got[i], want);
        stats.error.first_failure = buffer;
      }
      if (rel > stats.error.worst || std::isnan(rel)) {
        stats.error.worst = rel;
        stats.error.worst_at = x[i];
      }
    } else if (!(std::fabs(g - want) <= kMax16DenormalError) && stats.error.failures++ == 0) {
      stats.error.first_failure = std::string(c.name) + " denormal at " + std::to_string(x[i]);
    }
    for (const auto& [digits, min_exponent] : {std::pair{8, -126}, std::pair{11, -14}}) {
      if (digits == 11 && std::fabs(want) > 65504.0) continue;  // float16 overflows
      const double want16 = roundToFormat(want, digits, min_exponent);
      const double got16 = roundToFormat(g, digits, min_exponent);
      const double ulp = formatUlp(std::min(std::fabs(want16), std::fabs(got16)), digits, min_exponent);
      if (!(std::fabs(got16 - want16) <= ulp) && stats.off_by_more++ == 0) {
        char buffer[160];
        std::snprintf(buffer, sizeof(buffer), "%s(%.9g): %d-bit rounding %.9g, correctly rounded %.9g", c.name, x[i],
                      digits, got16, want16);
        stats.first_off = buffer;
      }
      if (digits == 8 && got16 != want16) ++stats.bf16_different;
    }
  }
  return stats;
}

// Dense sweeps as for the float32 functions, on the vectorizer's choice of width (scalar
// remainders included), on explicit 16-lane vectors with LLVM's step, and with the bare 14-bit
// estimate as the fused family's 16-lane kernels compile them.
TEST(IrMath, SixteenBitVariantsWithinTheirBoundAndOneUlp) {
  for (const MathCase& c : k16Cases) {
    const std::string name = c.name;
    std::vector<float> x = sweep(name == "exp16" ? -104.0f : -40.0f, name == "exp16" ? 89.0f : 40.0f, 16 * 65536 - 1);
    for (float v : sweep(-2.0f, 2.0f, 16 * 16384)) x.push_back(v);
    for (float v : magnitudes(1e-38, 130.0, 100000, true)) x.push_back(v);
    for (float v : specialValues()) x.push_back(v);
    while (x.size() % 16 != 0) x.push_back(0.375f);
    x.push_back(-0.375f);  // odd length for the scalar loop's remainder
    for (const auto& [lanes, bare] : {std::pair{1u, false}, std::pair{16u, false}, std::pair{16u, true}}) {
      if (bare && !sharedEngine().hasAvx512()) continue;
      std::vector<float> in = x;
      if (lanes == 16) in.pop_back();
      const std::string variant = name + "_" + std::to_string(lanes) + (bare ? "_bare" : "");
      MapKernel kernel(c.fn, DType::Float32, lanes, variant, bare);
      const Stats16 stats = measure16(c, in, kernel(in));
      SCOPED_TRACE(variant);
      EXPECT_EQ(stats.error.failures, 0) << stats.error.first_failure;
      EXPECT_LE(stats.error.worst, kMax16RelError) << " at " << stats.error.worst_at;
      EXPECT_EQ(stats.off_by_more, 0) << stats.first_off;
      std::printf(
          "[ IrMath   ] %-16s max relative error %.3g at x = %.9g; bfloat16 rounding differs at %.3g%% of %zu "
          "points\n",
          variant.c_str(), stats.error.worst, stats.error.worst_at,
          100.0 * static_cast<double>(stats.bf16_different) / static_cast<double>(in.size()), in.size());
    }
  }
}

// The limits are exact: sigmoid(0) = 0.5, saturation to 1 and -1, the denormal tail of sigmoid,
// -0, NaN, e^x's overflow and underflow. In float32 where the reciprocal is vrcp14ps (16 lanes,
// exact at powers of two) or a divide; 8-lane code (the vectorizer's choice for the scalar loop)
// and AVX2 code refine vrcpps by LLVM's one Newton step, so saturation may be 1 - 2^-24 there,
// which rounds to 1 in bfloat16 and float16: those are checked rounded to bfloat16.
TEST(IrMath, SixteenBitVariantsKeepTheLimits) {
  for (const auto& [lanes, bare] : {std::pair{1u, false}, std::pair{16u, false}, std::pair{16u, true}}) {
    if (bare && !sharedEngine().hasAvx512()) continue;
    const std::string suffix = "_limits_" + std::to_string(lanes) + (bare ? "_bare" : "");
    MapKernel sigmoid(&ir::sigmoid16F, DType::Float32, lanes, "sigmoid16" + suffix, bare);
    MapKernel tanh(&ir::tanh16F, DType::Float32, lanes, "tanh16" + suffix, bare);
    MapKernel exp(&ir::exp16F, DType::Float32, lanes, "exp16" + suffix, bare);
    std::vector<float> s = sigmoid(kLimitInputs);
    std::vector<float> t = tanh(kLimitInputs);
    const std::vector<float> e = exp(kLimitInputs);
    SCOPED_TRACE(suffix);
    EXPECT_NEAR(s[11], 3.7835e-44, 3e-45);
    if (lanes == 1 || !sharedEngine().hasAvx512()) {  // 8-lane vectors (AVX2 splits 16 lanes so)
      for (std::vector<float>* v : {&s, &t}) {
        for (float& value : *v) value = static_cast<float>(roundToFormat(value, 8, -126));
      }
    }
    expectSigmoidTanhLimits(s, t);
    EXPECT_EQ(e[0], 1.0f);
    EXPECT_EQ(e[4], kInf);
    EXPECT_EQ(e[5], 0.0f);
    EXPECT_TRUE(std::isnan(e[6]));
    EXPECT_EQ(e[14], kInf);
    EXPECT_EQ(e[15], 0.0f);
  }
}

// float64: libm (intrinsics or calls), bit-identical to the reference kernels' double formulas.
TEST(IrMath, Float64MatchesTheReferenceFormulasExactly) {
  std::vector<double> x;
  for (int i = 0; i <= 20000; ++i) x.push_back(-30.0 + 60.0 * i / 20000.0);
  for (double v : {0.0, -0.0, 1e-300, -1e-300, 700.0, -700.0, 1e300}) x.push_back(v);
  for (const MathCase& c : kCases) {
    MapKernel kernel(c.fn, DType::Float64, 1, std::string(c.name) + "_f64");
    const std::vector<double> got = kernel(x);
    int mismatches = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = c.reference(x[i]);
      const bool same = (std::isnan(want) && std::isnan(got[i])) || want == got[i];
      if (!same && mismatches++ == 0) {
        ADD_FAILURE() << c.name << "(" << x[i] << ") = " << got[i] << ", reference " << want;
      }
    }
    EXPECT_EQ(mismatches, 0) << c.name;
  }
}

// sigmoid(x) * tanh(y) with one shared reciprocal (sigmoidTimesTanhF, the LSTM gates' products),
// on random pairs over the gates' range, wide magnitudes and the special values crossed with each
// other: on the vectorizer's width (scalar remainders: an odd count), on explicit 16 lanes, and on
// 16 lanes with the bare reciprocal estimate (as the fused family compiles them), against the
// double product. Normal results within 1e-6, denormal ones within 1e-44, NaN and -0 kept.
class ProductKernel {
 public:
  ProductKernel(unsigned lanes, const std::string& name, bool bare_estimate) {
    auto handle = sharedEngine().compile("svm_test_math_" + name, [&](llvm::Module& module) {
      ir::Builder b(module.getContext());
      llvm::Function* function = ir::beginKernel(module, "svm_test_math_" + name, b);
      if (bare_estimate) function->addFnAttr("reciprocal-estimates", "vec-divf:0");
      ir::ArgsView args(b, function->getArg(0));
      llvm::Value* xs = args.data(0);
      llvm::Value* ys = args.data(1);
      llvm::Value* out = args.data(2);
      ir::emitLoop(b, b.getInt64(0), args.dim(0, 0), lanes, [&](llvm::Value* i) {
        llvm::Value* x = ir::loadCompute(b, DType::Float32, ir::elementPtr(b, DType::Float32, xs, i), lanes);
        llvm::Value* y = ir::loadCompute(b, DType::Float32, ir::elementPtr(b, DType::Float32, ys, i), lanes);
        ir::storeCompute(b, DType::Float32, ir::sigmoidTimesTanhF(b, x, y), ir::elementPtr(b, DType::Float32, out, i));
      });
      b.CreateRetVoid();
      return Status::ok();
    });
    EXPECT_TRUE(handle.hasValue()) << handle.status().toString();
    if (handle) handle_ = *handle;
  }
  ~ProductKernel() {
    if (handle_.address != nullptr) {
      EXPECT_TRUE(sharedEngine().remove(handle_).isOk());
    }
  }
  ProductKernel(const ProductKernel&) = delete;
  ProductKernel& operator=(const ProductKernel&) = delete;

  std::vector<float> operator()(const std::vector<float>& x, const std::vector<float>& y) const {
    std::vector<float> out(x.size(), -12345.0f);
    if (handle_.address == nullptr) return out;
    KernelArgs args{};
    args.data[0] = const_cast<float*>(x.data());
    args.data[1] = const_cast<float*>(y.data());
    args.data[2] = out.data();
    args.shape[0][0] = static_cast<std::int64_t>(x.size());
    reinterpret_cast<GeneratedKernelFn>(handle_.address)(&args);
    return out;
  }

 private:
  KernelHandle handle_;
};

TEST(IrMath, SigmoidTimesTanhSharesOneReciprocalWithinBound) {
  std::mt19937 rng(20);
  std::vector<float> x, y;
  std::uniform_real_distribution<float> gates(-12.0f, 12.0f);
  std::uniform_real_distribution<double> exponent(-30.0, 2.1);
  for (int i = 0; i < 150000; ++i) {
    x.push_back(gates(rng));
    y.push_back(gates(rng));
  }
  for (int i = 0; i < 50000; ++i) {  // wide magnitudes, both signs, into sigmoid's denormal tail
    x.push_back(static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::pow(10.0, exponent(rng))));
    y.push_back(static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::pow(10.0, exponent(rng))));
  }
  for (float a : specialValues()) {
    for (float c : specialValues()) {
      x.push_back(a);
      y.push_back(c);
    }
  }
  if (x.size() % 2 == 0) {  // an odd count: the vectorized loop's scalar remainder runs too
    x.push_back(-5.5f);
    y.push_back(0.75f);
  }
  for (const auto& [lanes, bare] : {std::pair{1u, false}, std::pair{16u, false}, std::pair{16u, true}}) {
    if (bare && !sharedEngine().hasAvx512()) continue;
    SCOPED_TRACE(std::to_string(lanes) + (bare ? " lanes, bare estimate" : " lanes"));
    std::vector<float> xs = x, ys = y;
    while (lanes > 1 && xs.size() % lanes != 0) {
      xs.push_back(1.0f);
      ys.push_back(1.0f);
    }
    ProductKernel kernel(lanes, "sigmoid_tanh_" + std::to_string(lanes) + (bare ? "_bare" : ""), bare);
    const std::vector<float> got = kernel(xs, ys);
    int failures = 0;
    double worst = 0.0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double want = sigmoidRef(xs[i]) * tanhRef(ys[i]);
      const double g = got[i];
      bool ok = true;
      if (std::isnan(want)) {
        ok = std::isnan(g);
      } else if (std::fabs(want) < FLT_MIN) {
        ok = std::fabs(g - want) <= kMaxDenormalError && (want != 0.0 || std::signbit(g) == std::signbit(want));
      } else {
        const double rel = std::fabs(g - want) / std::fabs(want);
        worst = std::max(worst, rel);
        ok = rel <= kMaxRelError;
      }
      if (!ok && failures++ < 3) {
        ADD_FAILURE() << "sigmoid(" << xs[i] << ") * tanh(" << ys[i] << ") = " << got[i] << ", want " << want;
      }
    }
    EXPECT_EQ(failures, 0);
    EXPECT_LT(worst, 6e-7);
  }
}

}  // namespace
}  // namespace shapevm::jit
