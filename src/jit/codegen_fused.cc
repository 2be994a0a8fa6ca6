// SPDX-License-Identifier: Apache-2.0
// The `fused` kernel family: one loop nest over the iteration shape computing every output of a
// FusedProgram (fusion.h) from its leaves, intermediates in registers. Leaf strides are read from
// KernelArgs (views and broadcasts are index maps, never copies); each leaf's innermost stride
// class (0 = broadcast, hoisted out of the inner loop; 1 = dense, a unit-stride load the loop
// vectorizer widens; -1 = any) is baked in and checked by the region runtime before each call.
// Outputs are fresh contiguous buffers. The element math is codegen_math's, rounded to the
// program dtype after every op, so float16/bfloat16 results match the reference op by op.
#include <fmt/format.h>
#include <llvm/IR/MDBuilder.h>

#include "jit/codegen_math.h"
#include "jit/codegen_util.h"
#include "jit/fusion.h"

namespace shapevm::jit {

bool isFusableElementwise(OpId op) {
  switch (op) {
    case OpId::Add: case OpId::Sub: case OpId::Mul: case OpId::Div: case OpId::Pow:
    case OpId::Maximum: case OpId::Minimum:
    case OpId::Neg: case OpId::Abs: case OpId::Exp: case OpId::Log: case OpId::Sqrt: case OpId::Rsqrt:
    case OpId::Sigmoid: case OpId::Tanh: case OpId::Relu: case OpId::Gelu: case OpId::Erf: case OpId::Silu:
      return true;
    default:
      return false;
  }
}

std::string FusedProgram::describe() const {
  std::string ops;
  for (const Node& node : nodes) ops += (ops.empty() ? "" : ",") + std::string(OpRegistry::global().schema(node.op).name);
  return fmt::format("{} -> {} output{} over {} leaves", ops, outputs.size(), outputs.size() == 1 ? "" : "s", numLeaves());
}

namespace {

class FusedEmitter {
 public:
  FusedEmitter(ir::Builder& b, llvm::Value* args, const FusedProgram& p, const KernelParams& params)
      : b_(b), args_(b, args), p_(p), params_(params) {
    llvm::LLVMContext& context = b.getContext();
    llvm::MDBuilder md(context);
    llvm::MDNode* domain = md.createAnonymousAliasScopeDomain("svm.fused");
    output_scope_ = llvm::MDNode::get(context, {md.createAnonymousAliasScope(domain, "outputs")});
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
    for (int d = 0; d < p_.rank; ++d) dims_.push_back(args_.dim(out_slot_, d));
    for (int k = 0; k < leaves; ++k) {
      std::vector<llvm::Value*> strides;
      for (int d = 0; d < p_.rank; ++d) strides.push_back(args_.stride(k, d));
      strides_.push_back(strides);
    }
    std::vector<llvm::Value*> offsets(static_cast<std::size_t>(leaves), ir::constI64(b_, 0));
    emitAxis(0, offsets, ir::constI64(b_, 0));
    b_.CreateRetVoid();
  }

 private:
  // Loops over axis d (not innermost) with per-leaf element offsets and the outputs' linear offset.
  void emitAxis(int d, const std::vector<llvm::Value*>& offsets, llvm::Value* out_offset) {
    if (d == p_.rank - 1) {
      emitRow(offsets, out_offset);
      return;
    }
    ir::emitLoop(
        b_, ir::constI64(b_, 0), dims_[static_cast<std::size_t>(d)], 1,
        [&](llvm::Value* i) {
          std::vector<llvm::Value*> inner(offsets.size());
          for (std::size_t k = 0; k < offsets.size(); ++k) {
            inner[k] = b_.CreateAdd(offsets[k], b_.CreateMul(i, strides_[k][static_cast<std::size_t>(d)]));
          }
          llvm::Value* span = ir::constI64(b_, 1);
          for (int e = d + 1; e < p_.rank; ++e) span = b_.CreateMul(span, dims_[static_cast<std::size_t>(e)]);
          emitAxis(d + 1, inner, b_.CreateAdd(out_offset, b_.CreateMul(i, span)));
        },
        "d" + std::to_string(d), ir::LoopHints::asEmitted());
  }

