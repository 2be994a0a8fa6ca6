// SPDX-License-Identifier: Apache-2.0
// O2 region fusion, the runtime (see region_executor.h): the executor's steps, the prelude replayed
// at entry, the reference run and the installed region entry (CompiledRegion::run).
#include "jit/region_executor.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bytecode/scalar_ops.h"
#include "jit/validate.h"
#include "ops/kernel_util.h"
#include "support/cpu_cores.h"
#include "support/logging.h"
#include "support/tunables.h"

namespace shapevm::jit {

namespace {

// Runs one prelude instruction on the register file; an error (overflow, division by zero, a bad
// axis) declines the region and the interpreter reports it.
Status runPrelude(const PreludeOp& op, std::span<Value> registers) {
  auto reg = [&](int r) -> const Value& { return registers[static_cast<std::size_t>(r)]; };
  Value result;
  if (op.op == Opcode::LoadConst) {
    result = op.constant;
  } else if (op.op == Opcode::TuplePack) {
    std::vector<Value> items;
    items.reserve(op.items.size());
    for (int r : op.items) items.push_back(reg(r));
    result = Value::fromTuple(std::move(items));
  } else if (op.op == Opcode::DimOf) {
    const Value& v = reg(op.items[0]);
    if (!v.isTensor()) return makeError(ErrorCode::KindMismatch, "DimOf needs a tensor");
    const int rank = v.tensor().rank();
    const int axis = op.axis < 0 ? op.axis + rank : op.axis;
    if (axis < 0 || axis >= rank) return makeError(ErrorCode::IndexOutOfRange, "DimOf axis out of range");
    result = Value::fromInt(v.tensor().dim(axis));
  } else if (op.items.size() == 2) {
    SVM_ASSIGN_OR_RETURN(result, scalarBinary(op.op, reg(op.items[0]), reg(op.items[1])));
  } else {
    SVM_ASSIGN_OR_RETURN(result, scalarUnary(op.op, reg(op.items[0])));
  }
  registers[static_cast<std::size_t>(op.dst)] = std::move(result);
  return Status::ok();
}

Status runOp(const ROp& op, std::span<const Value* const> inputs, std::span<Value> outputs) {
  const OpRegistry& registry = OpRegistry::global();
  const OpSchema& schema = registry.schema(op.op);
  OpContext ctx{&schema, inputs, *op.attrs, outputs};
  return invokeKernel(registry.resolve(op.op, inputs), ctx);
}

// `t` read as if it had `shape` (numpy broadcasting, stride 0); `t` itself when the shapes match.
Expected<Tensor> expandTo(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  SVM_ASSIGN_OR_RETURN(Shape common, broadcastShapes(t.shape(), shape));
  if (common != shape)
    return makeError(ErrorCode::ShapeMismatch, "cannot broadcast {} to {}", t.describe(), shape.toString());
  return t.asStrided(shape, broadcastStrides(t, shape), t.offset());
}

// A one-element tensor per dtype whose storage backs every phantom (made once, never written).
Expected<Tensor> standIn(DType dtype) {
  static std::mutex mutex;
  static std::map<DType, Tensor> tensors;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = tensors.find(dtype);
  if (it != tensors.end()) return it->second;
  SVM_ASSIGN_OR_RETURN(Tensor t, Tensor::zeros(dtype, Shape{1}));
  tensors.emplace(dtype, t);
  return t;
}

}  // namespace

// A step's leaf views as one execution laid them out. A view's layout is a function of its base's
// layout and of the region's externals (their shapes, a reshape's target), never of data, so an
// execution whose externals and bases have the same layouts gets the same views of its own bases.
struct ViewMemo {
  struct Layout {
    bool tensor = false;
    DType dtype = DType::Float32;
    Shape shape, strides;
    std::int64_t offset = 0;          // a view's: from its base's offset
    std::vector<std::int64_t> items;  // a tuple's ints (a reshape's target)
  };
  std::vector<Layout> externals;  // per plan external
  std::vector<Layout> bases;      // per leaf read as a view: its base
  std::vector<Layout> views;      // ... and the view
};

namespace {

// `value`'s layout; nullopt for what a memo cannot key on (a tuple of non-ints, another kind).
std::optional<ViewMemo::Layout> layoutOf(const Value& value) {
  ViewMemo::Layout layout;
  if (value.isTensor()) {
    const Tensor& t = value.tensor();
    layout.tensor = true;
    layout.dtype = t.dtype();
    layout.shape = t.shape();
    layout.strides = t.strides();
    layout.offset = t.offset();
    return layout;
  }
  if (!value.isTuple()) return std::nullopt;
  for (const Value& item : value.tuple()) {
    if (!item.isInt()) return std::nullopt;
    layout.items.push_back(item.asInt());
  }
  return layout;
}

// The same layout as `layout` (a tensor's offset aside: views keep theirs relative to their base).
bool sameLayout(const ViewMemo::Layout& layout, const Value& value) {
  if (layout.tensor) {
    if (!value.isTensor()) return false;
    const Tensor& t = value.tensor();
    return t.dtype() == layout.dtype && t.shape() == layout.shape && t.strides() == layout.strides;
  }
  if (!value.isTuple() || value.tuple().size() != layout.items.size()) return false;
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    const Value& item = value.tuple()[i];
    if (!item.isInt() || item.asInt() != layout.items[i]) return false;
  }
  return true;
}

}  // namespace

