// SPDX-License-Identifier: Apache-2.0
// O2 region fusion: planning, compiling, validating and running fused ranges (see region.h).
#include "jit/region.h"
#include "jit/region_plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "jit/compiled_kernel.h"
#include "jit/shape_infer.h"
#include "jit/validate.h"
#include "ops/kernel_util.h"
#include "support/tunables.h"
#include "vm/scalar_ops.h"

namespace shapevm::jit {

namespace {

// Ops a range may hold: every input a tensor (or omitted), at least one tensor input; reshape's
// target shape may be a tuple (read from its register at entry). Other ops with scalar or tuple
// inputs (gather's index ...) end a range.
bool rangeOp(const OpSite& site) {
  if (site.inputs.empty() || site.inputs[0] < 0) return false;
  for (std::size_t k = 0; k < site.input_tokens.size(); ++k) {
    if (site.input_tokens[k].is_tensor || (k < site.inputs.size() && site.inputs[k] < 0)) continue;
    if (site.op == OpId::Reshape && k == 1) continue;
    return false;
  }
  return true;
}

// Registers an instruction of a range reads and writes (CallOp, Move, prelude instructions).
void registersOf(const Function& function, const Instruction& in, std::vector<int>& reads, std::vector<int>& writes) {
  reads.clear();
  writes.clear();
  if (in.op == Opcode::CallOp) {
    const OpSite& site = function.op_sites[static_cast<std::size_t>(in.a)];
    for (std::int32_t r : site.inputs) {
      if (r >= 0) reads.push_back(r);
    }
    writes.assign(site.outputs.begin(), site.outputs.end());
  } else if (in.op == Opcode::Move) {
    reads.push_back(in.b);
    writes.push_back(in.a);
  } else if (in.op == Opcode::TuplePack) {
    for (std::int32_t i = 0; i < in.c; ++i) reads.push_back(function.operand_pool[static_cast<std::size_t>(in.b + i)]);
    writes.push_back(in.a);
  } else if (in.op == Opcode::LoadConst) {
    writes.push_back(in.a);
  } else if (scalarBinaryOp(in.op)) {
    reads = {in.b, in.c};
    writes.push_back(in.a);
  } else if (scalarUnaryOp(in.op) || in.op == Opcode::DimOf) {
    reads.push_back(in.b);
    writes.push_back(in.a);
  }
}

}  // namespace

std::vector<FusionRange> fusionRanges(const Function& function, const Region& region) {
  std::vector<FusionRange> ranges;
  FusionRange current;
  std::set<int> read, written, prelude_reads, prelude_writes;  // by the current range's ops / its prelude
  auto flush = [&](int end_pc) {
    if (current.sites.size() >= 2) {
      current.resume_pc = end_pc;
      // Prelude instructions after the last CallOp are not part of the range.
      std::erase_if(current.prelude, [&](int pc) { return pc >= end_pc; });
      ranges.push_back(current);
    }
    current = FusionRange{};
    read.clear();
    written.clear();
    prelude_reads.clear();
    prelude_writes.clear();
  };
  std::vector<int> reads, writes;
  for (int pc = region.start_pc; pc < region.end_pc; ++pc) {
    const Instruction& in = function.code[static_cast<std::size_t>(pc)];
    registersOf(function, in, reads, writes);
    const auto any = [](const std::vector<int>& regs, const std::set<int>& set) {
      return std::any_of(regs.begin(), regs.end(), [&](int r) { return set.count(r) > 0; });
    };
    bool joins = false;
    bool callop = false;  // a CallOp that may be in a range
    if (in.op == Opcode::CallOp) {
      const OpSite& site = function.op_sites[static_cast<std::size_t>(in.a)];
      // Only this region's own sites (an inner loop's body is that loop's region).
      const bool own = std::find(region.sites.begin(), region.sites.end(), in.a) != region.sites.end();
      joins = callop = own && rangeOp(site);
    } else if (in.op == Opcode::Move) {
      joins = !current.sites.empty();
    } else if (preludeOp(in.op)) {
      // Replayable at entry, and again by the interpreter after a decline: reads nothing the
      // range computes, writes nothing the range reads or writes, and nothing the prelude read
      // (itself included: `r7 = r7 + r8` would not give the same value twice).
      std::set<int> own_reads(reads.begin(), reads.end());
      joins = !current.sites.empty() && !any(reads, written) && !any(writes, read) && !any(writes, written) &&
              !any(writes, prelude_writes) && !any(writes, prelude_reads) && !any(writes, own_reads);
      if (joins) {
        current.prelude.push_back(pc);
        prelude_reads.insert(reads.begin(), reads.end());
        prelude_writes.insert(writes.begin(), writes.end());
        continue;
      }
    }
    if (joins && any(writes, prelude_writes)) {
      flush(current.pcs.empty() ? pc : current.pcs.back() + 1);  // would overwrite a replayed register
      joins = callop;  // it may start the next range
    }
    if (joins) {
      if (in.op == Opcode::CallOp) {
        if (current.sites.empty()) current.start_pc = pc;
        current.sites.push_back(in.a);
        current.pcs.push_back(pc);
      }
      read.insert(reads.begin(), reads.end());
      written.insert(writes.begin(), writes.end());
      continue;
    }
    // The range ends at its last CallOp (trailing Moves stay interpreted).
    flush(current.pcs.empty() ? pc : current.pcs.back() + 1);
  }
  flush(current.pcs.empty() ? region.end_pc : current.pcs.back() + 1);
  return ranges;
}

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

namespace {

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
  if (common != shape) return makeError(ErrorCode::ShapeMismatch, "cannot broadcast {} to {}", t.describe(), shape.toString());
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

// One execution's values: real tensors, and zero-stride stand-ins ("phantoms") that carry only
// the shape of a value no step materializes.
class Eval {
 public:
  Eval(const RegionPlan& plan, bool poison) : plan_(plan), poison_(poison) {
    real_.resize(plan.values.size());
    phantom_.resize(plan.values.size());
  }

