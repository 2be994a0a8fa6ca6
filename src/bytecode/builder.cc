// SPDX-License-Identifier: Apache-2.0
// ModuleBuilder / FunctionBuilder: constant deduplication, op-site validation against the op
// schemas, label patching, named-call resolution and register/loop counting.
#include "bytecode/builder.h"

#include <algorithm>
#include <cstring>

#include "bytecode/instruction_info.h"

namespace shapevm {
namespace {

const InputSpec& inputSpecAt(const OpSchema& schema, std::size_t i) {
  return schema.inputs[std::min(i, schema.inputs.size() - 1)];
}

std::uint64_t floatBits(double value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

}  // namespace

FunctionBuilder::FunctionBuilder(ModuleBuilder* module, int index, std::string name)
    : module_(module), index_(index) {
  function_.name = std::move(name);
}

int FunctionBuilder::addParam(std::string name, ValueKind kind, TensorDescriptor token) {
  Param param;
  param.name = std::move(name);
  param.kind = kind;
  param.token = kind == ValueKind::Tensor ? std::move(token) : TensorDescriptor::notTensor();
  function_.params.push_back(std::move(param));
  return static_cast<int>(function_.params.size()) - 1;
}

void FunctionBuilder::declareDim(int id, std::string name) {
  if (id < 0 || id > 1000000) {
    if (error_.isOk()) error_ = makeError(ErrorCode::InvalidArgument, "function '{}': bad dim id {}", function_.name, id);
    return;
  }
  if (function_.dim_names.size() <= static_cast<std::size_t>(id)) function_.dim_names.resize(static_cast<std::size_t>(id) + 1);
  function_.dim_names[static_cast<std::size_t>(id)] = std::move(name);
}

int FunctionBuilder::emit(Opcode op, std::int32_t a, std::int32_t b, std::int32_t c) {
  Instruction inst;
  inst.op = op;
  inst.a = a;
  inst.b = b;
  inst.c = c;
  function_.code.push_back(inst);
  function_.locs.push_back(loc_);
  return pc() - 1;
}

Label FunctionBuilder::newLabel(std::string name) {
  labels_.push_back(LabelInfo{std::move(name), -1, {}});
  return Label{static_cast<int>(labels_.size()) - 1};
}

Status FunctionBuilder::bind(Label label) {
  LabelInfo& info = labels_.at(static_cast<std::size_t>(label.id));
  if (info.pc >= 0) {
    return makeError(ErrorCode::InvalidArgument, "function '{}': label '{}' bound twice", function_.name, info.name);
  }
  info.pc = pc();
  return Status::ok();
}

bool FunctionBuilder::isBound(Label label) const { return labels_.at(static_cast<std::size_t>(label.id)).pc >= 0; }

void FunctionBuilder::useLabel(Label label, int at_pc, int field) {
  labels_.at(static_cast<std::size_t>(label.id)).uses.emplace_back(at_pc, field);
}

int FunctionBuilder::emitJump(Label target) {
  int at = emit(Opcode::Jump);
  useLabel(target, at, 0);
  return at;
}

int FunctionBuilder::emitBranchIf(std::int32_t cond, Label if_true, Label if_false) {
  int at = emit(Opcode::BranchIf, cond);
  useLabel(if_true, at, 1);
  useLabel(if_false, at, 2);
  return at;
}

Expected<int> FunctionBuilder::addOpSite(std::string_view op, std::vector<std::int32_t> inputs,
                                         std::vector<std::int32_t> outputs, const NamedAttrs& attrs,
                                         std::vector<TensorDescriptor> input_tokens,
                                         std::vector<TensorDescriptor> output_tokens) {
  const OpSchema* schema = OpRegistry::global().find(op);
  if (schema == nullptr) return makeError(ErrorCode::UnknownName, "unknown op '{}'", op);
  return addOpSite(schema->id, std::move(inputs), std::move(outputs), attrs, std::move(input_tokens),
                   std::move(output_tokens));
}

Expected<int> FunctionBuilder::addOpSite(OpId op, std::vector<std::int32_t> inputs, std::vector<std::int32_t> outputs,
                                         const NamedAttrs& attrs, std::vector<TensorDescriptor> input_tokens,
                                         std::vector<TensorDescriptor> output_tokens) {
  const OpSchema& schema = OpRegistry::global().schema(op);
  SVM_ASSIGN_OR_RETURN(std::vector<AttrValue> resolved, resolveAttrs(schema, attrs));
  SVM_ASSIGN_OR_RETURN(int output_count, numOutputs(schema, resolved));
  const int input_count = static_cast<int>(inputs.size());
  if (input_count < schema.minInputs() || (schema.maxInputs() >= 0 && input_count > schema.maxInputs())) {
    return makeError(ErrorCode::InvalidArgument, "op '{}' takes {}{} inputs, got {}", schema.name, schema.minInputs(),
                     schema.maxInputs() < 0                        ? " or more"
                     : schema.maxInputs() == schema.minInputs() ? ""
                                                                   : fmt::format(" to {}", schema.maxInputs()),
                     input_count);
  }
  if (static_cast<int>(outputs.size()) != output_count) {
    return makeError(ErrorCode::InvalidArgument, "op '{}' produces {} outputs here, got {} output registers", schema.name,
                     output_count, outputs.size());
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] < 0 && !inputSpecAt(schema, i).optional) {
      return makeError(ErrorCode::InvalidArgument, "op '{}' input {} ('{}') is not optional and cannot be none",
                       schema.name, i, inputSpecAt(schema, i).name);
    }
  }
  if (input_tokens.empty()) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      bool tensor = inputs[i] >= 0 && inputSpecAt(schema, i).kind == InputKind::Tensor;
      input_tokens.push_back(tensor ? TensorDescriptor::anyTensor() : TensorDescriptor::notTensor());
    }
  }
  if (output_tokens.empty()) output_tokens.assign(outputs.size(), TensorDescriptor::anyTensor());
  if (input_tokens.size() != inputs.size() || output_tokens.size() != outputs.size()) {
    return makeError(ErrorCode::InvalidArgument, "op '{}': {} inputs need {} input tokens (got {}), {} outputs need {} (got {})",
                     schema.name, inputs.size(), inputs.size(), input_tokens.size(), outputs.size(), outputs.size(),
                     output_tokens.size());
  }
  OpSite site;
  site.op = op;
  site.inputs = std::move(inputs);
  site.outputs = std::move(outputs);
  site.attrs = std::move(resolved);
  for (const auto& [name, value] : attrs) site.attrs_given |= std::uint64_t{1} << schema.attrIndex(name);
  site.input_tokens = std::move(input_tokens);
  site.output_tokens = std::move(output_tokens);
  function_.op_sites.push_back(std::move(site));
  return static_cast<int>(function_.op_sites.size()) - 1;
}

