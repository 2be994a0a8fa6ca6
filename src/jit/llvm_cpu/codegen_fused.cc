// SPDX-License-Identifier: Apache-2.0
// The `fused` kernel family: one loop nest over the iteration shape computing every output of a
// FusedProgram (fusion.h) from its leaves, intermediates in registers. Leaf strides are read from
// KernelArgs (views and broadcasts are index maps, never copies); each leaf's innermost stride
// class (0 = broadcast, hoisted out of the inner loop; 1 = dense, a unit-stride load the loop
// vectorizer widens; -1 = any) is baked in and checked by the region runtime before each call.
// Outputs are fresh contiguous buffers; an in-place store writes over its leaf's own element
// (read in the same iteration). The element math is codegen_math's, rounded to the program dtype
// after every op in float16 (results match the reference op by op); a bfloat16 program keeps
// some intermediates in float32 (codegen_math.h), within validation's tolerance of the reference.
// A reduction program (fusion.h) loops over its kept axes and accumulates the DAG's value over
// the trailing reduced axes into one output element each (sums in double, reassociation allowed
// so the vectorizer keeps partial sums; max/min with llvm.maximum/minimum, NaN propagating); its
// further outputs are stored per element inside that loop.
// Static dims are constants; a known divisor k makes the extent (n / k) * k (exact), so the
// vectorizer sees a multiple of k.
#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <llvm/IR/MDBuilder.h>

#include "jit/fusion.h"
#include "jit/llvm_cpu/codegen_math.h"
#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"

