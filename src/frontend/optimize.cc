// SPDX-License-Identifier: Apache-2.0
// IR utilities and the IR-level optimizations: dead-code elimination (whole-function use sets,
// iterated to a fixpoint), merging of consecutive reshapes, register compaction, and emission
// through the bytecode builder, and the reuse of dead registers (linear scan over live ranges)
// for functions with more values than the bytecode's register limit. `identity` op sites are
// anchors: never removed or looked through.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <type_traits>

#include "bytecode/instruction_info.h"
#include "frontend/ir.h"

namespace shapevm::frontend {

namespace {

// The instruction's register lists (bytecode/instruction_info.h): the IR keeps a site's operands
// and a TuplePack/TupleUnpack list inline, in `inputs` (read) and `outputs` (written).
template <class Inst, class F>
void visitIrRegisters(Inst& inst, F&& cb) {
  if (inst.isLabel()) return;
  using T = std::conditional_t<std::is_const_v<Inst>, const std::int32_t, std::int32_t>;
  RegisterLists<T> lists;
  lists.site_inputs = inst.inputs;
  lists.site_outputs = inst.outputs;
  lists.list =
      operandRole(inst.op, 1) == OperandRole::RegListWrite ? std::span<T>(inst.outputs) : std::span<T>(inst.inputs);
  visitRegisters<T>(inst.op, inst.a, inst.b, inst.c, lists, cb);
}

}  // namespace

std::vector<std::int32_t> irDefs(const IrInst& inst) {
  std::vector<std::int32_t> out;
  visitIrRegisters(inst, [&](const std::int32_t& r, bool write) {
    if (write) out.push_back(r);
  });
  return out;
}

std::vector<std::int32_t> irUses(const IrInst& inst) {
  std::vector<std::int32_t> out;
  visitIrRegisters(inst, [&](const std::int32_t& r, bool write) {
    if (!write) out.push_back(r);
  });
  return out;
}

void renameIrRegisters(IrInst& inst, const std::function<std::int32_t(std::int32_t, bool)>& rename) {
  visitIrRegisters(inst, [&](std::int32_t& r, bool write) {
    if (r >= 0) r = rename(r, write);
  });
}

bool irIsRemovable(const IrInst& inst) {
  if (inst.isLabel()) return false;
  switch (inst.op) {
    case Opcode::LoadConst:
    case Opcode::Move:
    case Opcode::ShapeOf:
    case Opcode::DimOf:
    case Opcode::RankOf:
    case Opcode::TuplePack:
    case Opcode::TupleGet:
    case Opcode::TupleLen:
    case Opcode::Nop:
      return true;
    case Opcode::CallOp: return inst.op_name != "identity";
    default: break;
  }
  auto index = static_cast<int>(inst.op);
  // Scalar arithmetic, comparisons and conversions (Add .. ToBool) are pure.
  return index >= static_cast<int>(Opcode::Add) && index <= static_cast<int>(Opcode::ToBool);
}

int eliminateDeadCode(IrFunction& fn) {
  int removed = 0;
  while (true) {
    std::set<std::int32_t> used;
    for (const IrInst& inst : fn.code) {
      for (std::int32_t r : irUses(inst)) used.insert(r);
    }
    std::vector<IrInst> kept;
    kept.reserve(fn.code.size());
    int removed_now = 0;
    for (IrInst& inst : fn.code) {
      bool dead = irIsRemovable(inst);
      if (dead) {
        for (std::int32_t r : irDefs(inst)) dead = dead && !used.count(r);
      }
      // A Move onto itself does nothing.
      if (!dead && inst.op == Opcode::Move && !inst.isLabel() && inst.a == inst.b) dead = true;
      if (dead) {
        ++removed_now;
      } else {
        kept.push_back(std::move(inst));
      }
    }
    fn.code = std::move(kept);
    removed += removed_now;
    if (removed_now == 0) break;
  }
  return removed;
}

int mergeReshapes(IrFunction& fn) {
  int merged = 0;
  bool changed = true;
  while (changed) {
    changed = false;
    std::map<std::int32_t, int> def_count, use_count;
    for (const IrInst& inst : fn.code) {
      for (std::int32_t r : irDefs(inst)) ++def_count[r];
      for (std::int32_t r : irUses(inst)) ++use_count[r];
    }
    for (std::size_t outer = 0; outer < fn.code.size() && !changed; ++outer) {
      IrInst& o = fn.code[outer];
      if (o.isLabel() || o.op != Opcode::CallOp || o.op_name != "reshape") continue;
      std::int32_t mid = o.inputs[0];
      if (def_count[mid] != 1 || use_count[mid] != 1) continue;
      // The inner reshape: defined earlier in the same straight-line block.
      for (std::size_t k = outer; k-- > 0;) {
        const IrInst& in = fn.code[k];
        if (in.isLabel() || in.op == Opcode::Jump || in.op == Opcode::BranchIf || in.op == Opcode::Return) break;
        auto defs = irDefs(in);
        if (std::find(defs.begin(), defs.end(), mid) == defs.end()) continue;
        if (in.op != Opcode::CallOp || in.op_name != "reshape") break;
        std::int32_t source = in.inputs[0];
        bool redefined = false;  // the source must still hold the same value at the outer reshape
        for (std::size_t j = k + 1; j < outer; ++j) {
          auto d = irDefs(fn.code[j]);
          if (std::find(d.begin(), d.end(), source) != d.end()) redefined = true;
        }
        if (redefined) break;
        o.inputs[0] = source;
        if (!o.in_tokens.empty() && !in.in_tokens.empty()) o.in_tokens[0] = in.in_tokens[0];
        fn.code.erase(fn.code.begin() + static_cast<std::ptrdiff_t>(k));
        ++merged;
        changed = true;
        break;
      }
    }
  }
  return merged;
}

void compactRegisters(IrFunction& fn) {
  std::map<std::int32_t, std::int32_t> renumber;
  auto map = [&](std::int32_t& r) {
    if (r < 0) return;
    auto [it, inserted] = renumber.emplace(r, static_cast<std::int32_t>(renumber.size()));
    r = it->second;
  };
  for (IrInst& inst : fn.code) visitIrRegisters(inst, [&](std::int32_t& r, bool) { map(r); });
  fn.num_registers = static_cast<int>(renumber.size());
  std::map<std::int32_t, std::string> names;
  for (const auto& [reg, name] : fn.reg_names) {
    if (auto it = renumber.find(reg); it != renumber.end()) names[it->second] = name;
  }
  fn.reg_names = std::move(names);
}

namespace {

// [start, end]: the IR positions a register must keep its value over.
struct LiveRange {
  std::int32_t start = -1, end = -1;
  bool starts_with_def = false;  // its first position writes it (so a loop around it need not carry it)
};

// The loops of a function as [head, last back edge] position ranges, and per position the
// innermost loop holding it (-1: none). Empty when the ranges do not nest (never from lowering).
struct LoopNest {
  std::vector<std::pair<std::int32_t, std::int32_t>> ranges;
  std::vector<int> parent;     // per loop: the enclosing loop (-1: none)
  std::vector<int> innermost;  // per position
};

std::optional<LoopNest> findLoops(const IrFunction& fn) {
  const auto n = static_cast<std::int32_t>(fn.code.size());
  std::vector<std::int32_t> label_pos(static_cast<std::size_t>(fn.num_labels), -1);
  for (std::int32_t pc = 0; pc < n; ++pc) {
    if (fn.code[static_cast<std::size_t>(pc)].isLabel())
      label_pos[static_cast<std::size_t>(fn.code[static_cast<std::size_t>(pc)].label)] = pc;
  }
  std::map<std::int32_t, std::int32_t> back_edges;  // head -> last back edge
  for (std::int32_t pc = 0; pc < n; ++pc) {
    const IrInst& inst = fn.code[static_cast<std::size_t>(pc)];
    if (inst.isLabel() || (inst.op != Opcode::Jump && inst.op != Opcode::BranchIf)) continue;
    for (int target : {inst.target_true, inst.target_false}) {
      if (target < 0) continue;
      const std::int32_t head = label_pos[static_cast<std::size_t>(target)];
      if (head >= 0 && head <= pc) back_edges[head] = std::max(back_edges[head], pc);
    }
  }
  LoopNest nest;
  nest.innermost.assign(static_cast<std::size_t>(n), -1);
  std::vector<int> open;  // enclosing loops at the sweep position
  for (const auto& [head, tail] : back_edges) {
    while (!open.empty() && nest.ranges[static_cast<std::size_t>(open.back())].second < head) open.pop_back();
    if (!open.empty() && nest.ranges[static_cast<std::size_t>(open.back())].second < tail) return std::nullopt;
    nest.parent.push_back(open.empty() ? -1 : open.back());
    open.push_back(static_cast<int>(nest.ranges.size()));
    nest.ranges.emplace_back(head, tail);
  }
  for (std::size_t loop = 0; loop < nest.ranges.size(); ++loop) {  // outer loops first: inner ones overwrite
    for (std::int32_t pc = nest.ranges[loop].first; pc <= nest.ranges[loop].second; ++pc) {
      nest.innermost[static_cast<std::size_t>(pc)] = static_cast<int>(loop);
    }
  }
  return nest;
}

}  // namespace

bool reuseDeadRegisters(IrFunction& fn) {
  std::optional<LoopNest> loops = findLoops(fn);
  if (!loops) return false;
  std::vector<LiveRange> live(static_cast<std::size_t>(fn.num_registers));
  for (std::size_t pc = 0; pc < fn.code.size(); ++pc) {
    visitIrRegisters(fn.code[pc], [&](const std::int32_t& r, bool write) {
      if (r < 0) return;
      LiveRange& range = live[static_cast<std::size_t>(r)];
      if (range.start < 0) {
        range.start = static_cast<std::int32_t>(pc);
        range.starts_with_def = write;
      }
      range.end = static_cast<std::int32_t>(pc);
    });
  }
  // A value that crosses a loop's boundary, or is read in it before its first write (carried
  // around the back edge), lives through the whole loop. Forward jumps stay inside [start, end].
  for (LiveRange& range : live) {
    if (range.start < 0) continue;
    for (bool changed = true; changed;) {
      changed = false;
      for (std::int32_t point : {range.start, range.end}) {
        for (int loop = loops->innermost[static_cast<std::size_t>(point)]; loop >= 0;
             loop = loops->parent[static_cast<std::size_t>(loop)]) {
          const auto [head, tail] = loops->ranges[static_cast<std::size_t>(loop)];
          const bool inside = range.start >= head && range.end <= tail && range.starts_with_def;
          if (inside || (range.start <= head && range.end >= tail)) continue;
          range.start = std::min(range.start, head);
          range.end = std::max(range.end, tail);
          range.starts_with_def = false;
          changed = true;
        }
      }
    }
  }
  // Linear scan: a register is free again after the last position of its range.
  std::vector<std::int32_t> order;
  for (std::size_t r = 0; r < live.size(); ++r) {
    if (live[r].start >= 0) order.push_back(static_cast<std::int32_t>(r));
  }
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return live[static_cast<std::size_t>(a)].start < live[static_cast<std::size_t>(b)].start;
  });
  std::vector<std::int32_t> assigned(live.size(), -1);
  std::multimap<std::int32_t, std::int32_t> active;  // end -> physical register
  std::vector<std::int32_t> free_regs;
  std::int32_t next_physical = 0;
  for (std::int32_t r : order) {
    const LiveRange& range = live[static_cast<std::size_t>(r)];
    while (!active.empty() && active.begin()->first < range.start) {
      free_regs.push_back(active.begin()->second);
      active.erase(active.begin());
    }
    std::int32_t physical = next_physical;
    if (free_regs.empty()) {
      ++next_physical;
    } else {
      physical = free_regs.back();
      free_regs.pop_back();
    }
    assigned[static_cast<std::size_t>(r)] = physical;
    active.emplace(range.end, physical);
  }
  for (IrInst& inst : fn.code) {
    visitIrRegisters(inst, [&](std::int32_t& r, bool) {
      if (r >= 0) r = assigned[static_cast<std::size_t>(r)];
    });
  }
  fn.num_registers = next_physical;
  return true;
}

