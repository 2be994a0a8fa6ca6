// SPDX-License-Identifier: Apache-2.0
// Lowering, part 2: expressions — names, literals, tuples, arithmetic (scalar opcodes with
// Python semantics and constant folding; tensor ops through CallOp), comparisons, short-circuit
// and/or, conditional expressions, the a + b + c -> add_n rewrite, and the compile-time constant
// evaluator used for op attributes. Folding never changes a result: on overflow, division by zero
// or anything unsure it leaves the instruction to run.
#include <optional>
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "bytecode/scalar_ops.h"
#include "frontend/lowering.h"
#include "support/native_stack.h"

namespace shapevm::frontend {
namespace {

// Constant folding runs the VM's own scalar semantics (bytecode/scalar_ops.h), so a folded
// result is exactly what the instruction would compute. An error (overflow, division by zero, a
// float that is no int) is not folded: the instruction stays and raises it at run time.
Value valueOf(const Val& v) {
  switch (v.kind) {
    case VKind::Int: return Value::fromInt(v.i);
    case VKind::Float: return Value::fromFloat(v.f);
    default: return Value::fromBool(v.b);
  }
}

std::optional<Val> constantOf(const Expected<Value>& result) {
  if (!result) return std::nullopt;
  if (result->isInt()) return Val::ofInt(result->asInt());
  if (result->isFloat()) return Val::ofFloat(result->asFloat());
  if (result->isBool()) return Val::ofBool(result->asBool());
  return std::nullopt;
}

// Two constant int/float/bool operands; nullopt when it must not be folded.
std::optional<Val> foldScalar(Opcode op, const Val& a, const Val& b) {
  return constantOf(shapevm::scalarBinary(op, valueOf(a), valueOf(b)));
}

std::optional<Val> foldUnary(Opcode op, const Val& a) {
  return constantOf(shapevm::scalarUnary(op, valueOf(a)));
}

}  // namespace

Expected<Val> Lowerer::scalarBinary(Opcode op, Val lhs, Val rhs, VKind result) {
  if (options_.fold && lhs.is_const && rhs.is_const && lhs.kind != VKind::None && rhs.kind != VKind::None) {
    if (auto folded = foldScalar(op, lhs, rhs)) return *folded;
  }
  std::int32_t a = materialize(lhs), b = materialize(rhs);
  std::int32_t r = newReg();
  emit(op, r, a, b);
  return Val::reg_of(result, r);
}

Expected<Val> Lowerer::scalarUnary(Opcode op, Val v, VKind result) {
  if (options_.fold && v.is_const && v.kind != VKind::None) {
    if (auto folded = foldUnary(op, v)) return *folded;
  }
  std::int32_t a = materialize(v);
  std::int32_t r = newReg();
  emit(op, r, a);
  return Val::reg_of(result, r);
}

namespace {
// The value of a literal expression (int, float, bool, None, string); nullopt for anything else.
std::optional<Val> literalValue(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Int: return Val::ofInt(e.int_value);
    case ExprKind::Float: return Val::ofFloat(e.float_value);
    case ExprKind::Bool: return Val::ofBool(e.bool_value);
    case ExprKind::None: return Val::none();
    case ExprKind::Str: {
      Val v;
      v.kind = VKind::Str;
      v.text = e.name;
      return v;
    }
    default: return std::nullopt;
  }
}
}  // namespace

