// SPDX-License-Identifier: Apache-2.0
// The elementwise kernel family: binary math (add sub mul div pow maximum minimum), comparisons
// (-> bool), logical and/or/not, unary math (neg abs exp log sqrt rsqrt sigmoid tanh relu gelu erf
// silu), where, cast and add_n, with numpy broadcasting of any rank, strided inputs, scalar
// operands (numpy weak scalars, as the reference's tensorArg) and the reference's dtype promotion.
//
// A kernel has up to two code paths, chosen per call by prepare():
//  * flat: every tensor input is dense in the output's row-major order (or a single broadcast
//    element): one unit-stride loop over all elements, which the loop vectorizer turns into
//    AVX2/AVX-512 code. When the spec proves this statically it is the only path (so is it when
//    one dense operand alone walks the output: a unary op, a cast, an op with a scalar).
//  * N-d: a loop nest over the output (static dims and the strides they fix are constants), other
//    strides from KernelArgs (broadcast axes have stride 0, written by prepare()). The innermost
//    loop comes in variants for the inner strides the spec cannot fix (all 1; one input 0 and the
//    rest 1; any), so the common broadcasts (row vector, column vector) keep a unit-stride,
//    vectorizable inner loop; the "any" variant stays scalar unless its body is transcendental.
//    A strided operand that alone walks the output gets the nest only, in the variants all 1 and
//    any (fewer loops for LLVM to compile: BENCHMARKS.md, "O1 transcendentals and matmuls under
//    30 ms").
// float32 transcendental functions are one internal function per module (ir::callElementFunction)
// that every loop calls and the loop vectorizer widens, not a polynomial inlined into every loop.
// Loads and stores carry alias-scope metadata (the output never aliases an input), so the
// vectorizer needs no runtime overlap checks; loop metadata keeps static trip counts from being
// fully unrolled (see loopHints).
// float16/bfloat16 compute in float32 and round on store (bfloat16 with integer ops, exactly the
// reference's floatToBf16, denormals included); an operand whose dtype differs from the promoted
// one is converted with the reference's cast semantics and rounded to the promoted dtype, exactly
// like the reference's castTensor. float32 transcendental functions come from ir_math
// (vectorizable, within 1e-6 of the reference); pow, rsqrt and float64 math compute in double
// with libm like the reference does (bit-identical).
//
// Not compiled (supports() says why; the op stays interpreted): integer div and pow (the
// reference reports zero divisors and negative exponents as errors, a kernel cannot), ops the
// reference rejects (sub/div/pow on bool, logical ops on non-bool, neg on bool), scalar operands
// of unary ops and cast, scalar where conditions, all-scalar calls, more than 3 scalar operands.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>

#include "jit/clip_period.h"
#include "jit/kernel_abi.h"
#include "jit/llvm_cpu/codegen_math.h"
#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/ir_math.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"
#include "ops/kernel_util.h"