void RegionExecutor::grow() {
  real_.resize(plan_.values.size());
  phantom_.resize(plan_.values.size());
}

void RegionExecutor::keepOnly(std::span<const int> kept) {
  std::vector<bool> keep(real_.size(), false);
  for (int v : kept) {
    if (v >= 0 && static_cast<std::size_t>(v) < keep.size()) keep[static_cast<std::size_t>(v)] = true;
  }
  for (std::size_t v = 0; v < real_.size(); ++v) {
    if (!keep[v]) real_[v] = Value();
  }
}

Expected<std::vector<const Value*>> RegionExecutor::realInputs(const ROp& op) {
  std::vector<const Value*> inputs;
  for (int in : op.in) {
    if (in < 0) {
      inputs.push_back(nullptr);
      continue;
    }
    SVM_ASSIGN_OR_RETURN(const Value* input, real(in));
    inputs.push_back(input);
  }
  return inputs;
}

Expected<std::vector<const Value*>> RegionExecutor::viewInputs(const ROp& op, const Value* input) {
  std::vector<const Value*> inputs{input};
  for (std::size_t k = 1; k < op.in.size(); ++k) {
    if (op.in[k] < 0) {
      inputs.push_back(nullptr);
      continue;
    }
    SVM_ASSIGN_OR_RETURN(const Value* extra, real(op.in[k]));
    inputs.push_back(extra);
  }
  return inputs;
}

Expected<const Value*> RegionExecutor::real(int v) {
  if (hasReal(v)) return &real_[static_cast<std::size_t>(v)];
  const RValue& value = plan_.values[static_cast<std::size_t>(v)];
  if (value.op < 0) return makeError(ErrorCode::Internal, "region external {} missing", v);
  const ROp& op = plan_.ops[static_cast<std::size_t>(value.op)];
  if (op.cls != OpClass::View) return makeError(ErrorCode::Internal, "region value {} used before its step", v);
  SVM_ASSIGN_OR_RETURN(std::vector<const Value*> inputs, realInputs(op));
  std::vector<Value> outputs(op.out.size());
  SVM_RETURN_IF_ERROR(runOp(op, inputs, outputs));
  for (std::size_t o = 0; o < op.out.size(); ++o) real_[static_cast<std::size_t>(op.out[o])] = std::move(outputs[o]);
  return &real_[static_cast<std::size_t>(v)];
}

bool RegionExecutor::realizable(int v) const {
  if (hasReal(v)) return true;
  const RValue& value = plan_.values[static_cast<std::size_t>(v)];
  if (value.op < 0) return false;
  const ROp& op = plan_.ops[static_cast<std::size_t>(value.op)];
  return op.cls == OpClass::View && op.in[0] >= 0 && realizable(op.in[0]);
}

