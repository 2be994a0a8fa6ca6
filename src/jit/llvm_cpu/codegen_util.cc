// SPDX-License-Identifier: Apache-2.0
// IR-building helpers shared by the kernel families (see codegen_util.h).
#include "jit/llvm_cpu/codegen_util.h"

#include <cstddef>
#include <vector>

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include "jit/fusion.h"
#include "jit/llvm_cpu/codegen_math.h"

namespace shapevm::jit::ir {

namespace {
// KernelArgs is { ptr data[N]; i64 shape[N][R]; i64 strides[N][R]; i64 scalars[4] } with no padding.
constexpr std::size_t kShapeOffset = offsetof(KernelArgs, shape);
constexpr std::size_t kStridesOffset = offsetof(KernelArgs, strides);
constexpr std::size_t kScalarsOffset = offsetof(KernelArgs, scalars);
static_assert(kShapeOffset == sizeof(void*) * kMaxKernelOperands, "KernelArgs.shape follows data");
static_assert(kStridesOffset == kShapeOffset + sizeof(std::int64_t) * kMaxKernelOperands * kMaxRank);
static_assert(kScalarsOffset == kStridesOffset + sizeof(std::int64_t) * kMaxKernelOperands * kMaxRank);

llvm::Value* loadI64At(Builder& b, llvm::Value* args, std::size_t byte_offset, const char* name) {
  llvm::Value* ptr = b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), args, byte_offset);
  llvm::LoadInst* load = b.CreateLoad(b.getInt64Ty(), ptr, name);
  load->setAlignment(llvm::Align(8));
  return load;
}
}  // namespace

llvm::Function* beginKernel(llvm::Module& module, const std::string& symbol, Builder& builder) {
  llvm::LLVMContext& context = module.getContext();
  auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(context), {llvm::PointerType::getUnqual(context)}, false);
  llvm::Function* function = llvm::Function::Create(type, llvm::Function::ExternalLinkage, symbol, module);
  function->addParamAttr(0, llvm::Attribute::NoAlias);
  function->addParamAttr(0, llvm::Attribute::NoCapture);
  function->addParamAttr(0, llvm::Attribute::ReadOnly);
  function->addFnAttr(llvm::Attribute::NoUnwind);
  function->getArg(0)->setName("args");
  builder.SetInsertPoint(llvm::BasicBlock::Create(context, "entry", function));
  return function;
}

llvm::Value* ArgsView::data(int operand) {
  llvm::Value* ptr = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), args_, sizeof(void*) * static_cast<std::size_t>(operand));
  llvm::LoadInst* load = b_.CreateLoad(b_.getPtrTy(), ptr, "data" + std::to_string(operand));
  load->setAlignment(llvm::Align(8));
  return load;
}

llvm::Value* ArgsView::dim(int operand, int axis) {
  return loadI64At(b_, args_, kShapeOffset + sizeof(std::int64_t) * static_cast<std::size_t>(operand * kMaxRank + axis), "dim");
}

llvm::Value* ArgsView::stride(int operand, int axis) {
  return loadI64At(b_, args_, kStridesOffset + sizeof(std::int64_t) * static_cast<std::size_t>(operand * kMaxRank + axis), "stride");
}

llvm::Value* ArgsView::scalar(int index) {
  return loadI64At(b_, args_, kScalarsOffset + sizeof(std::int64_t) * static_cast<std::size_t>(index), "scalar");
}

llvm::Value* ArgsView::dim(const OperandSpec& spec, int operand, int axis) {
  const DimSpec& d = spec.dims[axis];
  if (d.isStatic()) return b_.getInt64(static_cast<std::uint64_t>(d.size));
  return dim(operand, axis);
}

llvm::Type* elementType(llvm::LLVMContext& context, DType dtype) {
  switch (dtype) {
    case DType::Float32: return llvm::Type::getFloatTy(context);
    case DType::Float16: return llvm::Type::getHalfTy(context);
    case DType::BFloat16: return llvm::Type::getBFloatTy(context);
    case DType::Float64: return llvm::Type::getDoubleTy(context);
    case DType::Int32: return llvm::Type::getInt32Ty(context);
    case DType::Int64: return llvm::Type::getInt64Ty(context);
    case DType::Bool: return llvm::Type::getInt8Ty(context);
  }
  return llvm::Type::getFloatTy(context);
}