namespace shapevm::jit {

namespace {

enum class Kind { Binary, Unary, Where, Cast, AddN };

// The kernel shape of an op, from its schema: ops.def marks the ops this family compiles (`ew`)
// and their class decides the kind. A class added to OpClass must be decided here (-Wswitch).
bool kindOf(OpId op, Kind& kind) {
  const OpSchema& schema = OpRegistry::global().schema(op);
  if (!schema.jit.elementwise) return false;
  switch (schema.cls) {
    case OpClass::Binary:
    case OpClass::Compare: kind = Kind::Binary; return true;
    case OpClass::Unary: kind = Kind::Unary; return true;
    case OpClass::Select: kind = Kind::Where; return true;
    case OpClass::Cast: kind = Kind::Cast; return true;
    case OpClass::Nary: kind = Kind::AddN; return true;
    case OpClass::Contraction:
    case OpClass::View:
    case OpClass::Movement:
    case OpClass::Reduction:
    case OpClass::Normalization:
    case OpClass::Copy:
    case OpClass::Creation: return false;  // not elementwise (op_schema_test rejects `ew` on them)
  }
  return false;
}

bool isComparison(OpId op) {
  return OpRegistry::global().schema(op).cls == OpClass::Compare;
}
// Binary ops on bool operands with a bool result (logical and/or).
bool isLogical(OpId op) {
  const OpSchema& schema = OpRegistry::global().schema(op);
  return schema.cls == OpClass::Binary && schema.dtype_rule == DTypeRule::Bool;
}
// Unary ops that produce a float result (integer and bool inputs are cast to float32 first).
bool isFloatMath(OpId op) {
  return OpRegistry::global().schema(op).dtype_rule == DTypeRule::Float;
}

constexpr int kMaxInputs = kMaxKernelOperands - 1;
constexpr int kMaxScalarOperands = 3;
constexpr int kFlatFlagSlot = 3;  // KernelArgs.scalars[3]: 1 when this call can take the flat path

struct InputPlan {
  bool tensor = true;
  DType dtype = DType::Float32;  // storage dtype; for a scalar operand the dtype the reference gives it
  int slot = -1;                 // scalar operand: its KernelArgs.scalars index
  int like = -1;                 // scalar operand: the tensor input whose dtype it takes
  int rank = 0;
  bool contiguous = true;
  bool splat = false;             // tensor whose dims are all static 1: one element for all
  std::int64_t stride[kMaxRank];  // per output axis: static element stride, or -1 (from KernelArgs)
};

struct Plan {
  OpId op = OpId::Add;
  Kind kind = Kind::Binary;
  int num_inputs = 0;
  InputPlan inputs[kMaxInputs];
  DType common = DType::Float32;  // the dtype inputs are converted to (binary, unary, where)
  DType out = DType::Float32;
  int rank = 0;
  std::int64_t out_dims[kMaxRank];     // static size or -1
  std::int64_t out_strides[kMaxRank];  // static stride or -1
  bool static_flat = false;            // the flat path always applies
};

std::string_view opName(OpId op) {
  return OpRegistry::global().schema(op).name;
}

// The dtype the reference gives a scalar operand next to a tensor of dtype `like` (tensorArg).
DType weakScalarDType(const Value& v, DType like) {
  if (v.isFloat() && !isFloating(like)) return DType::Float32;
  if (v.isInt() && like == DType::Bool) return DType::Int64;
  return like;
}

Status planTypes(const KernelSpec& spec, Plan& p) {
  const std::string_view name = opName(spec.op);
  auto dt = [&](int k) { return p.inputs[k].dtype; };
  switch (p.kind) {
    case Kind::Binary: {
      if (isLogical(spec.op) && (dt(0) != DType::Bool || dt(1) != DType::Bool)) {
        return makeError(ErrorCode::Unsupported, "{} on {} and {}: the reference rejects non-bool operands", name,
                         dtypeName(dt(0)), dtypeName(dt(1)));
      }
      p.common = promoteTypes(dt(0), dt(1));
      const bool arithmetic_only = spec.op == OpId::Sub || spec.op == OpId::Div || spec.op == OpId::Pow;
      if (p.common == DType::Bool && arithmetic_only) {
        return makeError(ErrorCode::Unsupported, "{} on bool operands: the reference rejects it", name);
      }
      if (isInteger(p.common) && (spec.op == OpId::Div || spec.op == OpId::Pow)) {
        return makeError(ErrorCode::Unsupported,
                         "{} on {}: integer {} stays interpreted (the reference reports {} as an error, a kernel "
                         "cannot)",
                         name, dtypeName(p.common), name,
                         spec.op == OpId::Div ? "division by zero" : "negative exponents");
      }
      p.out = isComparison(spec.op) || isLogical(spec.op) ? DType::Bool : p.common;
      return Status::ok();
    }
    case Kind::Unary: {
      if (spec.op == OpId::LogicalNot && dt(0) != DType::Bool) {
        return makeError(ErrorCode::Unsupported, "logical_not on {}: the reference rejects non-bool operands",
                         dtypeName(dt(0)));
      }
      if (spec.op == OpId::Neg && dt(0) == DType::Bool) {
        return makeError(ErrorCode::Unsupported, "neg on bool: the reference rejects it");
      }
      p.common = isFloatMath(spec.op) && !isFloating(dt(0)) ? DType::Float32 : dt(0);
      p.out = p.common;
      return Status::ok();
    }
    case Kind::Where:
      p.common = promoteTypes(dt(1), dt(2));
      p.out = p.common;
      return Status::ok();
    case Kind::Cast:
      if (spec.attrs.empty() || spec.attrs[0].kind != AttrKind::DType) {
        return makeError(ErrorCode::Unsupported, "cast without a dtype attribute");
      }
      p.common = dt(0);
      p.out = spec.attrs[0].dtype;
      return Status::ok();
    case Kind::AddN: {
      DType acc = dt(0);
      for (int k = 1; k < p.num_inputs; ++k) acc = promoteTypes(acc, dt(k));
      p.common = acc;
      p.out = acc;
      return Status::ok();
    }
  }
  return Status::ok();
}

Status planGeometry(const KernelSpec& spec, Plan& p) {
  p.rank = 0;
  for (int k = 0; k < p.num_inputs; ++k) {
    if (p.inputs[k].tensor) p.rank = std::max(p.rank, p.inputs[k].rank);
  }
  const int rank = p.rank;
  for (int d = 0; d < rank; ++d) {
    std::int64_t size = -1;
    bool dynamic = false;
    for (int k = 0; k < p.num_inputs; ++k) {
      const InputPlan& in = p.inputs[k];
      const int j = d - (rank - in.rank);
      if (!in.tensor || j < 0) continue;
      const DimSpec& dim = spec.inputs[static_cast<std::size_t>(k)].dims[j];
      if (!dim.isStatic()) {
        dynamic = true;
      } else if (dim.size != 1) {
        if (size >= 0 && size != dim.size) {
          return makeError(ErrorCode::ShapeMismatch,
                           "{}: the spec's shapes cannot be broadcast together (axis {}: {} vs {})", spec.signature(),
                           d, size, dim.size);
        }
        size = dim.size;
      }
    }
    p.out_dims[d] = size >= 0 ? size : dynamic ? -1 : 1;
  }
  // Output strides (the output is a fresh row-major tensor).
  std::int64_t suffix = 1;
  for (int d = rank - 1; d >= 0; --d) {
    p.out_strides[d] = suffix;
    suffix = (suffix >= 0 && p.out_dims[d] >= 0) ? suffix * p.out_dims[d] : -1;
  }
  p.static_flat = true;
  for (int d = 0; d < rank; ++d) p.static_flat = p.static_flat && p.out_dims[d] >= 0;
  for (int k = 0; k < p.num_inputs; ++k) {
    InputPlan& in = p.inputs[k];
    if (!in.tensor) continue;
    const OperandSpec& operand = spec.inputs[static_cast<std::size_t>(k)];
    const int lead = rank - in.rank;
    in.splat = true;
    for (int j = 0; j < in.rank; ++j) in.splat = in.splat && operand.dims[j].isStatic() && operand.dims[j].size == 1;
    // Static strides: broadcast axes (absent or static 1) are 0; a contiguous input's axis whose
    // size and every later size are static has its row-major stride.
    std::int64_t natural = 1;
    bool natural_known = true;
    bool dense = operand.contiguous;
    for (int d = rank - 1; d >= 0; --d) {
      const int j = d - lead;
      if (j < 0) {
        in.stride[d] = 0;
        dense = dense && p.out_dims[d] == 1;
        continue;
      }
      const DimSpec& dim = operand.dims[j];
      if (dim.isStatic() && dim.size == 1) {
        in.stride[d] = 0;
      } else if (operand.contiguous && natural_known && dim.isStatic()) {
        in.stride[d] = natural;
      } else {
        in.stride[d] = -1;
      }
      dense = dense && dim.isStatic() && dim.size == p.out_dims[d];
      if (dim.isStatic() && natural_known) {
        natural *= dim.size;
      } else {
        natural_known = false;
      }
    }
    p.static_flat = p.static_flat && (in.splat || dense);
  }
  return Status::ok();
}

Status makePlan(const KernelSpec& spec, Plan& p) {
  p.op = spec.op;
  if (!kindOf(spec.op, p.kind)) {
    return makeError(ErrorCode::Unsupported, "{} is not an elementwise op", opName(spec.op));
  }
  const std::string_view name = opName(spec.op);
  const int count = static_cast<int>(spec.inputs.size());
  const int expected = p.kind == Kind::Binary ? 2 : p.kind == Kind::Where ? 3 : p.kind == Kind::AddN ? -1 : 1;
  if ((expected > 0 && count != expected) || count < 1) {
    return makeError(ErrorCode::Unsupported, "{} with {} inputs", name, count);
  }
  if (count > kMaxInputs) {
    return makeError(ErrorCode::Unsupported, "{} with {} inputs: a kernel takes at most {}", name, count, kMaxInputs);
  }
  p.num_inputs = count;
  int first_tensor = -1;
  for (int k = 0; k < count; ++k) {
    const OperandSpec& operand = spec.inputs[static_cast<std::size_t>(k)];
    InputPlan& in = p.inputs[k];
    in = InputPlan{};
    in.tensor = operand.is_tensor;
    if (!operand.is_tensor) continue;
    if (operand.rank < 0 || operand.rank > kMaxRank) {
      return makeError(ErrorCode::Unsupported, "{}: input {} has rank {}", name, k, operand.rank);
    }
    in.dtype = operand.dtype;
    in.rank = operand.rank;
    in.contiguous = operand.contiguous;
    if (first_tensor < 0) first_tensor = k;
  }
  if (first_tensor < 0) return makeError(ErrorCode::Unsupported, "{}: every operand is a scalar", name);
  // Scalar operands: a numpy weak scalar takes its tensor neighbour's dtype (the kernel assumes
  // the scalar's kind keeps it so; outputs() declines a call where it does not).
  int scalars = 0;
  for (int k = 0; k < count; ++k) {
    InputPlan& in = p.inputs[k];
    if (in.tensor) continue;
    switch (p.kind) {
      case Kind::Unary:
      case Kind::Cast:
        return makeError(ErrorCode::Unsupported, "{} of a scalar operand is not compiled", name);
      case Kind::Where:
        if (k == 0) return makeError(ErrorCode::Unsupported, "where with a scalar condition is not compiled");
        in.like = k == 1 ? 2 : 1;
        if (!p.inputs[in.like].tensor) {
          return makeError(ErrorCode::Unsupported, "where with two scalar values is not compiled");
        }
        break;
      case Kind::Binary:
        in.like = 1 - k;
        break;
      case Kind::AddN:
        in.like = first_tensor;
        break;
    }
    in.dtype = p.inputs[in.like].dtype;
    in.slot = scalars++;
  }
  if (scalars > kMaxScalarOperands) {
    return makeError(ErrorCode::Unsupported, "{} with {} scalar operands: a kernel takes at most {}", name, scalars,
                     kMaxScalarOperands);
  }
  SVM_RETURN_IF_ERROR(planTypes(spec, p));
  return planGeometry(spec, p);
}

// ---- code generation ----

// How a loop may be transformed by the O3 pipeline.
enum class LoopKind {
  Outer,         // not innermost: never unrolled
  Vectorize,     // innermost: vectorized and interleaved as the cost model likes
  NoInterleave,  // innermost with runtime strides and a costly body: vectorized (gathers), not interleaved
  Scalar,        // innermost with runtime strides and a cheap body: left scalar (no stride versioning)
};

// Loop metadata that keeps the O3 pipeline from fully unrolling loops with static trip counts
// (seconds of compile time and icache-hostile code otherwise): loops the vectorizer does not touch
// get llvm.loop.unroll.disable; the loops it produces are marked vectorized and not to be unrolled
// through llvm.loop.vectorize.followup_all (an unroll.disable on the original loop would also stop
// the vectorizer from interleaving).
ir::LoopHints loopHints(LoopKind kind) {
  ir::LoopHints hints;
  hints.no_unroll = kind == LoopKind::Outer || kind == LoopKind::Scalar;
  if (kind == LoopKind::Scalar) hints.vectorize_width = 1;
  if (kind == LoopKind::Scalar || kind == LoopKind::NoInterleave) hints.interleave_count = 1;
  hints.no_unroll_after_vectorize = kind == LoopKind::Vectorize || kind == LoopKind::NoInterleave;
  return hints;
}

enum class Inner { Zero, One, Runtime };  // an input's innermost stride in one loop-nest variant

class Emitter {
 public:
  Emitter(ir::Builder& b, llvm::Value* args_ptr, const Plan& p, int vector_bits)
      : b_(b), args_(b, args_ptr), args_ptr_(args_ptr), p_(p), out_(p.num_inputs), vector_bits_(vector_bits) {
    llvm::LLVMContext& context = b.getContext();
    llvm::MDBuilder md(context);
    llvm::MDNode* domain = md.createAnonymousAliasScopeDomain("svm.elementwise");
    llvm::MDNode* scope = md.createAnonymousAliasScope(domain, "output");
    output_scope_ = llvm::MDNode::get(context, {scope});
  }