Expected<const Value*> RegionExecutor::shaped(int v) {
  if (realizable(v)) return real(v);
  if (!phantom_[static_cast<std::size_t>(v)].isNone()) return &phantom_[static_cast<std::size_t>(v)];
  const RValue& value = plan_.values[static_cast<std::size_t>(v)];
  if (value.op < 0) return makeError(ErrorCode::Internal, "region external {} missing", v);
  const ROp& op = plan_.ops[static_cast<std::size_t>(value.op)];
  if (op.cls == OpClass::View) {
    SVM_ASSIGN_OR_RETURN(const Value* input, shaped(op.in[0]));
    SVM_ASSIGN_OR_RETURN(std::vector<const Value*> inputs, viewInputs(op, input));
    std::vector<Value> outputs(op.out.size());
    SVM_RETURN_IF_ERROR(runOp(op, inputs, outputs));
    for (std::size_t o = 0; o < op.out.size(); ++o)
      phantom_[static_cast<std::size_t>(op.out[o])] = std::move(outputs[o]);
    return &phantom_[static_cast<std::size_t>(v)];
  }
  Shape shape;
  if (op.cls == OpClass::MatMul && op.in.size() >= 2 && op.in[0] >= 0 && op.in[1] >= 0) {
    // A product no step stores (a gate epilogue reads it in registers): [batch..., M, N].
    SVM_ASSIGN_OR_RETURN(const Value* a, shaped(op.in[0]));
    SVM_ASSIGN_OR_RETURN(const Value* b, shaped(op.in[1]));
    const Shape& sa = a->tensor().shape();
    const Shape& sb = b->tensor().shape();
    if (sa.rank() < 2 || sb.rank() < 2) return makeError(ErrorCode::Internal, "region value {} has no shape yet", v);
    Shape batch_a, batch_b;
    for (int d = 0; d + 2 < sa.rank(); ++d) batch_a.push_back(sa[d]);
    for (int d = 0; d + 2 < sb.rank(); ++d) batch_b.push_back(sb[d]);
    SVM_ASSIGN_OR_RETURN(shape, broadcastShapes(batch_a, batch_b));
    shape.push_back(sa[sa.rank() - 2]);
    shape.push_back(sb[sb.rank() - 1]);
  } else if (op.cls != OpClass::Elementwise && op.cls != OpClass::Norm) {
    return makeError(ErrorCode::Internal, "region value {} has no shape yet", v);
  }
  bool first = op.cls != OpClass::MatMul;
  for (int in : op.in) {
    if (in < 0 || op.cls == OpClass::MatMul) continue;
    SVM_ASSIGN_OR_RETURN(const Value* input, shaped(in));
    if (first) {
      shape = input->tensor().shape();
      first = false;
    } else if (op.cls == OpClass::Elementwise) {  // a normalization has its input's shape
      SVM_ASSIGN_OR_RETURN(shape, broadcastShapes(shape, input->tensor().shape()));
    }
  }
  SVM_ASSIGN_OR_RETURN(Tensor dummy, standIn(value.dtype));
  Shape zero;
  zero.resize(shape.rank());
  for (int d = 0; d < shape.rank(); ++d) zero[d] = 0;
  SVM_ASSIGN_OR_RETURN(Tensor stand_in, dummy.asStrided(shape, zero, 0));
  phantom_[static_cast<std::size_t>(v)] = Value::fromTensor(std::move(stand_in));
  return &phantom_[static_cast<std::size_t>(v)];
}

Expected<Value> RegionExecutor::leaf(const Leaf& leaf, const Shape& iteration) {
  SVM_ASSIGN_OR_RETURN(const Value* base, real(leaf.base));
  Value current = *base;
  int same_as = leaf.base;  // the value `current` equals, while the chain has only taken views of real values
  for (const ChainItem& item : leaf.chain) {
    if (item.expand) {
      SVM_ASSIGN_OR_RETURN(const Value* target, shaped(item.value));
      if (current.tensor().shape() == target->tensor().shape()) continue;
      SVM_ASSIGN_OR_RETURN(Tensor t, expandTo(current.tensor(), target->tensor().shape()));
      current = Value::fromTensor(std::move(t));
      same_as = -1;
      continue;
    }
    const ROp& op = plan_.ops[static_cast<std::size_t>(item.op)];
    if (same_as >= 0 && op.in[0] == same_as) {
      // A view of a real value: computed once per execution for all its consumers.
      same_as = op.out[static_cast<std::size_t>(item.out)];
      SVM_ASSIGN_OR_RETURN(const Value* view, real(same_as));
      current = *view;
      continue;
    }
    same_as = -1;
    SVM_ASSIGN_OR_RETURN(std::vector<const Value*> inputs, viewInputs(op, &current));
    std::vector<Value> outputs(op.out.size());
    SVM_RETURN_IF_ERROR(runOp(op, inputs, outputs));
    current = std::move(outputs[static_cast<std::size_t>(item.out)]);
  }
  SVM_ASSIGN_OR_RETURN(Tensor t, expandTo(current.tensor(), iteration));
  return Value::fromTensor(std::move(t));
}

