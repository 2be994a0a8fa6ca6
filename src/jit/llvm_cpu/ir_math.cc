// SPDX-License-Identifier: Apache-2.0
// Vectorizable float32 math in IR (see ir_math.h).
// The polynomial coefficients were fitted with mpmath's chebyfit (near-minimax on Chebyshev
// nodes, 40 digits) and rounded to float32:
//   exp:   Q(r)  = (e^r - 1 - r) / r^2               on [-ln2/2, ln2/2],             degree 4
//          (Lawson-weighted least squares for e^r's relative error in numpy, not chebyfit)
//   log:   P(f)  = (log1p(f) - f + f^2/2) / f^3      on [sqrt(1/2) - 1, sqrt(2) - 1], degree 8
//   erf:   P(s)  = erf(sqrt s) / sqrt s              on [0, 1],                      degree 6
//   erfcx: P(u)  = e^{a^2} erfc(a), a = 2/(u + c) - 2 on t = u + c in [1/6.05, 0.8],  degree 10
// (fit error below 4e-9 relative in each case; the float32 evaluation adds a few ulp).
#include "jit/llvm_cpu/ir_math.h"

#include <limits>
#include <utility>

#include <llvm/IR/Intrinsics.h>

namespace shapevm::jit::ir {

namespace {

constexpr float kLogCoefficients[] = {0.0697161183f, -0.114797339f, 0.116854198f, -0.124256872f, 0.142490581f,
                                      -0.166678026f, 0.200007156f,  -0.24999997f, 0.333333313f};
// exp: Q's coefficients (relative error of e^r 5.4e-9 with them rounded to float32), then the 1 of
// t = 1 + r Q(r); e^r = 1 + r t is one FMA more (e^r - 1 = r t for tanh).
constexpr float kExpCoefficients[] = {0.00138794084f, 0.00836941134f, 0.0416672528f, 0.166665152f, 0.49999997f, 1.0f};
// The 16-bit variants' e^r: q(r) ~ (e^r - 1)/r of degree 3, a linear-programming minimax fit of
// e^r - 1 = r q(r)'s relative error on [-ln2/2, ln2/2] (rounded to float32: 1.5e-5 for e^r - 1,
// 6.2e-6 for e^r = 1 + r q(r)).
constexpr float kExp16Coefficients[] = {0.0416636318f, 0.167667449f, 0.500012875f, 0.999985099f};
constexpr float kErfCoefficients[] = {7.87587487e-05f, -0.00080168643f, 0.00518908724f, -0.0268542115f,
                                      0.112835944f,    -0.37612626f,    1.12837911f};
constexpr float kErfcxCenter = 0.48264461755752563f;
constexpr float kErfcxCoefficients[] = {0.00474368082f, -0.07581231f,  0.0264933463f, 0.121463113f,
                                        -0.0693987906f, -0.217408463f, 0.0788901821f, 0.62701267f,
                                        0.933855474f,   0.821388721f,  0.24085559f};
constexpr float kFloatMin = 1.17549435e-38f;  // smallest normal float
constexpr float kInvSqrt2 = 0.707106781f;

llvm::Constant* splat(llvm::Type* type, double value) {
  return llvm::ConstantFP::get(type, value);
}

llvm::Type* intTypeLike(Builder& b, llvm::Type* type) {
  if (auto* vector = llvm::dyn_cast<llvm::FixedVectorType>(type)) {
    return llvm::FixedVectorType::get(b.getInt32Ty(), vector->getNumElements());
  }
  return b.getInt32Ty();
}

llvm::Constant* splatInt(Builder& b, llvm::Type* float_type, std::int64_t value) {
  return llvm::ConstantInt::get(intTypeLike(b, float_type), static_cast<std::uint64_t>(value), true);
}

bool isDouble(llvm::Value* x) {
  return x->getType()->getScalarType()->isDoubleTy();
}

// x*y + z, fused where the target has FMA (it does wherever AVX2/AVX-512 code runs).
llvm::Value* fma(Builder& b, llvm::Value* x, llvm::Value* y, llvm::Value* z) {
  return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {x->getType()}, {x, y, z});
}

// x*y + z with a single rounding, always (used where exactness matters: a*a - hi).
llvm::Value* exactFma(Builder& b, llvm::Value* x, llvm::Value* y, llvm::Value* z) {
  return b.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {x, y, z});
}