  void run() {
    for (int k = 0; k < p_.num_inputs; ++k) {
      if (p_.inputs[k].tensor) base_[k] = args_.data(k);
    }
    out_base_ = args_.data(out_);
    // Loop-invariant operands: scalars and single-element tensors, loaded once.
    for (int k = 0; k < p_.num_inputs; ++k) {
      const InputPlan& in = p_.inputs[k];
      invariant_[k] = nullptr;
      if (!in.tensor) {
        llvm::Value* ptr = b_.CreateConstInBoundsGEP1_64(
            b_.getInt8Ty(), args_ptr_,
            offsetof(KernelArgs, scalars) + sizeof(std::int64_t) * static_cast<std::size_t>(in.slot));
        invariant_[k] = loadOperand(k, ptr);
      } else if (in.splat) {
        invariant_[k] = loadOperand(k, base_[k]);
      }
    }
    for (int d = 0; d < p_.rank; ++d) {
      out_dim_[d] = p_.out_dims[d] >= 0 ? ir::constI64(b_, p_.out_dims[d]) : args_.dim(out_, d);
    }
    // One operand walks the output (the others are scalars or single elements): dense, every call
    // takes the flat path (prepare() finds its strides the output's), so no loop nest is emitted;
    // strided, the flat path would only serve a call whose view happens to be dense, which the
    // nest's unit-stride variant computes too, so only the nest is emitted.
    const int walker = soleWalker();
    const bool dense_walker = walker >= 0 && p_.inputs[walker].contiguous && p_.inputs[walker].rank == p_.rank;
    if (p_.static_flat || dense_walker) {
      emitFlat();
      b_.CreateRetVoid();
      return;
    }
    if (p_.rank >= 2 && walker < 0) {
      llvm::Function* function = b_.GetInsertBlock()->getParent();
      llvm::BasicBlock* flat = llvm::BasicBlock::Create(b_.getContext(), "flat", function);
      llvm::BasicBlock* nested = llvm::BasicBlock::Create(b_.getContext(), "nested", function);
      b_.CreateCondBr(b_.CreateICmpNE(args_.scalar(kFlatFlagSlot), ir::constI64(b_, 0)), flat, nested);
      b_.SetInsertPoint(flat);
      emitFlat();
      b_.CreateRetVoid();
      b_.SetInsertPoint(nested);
    }
    emitNested();
  }

