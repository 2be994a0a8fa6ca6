// SPDX-License-Identifier: Apache-2.0
// Lowering, part 1: the module (functions, classes and their self.<name> parameters, module
// constants), function bodies and statements (assignment, control flow with LoopStart/LoopEnd
// around every loop body, returns through output slots, assert) and the core expressions.
// Variables assigned more than once keep one register; their shape tokens are joined over all
// assignments (re-lowering until stable) so a token never claims more than every path guarantees.
#include "frontend/lowering.h"

#include <algorithm>
#include <cctype>
#include <functional>

#include <fmt/format.h>

#include "bytecode/verifier.h"
#include "frontend/lexer.h"
#include "support/native_stack.h"

namespace shapevm::frontend {

Status Lowerer::error(ErrorCode code, std::string_view message, int line, int col) const {
  return frontendError(code, message, line, col);
}

Status Lowerer::checkStack(int line, int col) const {
  if (nativeStackHasRoom()) return Status::ok();
  return error(ErrorCode::LimitExceeded, "nested too deeply for the native stack (lower tunable max_nesting)", line,
               col);
}

IrInst& Lowerer::emit(Opcode op, std::int32_t a, std::int32_t b, std::int32_t c) {
  IrInst inst;
  inst.op = op;
  inst.a = a;
  inst.b = b;
  inst.c = c;
  inst.loc = loc_;
  fn_->code.push_back(std::move(inst));
  return fn_->code.back();
}

void Lowerer::emitJump(int label) { emit(Opcode::Jump).target_true = label; }

void Lowerer::emitBranch(std::int32_t cond, int if_true, int if_false) {
  IrInst& inst = emit(Opcode::BranchIf, cond);
  inst.target_true = if_true;
  inst.target_false = if_false;
}

std::int32_t Lowerer::materialize(Val& v) {
  if (v.reg >= 0) return v.reg;
  std::int32_t r = newReg();
  if (v.static_tuple) {
    bool all_ints = true;
    for (const Val& item : v.items) all_ints = all_ints && item.is_const && item.kind == VKind::Int;
    if (all_ints) {
      IrInst& inst = emit(Opcode::LoadConst, r);
      inst.constant.kind = ConstKind::Ints;
      for (const Val& item : v.items) inst.constant.ints.push_back(item.i);
    } else {
      std::vector<std::int32_t> regs;
      for (Val& item : v.items) regs.push_back(materialize(item));
      emit(Opcode::TuplePack, r).inputs = regs;
    }
    v.reg = r;
    return r;
  }
  IrInst& inst = emit(Opcode::LoadConst, r);
  switch (v.kind) {
    case VKind::Int: inst.constant.kind = ConstKind::Int; inst.constant.i = v.i; break;
    case VKind::Float: inst.constant.kind = ConstKind::Float; inst.constant.f = v.f; break;
    case VKind::Bool: inst.constant.kind = ConstKind::Bool; inst.constant.b = v.b; break;
    default: inst.constant.kind = ConstKind::None; break;
  }
  v.reg = r;
  return r;
}

Val Lowerer::loadConstInt(std::int64_t value) {
  Val v = Val::ofInt(value);
  materialize(v);
  return v;
}

std::string Lowerer::sourceLine(int line) const {
  int current = 1;
  std::size_t start = 0;
  while (current < line && start < source_.size()) {
    std::size_t nl = source_.find('\n', start);
    if (nl == std::string_view::npos) return "";
    start = nl + 1;
    ++current;
  }
  std::size_t end = source_.find('\n', start);
  std::string text(source_.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
  std::size_t first = text.find_first_not_of(" \t");
  std::size_t last = text.find_last_not_of(" \t\r");
  return first == std::string::npos ? "" : text.substr(first, last - first + 1);
}

// ---- module ----

namespace {

void walkExprs(const Expr* e, const std::function<void(const Expr&)>& visit) {
  if (e == nullptr) return;
  visit(*e);
  walkExprs(e->lhs.get(), visit);
  walkExprs(e->rhs.get(), visit);
  for (const ExprPtr& item : e->items) walkExprs(item.get(), visit);
  for (const auto& kw : e->keywords) walkExprs(kw.second.get(), visit);
  for (const ExprPtr& part : e->slice_parts) walkExprs(part.get(), visit);
}

void walkStmts(const std::vector<StmtPtr>& body, const std::function<void(const Stmt&)>& visit_stmt,
               const std::function<void(const Expr&)>& visit_expr) {
  for (const StmtPtr& s : body) {
    visit_stmt(*s);
    for (const ExprPtr& t : s->targets) walkExprs(t.get(), visit_expr);
    walkExprs(s->value.get(), visit_expr);
    walkExprs(s->message.get(), visit_expr);
    walkStmts(s->body, visit_stmt, visit_expr);
    walkStmts(s->orelse, visit_stmt, visit_expr);
  }
}

bool isSelfAttr(const Expr& e) {
  return e.kind == ExprKind::Attribute && e.lhs && e.lhs->kind == ExprKind::Name && e.lhs->name == "self";
}

bool isMainGuard(const Stmt& s) {
  return s.kind == StmtKind::If && s.value && s.value->kind == ExprKind::Compare && s.value->items.size() == 2 &&
         s.value->items[0]->kind == ExprKind::Name && s.value->items[0]->name == "__name__";
}

}  // namespace

Status Lowerer::collectFunctions(const ModuleAst& module) {
  auto addFunction = [&](const Stmt& def, const std::string& class_name) -> Status {
    std::string name = class_name.empty() ? def.name : class_name + "." + def.name;
    if (functions_.count(name)) return error(ErrorCode::InvalidArgument, fmt::format("function `{}` is defined twice", name), def.line, def.col);
    FunctionInfo info;
    info.name = name;
    info.class_name = class_name;
    info.def = &def;
    functions_[name] = std::move(info);
    order_.push_back(name);
    return Status::ok();
  };
  for (const StmtPtr& s : module.body) {
    switch (s->kind) {
      case StmtKind::Import:
      case StmtKind::Pass: break;
      case StmtKind::Expr:
        if (s->value->kind != ExprKind::Str) {
          return error(ErrorCode::Unsupported, "statements at module level are not supported in ShapeVM modules (only imports, constants, functions and classes)", s->line, s->col);
        }
        break;
      case StmtKind::FunctionDef: SVM_RETURN_IF_ERROR(addFunction(*s, "")); break;
      case StmtKind::Assign: {
        if (s->targets.size() != 1 || s->targets[0]->kind != ExprKind::Name) {
          return error(ErrorCode::Unsupported, "only `NAME = constant` assignments are supported at module level", s->line, s->col);
        }
        auto v = constEval(*s->value);
        if (!v) return error(ErrorCode::Unsupported, fmt::format("module-level `{}` must be a constant", s->targets[0]->name), s->line, s->col);
        globals_[s->targets[0]->name] = *v;
        break;
      }
      case StmtKind::ClassDef: {
        ClassInfo& cls = classes_[s->name];
        for (const StmtPtr& m : s->body) {
          if (m->kind == StmtKind::FunctionDef) {
            cls.methods.insert(m->name);
            if (m->name == "__init__") continue;  // runs only under CPython; parameters come from --params
            if (m->params.empty() || m->params[0].name != "self") {
              return error(ErrorCode::Unsupported, fmt::format("method `{}` must take `self` first (static methods are not supported)", m->name), m->line, m->col);
            }
            SVM_RETURN_IF_ERROR(addFunction(*m, s->name));
          } else if (m->kind == StmtKind::Assign && m->targets.size() == 1 && m->targets[0]->kind == ExprKind::Name) {
            auto v = constEval(*m->value);
            if (!v) return error(ErrorCode::Unsupported, "class attributes must be constants", m->line, m->col);
            cls.constants[m->targets[0]->name] = *v;
          } else if (m->kind == StmtKind::Pass || (m->kind == StmtKind::Expr && m->value->kind == ExprKind::Str)) {
          } else {
            return error(ErrorCode::Unsupported, "only methods and constants are supported in a class body", m->line, m->col);
          }
        }
        break;
      }
      case StmtKind::If:
        if (isMainGuard(*s)) break;  // `if __name__ == "__main__":` runs only under CPython
        [[fallthrough]];
      default:
        return error(ErrorCode::Unsupported, "statements at module level are not supported in ShapeVM modules (only imports, constants, functions and classes)", s->line, s->col);
    }
  }
  // self.<name> reads become parameters; a method calling self.other(...) passes other's too.
  std::map<std::string, std::vector<std::string>> own, callees;
  for (auto& [name, info] : functions_) {
    if (info.class_name.empty()) continue;
    const ClassInfo& cls = classes_[info.class_name];
    walkStmts(info.def->body, [](const Stmt&) {}, [&, name = name](const Expr& e) {
      if (e.kind == ExprKind::Call && e.lhs && isSelfAttr(*e.lhs) && cls.methods.count(e.lhs->name)) {
        callees[name].push_back(info.class_name + "." + e.lhs->name);
      } else if (isSelfAttr(e) && !cls.methods.count(e.name) && !cls.constants.count(e.name)) {
        auto& list = own[name];
        if (std::find(list.begin(), list.end(), e.name) == list.end()) list.push_back(e.name);
      }
    });
  }
  for (auto& [name, info] : functions_) {
    if (info.class_name.empty()) continue;
    std::set<std::string> seen;
    std::function<void(const std::string&)> collect = [&](const std::string& fn) {
      if (!seen.insert(fn).second) return;
      for (const std::string& attr : own[fn]) {
        if (std::find(info.self_attrs.begin(), info.self_attrs.end(), attr) == info.self_attrs.end()) info.self_attrs.push_back(attr);
      }
      for (const std::string& callee : callees[fn]) collect(callee);
    };
    collect(name);
  }
  return Status::ok();
}

namespace {

// Module functions a function calls (syntactically).
std::vector<std::string> calledFunctions(const FunctionInfo& info, const std::map<std::string, FunctionInfo>& functions) {
  std::vector<std::string> out;
  walkStmts(info.def->body, [](const Stmt&) {}, [&](const Expr& e) {
    if (e.kind != ExprKind::Call || !e.lhs) return;
    std::string name;
    if (e.lhs->kind == ExprKind::Name) name = e.lhs->name;
    if (isSelfAttr(*e.lhs) && !info.class_name.empty()) name = info.class_name + "." + e.lhs->name;
    if (!name.empty() && functions.count(name) && std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  });
  return out;
}

// Outputs of a function from its first `return` (used only for recursive calls).
int prescanOutputs(const FunctionInfo& info, const std::map<std::string, FunctionInfo>& functions, std::set<std::string>& guard) {
  if (!guard.insert(info.name).second) return 1;
  int result = 0;
  bool found = false;
  walkStmts(info.def->body, [&](const Stmt& s) {
    if (found || s.kind != StmtKind::Return || !s.value) return;
    found = true;
    if (s.value->kind == ExprKind::Tuple) {
      result = static_cast<int>(s.value->items.size());
    } else if (s.value->kind == ExprKind::Call && s.value->lhs && s.value->lhs->kind == ExprKind::Name &&
               functions.count(s.value->lhs->name)) {
      result = prescanOutputs(functions.at(s.value->lhs->name), functions, guard);
    } else {
      result = 1;
    }
  }, [](const Expr&) {});
  return result;
}

}  // namespace

Expected<std::vector<IrFunction>> Lowerer::run(const ModuleAst& module) {
  SVM_RETURN_IF_ERROR(collectFunctions(module));
  std::vector<std::string> roots;
  if (!options_.entry.empty()) {
    std::string entry = options_.entry;
    if (!functions_.count(entry)) {
      std::vector<std::string> matches;
      for (const std::string& name : order_) {
        if (name.size() > entry.size() && name.compare(name.size() - entry.size(), entry.size(), entry) == 0 &&
            name[name.size() - entry.size() - 1] == '.') {
          matches.push_back(name);
        }
      }
      if (matches.size() != 1) {
        std::string known;
        for (const std::string& name : order_) known += (known.empty() ? "" : ", ") + name;
        return makeError(matches.empty() ? ErrorCode::UnknownName : ErrorCode::InvalidArgument,
                         "{}: {} function '{}' in the module (functions: {})", filename_,
                         matches.empty() ? "no" : "more than one", entry, known);
      }
      entry = matches[0];
    }
    roots.push_back(entry);
  } else {
    roots = order_;
  }
  // Callees first, so callers know their result counts and shapes.
  std::vector<std::string> post_order, emit_order;
  std::set<std::string> visited;
  std::function<void(const std::string&)> visit = [&](const std::string& name) {
    if (!visited.insert(name).second) return;
    emit_order.push_back(name);
    for (const std::string& callee : calledFunctions(functions_[name], functions_)) visit(callee);
    post_order.push_back(name);
  };
  for (const std::string& root : roots) visit(root);
  for (auto& [name, info] : functions_) {
    std::set<std::string> guard;
    info.num_outputs = prescanOutputs(info, functions_, guard);
  }
  std::map<std::string, std::vector<std::string>> calls;
  for (const std::string& name : post_order) calls[name] = calledFunctions(functions_[name], functions_);
  for (const std::string& name : post_order) {  // recursion is never inlined
    std::set<std::string> seen;
    std::vector<std::string> work = calls[name];
    while (!work.empty() && !recursive_.count(name)) {
      std::string next = std::move(work.back());
      work.pop_back();
      if (next == name) recursive_.insert(name);
      if (!seen.insert(next).second) continue;
      for (const std::string& callee : calls[next]) work.push_back(callee);
    }
  }
  for (const std::string& name : post_order) SVM_RETURN_IF_ERROR(lowerFunction(functions_[name]));
  std::vector<IrFunction> result;
  if (options_.entry.empty()) {
    for (const std::string& name : order_) {
      if (visited.count(name)) result.push_back(std::move(lowered_[name]));
    }
  } else {
    // Only the entry and what it still calls once inlining is done.
    std::set<std::string> called = {emit_order.front()};
    std::vector<std::string> work = {emit_order.front()};
    while (!work.empty()) {
      const std::string name = std::move(work.back());
      work.pop_back();
      for (const IrInst& inst : lowered_[name].code) {
        if (!inst.isLabel() && inst.op == Opcode::Call && called.insert(inst.op_name).second)
          work.push_back(inst.op_name);
      }
    }
    for (const std::string& name : emit_order) {
      if (called.count(name)) result.push_back(std::move(lowered_[name]));
    }
  }
  return result;
}

// ---- functions ----

void Lowerer::countTarget(const Expr& target) {
  if (target.kind == ExprKind::Name) {
    ++vars_[target.name].assignments;
  } else if (target.kind == ExprKind::Tuple || target.kind == ExprKind::List) {
    for (const ExprPtr& item : target.items) countTarget(*item);
  }
}

void Lowerer::countAssignments(const std::vector<StmtPtr>& body) {
  for (const StmtPtr& s : body) {
    if (s->kind == StmtKind::Assign || s->kind == StmtKind::AugAssign || s->kind == StmtKind::For) {
      for (const ExprPtr& t : s->targets) countTarget(*t);
      if (s->kind != StmtKind::Assign) {
        for (const ExprPtr& t : s->targets) countTarget(*t);  // augmented/loop targets are never single-assigned
      }
    }
    countAssignments(s->body);
    countAssignments(s->orelse);
  }
}

Status Lowerer::lowerFunction(FunctionInfo& info) {
  pinned_.clear();
  for (int pass = 0; pass < 6; ++pass) {
    IrFunction out;
    SVM_RETURN_IF_ERROR(lowerFunctionPass(info, out));
    bool changed = false;
    for (auto& [name, tokens] : assigned_tokens_) {
      if (vars_[name].assignments <= 1 || tokens.empty()) continue;
      TensorDescriptor joined = tokens[0];
      bool all_equal = true;
      for (const TensorDescriptor& t : tokens) {
        all_equal = all_equal && t == tokens[0];
        joined = joinTokens(joined, t);
      }
      auto it = pinned_.find(name);
      if (it == pinned_.end()) {
        if (!all_equal) {
          pinned_[name] = joined;
          changed = true;
        }
      } else if (!(joinTokens(it->second, joined) == it->second)) {
        it->second = joinTokens(it->second, joined);
        changed = true;
      }
    }
    if (!changed || pass == 5) {
      if (changed) {  // did not settle: no tokens on multi-assigned variables
        for (auto& [name, tokens] : assigned_tokens_) pinned_[name] = TensorDescriptor::anyTensor();
        out = IrFunction();
        SVM_RETURN_IF_ERROR(lowerFunctionPass(info, out));
      }
      for (const auto& [name, var] : vars_) {  // debug info: which register holds which variable
        const std::int32_t reg = var.has_static ? (var.value.static_tuple ? -1 : var.value.reg) : var.reg;
        if (reg >= 0) out.reg_names.emplace(reg, name);
      }
      if (options_.inline_calls) {
        inlineCalls(out, [&](const std::string& callee) -> const IrFunction* {
          auto it = lowered_.find(callee);
          return recursive_.count(callee) || it == lowered_.end() ? nullptr : &it->second;
        });
      }
      if (options_.reshape) mergeReshapes(out);
      if (options_.dce) eliminateDeadCode(out);
      compactRegisters(out);
      // Short functions keep one register per value (what the JIT's analyses have always seen);
      // only a function beyond the bytecode's limit shares registers between dead values.
      if (out.num_registers > kMaxRegisters || options_.share_registers) reuseDeadRegisters(out);
      if (out.num_registers > kMaxRegisters) {
        return error(ErrorCode::LimitExceeded,
                     fmt::format("function '{}' holds {} values live at once, more than the {} registers a "
                                 "function may have; split it into smaller functions",
                                 info.name, out.num_registers, kMaxRegisters),
                     info.def->line, info.def->col);
      }
      info.lowered = true;
      lowered_[info.name] = std::move(out);
      return Status::ok();
    }
  }
  return Status::ok();
}

Expected<Val> Lowerer::paramAnnotation(const frontend::Param& p, IrFunction& out, std::map<std::string, int>& dims) {
  Val v;
  v.kind = VKind::Tensor;
  const Expr* ann = p.annotation.get();
  if (ann == nullptr) return v;
  auto isTensorName = [](const Expr& e) {
    return (e.kind == ExprKind::Name && e.name == "Tensor") || (e.kind == ExprKind::Attribute && e.name == "Tensor");
  };
  if (ann->kind == ExprKind::Name && (ann->name == "int" || ann->name == "float" || ann->name == "bool")) {
    v.kind = ann->name == "int" ? VKind::Int : ann->name == "float" ? VKind::Float : VKind::Bool;
    return v;
  }
  if (isTensorName(*ann)) return v;
  if (ann->kind != ExprKind::Subscript || !isTensorName(*ann->lhs)) {
    return error(ErrorCode::Unsupported, "parameter annotations must be Tensor, Tensor[dims...], int, float or bool", *ann);
  }
  std::vector<const Expr*> items;
  if (ann->rhs->kind == ExprKind::Tuple) {
    for (const ExprPtr& item : ann->rhs->items) items.push_back(item.get());
  } else {
    items.push_back(ann->rhs.get());
  }
  TensorDescriptor token;
  for (const Expr* item : items) {
    if (item->kind == ExprKind::Int) {
      token.dims.push_back(DimToken::fixed(item->int_value));
    } else if (item->kind == ExprKind::None) {
      int id = static_cast<int>(out.dim_names.size());
      out.dim_names.emplace_back();
      token.dims.push_back(DimToken::dynamic(id));
    } else if (item->kind == ExprKind::Str) {
      const std::string& name = item->name;
      const bool identifier = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
                              std::all_of(name.begin(), name.end(), [](char c) {
                                return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                              });
      if (!identifier) {
        return error(ErrorCode::InvalidArgument,
                     fmt::format("a Tensor annotation dim name must be an identifier, got \"{}\"", name), *item);
      }
      auto it = dims.find(item->name);
      if (it == dims.end()) {
        it = dims.emplace(item->name, static_cast<int>(out.dim_names.size())).first;
        out.dim_names.push_back(item->name);
      }
      token.dims.push_back(DimToken::dynamic(it->second));
    } else {
      return error(ErrorCode::Unsupported, "a Tensor annotation dim must be an int, a \"name\" or None", *item);
    }
  }
  v.token = token;
  return v;
}

Status Lowerer::lowerFunctionPass(FunctionInfo& info, IrFunction& out) {
  fn_ = &out;
  out.name = info.name;
  vars_.clear();
  var_regs_.clear();
  static_regs_.clear();
  loops_.clear();
  next_reg_ = 0;
  terminated_ = false;
  assigned_tokens_.clear();
  returns_.clear();
  return_line_ = 0;
  current_ = &info;
  class_name_ = info.class_name;
  const Stmt& def = *info.def;
  countAssignments(def.body);
  std::map<std::string, int> dims;
  bool first = true;
  for (const frontend::Param& p : def.params) {
    if (first && !info.class_name.empty()) {  // self
      first = false;
      continue;
    }
    first = false;
    setLoc(p.line, p.col);
    SVM_ASSIGN_OR_RETURN(Val v, paramAnnotation(p, out, dims));
    IrParam param;
    param.name = p.name;
    param.kind = v.kind == VKind::Int ? ValueKind::Int : v.kind == VKind::Float ? ValueKind::Float
               : v.kind == VKind::Bool ? ValueKind::Bool : ValueKind::Tensor;
    param.token = v.token;
    out.params.push_back(param);
    VarInfo& var = vars_[p.name];
    var.assignments += 1;
    var.reg = newReg();
    var_regs_.insert(var.reg);
    emit(param.kind == ValueKind::Tensor ? Opcode::LoadTensor : Opcode::LoadArg, var.reg,
         static_cast<std::int32_t>(out.params.size() - 1));
    v.reg = var.reg;
    var.value = v;
    if (v.kind == VKind::Tensor) assigned_tokens_[p.name].push_back(v.token);
  }
  for (const std::string& attr : info.self_attrs) {
    IrParam param;
    param.name = attr;
    out.params.push_back(param);
    std::string key = "self." + attr;
    VarInfo& var = vars_[key];
    var.assignments = 1;
    var.reg = newReg();
    var_regs_.insert(var.reg);
    setLoc(def.line, def.col);
    emit(Opcode::LoadTensor, var.reg, static_cast<std::int32_t>(out.params.size() - 1));
    var.value = Val::reg_of(VKind::Tensor, var.reg);
  }
  out.num_outputs = -1;
  SVM_RETURN_IF_ERROR(lowerBlock(def.body));
  if (out.num_outputs < 0) out.num_outputs = 0;
  bool ends_in_label = !out.code.empty() && out.code.back().isLabel();
  if (!terminated_ || ends_in_label) {
    setLoc(def.line, def.col);
    for (int slot = 0; slot < out.num_outputs; ++slot) {
      Val none = Val::none();
      emit(Opcode::StoreTensor, materialize(none), slot);
    }
    emit(Opcode::Return);
  }
  out.num_registers = next_reg_;
  info.num_outputs = out.num_outputs;
  info.result_shapes = returns_;
  fn_ = nullptr;
  return Status::ok();
}

// ---- statements ----

Status Lowerer::lowerBlock(const std::vector<StmtPtr>& body) {
  for (const StmtPtr& s : body) {
    if (terminated_) break;  // unreachable after return/break/continue
    SVM_RETURN_IF_ERROR(lowerStmt(*s));
  }
  return Status::ok();
}

Status Lowerer::lowerStmt(const Stmt& s) {
  setLoc(s.line, s.col);
  SVM_RETURN_IF_ERROR(checkStack(s.line, s.col));
  switch (s.kind) {
    case StmtKind::Pass:
    case StmtKind::Import: return Status::ok();
    case StmtKind::Expr: {
      if (s.value->kind == ExprKind::Str) return Status::ok();  // docstring
      SVM_ASSIGN_OR_RETURN(Val ignored, lowerExpr(*s.value));
      (void)ignored;
      return Status::ok();
    }
    case StmtKind::Assign: {
      SVM_ASSIGN_OR_RETURN(Val v, lowerExpr(*s.value));
      for (const ExprPtr& target : s.targets) SVM_RETURN_IF_ERROR(lowerAssign(*target, v, s));
      return Status::ok();
    }
    case StmtKind::AugAssign: {
      const Expr& target = *s.targets[0];
      if (target.kind != ExprKind::Name) {
        return error(ErrorCode::Unsupported, "augmented assignment to anything but a name is not supported", target);
      }
      SVM_ASSIGN_OR_RETURN(Val current, readName(target));
      SVM_ASSIGN_OR_RETURN(Val rhs, lowerExpr(*s.value));
      setLoc(s.line, s.col);
      SVM_ASSIGN_OR_RETURN(Val result, lowerBinary(s.op, current, rhs, *s.value));
      return assignName(target.name, result, target);
    }
    case StmtKind::If: return lowerIf(s);
    case StmtKind::While: return lowerWhile(s);
    case StmtKind::For: return lowerFor(s);
    case StmtKind::Return: return lowerReturn(s);
    case StmtKind::Break:
    case StmtKind::Continue: {
      if (loops_.empty()) {
        return error(ErrorCode::ParseError, fmt::format("syntax error: `{}` outside a loop", s.kind == StmtKind::Break ? "break" : "continue"), s.line, s.col);
      }
      const LoopFrame& loop = loops_.back();
      if (s.kind == StmtKind::Break) {
        emit(Opcode::LoopEnd, loop.loop_id);
        emitJump(loop.break_label);
      } else {
        emitJump(loop.continue_label);
      }
      terminated_ = true;
      return Status::ok();
    }
    case StmtKind::Assert: {
      std::string message;
      if (s.message) {
        if (s.message->kind != ExprKind::Str) return error(ErrorCode::Unsupported, "an assert message must be a string literal", *s.message);
        message = s.message->name;
      } else {
        message = "assertion failed: " + sourceLine(s.line);
      }
      SVM_ASSIGN_OR_RETURN(Val cond, lowerExpr(*s.value));
      if (cond.kind == VKind::Tuple || cond.kind == VKind::None || cond.kind == VKind::Str) {
        return error(ErrorCode::Unsupported, "assert needs a bool, number or one-element tensor condition", *s.value);
      }
      if (options_.fold && cond.is_const && cond.asDouble() != 0.0) return Status::ok();
      setLoc(s.line, s.col);
      IrInst& inst = emit(Opcode::Assert, materialize(cond));
      inst.constant.kind = ConstKind::String;
      inst.constant.text = message;
      return Status::ok();
    }
    case StmtKind::FunctionDef: return error(ErrorCode::Unsupported, "`def` inside a function is not supported in ShapeVM functions", s.line, s.col);
    case StmtKind::ClassDef: return error(ErrorCode::Unsupported, "`class` inside a function is not supported in ShapeVM functions", s.line, s.col);
  }
  return Status::ok();
}

Status Lowerer::lowerAssign(const Expr& target, Val value, const Stmt& s) {
  if (target.kind == ExprKind::Name) return assignName(target.name, std::move(value), target);
  if (target.kind == ExprKind::Tuple || target.kind == ExprKind::List) {
    const std::size_t n = target.items.size();
    std::vector<Val> items;
    if (value.static_tuple) {
      if (value.items.size() != n) {
        return error(ErrorCode::ShapeMismatch, fmt::format("cannot unpack {} values into {} names", value.items.size(), n), target);
      }
      items = value.items;
      // Parallel assignment (`a, b = b, a`): items held in a target's register are copied first.
      std::set<std::int32_t> target_regs;
      for (const ExprPtr& t : target.items) {
        if (t->kind != ExprKind::Name) continue;
        auto var = vars_.find(t->name);
        if (var != vars_.end() && var->second.reg >= 0) target_regs.insert(var->second.reg);
      }
      for (Val& item : items) {
        if (item.reg >= 0 && target_regs.count(item.reg)) {
          std::int32_t copy = newReg();
          setLoc(s.line, s.col);
          emit(Opcode::Move, copy, item.reg);
          item.reg = copy;
        }
      }
    } else if (value.kind == VKind::Tuple) {
      if (value.tuple_len >= 0 && static_cast<std::size_t>(value.tuple_len) != n) {
        return error(ErrorCode::ShapeMismatch, fmt::format("cannot unpack {} values into {} names", value.tuple_len, n), target);
      }
      std::vector<std::int32_t> regs;
      for (std::size_t i = 0; i < n; ++i) {
        regs.push_back(newReg());
        // Item kinds/tokens survive a tuple stored in a variable; a shape's items are ints.
        Val item = value.items.size() == n ? value.items[i] : Val::reg_of(VKind::Int, -1);
        item.reg = regs.back();
        items.push_back(item);
      }
      setLoc(s.line, s.col);
      emit(Opcode::TupleUnpack, materialize(value)).outputs = regs;
    } else {
      return error(ErrorCode::Unsupported, "only tuples (shapes, split results, multiple returns) can be unpacked", target);
    }
    for (std::size_t i = 0; i < n; ++i) SVM_RETURN_IF_ERROR(lowerAssign(*target.items[i], items[i], s));
    return Status::ok();
  }
  if (target.kind == ExprKind::Subscript) return error(ErrorCode::Unsupported, "item assignment (`x[...] = ...`) is not supported in ShapeVM functions", target);
  if (target.kind == ExprKind::Attribute) return error(ErrorCode::Unsupported, "attribute assignment is not supported in ShapeVM functions", target);
  return error(ErrorCode::ParseError, "syntax error: cannot assign to this expression", target);
}

Status Lowerer::assignName(const std::string& name, Val v, const Expr& at) {
  if (v.kind == VKind::Namespace || v.kind == VKind::Str) {
    return error(ErrorCode::Unsupported, fmt::format("`{}` cannot hold this value (only tensors, numbers, bools and tuples)", name), at);
  }
  VarInfo& var = vars_[name];
  if (v.kind == VKind::Tensor) assigned_tokens_[name].push_back(v.token);
  bool temp_reg = v.reg >= 0 && !isVarReg(v.reg);
  auto staticOk = [&](const Val& x, const auto& self) -> bool {
    if (!x.static_tuple) return x.is_const ? options_.fold : (x.reg >= 0 && !isVarReg(x.reg));
    for (const Val& item : x.items) {
      if (!self(item, self)) return false;
    }
    return true;
  };
  if (var.assignments <= 1 && (v.kind == VKind::DType || (v.static_tuple ? staticOk(v, staticOk) : (v.is_const ? options_.fold : temp_reg)))) {
    var.has_static = true;
    var.value = v;
    const auto publish = [&](const Val& x, const auto& self) -> void {
      if (x.reg >= 0) static_regs_.insert(x.reg);
      for (const Val& item : x.items) self(item, self);
    };
    publish(v, publish);
    return Status::ok();
  }
  if (v.kind == VKind::DType) return error(ErrorCode::Unsupported, fmt::format("dtype variable `{}` must be assigned once", name), at);
  if (var.reg < 0) {
    var.reg = newReg();
    var_regs_.insert(var.reg);
  }
  var.has_static = false;
  // The instruction that just produced the value may write the variable's register instead,
  // unless the value is another variable's (`t = x * 2; acc = t`: t still needs it).
  if (temp_reg && static_regs_.count(v.reg) == 0 && !fn_->code.empty() && !fn_->code.back().isLabel()) {
    IrInst& last = fn_->code.back();
    auto defs = irDefs(last);
    if (defs.size() == 1 && defs[0] == v.reg && last.op != Opcode::TupleUnpack) {
      if (last.op == Opcode::CallOp || last.op == Opcode::Call) {
        last.outputs[0] = var.reg;
      } else {
        last.a = var.reg;
      }
      v.reg = var.reg;
    }
  }
  if (v.reg != var.reg) {
    if (v.reg >= 0) {
      emit(Opcode::Move, var.reg, v.reg);
    } else if (v.static_tuple) {
      std::int32_t r = materialize(v);
      emit(Opcode::Move, var.reg, r);
    } else {
      IrInst& inst = emit(Opcode::LoadConst, var.reg);
      const Val& copy = v;
      switch (copy.kind) {
        case VKind::Int: inst.constant.kind = ConstKind::Int; inst.constant.i = copy.i; break;
        case VKind::Float: inst.constant.kind = ConstKind::Float; inst.constant.f = copy.f; break;
        case VKind::Bool: inst.constant.kind = ConstKind::Bool; inst.constant.b = copy.b; break;
        default: inst.constant.kind = ConstKind::None; break;
      }
    }
  }
  Val stored = v;
  stored.reg = var.reg;
  stored.is_const = false;
  stored.static_tuple = false;
  if (v.static_tuple) {
    stored.kind = VKind::Tuple;
    stored.tuple_len = static_cast<int>(v.items.size());
  }
  // Keep only what a later unpack needs to know about the items: kind and token.
  std::function<void(Val&)> metadata = [&](Val& x) {
    x.reg = -1;
    x.is_const = false;
    x.dim_id = -1;
    if (x.static_tuple) {
      x.static_tuple = false;
      x.kind = VKind::Tuple;
    }
    for (Val& item : x.items) metadata(item);
  };
  if (var.assignments > 1) stored.items.clear();
  for (Val& item : stored.items) metadata(item);
  if (var.assignments > 1) stored.dim_id = -1;
  var.value = stored;
  return Status::ok();
}

Status Lowerer::lowerIf(const Stmt& s) {
  SVM_ASSIGN_OR_RETURN(Val cond, lowerExpr(*s.value));
  if (cond.kind == VKind::Tuple || cond.kind == VKind::Str) {
    return error(ErrorCode::Unsupported, "an `if` condition must be a bool, number or one-element tensor", *s.value);
  }
  if (options_.fold && cond.is_const) {
    const bool taken = cond.kind == VKind::None ? false : cond.asDouble() != 0.0;
    return lowerBlock(taken ? s.body : s.orelse);
  }
  setLoc(s.line, s.col);
  int then_label = newLabel(), else_label = newLabel(), end_label = newLabel();
  emitBranch(materialize(cond), then_label, s.orelse.empty() ? end_label : else_label);
  placeLabel(then_label);
  SVM_RETURN_IF_ERROR(lowerBlock(s.body));
  bool then_terminated = terminated_;
  if (!terminated_) {
    setLoc(s.line, s.col);
    emitJump(end_label);
  }
  terminated_ = false;
  bool else_terminated = false;
  if (!s.orelse.empty()) {
    placeLabel(else_label);
    SVM_RETURN_IF_ERROR(lowerBlock(s.orelse));
    else_terminated = terminated_;
    terminated_ = false;
  }
  placeLabel(end_label);
  terminated_ = then_terminated && else_terminated;
  return Status::ok();
}

Status Lowerer::lowerWhile(const Stmt& s) {
  int head = newLabel(), body = newLabel(), cont = newLabel(), done = newLabel();
  int loop_id = fn_->num_loops++;
  placeLabel(head);
  SVM_ASSIGN_OR_RETURN(Val cond, lowerExpr(*s.value));
  if (cond.kind == VKind::Tuple || cond.kind == VKind::Str) {
    return error(ErrorCode::Unsupported, "a `while` condition must be a bool, number or one-element tensor", *s.value);
  }
  setLoc(s.line, s.col);
  emitBranch(materialize(cond), body, done);
  placeLabel(body);
  emit(Opcode::LoopStart, loop_id);
  loops_.push_back(LoopFrame{cont, done, loop_id});
  SVM_RETURN_IF_ERROR(lowerBlock(s.body));
  loops_.pop_back();
  terminated_ = false;
  placeLabel(cont);
  setLoc(s.line, s.col);
  emit(Opcode::LoopEnd, loop_id);
  emitJump(head);
  placeLabel(done);
  return Status::ok();
}

Status Lowerer::lowerFor(const Stmt& s) {
  const Expr& target = *s.targets[0];
  const Expr& iter = *s.value;
  if (target.kind != ExprKind::Name) return error(ErrorCode::Unsupported, "a `for` target must be a single name", target);
  if (iter.kind != ExprKind::Call || iter.lhs->kind != ExprKind::Name || iter.lhs->name != "range") {
    return error(ErrorCode::Unsupported, "`for` loops must iterate over range(...) in ShapeVM functions", iter);
  }
  if (iter.items.empty() || iter.items.size() > 3 || !iter.keywords.empty()) {
    return error(ErrorCode::InvalidArgument, fmt::format("range() takes 1 to 3 positional arguments, got {}", iter.items.size()), iter);
  }
  std::vector<Val> args;
  for (const ExprPtr& a : iter.items) {
    SVM_ASSIGN_OR_RETURN(Val v, lowerExpr(*a));
    if (v.kind != VKind::Int && v.kind != VKind::Bool) {
      return error(ErrorCode::KindMismatch, "range() arguments must be ints", *a);
    }
    args.push_back(v);
  }
  setLoc(s.line, s.col);
  Val start = args.size() == 1 ? Val::ofInt(0) : args[0];
  Val stop = args.size() == 1 ? args[0] : args[1];
  Val step = args.size() == 3 ? args[2] : Val::ofInt(1);
  if (step.is_const && step.i == 0) return error(ErrorCode::InvalidArgument, "range() step must not be zero", *iter.items[2]);
  std::int32_t counter = newReg();
  var_regs_.insert(counter);
  if (start.reg >= 0) emit(Opcode::Move, counter, start.reg);
  else { Val c = start; c.reg = -1; std::int32_t r = materialize(c); fn_->code.back().a = counter; (void)r; }
  auto frozen = [&](Val v) {  // range() evaluates its arguments once
    std::int32_t r = materialize(v);
    if (!isVarReg(r)) return r;
    std::int32_t copy = newReg();
    emit(Opcode::Move, copy, r);
    return copy;
  };
  std::int32_t stop_reg = frozen(stop);
  std::int32_t step_reg = frozen(step);
  int head = newLabel(), body = newLabel(), cont = newLabel(), done = newLabel();
  int loop_id = fn_->num_loops++;
  placeLabel(head);
  std::int32_t cond = newReg();
  if (step.is_const) {
    emit(step.i > 0 ? Opcode::Lt : Opcode::Gt, cond, counter, stop_reg);
  } else {
    Val zero = Val::ofInt(0);
    std::int32_t z = materialize(zero);
    std::int32_t up = newReg(), down = newReg(), lt = newReg(), gt = newReg(), a = newReg(), b = newReg();
    emit(Opcode::Gt, up, step_reg, z);
    emit(Opcode::Lt, lt, counter, stop_reg);
    emit(Opcode::And, a, up, lt);
    emit(Opcode::Lt, down, step_reg, z);
    emit(Opcode::Gt, gt, counter, stop_reg);
    emit(Opcode::And, b, down, gt);
    emit(Opcode::Or, cond, a, b);
  }
  emitBranch(cond, body, done);
  placeLabel(body);
  emit(Opcode::LoopStart, loop_id);
  SVM_RETURN_IF_ERROR(assignName(target.name, Val::reg_of(VKind::Int, counter), target));
  loops_.push_back(LoopFrame{cont, done, loop_id});
  SVM_RETURN_IF_ERROR(lowerBlock(s.body));
  loops_.pop_back();
  terminated_ = false;
  placeLabel(cont);
  setLoc(s.line, s.col);
  emit(Opcode::LoopEnd, loop_id);
  emit(Opcode::Add, counter, counter, step_reg);
  emitJump(head);
  placeLabel(done);
  return Status::ok();
}

Status Lowerer::lowerReturn(const Stmt& s) {
  std::vector<Val> results;
  if (s.value) {
    SVM_ASSIGN_OR_RETURN(Val v, lowerExpr(*s.value));
    if (v.static_tuple && s.value->kind != ExprKind::Name) {
      results = v.items;
    } else if (v.static_tuple) {
      results = v.items;
    } else {
      results.push_back(v);
    }
  }
  for (const Val& r : results) {
    if (r.kind == VKind::Str || r.kind == VKind::Namespace || r.kind == VKind::DType) {
      return error(ErrorCode::Unsupported, "functions can return tensors, numbers, bools and tuples only", *s.value);
    }
  }
  const int n = static_cast<int>(results.size());
  if (fn_->num_outputs >= 0 && fn_->num_outputs != n) {
    return error(ErrorCode::InvalidArgument,
                 fmt::format("this `return` gives {} values but the one at line {} gives {}", n, return_line_, fn_->num_outputs),
                 s.line, s.col);
  }
  if (fn_->num_outputs < 0) {
    fn_->num_outputs = n;
    return_line_ = s.line;
    returns_ = results;
    for (Val& r : returns_) {
      r.reg = -1;
      r.token = stripDimIds(r.token);
      r.dim_id = -1;
      if (r.static_tuple) { r.kind = VKind::Tuple; r.tuple_len = static_cast<int>(r.items.size()); r.static_tuple = false; r.items.clear(); }
      r.is_const = false;
    }
  } else {
    for (int i = 0; i < n; ++i) {
      Val& known = returns_[static_cast<std::size_t>(i)];
      if (known.kind != results[static_cast<std::size_t>(i)].kind) known.kind = VKind::Unknown;
      known.token = joinTokens(known.token, stripDimIds(results[static_cast<std::size_t>(i)].token));
    }
  }
  setLoc(s.line, s.col);
  for (int i = 0; i < n; ++i) emit(Opcode::StoreTensor, materialize(results[static_cast<std::size_t>(i)]), i);
  for (auto it = loops_.rbegin(); it != loops_.rend(); ++it) emit(Opcode::LoopEnd, it->loop_id);
  emit(Opcode::Return);
  terminated_ = true;
  return Status::ok();
}

}  // namespace shapevm::frontend