template <std::size_t N>
llvm::Value* horner(Builder& b, const float (&coefficients)[N], llvm::Value* x) {
  llvm::Type* type = x->getType();
  llvm::Value* p = splat(type, coefficients[0]);
  for (std::size_t k = 1; k < N; ++k) p = fma(b, p, x, splat(type, coefficients[k]));
  return p;
}

llvm::Value* fabs(Builder& b, llvm::Value* x) {
  return b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
}

llvm::Value* copysign(Builder& b, llvm::Value* magnitude, llvm::Value* sign) {
  return b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, magnitude, sign);
}

// 1 / den for a den the caller knows is finite and nonzero (NaN may pass through). The divide is
// marked `arcp contract ninf`, so on float32 vectors LLVM emits the target's reciprocal estimate
// and one Newton step in FMAs (vrcp14ps or, on 8 lanes and AVX2, the 12-bit vrcpps) instead of
// vdivps, whose throughput bounds the sigmoid/tanh kernels; a second Newton step here makes the
// result the correctly rounded one or next to it (exact where it is a power of two: sigmoid(0) =
// 0.5, saturation to 1). A function marked "reciprocal-estimates"="vec-divf:0" (the fused family on
// 16 lanes) gets the bare estimate from LLVM: from vrcp14ps this step alone gives the same.
// Scalar divides stay exact divides (LLVM keeps them).
llvm::Value* reciprocalFinite(Builder& b, llvm::Value* den) {
  llvm::Value* one = llvm::ConstantFP::get(den->getType(), 1.0);
  auto* estimate = llvm::cast<llvm::Instruction>(b.CreateFDiv(one, den));
  llvm::FastMathFlags flags;
  flags.setAllowReciprocal();
  flags.setAllowContract();
  flags.setNoInfs();
  estimate->setFastMathFlags(flags);
  llvm::Value* error = exactFma(b, b.CreateFNeg(den), estimate, one);
  return exactFma(b, estimate, error, estimate);
}

// 1 / den from the target's reciprocal estimate as LLVM refines it, without reciprocalFinite's own
// step: the bare 14-bit vrcp14ps on 16 lanes of a kernel marked "vec-divf:0" (relative error below
// 2^-14), one LLVM Newton step on other vectors, an exact divide on scalars. For the 16-bit
// variants only.
llvm::Value* reciprocalEstimate(Builder& b, llvm::Value* den) {
  auto* estimate = llvm::cast<llvm::Instruction>(b.CreateFDiv(llvm::ConstantFP::get(den->getType(), 1.0), den));
  llvm::FastMathFlags flags;
  flags.setAllowReciprocal();
  flags.setAllowContract();
  flags.setNoInfs();
  estimate->setFastMathFlags(flags);
  return estimate;
}

// NaN in, the same NaN out (selects and clamps above would have turned it into a number).
llvm::Value* keepNaN(Builder& b, llvm::Value* x, llvm::Value* result) {
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, result);
}

// max(x, lowest) that keeps a NaN x (x86's maxps(lowest, x): one instruction), so a function
// whose every later step propagates NaN needs no keepNaN.
llvm::Value* clampBelowKeepingNaN(Builder& b, llvm::Value* x, double lowest) {
  llvm::Value* bound = splat(x->getType(), lowest);
  return b.CreateSelect(b.CreateFCmpOLT(x, bound), bound, x);
}

// n = round(x * scale) as a float and 2^(n + bias - 127) from the same add: x * scale + (1.5 * 2^23 +
// bias) rounds to an integer-valued float whose low mantissa bits hold n + bias, so shifting its
// bits left by 23 puts n + bias in the exponent field (the bits above it shift out). Three
// operations (FMA, subtract, shift) in place of multiply, round, convert, add and shift. Needs
// |x * scale| < 2^21 and n + bias in [1, 254].
std::pair<llvm::Value*, llvm::Value*> roundWithPow2(Builder& b, llvm::Value* x, double scale, int bias) {
  llvm::Type* type = x->getType();
  llvm::Constant* magic = splat(type, 12582912.0 + bias);
  llvm::Value* sum = fma(b, x, splat(type, scale), magic);
  llvm::Value* n = b.CreateFSub(sum, magic);  // exact
  llvm::Value* bits = b.CreateShl(b.CreateBitCast(sum, intTypeLike(b, type)), splatInt(b, type, 23));
  return {n, b.CreateBitCast(bits, type)};
}

