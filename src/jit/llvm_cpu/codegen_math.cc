// SPDX-License-Identifier: Apache-2.0
// The elementwise ops' element math in IR (see codegen_math.h).
#include "jit/llvm_cpu/codegen_math.h"

#include <llvm/IR/Intrinsics.h>

#include "jit/llvm_cpu/ir_math.h"

namespace shapevm::jit::ir {

llvm::Value* nonzero(Builder& b, llvm::Value* value, DType t) {
  llvm::Constant* zero = llvm::Constant::getNullValue(value->getType());
  return isFloating(t) ? b.CreateFCmpUNE(value, zero) : b.CreateICmpNE(value, zero);
}

namespace {
// value rounded to bfloat16 and widened back, bit for bit as bf16BitsToFloat(floatToBf16Bits(value))
// (nearest even, NaN kept quiet, denormals kept) in 7 operations instead of 10: the carry of
// bits + 0x7fff + lsb is masked to the upper half, and NaN is found by a float compare (one
// vcmpunordps into a mask) and quieted by a masked OR. The 8 roundings of the LSTM gates' bfloat16
// kernel spent more instructions than its math. quiet_nan: a NaN value can only be a quiet one
// whose lower half is zero, for which the nearest-even sum leaves the upper half as it is, so the
// NaN test is left out (5 operations).
llvm::Value* roundToBf16(Builder& b, llvm::Value* value, bool quiet_nan = false) {
  llvm::Type* i32 = b.getInt32Ty();
  if (auto* vector = llvm::dyn_cast<llvm::FixedVectorType>(value->getType())) {
    i32 = llvm::FixedVectorType::get(i32, vector->getNumElements());
  }
  auto constant = [&](std::uint32_t v) { return llvm::ConstantInt::get(i32, v); };
  llvm::Value* bits = b.CreateBitCast(value, i32);
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(bits, constant(16)), constant(1));
  llvm::Value* chosen = b.CreateAdd(b.CreateAdd(bits, constant(0x7fff)), lsb);
  if (!quiet_nan) {
    chosen = b.CreateSelect(b.CreateFCmpUNO(value, value), b.CreateOr(bits, constant(0x00400000)), chosen);
  }
  return b.CreateBitCast(b.CreateAnd(chosen, constant(0xffff0000)), value->getType());
}
}  // namespace

llvm::Value* roundTo(Builder& b, llvm::Value* value, DType dtype) {
  if (dtype == DType::BFloat16) return roundToBf16(b, value);
  if (dtype != DType::Float16) return value;
  unsigned lanes = 1;
  if (auto* vector = llvm::dyn_cast<llvm::FixedVectorType>(value->getType())) lanes = vector->getNumElements();
  return b.CreateFPExt(b.CreateFPTrunc(value, withLanes(elementType(b.getContext(), dtype), lanes)), value->getType());
}

llvm::Value* castTo(Builder& b, llvm::Value* value, DType from, DType to) {
  if (from == to) return value;
  return roundTo(b, convert(b, value, from, to), to);
}

