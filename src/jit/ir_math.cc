// SPDX-License-Identifier: Apache-2.0
// Vectorizable float32 math in IR (see ir_math.h).
#include "jit/ir_math.h"

#include <llvm/IR/Intrinsics.h>

namespace shapevm::jit::ir {

namespace {
llvm::Constant* splat(llvm::Type* type, double value) { return llvm::ConstantFP::get(type, value); }

llvm::Type* intTypeLike(Builder& b, llvm::Type* type) {
  if (auto* vector = llvm::dyn_cast<llvm::FixedVectorType>(type)) {
    return llvm::FixedVectorType::get(b.getInt32Ty(), vector->getNumElements());
  }
  return b.getInt32Ty();
}

llvm::Value* fma(Builder& b, llvm::Value* x, llvm::Value* y, llvm::Value* z) {
  return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {x->getType()}, {x, y, z});
}

// 2^n for integer-valued float n in [-126, 127], built from the exponent bits.
llvm::Value* pow2(Builder& b, llvm::Value* n_int) {
  llvm::Type* int_type = n_int->getType();
  llvm::Value* bits = b.CreateShl(b.CreateAdd(n_int, llvm::ConstantInt::get(int_type, 127)), llvm::ConstantInt::get(int_type, 23));
  llvm::Type* float_type = int_type->isVectorTy()
                               ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(b.getFloatTy(), llvm::cast<llvm::FixedVectorType>(int_type)->getNumElements()))
                               : b.getFloatTy();
  return b.CreateBitCast(bits, float_type);
}
}  // namespace

llvm::Value* expF(Builder& b, llvm::Value* x) {
  llvm::Type* type = x->getType();
  if (type->getScalarType()->isDoubleTy()) return b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x);
  llvm::Type* int_type = intTypeLike(b, type);
  // Beyond these e^x is +inf / 0 in float32; clamping keeps n inside the two-step scale's range.
  llvm::Value* clamped = b.CreateMinNum(b.CreateMaxNum(x, splat(type, -104.0)), splat(type, 89.0));
  llvm::Value* n = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, b.CreateFMul(clamped, splat(type, 1.4426950408889634)));
  // r = x - n*ln2 in two parts (ln2_hi has trailing zero bits so n*ln2_hi is exact).
  llvm::Value* r = fma(b, n, splat(type, -0.693359375), clamped);
  r = fma(b, n, splat(type, 2.12194440e-4), r);
  // e^r by Taylor to degree 7 (|r| <= 0.347: truncation error < 6e-9 relative).
  static constexpr double kCoefficients[] = {1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0};
  llvm::Value* p = splat(type, kCoefficients[0]);
  for (std::size_t k = 1; k < sizeof(kCoefficients) / sizeof(kCoefficients[0]); ++k) {
    p = fma(b, p, r, splat(type, kCoefficients[k]));
  }
  // Scale by 2^n = 2^(n/2) * 2^(n - n/2): each half stays a normal float for n in [-150, 128].
  llvm::Value* n_int = b.CreateFPToSI(n, int_type);
  llvm::Value* half = b.CreateAShr(n_int, llvm::ConstantInt::get(int_type, 1));
  llvm::Value* result = b.CreateFMul(b.CreateFMul(p, pow2(b, half)), pow2(b, b.CreateSub(n_int, half)));
  // NaN in, NaN out (the clamp above would have turned it into a number).
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, result);
}

}  // namespace shapevm::jit::ir