// 2^n for integer-valued float n in [-126, 127], built from the exponent bits.
llvm::Value* pow2(Builder& b, llvm::Value* n_int) {
  llvm::Type* int_type = n_int->getType();
  llvm::Value* bits =
      b.CreateShl(b.CreateAdd(n_int, llvm::ConstantInt::get(int_type, 127)), llvm::ConstantInt::get(int_type, 23));
  llvm::Type* float_type = int_type->isVectorTy()
                               ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(
                                     b.getFloatTy(), llvm::cast<llvm::FixedVectorType>(int_type)->getNumElements()))
                               : b.getFloatTy();
  return b.CreateBitCast(bits, float_type);
}

// A C library function `double name(double)` applied to a double scalar or lane by lane to a
// double vector (the JIT resolves the symbol in the process).
llvm::Value* callLibm(Builder& b, const char* name, llvm::Value* x) {
  llvm::Module* module = b.GetInsertBlock()->getModule();
  llvm::FunctionCallee callee = module->getOrInsertFunction(name, b.getDoubleTy(), b.getDoubleTy());
  if (auto* function = llvm::dyn_cast<llvm::Function>(callee.getCallee())) function->setDoesNotThrow();
  auto* vector = llvm::dyn_cast<llvm::FixedVectorType>(x->getType());
  if (vector == nullptr) return b.CreateCall(callee, {x});
  llvm::Value* result = llvm::PoisonValue::get(vector);
  for (unsigned lane = 0; lane < vector->getNumElements(); ++lane) {
    llvm::Value* element = b.CreateCall(callee, {b.CreateExtractElement(x, lane)});
    result = b.CreateInsertElement(result, element, lane);
  }
  return result;
}

// e^x = p * s1 * s2 with p = e^r in [0.7, 1.42] and s1, s2 normal powers of two, for x clamped to
// [lowest, 89] (lowest >= -120; a caller whose x is never positive skips the upper clamp):
// Cody-Waite reduction x = n*ln2 + r, |r| <= ln2/2, then e^r = 1 + r + r^2 Q(r). Keeping the scale
// apart lets a caller multiply p by its other factors first, so a result in the denormal range is
// rounded once.
struct ExpParts {
  llvm::Value* p;
  llvm::Value* s1;
  llvm::Value* s2;
};

// The reduction: p = e^r and the integer n (in an int vector) with x = n*ln2 + r.
// r = x - n*ln2: in two parts (ln2_hi has trailing zero bits so n*ln2_hi is exact); for a 16-bit
// result in one (float32's ln2 is 1.9e-9 off, so r is off by at most 3.3e-7 for |n| <= 174).
llvm::Value* reduceLn2(Builder& b, llvm::Value* n, llvm::Value* x, bool for16) {
  llvm::Type* type = x->getType();
  if (for16) return fma(b, n, splat(type, -0.6931471805599453), x);
  return fma(b, n, splat(type, 2.12194440e-4), fma(b, n, splat(type, -0.693359375), x));
}

// t with e^r = 1 + r t: degree 5 (full accuracy) or 3 (a 16-bit result).
llvm::Value* expT(Builder& b, llvm::Value* r, bool for16) {
  return for16 ? horner(b, kExp16Coefficients, r) : horner(b, kExpCoefficients, r);
}

std::pair<llvm::Value*, llvm::Value*> expReduce(Builder& b, llvm::Value* x, bool for16) {
  llvm::Type* type = x->getType();
  llvm::Value* n = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, b.CreateFMul(x, splat(type, 1.4426950408889634)));
  llvm::Value* r = reduceLn2(b, n, x, for16);
  return {fma(b, expT(b, r, for16), r, splat(type, 1.0)), b.CreateFPToSI(n, intTypeLike(b, type))};
}

ExpParts expParts(Builder& b, llvm::Value* x, double lowest, bool nonpositive = false, bool for16 = false) {
  llvm::Type* type = x->getType();
  // Beyond these e^x is +inf / 0 in float32; clamping keeps n inside the two-step scale's range.
  llvm::Value* clamped = b.CreateMaxNum(x, splat(type, lowest));
  if (!nonpositive) clamped = b.CreateMinNum(clamped, splat(type, 89.0));
  const auto [p, n_int] = expReduce(b, clamped, for16);
  // 2^n = 2^(n/2) * 2^(n - n/2): each half stays a normal float for n in [-173, 128].
  llvm::Value* half = b.CreateAShr(n_int, llvm::ConstantInt::get(n_int->getType(), 1));
  return ExpParts{p, pow2(b, half), pow2(b, b.CreateSub(n_int, half))};
}