Expected<int> FunctionBuilder::emitCallOp(std::string_view op, std::vector<std::int32_t> inputs,
                                          std::vector<std::int32_t> outputs, const NamedAttrs& attrs,
                                          std::vector<TensorDescriptor> input_tokens,
                                          std::vector<TensorDescriptor> output_tokens) {
  SVM_ASSIGN_OR_RETURN(int site, addOpSite(op, std::move(inputs), std::move(outputs), attrs, std::move(input_tokens),
                                           std::move(output_tokens)));
  return emit(Opcode::CallOp, site);
}

int FunctionBuilder::addCallSite(int callee, std::vector<std::int32_t> args, std::vector<std::int32_t> results) {
  function_.call_sites.push_back(CallSite{callee, std::move(args), std::move(results)});
  return static_cast<int>(function_.call_sites.size()) - 1;
}

int FunctionBuilder::emitCall(int callee, std::vector<std::int32_t> args, std::vector<std::int32_t> results) {
  return emit(Opcode::Call, addCallSite(callee, std::move(args), std::move(results)));
}

int FunctionBuilder::emitCall(std::string callee, std::vector<std::int32_t> args, std::vector<std::int32_t> results) {
  int site = addCallSite(-1, std::move(args), std::move(results));
  named_calls_.push_back(NamedCall{site, std::move(callee)});
  return emit(Opcode::Call, site);
}

int FunctionBuilder::addRegisterList(std::span<const std::int32_t> registers) {
  int offset = static_cast<int>(function_.operand_pool.size());
  function_.operand_pool.insert(function_.operand_pool.end(), registers.begin(), registers.end());
  return offset;
}

int FunctionBuilder::emitTuplePack(std::int32_t dst, std::span<const std::int32_t> items) {
  int offset = addRegisterList(items);
  return emit(Opcode::TuplePack, dst, offset, static_cast<std::int32_t>(items.size()));
}

int FunctionBuilder::emitTupleUnpack(std::int32_t src, std::span<const std::int32_t> items) {
  int offset = addRegisterList(items);
  return emit(Opcode::TupleUnpack, src, offset, static_cast<std::int32_t>(items.size()));
}

