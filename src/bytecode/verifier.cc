// SPDX-License-Identifier: Apache-2.0
// Verifier: structural checks per instruction (operand roles from opcodes.def), site checks
// against the op schemas, then one forward dataflow over basic blocks whose state is, per
// register, a kind set plus a "may be unwritten" bit, and per output slot a "may be unstored"
// bit; joins are bitwise OR, so errors are reported only for what can happen on some path.
#include "bytecode/verifier.h"

#include "bytecode/instruction_info.h"
#include "bytecode/text_format.h"

#include <algorithm>

namespace shapevm {
namespace {

// Kind-set bits of the dataflow state.
constexpr std::uint8_t kNone = 1, kInt = 2, kFloat = 4, kBool = 8, kTensor = 16, kTuple = 32;
constexpr std::uint8_t kScalar = kInt | kFloat | kBool, kAnyKind = 63, kUnwritten = 128;

std::string kindsText(std::uint8_t kinds) {
  kinds &= kAnyKind;
  if (kinds == kAnyKind) return "unknown";
  static constexpr std::pair<std::uint8_t, std::string_view> kNames[] = {
      {kNone, "none"}, {kInt, "int"}, {kFloat, "float"}, {kBool, "bool"}, {kTensor, "tensor"}, {kTuple, "tuple"}};
  std::string text;
  for (auto [bit, name] : kNames) {
    if (kinds & bit) text += (text.empty() ? "" : " or ") + std::string(name);
  }
  return text.empty() ? "nothing" : text;
}

std::uint8_t kindBitsOf(ValueKind kind) {
  switch (kind) {
    case ValueKind::None: return kNone;
    case ValueKind::Int: return kInt;
    case ValueKind::Float: return kFloat;
    case ValueKind::Bool: return kBool;
    case ValueKind::Tensor: return kTensor;
    case ValueKind::Tuple: return kTuple;
  }
  return kAnyKind;
}

std::uint8_t constantKinds(const Constant& c) {
  switch (c.kind) {
    case ConstKind::None: return kNone;
    case ConstKind::Int: return kInt;
    case ConstKind::Float: return kFloat;
    case ConstKind::Bool: return kBool;
    case ConstKind::Tensor: return kTensor;
    case ConstKind::Ints: return kTuple;
    case ConstKind::String: return 0;
  }
  return 0;
}

std::uint8_t inputKinds(InputKind kind) {
  switch (kind) {
    case InputKind::Tensor: return kTensor | kScalar;
    case InputKind::Ints: return kInt | kBool | kTuple | kTensor;
    case InputKind::Int: return kInt | kBool | kTensor;
    case InputKind::Num: return kScalar | kTensor;
  }
  return kAnyKind;
}

bool isIdentifier(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char ch = name[i];
    bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
    if (!alpha && !(i > 0 && ch >= '0' && ch <= '9')) return false;
  }
  return true;
}

// A function name: identifiers joined by single dots (`Cell.construct` for a compiled method).
bool isFunctionName(std::string_view name) {
  std::size_t start = 0;
  while (true) {
    std::size_t dot = name.find('.', start);
    if (!isIdentifier(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start))) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

const InputSpec& inputSpecAt(const OpSchema& schema, std::size_t i) {
  return schema.inputs[std::min(i, schema.inputs.size() - 1)];
}

// An output token the op's shape function (ops.def) contradicts on the site's input tokens: a
// different rank or static extent. Returns the inferred shape's text, or "" when consistent.
std::string contradictedShape(const OpSchema& schema, const OpSite& site, std::size_t output) {
  std::vector<SymInput> inputs;
  for (const TensorDescriptor& token : site.input_tokens) {
    if (!token.is_tensor || token.any_rank) {
      inputs.push_back(SymInput::of(SymInput::Kind::Other));
      continue;
    }
    SymShape shape;
    for (const DimToken& d : token.dims)
      shape.dims.push_back(d.is_static ? SymDim::fixed(d.size) : SymDim::dynamic(d.id));
    inputs.push_back(SymInput::tensor(shape));
  }
  const SymShape inferred =
      inferShape(schema, inputs, site.attrs, static_cast<int>(output), static_cast<int>(site.outputs.size()));
  const TensorDescriptor& token = site.output_tokens[output];
  if (!inferred.rank_known || token.any_rank) return "";
  bool ok = inferred.rank() == token.rank();
  for (int d = 0; ok && d < token.rank(); ++d) {
    const SymDim& want = inferred.dims[static_cast<std::size_t>(d)];
    const DimToken& got = token.dims[static_cast<std::size_t>(d)];
    ok = !(want.is_static && got.is_static && want.size != got.size);
  }
  return ok ? "" : inferred.toString();
}

class FunctionVerifier {
 public:
  FunctionVerifier(const Module& module, int index)
      : module_(module), fn_(module.functions[static_cast<std::size_t>(index)]) {}

  Status run() const {
    SVM_RETURN_IF_ERROR(header());
    int next_op_site = 0, next_call_site = 0;
    for (std::size_t pc = 0; pc < fn_.code.size(); ++pc) {
      SVM_RETURN_IF_ERROR(instruction(static_cast<int>(pc), &next_op_site, &next_call_site));
    }
    if (static_cast<std::size_t>(next_op_site) < fn_.op_sites.size()) {
      return fail(-1, "op-site-use", fmt::format("op site s{} is not used by any CallOp", next_op_site));
    }
    if (static_cast<std::size_t>(next_call_site) < fn_.call_sites.size()) {
      return fail(-1, "call-site-use", fmt::format("call site c{} is not used by any Call", next_call_site));
    }
    if (fn_.code.empty()) return fail(-1, "falls-off-end", "the function has no instructions");
    if (!endsBlock(fn_.code.back().op)) {
      return fail(static_cast<int>(fn_.code.size()) - 1, "falls-off-end",
                  fmt::format("the last instruction is {}; execution would run past the end (expected Return, Jump or BranchIf)",
                              opcodeName(fn_.code.back().op)));
    }
    SVM_RETURN_IF_ERROR(loopBalance());
    return dataflow();
  }
  // Counts, line table, parameters and dim names: what other functions' call checks rely on.
  Status header() const {
    return headerChecks();
  }

 private:
  Status fail(int pc, std::string_view rule, const std::string& details) const {
    if (pc < 0) return makeError(ErrorCode::VerifyError, "verify: function '{}': rule {}: {}", fn_.name, rule, details);
    return makeError(ErrorCode::VerifyError, "verify: function '{}', PC 0x{:04X}: rule {}: {}", fn_.name, pc, rule, details);
  }
  // A function-wide limit names where the function starts in its source, when the module has one.
  Status failLimit(const std::string& details) const {
    const auto located =
        std::find_if(fn_.locs.begin(), fn_.locs.end(), [](const SourceLoc& loc) { return loc.line > 0; });
    if (located == fn_.locs.end()) return fail(-1, "limits", details);
    const std::string& file = module_.source_file;
    return makeError(ErrorCode::VerifyError, "verify: function '{}' ({}line {}): rule limits: {}", fn_.name,
                     file.empty() ? "" : file + " ", located->line, details);
  }

  Status headerChecks() const {
    if (fn_.num_registers < 0 || fn_.num_registers > kMaxRegisters) {
      return failLimit(fmt::format("num_registers {} is outside 0..{}", fn_.num_registers, kMaxRegisters));
    }
    if (fn_.num_outputs < 0 || fn_.num_outputs > kMaxOutputs) {
      return failLimit(fmt::format("num_outputs {} is outside 0..{}", fn_.num_outputs, kMaxOutputs));
    }
    if (fn_.num_loops < 0 || fn_.num_loops > kMaxLoopIds) {
      return failLimit(fmt::format("num_loops {} outside 0..{}", fn_.num_loops, kMaxLoopIds));
    }
    if (fn_.code.size() > kMaxCodeSize)
      return failLimit(fmt::format("{} instructions exceed {}", fn_.code.size(), kMaxCodeSize));
    if (fn_.locs.size() != fn_.code.size()) {
      return fail(-1, "line-table", fmt::format("{} source locations for {} instructions", fn_.locs.size(), fn_.code.size()));
    }
    for (std::size_t i = 0; i < fn_.params.size(); ++i) {
      const Param& p = fn_.params[i];
      if (!isIdentifier(p.name)) return fail(-1, "param", fmt::format("parameter p{} has a bad name {}", i, quoteString(p.name)));
      if (fn_.paramIndex(p.name) != static_cast<int>(i)) return fail(-1, "param", fmt::format("parameter name '{}' is used twice", p.name));
      bool kind_ok = p.kind == ValueKind::Tensor || p.kind == ValueKind::Int || p.kind == ValueKind::Float || p.kind == ValueKind::Bool;
      if (!kind_ok) return fail(-1, "param", fmt::format("parameter '{}' has kind {} (expected tensor, int, float or bool)", p.name, static_cast<int>(p.kind)));
      if (p.kind == ValueKind::Tensor && !p.token.is_tensor) return fail(-1, "param", fmt::format("tensor parameter '{}' has the non-tensor token _", p.name));
    }
    for (std::size_t i = 0; i < fn_.dim_names.size(); ++i) {
      if (!fn_.dim_names[i].empty() && !isIdentifier(fn_.dim_names[i])) {
        return fail(-1, "dim-name", fmt::format("dim ?{} has a bad name {}", i, quoteString(fn_.dim_names[i])));
      }
    }
    return Status::ok();
  }

  Status registerInRange(int pc, std::int32_t r, std::string_view what) const {
    if (r < 0 || r >= fn_.num_registers) {
      return fail(pc, "register-range", fmt::format("{} r{} is outside r0..r{} (num_registers {})", what, r, fn_.num_registers - 1, fn_.num_registers));
    }
    return Status::ok();
  }

  Status instruction(int pc, int* next_op_site, int* next_call_site) const {
    const Instruction& inst = fn_.code[static_cast<std::size_t>(pc)];
    if (static_cast<int>(inst.op) >= kNumOpcodes) return fail(pc, "opcode", fmt::format("unknown opcode {}", static_cast<int>(inst.op)));
    if (inst.reserved[0] || inst.reserved[1] || inst.reserved[2]) return fail(pc, "unused-field", "reserved bytes are not zero");
    const std::int32_t fields[3] = {inst.a, inst.b, inst.c};
    static constexpr std::string_view kFieldNames[3] = {"A", "B", "C"};
    const auto name = opcodeName(inst.op);
    for (int f = 0; f < 3; ++f) {
      const std::int32_t v = fields[f];
      const auto range = [&](std::string_view rule, std::string_view what, std::int32_t limit) -> Status {
        if (v < 0 || v >= limit) return fail(pc, rule, fmt::format("{} {} {} is outside 0..{} ({} has {})", name, what, v, limit - 1, fn_.name, limit));
        return Status::ok();
      };
      switch (operandRole(inst.op, f)) {
        case OperandRole::Unused:
          if (v != 0) return fail(pc, "unused-field", fmt::format("{} field {} is unused but holds {}", name, kFieldNames[f], v));
          break;
        case OperandRole::RegWrite:
        case OperandRole::RegRead: SVM_RETURN_IF_ERROR(registerInRange(pc, v, fmt::format("{} operand", name))); break;
        case OperandRole::Constant:
          SVM_RETURN_IF_ERROR(range("constant-range", "constant", static_cast<std::int32_t>(module_.constants.size())));
          break;
        case OperandRole::Param: SVM_RETURN_IF_ERROR(range("param-range", "parameter", static_cast<std::int32_t>(fn_.params.size()))); break;
        case OperandRole::Output: SVM_RETURN_IF_ERROR(range("output-range", "output slot", fn_.num_outputs)); break;
        case OperandRole::Target: SVM_RETURN_IF_ERROR(range("jump-target", "target", static_cast<std::int32_t>(fn_.code.size()))); break;
        case OperandRole::Loop: SVM_RETURN_IF_ERROR(range("loop-range", "loop id", fn_.num_loops)); break;
        case OperandRole::Immediate: break;
        case OperandRole::OpSite: SVM_RETURN_IF_ERROR(range("op-site-range", "op site", static_cast<std::int32_t>(fn_.op_sites.size()))); break;
        case OperandRole::CallSite: SVM_RETURN_IF_ERROR(range("call-site-range", "call site", static_cast<std::int32_t>(fn_.call_sites.size()))); break;
        case OperandRole::RegListRead:
        case OperandRole::RegListWrite: {
          if (inst.b < 0 || inst.c < 0 || static_cast<std::int64_t>(inst.b) + inst.c > static_cast<std::int64_t>(fn_.operand_pool.size())) {
            return fail(pc, "operand-list-range", fmt::format("register list {}+{} is outside the operand pool (size {})", inst.b, inst.c, fn_.operand_pool.size()));
          }
          for (std::int32_t i = 0; i < inst.c; ++i) {
            SVM_RETURN_IF_ERROR(registerInRange(pc, fn_.operand_pool[static_cast<std::size_t>(inst.b + i)], fmt::format("{} list item", name)));
          }
          f = 3;
          break;
        }
      }
    }
    switch (inst.op) {
      case Opcode::LoadTensor:
      case Opcode::LoadArg: {
        const Param& p = fn_.params[static_cast<std::size_t>(inst.b)];
        bool tensor = p.kind == ValueKind::Tensor;
        if (tensor != (inst.op == Opcode::LoadTensor)) {
          return fail(pc, "param-kind", fmt::format("{} of parameter p{} ('{}'), which is {} (use {})", name, inst.b, p.name,
                                                    valueKindName(p.kind), tensor ? "LoadTensor" : "LoadArg"));
        }
        break;
      }
      case Opcode::Assert:
        if (module_.constants[static_cast<std::size_t>(inst.b)].kind != ConstKind::String) {
          return fail(pc, "assert-message", fmt::format("Assert message k{} is not a string constant", inst.b));
        }
        break;
      case Opcode::CallOp:
        if (inst.a != *next_op_site) {
          return fail(pc, "op-site-use", fmt::format("CallOp uses op site s{} but the next unused site is s{} (each op site belongs "
                                                     "to exactly one CallOp, in PC order)", inst.a, *next_op_site));
        }
        ++*next_op_site;
        return opSite(pc, fn_.op_sites[static_cast<std::size_t>(inst.a)]);
      case Opcode::Call:
        if (inst.a != *next_call_site) {
          return fail(pc, "call-site-use", fmt::format("Call uses call site c{} but the next unused site is c{} (each call site belongs "
                                                       "to exactly one Call, in PC order)", inst.a, *next_call_site));
        }
        ++*next_call_site;
        return callSite(pc, fn_.call_sites[static_cast<std::size_t>(inst.a)]);
      default: break;
    }
    return Status::ok();
  }

  Status opSite(int pc, const OpSite& site) const {
    if (static_cast<int>(site.op) >= kNumOps) return fail(pc, "op-arity", fmt::format("unknown op id {}", static_cast<int>(site.op)));
    const OpSchema& schema = OpRegistry::global().schema(site.op);
    const int count = static_cast<int>(site.inputs.size());
    if (count < schema.minInputs() || (schema.maxInputs() >= 0 && count > schema.maxInputs())) {
      return fail(pc, "op-arity", fmt::format("op '{}' takes {}{} inputs, got {}", schema.name, schema.minInputs(),
                                              schema.maxInputs() < 0 ? " or more" : schema.maxInputs() == schema.minInputs() ? "" : fmt::format(" to {}", schema.maxInputs()),
                                              count));
    }
    for (std::size_t i = 0; i < site.inputs.size(); ++i) {
      if (site.inputs[i] == -1) {
        if (!inputSpecAt(schema, i).optional) {
          return fail(pc, "op-arity", fmt::format("op '{}' input {} ('{}') is none but not optional", schema.name, i, inputSpecAt(schema, i).name));
        }
        continue;
      }
      SVM_RETURN_IF_ERROR(registerInRange(pc, site.inputs[i], fmt::format("op '{}' input", schema.name)));
    }
    if (site.attrs.size() != schema.attrs.size()) {
      return fail(pc, "op-attrs", fmt::format("op '{}' has {} attributes, the site holds {}", schema.name, schema.attrs.size(), site.attrs.size()));
    }
    if (schema.attrs.size() < 64 && (site.attrs_given >> schema.attrs.size()) != 0) {
      return fail(pc, "op-attrs", fmt::format("op '{}': attrs_given marks attributes beyond its {}", schema.name, schema.attrs.size()));
    }
    for (std::size_t i = 0; i < schema.attrs.size(); ++i) {
      const AttrSpec& spec = schema.attrs[i];
      const AttrValue& value = site.attrs[i];
      if (value.kind != spec.kind) {
        return fail(pc, "op-attrs", fmt::format("op '{}' attribute '{}' must be {}, got {}", schema.name, spec.name,
                                                attrKindName(spec.kind), attrKindName(value.kind)));
      }
      bool given = (site.attrs_given >> i) & 1u;
      if (!given && !spec.default_value) {
        return fail(pc, "op-attrs", fmt::format("op '{}' requires attribute '{}'", schema.name, spec.name));
      }
      if (!given && !(value == *spec.default_value)) {
        return fail(pc, "op-attrs", fmt::format("op '{}' attribute '{}' is not marked as given but differs from its default {}",
                                                schema.name, spec.name, spec.default_value->toString()));
      }
    }
    auto outputs = numOutputs(schema, site.attrs);
    if (!outputs) return fail(pc, "op-attrs", outputs.status().message());
    if (static_cast<std::size_t>(*outputs) != site.outputs.size()) {
      return fail(pc, "op-arity", fmt::format("op '{}' produces {} outputs here, the site lists {}", schema.name, *outputs, site.outputs.size()));
    }
    for (std::int32_t r : site.outputs) SVM_RETURN_IF_ERROR(registerInRange(pc, r, fmt::format("op '{}' output", schema.name)));
    if (site.input_tokens.size() != site.inputs.size() || site.output_tokens.size() != site.outputs.size()) {
      return fail(pc, "op-tokens", fmt::format("op '{}' has {} inputs / {} outputs but {} / {} shape tokens", schema.name,
                                               site.inputs.size(), site.outputs.size(), site.input_tokens.size(), site.output_tokens.size()));
    }
    for (std::size_t i = 0; i < site.inputs.size(); ++i) {
      if (site.inputs[i] == -1 && site.input_tokens[i].is_tensor) {
        return fail(pc, "op-tokens", fmt::format("op '{}' input {} is none but its token is {} (expected _)", schema.name, i, site.input_tokens[i].toString()));
      }
    }
    for (std::size_t i = 0; i < site.outputs.size(); ++i) {
      if (!site.output_tokens[i].is_tensor) {
        return fail(pc, "op-tokens", fmt::format("op '{}' output {} has the non-tensor token _ (ops produce tensors)", schema.name, i));
      }
      if (std::string inferred = contradictedShape(schema, site, i); !inferred.empty()) {
        return fail(pc, "op-shape",
                    fmt::format("op '{}' output {} has the token {}, but its inputs give {} ({})", schema.name, i,
                                site.output_tokens[i].toString(), inferred, schema.shape_fn_name));
      }
    }
    return Status::ok();
  }

  Status callSite(int pc, const CallSite& site) const {
    if (site.callee < 0 || static_cast<std::size_t>(site.callee) >= module_.functions.size()) {
      return fail(pc, "call-callee", fmt::format("callee {} is not a function of the module ({} functions)", site.callee, module_.functions.size()));
    }
    const Function& callee = module_.functions[static_cast<std::size_t>(site.callee)];
    if (site.args.size() != callee.params.size() || static_cast<std::int64_t>(site.results.size()) != callee.num_outputs) {
      return fail(pc, "call-arity", fmt::format("'{}' takes {} arguments and returns {} outputs; the call passes {} and expects {}",
                                                callee.name, callee.params.size(), callee.num_outputs, site.args.size(), site.results.size()));
    }
    for (std::int32_t r : site.args) SVM_RETURN_IF_ERROR(registerInRange(pc, r, "Call argument"));
    for (std::int32_t r : site.results) SVM_RETURN_IF_ERROR(registerInRange(pc, r, "Call result"));
    return Status::ok();
  }

  Status loopBalance() const {
    std::vector<std::uint8_t> seen(static_cast<std::size_t>(fn_.num_loops), 0);  // bit 0 start, bit 1 end
    std::vector<int> first_pc(static_cast<std::size_t>(fn_.num_loops), -1);
    for (std::size_t pc = 0; pc < fn_.code.size(); ++pc) {
      const Instruction& inst = fn_.code[pc];
      if (inst.op != Opcode::LoopStart && inst.op != Opcode::LoopEnd) continue;
      auto id = static_cast<std::size_t>(inst.a);
      seen[id] |= inst.op == Opcode::LoopStart ? 1 : 2;
      if (first_pc[id] < 0) first_pc[id] = static_cast<int>(pc);
    }
    for (std::size_t id = 0; id < seen.size(); ++id) {
      if (seen[id] == 1) return fail(first_pc[id], "loop-balance", fmt::format("loop l{} has a LoopStart but no LoopEnd", id));
      if (seen[id] == 2) return fail(first_pc[id], "loop-balance", fmt::format("loop l{} has a LoopEnd but no LoopStart", id));
    }
    return Status::ok();
  }

  // ---- dataflow ----
  using State = std::vector<std::uint8_t>;  // registers, then output slots (1 = may be unstored)

  // Reads register r needing one of `allowed` kinds; reports when `report`.
  Status use(const State& state, int pc, std::int32_t r, std::uint8_t allowed, std::string_view what, bool report) const {
    if (!report) return Status::ok();
    std::uint8_t s = state[static_cast<std::size_t>(r)];
    if (s & kUnwritten) {
      std::string details = fmt::format("{} r{} may be read before it is written (on some path to this PC)", what, r);
      // Frontend modules know which source variable a register holds (debug info, not serialized).
      const auto index = static_cast<std::size_t>(r);
      if (index < fn_.register_names.size() && !fn_.register_names[index].empty()) {
        const auto at = static_cast<std::size_t>(pc);
        const int line = at < fn_.locs.size() ? fn_.locs[at].line : 0;
        details += fmt::format("; r{} holds the variable `{}`{}", r, fn_.register_names[index],
                               line > 0 ? fmt::format(" read at line {}", line) : std::string());
      }
      return fail(pc, "def-before-use", details);
    }
    if ((s & allowed) == 0) {
      return fail(pc, "kind", fmt::format("{} r{} holds {} but needs {}", what, r, kindsText(s), kindsText(allowed)));
    }
    return Status::ok();
  }

  static std::uint8_t arithmeticResult(std::uint8_t b, std::uint8_t c) {
    return ((b | c) & kFloat) ? (kInt | kFloat) : kInt;
  }

  // Applies one instruction to `state`; with `report`, returns the first rule it breaks.
  Status transfer(State& state, int pc, bool report) const {
    const Instruction& inst = fn_.code[static_cast<std::size_t>(pc)];
    const std::string name(opcodeName(inst.op));
    auto reg = [&](std::int32_t r) -> std::uint8_t& { return state[static_cast<std::size_t>(r)]; };
    const int op = static_cast<int>(inst.op);
    if (op >= static_cast<int>(Opcode::Add) && op <= static_cast<int>(Opcode::Ne)) {
      const bool equality = inst.op == Opcode::Eq || inst.op == Opcode::Ne;
      const std::uint8_t allowed = equality ? (kScalar | kTuple | kNone) : kScalar;
      SVM_RETURN_IF_ERROR(use(state, pc, inst.b, allowed, name + " operand", report));
      SVM_RETURN_IF_ERROR(use(state, pc, inst.c, allowed, name + " operand", report));
      std::uint8_t b = reg(inst.b) & kAnyKind, c = reg(inst.c) & kAnyKind;
      std::uint8_t result = inst.op == Opcode::Div ? kFloat
                            : inst.op == Opcode::Pow ? (kInt | kFloat)
                            : (inst.op == Opcode::Min || inst.op == Opcode::Max) ? static_cast<std::uint8_t>(((b | c) & kScalar) ? ((b | c) & kScalar) : kScalar)
                            : op >= static_cast<int>(Opcode::Lt) ? kBool
                            : arithmeticResult(b, c);
      reg(inst.a) = result;
      return Status::ok();
    }
    switch (inst.op) {
      case Opcode::Move: {
        SVM_RETURN_IF_ERROR(use(state, pc, inst.b, kAnyKind, "Move source", report));
        std::uint8_t kinds = reg(inst.b) & kAnyKind;
        reg(inst.a) = kinds ? kinds : kAnyKind;
        break;
      }
      case Opcode::LoadConst: {
        std::uint8_t kinds = constantKinds(module_.constants[static_cast<std::size_t>(inst.b)]);
        if (kinds == 0 && report) return fail(pc, "kind", fmt::format("LoadConst of string constant k{} (strings are only Assert messages)", inst.b));
        reg(inst.a) = kinds ? kinds : kAnyKind;
        break;
      }
      case Opcode::LoadTensor: reg(inst.a) = kTensor; break;
      case Opcode::LoadArg: reg(inst.a) = kindBitsOf(fn_.params[static_cast<std::size_t>(inst.b)].kind); break;
      case Opcode::CallOp: {
        const OpSite& site = fn_.op_sites[static_cast<std::size_t>(inst.a)];
        const OpSchema& schema = OpRegistry::global().schema(site.op);
        for (std::size_t i = 0; i < site.inputs.size(); ++i) {
          if (site.inputs[i] < 0) continue;
          const InputSpec& spec = inputSpecAt(schema, i);
          SVM_RETURN_IF_ERROR(use(state, pc, site.inputs[i], inputKinds(spec.kind),
                                  fmt::format("op '{}' input {} ('{}')", schema.name, i, spec.name), report));
        }
        for (std::int32_t r : site.outputs) reg(r) = kTensor;
        break;
      }
      case Opcode::Call: {
        const CallSite& site = fn_.call_sites[static_cast<std::size_t>(inst.a)];
        for (std::int32_t r : site.args) SVM_RETURN_IF_ERROR(use(state, pc, r, kAnyKind, "Call argument", report));
        for (std::int32_t r : site.results) reg(r) = kAnyKind;
        break;
      }
      case Opcode::StoreTensor:
        SVM_RETURN_IF_ERROR(use(state, pc, inst.a, kAnyKind, "StoreTensor value", report));
        state[static_cast<std::size_t>(fn_.num_registers + inst.b)] = 0;
        break;
      case Opcode::Return:
        if (report) {
          for (std::int32_t slot = 0; slot < fn_.num_outputs; ++slot) {
            if (state[static_cast<std::size_t>(fn_.num_registers + slot)]) {
              return fail(pc, "output-stored", fmt::format("output slot o{} may be unstored on a path reaching Return", slot));
            }
          }
        }
        break;
      case Opcode::BranchIf: SVM_RETURN_IF_ERROR(use(state, pc, inst.a, kScalar | kTensor, "BranchIf condition", report)); break;
      case Opcode::Assert: SVM_RETURN_IF_ERROR(use(state, pc, inst.a, kScalar | kTensor, "Assert condition", report)); break;
      case Opcode::And:
      case Opcode::Or:
        SVM_RETURN_IF_ERROR(use(state, pc, inst.b, kScalar, name + " operand", report));
        SVM_RETURN_IF_ERROR(use(state, pc, inst.c, kScalar, name + " operand", report));
        reg(inst.a) = kBool;
        break;
      case Opcode::Neg:
      case Opcode::Abs: {
        SVM_RETURN_IF_ERROR(use(state, pc, inst.b, kScalar, name + " operand", report));
        reg(inst.a) = arithmeticResult(reg(inst.b) & kAnyKind, 0);
        break;
      }
      case Opcode::Not:
      case Opcode::ToBool:
        SVM_RETURN_IF_ERROR(use(state, pc, inst.b, kAnyKind, name + " operand", report));
        reg(inst.a) = kBool;
        break;
      case Opcode::ToInt:
      case Opcode::ToFloat:
        SVM_RETURN_IF_ERROR(use(state, pc, inst.b, kScalar | kTensor, name + " operand", report));
        reg(inst.a) = inst.op == Opcode::ToInt ? kInt : kFloat;
        break;
      case Opcode::ShapeOf:
      case Opcode::DimOf:
      case Opcode::RankOf:
        SVM_RETURN_IF_ERROR(use(state, pc, inst.b, kTensor, name + " operand", report));
        reg(inst.a) = inst.op == Opcode::ShapeOf ? kTuple : kInt;
        break;
      case Opcode::TuplePack:
        for (std::int32_t i = 0; i < inst.c; ++i) {
          SVM_RETURN_IF_ERROR(use(state, pc, fn_.operand_pool[static_cast<std::size_t>(inst.b + i)], kAnyKind, "TuplePack item", report));
        }
        reg(inst.a) = kTuple;
        break;
      case Opcode::TupleUnpack:
        SVM_RETURN_IF_ERROR(use(state, pc, inst.a, kTuple, "TupleUnpack operand", report));
        for (std::int32_t i = 0; i < inst.c; ++i) reg(fn_.operand_pool[static_cast<std::size_t>(inst.b + i)]) = kAnyKind;
        break;
      case Opcode::TupleGet:
        SVM_RETURN_IF_ERROR(use(state, pc, inst.b, kTuple, "TupleGet tuple", report));
        SVM_RETURN_IF_ERROR(use(state, pc, inst.c, kInt | kBool, "TupleGet index", report));
        reg(inst.a) = kAnyKind;
        break;
      case Opcode::TupleLen:
        SVM_RETURN_IF_ERROR(use(state, pc, inst.b, kTuple, "TupleLen operand", report));
        reg(inst.a) = kInt;
        break;
      default: break;
    }
    return Status::ok();
  }

  Status dataflow() const {
    const int size = static_cast<int>(fn_.code.size());
    std::vector<std::uint8_t> leader(static_cast<std::size_t>(size) + 1, 0);
    leader[0] = 1;
    for (int pc = 0; pc < size; ++pc) {
      const Instruction& inst = fn_.code[static_cast<std::size_t>(pc)];
      if (endsBlock(inst.op)) {
        for (int s : successors(inst, pc)) leader[static_cast<std::size_t>(s)] = 1;
        leader[static_cast<std::size_t>(pc) + 1] = 1;
      }
    }
    std::vector<int> block_start, block_of(static_cast<std::size_t>(size), 0);
    for (int pc = 0; pc < size; ++pc) {
      if (leader[static_cast<std::size_t>(pc)]) block_start.push_back(pc);
      block_of[static_cast<std::size_t>(pc)] = static_cast<int>(block_start.size()) - 1;
    }
    block_start.push_back(size);
    const std::size_t blocks = block_start.size() - 1;
    const std::size_t width = static_cast<std::size_t>(fn_.num_registers) + static_cast<std::size_t>(fn_.num_outputs);
    if (blocks * width > (std::size_t{64} << 20)) {
      return failLimit(fmt::format("{} basic blocks x {} registers and outputs is too large to verify", blocks, width));
    }
    std::vector<State> in(blocks);
    // Whether a block's `in` is set: with no registers and no outputs every state is empty, so
    // in[b].empty() cannot tell (a loop in such a function used to requeue itself forever).
    std::vector<std::uint8_t> queued(blocks, 0), reached(blocks, 0);
    reached[0] = 1;
    in[0].assign(width, 0);
    std::fill(in[0].begin(), in[0].begin() + fn_.num_registers, kUnwritten);
    std::fill(in[0].begin() + fn_.num_registers, in[0].end(), 1);
    std::vector<std::size_t> worklist = {0};
    queued[0] = 1;
    State state;
    while (!worklist.empty()) {
      std::size_t b = worklist.back();
      worklist.pop_back();
      queued[b] = 0;
      state = in[b];
      const int last = block_start[b + 1] - 1;
      for (int pc = block_start[b]; pc <= last; ++pc) (void)transfer(state, pc, false);
      for (int s : successors(fn_.code[static_cast<std::size_t>(last)], last)) {
        auto target = static_cast<std::size_t>(block_of[static_cast<std::size_t>(s)]);
        bool changed = false;
        if (!reached[target]) {
          reached[target] = 1;
          in[target] = state;
          changed = true;
        } else {
          for (std::size_t i = 0; i < width; ++i) {
            std::uint8_t merged = in[target][i] | state[i];
            if (merged != in[target][i]) {
              in[target][i] = merged;
              changed = true;
            }
          }
        }
        if (changed && !queued[target]) {
          queued[target] = 1;
          worklist.push_back(target);
        }
      }
    }
    for (std::size_t b = 0; b < blocks; ++b) {
      if (!reached[b]) continue;  // unreachable
      state = in[b];
      for (int pc = block_start[b]; pc < block_start[b + 1]; ++pc) SVM_RETURN_IF_ERROR(transfer(state, pc, true));
    }
    return Status::ok();
  }

  const Module& module_;
  const Function& fn_;
};

Status verifyConstants(const Module& module) {
  for (std::size_t i = 0; i < module.constants.size(); ++i) {
    const Constant& c = module.constants[i];
    bool ok = false;
    switch (c.kind) {
      case ConstKind::None: ok = c.value.isNone(); break;
      case ConstKind::Int: ok = c.value.isInt(); break;
      case ConstKind::Float: ok = c.value.isFloat(); break;
      case ConstKind::Bool: ok = c.value.isBool(); break;
      case ConstKind::String: ok = c.value.isNone(); break;
      case ConstKind::Tensor: ok = c.value.isTensor() && c.value.tensor().defined(); break;
      case ConstKind::Ints:
        ok = c.value.isTuple() && std::all_of(c.value.tuple().begin(), c.value.tuple().end(), [](const Value& v) { return v.isInt(); });
        break;
      default: break;
    }
    if (!ok) {
      return makeError(ErrorCode::VerifyError, "verify: constant k{}: rule constant: kind {} does not match its value {}", i,
                       static_cast<int>(c.kind), c.value.describe());
    }
  }
  return Status::ok();
}

}  // namespace

Status verifyFunction(const Module& module, int function) {
  if (function < 0 || static_cast<std::size_t>(function) >= module.functions.size()) {
    return makeError(ErrorCode::VerifyError, "verify: no function {}", function);
  }
  std::lock_guard<std::mutex> lock(module.tokenMutex());
  return FunctionVerifier(module, function).run();
}

Status verifyModule(const Module& module) {
  SVM_RETURN_IF_ERROR(verifyConstants(module));
  for (std::size_t i = 0; i < module.functions.size(); ++i) {
    const std::string& name = module.functions[i].name;
    if (!isFunctionName(name)) {
      return makeError(ErrorCode::VerifyError, "verify: function {}: rule function-name: {} is not an identifier", i, quoteString(name));
    }
    if (module.findFunction(name) != static_cast<int>(i)) {
      return makeError(ErrorCode::VerifyError, "verify: function '{}': rule function-name: defined twice", name);
    }
  }
  std::lock_guard<std::mutex> lock(module.tokenMutex());
  for (std::size_t i = 0; i < module.functions.size(); ++i) SVM_RETURN_IF_ERROR(FunctionVerifier(module, static_cast<int>(i)).header());
  for (std::size_t i = 0; i < module.functions.size(); ++i) SVM_RETURN_IF_ERROR(FunctionVerifier(module, static_cast<int>(i)).run());
  return Status::ok();
}

}  // namespace shapevm