// e^y for y <= 0 (y < -120 clamped to -120, NaN kept) as 2^n e^r: r, t = 1 + r Q(r) (so e^r =
// 1 + r t and e^r - 1 = r t, both without cancellation) and s64 = 2^(n + 64), a normal float for n
// in [-174, 0]; times 2^-64 last, a result in the denormal range is rounded once. sigmoid and tanh
// both build on it, with the same constants: a kernel computing both (the LSTM gates) keeps one
// set of them in registers.
struct ExpNonpositive {
  llvm::Value* r;
  llvm::Value* t;
  llvm::Value* s64;
  llvm::Value* p(Builder& b) const { return fma(b, t, r, splat(r->getType(), 1.0)); }  // e^r
};

ExpNonpositive expNonpositive(Builder& b, llvm::Value* y, bool for16) {
  llvm::Value* clamped = clampBelowKeepingNaN(b, y, -120.0);
  const auto [n, s64] = roundWithPow2(b, clamped, 1.4426950408889634, 127 + 64);
  llvm::Value* r = reduceLn2(b, n, clamped, for16);
  return ExpNonpositive{r, expT(b, r, for16), s64};
}

// factor * e^x from its parts: ((factor * p) * s1) * s2, one rounding into the denormal range.
// A null factor means 1.
llvm::Value* scaleBy(Builder& b, const ExpParts& e, llvm::Value* factor) {
  llvm::Value* v = factor == nullptr ? e.p : b.CreateFMul(factor, e.p);
  return b.CreateFMul(b.CreateFMul(v, e.s1), e.s2);
}

// x * P(x^2) ~ erf(x) for |x| <= 1.
llvm::Value* erfSmall(Builder& b, llvm::Value* x) {
  return b.CreateFMul(x, horner(b, kErfCoefficients, b.CreateFMul(x, x)));
}

// erfc(a) for a in [0.5, 10.1] given a^2 = sq_hi + sq_lo exactly (|sq_lo| <= ulp(sq_hi)/2), as
// the pieces of factor * e^{-sq_hi} (1 - sq_lo) erfcx(a); times(factor) multiplies them in an
// order that rounds a denormal result once.
struct ErfcTail {
  llvm::Value* g;  // erfcx(a) * (1 - sq_lo)
  ExpParts e;      // e^{-sq_hi}
  llvm::Value* times(Builder& b, llvm::Value* factor) const {
    return scaleBy(b, e, factor == nullptr ? g : b.CreateFMul(factor, g));
  }
};

ErfcTail erfcTail(Builder& b, llvm::Value* a, llvm::Value* sq_hi, llvm::Value* sq_lo) {
  llvm::Type* type = a->getType();
  llvm::Value* t = b.CreateFDiv(splat(type, 1.0), fma(b, a, splat(type, 0.5), splat(type, 1.0)));
  llvm::Value* g = horner(b, kErfcxCoefficients, b.CreateFSub(t, splat(type, kErfcxCenter)));
  g = b.CreateFMul(g, b.CreateFSub(splat(type, 1.0), sq_lo));
  return ErfcTail{g, expParts(b, b.CreateFNeg(sq_hi), -120.0, /*nonpositive=*/true)};
}

}  // namespace

llvm::Value* expF(Builder& b, llvm::Value* x) {
  if (isDouble(x)) return b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x);
  return keepNaN(b, x, scaleBy(b, expParts(b, x, -104.0), nullptr));
}

llvm::Value* exp16F(Builder& b, llvm::Value* x) {
  if (isDouble(x)) return expF(b, x);
  return keepNaN(b, x, scaleBy(b, expParts(b, x, -104.0, /*nonpositive=*/false, /*for16=*/true), nullptr));
}