 private:
  // ---- element access ----

  // bfloat16 moves as i16 bits and widens/rounds with integer ops: given `fpext bfloat`, InstCombine
  // narrows e.g. fabs to bfloat, which x86 then promotes through the denormal-flushing
  // AVX512-BF16 conversion.
  llvm::Type* storageType(DType dtype) {
    return dtype == DType::BFloat16 ? b_.getInt16Ty() : ir::elementType(b_.getContext(), dtype);
  }

  llvm::LoadInst* rawLoad(DType dtype, llvm::Value* ptr) {
    llvm::LoadInst* load = b_.CreateLoad(storageType(dtype), ptr);
    load->setAlignment(llvm::Align(dtypeSize(dtype)));
    load->setMetadata(llvm::LLVMContext::MD_noalias, output_scope_);
    return load;
  }

  // A stored element -> its compute value (float16/bfloat16 widen to float exactly).
  llvm::Value* widen(llvm::Value* stored, DType dtype) {
    if (dtype == DType::BFloat16) {
      return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(stored, b_.getInt32Ty()), 16), b_.getFloatTy());
    }
    if (dtype == DType::Float16) return b_.CreateFPExt(stored, b_.getFloatTy());
    return stored;
  }

  // float -> bfloat16 bits (i16), round to nearest even with integer ops exactly like the reference's
  // floatToBf16: denormals kept (the AVX512-BF16 conversion instruction that `fptrunc` selects
  // flushes them to zero), NaN quieted.
  llvm::Value* bf16Bits(llvm::Value* value) {
    llvm::Value* bits = b_.CreateBitCast(value, b_.getInt32Ty());
    llvm::Value* odd = b_.CreateAnd(b_.CreateLShr(bits, 16), b_.getInt32(1));
    llvm::Value* rounded = b_.CreateLShr(b_.CreateAdd(bits, b_.CreateAdd(odd, b_.getInt32(0x7fff))), 16);
    llvm::Value* quiet = b_.CreateOr(b_.CreateLShr(bits, 16), b_.getInt32(0x40));
    return b_.CreateTrunc(b_.CreateSelect(b_.CreateFCmpUNO(value, value), quiet, rounded), b_.getInt16Ty());
  }

  // computeType value -> the storage-precision value of `dtype` (float16/bfloat16 round).
  llvm::Value* roundTo(llvm::Value* value, DType dtype) {
    if (dtype == DType::BFloat16) return widen(bf16Bits(value), dtype);
    if (dtype != DType::Float16) return value;
    return b_.CreateFPExt(b_.CreateFPTrunc(value, ir::elementType(b_.getContext(), dtype)), value->getType());
  }

  // The reference's castTensor(x, to) as seen by the compute that follows: convert, then round
  // to the target dtype's storage precision.
  llvm::Value* castTo(llvm::Value* value, DType from, DType to) {
    if (from == to) return value;
    return roundTo(ir::convert(b_, value, from, to), to);
  }

  llvm::Value* toStorage(llvm::Value* value, DType dtype) {
    if (dtype == DType::BFloat16) return bf16Bits(value);
    if (dtype != DType::Float16) return value;
    return b_.CreateFPTrunc(value, ir::elementType(b_.getContext(), dtype));
  }

  llvm::Value* nonzero(llvm::Value* value, DType dtype) { return ir::nonzero(b_, value, dtype); }


  // Where and same-dtype cast move bits without converting them.
  bool rawForm(int k) const {
    const DType dtype = p_.inputs[k].dtype;
    if (p_.kind == Kind::Where) return k > 0 && dtype == p_.common;
    if (p_.kind == Kind::Cast) return dtype == p_.out;
    return false;
  }

