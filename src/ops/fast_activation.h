// SPDX-License-Identifier: Apache-2.0
// Float32 tanh for the reference kernels, bit for bit what the scalar path gives (tanh(x) in
// double with libm, rounded once to float), at about a third of its cost: branch-free double
// polynomials in four lanes (AVX2+FMA where the CPU has them), with a rounding test. The
// polynomial result is within a few units of double rounding of the libm one (the analysis is
// beside each function), so when it lies more than kMargin double units from the midpoint
// between two floats, both round to the same float. Elements that fail the test (about 1 in
// 60,000), non-finite inputs and results below the normal float range are marked inexact: the
// caller computes those with the scalar path. (Sigmoid was measured too: libm's exp is already
// as fast as four lanes of this.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace shapevm::fastmath {

// Elements per call of the block functions below.
inline constexpr int kBlock = 256;

namespace detail {

// Four lanes (GCC vector extensions: AVX2 registers where the target has them, two SSE2
// registers otherwise; comparisons give all-ones lanes, ?: selects per lane). Everything is in
// one function: a vector passed to or returned from a function would be an ABI question.
using D4 = double __attribute__((vector_size(32)));
using I4 = std::int64_t __attribute__((vector_size(32)));
using F4 = float __attribute__((vector_size(16)));
using C4 = unsigned char __attribute__((vector_size(4)));

// Distance, in units of the last place of a double, from a float rounding midpoint that
// guarantees the same float as any value within 2^9 units (errors here are < 2^4 units).
inline constexpr std::int64_t kMargin = std::int64_t{1} << 12;

// exp's Taylor coefficients 1/13! ... 1/0! and expm1(y)/y's 1/17! ... 1/1!.
inline constexpr double kExp[] = {1.0 / 6227020800.0,
                                  1.0 / 479001600.0,
                                  1.0 / 39916800.0,
                                  1.0 / 3628800.0,
                                  1.0 / 362880.0,
                                  1.0 / 40320.0,
                                  1.0 / 5040.0,
                                  1.0 / 720.0,
                                  1.0 / 120.0,
                                  1.0 / 24.0,
                                  1.0 / 6.0,
                                  0.5,
                                  1.0,
                                  1.0};
inline constexpr double kExpm1[] = {1.0 / 355687428096000.0,
                                    1.0 / 20922789888000.0,
                                    1.0 / 1307674368000.0,
                                    1.0 / 87178291200.0,
                                    1.0 / 6227020800.0,
                                    1.0 / 479001600.0,
                                    1.0 / 39916800.0,
                                    1.0 / 3628800.0,
                                    1.0 / 362880.0,
                                    1.0 / 40320.0,
                                    1.0 / 5040.0,
                                    1.0 / 720.0,
                                    1.0 / 120.0,
                                    1.0 / 24.0,
                                    1.0 / 6.0,
                                    0.5,
                                    1.0};

// tanh(|x|): below 0.55, -m / (2 + m) with m = expm1(-2|x|) in (-0.67, 0] (no cancellation): y
// times its Taylor series to y^16 / 17! (remainder < 1.1^17 / 18! < 2^-55 relative; each term
// smaller than the last, so Horner's rounding stays below 2 units). From 0.55 on, (1 - e) / (1 + e)
// with e = exp(-2|x|) <= 0.34, |x| clamped to 40 (where both are 1.0 in double, as libm's tanh
// is from 19.1 on): t = n ln2 + r with |r| <= ln2 / 2 (+ 2^-40), exp(r) by its Taylor polynomial
// to r^13 (remainder < 0.35^14 / 14! < 2^-57; ln2 split with a 32-bit high part, so n ln2 is
// exact), scaled by 2^n through the exponent bits. Each form is within 6 units of the true value,
// libm's tanh within 1. The sign is x's (tanh(-0) = -0). A lane is exact when the result is
// finite, at least 2^-125, and its 29 bits below float precision are more than kMargin from the
// midpoint 2^28 (then it rounds to the same float as every double within 2^9 units of it).
[[gnu::always_inline]] inline void tanhBody(const float* x, float* out, unsigned char* exact, int n) {
  const I4 sign_bit = I4{1, 1, 1, 1} << 63;
  const D4 zero = {0.0, 0.0, 0.0, 0.0};
  for (int k = 0; k < n; k += 4) {
    F4 xf;
    __builtin_memcpy(&xf, x + k, sizeof(xf));
    const D4 v = __builtin_convertvector(xf, D4);
    const D4 a = reinterpret_cast<D4>(reinterpret_cast<I4>(v) & ~sign_bit);
    const I4 finite = a <= 3.4028234663852886e38;  // 0 for NaN and infinities
    const I4 small = a < 0.55;
    // expm1(y), y = -2 min(|x|, 0.55) (a NaN lane: 0).
    const D4 y = (a < 0.55 ? a : zero + 0.55) * -2.0;
    D4 p = zero + kExpm1[0];
    for (std::size_t c = 1; c < std::size(kExpm1); ++c) p = p * y + kExpm1[c];
    const D4 m = p * y;
    // exp(t), t = -2 clamp(|x|, 0.55, 40) (a NaN lane: -1.1).
    const D4 above = a > 0.55 ? a : zero + 0.55;
    const D4 t = (above < 40.0 ? above : zero + 40.0) * -2.0;
    const D4 shift = zero + 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
    const D4 z = t * 1.4426950408889634074 + shift;
    const D4 nearest = z - shift;
    const D4 r = (t - nearest * 6.93147180369123816490e-01) - nearest * 1.90821492927058770002e-10;
    D4 q = zero + kExp[0];
    for (std::size_t c = 1; c < std::size(kExp); ++c) q = q * r + kExp[c];
    // z's low bits hold n (two's complement): n + 1023 in the exponent field is 2^n.
    const D4 e = q * reinterpret_cast<D4>((reinterpret_cast<I4>(z) + 1023) << 52);
    const D4 magnitude = (small ? -m : 1.0 - e) / (small ? m + 2.0 : e + 1.0);
    const D4 result = reinterpret_cast<D4>(reinterpret_cast<I4>(magnitude) | (reinterpret_cast<I4>(v) & sign_bit));
    const F4 rounded = __builtin_convertvector(result, F4);
    __builtin_memcpy(out + k, &rounded, sizeof(rounded));
    const I4 bits = reinterpret_cast<I4>(result);
    const I4 from = (bits & ((std::int64_t{1} << 29) - 1)) - ((std::int64_t{1} << 28) - kMargin);
    const I4 exponent = (bits >> 52) & 0x7FF;
    const I4 ok = finite & ((from < 0) | (from > 2 * kMargin)) & (exponent >= 1023 - 125) & (exponent < 0x7FF);
    const C4 flags = __builtin_convertvector(ok, C4) & 1;
    __builtin_memcpy(exact + k, &flags, sizeof(flags));
  }
}

[[gnu::target("avx2,fma")]] inline void tanhAvx2(const float* x, float* out, unsigned char* exact, int n) {
  tanhBody(x, out, exact, n);
}
inline void tanhBaseline(const float* x, float* out, unsigned char* exact, int n) {
  tanhBody(x, out, exact, n);
}

inline bool hasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

}  // namespace detail

// out[k] = (float) tanh(x[k]) for k < n <= kBlock, exact[k] = 1 where that is certain to be
// the scalar path's float; 0 where the caller must compute it (out[k] is then unspecified).
// The arrays are read and written in fours: room for n rounded up to a multiple of 4.
inline void tanhBlock(const float* x, float* out, unsigned char* exact, int n) {
  if (detail::hasAvx2Fma()) {
    detail::tanhAvx2(x, out, exact, n);
  } else {
    detail::tanhBaseline(x, out, exact, n);
  }
}

}  // namespace shapevm::fastmath