llvm::Value* logF(Builder& b, llvm::Value* x) {
  llvm::Type* type = x->getType();
  if (isDouble(x)) return b.CreateUnaryIntrinsic(llvm::Intrinsic::log, x);
  llvm::Type* int_type = intTypeLike(b, type);
  // Denormals: scale into the normal range first (x * 2^23) and take 23 off the exponent.
  llvm::Value* denormal = b.CreateFCmpOLT(x, splat(type, kFloatMin));
  llvm::Value* scaled = b.CreateSelect(denormal, b.CreateFMul(x, splat(type, 8388608.0)), x);
  llvm::Value* bits = b.CreateBitCast(scaled, int_type);
  llvm::Value* exponent = b.CreateSub(b.CreateAShr(bits, splatInt(b, type, 23)), splatInt(b, type, 127));
  exponent = b.CreateSub(exponent, b.CreateSelect(denormal, splatInt(b, type, 23), splatInt(b, type, 0)));
  // Mantissa m in [1, 2); halve it (and bump the exponent) above sqrt(2) so m is in [0.707, 1.414].
  llvm::Value* mantissa_bits =
      b.CreateOr(b.CreateAnd(bits, splatInt(b, type, 0x007fffff)), splatInt(b, type, 0x3f800000));
  llvm::Value* above = b.CreateICmpSGT(mantissa_bits, splatInt(b, type, 0x3fb504f3));
  llvm::Value* m = b.CreateBitCast(mantissa_bits, type);
  m = b.CreateSelect(above, b.CreateFMul(m, splat(type, 0.5)), m);
  exponent = b.CreateAdd(exponent, b.CreateZExt(above, int_type));
  llvm::Value* f = b.CreateFSub(m, splat(type, 1.0));  // exact (Sterbenz)
  llvm::Value* e = b.CreateSIToFP(exponent, type);
  llvm::Value* z = b.CreateFMul(f, f);
  llvm::Value* y = b.CreateFMul(b.CreateFMul(f, z), horner(b, kLogCoefficients, f));
  y = fma(b, e, splat(type, -2.12194440e-4), y);
  y = fma(b, z, splat(type, -0.5), y);
  llvm::Value* result = b.CreateFAdd(f, y);
  result = fma(b, e, splat(type, 0.693359375), result);
  result = b.CreateSelect(b.CreateFCmpOLT(x, splat(type, 0.0)), splat(type, std::numeric_limits<double>::quiet_NaN()),
                          result);
  result = b.CreateSelect(b.CreateFCmpOEQ(x, splat(type, 0.0)), splat(type, -std::numeric_limits<double>::infinity()),
                          result);
  llvm::Constant* inf = splat(type, std::numeric_limits<double>::infinity());
  result = b.CreateSelect(b.CreateFCmpOEQ(x, inf), inf, result);
  return keepNaN(b, x, result);
}

namespace {
// u = e^{-2|x|} - 1 in [-1, 0] = 2^n (e^r - 1) + (2^n - 1): n <= 0, so the two terms never cancel
// by more than a factor 1.5, and u near 0 keeps its relative accuracy. Below -120 (tanh(60)) the
// clamp applies; tanh(9.1) already rounds to 1. NaN passes through every step.
llvm::Value* tanhU(Builder& b, llvm::Value* x, bool for16) {
  llvm::Type* type = x->getType();
  const ExpNonpositive e = expNonpositive(b, b.CreateFMul(b.CreateFNeg(fabs(b, x)), splat(type, 2.0)), for16);
  llvm::Value* scale = b.CreateFMul(e.s64, splat(type, 0x1p-64));
  return fma(b, scale, b.CreateFMul(e.r, e.t), b.CreateFSub(scale, splat(type, 1.0)));
}

// tanh in float32 (for16: the 16-bit variant's reduction, polynomial and reciprocal).
llvm::Value* tanhFloat(Builder& b, llvm::Value* x, bool for16) {
  llvm::Type* type = x->getType();
  llvm::Value* u = tanhU(b, x, for16);
  // tanh|x| = -u / (u + 2), u + 2 in [1, 2]: copysign gives u / (u + 2), which is <= 0, x's sign
  // (tanh(-0) = -0).
  llvm::Value* den = b.CreateFAdd(u, splat(type, 2.0));
  return copysign(b, b.CreateFMul(u, for16 ? reciprocalEstimate(b, den) : reciprocalFinite(b, den)), x);
}
}  // namespace

llvm::Value* tanhF(Builder& b, llvm::Value* x) {
  if (isDouble(x)) return callLibm(b, "tanh", x);
  return tanhFloat(b, x, false);
}

llvm::Value* tanh16F(Builder& b, llvm::Value* x) {
  if (isDouble(x)) return tanhF(b, x);
  return tanhFloat(b, x, true);
}