  // Loads operand k at `ptr` in the form apply() takes it.
  llvm::Value* loadOperand(int k, llvm::Value* ptr) {
    const DType dtype = p_.inputs[k].dtype;
    llvm::LoadInst* load = rawLoad(dtype, ptr);
    if (rawForm(k)) return load;
    llvm::Value* value = widen(load, dtype);
    switch (p_.kind) {
      case Kind::Binary:
      case Kind::Unary:
        return castTo(value, dtype, p_.common);
      case Kind::Where:
        if (k == 0) return nonzero(value, dtype);
        return toStorage(castTo(value, dtype, p_.common), p_.common);
      case Kind::Cast:
      case Kind::AddN:
        return value;
    }
    return value;
  }

  void storeResult(llvm::Value* ptr, llvm::Value* value, bool raw) {
    if (!raw) value = toStorage(value, p_.out);
    llvm::StoreInst* store = b_.CreateStore(value, ptr);
    store->setAlignment(llvm::Align(dtypeSize(p_.out)));
    store->setMetadata(llvm::LLVMContext::MD_alias_scope, output_scope_);
  }

  // ---- the element function ----

  llvm::Value* binary(OpId op, DType t, llvm::Value* a, llvm::Value* c) { return ir::binaryOp(b_, op, t, a, c); }
  // float32 transcendental functions are called, not inlined: one copy of their polynomial per
  // module however many loop variants (and scalar remainders) compute the op, and one per vector
  // width the loop vectorizer may pick (callElementFunction). Cheap ops stay inline.
  // A bfloat16 result is stored rounded, so exp, sigmoid and tanh take ir_math's 16-bit variants
  // (within 1 ulp of the correctly rounded value; not for float16, codegen_math.h).
  llvm::Value* unary(OpId op, DType t, llvm::Value* x) {
    const bool rounded16 = ir::sixteenBitMathFor(t) && p_.out == t;
    if (!x->getType()->isFloatTy() || !outlined(op)) return ir::unaryOp(b_, op, t, x, rounded16);
    const unsigned lanes = std::max(4u, static_cast<unsigned>(vector_bits_ / 32));
    return ir::callElementFunction(
        b_, fmt::format("svm_{}_f32{}", opName(op), rounded16 ? "_for16" : ""), x,
        [op, rounded16](ir::Builder& b, llvm::Value* v) { return ir::unaryOp(b, op, DType::Float32, v, rounded16); },
        lanes > 4 ? std::vector<unsigned>{lanes / 2, lanes} : std::vector<unsigned>{lanes});
  }
  static bool outlined(OpId op) {
    switch (op) {
      case OpId::Exp:
      case OpId::Log:
      case OpId::Sigmoid:
      case OpId::Tanh:
      case OpId::Gelu:
      case OpId::Erf:
      case OpId::Silu: return true;
      default: return false;
    }
  }

  // The output element from the operands (in loadOperand's form); `raw` says it is already in
  // storage form.
  llvm::Value* apply(llvm::Value* const* v, bool& raw) {
    raw = false;
    switch (p_.kind) {
      case Kind::Binary:
        return binary(p_.op, p_.common, v[0], v[1]);
      case Kind::Unary:
        return unary(p_.op, p_.common, v[0]);
      case Kind::Where:
        raw = true;
        return b_.CreateSelect(v[0], v[1], v[2]);
      case Kind::Cast:
        if (rawForm(0)) {
          raw = true;
          return v[0];
        }
        return ir::convert(b_, v[0], p_.inputs[0].dtype, p_.out);
      case Kind::AddN: {
        // Left fold with the reference's promotion and rounding after every step.
        DType acc_type = p_.inputs[0].dtype;
        llvm::Value* acc = v[0];
        for (int k = 1; k < p_.num_inputs; ++k) {
          const DType t = promoteTypes(acc_type, p_.inputs[k].dtype);
          acc = roundTo(binary(OpId::Add, t, castTo(acc, acc_type, t), castTo(v[k], p_.inputs[k].dtype, t)), t);
          acc_type = t;
        }
        return acc;
      }
    }
    return v[0];
  }

  // ---- loops ----

  // One loop over every element: dense inputs at index i, invariant ones hoisted.
  void emitFlat() {
    llvm::Value* total = ir::constI64(b_, 1);
    for (int d = 0; d < p_.rank; ++d) total = b_.CreateMul(total, out_dim_[d], "numel", true, true);
    ir::emitLoop(
        b_, ir::constI64(b_, 0), total, 1,
        [&](llvm::Value* i) {
          llvm::Value* values[kMaxInputs];
          for (int k = 0; k < p_.num_inputs; ++k) {
            values[k] = invariant_[k] != nullptr ? invariant_[k]
                                                 : loadOperand(k, ir::elementPtr(b_, p_.inputs[k].dtype, base_[k], i));
          }
          bool raw = false;
          llvm::Value* result = apply(values, raw);
          storeResult(ir::elementPtr(b_, p_.out, out_base_, i), result, raw);
        },
        "i", loopHints(LoopKind::Vectorize));
  }