llvm::Type* computeType(llvm::LLVMContext& context, DType dtype) {
  switch (dtype) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16: return llvm::Type::getFloatTy(context);
    default: return elementType(context, dtype);
  }
}

llvm::Type* withLanes(llvm::Type* scalar, unsigned lanes) {
  return lanes == 1 ? scalar : llvm::FixedVectorType::get(scalar, lanes);
}

llvm::Value* elementPtr(Builder& b, DType dtype, llvm::Value* base, llvm::Value* index) {
  return b.CreateInBoundsGEP(elementType(b.getContext(), dtype), base, index);
}

llvm::Value* bf16BitsToFloat(Builder& b, llvm::Value* bits) {
  unsigned lanes = 1;
  if (auto* vector = llvm::dyn_cast<llvm::FixedVectorType>(bits->getType())) lanes = vector->getNumElements();
  llvm::Value* wide = b.CreateShl(b.CreateZExt(bits, withLanes(b.getInt32Ty(), lanes)), 16);
  return b.CreateBitCast(wide, withLanes(b.getFloatTy(), lanes));
}

llvm::Value* floatToBf16Bits(Builder& b, llvm::Value* value) {
  unsigned lanes = 1;
  if (auto* vector = llvm::dyn_cast<llvm::FixedVectorType>(value->getType())) lanes = vector->getNumElements();
  llvm::Type* i32 = withLanes(b.getInt32Ty(), lanes);
  auto splat = [&](std::uint32_t v) { return llvm::ConstantInt::get(i32, v); };
  llvm::Value* bits = b.CreateBitCast(value, i32);
  // Round to nearest even on the upper half; NaN stays a quiet NaN (as floatToBf16 does).
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(bits, splat(16)), splat(1));
  llvm::Value* rounded = b.CreateLShr(b.CreateAdd(bits, b.CreateAdd(lsb, splat(0x7fff))), splat(16));
  llvm::Value* quiet = b.CreateOr(b.CreateLShr(bits, splat(16)), splat(0x40));
  llvm::Value* is_nan = b.CreateICmpUGT(b.CreateAnd(bits, splat(0x7fffffff)), splat(0x7f800000));
  return b.CreateTrunc(b.CreateSelect(is_nan, quiet, rounded), withLanes(b.getInt16Ty(), lanes));
}

llvm::Value* loadCompute(Builder& b, DType dtype, llvm::Value* ptr, unsigned lanes) {
  if (dtype == DType::BFloat16) {
    // Integer widening: exact, and keeps LLVM from narrowing later math to bfloat (whose
    // hardware conversions flush denormals).
    llvm::LoadInst* load = b.CreateLoad(withLanes(b.getInt16Ty(), lanes), ptr);
    load->setAlignment(llvm::Align(2));
    return bf16BitsToFloat(b, load);
  }
  llvm::Type* stored = withLanes(elementType(b.getContext(), dtype), lanes);
  llvm::LoadInst* load = b.CreateLoad(stored, ptr);
  load->setAlignment(llvm::Align(dtypeSize(dtype)));
  if (dtype == DType::Float16) return b.CreateFPExt(load, withLanes(b.getFloatTy(), lanes));
  return load;
}

llvm::Value* maskedLoadCompute(Builder& b, DType dtype, llvm::Value* ptr, llvm::Value* mask) {
  const unsigned lanes = llvm::cast<llvm::FixedVectorType>(mask->getType())->getNumElements();
  // bfloat16 as i16 lanes, widened by integer ops (as loadCompute).
  llvm::Type* stored = withLanes(dtype == DType::BFloat16 ? b.getInt16Ty() : elementType(b.getContext(), dtype), lanes);
  llvm::Value* x =
      b.CreateMaskedLoad(stored, ptr, llvm::Align(dtypeSize(dtype)), mask, llvm::Constant::getNullValue(stored));
  if (dtype == DType::BFloat16) return bf16BitsToFloat(b, x);
  if (dtype == DType::Float16) return b.CreateFPExt(x, withLanes(b.getFloatTy(), lanes));
  return x;
}

