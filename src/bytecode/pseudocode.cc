// SPDX-License-Identifier: Apache-2.0
// The Python-like pseudocode view of a function (text_format.h): one line per instruction with
// its PC, loop bodies indented between LoopStart and LoopEnd, op sites with their shape tokens.
// A view only — never parsed back; robust against unverified modules (bad indices print as such).
#include <algorithm>
#include <array>

#include "bytecode/text_format.h"

namespace shapevm {
namespace {

std::string pc4(std::int64_t pc) { return fmt::format("0x{:04X}", pc); }

std::string reg(std::int32_t r) { return r < 0 ? "None" : fmt::format("r{}", r); }

std::string regs(std::span<const std::int32_t> list) {
  std::string text;
  for (std::size_t i = 0; i < list.size(); ++i) text += (i ? ", " : "") + reg(list[i]);
  return text;
}

template <typename T>
const T* at(const std::vector<T>& items, std::int32_t index) {
  return index >= 0 && static_cast<std::size_t>(index) < items.size() ? &items[static_cast<std::size_t>(index)] : nullptr;
}

std::string constantValue(const Module& module, std::int32_t index) {
  const Constant* c = at(module.constants, index);
  if (c == nullptr) return fmt::format("<bad constant k{}>", index);
  switch (c->kind) {
    case ConstKind::None: return "None";
    case ConstKind::Bool: return c->value.isBool() && c->value.asBool() ? "True" : "False";
    case ConstKind::Int:
    case ConstKind::Float:
    case ConstKind::String: {
      std::string text = constantText(*c);
      return text.substr(text.find(' ') + 1);
    }
    case ConstKind::Ints: {
      std::string text = constantText(*c);  // "ints [1,2]"
      text = text.substr(text.find('[') + 1);
      text.pop_back();
      for (std::size_t i = text.find(','); i != std::string::npos; i = text.find(',', i + 2)) text.insert(i + 1, " ");
      return "(" + text + (text.find(',') == std::string::npos && !text.empty() ? ",)" : ")");
    }
    case ConstKind::Tensor: {
      std::string text = constantText(*c);
      auto brace = text.find(" {");
      return fmt::format("k{}  # {}", index, text.substr(0, brace));
    }
  }
  return "?";
}

std::string callOpLine(const Module& module, const Function& fn, std::int32_t index) {
  const OpSite* site = at(fn.op_sites, index);
  if (site == nullptr || static_cast<int>(site->op) >= kNumOps) return fmt::format("<bad op site s{}>", index);
  const OpSchema& schema = OpRegistry::global().schema(site->op);
  std::string args = regs(site->inputs);
  for (std::size_t i = 0; i < schema.attrs.size() && i < site->attrs.size() && i < 64; ++i) {
    if (site->attrs_given >> i & 1u) args += (args.empty() ? "" : ", ") + schema.attrs[i].name + "=" + site->attrs[i].toString();
  }
  std::string tokens;
  {
    std::lock_guard<std::mutex> lock(module.tokenMutex());
    for (std::size_t i = 0; i < site->input_tokens.size(); ++i) tokens += (i ? " x " : "") + site->input_tokens[i].toString();
    tokens += " ->";
    for (std::size_t i = 0; i < site->output_tokens.size(); ++i) tokens += (i ? ", " : " ") + site->output_tokens[i].toString();
  }
  return fmt::format("{} = {}({})  # {}", regs(site->outputs), schema.name, args, tokens);
}

std::string callLine(const Module& module, const Function& fn, std::int32_t index) {
  const CallSite* site = at(fn.call_sites, index);
  if (site == nullptr) return fmt::format("<bad call site c{}>", index);
  const Function* callee = at(module.functions, site->callee);
  std::string call = fmt::format("{}({})", callee ? callee->name : fmt::format("<bad function {}>", site->callee), regs(site->args));
  return site->results.empty() ? call : regs(site->results) + " = " + call;
}

std::string branchLine(const Instruction& inst, std::int64_t pc) {
  if (inst.c == pc + 1) return fmt::format("if r{}: goto {}", inst.a, pc4(inst.b));
  if (inst.b == pc + 1) return fmt::format("if not r{}: goto {}", inst.a, pc4(inst.c));
  return fmt::format("if r{}: goto {} else goto {}", inst.a, pc4(inst.b), pc4(inst.c));
}

// Infix symbols of the contiguous scalar binary ops Add..Ne (opcodes.def order).
constexpr std::array<std::string_view, 15> kBinarySymbols = {"+", "-", "*", "/", "//", "%", "**", "min", "max",
                                                             "<", "<=", ">", ">=", "==", "!="};

std::string instructionLine(const Module& module, const Function& fn, const Instruction& inst, std::int64_t pc) {
  const int op_index = static_cast<int>(inst.op);
  if (op_index >= static_cast<int>(Opcode::Add) && op_index <= static_cast<int>(Opcode::Ne)) {
    std::string_view symbol = kBinarySymbols[static_cast<std::size_t>(op_index - static_cast<int>(Opcode::Add))];
    if (symbol == "min" || symbol == "max") return fmt::format("r{} = {}(r{}, r{})", inst.a, symbol, inst.b, inst.c);
    return fmt::format("r{} = r{} {} r{}", inst.a, inst.b, symbol, inst.c);
  }
  const auto list = [&]() -> std::string {
    if (inst.b < 0 || inst.c < 0 || static_cast<std::size_t>(inst.b) + static_cast<std::size_t>(inst.c) > fn.operand_pool.size()) {
      return "<bad register list>";
    }
    return regs(std::span<const std::int32_t>(fn.operand_pool).subspan(static_cast<std::size_t>(inst.b), static_cast<std::size_t>(inst.c)));
  };
  const auto param = [&](std::int32_t index) {
    const Param* p = at(fn.params, index);
    return p ? p->name : fmt::format("<bad param p{}>", index);
  };
  switch (inst.op) {
    case Opcode::Nop: return "pass";
    case Opcode::Move: return fmt::format("r{} = r{}", inst.a, inst.b);
    case Opcode::LoadConst: return fmt::format("r{} = {}", inst.a, constantValue(module, inst.b));
    case Opcode::LoadTensor:
    case Opcode::LoadArg: return fmt::format("r{} = {}", inst.a, param(inst.b));
    case Opcode::CallOp: return callOpLine(module, fn, inst.a);
    case Opcode::Call: return callLine(module, fn, inst.a);
    case Opcode::StoreTensor: return fmt::format("out[{}] = r{}", inst.b, inst.a);
    case Opcode::Return: {
      std::string outs;
      for (std::int32_t i = 0; i < fn.num_outputs && i < 4096; ++i) outs += fmt::format("{}out[{}]", i ? ", " : " ", i);
      return "return" + outs;
    }
    case Opcode::Jump: return fmt::format("goto {}", pc4(inst.a));
    case Opcode::BranchIf: return branchLine(inst, pc);
    case Opcode::LoopStart: return fmt::format("loop l{}:", inst.a);
    case Opcode::LoopEnd: return fmt::format("end loop l{}", inst.a);
    case Opcode::Assert: {
      const Constant* message = at(module.constants, inst.b);
      return fmt::format("assert r{}, {}", inst.a, message ? constantValue(module, inst.b) : fmt::format("<bad constant k{}>", inst.b));
    }
    case Opcode::And: return fmt::format("r{} = r{} and r{}", inst.a, inst.b, inst.c);
    case Opcode::Or: return fmt::format("r{} = r{} or r{}", inst.a, inst.b, inst.c);
    case Opcode::Neg: return fmt::format("r{} = -r{}", inst.a, inst.b);
    case Opcode::Not: return fmt::format("r{} = not r{}", inst.a, inst.b);
    case Opcode::Abs: return fmt::format("r{} = abs(r{})", inst.a, inst.b);
    case Opcode::ToInt: return fmt::format("r{} = int(r{})", inst.a, inst.b);
    case Opcode::ToFloat: return fmt::format("r{} = float(r{})", inst.a, inst.b);
    case Opcode::ToBool: return fmt::format("r{} = bool(r{})", inst.a, inst.b);
    case Opcode::ShapeOf: return fmt::format("r{} = r{}.shape", inst.a, inst.b);
    case Opcode::DimOf: return fmt::format("r{} = r{}.shape[{}]", inst.a, inst.b, inst.c);
    case Opcode::RankOf: return fmt::format("r{} = len(r{}.shape)", inst.a, inst.b);
    case Opcode::TuplePack: return fmt::format("r{} = ({}{})", inst.a, list(), inst.c == 1 ? "," : "");
    case Opcode::TupleUnpack: return fmt::format("{}{} = r{}", list(), inst.c == 1 ? "," : "", inst.a);
    case Opcode::TupleGet: return fmt::format("r{} = r{}[r{}]", inst.a, inst.b, inst.c);
    case Opcode::TupleLen: return fmt::format("r{} = len(r{})", inst.a, inst.b);
    default: return fmt::format("<opcode {} {}, {}, {}>", op_index, inst.a, inst.b, inst.c);
  }
}

}  // namespace

std::string pseudocode(const Module& module, int function) {
  const Function* fn = at(module.functions, function);
  if (fn == nullptr) return fmt::format("# no function {}\n", function);
  std::string params;
  for (const Param& p : fn->params) {
    std::string kind = p.kind == ValueKind::Tensor ? p.token.toString() : std::string(valueKindName(p.kind));
    params += (params.empty() ? "" : ", ") + p.name + ": " + kind;
  }
  std::string out = fmt::format("def {}({}):  # outputs: {}, registers: {}\n", fn->name, params, fn->num_outputs, fn->num_registers);
  // Loop nesting indents, up to kMaxIndentLevels (deeper loops print at that level: a module of
  // 100k nested loops must not need 100k x 100k spaces).
  static constexpr int kMaxIndentLevels = 32;
  int depth = 1;
  const auto indent = [&depth] { return 4 * std::min(depth, kMaxIndentLevels); };
  SourceLoc loc;
  for (std::size_t pc = 0; pc < fn->code.size(); ++pc) {
    const Instruction& inst = fn->code[pc];
    SourceLoc here = pc < fn->locs.size() ? fn->locs[pc] : SourceLoc{};
    if (!(here == loc) && here.line > 0) out += fmt::format("{:{}}# line {}:{}\n", "", indent(), here.line, here.col);
    loc = here;
    if (inst.op == Opcode::LoopEnd && depth > 1) --depth;
    out += fmt::format("{:{}}{}  {}\n", "", indent(), pc4(static_cast<std::int64_t>(pc)),
                       instructionLine(module, *fn, inst, static_cast<std::int64_t>(pc)));
    if (inst.op == Opcode::LoopStart) ++depth;
  }
  return out;
}

}  // namespace shapevm