void RegionExecutor::takeBuffers(const Step& step, std::span<Value> outs, bool pooled) {
  if (!pooled || poison_) return;
  if (step.pool.size() < outs.size()) step.pool.resize(outs.size());
  for (std::size_t o = 0; o < outs.size(); ++o) {
    for (Value& slot : step.pool[o]) {
      if (slot.isTensor() && slot.tensor().isSoleOwner()) {
        outs[o] = std::move(slot);
        slot = Value();
        break;
      }
    }
  }
}

void RegionExecutor::keepBuffers(const Step& step, std::span<const Value> outs, bool pooled) {
  if (!pooled) return;
  if (step.pool.size() < outs.size()) step.pool.resize(outs.size());
  for (std::size_t o = 0; o < outs.size(); ++o) {
    std::vector<Value>& slots = step.pool[o];
    auto empty = std::find_if(slots.begin(), slots.end(), [](const Value& v) { return v.isNone(); });
    if (empty != slots.end()) {
      *empty = outs[o];
    } else if (slots.size() < 2) {
      slots.push_back(outs[o]);
    } else {
      slots[0] = std::move(slots[1]);
      slots[1] = outs[o];
    }
  }
}

Status RegionExecutor::poisonOutputs(const CompiledKernel& kernel, std::span<const Value* const> inputs,
                                     std::span<Value> outs) {
  if (!poison_) return Status::ok();
  std::vector<DType> dtypes(outs.size());
  std::vector<Shape> shapes(outs.size());
  SVM_RETURN_IF_ERROR(kernel.family->outputs(kernel.spec, inputs, dtypes, shapes));
  for (std::size_t o = 0; o < outs.size(); ++o) {
    SVM_ASSIGN_OR_RETURN(Tensor t, poisonedTensor(dtypes[o], shapes[o]));
    outs[o] = Value::fromTensor(std::move(t));
  }
  return Status::ok();
}

Expected<std::vector<Value>> RegionExecutor::stepInputs(const Step& step, bool remember) {
  if (remember) {
    if (std::optional<std::vector<Value>> leaves = rememberedInputs(step)) return std::move(*leaves);
  }
  Shape iteration;
  if (step.kind == Step::Kind::Reduce) {
    SVM_ASSIGN_OR_RETURN(const Value* source, shaped(step.source));
    iteration = source->tensor().shape();
  } else if (step.kind == Step::Kind::Fused || step.program) {
    SVM_ASSIGN_OR_RETURN(const Value* first, shaped(step.outputs[0]));
    iteration = first->tensor().shape();
    for (int out : step.outputs) {
      SVM_ASSIGN_OR_RETURN(const Value* other, shaped(out));
      if (other->tensor().shape() != iteration) {
        return makeError(ErrorCode::ShapeMismatch, "fused outputs have shapes {} and {}", iteration.toString(),
                         other->tensor().shape().toString());
      }
    }
  }
  std::vector<Value> leaves;
  leaves.reserve(step.leaves.size());
  for (const Leaf& leaf : step.leaves) {
    if (readsView(step, leaves.size())) {
      SVM_ASSIGN_OR_RETURN(Value value, this->leaf(leaf, iteration));
      leaves.push_back(std::move(value));
    } else {
      SVM_ASSIGN_OR_RETURN(const Value* value, real(leaf.base));
      leaves.push_back(*value);
    }
  }
  if (remember) rememberInputs(step, leaves);
  return leaves;
}