void storeCompute(Builder& b, DType dtype, llvm::Value* value, llvm::Value* ptr) {
  unsigned lanes = 1;
  if (auto* vector = llvm::dyn_cast<llvm::FixedVectorType>(value->getType())) lanes = vector->getNumElements();
  if (dtype == DType::BFloat16) {
    value = floatToBf16Bits(b, value);  // integer rounding: the same bits as floatToBf16, denormals kept
  } else if (dtype == DType::Float16) {
    value = b.CreateFPTrunc(value, withLanes(elementType(b.getContext(), dtype), lanes));
  }
  llvm::StoreInst* store = b.CreateStore(value, ptr);
  store->setAlignment(llvm::Align(dtypeSize(dtype)));
}

llvm::Value* convert(Builder& b, llvm::Value* value, DType from, DType to) {
  llvm::LLVMContext& context = b.getContext();
  unsigned lanes = 1;
  if (auto* vector = llvm::dyn_cast<llvm::FixedVectorType>(value->getType())) lanes = vector->getNumElements();
  llvm::Type* target = withLanes(computeType(context, to), lanes);
  if (from == to || (isFloating(from) && isFloating(to) && value->getType() == target)) return value;
  if (to == DType::Bool) {
    llvm::Value* nonzero = isFloating(from) ? b.CreateFCmpUNE(value, llvm::Constant::getNullValue(value->getType()))
                                            : b.CreateICmpNE(value, llvm::Constant::getNullValue(value->getType()));
    return b.CreateZExt(nonzero, target);
  }
  if (isFloating(from) && isFloating(to)) return b.CreateFPCast(value, target);
  if (isFloating(from)) {
    // Truncate toward zero, NaN -> 0, saturating at the integer range (llvm.fptosi.sat).
    return b.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {target, value->getType()}, {value});
  }
  if (from == DType::Bool) {
    llvm::Value* truth = b.CreateICmpNE(value, llvm::Constant::getNullValue(value->getType()));
    return isFloating(to) ? b.CreateUIToFP(truth, target) : b.CreateZExt(truth, target);
  }
  if (isFloating(to)) return b.CreateSIToFP(value, target);
  return b.CreateSExtOrTrunc(value, target);
}

llvm::AllocaInst* entryAlloca(Builder& b, llvm::Type* type, const char* name, std::uint64_t align) {
  llvm::BasicBlock& entry = b.GetInsertBlock()->getParent()->getEntryBlock();
  Builder at(&entry, entry.begin());
  llvm::AllocaInst* alloca = at.CreateAlloca(type, nullptr, name);
  if (align != 0) alloca->setAlignment(llvm::Align(align));
  return alloca;
}

namespace {
// The distinct, self-referencing loop ID for `hints` (attributes in a fixed order).
llvm::MDNode* loopID(Builder& b, const LoopHints& hints) {
  llvm::LLVMContext& context = b.getContext();
  auto flag = [&](const char* key) { return llvm::MDNode::get(context, {llvm::MDString::get(context, key)}); };
  auto setting = [&](const char* key, llvm::Constant* value) {
    return llvm::MDNode::get(context, {llvm::MDString::get(context, key), llvm::ConstantAsMetadata::get(value)});
  };
  std::vector<llvm::Metadata*> attributes = {nullptr};
  if (hints.no_unroll) attributes.push_back(flag("llvm.loop.unroll.disable"));
  if (hints.no_vectorize) attributes.push_back(setting("llvm.loop.vectorize.enable", b.getFalse()));
  if (hints.vectorize_width > 0) {
    attributes.push_back(
        setting("llvm.loop.vectorize.width", b.getInt32(static_cast<std::uint32_t>(hints.vectorize_width))));
  }
  if (hints.interleave_count > 0) {
    attributes.push_back(
        setting("llvm.loop.interleave.count", b.getInt32(static_cast<std::uint32_t>(hints.interleave_count))));
  }
  if (hints.no_unroll_after_vectorize) {
    attributes.push_back(llvm::MDNode::get(
        context, {llvm::MDString::get(context, "llvm.loop.vectorize.followup_all"),
                  setting("llvm.loop.isvectorized", b.getInt32(1)), flag("llvm.loop.unroll.disable")}));
  }
  llvm::MDNode* id = llvm::MDNode::getDistinct(context, attributes);
  id->replaceOperandWith(0, id);
  return id;
}
}  // namespace