Expected<Val> Lowerer::lowerExpr(const Expr& e) {
  setLoc(e.line, e.col);
  SVM_RETURN_IF_ERROR(checkStack(e.line, e.col));
  switch (e.kind) {
    case ExprKind::Int:
    case ExprKind::Float:
    case ExprKind::Bool:
    case ExprKind::None:
    case ExprKind::Str: return *literalValue(e);
    case ExprKind::Name: return readName(e);
    case ExprKind::Tuple:
    case ExprKind::List: {
      Val v;
      v.kind = VKind::Tuple;
      v.static_tuple = true;
      for (const ExprPtr& item : e.items) {
        SVM_ASSIGN_OR_RETURN(Val x, lowerExpr(*item));
        if (x.kind == VKind::Str || x.kind == VKind::Namespace) return error(ErrorCode::Unsupported, "this value cannot be put in a tuple", *item);
        v.items.push_back(x);
      }
      v.tuple_len = static_cast<int>(v.items.size());
      return v;
    }
    case ExprKind::BinOp: {
      if (e.name == "+" && options_.addn) return lowerAddChain(e);
      SVM_ASSIGN_OR_RETURN(Val lhs, lowerExpr(*e.lhs));
      SVM_ASSIGN_OR_RETURN(Val rhs, lowerExpr(*e.rhs));
      setLoc(e.line, e.col);
      return lowerBinary(e.name, lhs, rhs, e);
    }
    case ExprKind::UnaryOp: {
      SVM_ASSIGN_OR_RETURN(Val v, lowerExpr(*e.lhs));
      setLoc(e.line, e.col);
      if (e.name == "+") return v;
      if (v.kind == VKind::Tensor || v.kind == VKind::Unknown) {
        if (e.name == "-") return tensorOp("neg", {v}, {}, e);
        return error(ErrorCode::Unsupported, "`not` on a tensor is not supported (use ops.logical_not)", e);
      }
      if (!v.isScalarKind()) return error(ErrorCode::KindMismatch, fmt::format("unary `{}` needs a number or a tensor", e.name), e);
      if (e.name == "-") return scalarUnary(Opcode::Neg, v, v.kind == VKind::Bool ? VKind::Int : v.kind);
      return scalarUnary(Opcode::Not, v, VKind::Bool);
    }
    case ExprKind::BoolOp: return lowerBoolOp(e);
    case ExprKind::Compare: {
      SVM_ASSIGN_OR_RETURN(Val first, lowerExpr(*e.items[0]));
      Val result;
      for (std::size_t k = 0; k < e.ops.size(); ++k) {
        SVM_ASSIGN_OR_RETURN(Val next, lowerExpr(*e.items[k + 1]));
        if (k + 1 < e.ops.size() && next.reg < 0 && !next.is_const) materialize(next);
        setLoc(e.line, e.col);
        SVM_ASSIGN_OR_RETURN(Val cmp, lowerCompare(e.ops[k], first, next, e));
        if (k == 0) {
          result = cmp;
        } else {
          if (!result.isScalarKind() || !cmp.isScalarKind()) return error(ErrorCode::Unsupported, "chained comparisons of tensors are not supported", e);
          SVM_ASSIGN_OR_RETURN(result, scalarBinary(Opcode::And, result, cmp, VKind::Bool));
        }
        first = next;
      }
      return result;
    }
    case ExprKind::Call: return lowerCall(e);
    case ExprKind::Attribute: return lowerAttribute(e);
    case ExprKind::Subscript: return lowerSubscript(e);
    case ExprKind::Slice: return error(ErrorCode::Unsupported, "a slice is only allowed inside [...]", e);
    case ExprKind::IfExp: return lowerIfExp(e);
  }
  return error(ErrorCode::Internal, "unhandled expression", e);
}

Expected<Val> Lowerer::readName(const Expr& e) {
  auto it = vars_.find(e.name);
  if (it != vars_.end() && (it->second.has_static || it->second.reg >= 0)) {
    const VarInfo& var = it->second;
    if (var.has_static) {
      Val v = var.value;
      if (v.is_const) v.reg = -1;  // constants materialize where used
      return v;
    }
    Val v = var.value;
    v.reg = var.reg;
    if (auto pin = pinned_.find(e.name); pin != pinned_.end() && v.kind == VKind::Tensor) v.token = pin->second;
    return v;
  }
  if (it != vars_.end() && it->second.assignments > 0) {
    return error(ErrorCode::UnknownName, fmt::format("local variable `{}` is used before it is assigned", e.name), e);
  }
  if (auto g = globals_.find(e.name); g != globals_.end()) return g->second;
  if (e.name == "ops" || e.name == "shapevm" || e.name == "self") {
    Val v;
    v.kind = VKind::Namespace;
    v.text = e.name;
    return v;
  }
  if (functions_.count(e.name)) return error(ErrorCode::Unsupported, fmt::format("function `{}` can only be called, not used as a value", e.name), e);
  return error(ErrorCode::UnknownName, fmt::format("name `{}` is not defined", e.name), e);
}