std::optional<std::vector<Value>> RegionExecutor::rememberedInputs(const Step& step) {
  const ViewMemo* memo = step.views.get();
  if (memo == nullptr || memo->externals.size() != plan_.externals.size()) return std::nullopt;
  for (std::size_t e = 0; e < plan_.externals.size(); ++e) {
    if (!sameLayout(memo->externals[e], real_[static_cast<std::size_t>(plan_.externals[e])])) return std::nullopt;
  }
  std::vector<Value> leaves;
  leaves.reserve(step.leaves.size());
  std::size_t m = 0;
  for (std::size_t k = 0; k < step.leaves.size(); ++k) {
    auto base = real(step.leaves[k].base);
    if (!base) return std::nullopt;
    if (!readsView(step, k)) {
      leaves.push_back(**base);
      continue;
    }
    if (m >= memo->views.size() || !sameLayout(memo->bases[m], **base)) return std::nullopt;
    const ViewMemo::Layout& view = memo->views[m++];
    const Tensor& from = (*base)->tensor();
    auto t = from.asStrided(view.shape, view.strides, from.offset() + view.offset);
    if (!t) return std::nullopt;
    leaves.push_back(Value::fromTensor(std::move(*t)));
  }
  return leaves;
}

void RegionExecutor::rememberInputs(const Step& step, const std::vector<Value>& leaves) {
  step.views.reset();
  bool views = false;
  for (std::size_t k = 0; k < step.leaves.size() && !views; ++k) views = readsView(step, k);
  if (!views) return;
  auto memo = std::make_shared<ViewMemo>();
  for (int v : plan_.externals) {
    std::optional<ViewMemo::Layout> layout = layoutOf(real_[static_cast<std::size_t>(v)]);
    if (!layout) return;
    memo->externals.push_back(std::move(*layout));
  }
  for (std::size_t k = 0; k < step.leaves.size(); ++k) {
    if (!readsView(step, k)) continue;
    const Leaf& leaf = step.leaves[k];
    for (const ChainItem& item : leaf.chain) {
      if (item.expand) continue;
      const ROp& op = plan_.ops[static_cast<std::size_t>(item.op)];
      for (std::size_t j = 1; j < op.in.size(); ++j) {
        if (op.in[j] >= 0 && plan_.values[static_cast<std::size_t>(op.in[j])].op >= 0) return;  // computed
      }
    }
    const Value& base = real_[static_cast<std::size_t>(leaf.base)];
    if (!base.isTensor() || !leaves[k].isTensor() || leaves[k].tensor().storage() != base.tensor().storage()) return;
    std::optional<ViewMemo::Layout> from = layoutOf(base), view = layoutOf(leaves[k]);
    view->offset -= from->offset;
    memo->bases.push_back(std::move(*from));
    memo->views.push_back(std::move(*view));
  }
  if (!memo->views.empty()) step.views = std::move(memo);
}

std::vector<const Value*> RegionExecutor::pointersTo(const std::vector<Value>& values) {
  std::vector<const Value*> pointers;
  pointers.reserve(values.size());
  for (const Value& v : values) pointers.push_back(&v);
  return pointers;
}

Status RegionExecutor::outputsFor(const Step& step, std::span<const Value* const> inputs,
                                  const std::vector<Value>& leaves, std::span<Value> outs, bool pooled) {
  if (step.kind == Step::Kind::MatMul && !step.guard.passes(inputs)) {
    return makeError(ErrorCode::ShapeMismatch, "matmul guard: {}", describeInputs(inputs));
  }
  const std::size_t own = kernelOutputs(step);
  takeBuffers(step, outs.first(own), pooled);
  SVM_RETURN_IF_ERROR(poisonOutputs(*step.kernel, inputs, outs.first(own)));
  if (own == outs.size()) return Status::ok();
  // The kernel's alias scopes take an in-place leaf as dense and apart from every other leaf.
  const std::vector<std::pair<int, int>>& in_place = step.program->in_place;
  for (std::size_t k = 0; k < in_place.size(); ++k) {
    const std::size_t leaf = static_cast<std::size_t>(in_place[k].first);
    const Tensor& t = leaves[leaf].tensor();
    bool apart = t.isContiguous();
    for (std::size_t l = 0; l < leaves.size() && apart; ++l)
      apart = l == leaf || leaves[l].tensor().storage() != t.storage();
    if (!apart) return makeError(ErrorCode::ShapeMismatch, "in-place leaf {} is strided or shares its storage", leaf);
    outs[own + k] = leaves[leaf];
  }
  return Status::ok();
}

void RegionExecutor::publish(const Step& step, std::span<const Value> outs, bool pooled) {
  for (std::size_t o = 0; o < step.outputs.size(); ++o) real_[static_cast<std::size_t>(step.outputs[o])] = outs[o];
  keepBuffers(step, outs.first(kernelOutputs(step)), pooled);
}