void emitLoop(Builder& b, llvm::Value* begin, llvm::Value* end, std::int64_t step,
              const std::function<void(llvm::Value* index)>& body, std::string_view name, const LoopHints& hints) {
  llvm::Function* function = b.GetInsertBlock()->getParent();
  llvm::LLVMContext& context = b.getContext();
  const std::string prefix(name);
  llvm::BasicBlock* preheader = b.GetInsertBlock();
  llvm::BasicBlock* header = llvm::BasicBlock::Create(context, prefix + ".header", function);
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(context, prefix + ".body", function);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(context, prefix + ".exit", function);
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* index = b.CreatePHI(b.getInt64Ty(), 2, prefix);
  index->addIncoming(begin, preheader);
  b.CreateCondBr(b.CreateICmpSLT(index, end), loop, exit);
  b.SetInsertPoint(loop);
  body(index);
  llvm::Value* next = b.CreateAdd(index, b.getInt64(static_cast<std::uint64_t>(step)), prefix + ".next", true, true);
  index->addIncoming(next, b.GetInsertBlock());
  llvm::BranchInst* back = b.CreateBr(header);
  if (hints.any()) back->setMetadata(llvm::LLVMContext::MD_loop, loopID(b, hints));
  b.SetInsertPoint(exit);
}

void emitIfElse(Builder& b, llvm::Value* condition, const std::function<void()>& then_body,
                const std::function<void()>& else_body) {
  llvm::Function* function = b.GetInsertBlock()->getParent();
  llvm::LLVMContext& context = b.getContext();
  auto* then_block = llvm::BasicBlock::Create(context, "then", function);
  auto* else_block = llvm::BasicBlock::Create(context, "else", function);
  auto* join = llvm::BasicBlock::Create(context, "join", function);
  b.CreateCondBr(condition, then_block, else_block);
  b.SetInsertPoint(then_block);
  then_body();
  b.CreateBr(join);
  b.SetInsertPoint(else_block);
  else_body();
  b.CreateBr(join);
  b.SetInsertPoint(join);
}

llvm::Value* constI64(Builder& b, std::int64_t value) { return b.getInt64(static_cast<std::uint64_t>(value)); }

namespace {
// The internal `type` -> `type` function `name` computing `body`: it reads and writes no memory,
// returns and never unwinds (what the loop vectorizer needs of a call it widens), and is never
// inlined, so its one copy is all LLVM optimizes and compiles. `fmf`: the caller's fast-math flags.
void defineElementFunction(llvm::Module& module, const std::string& name, llvm::Type* type,
                           const std::function<llvm::Value*(Builder&, llvm::Value*)>& body, llvm::FastMathFlags fmf) {
  auto* function = llvm::Function::Create(llvm::FunctionType::get(type, {type}, false), llvm::Function::InternalLinkage,
                                          name, module);
  function->setDoesNotAccessMemory();
  function->setDoesNotThrow();
  function->setWillReturn();
  function->setDoesNotFreeMemory();
  function->setNoSync();
  function->addFnAttr(llvm::Attribute::NoInline);
  Builder builder(llvm::BasicBlock::Create(module.getContext(), "entry", function));
  builder.setFastMathFlags(fmf);
  builder.CreateRet(body(builder, function->getArg(0)));
}
}  // namespace