  void emitNested() {
    const int rank = p_.rank;
    for (int k = 0; k < p_.num_inputs; ++k) {
      const InputPlan& in = p_.inputs[k];
      if (!in.tensor || in.splat) continue;
      for (int d = 0; d < rank; ++d) {
        stride_[k][d] = in.stride[d] >= 0 ? ir::constI64(b_, in.stride[d]) : args_.stride(k, d);
      }
    }
    for (int d = 0; d < rank; ++d) {
      out_stride_[d] = p_.out_strides[d] >= 0 ? ir::constI64(b_, p_.out_strides[d]) : args_.stride(out_, d);
    }
    // Innermost stride per input: fixed by the spec, or one of the runtime variants.
    Inner fixed[kMaxInputs];
    int runtime[kMaxInputs];
    int num_runtime = 0;
    for (int k = 0; k < p_.num_inputs; ++k) {
      const InputPlan& in = p_.inputs[k];
      fixed[k] = Inner::Zero;  // scalars and splats are invariant anyway
      if (!in.tensor || in.splat || rank == 0) continue;
      const std::int64_t s = in.stride[rank - 1];
      fixed[k] = s == 0 ? Inner::Zero : s == 1 ? Inner::One : Inner::Runtime;
      if (s < 0) runtime[num_runtime++] = k;
    }
    if (num_runtime > 0) {
      // Variant "all 1", then "one of them 0, the rest 1" (row/column broadcasts), then any.
      std::vector<std::vector<Inner>> variants;
      std::vector<Inner> all_one(fixed, fixed + p_.num_inputs);
      for (int r = 0; r < num_runtime; ++r) all_one[static_cast<std::size_t>(runtime[r])] = Inner::One;
      variants.push_back(all_one);
      // (A sole walking operand broadcast along the innermost axis is rare: the "any" nest has it.)
      if (num_runtime <= 3 && soleWalker() < 0) {
        for (int r = 0; r < num_runtime; ++r) {
          std::vector<Inner> one_zero = all_one;
          one_zero[static_cast<std::size_t>(runtime[r])] = Inner::Zero;
          variants.push_back(one_zero);
        }
      }
      llvm::Function* function = b_.GetInsertBlock()->getParent();
      for (std::size_t v = 0; v < variants.size(); ++v) {
        llvm::Value* matches = b_.getTrue();
        for (int r = 0; r < num_runtime; ++r) {
          const int k = runtime[r];
          const std::int64_t want = variants[v][static_cast<std::size_t>(k)] == Inner::One ? 1 : 0;
          matches = b_.CreateAnd(matches, b_.CreateICmpEQ(stride_[k][rank - 1], ir::constI64(b_, want)));
        }
        llvm::BasicBlock* taken = llvm::BasicBlock::Create(b_.getContext(), fmt::format("inner.v{}", v), function);
        llvm::BasicBlock* next = llvm::BasicBlock::Create(b_.getContext(), fmt::format("inner.not_v{}", v), function);
        b_.CreateCondBr(matches, taken, next);
        b_.SetInsertPoint(taken);
        emitNest(variants[v].data());
        b_.CreateRetVoid();
        b_.SetInsertPoint(next);
      }
    }
    emitNest(fixed);
    b_.CreateRetVoid();
  }

  void emitNest(const Inner* inner) {
    llvm::Value* offsets[kMaxKernelOperands];
    for (int k = 0; k <= p_.num_inputs; ++k) offsets[k] = ir::constI64(b_, 0);
    if (p_.rank == 0) {
      emitRow(inner, offsets, nullptr);
      return;
    }
    emitAxis(0, inner, offsets);
  }

  bool walks(int k) const { return p_.inputs[k].tensor && !p_.inputs[k].splat; }
  // The one operand that walks the output, or -1 when none or several do.
  int soleWalker() const {
    int walker = -1;
    for (int k = 0; k < p_.num_inputs; ++k) {
      if (!walks(k)) continue;
      if (walker >= 0) return -1;
      walker = k;
    }
    return walker;
  }

  // A body worth vectorizing even with gathers (the float32 transcendental functions).
  bool costly() const {
    return p_.kind == Kind::Unary && isFloatMath(p_.op) && p_.op != OpId::Sqrt && p_.common != DType::Float64;
  }

  void emitAxis(int d, const Inner* inner, llvm::Value* const* offsets) {
    if (d == p_.rank - 1) {
      emitRow(inner, offsets, out_dim_[d]);
      return;
    }
    ir::emitLoop(
        b_, ir::constI64(b_, 0), out_dim_[d], 1,
        [&](llvm::Value* i) {
          llvm::Value* next[kMaxKernelOperands];
          for (int k = 0; k <= p_.num_inputs; ++k) {
            if (k < p_.num_inputs && !walks(k)) continue;
            llvm::Value* stride = k == out_ ? out_stride_[d] : stride_[k][d];
            next[k] = b_.CreateAdd(offsets[k], b_.CreateMul(i, stride, "", true, true), "", true, true);
          }
          emitAxis(d + 1, inner, next);
        },
        fmt::format("d{}", d), loopHints(LoopKind::Outer));
  }

  // The innermost loop (or the single element of a 0-d output when `length` is null).
  void emitRow(const Inner* inner, llvm::Value* const* offsets, llvm::Value* length) {
    llvm::Value* rows[kMaxKernelOperands];
    for (int k = 0; k < p_.num_inputs; ++k) {
      if (walks(k)) rows[k] = ir::elementPtr(b_, p_.inputs[k].dtype, base_[k], offsets[k]);
    }
    llvm::Value* out_row = ir::elementPtr(b_, p_.out, out_base_, offsets[out_]);
    auto body = [&](llvm::Value* j) {
      llvm::Value* values[kMaxInputs];
      for (int k = 0; k < p_.num_inputs; ++k) {
        if (!walks(k)) {
          values[k] = invariant_[k];
          continue;
        }
        llvm::Value* index = nullptr;
        switch (inner[k]) {
          case Inner::Zero:
            index = nullptr;
            break;
          case Inner::One:
            index = j;
            break;
          case Inner::Runtime:
            index = b_.CreateMul(j, stride_[k][p_.rank - 1], "", true, true);
            break;
        }
        llvm::Value* ptr = index == nullptr ? rows[k] : ir::elementPtr(b_, p_.inputs[k].dtype, rows[k], index);
        values[k] = loadOperand(k, ptr);
      }
      bool raw = false;
      llvm::Value* result = apply(values, raw);
      storeResult(j == nullptr ? out_row : ir::elementPtr(b_, p_.out, out_row, j), result, raw);
    };
    if (length == nullptr) {
      body(nullptr);
      return;
    }
    LoopKind kind = LoopKind::Vectorize;
    for (int k = 0; k < p_.num_inputs; ++k) {
      if (walks(k) && inner[k] == Inner::Runtime) kind = costly() ? LoopKind::NoInterleave : LoopKind::Scalar;
    }
    ir::emitLoop(b_, ir::constI64(b_, 0), length, 1, body, "j", loopHints(kind));
  }