  // The innermost loop: broadcast leaves hoisted, dense leaves at unit stride.
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
    const DType dtype = p_.dtype;
    llvm::Type* stored = dtype == DType::BFloat16 ? b_.getInt16Ty() : ir::elementType(b_.getContext(), dtype);
    llvm::Value* ptr = b_.CreateInBoundsGEP(stored, base_[static_cast<std::size_t>(leaf)], offset);
    llvm::LoadInst* value = b_.CreateLoad(stored, ptr);
    value->setAlignment(llvm::Align(dtypeSize(dtype)));
    value->setMetadata(llvm::LLVMContext::MD_noalias, output_scope_);
    if (dtype == DType::BFloat16) return ir::bf16BitsToFloat(b_, value);
    if (dtype == DType::Float16) return b_.CreateFPExt(value, b_.getFloatTy());
    return value;
  }

  void emitElement(const std::vector<llvm::Value*>& at, llvm::Value* out_index, const std::vector<llvm::Value*>& hoisted) {
    std::vector<llvm::Value*> leaf_values(at.size(), nullptr);
    auto operand = [&](int ref) -> llvm::Value* {
      if (ref >= 0) return node_values_[static_cast<std::size_t>(ref)];
      const std::size_t leaf = static_cast<std::size_t>(FusedProgram::leafOf(ref));
      if (leaf_values[leaf] == nullptr) {
        leaf_values[leaf] = !hoisted.empty() && hoisted[leaf] != nullptr ? hoisted[leaf] : load(static_cast<int>(leaf), at[leaf]);
      }
      return leaf_values[leaf];
    };
    node_values_.assign(p_.nodes.size(), nullptr);
    for (std::size_t n = 0; n < p_.nodes.size(); ++n) {
      const FusedProgram::Node& node = p_.nodes[n];
      llvm::Value* a = operand(node.a);
      llvm::Value* value = node.b == -1 && isUnary(node.op) ? ir::unaryOp(b_, node.op, p_.dtype, a)
                                                            : ir::binaryOp(b_, node.op, p_.dtype, a, operand(node.b));
      node_values_[n] = ir::roundTo(b_, value, p_.dtype);
    }
    for (std::size_t o = 0; o < p_.outputs.size(); ++o) {
      llvm::Value* value = operand(p_.outputs[o]);
      if (p_.dtype == DType::BFloat16) {
        value = ir::floatToBf16Bits(b_, value);
      } else if (p_.dtype == DType::Float16) {
        value = b_.CreateFPTrunc(value, ir::elementType(b_.getContext(), p_.dtype));
      }
      llvm::Value* ptr = b_.CreateInBoundsGEP(value->getType(), out_base_[o], out_index);
      llvm::StoreInst* store = b_.CreateStore(value, ptr);
      store->setAlignment(llvm::Align(dtypeSize(p_.dtype)));
      store->setMetadata(llvm::LLVMContext::MD_alias_scope, output_scope_);
    }
  }

  static bool isUnary(OpId op) {
    switch (op) {
      case OpId::Add: case OpId::Sub: case OpId::Mul: case OpId::Div: case OpId::Pow:
      case OpId::Maximum: case OpId::Minimum:
        return false;
      default:
        return true;
    }
  }

  ir::Builder& b_;
  ir::ArgsView args_;
  const FusedProgram& p_;
  const KernelParams& params_;
  llvm::MDNode* output_scope_ = nullptr;
  int out_slot_ = 0;
  std::vector<llvm::Value*> base_, out_base_, dims_;
  std::vector<std::vector<llvm::Value*>> strides_;
  std::vector<llvm::Value*> node_values_;
};

class FusedFamily final : public KernelFamily {
 public:
  std::string_view name() const override { return "fused"; }