llvm::Value* callElementFunction(Builder& b, const std::string& name, llvm::Value* x,
                                 const std::function<llvm::Value*(Builder& builder, llvm::Value* x)>& body,
                                 const std::vector<unsigned>& vector_lanes) {
  llvm::Module& module = *b.GetInsertBlock()->getModule();
  llvm::Type* type = x->getType();
  llvm::Function* scalar = module.getFunction(name);
  if (scalar == nullptr) {
    defineElementFunction(module, name, type, body, b.getFastMathFlags());
    scalar = module.getFunction(name);
  }
  // The vector variants, named for the vectorizer in the VFABI's LLVM form (unmasked, one vector
  // parameter): _ZGV_LLVM_N<lanes>v_<scalar>(<vector>).
  std::string mappings;
  for (unsigned lanes : vector_lanes) {
    const std::string vector_name = fmt::format("{}_v{}", name, lanes);
    if (module.getFunction(vector_name) == nullptr) {
      defineElementFunction(module, vector_name, llvm::FixedVectorType::get(type, lanes), body, b.getFastMathFlags());
      // Kept through a pipeline that deletes unused internal functions before the vectorizer runs
      // (LLVM's O3 one: jit_opt_pipeline=0); the engine drops the ones no loop called after it.
      llvm::appendToCompilerUsed(module, {module.getFunction(vector_name)});
    }
    mappings += fmt::format("{}_ZGV_LLVM_N{}v_{}({})", mappings.empty() ? "" : ",", lanes, name, vector_name);
  }
  llvm::CallInst* call = b.CreateCall(scalar, {x});
  if (!mappings.empty()) call->addFnAttr(llvm::Attribute::get(b.getContext(), "vector-function-abi-variant", mappings));
  return call;
}

GateViews::GateViews(ArgsView& args, const KernelSpec& spec) {
  const FusedProgram& program = *spec.fused;
  auto viewOf = [&](int slot) {
    GateView view;
    view.data = args.data(slot);
    for (int d = 0; d + 1 < program.rank; ++d) view.strides.push_back(args.stride(slot, d));
    return view;
  };
  for (int l = 0; l < program.numLeaves(); ++l) {
    const int source = spec.fused_leaf_source[static_cast<std::size_t>(l)];
    GateView view = source >= 0 ? viewOf(source) : GateView{};
    view.source = source;
    if (source >= 0) view.inner = program.leaf_inner[static_cast<std::size_t>(l)];
    leaves.push_back(view);
  }
  const int out_slot = static_cast<int>(spec.inputs.size());
  for (std::size_t o = 0; o < program.outputs.size(); ++o) outputs.push_back(viewOf(out_slot + static_cast<int>(o)));
}

void emitGateColumns(Builder& b, const KernelSpec& spec, const GateViews& views, const std::vector<llvm::Value*>& at,
                     llvm::Value* col, unsigned lanes, const std::function<llvm::Value*(int block)>& product) {
  const FusedProgram& program = *spec.fused;
  auto offsetOf = [&](const GateView& view, std::int64_t lane_stride) {
    llvm::Value* offset = b.CreateMul(col, constI64(b, lane_stride));
    for (std::size_t d = 0; d < at.size(); ++d) offset = b.CreateAdd(offset, b.CreateMul(at[d], view.strides[d]));
    return offset;
  };
  FusedValues values(b, program, lanes, [&](int l) -> llvm::Value* {
    const GateView& leaf = views.leaves[static_cast<std::size_t>(l)];
    const DType dtype = program.leafDType(l);
    if (leaf.source < 0) return product(-leaf.source - 1);
    if (leaf.inner == 0) {
      return b.CreateVectorSplat(lanes, loadCompute(b, dtype, elementPtr(b, dtype, leaf.data, offsetOf(leaf, 0))));
    }
    return loadCompute(b, dtype, elementPtr(b, dtype, leaf.data, offsetOf(leaf, 1)), lanes);
  });
  for (std::size_t o = 0; o < program.outputs.size(); ++o) {
    const GateView& out = views.outputs[o];
    storeCompute(b, program.dtype, values.operand(program.outputs[o]),
                 elementPtr(b, program.dtype, out.data, offsetOf(out, 1)));
  }
}

}  // namespace shapevm::jit::ir