namespace {

int constIndex(ModuleBuilder& mb, const IrConst& c) {
  switch (c.kind) {
    case ConstKind::Int: return mb.constInt(c.i);
    case ConstKind::Float: return mb.constFloat(c.f);
    case ConstKind::Bool: return mb.constBool(c.b);
    case ConstKind::String: return mb.constString(c.text);
    case ConstKind::Ints: return mb.constInts(c.ints);
    default: return mb.constNone();
  }
}

}  // namespace

Expected<Module> emitModule(const std::vector<IrFunction>& functions, const std::string& module_name,
                            const std::string& source_file) {
  ModuleBuilder mb(module_name);
  mb.setSourceFile(source_file);
  for (const IrFunction& fn : functions) {
    FunctionBuilder& fb = mb.addFunction(fn.name);
    for (const IrParam& p : fn.params) fb.addParam(p.name, p.kind, p.kind == ValueKind::Tensor ? p.token : TensorDescriptor::notTensor());
    for (std::size_t i = 0; i < fn.dim_names.size(); ++i) fb.declareDim(static_cast<int>(i), fn.dim_names[i]);
    fb.setOutputs(fn.num_outputs);
    fb.setRegisters(std::max(fn.num_registers, 1));
    fb.setLoops(fn.num_loops);
    std::vector<Label> labels;
    for (int i = 0; i < fn.num_labels; ++i) labels.push_back(fb.newLabel());
    for (const IrInst& inst : fn.code) {
      if (inst.isLabel()) {
        SVM_RETURN_IF_ERROR(fb.bind(labels[static_cast<std::size_t>(inst.label)]));
        continue;
      }
      fb.setLoc(inst.loc);
      switch (inst.op) {
        case Opcode::LoadConst: fb.emit(Opcode::LoadConst, inst.a, constIndex(mb, inst.constant)); break;
        case Opcode::Assert: fb.emit(Opcode::Assert, inst.a, mb.constString(inst.constant.text)); break;
        case Opcode::Jump: fb.emitJump(labels[static_cast<std::size_t>(inst.target_true)]); break;
        case Opcode::BranchIf:
          fb.emitBranchIf(inst.a, labels[static_cast<std::size_t>(inst.target_true)],
                          labels[static_cast<std::size_t>(inst.target_false)]);
          break;
        case Opcode::CallOp: {
          auto pc = fb.emitCallOp(inst.op_name, inst.inputs, inst.outputs, inst.attrs, inst.in_tokens, inst.out_tokens);
          if (!pc) return std::move(pc).status().withContext(fmt::format("function '{}', line {}", fn.name, inst.loc.line));
          break;
        }
        case Opcode::Call: fb.emitCall(inst.op_name, inst.inputs, inst.outputs); break;
        case Opcode::TuplePack: fb.emitTuplePack(inst.a, inst.inputs); break;
        case Opcode::TupleUnpack: fb.emitTupleUnpack(inst.a, inst.outputs); break;
        default: fb.emit(inst.op, inst.a, inst.b, inst.c); break;
      }
    }
  }
  SVM_ASSIGN_OR_RETURN(Module module, mb.finish());
  for (std::size_t f = 0; f < functions.size() && f < module.functions.size(); ++f) {
    Function& out = module.functions[f];
    out.inlined_functions = functions[f].inlined_functions;
    for (const auto& [reg, name] : functions[f].reg_names) {
      if (reg < 0 || reg >= out.num_registers) continue;
      out.register_names.resize(static_cast<std::size_t>(out.num_registers));
      out.register_names[static_cast<std::size_t>(reg)] = name;
    }
  }
  return module;
}

}  // namespace shapevm::frontend