llvm::Value* binaryOp(Builder& b, OpId op, DType t, llvm::Value* a, llvm::Value* c) {
  const bool fp = isFloating(t);
  const bool boolean = t == DType::Bool;
  auto asBool = [&](llvm::Value* v) { return b.CreateZExt(v, b.getInt8Ty()); };
  switch (op) {
    case OpId::Add:
      return fp ? b.CreateFAdd(a, c) : boolean ? b.CreateOr(a, c) : b.CreateAdd(a, c);
    case OpId::Sub:
      return fp ? b.CreateFSub(a, c) : b.CreateSub(a, c);
    case OpId::Mul:
      return fp ? b.CreateFMul(a, c) : boolean ? b.CreateAnd(a, c) : b.CreateMul(a, c);
    case OpId::Div:
      return b.CreateFDiv(a, c);
    case OpId::Pow: {
      // The reference's std::pow(double, double), rounded once: the same libm call.
      if (t == DType::Float64) return b.CreateBinaryIntrinsic(llvm::Intrinsic::pow, a, c);
      llvm::Value* wide = b.CreateBinaryIntrinsic(llvm::Intrinsic::pow, b.CreateFPExt(a, b.getDoubleTy()),
                                                   b.CreateFPExt(c, b.getDoubleTy()));
      return b.CreateFPTrunc(wide, b.getFloatTy());
    }
    case OpId::Maximum:
    case OpId::Minimum: {
      // (a != a || a > b) ? a : b — a NaN `a` wins, a NaN `b` fails the comparison.
      const bool max = op == OpId::Maximum;
      llvm::Value* wins;
      if (fp) {
        wins = b.CreateOr(b.CreateFCmpUNO(a, a), max ? b.CreateFCmpOGT(a, c) : b.CreateFCmpOLT(a, c));
      } else if (boolean) {
        wins = max ? b.CreateICmpUGT(a, c) : b.CreateICmpULT(a, c);
      } else {
        wins = max ? b.CreateICmpSGT(a, c) : b.CreateICmpSLT(a, c);
      }
      return b.CreateSelect(wins, a, c);
    }
    case OpId::Equal:
      return asBool(fp ? b.CreateFCmpOEQ(a, c) : b.CreateICmpEQ(a, c));
    case OpId::NotEqual:
      return asBool(fp ? b.CreateFCmpUNE(a, c) : b.CreateICmpNE(a, c));
    case OpId::Less:
      return asBool(fp ? b.CreateFCmpOLT(a, c) : boolean ? b.CreateICmpULT(a, c) : b.CreateICmpSLT(a, c));
    case OpId::LessEqual:
      return asBool(fp ? b.CreateFCmpOLE(a, c) : boolean ? b.CreateICmpULE(a, c) : b.CreateICmpSLE(a, c));
    case OpId::Greater:
      return asBool(fp ? b.CreateFCmpOGT(a, c) : boolean ? b.CreateICmpUGT(a, c) : b.CreateICmpSGT(a, c));
    case OpId::GreaterEqual:
      return asBool(fp ? b.CreateFCmpOGE(a, c) : boolean ? b.CreateICmpUGE(a, c) : b.CreateICmpSGE(a, c));
    case OpId::LogicalAnd:
      return asBool(b.CreateAnd(nonzero(b, a, t), nonzero(b, c, t)));
    case OpId::LogicalOr:
      return asBool(b.CreateOr(nonzero(b, a, t), nonzero(b, c, t)));
    default:
      return a;
  }
}

bool sixteenBitMathFor(DType t) {
  return t == DType::BFloat16;
}

llvm::Value* unaryOp(Builder& b, OpId op, DType t, llvm::Value* x, bool rounded16) {
  const bool fp = isFloating(t);
  const bool boolean = t == DType::Bool;
  llvm::Constant* zero = llvm::Constant::getNullValue(x->getType());
  switch (op) {
    case OpId::Neg:
      return fp ? b.CreateFNeg(x) : b.CreateSub(zero, x);
    case OpId::Abs:
      if (fp) return b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
      return boolean ? x : b.CreateSelect(b.CreateICmpSLT(x, zero), b.CreateSub(zero, x), x);
    case OpId::Relu:  // x < 0 ? 0 : x (keeps NaN and -0)
      if (fp) return b.CreateSelect(b.CreateFCmpOLT(x, zero), zero, x);
      return boolean ? x : b.CreateSelect(b.CreateICmpSLT(x, zero), zero, x);
    case OpId::Exp: return rounded16 ? exp16F(b, x) : expF(b, x);
    case OpId::Log:
      return logF(b, x);
    case OpId::Sqrt:
      return b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
    case OpId::Rsqrt: {
      // The reference's 1 / sqrt(double), rounded once (vectorizes as vsqrtpd/vdivpd).
      llvm::Value* wide = t == DType::Float64 ? x : b.CreateFPExt(x, b.getDoubleTy());
      llvm::Value* r = b.CreateFDiv(llvm::ConstantFP::get(wide->getType(), 1.0),
                                     b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, wide));
      return t == DType::Float64 ? r : b.CreateFPTrunc(r, b.getFloatTy());
    }
    case OpId::Sigmoid: return rounded16 ? sigmoid16F(b, x) : sigmoidF(b, x);
    case OpId::Tanh: return rounded16 ? tanh16F(b, x) : tanhF(b, x);
    case OpId::Gelu:
      return geluF(b, x);
    case OpId::Erf:
      return erfF(b, x);
    case OpId::Silu:
      return siluF(b, x);
    case OpId::LogicalNot:
      return b.CreateZExt(b.CreateICmpEQ(x, zero), b.getInt8Ty());
    default:
      return x;
  }
}

