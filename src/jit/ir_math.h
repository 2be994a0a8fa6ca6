// SPDX-License-Identifier: Apache-2.0
// Vectorizable math in IR: float32 (scalar or <N x float>) functions built from arithmetic,
// bit operations and selects only — no libm calls — so the loop vectorizer keeps whole loops in
// vector registers. Accuracy target: a few ulp (relative error <= 1e-6) over the whole range,
// NaN propagated, overflow to +inf and underflow to 0 like libm.
// float64 values go to LLVM's libm intrinsics instead (scalar calls).
#pragma once

#include "jit/codegen_util.h"

namespace shapevm::jit::ir {

// e^x: Cody-Waite reduction x = n*ln2 + r, |r| <= ln2/2, degree-7 polynomial, scale by 2^n in two
// steps so results down to the denormal range are right.
llvm::Value* expF(Builder& b, llvm::Value* x);

}  // namespace shapevm::jit::ir