Status RegionExecutor::runStep(const Step& step, bool pooled) {
  std::vector<Value> outs(step.outputs.size());
  if (step.kind == Step::Kind::Opaque) {
    const ROp& op = plan_.ops[static_cast<std::size_t>(step.op)];
    SVM_ASSIGN_OR_RETURN(std::vector<const Value*> inputs, realInputs(op));
    takeBuffers(step, outs, pooled);
    // The op's own compiled kernel (O1-style) when its guard admits the inputs, else the
    // reference kernel: an unfusable op is never slower inside a region than outside.
    // The sizes it misses, the op's open kernel (token-dynamic dims read per call; validated on its
    // own by the region compiler).
    if (step.kernel && step.guard.passes(inputs)) {
      SVM_RETURN_IF_ERROR(invokeCompiled(*step.kernel, inputs, outs));
    } else if (step.open_kernel && step.open_guard.passes(inputs)) {
      SVM_RETURN_IF_ERROR(invokeCompiled(*step.open_kernel, inputs, outs));
    } else {
      // A compiled step whose guards miss is counted (stats' regions.opaque_fallbacks, logged once
      // per region by CompiledRegion::run): its specs should admit every size the region admits.
      const CompiledKernel* missed = step.open_kernel ? step.open_kernel.get() : step.kernel.get();
      if (missed != nullptr && opaque_fallbacks_++ == 0) {
        first_opaque_fallback_ =
            fmt::format("{} on {} (kernel for {})", opName(op.op), describeInputs(inputs), missed->spec.signature());
      }
      SVM_RETURN_IF_ERROR(runOp(op, inputs, outs));
    }
  } else {
    SVM_ASSIGN_OR_RETURN(std::vector<Value> leaves, stepInputs(step, pooled && !poison_));
    const std::vector<const Value*> inputs = pointersTo(leaves);
    SVM_RETURN_IF_ERROR(outputsFor(step, inputs, leaves, outs, pooled));
    SVM_RETURN_IF_ERROR(invokeCompiled(*step.kernel, inputs, outs));
  }
  publish(step, outs, pooled);
  return Status::ok();
}

Status RegionExecutor::runAll(bool pooled) {
  for (std::size_t b = 0; b < plan_.blocks.size(); ++b) {
    Status status = runBlock(plan_.blocks[b], pooled);
    if (!status.isOk()) return status.withContext(fmt::format("region block {}", b));  // formatted only on error
  }
  return Status::ok();
}

Status RegionExecutor::runBlock(const StepBlock& block, bool pooled) {
  for (int h : block.hoisted) SVM_RETURN_IF_ERROR(runStep(plan_.steps[static_cast<std::size_t>(h)], pooled));
  if (block.members.size() == 1) return runStep(plan_.steps[static_cast<std::size_t>(block.members[0])], pooled);
  std::vector<Member> members(block.members.size());
  for (std::size_t m = 0; m < members.size(); ++m) {
    Member& member = members[m];
    member.step = &plan_.steps[static_cast<std::size_t>(block.members[m])];
    SVM_ASSIGN_OR_RETURN(member.leaves, stepInputs(*member.step, pooled && !poison_));
    const std::vector<const Value*> inputs = pointersTo(member.leaves);
    member.outs.resize(member.step->outputs.size());
    SVM_RETURN_IF_ERROR(outputsFor(*member.step, inputs, member.leaves, member.outs, pooled));
    SVM_RETURN_IF_ERROR(prepareCall(*member.step->kernel, inputs, member.outs, member.call));
    for (std::size_t o = 0; o < member.step->outputs.size(); ++o) {
      real_[static_cast<std::size_t>(member.step->outputs[o])] =
          o < member.call.num_outputs ? Value::fromTensor(member.call.outputs[o]) : member.outs[o];
    }
  }
  const RowBlocking blocking = rowBlocking(members);
  if (blocking.per_block > 0) {
    ++row_blocked_;
    for (std::int64_t begin = 0; begin < blocking.units; begin += blocking.per_block) {
      const std::int64_t end = std::min(blocking.units, begin + blocking.per_block);
      for (std::size_t m = 0; m < members.size(); ++m) {
        runCallRows(members[m].call, begin * blocking.rows_per_unit[m], end * blocking.rows_per_unit[m]);
      }
    }
  } else {
    for (const Member& member : members) runCall(member.call);
  }
  for (Member& member : members) {
    finishCall(member.call, member.outs);
    publish(*member.step, member.outs, pooled);
  }
  return Status::ok();
}

