// SPDX-License-Identifier: Apache-2.0
// O2 region fusion: planning, compiling, validating and running fused ranges (see region.h).
#include "jit/region.h"

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

// Elementwise: a fused-kernel node. View: a leaf's index map. MatMul: a step with an epilogue.
// Reduce: sum/mean/max/min over trailing axes, a reduction step fused with its producers. Norm:
// softmax/log_softmax/layer_norm over trailing axes, decomposed into statistic reductions and
// elementwise nodes. Opaque: a step of its own.
enum class OpClass : std::uint8_t { Elementwise, View, MatMul, Reduce, Norm, Opaque };

bool isViewOp(OpId op) {
  return op == OpId::Transpose || op == OpId::Squeeze || op == OpId::Unsqueeze || op == OpId::Split || op == OpId::Slice ||
         op == OpId::Reshape;
}

bool isFloat16or32(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16;
}

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

bool scalarBinaryOp(Opcode op) { return op >= Opcode::Add && op <= Opcode::Or; }
bool scalarUnaryOp(Opcode op) { return op >= Opcode::Neg && op <= Opcode::ToBool; }

// Instructions a range replays at entry (shape arithmetic: a reshape's target shape).
bool preludeOp(Opcode op) {
  return op == Opcode::LoadConst || op == Opcode::TuplePack || op == Opcode::DimOf || scalarBinaryOp(op) || scalarUnaryOp(op);
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

// ---- the plan ----

struct RValue {
  int reg = -1;  // External: the register read at the range's entry
  int op = -1;   // else: the producing op (index into RegionPlan::ops) and its output number
  int out = 0;
  DType dtype = DType::Float32;
  Shape shape;   // as observed in the planning run (the reference on random inputs)
  std::int64_t inner_stride = 1;  // the observed innermost stride (1 when rank 0 or that dim is 1)
  bool tensor = true;
};

struct ROp {
  int site = 0;
  int pc = 0;
  OpId op = OpId::Identity;
  const std::vector<AttrValue>* attrs = nullptr;
  std::vector<int> in;   // value ids (-1 = omitted input)
  std::vector<int> out;  // value ids
  OpClass cls = OpClass::Opaque;
  int absorbed_by = -1;  // a matmul step whose epilogue computes this op
  int reduce_axes = 0;   // Reduce/Norm: the trailing axes it works over
  std::vector<int> stats;  // Norm: its statistics (max and sum of exp, or mean and variance)
  int kept = -1;           // Norm: exp(x - max) stored by softmax's sum step (Planner::keepsExp), -1 none
};

struct ChainItem {
  bool expand = false;  // true: broadcast to the shape of `value`; false: view op `op`, output `out`
  int op = -1;
  int out = 0;
  int value = -1;
  bool operator<(const ChainItem& o) const {
    return std::tie(expand, op, out, value) < std::tie(o.expand, o.op, o.out, o.value);
  }
  bool operator==(const ChainItem&) const = default;
};

struct Leaf {
  int base = -1;
  std::vector<ChainItem> chain;  // applied in order to the base value
};

struct Step {
  enum class Kind : std::uint8_t { Fused, MatMul, Reduce, Opaque };
  Kind kind = Kind::Fused;
  int op = -1;                  // MatMul/Opaque: the op
  std::vector<Leaf> leaves;     // Fused: the kernel's leaves; MatMul: A, B, epilogue operands
  // Values this step makes real: the kernel's outputs in order, then (Fused) those its program
  // stores in place over a leaf (FusedProgram::in_place, in order; the leaf's buffer becomes the
  // value), and (a statistic's Reduce) the per-element values it keeps after the statistic.
  std::vector<int> outputs;
  std::vector<EpilogueStep> epilogue;
  std::vector<int> absorbed;    // MatMul: the epilogue's ops
  std::unique_ptr<CompiledKernel> kernel;
  Guard guard;                  // MatMul: the kernel's guard on A, B and the extras
  std::shared_ptr<FusedProgram> program;
  // Reduce: the reduction of `source` (or, with `center`, of transform(source - center)).
  int source = -1;
  int center = -1;
  OpId transform = OpId::Identity;  // Exp (softmax's sum) or Mul (squares: layer_norm's variance)
  FusedProgram::Reduce reduce = FusedProgram::Reduce::None;
  int reduce_axes = 0;
  bool keepdims = true;
  bool stat = false;  // its output is a statistic of a decomposed normalization (not a register value)
  mutable std::vector<std::vector<Value>> pool;  // per output: reusable buffers (two, alternating)
};

// How many of a step's outputs its kernel stores into buffers of their own (the rest are stored
// in place over leaves).
std::size_t kernelOutputs(const Step& step) {
  return step.outputs.size() - (step.program ? step.program->in_place.size() : 0);
}

// A prelude instruction replayed at entry: LoadConst (`constant`), TuplePack of `items`, DimOf
// (items[0], axis) or a scalar op of items (the interpreter's scalar semantics).
struct PreludeOp {
  Opcode op = Opcode::Nop;
  int dst = 0;
  Value constant;
  std::vector<int> items;
  int axis = 0;
};

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

// Steps run together row block by row block (RegionRowBlockKb): `members` in order, each a fused
// kernel or reduction, each later one reading an earlier member's output; `hoisted` are steps
// between them that read no member's output and run first. A block of one member is a plain step.
// A matmul never joins one: measured on the reference cell, running its rows in blocks (its
// packed B streamed again for every block) cost more than the gate kernel gained from reading gx
// in cache (0.72 -> 0.83 ms at seq 10), since that kernel is bound by its sigmoid/tanh math.
struct StepBlock {
  std::vector<int> hoisted;
  std::vector<int> members;
};

struct RegionPlan {
  std::vector<PreludeOp> prelude;
  std::vector<RValue> values;
  std::vector<ROp> ops;
  std::vector<Step> steps;
  std::vector<StepBlock> blocks;  // every step once, in an order that respects their dataflow
  std::vector<int> producer;                   // per value: the step making it real, -1 none
  std::vector<std::pair<int, int>> writeback;  // (register, value) for registers live after the range
  std::vector<int> externals;                  // value ids read from registers at entry
  int fused_ops = 0;
};

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
    if (op.cls != OpClass::Elementwise && op.cls != OpClass::Norm) {
      return makeError(ErrorCode::Internal, "region value {} has no shape yet", v);
    }
    Shape shape;
    bool first = true;
    for (int in : op.in) {
      if (in < 0) continue;
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
    } else if (step.kind == Step::Kind::Fused) {
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
      if (step.kind != Step::Kind::MatMul) {
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
      SVM_RETURN_IF_ERROR(runBlock(plan_.blocks[b], pooled).withContext(fmt::format("region block {}", b)));
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

// ---- planning ----

class Planner {
 public:
  Planner(RegionPlan& plan, const Function& function, const FusionRange& range, const Liveness& liveness)
      : p_(plan), function_(function), range_(range), liveness_(liveness) {}

  // SSA values and ops for the range; externals get the shapes the reference run will fill in.
  void buildGraph() {
    std::map<int, int> current;  // register -> value
    auto lookup = [&](int reg) {
      auto it = current.find(reg);
      if (it != current.end()) return it->second;
      const int v = static_cast<int>(p_.values.size());
      RValue value;
      value.reg = reg;
      p_.values.push_back(value);
      p_.externals.push_back(v);
      current[reg] = v;
      return v;
    };
    std::vector<int> written;
    for (int pc = range_.start_pc; pc < range_.resume_pc; ++pc) {
      const Instruction& in = function_.code[static_cast<std::size_t>(pc)];
      if (preludeOp(in.op)) continue;  // the prelude: registers at entry
      if (in.op == Opcode::Move) {
        current[in.a] = lookup(in.b);
        written.push_back(in.a);
        continue;
      }
      const OpSite& site = function_.op_sites[static_cast<std::size_t>(in.a)];
      ROp op;
      op.site = in.a;
      op.pc = pc;
      op.op = site.op;
      op.attrs = &site.attrs;
      for (std::int32_t r : site.inputs) op.in.push_back(r < 0 ? -1 : lookup(r));
      const int index = static_cast<int>(p_.ops.size());
      for (std::size_t o = 0; o < site.outputs.size(); ++o) {
        const int v = static_cast<int>(p_.values.size());
        RValue value;
        value.op = index;
        value.out = static_cast<int>(o);
        p_.values.push_back(value);
        op.out.push_back(v);
        current[site.outputs[o]] = v;
        written.push_back(site.outputs[o]);
      }
      p_.ops.push_back(std::move(op));
    }
    std::sort(written.begin(), written.end());
    written.erase(std::unique(written.begin(), written.end()), written.end());
    for (int reg : written) {
      if (liveness_.liveAt(range_.resume_pc, reg)) p_.writeback.emplace_back(reg, current[reg]);
    }
  }

  void classify() {
    for (ROp& op : p_.ops) {
      bool tensors = true;
      bool same_float = true;
      const DType dtype = p_.values[static_cast<std::size_t>(op.out[0])].dtype;
      for (std::size_t k = 0; k < op.in.size(); ++k) {
        const int in = op.in[k];
        if (in < 0) {
          tensors = tensors && op.op == OpId::LayerNorm && k > 0;  // layer_norm's weight and bias are optional
          continue;
        }
        const RValue& v = p_.values[static_cast<std::size_t>(in)];
        tensors = tensors && v.tensor;
        same_float = same_float && v.tensor && v.dtype == dtype;
      }
      same_float = same_float && isFloat16or32(dtype);
      const bool arity_ok = op.op == OpId::AddN ? op.in.size() >= 2 : op.in.size() <= 2;
      if ((isFusableElementwise(op.op) || op.op == OpId::AddN) && tensors && same_float && op.out.size() == 1 && arity_ok) {
        op.cls = OpClass::Elementwise;
      } else if (isViewOp(op.op) && tensors && !op.in.empty()) {
        op.cls = OpClass::View;
      } else if (op.op == OpId::Reshape && op.in.size() == 2 && op.in[0] >= 0 && op.in[1] >= 0 &&
                 p_.values[static_cast<std::size_t>(op.in[0])].tensor && !p_.values[static_cast<std::size_t>(op.in[1])].tensor) {
        op.cls = OpClass::View;  // its target shape is a tuple register read at entry
      } else if (op.op == OpId::MatMul && tensors && same_float && op.in.size() == 2) {
        op.cls = OpClass::MatMul;
      } else if (tensors && same_float && op.out.size() == 1 && op.in[0] >= 0 && (op.reduce_axes = trailingAxes(op)) > 0) {
        const bool reduction = op.op == OpId::Sum || op.op == OpId::Mean || op.op == OpId::Max || op.op == OpId::Min;
        op.cls = reduction ? OpClass::Reduce : OpClass::Norm;
      } else {
        op.cls = OpClass::Opaque;
      }
    }
    p_.producer.assign(p_.values.size(), -1);
  }

  // Reductions and normalizations whose axes are the input's trailing ones (the fused reduction's
  // loop shape): how many; 0 for any other op or axis set.
  int trailingAxes(const ROp& op) const {
    const int rank = p_.values[static_cast<std::size_t>(op.in[0])].shape.rank();
    if (rank == 0) return 0;
    const std::vector<AttrValue>& attrs = *op.attrs;
    switch (op.op) {
      case OpId::Sum: case OpId::Mean: case OpId::Max: case OpId::Min: {
        if (attrs.size() < 2 || op.in.size() != 1) return 0;
        std::vector<bool> reduced(static_cast<std::size_t>(rank), attrs[0].ints.empty());
        for (std::int64_t axis : attrs[0].ints) {
          const std::int64_t a = axis < 0 ? axis + rank : axis;
          if (a < 0 || a >= rank || reduced[static_cast<std::size_t>(a)]) return 0;
          reduced[static_cast<std::size_t>(a)] = true;
        }
        int trailing = 0;
        while (trailing < rank && reduced[static_cast<std::size_t>(rank - 1 - trailing)]) ++trailing;
        const auto count = std::count(reduced.begin(), reduced.end(), true);
        return count == trailing ? trailing : 0;
      }
      case OpId::Softmax: case OpId::LogSoftmax:
        if (attrs.empty() || op.in.size() != 1) return 0;
        return attrs[0].i == -1 || attrs[0].i == rank - 1 ? 1 : 0;
      case OpId::LayerNorm: {
        if (attrs.size() < 2 || op.in.size() > 3) return 0;
        const std::int64_t axis = attrs[0].i < 0 ? attrs[0].i + rank : attrs[0].i;
        return axis >= 0 && axis < rank ? static_cast<int>(rank - axis) : 0;
      }
      default:
        return 0;
    }
  }

  Status plan() {
    for (std::size_t i = 0; i < p_.ops.size(); ++i) {
      ROp& op = p_.ops[i];
      if (op.absorbed_by >= 0) continue;
      if (op.cls == OpClass::MatMul) {
        SVM_RETURN_IF_ERROR(planMatMul(static_cast<int>(i)));
      } else if (op.cls == OpClass::Norm) {
        SVM_RETURN_IF_ERROR(materializeIfNormalized(op.in[0]));
        planNorm(op);
      } else if (op.cls == OpClass::Reduce && !isReal(op.in[0]) && !computesNorm(op.in[0])) {
        // A reduction of a value no step materializes: the producers are computed in its loop.
        static constexpr std::pair<OpId, FusedProgram::Reduce> kReduce[] = {
            {OpId::Sum, FusedProgram::Reduce::Sum}, {OpId::Mean, FusedProgram::Reduce::Mean},
            {OpId::Max, FusedProgram::Reduce::Max}, {OpId::Min, FusedProgram::Reduce::Min}};
        Step step;
        step.kind = Step::Kind::Reduce;
        step.op = static_cast<int>(i);
        step.source = op.in[0];
        step.reduce = std::find_if(std::begin(kReduce), std::end(kReduce), [&](const auto& e) { return e.first == op.op; })->second;
        step.reduce_axes = op.reduce_axes;
        step.keepdims = (*op.attrs)[1].i != 0;
        step.outputs = op.out;
        addStep(std::move(step));
      } else if (op.cls == OpClass::Opaque || op.cls == OpClass::Reduce) {
        // An opaque op, or a reduction of a real tensor (or of a normalization's output, which is
        // materialized first): a step of its own, running its own kernel.
        for (int in : op.in) {
          if (in >= 0) SVM_RETURN_IF_ERROR(requireReal(in));
        }
        Step step;
        step.kind = Step::Kind::Opaque;
        step.op = static_cast<int>(i);
        step.outputs = op.out;
        addStep(std::move(step));
      }
    }
    for (const auto& [reg, v] : p_.writeback) SVM_RETURN_IF_ERROR(requireReal(v));
    return Status::ok();
  }

  // The fused steps' programs (after every step and output is known).
  Status buildPrograms() {
    for (std::size_t k = 0; k < p_.steps.size(); ++k) {
      Step& step = p_.steps[k];
      if (step.kind != Step::Kind::Fused && step.kind != Step::Kind::Reduce) continue;
      step_ = static_cast<int>(k);
      memo_.clear();
      leaf_index_.clear();
      auto program = std::make_shared<FusedProgram>();
      program_ = program.get();
      leaves_ = &step.leaves;
      const RValue& first = p_.values[static_cast<std::size_t>(step.kind == Step::Kind::Reduce ? step.source : step.outputs[0])];
      program->dtype = first.dtype;
      program->rank = first.shape.rank();
      if (step.kind == Step::Kind::Reduce) {
        program->reduce = step.reduce;
        program->reduce_axes = step.reduce_axes;
        program->keepdims = step.keepdims;
        program->out_dtype = p_.values[static_cast<std::size_t>(step.outputs[0])].dtype;
        SVM_ASSIGN_OR_RETURN(int ref, build(step.source, {}));
        if (step.center >= 0) {
          SVM_ASSIGN_OR_RETURN(int center, build(step.center, {ChainItem{true, -1, 0, step.source}}));
          const int centered = addNode(OpId::Sub, ref, center, false);
          ref = step.transform == OpId::Mul ? addNode(OpId::Mul, centered, centered, false) : addNode(step.transform, centered, -1, false);
        }
        program->outputs.push_back(ref);
        // A statistic's further outputs keep its transformed element (softmax's exp(x - max)).
        for (std::size_t o = 1; o < step.outputs.size(); ++o) program->outputs.push_back(ref);
        p_.fused_ops += step.stat ? 0 : 1;
      } else {
        std::vector<int> own, in_place;
        for (int out : step.outputs) {
          SVM_ASSIGN_OR_RETURN(int ref, build(out, {}));
          if (ref < 0) return makeError(ErrorCode::Unsupported, "a fused output that is only a view");
          const int kept = keptBy(out);
          if (kept < 0) {
            program->outputs.push_back(ref);
            own.push_back(out);
            continue;
          }
          // Stored over the kept buffer it rescales (its only reader: keepsExp).
          auto leaf = leaf_index_.find(std::make_pair(kept, std::vector<ChainItem>{}));
          if (leaf == leaf_index_.end()) return makeError(ErrorCode::Internal, "softmax output without its kept exp");
          program->in_place.emplace_back(leaf->second, ref);
          in_place.push_back(out);
        }
        own.insert(own.end(), in_place.begin(), in_place.end());
        step.outputs = std::move(own);
      }
      step.program = std::move(program);
      p_.fused_ops += static_cast<int>(step.program->nodes.size());
    }
    return Status::ok();
  }

 private:
  bool isReal(int v) const {
    const RValue& value = p_.values[static_cast<std::size_t>(v)];
    if (value.op < 0 || p_.producer[static_cast<std::size_t>(v)] >= 0) return true;
    const ROp& op = p_.ops[static_cast<std::size_t>(value.op)];
    return op.cls == OpClass::View && op.in[0] >= 0 && isReal(op.in[0]);
  }

  Status requireReal(int v) {
    if (isReal(v)) return Status::ok();
    const RValue& value = p_.values[static_cast<std::size_t>(v)];
    const ROp& op = p_.ops[static_cast<std::size_t>(value.op)];
    if (op.cls == OpClass::View) {
      for (int in : op.in) {
        if (in >= 0) SVM_RETURN_IF_ERROR(requireReal(in));
      }
      return Status::ok();
    }
    if ((op.cls != OpClass::Elementwise && op.cls != OpClass::Norm) || op.absorbed_by >= 0) {
      return makeError(ErrorCode::Unsupported, "value of {} at PC=0x{:02X} is needed before it exists", opIdent(op.op), op.pc);
    }
    // Materialize: join the last step when it is a fused kernel over the same shape.
    if (!p_.steps.empty()) {
      Step& last = p_.steps.back();
      if (last.kind == Step::Kind::Fused && last.outputs.size() < 4 &&
          p_.values[static_cast<std::size_t>(last.outputs[0])].shape == value.shape) {
        last.outputs.push_back(v);
        p_.producer[static_cast<std::size_t>(v)] = static_cast<int>(p_.steps.size()) - 1;
        return Status::ok();
      }
    }
    Step step;
    step.kind = Step::Kind::Fused;
    step.outputs = {v};
    addStep(std::move(step));
    return Status::ok();
  }

  // A reduction's input computed from another normalization's output is materialized first: each
  // pass over an unmaterialized input recomputes it, and the passes of nested normalizations
  // would multiply.
  bool computesNorm(int v) const {
    if (isReal(v)) return false;
    const ROp& op = p_.ops[static_cast<std::size_t>(p_.values[static_cast<std::size_t>(v)].op)];
    if (op.cls == OpClass::Norm) return true;
    return std::any_of(op.in.begin(), op.in.end(), [&](int in) { return in >= 0 && computesNorm(in); });
  }
  Status materializeIfNormalized(int v) {
    return computesNorm(v) ? requireReal(v) : Status::ok();
  }

  // A float32 statistic of `source` over its trailing `axes` (kept as 1s), made by a reduction step.
  int addStat(int source, int axes, FusedProgram::Reduce reduce, int center, OpId transform) {
    RValue stat;
    stat.dtype = DType::Float32;
    stat.shape = p_.values[static_cast<std::size_t>(source)].shape;
    for (int d = stat.shape.rank() - axes; d < stat.shape.rank(); ++d) stat.shape[d] = 1;
    const int v = static_cast<int>(p_.values.size());
    p_.values.push_back(stat);
    p_.producer.push_back(-1);
    Step step;
    step.kind = Step::Kind::Reduce;
    step.source = source;
    step.center = center;
    step.transform = transform;
    step.reduce = reduce;
    step.reduce_axes = axes;
    step.keepdims = true;
    step.stat = true;
    step.outputs = {v};
    addStep(std::move(step));
    return v;
  }

  // softmax / log_softmax: max, then the sum of exp(x - max); layer_norm: mean, then the mean of
  // (x - mean)^2 (the reference's two passes). Their nodes are built where the output is read.
  void planNorm(ROp& op) {
    const int x = op.in[0];
    const int axes = op.reduce_axes;
    if (op.op == OpId::LayerNorm) {
      const int mean = addStat(x, axes, FusedProgram::Reduce::Mean, -1, OpId::Identity);
      op.stats = {mean, addStat(x, axes, FusedProgram::Reduce::Mean, mean, OpId::Mul)};
    } else {
      const int max = addStat(x, axes, FusedProgram::Reduce::Max, -1, OpId::Identity);
      op.stats = {max, addStat(x, axes, FusedProgram::Reduce::Sum, max, OpId::Exp)};
      if (keepsExp(op)) op.kept = keepElement(op.stats[1]);
    }
  }

  // Float32 softmax computes exp once, as the O1 kernel does: its sum step also stores exp(x - max)
  // (float32, dense), and the step materializing the output multiplies that buffer in place by
  // the row's 1 / sum (math-bound otherwise: exp again and a divide per element). Only when that
  // step is the output's only reader of the buffer: the output is live after the range or read
  // only by ops that read it real (matmul, opaque ops, reductions and normalizations of it). An
  // elementwise or view consumer computes the output inside its own kernel, from x and the
  // statistics as before. float16/bfloat16 outputs would round exp: recomputed too.
  bool keepsExp(const ROp& op) const {
    const int y = op.out[0];
    if (op.op != OpId::Softmax || p_.values[static_cast<std::size_t>(y)].dtype != DType::Float32) return false;
    const auto consumers = uses(y);
    if (consumers.empty() && !liveOut(y)) return false;
    return std::all_of(consumers.begin(), consumers.end(), [&](const std::pair<int, int>& use) {
      const OpClass cls = p_.ops[static_cast<std::size_t>(use.first)].cls;
      return cls == OpClass::MatMul || cls == OpClass::Opaque || cls == OpClass::Reduce ||
             (cls == OpClass::Norm && use.second == 0);  // layer_norm's weight and bias are built in its nodes
    });
  }

  // A value of the statistic's source shape, in float32, stored by the statistic's step per element
  // (its transformed element: softmax's exp(x - max)).
  int keepElement(int stat) {
    const int producer = p_.producer[static_cast<std::size_t>(stat)];
    Step& step = p_.steps[static_cast<std::size_t>(producer)];
    RValue kept;
    kept.dtype = DType::Float32;
    kept.shape = p_.values[static_cast<std::size_t>(step.source)].shape;
    const int v = static_cast<int>(p_.values.size());
    p_.values.push_back(kept);
    p_.producer.push_back(producer);
    step.outputs.push_back(v);
    return v;
  }

  // The kept exp a softmax output rescales, -1 when v is no such output.
  int keptBy(int v) const {
    const RValue& value = p_.values[static_cast<std::size_t>(v)];
    return value.op < 0 ? -1 : p_.ops[static_cast<std::size_t>(value.op)].kept;
  }

  void addStep(Step step) {
    const int index = static_cast<int>(p_.steps.size());
    for (int out : step.outputs) p_.producer[static_cast<std::size_t>(out)] = index;
    p_.steps.push_back(std::move(step));
  }

  std::vector<std::pair<int, int>> uses(int v) const {
    std::vector<std::pair<int, int>> out;
    for (std::size_t i = 0; i < p_.ops.size(); ++i) {
      for (std::size_t k = 0; k < p_.ops[i].in.size(); ++k) {
        if (p_.ops[i].in[k] == v) out.emplace_back(static_cast<int>(i), static_cast<int>(k));
      }
    }
    return out;
  }
  // An epilogue operand is read along N with stride 0 or 1 (else the op stays in a fused kernel).
  bool epilogueOperand(int v, int current) const {
    const std::int64_t inner = p_.values[static_cast<std::size_t>(v)].inner_stride;
    return v != current && isReal(v) && (inner == 0 || inner == 1);
  }
  bool liveOut(int v) const {
    return std::any_of(p_.writeback.begin(), p_.writeback.end(), [&](const auto& w) { return w.second == v; });
  }

  Status planMatMul(int index) {
    ROp& mm = p_.ops[static_cast<std::size_t>(index)];
    SVM_RETURN_IF_ERROR(requireReal(mm.in[0]));
    SVM_RETURN_IF_ERROR(requireReal(mm.in[1]));
    Step step;
    step.kind = Step::Kind::MatMul;
    step.op = index;
    step.leaves = {Leaf{mm.in[0], {}}, Leaf{mm.in[1], {}}};
    int current = mm.out[0];
    const int step_index = static_cast<int>(p_.steps.size());
    while (!liveOut(current)) {
      const auto consumers = uses(current);
      if (consumers.size() != 1) break;
      const auto [user, position] = consumers[0];
      ROp& e = p_.ops[static_cast<std::size_t>(user)];
      const RValue& out = p_.values[static_cast<std::size_t>(e.out[0])];
      if (e.cls != OpClass::Elementwise || out.shape != p_.values[static_cast<std::size_t>(current)].shape) break;
      std::vector<EpilogueStep> steps;
      bool absorbable = true;
      if (e.op == OpId::AddN) {
        // current + the other terms, each real already (float addition in another order: within
        // validation's tolerance, not bit-identical to the reference's left fold).
        for (std::size_t k = 0; k < e.in.size(); ++k) {
          if (static_cast<int>(k) == position) continue;
          const int other = e.in[k];
          absorbable = absorbable && epilogueOperand(other, current);
          steps.push_back(EpilogueStep{OpId::Add, static_cast<int>(step.leaves.size() + steps.size()), false});
        }
        if (absorbable) {
          for (std::size_t k = 0; k < e.in.size(); ++k) {
            if (static_cast<int>(k) != position) step.leaves.push_back(Leaf{e.in[k], {}});
          }
        }
      } else if (e.in.size() == 2) {
        const int other = e.in[static_cast<std::size_t>(1 - position)];
        absorbable = epilogueOperand(other, current);
        steps.push_back(EpilogueStep{e.op, static_cast<int>(step.leaves.size()), position == 1});
        if (absorbable) step.leaves.push_back(Leaf{other, {}});
      } else {
        steps.push_back(EpilogueStep{e.op, -1, false});
      }
      if (!absorbable) break;
      step.epilogue.insert(step.epilogue.end(), steps.begin(), steps.end());
      step.absorbed.push_back(user);
      e.absorbed_by = step_index;
      current = e.out[0];
    }
    step.outputs = {current};
    p_.fused_ops += static_cast<int>(step.absorbed.size());
    addStep(std::move(step));
    return Status::ok();
  }

  // Broadcasting twice is broadcasting to the second shape, and a chain's last broadcast is
  // implied by the final one to the iteration shape: dropping both keeps one leaf (and one node)
  // per distinct view instead of one per consumer path.
  static std::vector<ChainItem> normalized(std::vector<ChainItem> chain) {
    std::vector<ChainItem> out;
    for (std::size_t i = 0; i < chain.size(); ++i) {
      if (chain[i].expand && (i + 1 == chain.size() || chain[i + 1].expand)) continue;
      out.push_back(chain[i]);
    }
    return out;
  }

  // Operand ref of value v seen through `chain` inside fused step step_.
  Expected<int> build(int v, std::vector<ChainItem> chain) {
    chain = normalized(std::move(chain));
    auto key = std::make_pair(v, chain);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const RValue& value = p_.values[static_cast<std::size_t>(v)];
    const int producer = p_.producer[static_cast<std::size_t>(v)];
    int ref;
    if (value.op < 0 || (producer >= 0 && producer < step_)) {
      ref = FusedProgram::leafRef(addLeaf(v, chain));
    } else {
      const ROp& op = p_.ops[static_cast<std::size_t>(value.op)];
      if (op.cls == OpClass::View) {
        std::vector<ChainItem> inner{ChainItem{false, value.op, value.out, -1}};
        inner.insert(inner.end(), chain.begin(), chain.end());
        SVM_ASSIGN_OR_RETURN(ref, build(op.in[0], inner));
      } else if (op.cls == OpClass::Elementwise && op.absorbed_by < 0) {
        std::vector<ChainItem> inner{ChainItem{true, -1, 0, v}};
        inner.insert(inner.end(), chain.begin(), chain.end());
        // add_n is a left fold of adds (the reference rounds after every step, as the nodes do).
        FusedProgram::Node node;
        node.op = op.op == OpId::AddN ? OpId::Add : op.op;
        SVM_ASSIGN_OR_RETURN(node.a, build(op.in[0], inner));
        for (std::size_t k = 1; k < op.in.size(); ++k) {
          if (k > 1) {
            program_->nodes.push_back(node);
            node.a = static_cast<int>(program_->nodes.size()) - 1;
          }
          SVM_ASSIGN_OR_RETURN(node.b, build(op.in[k], inner));
        }
        program_->nodes.push_back(node);
        ref = static_cast<int>(program_->nodes.size()) - 1;
      } else if (op.cls == OpClass::Norm) {
        std::vector<ChainItem> inner{ChainItem{true, -1, 0, v}};
        inner.insert(inner.end(), chain.begin(), chain.end());
        SVM_ASSIGN_OR_RETURN(ref, buildNorm(op, inner));
      } else {
        return makeError(ErrorCode::Unsupported, "{} at PC=0x{:02X} is read by a fused kernel before it is computed",
                         opIdent(op.op), op.pc);
      }
    }
    memo_[key] = ref;
    return ref;
  }

  int addNode(OpId op, int a, int b, bool rounded) {
    FusedProgram::Node node;
    node.op = op;
    node.a = a;
    node.b = b;
    node.rounded = rounded;
    program_->nodes.push_back(node);
    return static_cast<int>(program_->nodes.size()) - 1;
  }

  // A normalization's output from its input and statistics (each seen through `chain`): float32
  // math, rounded once at the end as the reference does.
  Expected<int> buildNorm(const ROp& op, const std::vector<ChainItem>& chain) {
    if (op.kept >= 0) {
      // The kept exp(x - max) times the row's reciprocal sum (one divide per row once hoisted;
      // float32 rounding of 1 / sum stays far inside validation's tolerance).
      SVM_ASSIGN_OR_RETURN(int e, build(op.kept, chain));
      SVM_ASSIGN_OR_RETURN(int sum, build(op.stats[1], chain));
      FusedProgram::Node one;
      one.constant = true;
      one.value = 1.0;
      program_->nodes.push_back(one);
      const int scale = addNode(OpId::Div, static_cast<int>(program_->nodes.size()) - 1, sum, false);
      return addNode(OpId::Mul, e, scale, true);
    }
    SVM_ASSIGN_OR_RETURN(int x, build(op.in[0], chain));
    SVM_ASSIGN_OR_RETURN(int first, build(op.stats[0], chain));
    SVM_ASSIGN_OR_RETURN(int second, build(op.stats[1], chain));
    const int centered = addNode(OpId::Sub, x, first, false);
    if (op.op == OpId::Softmax) return addNode(OpId::Div, addNode(OpId::Exp, centered, -1, false), second, true);
    if (op.op == OpId::LogSoftmax) return addNode(OpId::Sub, centered, addNode(OpId::Log, second, -1, false), true);
    FusedProgram::Node eps;
    eps.constant = true;
    eps.value = (*op.attrs)[1].f;
    program_->nodes.push_back(eps);
    const int variance = addNode(OpId::Add, second, static_cast<int>(program_->nodes.size()) - 1, false);
    int y = addNode(OpId::Mul, centered, addNode(OpId::Rsqrt, variance, -1, false), false);
    for (std::size_t k = 1; k < op.in.size(); ++k) {
      if (op.in[k] < 0) continue;
      SVM_ASSIGN_OR_RETURN(int affine, build(op.in[k], chain));
      y = addNode(k == 1 ? OpId::Mul : OpId::Add, y, affine, false);
    }
    program_->nodes[static_cast<std::size_t>(y)].rounded = true;
    return y;
  }

  int addLeaf(int base, const std::vector<ChainItem>& chain) {
    auto key = std::make_pair(base, chain);
    if (auto it = leaf_index_.find(key); it != leaf_index_.end()) return it->second;
    const int index = static_cast<int>(leaves_->size());
    leaves_->push_back(Leaf{base, chain});
    program_->leaf_inner.push_back(-1);
    program_->leaf_dtype.push_back(p_.values[static_cast<std::size_t>(base)].dtype);
    leaf_index_[key] = index;
    return index;
  }

  RegionPlan& p_;
  const Function& function_;
  const FusionRange& range_;
  const Liveness& liveness_;
  int step_ = 0;
  FusedProgram* program_ = nullptr;
  std::vector<Leaf>* leaves_ = nullptr;
  std::map<std::pair<int, std::vector<ChainItem>>, int> memo_;
  std::map<std::pair<int, std::vector<ChainItem>>, int> leaf_index_;
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

KernelParams tuneKernel(Tuner* tuner, JitEngine& engine, const KernelFamily& family, const KernelSpec& spec,
                        std::span<const Value* const> examples, std::vector<TuneOutcome>* outcomes) {
  if (tuner == nullptr || family.searchSpace(spec).empty()) return KernelParams{};
  auto outcome = tuner->tune(engine, family, spec, examples);
  if (!outcome) return KernelParams{};  // a tuner error means default parameters
  if (outcomes != nullptr) outcomes->push_back(*outcome);
  return outcome->params;
}

}  // namespace

Expected<std::unique_ptr<CompiledRegion>> compileRegion(JitEngine& engine, const Module& module, const Function& function,
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
  Planner planner(p, function, range, liveness);
  planner.buildGraph();

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

  planner.classify();
  SVM_RETURN_IF_ERROR(planner.plan());
  SVM_RETURN_IF_ERROR(planner.buildPrograms());
  reference.grow();
  bool worthwhile = false;
  for (const Step& step : p.steps) {
    worthwhile = worthwhile || (step.kind == Step::Kind::MatMul && !step.epilogue.empty()) ||
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
    std::vector<Value> leaves;
    if (step.kind != Step::Kind::MatMul) {
      const int first = step.kind == Step::Kind::Reduce ? step.source : step.outputs[0];
      const Shape iteration = p.values[static_cast<std::size_t>(first)].shape;
      for (const Leaf& leaf : step.leaves) {
        SVM_ASSIGN_OR_RETURN(Value value, reference.leaf(leaf, iteration));
        leaves.push_back(std::move(value));
      }
    } else {
      for (const Leaf& leaf : step.leaves) leaves.push_back(reference.realValue(leaf.base));
    }
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
      const ROp& mm = p.ops[static_cast<std::size_t>(step.op)];
      const std::size_t site_index = static_cast<std::size_t>(&mm - p.ops.data());
      SVM_ASSIGN_OR_RETURN(ShapeInference inferred, inferSpec(OpId::MatMul, *mm.attrs, records[site_index], compiles));
      spec = inferred.spec;
      for (std::size_t e = 2; e < leaves.size(); ++e) {
        const Tensor& t = leaves[e].tensor();
        OperandSpec operand;
        operand.dtype = t.dtype();
        operand.rank = t.rank();
        operand.contiguous = t.isContiguous();
        spec.inputs.push_back(operand);
      }
      spec.epilogue = step.epilogue;
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