  ir::Builder& b_;
  ir::ArgsView args_;
  llvm::Value* args_ptr_;
  const Plan& p_;
  const int out_;
  const int vector_bits_;  // the target's widest vector (KernelTarget::vector_bits)
  llvm::MDNode* output_scope_ = nullptr;
  llvm::Value* base_[kMaxInputs] = {};
  llvm::Value* out_base_ = nullptr;
  llvm::Value* invariant_[kMaxInputs] = {};
  llvm::Value* out_dim_[kMaxRank] = {};
  llvm::Value* out_stride_[kMaxRank] = {};
  llvm::Value* stride_[kMaxInputs][kMaxRank] = {};
};

// ---- the family ----

// The launch plan this family keeps per compiled kernel: the Plan of the kernel's spec.
struct PlanOfSpec final : LaunchPlan {
  Plan plan;
};

class ElementwiseFamily final : public KernelFamily, public LlvmKernelEmitter, public ClipPeriods {
 public:
  std::string_view name() const override { return "elementwise"; }

  Status supports(const KernelSpec& spec) const override {
    Plan plan;
    return makePlan(spec, plan);
  }

  // A flat loop over the output, or outer loops (never unrolled) around a vectorized innermost one.
  std::int64_t clipPeriod(const KernelSpec& spec, std::size_t input, int axis) const override {
    return rowMajorClipPeriod(spec, input, axis);
  }

  // The plan, made once per compiled kernel: outputs() and prepare() read it on every launch.
  std::unique_ptr<const LaunchPlan> launchPlan(const KernelSpec& spec) const override {
    auto plan = std::make_unique<PlanOfSpec>();
    if (!makePlan(spec, plan->plan).isOk()) return nullptr;  // the launch reports the error
    return plan;
  }

  Status outputs(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                 std::span<Shape> shapes) const override {
    return plannedOutputs(spec, nullptr, inputs, dtypes, shapes);
  }

  Status prepare(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<const Tensor> outputs,
                 KernelArgs& args) const override {
    return plannedPrepare(spec, nullptr, inputs, outputs, args);
  }

  Status plannedOutputs(const KernelSpec& spec, const LaunchPlan* plan, std::span<const Value* const> inputs,
                        std::span<DType> dtypes, std::span<Shape> shapes) const override {
    if (plan != nullptr) return outputsFor(planOf(plan), spec, inputs, dtypes, shapes);
    Plan made;  // only without the kernel's plan (a Plan is large: not built on the planned path)
    SVM_RETURN_IF_ERROR(makePlan(spec, made));
    return outputsFor(made, spec, inputs, dtypes, shapes);
  }

  Status plannedPrepare(const KernelSpec& spec, const LaunchPlan* plan, std::span<const Value* const> inputs,
                        std::span<const Tensor> outputs, KernelArgs& args) const override {
    if (plan != nullptr) return prepareFor(planOf(plan), spec, inputs, outputs, args);
    Plan made;
    SVM_RETURN_IF_ERROR(makePlan(spec, made));
    return prepareFor(made, spec, inputs, outputs, args);
  }

 private:
  static const Plan& planOf(const LaunchPlan* plan) { return static_cast<const PlanOfSpec*>(plan)->plan; }

  static Status outputsFor(const Plan& p, const KernelSpec& spec, std::span<const Value* const> inputs,
                           std::span<DType> dtypes, std::span<Shape> shapes) {
    if (static_cast<int>(inputs.size()) != p.num_inputs || dtypes.empty() || shapes.empty()) {
      return makeError(ErrorCode::Internal, "{}: {} inputs for a kernel of {}", opName(spec.op), inputs.size(),
                       p.num_inputs);
    }
    // The tensor inputs' shapes (pointers: no Shape copies); they broadcast to the output's shape.
    const Shape* operand_shapes[kMaxInputs] = {};
    int tensors = 0;
    for (int k = 0; k < p.num_inputs; ++k) {
      const Value* value = inputs[static_cast<std::size_t>(k)];
      const InputPlan& in = p.inputs[k];
      if (value == nullptr) return makeError(ErrorCode::Unsupported, "input {} is missing", k);
      if (!in.tensor) {
        if (value->isTensor() || !value->isScalar()) {
          return makeError(ErrorCode::Unsupported, "input {} is {}, the kernel takes a scalar", k, value->describe());
        }
        const DType actual = weakScalarDType(*value, p.inputs[in.like].dtype);
        if (actual != in.dtype) {
          return makeError(ErrorCode::Unsupported, "scalar input {} ({}) acts as {}, the kernel was compiled for {}", k,
                           value->describe(), dtypeName(actual), dtypeName(in.dtype));
        }
        continue;
      }
      if (!value->isTensor()) {
        return makeError(ErrorCode::Unsupported, "input {} is {}, the kernel takes a tensor", k, value->describe());
      }
      const Tensor& t = value->tensor();
      const OperandSpec& operand = spec.inputs[static_cast<std::size_t>(k)];
      if (t.dtype() != in.dtype || t.rank() != in.rank || (in.contiguous && !t.isContiguous())) {
        return makeError(ErrorCode::Unsupported, "input {} is {}, the kernel was compiled for {}", k, t.describe(),
                         operand.toString());
      }
      for (int d = 0; d < t.rank(); ++d) {
        if (operand.dims[d].isStatic() && operand.dims[d].size != t.dim(d)) {
          return makeError(ErrorCode::Unsupported, "input {} is {}, the kernel was compiled for {}", k, t.describe(),
                           operand.toString());
        }
      }
      operand_shapes[tensors++] = &t.shape();
    }
    // Most launches see equal shapes: the output's is then theirs, with no broadcasting to do.
    if (tensors == 0) return makeError(ErrorCode::Internal, "{}: a kernel without tensor inputs", opName(spec.op));
    Shape shape = *operand_shapes[0];
    for (int k = 1; k < tensors; ++k) {
      if (*operand_shapes[k] == shape) continue;
      SVM_ASSIGN_OR_RETURN(shape, broadcastShapes(shape, *operand_shapes[k]));
    }
    if (shape.rank() != p.rank)
      return makeError(ErrorCode::Internal, "output rank {} for a rank-{} kernel", shape.rank(), p.rank);
    for (int d = 0; d < p.rank; ++d) {
      if (p.out_dims[d] >= 0 && p.out_dims[d] != shape[d]) {
        return makeError(ErrorCode::Unsupported, "output {} does not fit the kernel's static dims", shape.toString());
      }
    }
    dtypes[0] = p.out;
    shapes[0] = shape;
    return Status::ok();
  }