namespace {
// sigmoid(x) = s for x >= 0, e*s for x < 0, where e = e^-|x| and s = 1/(1+e); returns
// factor * sigmoid(x) with the factor applied before the final scaling (silu: factor = x), so a
// denormal result is rounded once. Without a factor, e*s reuses the rounded e (one multiply, not
// three): where e is denormal (x < -87), s = 1 exactly and e*s = e, still rounded once.
llvm::Value* sigmoidTimes(Builder& b, llvm::Value* x, llvm::Value* factor, bool for16 = false) {
  llvm::Type* type = x->getType();
  llvm::Value* one = splat(type, 1.0);
  const ExpNonpositive exp = expNonpositive(b, b.CreateFNeg(fabs(b, x)), for16);
  const ExpParts parts{exp.p(b), exp.s64, splat(type, 0x1p-64)};
  llvm::Value* e = scaleBy(b, parts, nullptr);
  llvm::Value* den = b.CreateFAdd(one, e);  // in [1, 2]
  llvm::Value* s = for16 ? reciprocalEstimate(b, den) : reciprocalFinite(b, den);
  llvm::Value* negative = b.CreateFCmpOLT(x, splat(type, 0.0));
  if (factor == nullptr) return b.CreateSelect(negative, b.CreateFMul(e, s), s);
  llvm::Value* scaled_s = b.CreateFMul(factor, s);
  return b.CreateSelect(negative, scaleBy(b, parts, scaled_s), scaled_s);
}
}  // namespace

llvm::Value* sigmoidF(Builder& b, llvm::Value* x) {
  llvm::Type* type = x->getType();
  llvm::Value* one = splat(type, 1.0);
  if (isDouble(x)) return b.CreateFDiv(one, b.CreateFAdd(one, expF(b, b.CreateFNeg(x))));
  return sigmoidTimes(b, x, nullptr);  // NaN passes through
}

llvm::Value* sigmoid16F(Builder& b, llvm::Value* x) {
  if (isDouble(x)) return sigmoidF(b, x);
  return sigmoidTimes(b, x, nullptr, /*for16=*/true);
}

llvm::Value* sigmoidTimesTanhF(Builder& b, llvm::Value* x, llvm::Value* y) {
  if (isDouble(x)) return b.CreateFMul(sigmoidF(b, x), tanhF(b, y));
  llvm::Type* type = x->getType();
  // sigmoid(x) = m / (1 + e) with e = e^-|x| and m = 1 (x >= 0) or e (x < 0), as sigmoidF computes
  // them; tanh(y) = sign(y) |u| / (u + 2) with u = e^{-2|y|} - 1 <= 0, as tanhF. The product is
  // sign(y) |m u| / ((1 + e)(u + 2)): one reciprocal of a denominator in [1, 4] for both.
  const ExpNonpositive exp = expNonpositive(b, b.CreateFNeg(fabs(b, x)), false);
  // e = p 2^n, rounded once (as sigmoidF's scaleBy).
  llvm::Value* e = b.CreateFMul(b.CreateFMul(exp.p(b), exp.s64), splat(type, 0x1p-64));
  llvm::Value* u = tanhU(b, y, false);
  llvm::Value* den = b.CreateFMul(b.CreateFAdd(splat(type, 1.0), e), b.CreateFAdd(u, splat(type, 2.0)));
  llvm::Value* mu = b.CreateSelect(b.CreateFCmpOLT(x, splat(type, 0.0)), b.CreateFMul(e, u), u);
  return copysign(b, b.CreateFMul(mu, reciprocalFinite(b, den)), y);
}

llvm::Value* siluF(Builder& b, llvm::Value* x) {
  llvm::Type* type = x->getType();
  if (isDouble(x)) {
    return b.CreateFDiv(x, b.CreateFAdd(splat(type, 1.0), expF(b, b.CreateFNeg(x))));
  }
  // Below -120 the result is -0 (x e^x underflows; the clamp inside would not see x); -inf gives
  // the reference's NaN (-inf / inf).
  llvm::Value* result = sigmoidTimes(b, x, x);
  result = b.CreateSelect(b.CreateFCmpOLT(x, splat(type, -120.0)), splat(type, -0.0), result);
  result = b.CreateSelect(b.CreateFCmpOEQ(x, splat(type, -std::numeric_limits<double>::infinity())),
                          splat(type, std::numeric_limits<double>::quiet_NaN()), result);
  return keepNaN(b, x, result);
}

