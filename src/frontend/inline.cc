// SPDX-License-Identifier: Apache-2.0
// Inlining of small user functions and methods: a Call whose callee is already lowered, small
// and not recursive is replaced by the callee's code, so the caller's bytecode holds the
// callee's ops and the JIT's regions (which end at a call) see them together with the caller's.
// The callee's parameter loads become register renames (or a Move/conversion), its output
// stores become Moves into the call's result registers, a Return that is not its last
// instruction a Jump past the inlined code. Registers, labels and loop ids are renumbered
// after the caller's; the callee's dynamic dims are replaced by the dims of the arguments that
// bind them. Source locations stay the callee's, so errors, the debugger's line table and
// traces name the line the user wrote, and each names the function it came from
// (SourceLoc::inlined, Function::inlined_functions): errors name the callee, as before
// inlining. A call stays a call when the callee's parameter checks (kind, shape token, dynamic
// dims agreeing across parameters) are not proven by what lowering knows of the arguments:
// those checks run only at a real call.
#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "bytecode/verifier.h"
#include "frontend/ir.h"

namespace shapevm::frontend {
namespace {

// How one argument reaches the callee's parameter register.
enum class Entry : std::uint8_t { Same, ToFloat, ToInt };

// Proves the callee's parameter checks from the call's argument kinds and tokens. Fills the
// callee's dynamic dims with the caller's dims that bind them and each argument's entry.
bool proveParameters(const IrInst& call, const IrFunction& callee, std::vector<std::optional<DimToken>>& dims,
                     std::vector<Entry>& entries) {
  const std::size_t n = callee.params.size();
  if (call.inputs.size() != n || call.arg_kinds.size() != n || call.in_tokens.size() != n) return false;
  dims.assign(callee.dim_names.size(), std::nullopt);
  entries.assign(n, Entry::Same);
  for (std::size_t i = 0; i < n; ++i) {
    const IrParam& param = callee.params[i];
    const ValueKind kind = call.arg_kinds[i];
    if (param.kind != ValueKind::Tensor) {
      if (kind == param.kind) continue;
      if (param.kind == ValueKind::Float && (kind == ValueKind::Int || kind == ValueKind::Bool)) {
        entries[i] = Entry::ToFloat;
        continue;
      }
      if (param.kind == ValueKind::Int && kind == ValueKind::Bool) {
        entries[i] = Entry::ToInt;
        continue;
      }
      return false;
    }
    if (kind != ValueKind::Tensor) return false;
    const TensorDescriptor& want = param.token;
    const TensorDescriptor& have = call.in_tokens[i];
    if (want.dtype && have.dtype != want.dtype) return false;
    if (want.any_rank) continue;
    if (have.any_rank || have.rank() != want.rank()) return false;
    for (int d = 0; d < want.rank(); ++d) {
      const DimToken& w = want.dims[static_cast<std::size_t>(d)];
      const DimToken& h = have.dims[static_cast<std::size_t>(d)];
      if (w.is_static) {
        if (!h.is_static || h.size != w.size) return false;
        continue;
      }
      if (!w.unconstrained()) return false;
      if (w.id < 0) continue;
      if (static_cast<std::size_t>(w.id) >= dims.size()) return false;
      std::optional<DimToken>& bound = dims[static_cast<std::size_t>(w.id)];
      if (!bound) {
        bound = h;
        continue;
      }
      // The same dim in two places: equal only when both are one static size or one caller dim.
      const bool same =
          bound->is_static ? h.is_static && h.size == bound->size : !h.is_static && h.id >= 0 && h.id == bound->id;
      if (!same) return false;
    }
  }
  return true;
}

// A callee token in the caller: its dynamic dims become the dims that bound them (anonymous
// when none did), keeping the callee token's own constraints.
void remapToken(TensorDescriptor& token, const std::vector<std::optional<DimToken>>& dims) {
  for (DimToken& d : token.dims) {
    if (d.is_static || d.id < 0) continue;
    const std::size_t id = static_cast<std::size_t>(d.id);
    if (id < dims.size() && dims[id] && dims[id]->is_static) {
      d = *dims[id];
    } else {
      d.id = id < dims.size() && dims[id] ? dims[id]->id : -1;
    }
  }
}

// The index of `name` in the caller's inlined-function table, added when new.
std::int32_t inlinedIndex(IrFunction& caller, const std::string& name) {
  auto it = std::find(caller.inlined_functions.begin(), caller.inlined_functions.end(), name);
  if (it == caller.inlined_functions.end()) it = caller.inlined_functions.insert(it, name);
  return static_cast<std::int32_t>(it - caller.inlined_functions.begin());
}

int instructionCount(const IrFunction& fn) {
  int count = 0;
  for (const IrInst& inst : fn.code) count += inst.isLabel() ? 0 : 1;
  return count;
}

// Appends the callee's code for `call` to `out`; returns the positions (in `out`) of the Moves
// that write the call's results.
std::vector<std::size_t> splice(IrFunction& caller, const IrInst& call, const IrFunction& callee,
                                const std::vector<std::optional<DimToken>>& dims, const std::vector<Entry>& entries,
                                std::vector<IrInst>& out) {
  const std::int32_t base_reg = caller.num_registers;
  const int base_label = caller.num_labels;
  const int end_label = base_label + callee.num_labels;
  const int base_loop = caller.num_loops;
  caller.num_registers += callee.num_registers;
  caller.num_labels += callee.num_labels + 1;
  caller.num_loops += callee.num_loops;

  // A parameter register written only by its load becomes the argument's register, unless the
  // argument needs a conversion or the call writes that register (`x = f(x)`: a result Move
  // must not change what the rest of the callee reads).
  std::vector<int> defs(static_cast<std::size_t>(callee.num_registers), 0);
  for (const IrInst& inst : callee.code) {
    for (std::int32_t r : irDefs(inst)) ++defs[static_cast<std::size_t>(r)];
  }
  const std::set<std::int32_t> results(call.outputs.begin(), call.outputs.end());
  std::vector<std::int32_t> map(static_cast<std::size_t>(callee.num_registers));
  for (std::size_t r = 0; r < map.size(); ++r) map[r] = base_reg + static_cast<std::int32_t>(r);
  std::vector<bool> renamed(map.size(), false);
  for (const IrInst& inst : callee.code) {
    if (inst.isLabel() || (inst.op != Opcode::LoadTensor && inst.op != Opcode::LoadArg)) continue;
    const std::size_t param = static_cast<std::size_t>(inst.b);
    const std::int32_t arg = call.inputs[param];
    if (defs[static_cast<std::size_t>(inst.a)] == 1 && entries[param] == Entry::Same && !results.count(arg)) {
      map[static_cast<std::size_t>(inst.a)] = arg;
      renamed[static_cast<std::size_t>(inst.a)] = true;
    }
  }
  for (const auto& [reg, name] : callee.reg_names) {
    if (reg >= 0 && static_cast<std::size_t>(reg) < map.size() && !renamed[static_cast<std::size_t>(reg)]) {
      caller.reg_names.emplace(map[static_cast<std::size_t>(reg)], name);
    }
  }

  // The callee's lines keep naming it (and what was inlined into it) in the caller's debug info.
  const std::int32_t own_frame = inlinedIndex(caller, callee.name);
  std::vector<std::int32_t> frames;
  for (const std::string& name : callee.inlined_functions) frames.push_back(inlinedIndex(caller, name));
  auto frameOf = [&](SourceLoc loc) {
    const bool nested = loc.inlined >= 0 && static_cast<std::size_t>(loc.inlined) < frames.size();
    loc.inlined = nested ? frames[static_cast<std::size_t>(loc.inlined)] : own_frame;
    return loc;
  };

  std::vector<std::size_t> result_moves;
  bool jumps_to_end = false;
  for (std::size_t pc = 0; pc < callee.code.size(); ++pc) {
    IrInst inst = callee.code[pc];
    if (inst.isLabel()) {
      inst.label += base_label;
      out.push_back(std::move(inst));
      continue;
    }
    inst.loc = frameOf(inst.loc);
    switch (inst.op) {
      case Opcode::LoadTensor:
      case Opcode::LoadArg: {
        if (renamed[static_cast<std::size_t>(inst.a)]) continue;
        const Entry entry = entries[static_cast<std::size_t>(inst.b)];
        IrInst move;
        move.op = entry == Entry::ToFloat ? Opcode::ToFloat : entry == Entry::ToInt ? Opcode::ToInt : Opcode::Move;
        move.a = map[static_cast<std::size_t>(inst.a)];
        move.b = call.inputs[static_cast<std::size_t>(inst.b)];
        move.loc = call.loc;
        out.push_back(std::move(move));
        continue;
      }
      case Opcode::StoreTensor: {
        IrInst move;
        move.op = Opcode::Move;
        move.a = call.outputs[static_cast<std::size_t>(inst.b)];
        move.b = map[static_cast<std::size_t>(inst.a)];
        move.loc = inst.loc;
        result_moves.push_back(out.size());
        out.push_back(std::move(move));
        continue;
      }
      case Opcode::Return:
        if (pc + 1 == callee.code.size()) continue;  // falls through to the caller's next instruction
        inst.op = Opcode::Jump;
        inst.target_true = end_label;
        jumps_to_end = true;
        out.push_back(std::move(inst));
        continue;
      case Opcode::LoopStart:
      case Opcode::LoopEnd: inst.a += base_loop; break;
      default: break;
    }
    renameIrRegisters(inst, [&](std::int32_t r, bool) { return map[static_cast<std::size_t>(r)]; });
    if (inst.target_true >= 0) inst.target_true += base_label;
    if (inst.target_false >= 0) inst.target_false += base_label;
    for (TensorDescriptor& token : inst.in_tokens) remapToken(token, dims);
    for (TensorDescriptor& token : inst.out_tokens) remapToken(token, dims);
    out.push_back(std::move(inst));
  }
  if (jumps_to_end) {
    IrInst label;
    label.label = end_label;
    out.push_back(std::move(label));
  }
  return result_moves;
}

}  // namespace

int inlineCalls(IrFunction& caller, const std::function<const IrFunction*(const std::string&)>& lookup,
                const InlineLimits& limits) {
  int inlined = 0;
  std::vector<IrInst> out;
  out.reserve(caller.code.size());
  std::vector<std::size_t> result_moves;
  std::vector<std::optional<DimToken>> dims;
  std::vector<Entry> entries;
  for (IrInst& inst : caller.code) {
    const IrFunction* callee = !inst.isLabel() && inst.op == Opcode::Call ? lookup(inst.op_name) : nullptr;
    if (callee == nullptr || instructionCount(*callee) > limits.max_instructions ||
        static_cast<std::int64_t>(caller.num_registers) + callee->num_registers > kMaxRegisters ||
        inst.outputs.size() != static_cast<std::size_t>(callee->num_outputs) ||
        !proveParameters(inst, *callee, dims, entries)) {
      out.push_back(std::move(inst));
      continue;
    }
    for (std::size_t at : splice(caller, inst, *callee, dims, entries, out)) result_moves.push_back(at);
    ++inlined;
  }
  // `t = op(...); result = t` becomes `result = op(...)` where t is the callee's temporary.
  std::vector<int> defs(static_cast<std::size_t>(caller.num_registers), 0), uses(defs.size(), 0);
  for (const IrInst& inst : out) {
    for (std::int32_t r : irDefs(inst)) ++defs[static_cast<std::size_t>(r)];
    for (std::int32_t r : irUses(inst)) ++uses[static_cast<std::size_t>(r)];
  }
  std::vector<bool> drop(out.size(), false);
  for (std::size_t at : result_moves) {
    if (at == 0 || out[at - 1].isLabel()) continue;
    IrInst& move = out[at];
    IrInst& def = out[at - 1];
    const std::size_t src = static_cast<std::size_t>(move.b);
    const auto written = irDefs(def);
    if (defs[src] != 1 || uses[src] != 1 || written.size() != 1 || written[0] != move.b ||
        def.op == Opcode::TupleUnpack || def.op == Opcode::LoadTensor || def.op == Opcode::LoadArg) {
      continue;
    }
    const std::int32_t dst = move.a;
    renameIrRegisters(def, [&](std::int32_t r, bool write) { return write && r == move.b ? dst : r; });
    drop[at] = true;
  }
  std::vector<IrInst> kept;
  kept.reserve(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(out[i]));
  }
  caller.code = std::move(kept);
  return inlined;
}

}  // namespace shapevm::frontend