Expected<Val> Lowerer::lowerBinary(const std::string& op, Val lhs, Val rhs, const Expr& at) {
  if (lhs.kind == VKind::None || rhs.kind == VKind::None) {
    return error(ErrorCode::KindMismatch, fmt::format("`{}` on None is not supported", op), at);
  }
  if (lhs.kind == VKind::Str || rhs.kind == VKind::Str || lhs.kind == VKind::Namespace || rhs.kind == VKind::Namespace ||
      lhs.kind == VKind::DType || rhs.kind == VKind::DType) {
    return error(ErrorCode::Unsupported, fmt::format("`{}` is only supported on numbers, bools and tensors", op), at);
  }
  if (lhs.kind == VKind::Tuple || rhs.kind == VKind::Tuple) {
    if (op == "+" && lhs.static_tuple && rhs.static_tuple) {
      Val v = lhs;
      v.reg = -1;
      for (const Val& item : rhs.items) v.items.push_back(item);
      v.tuple_len = static_cast<int>(v.items.size());
      return v;
    }
    return error(ErrorCode::Unsupported, fmt::format("`{}` on tuples is not supported (only `+` of tuples of known length)", op), at);
  }
  if (lhs.isTensorLike() || rhs.isTensorLike()) {
    static const std::map<std::string, std::string> kTensorOps = {
        {"+", "add"}, {"-", "sub"}, {"*", "mul"}, {"/", "div"}, {"**", "pow"}, {"@", "matmul"}};
    auto it = kTensorOps.find(op);
    if (it == kTensorOps.end()) {
      return error(ErrorCode::Unsupported, fmt::format("`{}` on tensors is not supported in ShapeVM functions", op), at);
    }
    if (op == "@" && (!lhs.isTensorLike() || !rhs.isTensorLike())) return error(ErrorCode::KindMismatch, "`@` needs two tensors", at);
    return tensorOp(it->second, {lhs, rhs}, {}, at);
  }
  static const std::map<std::string, Opcode> kScalarOps = {
      {"+", Opcode::Add}, {"-", Opcode::Sub}, {"*", Opcode::Mul}, {"/", Opcode::Div},
      {"//", Opcode::FloorDiv}, {"%", Opcode::Mod}, {"**", Opcode::Pow}};
  auto it = kScalarOps.find(op);
  if (it == kScalarOps.end()) return error(ErrorCode::Unsupported, fmt::format("`{}` on numbers is not supported", op), at);
  VKind result = (lhs.kind == VKind::Float || rhs.kind == VKind::Float || op == "/") ? VKind::Float : VKind::Int;
  if (op == "**" && result == VKind::Int && !(rhs.is_const && rhs.asInt() >= 0)) result = VKind::Unknown;
  if (result == VKind::Unknown) result = VKind::Float;  // int ** negative int is a float in Python
  if (op == "**" && lhs.kind != VKind::Float && rhs.kind != VKind::Float && !(rhs.is_const && rhs.asInt() < 0)) result = VKind::Int;
  return scalarBinary(it->second, lhs, rhs, result);
}

Expected<Val> Lowerer::lowerCompare(const std::string& op, Val lhs, Val rhs, const Expr& at) {
  if (lhs.isTensorLike() || rhs.isTensorLike()) {
    static const std::map<std::string, std::string> kOps = {{"==", "equal"}, {"!=", "not_equal"}, {"<", "less"},
                                                            {"<=", "less_equal"}, {">", "greater"}, {">=", "greater_equal"}};
    if (!(lhs.isTensorLike() || lhs.isScalarKind()) || !(rhs.isTensorLike() || rhs.isScalarKind())) {
      return error(ErrorCode::KindMismatch, "a tensor can only be compared with a tensor or a number", at);
    }
    return tensorOp(kOps.at(op), {lhs, rhs}, {}, at);
  }
  if (lhs.kind == VKind::None || rhs.kind == VKind::None) {
    if ((op == "==" || op == "!=") && lhs.is_const && rhs.is_const) {
      bool equal = lhs.kind == rhs.kind;
      return Val::ofBool(op == "==" ? equal : !equal);
    }
    return error(ErrorCode::Unsupported, "comparisons with None are not supported", at);
  }
  if (!lhs.isScalarKind() || !rhs.isScalarKind()) {
    return error(ErrorCode::Unsupported, "comparisons are supported on numbers, bools and tensors only", at);
  }
  static const std::map<std::string, Opcode> kOps = {{"==", Opcode::Eq}, {"!=", Opcode::Ne}, {"<", Opcode::Lt},
                                                     {"<=", Opcode::Le}, {">", Opcode::Gt}, {">=", Opcode::Ge}};
  return scalarBinary(kOps.at(op), lhs, rhs, VKind::Bool);
}