  Status supports(const KernelSpec& spec) const override {
    if (!spec.fused) return makeError(ErrorCode::Unsupported, "not a fused program");
    const FusedProgram& p = *spec.fused;
    if (p.dtype != DType::Float32 && p.dtype != DType::Float16 && p.dtype != DType::BFloat16) {
      return makeError(ErrorCode::Unsupported, "fused programs compute float32/float16/bfloat16, not {}", dtypeName(p.dtype));
    }
    if (p.numLeaves() + static_cast<int>(p.outputs.size()) > kMaxKernelOperands || p.outputs.empty()) {
      return makeError(ErrorCode::Unsupported, "{} leaves + {} outputs exceed the kernel's {} operands", p.numLeaves(),
                       p.outputs.size(), kMaxKernelOperands);
    }
    if (static_cast<int>(spec.inputs.size()) != p.numLeaves() || p.rank > kMaxRank) {
      return makeError(ErrorCode::Unsupported, "fused spec and program disagree");
    }
    for (const FusedProgram::Node& node : p.nodes) {
      if (!isFusableElementwise(node.op)) return makeError(ErrorCode::Unsupported, "op {} cannot be fused", opIdent(node.op));
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
    for (const Value* in : inputs) {
      if (in == nullptr || !in->isTensor() || in->tensor().shape() != shape || in->tensor().dtype() != p.dtype) {
        return makeError(ErrorCode::ShapeMismatch, "fused kernel leaves must share one shape and dtype");
      }
    }
    for (int k = 0; k < p.numLeaves(); ++k) {
      const Tensor& t = inputs[static_cast<std::size_t>(k)]->tensor();
      const int inner = p.leaf_inner[static_cast<std::size_t>(k)];
      if (t.rank() != p.rank) return makeError(ErrorCode::ShapeMismatch, "fused kernel leaf rank {} != {}", t.rank(), p.rank);
      if (p.rank > 0 && inner >= 0 && t.dim(p.rank - 1) > 1 && t.stride(p.rank - 1) != inner) {
        return makeError(ErrorCode::ShapeMismatch, "fused kernel leaf {} has inner stride {}, compiled for {}", k,
                         t.stride(p.rank - 1), inner);
      }
    }
    for (std::size_t o = 0; o < dtypes.size(); ++o) {
      dtypes[o] = p.dtype;
      shapes[o] = shape;
    }
    return Status::ok();
  }

  Status emit(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) const override {
    ir::Builder b(module.getContext());
    llvm::Function* function = ir::beginKernel(module, symbol, b);
    FusedEmitter(b, function->getArg(0), *spec.fused, spec.params).run();
    return Status::ok();
  }

  std::string symbolStem(const KernelSpec& spec) const override {
    const FusedProgram& p = *spec.fused;
    std::string stem = "fused";
    int shown = 0;
    for (const FusedProgram::Node& node : p.nodes) {
      if (shown++ == 6) {
        stem += fmt::format("_and{}more", p.nodes.size() - 6);
        break;
      }
      stem += "_" + std::string(OpRegistry::global().schema(node.op).name);
    }
    stem += fmt::format("_{}_r{}", dtypeShortName(p.dtype), p.rank);
    if (spec.params.vector_width > 0) stem += fmt::format("_vw{}", spec.params.vector_width);
    if (spec.params.unroll > 0) stem += fmt::format("_u{}", spec.params.unroll);
    return stem;
  }

  Status reference(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<Value> outputs) const override {
    const FusedProgram& p = *spec.fused;
    const OpRegistry& registry = OpRegistry::global();
    std::vector<Value> values(p.nodes.size());
    auto operand = [&](int ref) -> const Value* {
      return ref >= 0 ? &values[static_cast<std::size_t>(ref)] : inputs[static_cast<std::size_t>(FusedProgram::leafOf(ref))];
    };
    for (std::size_t n = 0; n < p.nodes.size(); ++n) {
      const FusedProgram::Node& node = p.nodes[n];
      const OpSchema& schema = registry.schema(node.op);
      std::vector<const Value*> args{operand(node.a)};
      if (node.b != -1) args.push_back(operand(node.b));
      std::vector<AttrValue> attrs;
      for (const AttrSpec& attr : schema.attrs) attrs.push_back(attr.default_value.value_or(AttrValue{}));
      OpContext ctx{&schema, args, attrs, std::span<Value>(&values[n], 1)};
      SVM_RETURN_IF_ERROR(invokeKernel(registry.resolve(node.op, args), ctx));
    }
    for (std::size_t o = 0; o < p.outputs.size() && o < outputs.size(); ++o) outputs[o] = *operand(p.outputs[o]);
    return Status::ok();
  }

  bool splitsAlongAxis0() const override { return true; }

  std::vector<KernelParams> searchSpace(const KernelSpec&) const override {
    std::vector<KernelParams> space{KernelParams{}};
    for (int vw : {8, 16}) {
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