FusedValues::FusedValues(Builder& b, const FusedProgram& program, unsigned lanes,
                         std::function<llvm::Value*(int leaf)> load_leaf)
    : program_(program),
      rounded_(program.nodes.size(), false),
      nodes_(program.nodes.size(), nullptr),
      leaves_(static_cast<std::size_t>(program.numLeaves()), nullptr),
      load_leaf_(std::move(load_leaf)) {
  // bfloat16 (float32's exponent range: keeping a value in float32 changes it by its rounding
  // alone, never by an overflow or underflow the reference sees): a node that is not stored, and
  // from which every path to the stored values passes only ops that do not amplify an operand's
  // error (products, quotients, sigmoid, tanh, selections), stays in float32. A path through an
  // add, subtract, exp, log or a reduction keeps every node on it rounded as the reference's op
  // is: with cancellation, even a one-ulp difference upstream could move the result far from the
  // op-by-op reference, on data validation never draws. In the LSTM gates: the output gate's
  // add and sigmoid and tanh(c') (3 of 13 roundings).
  const std::size_t count = program.nodes.size();
  std::vector<bool> rounds(count, true);
  if (program.dtype == DType::BFloat16) {
    std::vector<bool> stored(count, false), clean(count, true);  // clean: every path onward is benign
    for (int ref : program.outputs) {
      if (ref >= 0) stored[static_cast<std::size_t>(ref)] = true;
    }
    for (const auto& [leaf, ref] : program.in_place) {
      if (ref >= 0) stored[static_cast<std::size_t>(ref)] = true;
    }
    if (program.reduce != FusedProgram::Reduce::None && !program.outputs.empty() && program.outputs[0] >= 0) {
      clean[static_cast<std::size_t>(program.outputs[0])] = false;
    }
    // Nodes come in dependency order: a node's readers follow it, so they are final first.
    for (std::size_t n = count; n-- > 0;) {
      const FusedProgram::Node& node = program.nodes[n];
      if (node.constant) continue;
      const bool benign = node.op == OpId::Mul || node.op == OpId::Div || node.op == OpId::Sigmoid ||
                          node.op == OpId::Tanh || node.op == OpId::Relu || node.op == OpId::Neg ||
                          node.op == OpId::Abs || node.op == OpId::Maximum || node.op == OpId::Minimum;
      for (int ref : {node.a, node.unary() ? -1 : node.b}) {
        if (ref >= 0 && !(benign && clean[n])) clean[static_cast<std::size_t>(ref)] = false;
      }
    }
    for (std::size_t n = 0; n < count; ++n) rounds[n] = stored[n] || !clean[n];
  }
  // bfloat16 programs: which nodes may take the 16-bit variants (sixteenBitMathFor). `passes[n]`: every
  // use of n's float32 value tolerates a relative error of 2^-13 (a use by a reduction's
  // accumulator does not; a store rounds). Consumers come after their operands, so a node's
  // uses are final when the walk reaches it.
  std::vector<bool> rounded16(count, false);
  if (sixteenBitMathFor(program.dtype)) {
    std::vector<bool> passes(count, true);
    if (program.reduce != FusedProgram::Reduce::None && !program.outputs.empty() && program.outputs[0] >= 0) {
      passes[static_cast<std::size_t>(program.outputs[0])] = false;
    }
    for (std::size_t n = count; n-- > 0;) {
      const FusedProgram::Node& node = program.nodes[n];
      if (node.constant) continue;
      rounded16[n] = (node.rounded && rounds[n]) || passes[n];
      const bool keeps = node.op == OpId::Mul || node.op == OpId::Div || node.op == OpId::Tanh ||
                         node.op == OpId::Relu || node.op == OpId::Neg || node.op == OpId::Abs ||
                         node.op == OpId::Maximum || node.op == OpId::Minimum;
      for (int ref : {node.a, node.unary() ? -1 : node.b}) {
        if (ref >= 0 && !(keeps && rounded16[n])) passes[static_cast<std::size_t>(ref)] = false;
      }
    }
  }
  // float32 programs: a product of a sigmoid and a tanh that nothing else reads (the LSTM gates'
  // sigmoid(i) tanh(g) and sigmoid(o) tanh(c')) is computed with one reciprocal for both
  // (ir_math's sigmoidTimesTanhF); the two nodes then emit nothing of their own.
  std::vector<int> sigmoid_of(count, -1), tanh_of(count, -1);  // per product node: its operands
  std::vector<bool> folded(count, false);                      // per sigmoid/tanh node: in a product
  if (program.dtype == DType::Float32) {
    std::vector<int> uses(count, 0);
    auto use = [&](int ref) {
      if (ref >= 0) ++uses[static_cast<std::size_t>(ref)];
    };
    for (const FusedProgram::Node& node : program.nodes) {
      if (node.constant) continue;
      use(node.a);
      if (!node.unary()) use(node.b);
    }
    for (int ref : program.outputs) use(ref);
    for (const auto& [leaf, ref] : program.in_place) use(ref);
    auto isOnce = [&](int ref, OpId op) {
      if (ref < 0) return false;
      const FusedProgram::Node& node = program.nodes[static_cast<std::size_t>(ref)];
      return !node.constant && node.op == op && uses[static_cast<std::size_t>(ref)] == 1;
    };
    for (std::size_t n = 0; n < count; ++n) {
      const FusedProgram::Node& node = program.nodes[n];
      if (node.constant || node.op != OpId::Mul) continue;
      int s = -1;
      int t = -1;
      if (isOnce(node.a, OpId::Sigmoid) && isOnce(node.b, OpId::Tanh)) {
        s = node.a;
        t = node.b;
      } else if (isOnce(node.b, OpId::Sigmoid) && isOnce(node.a, OpId::Tanh)) {
        s = node.b;
        t = node.a;
      } else {
        continue;
      }
      sigmoid_of[n] = s;
      tanh_of[n] = t;
      folded[static_cast<std::size_t>(s)] = folded[static_cast<std::size_t>(t)] = true;
    }
  }
  bool bf16_leaves = true;
  for (int leaf = 0; leaf < program.numLeaves(); ++leaf) bf16_leaves &= program.leafDType(leaf) == DType::BFloat16;
  for (std::size_t n = 0; n < program.nodes.size(); ++n) {
    const FusedProgram::Node& node = program.nodes[n];
    if (node.constant) {
      llvm::Constant* value = llvm::ConstantFP::get(b.getFloatTy(), node.value);
      nodes_[n] = lanes > 1 ? b.CreateVectorSplat(lanes, value) : value;
      continue;
    }
    if (folded[n]) continue;  // computed by the product that reads it
    llvm::Value* value = nullptr;
    if (sigmoid_of[n] >= 0) {
      const FusedProgram::Node& sigmoid = program.nodes[static_cast<std::size_t>(sigmoid_of[n])];
      const FusedProgram::Node& tanh = program.nodes[static_cast<std::size_t>(tanh_of[n])];
      value = sigmoidTimesTanhF(b, operand(sigmoid.a), operand(tanh.a));
    } else {
      llvm::Value* a = operand(node.a);
      value = node.unary() ? unaryOp(b, node.op, program.dtype, a, rounded16[n])
                           : binaryOp(b, node.op, program.dtype, a, operand(node.b));
    }
    rounded_[n] = node.rounded && rounds[n];
    if (rounded_[n] && program.dtype == DType::BFloat16) {
      // With every leaf in bfloat16, a NaN anywhere in the program has a zero lower half (a leaf's,
      // x86's default NaN, or one of those propagated; ir_math's bit tricks keep it), and an
      // arithmetic op's NaN result is quiet: those results round without the NaN test. A NaN a
      // selection, negation or exp's NaN pass-through returns may be a leaf's signaling one.
      const bool arithmetic = node.op == OpId::Add || node.op == OpId::Sub || node.op == OpId::Mul ||
                              node.op == OpId::Div || node.op == OpId::Sigmoid || node.op == OpId::Tanh;
      nodes_[n] = roundToBf16(b, value, arithmetic && bf16_leaves);
    } else {
      nodes_[n] = rounded_[n] ? roundTo(b, value, program.dtype) : value;
    }
  }
}

bool FusedValues::exact(int ref) const {
  if (ref >= 0) return program_.dtype == DType::Float32 || rounded_[static_cast<std::size_t>(ref)];
  return program_.leafDType(FusedProgram::leafOf(ref)) == program_.dtype;
}

llvm::Value* FusedValues::operand(int ref) {
  if (ref >= 0) return nodes_[static_cast<std::size_t>(ref)];
  const std::size_t leaf = static_cast<std::size_t>(FusedProgram::leafOf(ref));
  if (leaves_[leaf] == nullptr) leaves_[leaf] = load_leaf_(static_cast<int>(leaf));
  return leaves_[leaf];
}

}  // namespace shapevm::jit::ir