RegionExecutor::RowBlocking RegionExecutor::rowBlocking(const std::vector<Member>& members) const {
  RowBlocking none;
  const std::int64_t target = Tunables::get(Tunable::RegionRowBlockKb) * 1024;
  if (target <= 0 || kernelThreads() > 1) return none;
  std::vector<std::int64_t> rows(members.size());
  std::int64_t units = std::numeric_limits<std::int64_t>::max();
  for (std::size_t m = 0; m < members.size(); ++m) {
    if (members[m].step->kernel->spec.params.threads > 1) return none;
    rows[m] = callRows(members[m].call);
    if (rows[m] < 1) return none;
    units = std::min(units, rows[m]);
  }
  RowBlocking blocking;
  blocking.units = units;
  std::int64_t unit_bytes = 1;
  for (std::size_t m = 0; m < members.size(); ++m) {
    if (rows[m] % units != 0) return none;
    blocking.rows_per_unit.push_back(rows[m] / units);
    std::int64_t row_bytes = 0;
    for (std::size_t o = 0; o < members[m].call.num_outputs; ++o) {
      const Tensor& out = members[m].call.outputs[o];
      row_bytes += out.numel() / rows[m] * static_cast<std::int64_t>(out.itemSize());
    }
    unit_bytes = std::max(unit_bytes, row_bytes * blocking.rows_per_unit[m]);
  }
  for (std::size_t m = 1; m < members.size(); ++m) {
    const Step& step = *members[m].step;
    for (std::size_t l = 0; l < step.leaves.size(); ++l) {
      for (std::size_t p = 0; p < m; ++p) {
        const std::vector<int>& made = members[p].step->outputs;
        const auto o = std::find(made.begin(), made.end(), step.leaves[l].base);
        if (o == made.end()) continue;
        const std::size_t index = static_cast<std::size_t>(o - made.begin());
        const Tensor& out =
            index < members[p].call.num_outputs ? members[p].call.outputs[index] : members[p].outs[index].tensor();
        if (!readsWithinRows(members[m].leaves[l].tensor(), out, blocking.rows_per_unit[m],
                             blocking.rows_per_unit[p] * (out.numel() / rows[p]))) {
          return none;
        }
      }
    }
  }
  blocking.per_block = std::max<std::int64_t>(1, target / unit_bytes);
  if (blocking.per_block >= units) return none;  // one block: nothing to interleave
  return blocking;
}

bool RegionExecutor::readsWithinRows(const Tensor& view, const Tensor& out, std::int64_t rows, std::int64_t span) {
  if (view.storage() != out.storage() || view.dtype() != out.dtype() || !out.isContiguous() || view.rank() < 1) {
    return false;
  }
  if (view.stride(0) * rows != span) return false;
  std::int64_t reach = view.offset() - out.offset() + (rows - 1) * view.stride(0);
  if (reach - (rows - 1) * view.stride(0) < 0) return false;
  for (int d = 1; d < view.rank(); ++d) {
    if (view.stride(d) < 0) return false;
    reach += (view.dim(d) - 1) * view.stride(d);
  }
  return reach < span;
}

std::string opName(OpId op) {
  return std::string(OpRegistry::global().schema(op).name);
}

// Runs the range with the reference kernels, op by op (the interpreter's semantics): the
// planning run that observes every value and the oracle of validation.
Status referenceRun(const RegionPlan& plan, RegionExecutor& eval, std::span<const std::vector<Value>> known) {
  for (const ROp& op : plan.ops) {
    if (const auto o = static_cast<std::size_t>(&op - plan.ops.data()); o < known.size() && !known[o].empty()) {
      for (std::size_t k = 0; k < op.out.size(); ++k) eval.setReal(op.out[k], known[o][k]);
      continue;
    }
    std::vector<const Value*> inputs;
    for (int in : op.in) inputs.push_back(in < 0 ? nullptr : &eval.realValue(in));
    std::vector<Value> outputs(op.out.size());
    SVM_RETURN_IF_ERROR(runOp(op, inputs, outputs).withContext(fmt::format("{} at PC=0x{:02X}", opName(op.op), op.pc)));
    for (std::size_t o = 0; o < op.out.size(); ++o) eval.setReal(op.out[o], std::move(outputs[o]));
  }
  return Status::ok();
}

