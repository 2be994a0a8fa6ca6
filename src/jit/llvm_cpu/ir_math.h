// SPDX-License-Identifier: Apache-2.0
// Vectorizable math in IR: float32 (scalar or <N x float>) functions built from arithmetic,
// bit operations and selects only — no libm calls — so the loop vectorizer keeps whole loops in
// vector registers. Every branch of a piecewise function is computed and the result selected.
// Accuracy (tests/jit/ir_math_test.cc, against double-precision libm over dense sweeps, bound
// asserted 1e-6): worst relative error wherever the result is a normal float: exp, log ~8e-8,
// sigmoid, erf ~2e-7, tanh, silu ~2.5e-7, erfc, gelu ~5e-7 (far tails); denormal results within a
// few denormal ulps (every factor is applied before the final power-of-two scaling, so a denormal
// result is rounded once). NaN propagated; overflow to +inf and underflow to 0 like libm; limits
// exact (tanh(±big) = ±1, sigmoid(-100) = 3.78e-44, erf(±big) = ±1, log(0) = -inf, log(x < 0) = NaN).
// At ±inf, silu and gelu give what the reference's formulas give (silu(-inf) = gelu(-inf) = NaN).
// The 16-bit variants (exp16F, sigmoid16F, tanh16F) are for a float32 result that is rounded to
// bfloat16 or float16 (the code generators take them for bfloat16 only: codegen_math.h
// sixteenBitMathFor) before anything but products, quotients or tanh reads it: the same reduction
// with ln2 in one part, a degree-3 polynomial for e^r and the bare reciprocal estimate (vrcp14ps on
// 16-lane AVX-512 kernels marked "vec-divf:0", LLVM's one Newton step on other vectors, a divide on
// scalars). Contract (tests/jit/ir_math_test.cc, the same sweeps): relative error <= 2^-13
// (1.22e-4) wherever the result is a normal float (measured: exp 6.5e-6; sigmoid 6.3e-6 and tanh
// 1.8e-5 with a refined reciprocal, 5.4e-5 and 4.4e-5 with the bare vrcp14ps); denormal results
// within 2^-139 absolute; NaN, +-inf, the limits and signed zeros exact as above (on 8-lane
// vectors, where LLVM refines vrcpps by one Newton step, saturation may read 1 - 2^-24, which
// rounds to 1 in 16 bits). sigmoid and tanh take 5 instructions fewer than the float32 functions, exp 3. Rounded to
// a 16-bit float, such a result is within 1 ulp of the correctly rounded value (2^-13 is below
// half the smallest relative ulp: 2^-9 in bfloat16, 2^-12 in float16), and equal to it unless the
// exact value lies within 2^-13 relative of a rounding boundary (measured: 0.01-0.25% of results in
// bfloat16, up to 1.4% in float16). A product of two such values (h' = o tanh(c') in the LSTM
// gates) is within 2^-12, still inside that ulp.
// float64 values (scalar or vector) go to LLVM's libm intrinsics or to the C library's functions
// (tanh, erf, erfc) instead; their formulas match the reference kernels' (src/ops/elementwise_ops.cc)
// operation for operation, so float64 results are bit-identical to the reference.
#pragma once

#include "jit/llvm_cpu/codegen_util.h"

namespace shapevm::jit::ir {

// e^x: Cody-Waite reduction x = n*ln2 + r, |r| <= ln2/2, degree-7 polynomial, scale by 2^n in two
// steps so results down to the denormal range are right. Max relative error ~8e-8.
llvm::Value* expF(Builder& b, llvm::Value* x);

// e^x for a 16-bit result (see above).
llvm::Value* exp16F(Builder& b, llvm::Value* x);

// ln x: x = m * 2^e with m in [sqrt(1/2), sqrt(2)) (denormals pre-scaled by 2^23), f = m - 1 exact,
// ln(1+f) = f - f^2/2 + f^3 P(f) (degree 8), plus e*ln2 in two parts. x < 0 -> NaN, 0 -> -inf.
llvm::Value* logF(Builder& b, llvm::Value* x);

// tanh x = sign(x) (-u / (u + 2)) with u = e^{-2|x|} - 1 (no cancellation near 0), from the same
// reduction as sigmoid: one formula for every x, no select. 1 / (u + 2) is a reciprocal estimate
// refined by Newton steps, as in sigmoid.
llvm::Value* tanhF(Builder& b, llvm::Value* x);

// tanh x for a 16-bit result (see above).
llvm::Value* tanh16F(Builder& b, llvm::Value* x);

// 1 / (1 + e^-x), evaluated as e/(1+e) with e = e^-|x| for x < 0 so the left tail keeps its
// relative accuracy (sigmoid(-100) = 3.78e-44, never NaN). The reduction rounds with one add
// (no round/convert) and scales by 2^(n + 64) * 2^-64, so one power of two from the exponent
// bits covers the denormal range; NaN passes through without a final select.
llvm::Value* sigmoidF(Builder& b, llvm::Value* x);

// sigmoid x for a 16-bit result (see above).
llvm::Value* sigmoid16F(Builder& b, llvm::Value* x);

// sigmoid(x) * tanh(y) with one reciprocal for both (the LSTM gates' i tanh(g) and o tanh(c')):
// sign(y) |m u| / ((1 + e)(u + 2)) from sigmoidF's m / (1 + e) and tanhF's u / (u + 2): one
// reciprocal estimate and Newton step (two FMAs) fewer than the two functions and their product,
// as many multiplies. Within 6e-7 of the exact product wherever it is a normal float (denormal
// results within a few of the smallest denormal); NaN in either gives NaN, the sign is y's.
llvm::Value* sigmoidTimesTanhF(Builder& b, llvm::Value* x, llvm::Value* y);

// x * sigmoid(x), x applied before the final scaling so the left tail keeps relative accuracy
// down to the denormals (float64: x / (1 + e^-x), the reference's formula).
llvm::Value* siluF(Builder& b, llvm::Value* x);

// erf x: x P(x^2) for |x| < 1; else sign(x) (1 - erfc|x|).
llvm::Value* erfF(Builder& b, llvm::Value* x);

// erfc x: 1 - erf x for |x| < 0.5; else e^{-x^2} * erfcx(|x|) (x > 0) or 2 - that (x < 0), with
// erfcx(a) = e^{a^2} erfc(a) a degree-10 polynomial in t = 1/(1 + a/2) on [0.5, 10.1] and a^2 split
// exactly into two floats, so the right tail has full relative accuracy down to the denormals.
llvm::Value* erfcF(Builder& b, llvm::Value* x);

// gelu x = 0.5 x erfc(-x/sqrt 2) (exact erf form). The tail's e^{-x^2/2} is computed from the exact
// split of x^2, so gelu keeps its relative accuracy for large negative x. gelu(-inf) = NaN like
// the reference (-inf * 0).
llvm::Value* geluF(Builder& b, llvm::Value* x);

}  // namespace shapevm::jit::ir
