// SPDX-License-Identifier: Apache-2.0
// The region planner: a fused range's SSA graph, its op classes, and the steps and fused programs
// that compute it (region_plan.h). Views and broadcasts become leaf index maps, elementwise ops
// nodes of fused programs, matmuls steps with epilogues; a value is materialized only where a
// matmul, an opaque op or a live register needs it.
#include "jit/region_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "jit/conv_family.h"

namespace shapevm::jit {

namespace {

// Op classes come from the schema (ops.def's jit column): `view` ops become leaf index maps,
// `fuse` ops fused-program nodes, `freduce` ops fused reductions, `norm` ops statistics.
const JitSupport& jitOf(OpId op) {
  return OpRegistry::global().schema(op).jit;
}

bool isViewOp(OpId op) {
  return jitOf(op).view;
}

bool isFloat16or32(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16;
}

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
      if ((isFusableElementwise(op.op) || op.op == OpId::AddN) && tensors && same_float && op.out.size() == 1 &&
          arity_ok) {
        op.cls = OpClass::Elementwise;
      } else if (isViewOp(op.op) && tensors && !op.in.empty()) {
        op.cls = OpClass::View;
      } else if (op.op == OpId::Reshape && op.in.size() == 2 && op.in[0] >= 0 && op.in[1] >= 0 &&
                 p_.values[static_cast<std::size_t>(op.in[0])].tensor &&
                 !p_.values[static_cast<std::size_t>(op.in[1])].tensor) {
        op.cls = OpClass::View;  // its target shape is a tuple register read at entry
      } else if (op.op == OpId::MatMul && tensors && same_float && op.in.size() == 2) {
        op.cls = OpClass::MatMul;
      } else if (op.op == OpId::Conv && tensors && same_float && op.out.size() == 1 &&
                 (convCompiles(op, {EpilogueStep{OpId::Relu, -1, false}}, {}) || convCompiles(op, {}, {}))) {
        // A conv kernel that takes an epilogue (dense, pointwise): a step as a matmul's. A depthwise
        // one (no epilogue) too: a matmul step's spec leaves N/H/W open (openConvExtents), where an
        // opaque step's kernel would serve only the first image's exact shape.
        op.cls = OpClass::MatMul;
      } else if (tensors && same_float && op.out.size() == 1 && op.in[0] >= 0 &&
                 (op.reduce_axes = trailingAxes(op)) > 0) {
        op.cls = jitOf(op.op).fused_reduce ? OpClass::Reduce : OpClass::Norm;
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
    const JitSupport& jit = jitOf(op.op);
    if (jit.fused_reduce) {  // attributes: axes (empty = all), keepdims
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
    if (!jit.norm) return 0;
    if (op.op == OpId::LayerNorm) {  // over axes [axis, rank); attributes: axis, eps
      if (attrs.size() < 2 || op.in.size() > 3) return 0;
      const std::int64_t axis = attrs[0].i < 0 ? attrs[0].i + rank : attrs[0].i;
      return axis >= 0 && axis < rank ? static_cast<int>(rank - axis) : 0;
    }
    // softmax and log_softmax (planNorm decomposes exactly these three; op_schema_jit_test
    // holds the `norm` column to them): over the last axis only.
    if (attrs.empty() || op.in.size() != 1) return 0;
    return attrs[0].i == -1 || attrs[0].i == rank - 1 ? 1 : 0;
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
        static constexpr std::pair<OpId, FusedProgram::Reduce> kReduce[] = {{OpId::Sum, FusedProgram::Reduce::Sum},
                                                                            {OpId::Mean, FusedProgram::Reduce::Mean},
                                                                            {OpId::Max, FusedProgram::Reduce::Max},
                                                                            {OpId::Min, FusedProgram::Reduce::Min}};
        Step step;
        step.kind = Step::Kind::Reduce;
        step.op = static_cast<int>(i);
        step.source = op.in[0];
        step.reduce = std::find_if(std::begin(kReduce), std::end(kReduce), [&](const auto& e) {
                        return e.first == op.op;
                      })->second;
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
      const RValue& first =
          p_.values[static_cast<std::size_t>(step.kind == Step::Kind::Reduce ? step.source : step.outputs[0])];
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
          ref = step.transform == OpId::Mul ? addNode(OpId::Mul, centered, centered, false)
                                            : addNode(step.transform, centered, -1, false);
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
      return makeError(ErrorCode::Unsupported, "value of {} at PC=0x{:02X} is needed before it exists", opIdent(op.op),
                       op.pc);
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
  Status materializeIfNormalized(int v) { return computesNorm(v) ? requireReal(v) : Status::ok(); }

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

  // Whether the conv family compiles conv `op` with `epilogue`, whose operands are the values
  // `extras` (the planning run's dtypes and shapes).
  bool convCompiles(const ROp& op, const std::vector<EpilogueStep>& epilogue, const std::vector<int>& extras) const {
    std::vector<ConvOperand> operands;
    for (const std::vector<int>* values : {&op.in, &extras}) {
      for (int v : *values) {
        const RValue& value = p_.values[static_cast<std::size_t>(v)];
        operands.push_back(ConvOperand{value.dtype, value.shape});
      }
    }
    return convStepSupported(*op.attrs, operands, epilogue);
  }

  // A matmul step, or a conv's (OpClass::MatMul too): the op's inputs, then its elementwise
  // consumers as an epilogue while each reads only values that exist already.
  Status planMatMul(int index) {
    ROp& mm = p_.ops[static_cast<std::size_t>(index)];
    Step step;
    step.kind = Step::Kind::MatMul;
    step.op = index;
    for (int in : mm.in) {
      SVM_RETURN_IF_ERROR(requireReal(in));
      step.leaves.push_back(Leaf{in, {}});
    }
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
      std::vector<int> others;  // the steps' operands, leaves after the step's own
      bool absorbable = true;
      if (e.op == OpId::AddN) {
        // current + the other terms, each real already (float addition in another order: within
        // validation's tolerance, not bit-identical to the reference's left fold).
        for (std::size_t k = 0; k < e.in.size(); ++k) {
          if (static_cast<int>(k) == position) continue;
          const int other = e.in[k];
          absorbable = absorbable && epilogueOperand(other, current);
          steps.push_back(EpilogueStep{OpId::Add, static_cast<int>(step.leaves.size() + steps.size()), false});
          others.push_back(other);
        }
      } else if (e.in.size() == 2) {
        const int other = e.in[static_cast<std::size_t>(1 - position)];
        absorbable = epilogueOperand(other, current);
        steps.push_back(EpilogueStep{e.op, static_cast<int>(step.leaves.size()), position == 1});
        others.push_back(other);
      } else {
        steps.push_back(EpilogueStep{e.op, -1, false});
      }
      if (absorbable && mm.op == OpId::Conv) {
        std::vector<EpilogueStep> epilogue = step.epilogue;
        epilogue.insert(epilogue.end(), steps.begin(), steps.end());
        std::vector<int> extras;
        for (std::size_t l = mm.in.size(); l < step.leaves.size(); ++l) extras.push_back(step.leaves[l].base);
        extras.insert(extras.end(), others.begin(), others.end());
        absorbable = convCompiles(mm, epilogue, extras);
      }
      if (!absorbable) break;
      for (int other : others) step.leaves.push_back(Leaf{other, {}});
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

}  // namespace

void buildRegionGraph(RegionPlan& plan, const Function& function, const FusionRange& range, const Liveness& liveness) {
  Planner(plan, function, range, liveness).buildGraph();
}

Status planRegionSteps(RegionPlan& plan, const Function& function, const FusionRange& range, const Liveness& liveness) {
  Planner planner(plan, function, range, liveness);
  planner.classify();
  SVM_RETURN_IF_ERROR(planner.plan());
  return planner.buildPrograms();
}

}  // namespace shapevm::jit