Expected<Val> Lowerer::lowerBoolOp(const Expr& e) {
  const bool is_and = e.name == "and";
  std::vector<Val> folded;
  std::int32_t result = -1;
  int end = -1;
  VKind kind = VKind::Bool;
  for (std::size_t k = 0; k < e.items.size(); ++k) {
    SVM_ASSIGN_OR_RETURN(Val v, lowerExpr(*e.items[k]));
    setLoc(e.line, e.col);
    if (v.isTensorLike()) {
      return error(ErrorCode::Unsupported, fmt::format("`{}` on tensors is not supported (use ops.logical_{})", e.name, e.name), *e.items[k]);
    }
    if (!v.isScalarKind()) return error(ErrorCode::Unsupported, fmt::format("`{}` needs numbers or bools", e.name), *e.items[k]);
    if (k == 0) kind = v.kind;
    else if (v.kind != kind) kind = (kind == VKind::Float || v.kind == VKind::Float) ? VKind::Float : VKind::Int;
    if (result < 0 && options_.fold && v.is_const) {
      bool truthy = v.asDouble() != 0.0;
      if (truthy != is_and || k + 1 == e.items.size()) return v;  // decides the result
      continue;                                                   // does not: the next operand decides
    }
    if (result < 0) {
      result = newReg();
      var_regs_.insert(result);
      end = newLabel();
    }
    emit(Opcode::Move, result, materialize(v));
    if (k + 1 < e.items.size()) {
      int next = newLabel();
      if (is_and) emitBranch(result, next, end); else emitBranch(result, end, next);
      placeLabel(next);
    }
  }
  placeLabel(end);
  return Val::reg_of(kind, result);
}

Expected<Val> Lowerer::lowerIfExp(const Expr& e) {
  SVM_ASSIGN_OR_RETURN(Val test, lowerExpr(*e.items[1]));
  if (test.kind == VKind::Tuple || test.kind == VKind::Str) return error(ErrorCode::Unsupported, "a condition must be a bool, number or tensor", *e.items[1]);
  if (options_.fold && test.is_const) return lowerExpr(*e.items[test.asDouble() != 0.0 ? 0 : 2]);
  setLoc(e.line, e.col);
  int body = newLabel(), orelse = newLabel(), end = newLabel();
  std::int32_t result = newReg();
  var_regs_.insert(result);
  emitBranch(materialize(test), body, orelse);
  placeLabel(body);
  SVM_ASSIGN_OR_RETURN(Val a, lowerExpr(*e.items[0]));
  setLoc(e.line, e.col);
  emit(Opcode::Move, result, materialize(a));
  emitJump(end);
  placeLabel(orelse);
  SVM_ASSIGN_OR_RETURN(Val b, lowerExpr(*e.items[2]));
  setLoc(e.line, e.col);
  emit(Opcode::Move, result, materialize(b));
  placeLabel(end);
  Val v = Val::reg_of(a.kind == b.kind ? a.kind : (a.isTensorLike() || b.isTensorLike() ? VKind::Unknown : VKind::Float), result);
  if (a.kind == VKind::Tensor && b.kind == VKind::Tensor) v.token = joinTokens(a.token, b.token);
  if (a.static_tuple || b.static_tuple || a.kind == VKind::Tuple) {
    v.kind = VKind::Tuple;
    v.tuple_len = a.tuple_len == b.tuple_len ? a.tuple_len : -1;
  }
  return v;
}

Expected<Val> Lowerer::lowerAddChain(const Expr& e) {
  std::vector<const Expr*> terms;
  const Expr* cur = &e;
  while (cur->kind == ExprKind::BinOp && cur->name == "+") {
    terms.push_back(cur->rhs.get());
    cur = cur->lhs.get();
  }
  terms.push_back(cur);
  std::reverse(terms.begin(), terms.end());
  std::vector<Val> vals;
  bool all_tensors = true;
  for (const Expr* t : terms) {
    SVM_ASSIGN_OR_RETURN(Val v, lowerExpr(*t));
    all_tensors = all_tensors && v.kind == VKind::Tensor;
    vals.push_back(v);
  }
  setLoc(e.line, e.col);
  if (vals.size() >= 3 && all_tensors) return tensorOp("add_n", vals, {}, e);
  // Pairwise, left to right (each partial sum at the location of its `+`).
  std::vector<const Expr*> nodes;
  cur = &e;
  while (cur->kind == ExprKind::BinOp && cur->name == "+") {
    nodes.push_back(cur);
    cur = cur->lhs.get();
  }
  std::reverse(nodes.begin(), nodes.end());
  Val acc = vals[0];
  for (std::size_t k = 1; k < vals.size(); ++k) {
    setLoc(nodes[k - 1]->line, nodes[k - 1]->col);
    SVM_ASSIGN_OR_RETURN(acc, lowerBinary("+", acc, vals[k], *nodes[k - 1]));
  }
  return acc;
}

// ---- compile-time constants (attributes) ----