// ---- CompiledRegion ----

CompiledRegion::~CompiledRegion() = default;

std::string CompiledRegion::describe() const {
  std::string text;
  for (const Step& step : plan->steps) {
    std::string part;
    if (step.kind == Step::Kind::Fused || step.kind == Step::Kind::Reduce) {
      part = fmt::format("fused({})", step.program->describe());
    } else {
      part = opName(plan->ops[static_cast<std::size_t>(step.op)].op);
      for (int e : step.absorbed) part += "+" + opName(plan->ops[static_cast<std::size_t>(e)].op);
      if (step.program) part += fmt::format("+gates({})", step.program->describe());
    }
    text += (text.empty() ? "" : ", ") + part;
  }
  // Blocks that may run in row blocks: their steps by index (the hoisted ones run first).
  for (const StepBlock& block : plan->blocks) {
    if (block.members.size() < 2) continue;
    text += fmt::format("; row blocks of steps {}", fmt::join(block.members, "+"));
    if (!block.hoisted.empty()) text += fmt::format(" after {}", fmt::join(block.hoisted, "+"));
  }
  return text;
}

std::vector<KernelHandle*> CompiledRegion::handles() {
  std::vector<KernelHandle*> out;
  for (Step& step : plan->steps) {
    if (step.kernel) out.push_back(&step.kernel->handle);
    if (step.open_kernel) out.push_back(&step.open_kernel->handle);
  }
  return out;
}

int CompiledRegion::kernels() const {
  return static_cast<int>(
      std::count_if(plan->steps.begin(), plan->steps.end(), [](const Step& s) { return s.kernel != nullptr; }));
}

int CompiledRegion::fusedOps() const {
  return plan->fused_ops;
}

bool CompiledRegion::run(std::span<Value> registers) const {
  const RegionPlan& p = *plan;
  for (const PreludeOp& op : p.prelude) {
    if (!runPrelude(op, registers).isOk()) {
      decline_counter->fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }
  RegionExecutor eval(p, false);
  for (int v : p.externals) {
    const RValue& value = p.values[static_cast<std::size_t>(v)];
    const Value& reg = registers[static_cast<std::size_t>(value.reg)];
    if (!value.tensor) {  // a reshape's target shape
      if (!reg.isTuple()) {
        decline_counter->fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      eval.setReal(v, reg);
      continue;
    }
    if (!reg.isTensor() || reg.tensor().dtype() != value.dtype || reg.tensor().rank() != value.shape.rank()) {
      decline_counter->fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    eval.setReal(v, reg);
  }
  // Buffers are reused only by one execution at a time (a re-entrant or concurrent run allocates).
  const bool pooled = !busy_.exchange(true, std::memory_order_acquire);
  bool ok = eval.runAll(pooled).isOk();
  std::vector<Value> results;
  if (ok) {
    results.reserve(p.writeback.size());
    for (const auto& [reg, v] : p.writeback) {
      auto value = eval.real(v);
      if (!value) {
        ok = false;
        break;
      }
      results.push_back(**value);
    }
  }
  if (pooled) busy_.store(false, std::memory_order_release);
  if (!ok) {
    decline_counter->fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  for (std::size_t i = 0; i < results.size(); ++i)
    registers[static_cast<std::size_t>(p.writeback[i].first)] = std::move(results[i]);
  run_counter->fetch_add(1, std::memory_order_relaxed);
  if (eval.rowBlockedBlocks() > 0) row_block_counter->fetch_add(1, std::memory_order_relaxed);
  if (eval.opaqueFallbacks() > 0 &&
      opaque_fallback_counter->fetch_add(static_cast<std::uint64_t>(eval.opaqueFallbacks()),
                                         std::memory_order_relaxed) == 0) {
    logAt(LogLevel::Info, "JIT", "Region at PC=0x{:02X}: an opaque step ran the reference kernel: {}", range.start_pc,
          eval.firstOpaqueFallback());
  }
  return true;
}

bool runCompiledRegion(const void* state, std::span<Value> registers) {
  return static_cast<const CompiledRegion*>(state)->run(registers);
}

}  // namespace shapevm::jit