  // `args` arrive zeroed with the operands' own shapes and strides (prepareCall): only the
  // tensor inputs' rows up to the output's rank are rewritten.
  static Status prepareFor(const Plan& p, const KernelSpec& spec, std::span<const Value* const> inputs,
                           std::span<const Tensor> outputs, KernelArgs& args) {
    if (outputs.empty() || static_cast<int>(inputs.size()) != p.num_inputs) {
      return makeError(ErrorCode::Internal, "{}: prepare() without its operands", opName(spec.op));
    }
    const Tensor& out = outputs[0];
    const int rank = out.rank();
    bool flat = true;
    for (int k = 0; k < p.num_inputs; ++k) {
      const InputPlan& in = p.inputs[k];
      const Value& value = *inputs[static_cast<std::size_t>(k)];
      if (!in.tensor) {
        // The scalar in its dtype's storage bits, as Tensor::scalar stores it.
        args.scalars[in.slot] = 0;
        storeFromDouble(&args.scalars[in.slot], in.dtype, 0, value.toDouble());
        continue;
      }
      // Shape and strides aligned to the output's axes; broadcast axes get stride 0.
      const Tensor& t = value.tensor();
      const int lead = rank - t.rank();
      std::int64_t shape[kMaxRank];
      std::int64_t strides[kMaxRank];
      for (int d = 0; d < rank; ++d) {
        const int j = d - lead;
        shape[d] = j < 0 ? 1 : t.dim(j);
        strides[d] = j < 0 || t.dim(j) == 1 ? 0 : t.stride(j);
        if (!in.splat && out.dim(d) > 1 && strides[d] != out.stride(d)) flat = false;
      }
      for (int d = 0; d < rank; ++d) {
        args.shape[k][d] = shape[d];
        args.strides[k][d] = strides[d];
      }
    }
    args.scalars[kFlatFlagSlot] = flat ? 1 : 0;
    return Status::ok();
  }

 public:
  Status emit(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) const override {
    Plan p;
    SVM_RETURN_IF_ERROR(makePlan(spec, p));
    ir::Builder b(module.getContext());
    llvm::Function* function = ir::beginKernel(module, symbol, b);
    Emitter(b, function->getArg(0), p, targetOf(spec).vector_bits).run();
    markMemoryBound(module);
    return Status::ok();
  }

  // "add_f32_xdyn_x256", "mul_f16_x7_x65_bcast", "cast_f32_to_bf16_xdyn_strided", "where_bool_f32_x3".
  std::string symbolStem(const KernelSpec& spec) const override {
    Plan p;
    if (!makePlan(spec, p).isOk()) return KernelFamily::symbolStem(spec);
    std::string stem(opName(spec.op));
    std::vector<std::string_view> dtypes;
    bool scalar = false;
    bool broadcast = false;
    bool strided = false;
    for (int k = 0; k < p.num_inputs; ++k) {
      const InputPlan& in = p.inputs[k];
      if (!in.tensor) {
        scalar = true;
        continue;
      }
      dtypes.push_back(dtypeShortName(in.dtype));
      strided = strided || !in.contiguous;
      // Broadcast as far as the spec tells: a missing axis or a static size that differs.
      const OperandSpec& operand = spec.inputs[static_cast<std::size_t>(k)];
      broadcast = broadcast || in.rank != p.rank;
      for (int j = 0; j < in.rank; ++j) {
        broadcast =
            broadcast || (operand.dims[j].isStatic() && operand.dims[j].size != p.out_dims[j + p.rank - in.rank]);
      }
    }
    bool uniform = true;
    for (std::string_view d : dtypes) uniform = uniform && d == dtypes[0];
    std::string joined(dtypes[0]);
    for (std::size_t k = 1; k < dtypes.size() && !uniform; ++k) joined += fmt::format("_{}", dtypes[k]);
    stem += "_" + joined;
    if (p.kind == Kind::Cast) stem += fmt::format("_to_{}", dtypeShortName(p.out));
    for (int d = 0; d < p.rank; ++d) stem += p.out_dims[d] >= 0 ? fmt::format("_x{}", p.out_dims[d]) : "_xdyn";
    if (scalar) stem += "_scalar";
    if (broadcast) stem += "_bcast";
    if (strided) stem += "_strided";
    return stem;
  }
};

}  // namespace

const KernelFamily* elementwiseFamily(OpId op) {
  static const ElementwiseFamily family;
  Kind kind;
  return kindOf(op, kind) ? &family : nullptr;
}

}  // namespace shapevm::jit