std::optional<Val> Lowerer::constEval(const Expr& e) const {
  if (std::optional<Val> literal = literalValue(e)) return literal;
  // Not a constant as far as folding goes; lowerExpr then reports the depth with the line.
  if (!checkStack(e.line, e.col).isOk()) return std::nullopt;
  switch (e.kind) {
    case ExprKind::Tuple:
    case ExprKind::List: {
      Val v;
      v.kind = VKind::Tuple;
      v.static_tuple = true;
      for (const ExprPtr& item : e.items) {
        auto x = constEval(*item);
        if (!x) return std::nullopt;
        v.items.push_back(*x);
      }
      v.tuple_len = static_cast<int>(v.items.size());
      return v;
    }
    case ExprKind::UnaryOp: {
      auto v = constEval(*e.lhs);
      if (!v || !v->is_const || v->kind == VKind::None) return std::nullopt;
      if (e.name == "+") return v;
      if (e.name == "-") return v->kind == VKind::Float ? Val::ofFloat(-v->f) : Val::ofInt(-v->asInt());
      if (e.name == "not") return Val::ofBool(v->asDouble() == 0.0);
      return std::nullopt;
    }
    case ExprKind::BinOp: {
      auto a = constEval(*e.lhs);
      auto b = constEval(*e.rhs);
      if (!a || !b || !a->is_const || !b->is_const || a->kind == VKind::None || b->kind == VKind::None) return std::nullopt;
      static const std::map<std::string, Opcode> kOps = {{"+", Opcode::Add}, {"-", Opcode::Sub}, {"*", Opcode::Mul},
                                                         {"/", Opcode::Div}, {"//", Opcode::FloorDiv}, {"%", Opcode::Mod},
                                                         {"**", Opcode::Pow}};
      auto it = kOps.find(e.name);
      if (it == kOps.end()) return std::nullopt;
      return foldScalar(it->second, *a, *b);
    }
    case ExprKind::Name: {
      if (auto it = vars_.find(e.name); it != vars_.end()) {
        if (it->second.has_static && (it->second.value.is_const || it->second.value.kind == VKind::DType)) return it->second.value;
        if (it->second.assignments > 0) return std::nullopt;
      }
      if (auto g = globals_.find(e.name); g != globals_.end()) return g->second;
      return std::nullopt;
    }
    case ExprKind::Attribute: {
      if (e.lhs->kind == ExprKind::Name && e.lhs->name == "self" && !class_name_.empty()) {
        auto cls = classes_.find(class_name_);
        if (cls != classes_.end()) {
          auto c = cls->second.constants.find(e.name);
          if (c != cls->second.constants.end()) return c->second;
        }
        return std::nullopt;
      }
      const bool ops_ns = (e.lhs->kind == ExprKind::Name && (e.lhs->name == "ops" || e.lhs->name == "np")) ||
                          (e.lhs->kind == ExprKind::Attribute && e.lhs->name == "ops");
      if (!ops_ns) return std::nullopt;
      static const std::map<std::string, DType> kDTypes = {
          {"float32", DType::Float32}, {"float16", DType::Float16}, {"bfloat16", DType::BFloat16},
          {"float64", DType::Float64}, {"int32", DType::Int32},     {"int64", DType::Int64}, {"bool", DType::Bool}};
      auto it = kDTypes.find(e.name);
      if (it == kDTypes.end()) return std::nullopt;
      Val v;
      v.kind = VKind::DType;
      v.dtype = it->second;
      return v;
    }
    default: return std::nullopt;
  }
}

Expected<std::int64_t> Lowerer::constInt(const Expr& e, std::string_view what) const {
  auto v = constEval(e);
  if (!v || !v->is_const || (v->kind != VKind::Int && v->kind != VKind::Bool)) {
    return error(ErrorCode::InvalidArgument, fmt::format("{} must be a constant int", what), e);
  }
  return v->asInt();
}

Expected<std::vector<std::int64_t>> Lowerer::constInts(const Expr& e, std::string_view what) const {
  auto v = constEval(e);
  std::vector<std::int64_t> out;
  if (v && v->is_const && (v->kind == VKind::Int || v->kind == VKind::Bool)) return std::vector<std::int64_t>{v->asInt()};
  if (v && v->static_tuple) {
    bool ok = true;
    std::function<void(const Val&)> flatten = [&](const Val& x) {
      if (x.static_tuple) {
        for (const Val& item : x.items) flatten(item);
      } else if (x.is_const && (x.kind == VKind::Int || x.kind == VKind::Bool)) {
        out.push_back(x.asInt());
      } else {
        ok = false;
      }
    };
    flatten(*v);
    if (ok) return out;
  }
  return error(ErrorCode::InvalidArgument, fmt::format("{} must be a constant int or tuple of ints", what), e);
}

}  // namespace shapevm::frontend