namespace shapevm::jit {

bool isFusableElementwise(OpId op) {
  return OpRegistry::global().schema(op).jit.fuse;
}

namespace {

std::string_view reduceName(FusedProgram::Reduce reduce) {
  switch (reduce) {
    case FusedProgram::Reduce::Sum: return "sum";
    case FusedProgram::Reduce::Mean: return "mean";
    case FusedProgram::Reduce::Max: return "max";
    case FusedProgram::Reduce::Min: return "min";
    case FusedProgram::Reduce::None: break;
  }
  return "";
}

std::string nodeName(const FusedProgram::Node& node) {
  if (node.constant) return "const";
  return std::string(OpRegistry::global().schema(node.op).name);
}

}  // namespace

Shape FusedProgram::outputShape(const Shape& iteration, std::size_t o) const {
  if (reduce == Reduce::None || o > 0) return iteration;
  Shape out;
  for (int d = 0; d < iteration.rank(); ++d) {
    if (d < iteration.rank() - reduce_axes) {
      out.push_back(iteration[d]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  return out;
}

std::string FusedProgram::describe() const {
  std::string ops;
  for (const Node& node : nodes) ops += (ops.empty() ? "" : ",") + nodeName(node);
  std::string dims;
  for (std::size_t d = 0; d < static_dims.size(); ++d) {
    if (static_dims[d] >= 0) dims += fmt::format("{}d{}={}", dims.empty() ? "" : " ", d, static_dims[d]);
    if (d < divisors.size() && divisors[d] > 1) dims += fmt::format("{}d{}%{}", dims.empty() ? "" : " ", d, divisors[d]);
  }
  if (!dims.empty()) dims = " [" + dims + "]";
  if (reduce != Reduce::None) {
    const std::string kept = outputs.size() > 1 ? fmt::format(" keeping {} per element", outputs.size() - 1) : "";
    return fmt::format("{}({}) over {} {}{} of {} leaves{}", reduceName(reduce), ops.empty() ? "leaf" : ops, reduce_axes,
                       reduce_axes == 1 ? "axis" : "axes", kept, numLeaves(), dims);
  }
  const std::string over = in_place.empty() ? "" : fmt::format(" + {} in place", in_place.size());
  return fmt::format("{} -> {} output{}{} over {} leaves{}", ops, outputs.size(), outputs.size() == 1 ? "" : "s", over,
                     numLeaves(), dims);
}

namespace {

class FusedEmitter {
 public:
  FusedEmitter(ir::Builder& b, llvm::Value* args, const FusedProgram& p, const KernelParams& params)
      : b_(b), args_(b, args), p_(p), params_(params) {
    llvm::LLVMContext& context = b.getContext();
    llvm::MDBuilder md(context);
    llvm::MDNode* domain = md.createAnonymousAliasScopeDomain("svm.fused");
    llvm::MDNode* in_place = md.createAnonymousAliasScope(domain, "in place");
    // Each fresh output, the in-place leaves and the other leaves are disjoint sets of memory
    // (the region runtime checks that an in-place leaf shares no storage with another leaf). A
    // scope per output: with one scope for all of them the vectorizer checked two outputs for
    // overlap at run time and kept a scalar copy of the whole loop body for it (~40% of a
    // two-output kernel's IR).
    std::vector<llvm::Metadata*> outputs;
    for (std::size_t o = 0; o < p_.outputs.size(); ++o) {
      outputs.push_back(md.createAnonymousAliasScope(domain, fmt::format("output {}", o)));
    }
    for (std::size_t o = 0; o < outputs.size(); ++o) {
      std::vector<llvm::Metadata*> others{in_place};
      for (std::size_t q = 0; q < outputs.size(); ++q) {
        if (q != o) others.push_back(outputs[q]);
      }
      output_scopes_.push_back(llvm::MDNode::get(context, {outputs[o]}));
      output_noalias_.push_back(llvm::MDNode::get(context, others));
    }
    output_scope_ = llvm::MDNode::get(context, outputs);
    in_place_scope_ = llvm::MDNode::get(context, {in_place});
    outputs.push_back(in_place);
    leaf_noalias_ = llvm::MDNode::get(context, outputs);
    for (const auto& [leaf, ref] : p_.in_place) in_place_leaves_.push_back(leaf);
  }

  void run() {
    const int leaves = p_.numLeaves();
    out_slot_ = leaves;
    for (int k = 0; k < leaves; ++k) base_.push_back(args_.data(k));
    for (std::size_t o = 0; o < p_.outputs.size(); ++o) out_base_.push_back(args_.data(out_slot_ + static_cast<int>(o)));
    if (p_.rank == 0) {
      std::vector<llvm::Value*> zero(static_cast<std::size_t>(leaves), ir::constI64(b_, 0));
      emitElement(zero, ir::constI64(b_, 0), {});
      b_.CreateRetVoid();
      return;
    }
    // Extents: static ones as constants; a known divisor as (n / k) * k with an exact division,
    // so the vectorizer sees a multiple of k and needs no remainder loop. Reductions read them
    // from the first leaf (its shape is the iteration shape), other programs from the output.
    for (int d = 0; d < p_.rank; ++d) {
      const std::size_t axis = static_cast<std::size_t>(d);
      const std::int64_t fixed = axis < p_.static_dims.size() ? p_.static_dims[axis] : -1;
      const std::int64_t divisor = axis < p_.divisors.size() ? p_.divisors[axis] : 1;
      llvm::Value* extent = fixed >= 0 ? ir::constI64(b_, fixed) : args_.dim(reducing() || p_.outputs.empty() ? 0 : out_slot_, d);
      if (fixed < 0 && divisor > 1) {
        llvm::Value* k = ir::constI64(b_, divisor);
        extent = b_.CreateNUWMul(b_.CreateExactUDiv(extent, k), k);
      }
      dims_.push_back(extent);
    }
    for (int k = 0; k < leaves; ++k) {
      std::vector<llvm::Value*> strides;
      for (int d = 0; d < p_.rank; ++d) strides.push_back(args_.stride(k, d));
      strides_.push_back(strides);
    }
    std::vector<llvm::Value*> offsets(static_cast<std::size_t>(leaves), ir::constI64(b_, 0));
    if (reducing()) {
      emitReduceAxis(0, offsets, ir::constI64(b_, 0));
    } else {
      emitAxis(0, offsets, ir::constI64(b_, 0));
    }
    b_.CreateRetVoid();
  }

 private:
  bool reducing() const { return p_.reduce != FusedProgram::Reduce::None; }
  int transcendentals() const {
    int count = 0;
    for (const FusedProgram::Node& node : p_.nodes) {
      count += !node.constant &&
               (node.op == OpId::Exp || node.op == OpId::Log || node.op == OpId::Tanh || node.op == OpId::Sigmoid ||
                node.op == OpId::Silu || node.op == OpId::Gelu || node.op == OpId::Erf);
    }
    return count;
  }
  bool sums() const { return p_.reduce == FusedProgram::Reduce::Sum || p_.reduce == FusedProgram::Reduce::Mean; }

  // Every leaf's offset moved `i` steps along axis d.
  std::vector<llvm::Value*> advanced(const std::vector<llvm::Value*>& offsets, int d, llvm::Value* i) {
    std::vector<llvm::Value*> inner(offsets.size());
    for (std::size_t k = 0; k < offsets.size(); ++k) {
      inner[k] = b_.CreateAdd(offsets[k], b_.CreateMul(i, strides_[k][static_cast<std::size_t>(d)]));
    }
    return inner;
  }

  // Reductions: loops over the kept axes [0, rank - reduce_axes) (the output is their dense
  // row-major walk), then one accumulator per output element over the reduced axes.
  void emitReduceAxis(int d, const std::vector<llvm::Value*>& offsets, llvm::Value* out_offset) {
    const int kept = p_.rank - p_.reduce_axes;
    if (d == kept) {
      emitReduction(offsets, out_offset);
      return;
    }
    ir::emitLoop(
        b_, ir::constI64(b_, 0), dims_[static_cast<std::size_t>(d)], 1,
        [&](llvm::Value* i) {
          llvm::Value* span = ir::constI64(b_, 1);
          for (int e = d + 1; e < kept; ++e) span = b_.CreateMul(span, dims_[static_cast<std::size_t>(e)]);
          emitReduceAxis(d + 1, advanced(offsets, d, i), b_.CreateAdd(out_offset, b_.CreateMul(i, span)));
        },
        "k" + std::to_string(d), ir::LoopHints::asEmitted());
  }

  void emitReduction(const std::vector<llvm::Value*>& offsets, llvm::Value* out_offset) {
    llvm::Type* acc_type = sums() ? b_.getDoubleTy() : b_.getFloatTy();
    if (acc_ == nullptr) acc_ = ir::entryAlloca(b_, acc_type, "acc");
    double init = 0.0;
    if (p_.reduce == FusedProgram::Reduce::Max) init = -std::numeric_limits<double>::infinity();
    if (p_.reduce == FusedProgram::Reduce::Min) init = std::numeric_limits<double>::infinity();
    b_.CreateStore(llvm::ConstantFP::get(acc_type, init), acc_);
    llvm::Value* count = ir::constI64(b_, 1);
    for (int d = p_.rank - p_.reduce_axes; d < p_.rank; ++d) count = b_.CreateMul(count, dims_[static_cast<std::size_t>(d)]);
    // Per-element outputs walk the iteration shape row-major: this output element's span.
    emitReducedAxis(p_.rank - p_.reduce_axes, offsets, b_.CreateMul(out_offset, count));
    llvm::Value* total = b_.CreateLoad(acc_type, acc_);
    if (p_.reduce == FusedProgram::Reduce::Mean) total = b_.CreateFDiv(total, b_.CreateSIToFP(count, b_.getDoubleTy()));
    if (sums()) total = b_.CreateFPTrunc(total, b_.getFloatTy());
    ir::storeCompute(b_, p_.out_dtype, total, ir::elementPtr(b_, p_.out_dtype, out_base_[0], out_offset));
  }

  // The reduced axes but the innermost loop over them (emitRow, which accumulates); `element` is
  // the linear offset of per-element outputs.
  void emitReducedAxis(int d, const std::vector<llvm::Value*>& offsets, llvm::Value* element) {
    if (d == p_.rank - 1) {
      emitRow(offsets, element);
      return;
    }
    ir::emitLoop(
        b_, ir::constI64(b_, 0), dims_[static_cast<std::size_t>(d)], 1,
        [&](llvm::Value* i) {
          llvm::Value* span = ir::constI64(b_, 1);
          for (int e = d + 1; e < p_.rank; ++e) span = b_.CreateMul(span, dims_[static_cast<std::size_t>(e)]);
          emitReducedAxis(d + 1, advanced(offsets, d, i), b_.CreateAdd(element, b_.CreateMul(i, span)));
        },
        "r" + std::to_string(d), ir::LoopHints::asEmitted());
  }

  // acc = acc (+ | max | min) value. Sums add in double with reassociation allowed, so the
  // vectorizer keeps lanes of partial sums (the order differs from the reference's left fold by
  // far less than validation's tolerance); max/min propagate NaN as the reference does.
  void accumulate(llvm::Value* value) {
    llvm::Type* acc_type = sums() ? b_.getDoubleTy() : b_.getFloatTy();
    llvm::Value* acc = b_.CreateLoad(acc_type, acc_);
    llvm::Value* next;
    if (sums()) {
      next = b_.CreateFAdd(acc, b_.CreateFPExt(value, b_.getDoubleTy()));
      llvm::cast<llvm::Instruction>(next)->setHasAllowReassoc(true);
    } else {
      const auto id = p_.reduce == FusedProgram::Reduce::Max ? llvm::Intrinsic::maximum : llvm::Intrinsic::minimum;
      next = b_.CreateBinaryIntrinsic(id, acc, value);
    }
    b_.CreateStore(next, acc_);
  }

  // Loops over axis d (not innermost) with per-leaf element offsets and the outputs' linear offset.
  void emitAxis(int d, const std::vector<llvm::Value*>& offsets, llvm::Value* out_offset) {
    if (d == p_.rank - 1) {
      emitRow(offsets, out_offset);
      return;
    }
    ir::emitLoop(
        b_, ir::constI64(b_, 0), dims_[static_cast<std::size_t>(d)], 1,
        [&](llvm::Value* i) {
          llvm::Value* span = ir::constI64(b_, 1);
          for (int e = d + 1; e < p_.rank; ++e) span = b_.CreateMul(span, dims_[static_cast<std::size_t>(e)]);
          emitAxis(d + 1, advanced(offsets, d, i), b_.CreateAdd(out_offset, b_.CreateMul(i, span)));
        },
        "d" + std::to_string(d), ir::LoopHints::asEmitted());
  }

  // The innermost loop: broadcast leaves hoisted, dense leaves at unit stride (a reduction's row:
  // each element accumulates, `out_offset` places its per-element outputs).
  void emitRow(const std::vector<llvm::Value*>& offsets, llvm::Value* out_offset) {
    const int leaves = p_.numLeaves();
    std::vector<llvm::Value*> hoisted(static_cast<std::size_t>(leaves), nullptr);
    for (int k = 0; k < leaves; ++k) {
      if (p_.leaf_inner[static_cast<std::size_t>(k)] == 0) hoisted[static_cast<std::size_t>(k)] = load(k, offsets[static_cast<std::size_t>(k)]);
    }
    ir::LoopHints hints;
    hints.no_unroll_after_vectorize = true;
    if (params_.vector_width > 0) hints.vectorize_width = params_.vector_width;
    if (params_.unroll > 0) hints.interleave_count = params_.unroll;
    // The default candidate of an elementwise program with several transcendentals (the LSTM
    // gates: 3 sigmoids, 2 tanh) interleaves 4 vectors: their long dependency chains leave the
    // core idle at one (the tuner's vw=16 unroll=4 on the gates: 322 µs against 455 at the
    // vectorizer's own choice, BENCHMARKS.md). Reductions keep the vectorizer's choice.
    if (params_.vector_width == 0 && params_.unroll == 0 && !reducing() && transcendentals() >= 2)
      hints.interleave_count = 4;
    const std::size_t inner_axis = static_cast<std::size_t>(p_.rank - 1);
    ir::emitLoop(
        b_, ir::constI64(b_, 0), dims_[inner_axis], 1,
        [&](llvm::Value* i) {
          std::vector<llvm::Value*> at(static_cast<std::size_t>(leaves));
          for (int k = 0; k < leaves; ++k) {
            const int inner = p_.leaf_inner[static_cast<std::size_t>(k)];
            llvm::Value* step = inner == 1 ? i : b_.CreateMul(i, strides_[static_cast<std::size_t>(k)][inner_axis]);
            at[static_cast<std::size_t>(k)] = inner == 0 ? nullptr : b_.CreateAdd(offsets[static_cast<std::size_t>(k)], step);
          }
          emitElement(at, b_.CreateAdd(out_offset, i), hoisted);
        },
        "i", hints);
  }

  llvm::Value* load(int leaf, llvm::Value* offset) {
    const DType dtype = p_.leafDType(leaf);
    llvm::Type* stored = dtype == DType::BFloat16 ? b_.getInt16Ty() : ir::elementType(b_.getContext(), dtype);
    llvm::Value* ptr = b_.CreateInBoundsGEP(stored, base_[static_cast<std::size_t>(leaf)], offset);
    llvm::LoadInst* value = b_.CreateLoad(stored, ptr);
    value->setAlignment(llvm::Align(dtypeSize(dtype)));
    if (isInPlace(leaf)) {
      value->setMetadata(llvm::LLVMContext::MD_alias_scope, in_place_scope_);
      value->setMetadata(llvm::LLVMContext::MD_noalias, output_scope_);
    } else {
      value->setMetadata(llvm::LLVMContext::MD_noalias, leaf_noalias_);
    }
    if (dtype == DType::BFloat16) return ir::bf16BitsToFloat(b_, value);
    if (dtype == DType::Float16) return b_.CreateFPExt(value, b_.getFloatTy());
    return value;
  }

  void emitElement(const std::vector<llvm::Value*>& at, llvm::Value* out_index, const std::vector<llvm::Value*>& hoisted) {
    ir::FusedValues values(b_, p_, 1, [&](int leaf) {
      const std::size_t l = static_cast<std::size_t>(leaf);
      return !hoisted.empty() && hoisted[l] != nullptr ? hoisted[l] : load(leaf, at[l]);
    });
    auto operand = [&](int ref) { return values.operand(ref); };
    if (reducing()) accumulate(operand(p_.outputs[0]));
    for (std::size_t o = reducing() ? 1 : 0; o < p_.outputs.size(); ++o) {
      llvm::StoreInst* store = storeAt(operand(p_.outputs[o]), out_base_[o], out_index, values.exact(p_.outputs[o]));
      store->setMetadata(llvm::LLVMContext::MD_alias_scope, output_scopes_[o]);
      store->setMetadata(llvm::LLVMContext::MD_noalias, output_noalias_[o]);
    }
    for (const auto& [leaf, ref] : p_.in_place) {
      const std::size_t l = static_cast<std::size_t>(leaf);
      llvm::StoreInst* store = storeAt(operand(ref), base_[l], at[l], values.exact(ref));
      store->setMetadata(llvm::LLVMContext::MD_alias_scope, in_place_scope_);
      store->setMetadata(llvm::LLVMContext::MD_noalias, output_scope_);
    }
  }

  bool isInPlace(int leaf) const {
    return std::find(in_place_leaves_.begin(), in_place_leaves_.end(), leaf) != in_place_leaves_.end();
  }

  // Stores a float32 value as the program dtype at element `index` of `base`. exact: the value is
  // a bfloat16 already (FusedValues::exact), so its upper half is stored as it is.
  llvm::StoreInst* storeAt(llvm::Value* value, llvm::Value* base, llvm::Value* index, bool exact) {
    if (p_.dtype == DType::BFloat16 && exact) {
      value = b_.CreateTrunc(b_.CreateLShr(b_.CreateBitCast(value, b_.getInt32Ty()), 16), b_.getInt16Ty());
    } else if (p_.dtype == DType::BFloat16) {
      value = ir::floatToBf16Bits(b_, value);
    } else if (p_.dtype == DType::Float16) {
      value = b_.CreateFPTrunc(value, ir::elementType(b_.getContext(), p_.dtype));
    }
    llvm::StoreInst* store = b_.CreateStore(value, b_.CreateInBoundsGEP(value->getType(), base, index));
    store->setAlignment(llvm::Align(dtypeSize(p_.dtype)));
    return store;
  }

  ir::Builder& b_;
  ir::ArgsView args_;
  const FusedProgram& p_;
  const KernelParams& params_;
  llvm::MDNode* output_scope_ = nullptr;       // every output's scope (what leaves do not alias)
  std::vector<llvm::MDNode*> output_scopes_;   // output o's scope
  std::vector<llvm::MDNode*> output_noalias_;  // what output o does not alias: the others, in place
  llvm::MDNode* in_place_scope_ = nullptr;
  llvm::MDNode* leaf_noalias_ = nullptr;
  std::vector<int> in_place_leaves_;
  int out_slot_ = 0;
  std::vector<llvm::Value*> base_, out_base_, dims_;
  std::vector<std::vector<llvm::Value*>> strides_;
  llvm::AllocaInst* acc_ = nullptr;  // reductions: the accumulator
};

// Runs an op of the registry on `args` (attributes at their defaults) into `out`.
Status runRegistryOp(OpId op, std::vector<const Value*> args, std::vector<AttrValue> attrs, Value& out) {
  const OpRegistry& registry = OpRegistry::global();
  const OpSchema& schema = registry.schema(op);
  if (attrs.empty()) {
    for (const AttrSpec& attr : schema.attrs) attrs.push_back(attr.default_value.value_or(AttrValue{}));
  }
  OpContext ctx{&schema, args, attrs, std::span<Value>(&out, 1)};
  return invokeKernel(registry.resolve(op, args), ctx);
}

Expected<Value> castValue(const Value& value, DType dtype) {
  if (value.tensor().dtype() == dtype) return value;
  Value out;
  SVM_RETURN_IF_ERROR(runRegistryOp(OpId::Cast, {&value}, {AttrValue::ofDType(dtype)}, out));
  return out;
}

class FusedFamily final : public KernelFamily, public LlvmKernelEmitter {
 public:
  std::string_view name() const override { return "fused"; }

  Status supports(const KernelSpec& spec) const override {
    if (!spec.fused) return makeError(ErrorCode::Unsupported, "not a fused program");
    const FusedProgram& p = *spec.fused;
    auto computable = [](DType dtype) {
      return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16;
    };
    if (!computable(p.dtype) || !computable(p.outputDType())) {
      return makeError(ErrorCode::Unsupported, "fused programs compute float32/float16/bfloat16, not {}", dtypeName(p.dtype));
    }
    for (int k = 0; k < p.numLeaves(); ++k) {
      if (!computable(p.leafDType(k))) return makeError(ErrorCode::Unsupported, "fused leaf of {}", dtypeName(p.leafDType(k)));
    }
    if (p.numLeaves() + static_cast<int>(p.outputs.size()) > kMaxKernelOperands || (p.outputs.empty() && p.in_place.empty())) {
      return makeError(ErrorCode::Unsupported, "{} leaves + {} outputs exceed the kernel's {} operands", p.numLeaves(),
                       p.outputs.size(), kMaxKernelOperands);
    }
    if (static_cast<int>(spec.inputs.size()) != p.numLeaves() || p.rank > kMaxRank) {
      return makeError(ErrorCode::Unsupported, "fused spec and program disagree");
    }
    if (p.reduce != FusedProgram::Reduce::None &&
        (p.outputs.empty() || !p.in_place.empty() || p.reduce_axes < 1 || p.reduce_axes > p.rank || p.numLeaves() == 0)) {
      return makeError(ErrorCode::Unsupported, "a fused reduction has its reduced output over 1..rank trailing axes first");
    }
    for (std::size_t o = p.reduce == FusedProgram::Reduce::None ? 0 : 1; o < p.outputs.size(); ++o) {
      if (p.outputs[o] < 0) return makeError(ErrorCode::Unsupported, "a fused output that is only a leaf");
    }
    for (std::size_t k = 0; k < p.in_place.size(); ++k) {
      const auto [leaf, ref] = p.in_place[k];
      const bool repeated = std::any_of(p.in_place.begin(), p.in_place.begin() + static_cast<std::ptrdiff_t>(k),
                                        [&](const auto& other) { return other.first == leaf; });
      if (leaf < 0 || leaf >= p.numLeaves() || p.leaf_inner[static_cast<std::size_t>(leaf)] != 1 ||
          p.leafDType(leaf) != p.dtype || ref < 0 || ref >= static_cast<int>(p.nodes.size()) || repeated) {
        return makeError(ErrorCode::Unsupported, "an in-place store needs a node and its own dense leaf of the program dtype");
      }
    }
    for (const FusedProgram::Node& node : p.nodes) {
      if (!node.constant && !isFusableElementwise(node.op)) return makeError(ErrorCode::Unsupported, "op {} cannot be fused", opIdent(node.op));
    }
    return Status::ok();
  }

  Status outputs(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                 std::span<Shape> shapes) const override {
    const FusedProgram& p = *spec.fused;
    if (inputs.empty() || inputs[0] == nullptr || !inputs[0]->isTensor()) {
      return makeError(ErrorCode::ShapeMismatch, "fused kernel needs tensor leaves");
    }
    const Shape& shape = inputs[0]->tensor().shape();
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const Value* in = inputs[k];
      if (in == nullptr || !in->isTensor() || in->tensor().shape() != shape ||
          in->tensor().dtype() != p.leafDType(static_cast<int>(k))) {
        return makeError(ErrorCode::ShapeMismatch, "fused kernel leaves must share one shape and their compiled dtypes");
      }
    }
    if (shape.rank() != p.rank) return makeError(ErrorCode::ShapeMismatch, "fused kernel rank {} != {}", shape.rank(), p.rank);
    for (int d = 0; d < p.rank; ++d) {
      const std::size_t axis = static_cast<std::size_t>(d);
      if (axis < p.static_dims.size() && p.static_dims[axis] >= 0 && shape[d] != p.static_dims[axis]) {
        return makeError(ErrorCode::ShapeMismatch, "fused kernel compiled for dim {} = {}, got {}", d, p.static_dims[axis], shape[d]);
      }
      if (axis < p.divisors.size() && p.divisors[axis] > 1 && shape[d] % p.divisors[axis] != 0) {
        return makeError(ErrorCode::ShapeMismatch, "fused kernel compiled for dim {} % {} == 0, got {}", d, p.divisors[axis], shape[d]);
      }
      // An empty reduction (no identity for max/min, 0/0 for mean) is left to the reference.
      if (p.reduce != FusedProgram::Reduce::None && d >= p.rank - p.reduce_axes && shape[d] == 0) {
        return makeError(ErrorCode::ShapeMismatch, "fused reduction over an empty axis {}", d);
      }
    }
    for (int k = 0; k < p.numLeaves(); ++k) {
      const Tensor& t = inputs[static_cast<std::size_t>(k)]->tensor();
      const int inner = p.leaf_inner[static_cast<std::size_t>(k)];
      if (p.rank > 0 && inner >= 0 && t.dim(p.rank - 1) > 1 && t.stride(p.rank - 1) != inner) {
        return makeError(ErrorCode::ShapeMismatch, "fused kernel leaf {} has inner stride {}, compiled for {}", k,
                         t.stride(p.rank - 1), inner);
      }
    }
    for (std::size_t o = 0; o < dtypes.size(); ++o) {
      dtypes[o] = p.outputDType(o);
      shapes[o] = p.outputShape(shape, o);
    }
    return Status::ok();
  }

  // A program storing only in place has no output slot: its leaves (all of the iteration shape)
  // give the rows.
  std::int64_t rowCount(const KernelSpec& spec, const KernelArgs& args, std::size_t inputs,
                        std::size_t outputs) const override {
    if (outputs > 0) return KernelFamily::rowCount(spec, args, inputs, outputs);
    if (inputs == 0 || spec.fused->rank == 0) return -1;
    const std::int64_t rows = args.shape[0][0];
    for (std::size_t k = 0; k < inputs; ++k) {
      if (args.data[k] != nullptr && args.shape[k][0] != rows) return -1;
    }
    return rows;
  }

  Status emit(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) const override {
    ir::Builder b(module.getContext());
    llvm::Function* function = ir::beginKernel(module, symbol, b);
    // The loop vectorizer's default width is LLVM's preferred 256 bits on AVX-512 cores; these
    // loops are compute-bound transcendentals, which run faster 16 lanes at a time.
    const int bits = targetOf(spec).vector_bits;
    if (bits > 256) function->addFnAttr("prefer-vector-width", std::to_string(bits));
    // ir_math's sigmoid/tanh/silu take 1/d from the divide's reciprocal estimate, which LLVM refines
    // by one Newton step, and refine it once more themselves. On 16 lanes the estimate is the 14-bit
    // vrcp14ps, so their own step alone reaches ~2^-28 (exact at powers of two): no step from LLVM,
    // two FMAs fewer per reciprocal (10 per 16 LSTM gate outputs). 8-lane vectors (the vw=8
    // candidates) keep LLVM's step: theirs is the 12-bit vrcpps. Should the vectorizer still pick
    // 8 lanes for a default candidate (or an 8-lane epilogue), one step from vrcpps leaves
    // sigmoid/tanh within ~2.6e-7, inside the 1e-6 bound, only saturation may land 1 ulp short of
    // 1. Only ir_math marks divides `arcp`.
    if (bits >= 512 && (spec.params.vector_width == 0 || spec.params.vector_width >= 16)) {
      function->addFnAttr("reciprocal-estimates", "vec-divf:0");
    }
    FusedEmitter(b, function->getArg(0), *spec.fused, spec.params).run();
    return Status::ok();
  }

  std::string symbolStem(const KernelSpec& spec) const override {
    const FusedProgram& p = *spec.fused;
    std::string stem = "fused";
    if (p.reduce != FusedProgram::Reduce::None) stem += "_" + std::string(reduceName(p.reduce)) + fmt::format("{}", p.reduce_axes);
    int shown = 0;
    for (const FusedProgram::Node& node : p.nodes) {
      if (shown++ == 6) {
        stem += fmt::format("_and{}more", p.nodes.size() - 6);
        break;
      }
      stem += "_" + nodeName(node);
    }
    if (!p.in_place.empty()) stem += "_inplace";
    stem += fmt::format("_{}_r{}", dtypeShortName(p.dtype), p.rank);
    for (std::size_t d = 0; d < p.static_dims.size(); ++d) {
      if (p.static_dims[d] >= 0) stem += fmt::format("_d{}x{}", d, p.static_dims[d]);
      if (d < p.divisors.size() && p.divisors[d] > 1) stem += fmt::format("_d{}m{}", d, p.divisors[d]);
    }
    if (spec.params.vector_width > 0) stem += fmt::format("_vw{}", spec.params.vector_width);
    if (spec.params.unroll > 0) stem += fmt::format("_u{}", spec.params.unroll);
    return stem;
  }

  // The program's semantics with the reference kernels: leaves widened to float32, every node an
  // op of the registry in float32, rounded to the program dtype where the node is, then the
  // reduction (the reference's sum/mean/max/min) and the stored dtype. In-place stores are no
  // outputs here: the region checks them (the values of the steps reading them).
  Status reference(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<Value> outputs) const override {
    const FusedProgram& p = *spec.fused;
    std::vector<Value> leaves(static_cast<std::size_t>(p.numLeaves()));
    for (int k = 0; k < p.numLeaves(); ++k) {
      SVM_ASSIGN_OR_RETURN(leaves[static_cast<std::size_t>(k)], castValue(*inputs[static_cast<std::size_t>(k)], DType::Float32));
    }
    std::vector<Value> values(p.nodes.size());
    auto operand = [&](int ref) -> const Value* {
      return ref >= 0 ? &values[static_cast<std::size_t>(ref)] : &leaves[static_cast<std::size_t>(FusedProgram::leafOf(ref))];
    };
    for (std::size_t n = 0; n < p.nodes.size(); ++n) {
      const FusedProgram::Node& node = p.nodes[n];
      if (node.constant) {
        values[n] = Value::fromTensor(Tensor::scalar(node.value, DType::Float32));
        continue;
      }
      std::vector<const Value*> args{operand(node.a)};
      if (!node.unary()) args.push_back(operand(node.b));
      SVM_RETURN_IF_ERROR(runRegistryOp(node.op, args, {}, values[n]));
      if (node.rounded && p.dtype != DType::Float32) {
        SVM_ASSIGN_OR_RETURN(Value narrow, castValue(values[n], p.dtype));
        SVM_ASSIGN_OR_RETURN(values[n], castValue(narrow, DType::Float32));
      }
    }
    for (std::size_t o = 0; o < p.outputs.size() && o < outputs.size(); ++o) {
      Value result = *operand(p.outputs[o]);
      if (p.reduce != FusedProgram::Reduce::None && o == 0) {
        static constexpr OpId kOps[] = {OpId::Identity, OpId::Sum, OpId::Mean, OpId::Max, OpId::Min};
        std::vector<std::int64_t> axes;
        for (int d = p.rank - p.reduce_axes; d < p.rank; ++d) axes.push_back(d);
        Value reduced;
        SVM_RETURN_IF_ERROR(runRegistryOp(kOps[static_cast<int>(p.reduce)], {&result},
                                          {AttrValue::ofInts(axes), AttrValue::ofBool(p.keepdims)}, reduced));
        result = std::move(reduced);
      }
      SVM_ASSIGN_OR_RETURN(outputs[o], castValue(result, p.outputDType(o)));
    }
    return Status::ok();
  }

  bool splitsAlongAxis0() const override { return true; }

  // None for in-place programs: measuring runs the kernel again and again on the same leaves,
  // which it would rescale every time.
  std::vector<KernelParams> searchSpace(const KernelSpec& spec) const override {
    if (!spec.fused->in_place.empty()) return {};
    std::vector<KernelParams> space{KernelParams{}};
    // Half and one native float vector of the target (8 and 16 lanes on AVX-512, 4 and 8 on AVX2).
    const int lanes = targetOf(spec).floatLanes();
    for (int vw : {lanes / 2, lanes}) {
      for (int unroll : {1, 2, 4}) {
        KernelParams params;
        params.vector_width = vw;
        params.unroll = unroll;
        space.push_back(params);
      }
    }
    return space;
  }
};

}  // namespace

const KernelFamily* fusedFamily() {
  static const FusedFamily family;
  return &family;
}

}  // namespace shapevm::jit