Expected<Function> FunctionBuilder::finish(const ModuleBuilder& module) {
  if (!error_.isOk()) return error_;
  Function fn = function_;
  for (const LabelInfo& label : labels_) {
    if (label.uses.empty()) continue;
    if (label.pc < 0) {
      return makeError(ErrorCode::InvalidArgument, "function '{}': label '{}' used at PC 0x{:04X} but never bound",
                       fn.name, label.name, label.uses.front().first);
    }
    for (auto [at, field] : label.uses) {
      Instruction& inst = fn.code[static_cast<std::size_t>(at)];
      (field == 0 ? inst.a : field == 1 ? inst.b : inst.c) = label.pc;
    }
  }
  for (const NamedCall& call : named_calls_) {
    int callee = module.findFunction(call.callee);
    if (callee < 0) {
      return makeError(ErrorCode::UnknownName, "function '{}': call to unknown function '{}'", fn.name, call.callee);
    }
    fn.call_sites[static_cast<std::size_t>(call.site)].callee = callee;
  }
  // Counts: max id used + 1 unless declared.
  std::int32_t max_register = -1, max_loop = -1;
  auto seeRegister = [&](std::int32_t r) { max_register = std::max(max_register, r); };
  for (const Instruction& inst : fn.code) {
    if (static_cast<int>(inst.op) >= kNumOpcodes) continue;
    const std::int32_t fields[3] = {inst.a, inst.b, inst.c};
    for (int f = 0; f < 3; ++f) {
      if (operandRole(inst.op, f) == OperandRole::Loop) max_loop = std::max(max_loop, fields[f]);
    }
    // Register fields; the operand pool and the sites are counted whole below.
    visitRegisters<const std::int32_t>(inst.op, inst.a, inst.b, inst.c, RegisterLists<const std::int32_t>{},
                                       [&](const std::int32_t& r, bool) { seeRegister(r); });
  }
  for (std::int32_t r : fn.operand_pool) seeRegister(r);
  for (const OpSite& site : fn.op_sites) {
    for (std::int32_t r : site.inputs) seeRegister(r);
    for (std::int32_t r : site.outputs) seeRegister(r);
  }
  for (const CallSite& site : fn.call_sites) {
    for (std::int32_t r : site.args) seeRegister(r);
    for (std::int32_t r : site.results) seeRegister(r);
  }
  fn.num_registers = explicit_registers_ >= 0 ? explicit_registers_ : max_register + 1;
  fn.num_loops = explicit_loops_ >= 0 ? explicit_loops_ : max_loop + 1;
  return fn;
}

ModuleBuilder::ModuleBuilder(std::string name) : name_(std::move(name)) {}

int ModuleBuilder::addConstant(Constant constant) {
  constants_.push_back(std::move(constant));
  return numConstants() - 1;
}

int ModuleBuilder::constNone() {
  for (int i = 0; i < numConstants(); ++i) {
    if (constants_[static_cast<std::size_t>(i)].kind == ConstKind::None) return i;
  }
  return addConstant(Constant{});
}

int ModuleBuilder::constInt(std::int64_t value) {
  for (int i = 0; i < numConstants(); ++i) {
    const Constant& c = constants_[static_cast<std::size_t>(i)];
    if (c.kind == ConstKind::Int && c.value.asInt() == value) return i;
  }
  return addConstant(Constant{ConstKind::Int, Value::fromInt(value), ""});
}

int ModuleBuilder::constFloat(double value) {
  for (int i = 0; i < numConstants(); ++i) {
    const Constant& c = constants_[static_cast<std::size_t>(i)];
    if (c.kind == ConstKind::Float && floatBits(c.value.asFloat()) == floatBits(value)) return i;
  }
  return addConstant(Constant{ConstKind::Float, Value::fromFloat(value), ""});
}

int ModuleBuilder::constBool(bool value) {
  for (int i = 0; i < numConstants(); ++i) {
    const Constant& c = constants_[static_cast<std::size_t>(i)];
    if (c.kind == ConstKind::Bool && c.value.asBool() == value) return i;
  }
  return addConstant(Constant{ConstKind::Bool, Value::fromBool(value), ""});
}

int ModuleBuilder::constString(std::string text) {
  for (int i = 0; i < numConstants(); ++i) {
    const Constant& c = constants_[static_cast<std::size_t>(i)];
    if (c.kind == ConstKind::String && c.text == text) return i;
  }
  return addConstant(Constant{ConstKind::String, Value(), std::move(text)});
}

int ModuleBuilder::constInts(std::vector<std::int64_t> values) {
  for (int i = 0; i < numConstants(); ++i) {
    const Constant& c = constants_[static_cast<std::size_t>(i)];
    if (c.kind != ConstKind::Ints || c.value.tuple().size() != values.size()) continue;
    bool same = true;
    for (std::size_t k = 0; k < values.size() && same; ++k) same = c.value.tuple()[k].asInt() == values[k];
    if (same) return i;
  }
  return addConstant(Constant{ConstKind::Ints, Value::fromInts(values), ""});
}

int ModuleBuilder::constTensor(Tensor tensor) {
  return addConstant(Constant{ConstKind::Tensor, Value::fromTensor(std::move(tensor)), ""});
}

FunctionBuilder& ModuleBuilder::addFunction(std::string name) {
  functions_.push_back(std::make_unique<FunctionBuilder>(this, numFunctions(), std::move(name)));
  return *functions_.back();
}

int ModuleBuilder::findFunction(std::string_view name) const {
  for (std::size_t i = 0; i < functions_.size(); ++i) {
    if (functions_[i]->name() == name) return static_cast<int>(i);
  }
  return -1;
}

Expected<Module> ModuleBuilder::finish() {
  Module module;
  module.name = name_;
  module.source_file = source_file_;
  module.constants = constants_;
  for (auto& function : functions_) {
    SVM_ASSIGN_OR_RETURN(Function fn, function->finish(*this));
    module.functions.push_back(std::move(fn));
  }
  return module;
}

}  // namespace shapevm