llvm::Value* erfF(Builder& b, llvm::Value* x) {
  if (isDouble(x)) return callLibm(b, "erf", x);
  llvm::Type* type = x->getType();
  llvm::Value* ax = fabs(b, x);
  llvm::Value* a = b.CreateMinNum(ax, splat(type, 4.0));  // erf(4) rounds to 1
  llvm::Value* hi = b.CreateFMul(a, a);
  llvm::Value* lo = exactFma(b, a, a, b.CreateFNeg(hi));
  llvm::Value* tail = erfcTail(b, a, hi, lo).times(b, nullptr);
  llvm::Value* large = copysign(b, b.CreateFSub(splat(type, 1.0), tail), x);
  return keepNaN(b, x, b.CreateSelect(b.CreateFCmpOLT(ax, splat(type, 1.0)), erfSmall(b, x), large));
}

llvm::Value* erfcF(Builder& b, llvm::Value* x) {
  if (isDouble(x)) return callLibm(b, "erfc", x);
  llvm::Type* type = x->getType();
  llvm::Value* ax = fabs(b, x);
  llvm::Value* a = b.CreateMinNum(ax, splat(type, 10.1));  // erfc(10.1) rounds to 0
  llvm::Value* hi = b.CreateFMul(a, a);
  llvm::Value* lo = exactFma(b, a, a, b.CreateFNeg(hi));
  llvm::Value* tail = erfcTail(b, a, hi, lo).times(b, nullptr);
  llvm::Value* large = b.CreateSelect(b.CreateFCmpOGT(x, splat(type, 0.0)), tail, b.CreateFSub(splat(type, 2.0), tail));
  llvm::Value* small = b.CreateFSub(splat(type, 1.0), erfSmall(b, x));
  return keepNaN(b, x, b.CreateSelect(b.CreateFCmpOLT(ax, splat(type, 0.5)), small, large));
}

llvm::Value* geluF(Builder& b, llvm::Value* x) {
  llvm::Type* type = x->getType();
  llvm::Value* half_x = b.CreateFMul(splat(type, 0.5), x);
  if (isDouble(x)) {
    // The reference's 0.5 * v * erfc(-v * 0.70710678118654752440), operation for operation.
    return b.CreateFMul(half_x,
                        callLibm(b, "erfc", b.CreateFMul(b.CreateFNeg(x), splat(type, 0.70710678118654752440))));
  }
  // 0.5 x erfc(z) with z = -x/sqrt2: |z| = a, z^2 = x^2/2 = hi/2 + lo/2 exactly.
  llvm::Value* xa = b.CreateMinNum(fabs(b, x), splat(type, 14.3));  // 14.3/sqrt2 > 10.1
  llvm::Value* a = b.CreateFMul(xa, splat(type, kInvSqrt2));
  llvm::Value* hi = b.CreateFMul(xa, xa);
  llvm::Value* lo = exactFma(b, xa, xa, b.CreateFNeg(hi));
  const ErfcTail tail = erfcTail(b, a, b.CreateFMul(hi, splat(type, 0.5)), b.CreateFMul(lo, splat(type, 0.5)));
  // x < 0: 0.5 x erfc(a), the factor applied before the final scaling (a denormal result rounds once);
  // x > 0: 0.5 x (2 - erfc(a)); |x| < 0.5 sqrt2: 0.5 x (1 + erf(x/sqrt2)).
  llvm::Value* negative = tail.times(b, half_x);
  // Beyond the clamp the true value rounds to -0 (and -inf gives the reference's -inf * 0 = NaN).
  negative =
      b.CreateSelect(b.CreateFCmpOGT(fabs(b, x), splat(type, 14.3)), b.CreateFMul(half_x, splat(type, 0.0)), negative);
  llvm::Value* positive = b.CreateFMul(half_x, b.CreateFSub(splat(type, 2.0), tail.times(b, nullptr)));
  llvm::Value* small =
      b.CreateFMul(half_x, b.CreateFAdd(splat(type, 1.0), erfSmall(b, b.CreateFMul(x, splat(type, kInvSqrt2)))));
  llvm::Value* large = b.CreateSelect(b.CreateFCmpOLT(x, splat(type, 0.0)), negative, positive);
  return keepNaN(b, x, b.CreateSelect(b.CreateFCmpOLT(a, splat(type, 0.5)), small, large));
}

}  // namespace shapevm::jit::ir
