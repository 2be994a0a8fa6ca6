// SPDX-License-Identifier: Apache-2.0
// The element math of ShapeVM's elementwise ops in IR, shared by every generator that computes
// them: the elementwise family, fused region kernels and matmul epilogues. Values are in compute
// form (float32 for f32/f16/bf16, double for f64, the integer type for ints, i8 for bool). Every op
// works on scalars; on vectors all but pow and rsqrt (they widen to a scalar double).
// Invariant: one op's semantics live here once; a generator that fuses several ops rounds each
// float16 intermediate with roundTo() so results match the reference op by op; a bfloat16
// program (FusedValues) keeps in float32 the intermediates whose every path to a stored value
// passes only products, quotients, sigmoid, tanh and selections (no error amplification on any
// data), so it stays within validation's bfloat16 tolerance of the op-by-op reference. In a
// 16-bit program (bfloat16, float16), exp, sigmoid and tanh take ir_math's 16-bit variants where
// their value is rounded right after, or reaches only stored values through products, quotients,
// tanh, selections and other nodes that qualify (never through an add, a subtract, exp, sigmoid,
// log or a reduction): every rounded value is then within 1 ulp of the correctly rounded one.
#pragma once

#include <functional>
#include <vector>

#include "jit/fusion.h"
#include "jit/llvm_cpu/codegen_util.h"
#include "ops/registry.h"

namespace shapevm::jit::ir {

// `op` on a and c computed in dtype `t` (comparisons and logical ops return i8 0/1).
llvm::Value* binaryOp(Builder& b, OpId op, DType t, llvm::Value* a, llvm::Value* c);
// `op` on x computed in dtype `t`. rounded16: the float32 result is rounded to a 16-bit float
// before anything but products, quotients or tanh reads it, so exp, sigmoid and tanh may take
// ir_math's 16-bit variants (ir_math.h: within 2^-13, within 1 ulp once rounded).
llvm::Value* unaryOp(Builder& b, OpId op, DType t, llvm::Value* x, bool rounded16 = false);
// Whether results stored in `t` may take those 16-bit variants: bfloat16 only. Their 2^-13 is a
// sixteenth of bfloat16's half unit, so a rounding rarely flips; for float16 it is a quarter to a
// half of its half unit, so one in several roundings lands an ulp off the reference's, and a chain
// that cancels afterwards (v - z with v close to z) amplifies those ulps past validation's bound.
bool sixteenBitMathFor(DType t);
// x != 0 (i1), NaN counts as nonzero.
llvm::Value* nonzero(Builder& b, llvm::Value* value, DType t);
// A compute value rounded to `dtype`'s storage precision (float16/bfloat16; identity otherwise).
llvm::Value* roundTo(Builder& b, llvm::Value* value, DType dtype);
// The reference's castTensor as seen by the compute that follows: convert, then round.
llvm::Value* castTo(Builder& b, llvm::Value* value, DType from, DType to);

// One evaluation of a FusedProgram's nodes, emitted in order (each rounded where the program
// says; in a bfloat16 program not those it keeps in float32, see above), on scalars or on
// vectors of `lanes`: constants are splat, leaf l is `load_leaf(l)`, asked
// once, on its first use. In a float32 program, a product of a sigmoid and a tanh that nothing
// else reads is one sigmoidTimesTanhF (ir_math.h: one shared reciprocal), and those two nodes have
// no value of their own. The fused family and the matmul gate epilogue both compute programs so.
class FusedValues {
 public:
  FusedValues(Builder& b, const FusedProgram& program, unsigned lanes, std::function<llvm::Value*(int leaf)> load_leaf);
  // A node's value (ref >= 0) or a leaf's (FusedProgram::leafRef).
  llvm::Value* operand(int ref);
  // Whether operand(ref) holds a value of the program dtype already (a rounded node, or a leaf of
  // that dtype), so storing it in that dtype needs no rounding.
  bool exact(int ref) const;

 private:
  const FusedProgram& program_;
  std::vector<bool> rounded_;  // per node: rounded to the program dtype
  std::vector<llvm::Value*> nodes_;
  std::vector<llvm::Value*> leaves_;
  std::function<llvm::Value*(int)> load_leaf_;
};

}  // namespace shapevm::jit::ir