  void setReal(int v, Value value) { real_[static_cast<std::size_t>(v)] = std::move(value); }
  bool hasReal(int v) const { return !real_[static_cast<std::size_t>(v)].isNone(); }
  // After planning added values (statistics) to the plan.
  void grow() {
    real_.resize(plan_.values.size());
    phantom_.resize(plan_.values.size());
  }
  const Value& realValue(int v) const { return real_[static_cast<std::size_t>(v)]; }

  // The op's inputs as real values (nullptr for an omitted input).
  Expected<std::vector<const Value*>> realInputs(const ROp& op) {
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

  // A view op's inputs with `input` as its tensor (a reshape's target shape is a real external).
  Expected<std::vector<const Value*>> viewInputs(const ROp& op, const Value* input) {
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

  // The value as a real tensor: given, produced by a step already run, or a view of one.
  Expected<const Value*> real(int v) {
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

  bool realizable(int v) const {
    if (hasReal(v)) return true;
    const RValue& value = plan_.values[static_cast<std::size_t>(v)];
    if (value.op < 0) return false;
    const ROp& op = plan_.ops[static_cast<std::size_t>(value.op)];
    return op.cls == OpClass::View && op.in[0] >= 0 && realizable(op.in[0]);
  }

  // A tensor with v's runtime shape: the real value when there is one, else a phantom.
  Expected<const Value*> shaped(int v) {
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
      for (std::size_t o = 0; o < op.out.size(); ++o) phantom_[static_cast<std::size_t>(op.out[o])] = std::move(outputs[o]);
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

  // The leaf's view of its base, broadcast to `iteration`.
  Expected<Value> leaf(const Leaf& leaf, const Shape& iteration) {
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

  // Output buffers for a step: a pooled buffer nobody else holds, else a fresh one (NaN-poisoned
  // in validation runs so an element the kernel skips shows).
  void takeBuffers(const Step& step, std::span<Value> outs, bool pooled) {
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
  static void keepBuffers(const Step& step, std::span<const Value> outs, bool pooled) {
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

  Status poisonOutputs(const CompiledKernel& kernel, std::span<const Value* const> inputs, std::span<Value> outs) {
    if (!poison_) return Status::ok();
    std::vector<DType> dtypes(outs.size());
    std::vector<Shape> shapes(outs.size());
    SVM_RETURN_IF_ERROR(kernel.family->outputs(kernel.spec, inputs, dtypes, shapes));
    for (std::size_t o = 0; o < outs.size(); ++o) {
      SVM_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(dtypes[o], shapes[o]));
      for (std::int64_t k = 0; k < t.numel(); ++k) storeFromDouble(t.rawData(), dtypes[o], k, std::numeric_limits<double>::quiet_NaN());
      outs[o] = Value::fromTensor(std::move(t));
    }
    return Status::ok();
  }

  // The kernel inputs of a Fused, Reduce or MatMul step: the leaves' views (a matmul: A, B and its
  // epilogue operands as they are).
  Expected<std::vector<Value>> stepInputs(const Step& step) {
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
    return leaves;
  }

  static std::vector<const Value*> pointersTo(const std::vector<Value>& values) {
    std::vector<const Value*> pointers;
    pointers.reserve(values.size());
    for (const Value& v : values) pointers.push_back(&v);
    return pointers;
  }

  // A step's output buffers, ready for its kernel: pooled ones when free, NaN-poisoned when
  // validating; in-place outputs are their leaves.
  Status outputsFor(const Step& step, std::span<const Value* const> inputs, const std::vector<Value>& leaves,
                    std::span<Value> outs, bool pooled) {
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
      for (std::size_t l = 0; l < leaves.size() && apart; ++l) apart = l == leaf || leaves[l].tensor().storage() != t.storage();
      if (!apart) return makeError(ErrorCode::ShapeMismatch, "in-place leaf {} is strided or shares its storage", leaf);
      outs[own + k] = leaves[leaf];
    }
    return Status::ok();
  }

  void publish(const Step& step, std::span<const Value> outs, bool pooled) {
    for (std::size_t o = 0; o < step.outputs.size(); ++o) real_[static_cast<std::size_t>(step.outputs[o])] = outs[o];
    keepBuffers(step, outs.first(kernelOutputs(step)), pooled);
  }

  Status runStep(const Step& step, bool pooled) {
    std::vector<Value> outs(step.outputs.size());
    if (step.kind == Step::Kind::Opaque) {
      const ROp& op = plan_.ops[static_cast<std::size_t>(step.op)];
      SVM_ASSIGN_OR_RETURN(std::vector<const Value*> inputs, realInputs(op));
      takeBuffers(step, outs, pooled);
      // The op's own compiled kernel (O1-style) when its guard admits the inputs, else the
      // reference kernel: an unfusable op is never slower inside a region than outside.
      if (step.kernel && step.guard.passes(inputs)) {
        SVM_RETURN_IF_ERROR(invokeCompiled(*step.kernel, inputs, outs));
      } else {
        SVM_RETURN_IF_ERROR(runOp(op, inputs, outs));
      }
    } else {
      SVM_ASSIGN_OR_RETURN(std::vector<Value> leaves, stepInputs(step));
      const std::vector<const Value*> inputs = pointersTo(leaves);
      SVM_RETURN_IF_ERROR(outputsFor(step, inputs, leaves, outs, pooled));
      SVM_RETURN_IF_ERROR(invokeCompiled(*step.kernel, inputs, outs));
    }
    publish(step, outs, pooled);
    return Status::ok();
  }

  int rowBlockedBlocks() const { return row_blocked_; }

  // Every step of the plan, block by block.
  Status runAll(bool pooled) {
    for (std::size_t b = 0; b < plan_.blocks.size(); ++b) {
      Status status = runBlock(plan_.blocks[b], pooled);
      if (!status.isOk()) return status.withContext(fmt::format("region block {}", b));  // formatted only on error
    }
    return Status::ok();
  }

  // A block: the hoisted steps, then the members' calls prepared in order (each member's output
  // buffers are real before the next one's views are taken) and run row block by row block when
  // their layouts allow it (rowBlocking), else one after the other.
  Status runBlock(const StepBlock& block, bool pooled) {
    for (int h : block.hoisted) SVM_RETURN_IF_ERROR(runStep(plan_.steps[static_cast<std::size_t>(h)], pooled));
    if (block.members.size() == 1) return runStep(plan_.steps[static_cast<std::size_t>(block.members[0])], pooled);
    std::vector<Member> members(block.members.size());
    for (std::size_t m = 0; m < members.size(); ++m) {
      Member& member = members[m];
      member.step = &plan_.steps[static_cast<std::size_t>(block.members[m])];
      SVM_ASSIGN_OR_RETURN(member.leaves, stepInputs(*member.step));
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

 private:
  struct Member {
    const Step* step = nullptr;
    std::vector<Value> leaves;  // the call's inputs (its args point into them)
    std::vector<Value> outs;
    PreparedCall call;
  };

  // How a block's members split into row blocks: `units` common units, member m computing
  // rows_per_unit[m] rows per unit, per_block units at a time (0: run each member whole).
  struct RowBlocking {
    std::int64_t units = 0;
    std::int64_t per_block = 0;
    std::vector<std::int64_t> rows_per_unit;
  };

  // Row blocks pay when a member's output is read again by a later member while still in cache.
  // They are correct when every member computes a range of its rows alone (callRows), all row
  // counts are multiples of the smallest, and each later member reads an earlier member's output
  // only inside the rows that member computes in the same unit: its view steps by exactly that
  // many rows per unit and reaches no further. Kernel threads split rows their own way: then none.
  RowBlocking rowBlocking(const std::vector<Member>& members) const {
    RowBlocking none;
    const std::int64_t target = Tunables::get(Tunable::RegionRowBlockKb) * 1024;
    if (target <= 0 || Tunables::get(Tunable::KernelThreads) > 1) return none;
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
          const Tensor& out = index < members[p].call.num_outputs ? members[p].call.outputs[index]
                                                                  : members[p].outs[index].tensor();
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

  // True when `view` (a consumer's input, `rows` of its axis 0 per unit) reads the contiguous
  // `out` only within unit u's `span` elements while on unit u's rows.
  static bool readsWithinRows(const Tensor& view, const Tensor& out, std::int64_t rows, std::int64_t span) {
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

  const RegionPlan& plan_;
  bool poison_ = false;
  int row_blocked_ = 0;  // blocks run in row blocks so far
  std::vector<Value> real_;
  std::vector<Value> phantom_;
};

std::string opName(OpId op) { return std::string(OpRegistry::global().schema(op).name); }

// Runs the range with the reference kernels, op by op (the interpreter's semantics): the
// planning run that observes every value and the oracle of validation.
Status referenceRun(const RegionPlan& plan, Eval& eval) {
  for (const ROp& op : plan.ops) {
    std::vector<const Value*> inputs;
    for (int in : op.in) inputs.push_back(in < 0 ? nullptr : &eval.realValue(in));
    std::vector<Value> outputs(op.out.size());
    SVM_RETURN_IF_ERROR(runOp(op, inputs, outputs).withContext(fmt::format("{} at PC=0x{:02X}", opName(op.op), op.pc)));
    for (std::size_t o = 0; o < op.out.size(); ++o) eval.setReal(op.out[o], std::move(outputs[o]));
  }
  return Status::ok();
}

}  // namespace

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
  }
  return out;
}

int CompiledRegion::kernels() const {
  return static_cast<int>(std::count_if(plan->steps.begin(), plan->steps.end(), [](const Step& s) { return s.kernel != nullptr; }));
}

int CompiledRegion::fusedOps() const { return plan->fused_ops; }

bool CompiledRegion::run(std::span<Value> registers) const {
  const RegionPlan& p = *plan;
  for (const PreludeOp& op : p.prelude) {
    if (!runPrelude(op, registers).isOk()) {
      decline_counter->fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }
  Eval eval(p, false);
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
  for (std::size_t i = 0; i < results.size(); ++i) registers[static_cast<std::size_t>(p.writeback[i].first)] = std::move(results[i]);
  run_counter->fetch_add(1, std::memory_order_relaxed);
  if (eval.rowBlockedBlocks() > 0) row_block_counter->fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool runCompiledRegion(const void* state, std::span<Value> registers) {
  return static_cast<const CompiledRegion*>(state)->run(registers);
}

namespace {

// A random tensor of `value`'s dtype and shape laid out with `strides` (as observed: broadcast
// zeros, transposes, negative steps) over a fresh random buffer.
Expected<Value> stridedRandom(const RValue& value, const Shape& strides, bool positive, std::uint64_t seed) {
  std::int64_t lo = 0, hi = 0;
  bool empty = false;
  for (int d = 0; d < value.shape.rank(); ++d) {
    if (value.shape[d] == 0) empty = true;
    const std::int64_t reach = (value.shape[d] - 1) * (d < strides.rank() ? strides[d] : 0);
    (reach < 0 ? lo : hi) += reach;
  }
  if (empty) {
    SVM_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(value.dtype, value.shape));
    return Value::fromTensor(std::move(t));
  }
  const bool usable = strides.rank() == value.shape.rank();
  KernelSpec spec;
  OperandSpec operand;
  operand.dtype = value.dtype;
  operand.rank = 1;
  spec.inputs.push_back(operand);
  const std::int64_t span = usable ? hi - lo + 1 : std::max<std::int64_t>(value.shape.numel(), 1);
  const Shape backing_shape{span};
  const bool positives[1] = {positive};
  SVM_ASSIGN_OR_RETURN(std::vector<Value> backing, randomInputs(spec, std::span<const Shape>(&backing_shape, 1), seed, positives));
  const Tensor& flat = backing[0].tensor();
  if (!usable) {
    SVM_ASSIGN_OR_RETURN(Tensor t, flat.reshapeView(value.shape));
    return Value::fromTensor(std::move(t));
  }
  SVM_ASSIGN_OR_RETURN(Tensor t, flat.asStrided(value.shape, strides, -lo));
  return Value::fromTensor(std::move(t));
}

// The shape token the bytecode gives value v: its producing op's output token, or for a region
// input the input token of an op reading it; nullptr when none (statistics, untyped sites).
const TensorDescriptor* tokenOf(const Function& function, const RegionPlan& p, int v) {
  const RValue& value = p.values[static_cast<std::size_t>(v)];
  auto token = [](const std::vector<TensorDescriptor>& tokens, std::size_t k) -> const TensorDescriptor* {
    return k < tokens.size() && tokens[k].is_tensor && !tokens[k].any_rank ? &tokens[k] : nullptr;
  };
  if (value.op >= 0) {
    const OpSite& site = function.op_sites[static_cast<std::size_t>(p.ops[static_cast<std::size_t>(value.op)].site)];
    return token(site.output_tokens, static_cast<std::size_t>(value.out));
  }
  for (const ROp& op : p.ops) {
    for (std::size_t k = 0; k < op.in.size(); ++k) {
      if (op.in[k] == v) return token(function.op_sites[static_cast<std::size_t>(op.site)].input_tokens, k);
    }
  }
  return nullptr;
}

// Static dims and divisors of a fused program's iteration shape, from the shape token of the value
// that has it (checked again by the family on every call). Axis 0 stays dynamic: kernel threads
// split it.
void bakeStaticDims(FusedProgram& program, const TensorDescriptor* token, const Shape& planned) {
  program.static_dims.assign(static_cast<std::size_t>(program.rank), -1);
  program.divisors.assign(static_cast<std::size_t>(program.rank), 1);
  if (token == nullptr || token->rank() != program.rank || planned.rank() != program.rank) return;
  for (int d = 1; d < program.rank; ++d) {
    const DimToken& dim = token->dims[static_cast<std::size_t>(d)];
    if (dim.is_static && dim.size == planned[d]) {
      program.static_dims[static_cast<std::size_t>(d)] = dim.size;
    } else if (!dim.is_static && dim.divisor > 1 && planned[d] % dim.divisor == 0) {
      program.divisors[static_cast<std::size_t>(d)] = dim.divisor;
    }
  }
}

// Groups the steps into blocks (StepBlock): a fused or reduction step starts one; a later one that
// reads a member's output joins it (the steps between that read none run first, hoisted); an
// opaque step, or a matmul reading a member's output, ends it. Whether a block really runs in row
// blocks is decided per execution, on the actual layouts.
void planBlocks(RegionPlan& p) {
  const auto rowStep = [](const Step& s) { return s.kind == Step::Kind::Fused || s.kind == Step::Kind::Reduce; };
  const int n = static_cast<int>(p.steps.size());
  int k = 0;
  while (k < n) {
    StepBlock block;
    block.members.push_back(k);
    if (rowStep(p.steps[static_cast<std::size_t>(k)])) {
      std::set<int> made(p.steps[static_cast<std::size_t>(k)].outputs.begin(), p.steps[static_cast<std::size_t>(k)].outputs.end());
      std::vector<int> independent;
      for (int j = k + 1; j < n; ++j) {
        const Step& step = p.steps[static_cast<std::size_t>(j)];
        if (step.kind == Step::Kind::Opaque) break;
        const bool reads = std::any_of(step.leaves.begin(), step.leaves.end(),
                                       [&](const Leaf& leaf) { return made.count(leaf.base) != 0; });
        if (!reads) {
          independent.push_back(j);
          continue;
        }
        if (!rowStep(step)) break;
        block.members.push_back(j);
        made.insert(step.outputs.begin(), step.outputs.end());
        block.hoisted.insert(block.hoisted.end(), independent.begin(), independent.end());
        independent.clear();
      }
    }
    k = block.members.back() + 1;
    p.blocks.push_back(std::move(block));
  }
}

// A Fused/Reduce/MatMul step's kernel inputs on the reference run's values (see Eval::stepInputs).
Expected<std::vector<Value>> stepLeaves(const RegionPlan& p, const Step& step, Eval& reference) {
  std::vector<Value> leaves;
  Shape iteration;
  if (step.kind != Step::Kind::MatMul || step.program) {
    const int first = step.kind == Step::Kind::Reduce ? step.source : step.outputs[0];
    iteration = p.values[static_cast<std::size_t>(first)].shape;
  }
  for (const Leaf& leaf : step.leaves) {
    if (readsView(step, leaves.size())) {
      SVM_ASSIGN_OR_RETURN(Value value, reference.leaf(leaf, iteration));
      leaves.push_back(std::move(value));
    } else {
      leaves.push_back(reference.realValue(leaf.base));
    }
  }
  return leaves;
}

// A MatMul step's spec: the site's inferred matmul spec, the epilogue's operands after A and B,
// and with a gate epilogue the program's leaf views after them (their stride along H baked in).
Expected<KernelSpec> matmulStepSpec(const RegionPlan& p, const Step& step, const std::vector<Value>& leaves,
                                    std::span<const std::vector<ProfileRecord>> records, int compiles) {
  const ROp& mm = p.ops[static_cast<std::size_t>(step.op)];
  const std::size_t site_index = static_cast<std::size_t>(&mm - p.ops.data());
  SVM_ASSIGN_OR_RETURN(ShapeInference inferred, inferSpec(OpId::MatMul, *mm.attrs, records[site_index], compiles));
  KernelSpec spec = inferred.spec;
  for (std::size_t e = 2; e < leaves.size(); ++e) {
    const Tensor& t = leaves[e].tensor();
    OperandSpec operand;
    operand.dtype = t.dtype();
    operand.rank = t.rank();
    operand.contiguous = step.program && e >= step.matmul_leaves ? false : t.isContiguous();
    spec.inputs.push_back(operand);
  }
  spec.epilogue = step.epilogue;
  if (step.program) {
    FusedProgram& program = *step.program;
    for (std::size_t l = 0; l < step.fused_leaf_source.size(); ++l) {
      const int source = step.fused_leaf_source[l];
      if (source < 0) {
        program.leaf_inner[l] = 1;
        continue;
      }
      const Tensor& t = leaves[static_cast<std::size_t>(source)].tensor();
      const std::int64_t inner = t.rank() == 0 || t.dim(t.rank() - 1) == 1 ? 1 : t.stride(t.rank() - 1);
      program.leaf_inner[l] = inner == 0 || inner == 1 ? static_cast<int>(inner) : -1;
    }
    spec.fused = step.program;
    spec.fused_leaf_source = step.fused_leaf_source;
  }
  return spec;
}

// True when value w is value v or a view of it (through view ops only).
bool viewOf(const RegionPlan& p, int w, int v) {
  while (w != v) {
    const RValue& value = p.values[static_cast<std::size_t>(w)];
    if (value.op < 0) return false;
    const ROp& op = p.ops[static_cast<std::size_t>(value.op)];
    if (op.cls != OpClass::View || op.in.empty() || op.in[0] < 0) return false;
    w = op.in[0];
  }
  return true;
}

// Gate epilogues: a matmul whose product only one later fused step reads, through views that
// reshape its leading axes and split its columns into G equal blocks (the LSTM gates after
// x @ W.T + b), becomes one step: the program runs in the matmul's tiles on the accumulators and
// the product is never stored. The views' layout is checked structurally (reshape and split ops
// only, one split) and on the planning run (block g at column g * H, rows flattened row-major);
// the merged kernel must be one the matmul family supports, else the steps stay apart.
Status mergeGateEpilogues(RegionPlan& p, const Function& function, Eval& reference,
                          std::span<const std::vector<ProfileRecord>> records, int compiles) {
  if (Tunables::get(Tunable::RegionGateEpilogue) == 0) return Status::ok();
  for (std::size_t m = 0; m < p.steps.size(); ++m) {
    const Step& mm = p.steps[m];
    if (mm.kind != Step::Kind::MatMul || mm.program || mm.outputs.size() != 1) continue;
    const int v = mm.outputs[0];
    bool elsewhere = false;
    for (const auto& [reg, w] : p.writeback) elsewhere = elsewhere || viewOf(p, w, v);
    int reader = -1;
    for (std::size_t k = 0; k < p.steps.size() && !elsewhere; ++k) {
      if (k == m) continue;
      const Step& step = p.steps[k];
      bool reads = step.source == v || step.center == v;
      if (step.kind == Step::Kind::Opaque) {
        for (int in : p.ops[static_cast<std::size_t>(step.op)].in) reads = reads || (in >= 0 && viewOf(p, in, v));
      }
      for (const Leaf& leaf : step.leaves) reads = reads || leaf.base == v;
      if (!reads) continue;
      if (reader >= 0 || step.kind != Step::Kind::Fused) elsewhere = true;
      reader = static_cast<int>(k);
    }
    if (elsewhere || reader < static_cast<int>(m)) continue;
    const Step& fused = p.steps[static_cast<std::size_t>(reader)];
    const FusedProgram& program = *fused.program;
    if (program.reduce != FusedProgram::Reduce::None || !program.in_place.empty() || program.rank < 2 ||
        program.rank > 3) {
      continue;
    }
    const Shape iteration = p.values[static_cast<std::size_t>(fused.outputs[0])].shape;
    const Tensor& product = reference.realValue(v).tensor();
    if (iteration.rank() != program.rank || product.rank() != 2 || !product.isContiguous()) continue;
    const std::int64_t hidden = iteration[iteration.rank() - 1];
    Step merged;
    merged.kind = Step::Kind::MatMul;
    merged.op = mm.op;
    merged.leaves = mm.leaves;
    merged.epilogue = mm.epilogue;
    merged.absorbed = mm.absorbed;
    merged.matmul_leaves = mm.leaves.size();
    merged.outputs = fused.outputs;
    bool fits = hidden > 0;
    int gates = 0;
    for (const Leaf& leaf : fused.leaves) {
      if (leaf.base != v) {
        merged.fused_leaf_source.push_back(static_cast<int>(merged.leaves.size()));
        merged.leaves.push_back(leaf);
        continue;
      }
      // Every execution's views, not only the planning run's, must map (rows..., u) of block g to
      // product[row, g * H + u]: so the chain may only reshape with a static last dim N (its
      // leading dims regroup the rows, row-major) and split the last axis once into blocks of a
      // static H, as the shape tokens say; broadcasts only to the shape a value already has.
      const std::int64_t n = product.dim(1);
      int block = -1;
      Shape shape = product.shape();
      auto lastStatic = [](const TensorDescriptor* t) {
        return t != nullptr && t->rank() > 0 && t->dims.back().is_static ? t->dims.back().size : -1;
      };
      for (const ChainItem& item : leaf.chain) {
        if (item.expand) {
          fits = fits && p.values[static_cast<std::size_t>(item.value)].shape == shape;
          continue;
        }
        const ROp& op = p.ops[static_cast<std::size_t>(item.op)];
        const int out = op.out[static_cast<std::size_t>(item.out)];
        const TensorDescriptor* from = tokenOf(function, p, op.in[0]);
        const TensorDescriptor* to = tokenOf(function, p, out);
        if (op.op == OpId::Split && block < 0 && from != nullptr) {
          const std::int64_t axis = (*op.attrs)[0].i;
          fits = fits && (axis == -1 || axis == from->rank() - 1) && lastStatic(from) == n && lastStatic(to) == hidden;
          block = item.out;
        } else {
          fits = fits && op.op == OpId::Reshape && lastStatic(from) == n && lastStatic(to) == n;
        }
        shape = p.values[static_cast<std::size_t>(out)].shape;
      }
      fits = fits && block >= 0;
      if (!fits) break;
      auto view = reference.leaf(leaf, iteration);
      if (!view) {
        fits = false;
        break;
      }
      const Tensor& t = view->tensor();
      const bool rank2 = iteration.rank() == 2;
      fits = t.storage() == product.storage() && t.shape() == iteration &&
             t.offset() == product.offset() + block * hidden && t.stride(iteration.rank() - 1) == 1 &&
             t.stride(iteration.rank() - 2) == n && (rank2 || t.stride(0) == iteration[1] * n);
      if (!fits) break;
      merged.fused_leaf_source.push_back(-block - 1);
      gates = std::max(gates, block + 1);
    }
    if (!fits || merged.leaves.size() == merged.matmul_leaves || gates < 2 || gates * hidden != product.dim(1))
      continue;
    merged.program = std::make_shared<FusedProgram>(program);
    SVM_ASSIGN_OR_RETURN(std::vector<Value> leaves, stepLeaves(p, merged, reference));
    SVM_ASSIGN_OR_RETURN(KernelSpec spec, matmulStepSpec(p, merged, leaves, records, compiles));
    if (!familyFor(OpId::MatMul)->supports(spec).isOk()) continue;
    // The merged step takes the fused step's place (its other inputs are real by then).
    p.steps[static_cast<std::size_t>(reader)] = std::move(merged);
    p.steps.erase(p.steps.begin() + static_cast<std::ptrdiff_t>(m));
    std::fill(p.producer.begin(), p.producer.end(), -1);
    for (std::size_t k = 0; k < p.steps.size(); ++k) {
      for (int out : p.steps[k].outputs) p.producer[static_cast<std::size_t>(out)] = static_cast<int>(k);
    }
    --m;
  }
  return Status::ok();
}

KernelParams tuneKernel(Tuner* tuner, KernelBackend& engine, const KernelFamily& family, const KernelSpec& spec,
                        std::span<const Value* const> examples, std::vector<TuneOutcome>* outcomes) {
  if (tuner == nullptr || family.searchSpace(engine.targetSpec(spec)).empty()) return KernelParams{};
  auto outcome = tuner->tune(engine, family, spec, examples);
  if (!outcome) return KernelParams{};  // a tuner error means default parameters
  if (outcomes != nullptr) outcomes->push_back(*outcome);
  return outcome->params;
}

}  // namespace

Expected<std::unique_ptr<CompiledRegion>> compileRegion(KernelBackend& engine, const Module& module, const Function& function,
                                                        const FusionRange& range, const Liveness& liveness,
                                                        std::span<const std::vector<ProfileRecord>> records, int compiles,
                                                        Tuner* tuner, std::vector<TuneOutcome>* tuning,
                                                        RegionCompileTimes* times) {
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  Clock::time_point phase = Clock::now();
  RegionCompileTimes local;
  if (times == nullptr) times = &local;
  auto region = std::make_unique<CompiledRegion>();
  region->range = range;
  region->plan = std::make_unique<RegionPlan>();
  RegionPlan& p = *region->plan;
  buildRegionGraph(p, function, range, liveness);

  // The prelude, replayed at each entry.
  for (int pc : range.prelude) {
    const Instruction& in = function.code[static_cast<std::size_t>(pc)];
    PreludeOp op;
    op.op = in.op;
    op.dst = in.a;
    if (in.op == Opcode::LoadConst) {
      if (in.b < 0 || static_cast<std::size_t>(in.b) >= module.constants.size()) return makeError(ErrorCode::Internal, "bad constant");
      op.constant = module.constants[static_cast<std::size_t>(in.b)].value;
    } else if (in.op == Opcode::TuplePack) {
      for (std::int32_t i = 0; i < in.c; ++i) op.items.push_back(function.operand_pool[static_cast<std::size_t>(in.b + i)]);
    } else if (in.op == Opcode::DimOf) {
      op.items = {in.b};
      op.axis = in.c;
    } else {
      op.items = scalarBinaryOp(in.op) ? std::vector<int>{in.b, in.c} : std::vector<int>{in.b};
    }
    p.prelude.push_back(std::move(op));
  }
  // Externals: dtype, shape and strides from the newest profile record of a site that reads them.
  std::vector<Shape> external_strides;
  std::map<int, Value> planned_shapes;  // reshape targets: the shape a later op observed for the reshape's output
  std::vector<const ProfileRecord*> newest;
  for (const auto& site_records : records) newest.push_back(newestRecord(site_records));
  // The observed shape of value `v` as some op of the range read it, if one did.
  auto observedShape = [&](int v) -> const OperandProfile* {
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      for (std::size_t k = 0; k < p.ops[i].in.size() && newest[i] != nullptr; ++k) {
        if (p.ops[i].in[k] == v && k < newest[i]->inputs.size() && newest[i]->inputs[k].is_tensor) return &newest[i]->inputs[k];
      }
    }
    return nullptr;
  };
  for (int v : p.externals) {
    RValue& value = p.values[static_cast<std::size_t>(v)];
    bool found = false;
    for (std::size_t i = 0; i < p.ops.size() && !found; ++i) {
      const ProfileRecord* record = newest[i];
      for (std::size_t k = 0; k < p.ops[i].in.size() && record != nullptr && !found; ++k) {
        if (p.ops[i].in[k] != v || k >= record->inputs.size()) continue;
        const OperandProfile& operand = record->inputs[k];
        found = true;
        external_strides.push_back(operand.strides);
        if (operand.is_tensor) {
          value.dtype = operand.dtype;
          value.shape = operand.shape;
          continue;
        }
        // A reshape's target shape: planned as the shape its output was observed with.
        const OperandProfile* reshaped = p.ops[i].op == OpId::Reshape && k == 1 ? observedShape(p.ops[i].out[0]) : nullptr;
        if (reshaped == nullptr) return makeError(ErrorCode::Unsupported, "a region input r{} is not a tensor", value.reg);
        std::vector<Value> dims;
        for (int d = 0; d < reshaped->shape.rank(); ++d) dims.push_back(Value::fromInt(reshaped->shape[d]));
        planned_shapes[v] = Value::fromTuple(std::move(dims));
        value.tensor = false;
      }
    }
    if (!found) return makeError(ErrorCode::JitError, "no profile for region input r{}", value.reg);
  }

  // The planning run: random inputs of the observed shapes and layouts (strides, broadcasts,
  // negative steps) through the reference kernels; inputs that some op needs positive (log,
  // sqrt, divisors) are drawn positive.
  const std::uint64_t seed = 0x9e37 ^ (static_cast<std::uint64_t>(range.start_pc) << 16) ^ static_cast<std::uint64_t>(compiles);
  std::vector<Value> inputs;
  for (std::size_t e = 0; e < p.externals.size(); ++e) {
    const int v = p.externals[e];
    bool positive = false;
    for (const ROp& op : p.ops) {
      for (std::size_t k = 0; k < op.in.size(); ++k) positive = positive || (op.in[k] == v && needsPositiveInput(op.op, k));
    }
    if (auto planned = planned_shapes.find(v); planned != planned_shapes.end()) {
      inputs.push_back(planned->second);
      continue;
    }
    SVM_ASSIGN_OR_RETURN(Value input, stridedRandom(p.values[static_cast<std::size_t>(v)], external_strides[e], positive, seed + e));
    inputs.push_back(std::move(input));
  }
  Eval reference(p, false);
  for (std::size_t i = 0; i < p.externals.size(); ++i) reference.setReal(p.externals[i], inputs[i]);
  // A range whose ops fail on random inputs of its shapes (integer division by zero, an index out
  // of range ...) cannot be planned or validated: not fusable, not a codegen failure.
  if (Status run = referenceRun(p, reference); !run.isOk()) {
    return makeError(ErrorCode::Unsupported, "the reference run on random inputs of the observed shapes failed: {}", run.message());
  }
  for (std::size_t v = 0; v < p.values.size(); ++v) {
    const Value& observed = reference.realValue(static_cast<int>(v));
    RValue& value = p.values[v];
    value.tensor = observed.isTensor();
    if (value.tensor) {
      const Tensor& t = observed.tensor();
      value.dtype = t.dtype();
      value.shape = t.shape();
      value.inner_stride = t.rank() == 0 || t.dim(t.rank() - 1) == 1 ? 1 : t.stride(t.rank() - 1);
    }
  }

  SVM_RETURN_IF_ERROR(planRegionSteps(p, function, range, liveness));
  reference.grow();
  SVM_RETURN_IF_ERROR(mergeGateEpilogues(p, function, reference, records, compiles));
  bool worthwhile = false;
  for (const Step& step : p.steps) {
    worthwhile = worthwhile || (step.kind == Step::Kind::MatMul && (!step.epilogue.empty() || step.program)) ||
                 (step.kind == Step::Kind::Fused && step.program->nodes.size() >= 2) ||
                 (step.kind == Step::Kind::Reduce && !step.program->nodes.empty());
  }
  if (!worthwhile) return makeError(ErrorCode::Unsupported, "nothing to fuse in this range");

  times->plan_ms = since(phase);
  phase = Clock::now();
  double tuned_ms = 0;
  planBlocks(p);
  // Kernels, step by step, on the reference run's values (which also give the leaves' layouts).
  for (std::size_t k = 0; k < p.steps.size(); ++k) {
    Step& step = p.steps[k];
    if (step.kind == Step::Kind::Opaque) {
      // An unfusable op with a kernel family (reductions, softmax, where, cast ...) gets its own
      // kernel as at O1; without one (or when it cannot be compiled) it runs the reference kernel.
      const ROp& op = p.ops[static_cast<std::size_t>(step.op)];
      const KernelFamily* family = familyFor(op.op);
      if (family == nullptr) continue;
      auto inferred = inferSpec(op.op, *op.attrs, records[static_cast<std::size_t>(step.op)], compiles);
      if (!inferred || !family->supports(inferred->spec).isOk()) continue;
      auto kernel = compileKernel(engine, *family, inferred->spec);
      if (!kernel) continue;
      step.guard = guardFor(inferred->spec);
      step.kernel = std::move(*kernel);
      continue;
    }
    SVM_ASSIGN_OR_RETURN(std::vector<Value> leaves, stepLeaves(p, step, reference));
    std::vector<const Value*> pointers;
    for (const Value& v : leaves) pointers.push_back(&v);
    KernelSpec spec;
    const KernelFamily* family = nullptr;
    if (step.kind != Step::Kind::MatMul) {
      FusedProgram& program = *step.program;
      for (std::size_t l = 0; l < leaves.size(); ++l) {
        const Tensor& t = leaves[l].tensor();
        const std::int64_t inner = t.rank() == 0 ? 1 : t.stride(t.rank() - 1);
        program.leaf_inner[l] = inner == 0 || inner == 1 ? static_cast<int>(inner) : -1;
        OperandSpec operand;
        operand.dtype = t.dtype();
        operand.rank = t.rank();
        operand.contiguous = false;
        spec.inputs.push_back(operand);
      }
      const int shaped_by = step.kind == Step::Kind::Reduce ? step.source : step.outputs[0];
      bakeStaticDims(program, tokenOf(function, p, shaped_by), p.values[static_cast<std::size_t>(shaped_by)].shape);
      spec.op = OpId::Identity;
      spec.fused = step.program;
      family = fusedFamily();
    } else {
      SVM_ASSIGN_OR_RETURN(spec, matmulStepSpec(p, step, leaves, records, compiles));
      family = familyFor(OpId::MatMul);
      step.guard = guardFor(spec);
    }
    SVM_RETURN_IF_ERROR(family->supports(spec).withContext(fmt::format("step {} of the region", k)));
    const Clock::time_point tune_start = Clock::now();
    spec.params = tuneKernel(tuner, engine, *family, spec, pointers, tuning);
    tuned_ms += since(tune_start);
    SVM_ASSIGN_OR_RETURN(step.kernel, compileKernel(engine, *family, spec));
    if (step.stat) {
      // A statistic is no register's value: the reference run gets it from the program's own
      // reference semantics, for the steps after it.
      std::vector<Value> stat(step.outputs.size());
      SVM_RETURN_IF_ERROR(family->reference(spec, pointers, stat));
      for (std::size_t o = 0; o < stat.size(); ++o) reference.setReal(step.outputs[o], std::move(stat[o]));
    }
  }

  times->codegen_ms = since(phase) - tuned_ms;
  phase = Clock::now();
  // Validation: the compiled region on the same inputs, outputs NaN-poisoned, against the
  // reference run's values of every register the range writes back.
  {
    Eval eval(p, true);
    for (std::size_t i = 0; i < p.externals.size(); ++i) eval.setReal(p.externals[i], inputs[i]);
    SVM_RETURN_IF_ERROR(eval.runAll(false).withContext("validation run"));
    std::vector<Value> expected, actual;
    for (const auto& [reg, v] : p.writeback) {
      if (!reference.realValue(v).isTensor()) continue;
      expected.push_back(reference.realValue(v));
      SVM_ASSIGN_OR_RETURN(const Value* got, eval.real(v));
      actual.push_back(*got);
    }
    const Comparison comparison = compareOutputs(expected, actual);
    if (!comparison.ok) {
      return makeError(ErrorCode::JitError, "fused region disagrees with the reference: {}", comparison.reason);
    }
  }
  // The step kernels' packings of the planning inputs (random weights) are of no use later.
  for (Step& step : p.steps) {
    if (step.kernel) step.kernel->packed.clear();
  }
  times->validate_ms = since(phase);
  return region;
}

}  // namespace shapevm::jit
