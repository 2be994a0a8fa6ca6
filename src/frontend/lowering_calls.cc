// SPDX-License-Identifier: Apache-2.0
// Lowering, part 3: calls — the `ops` namespace (Python argument binding to op inputs and
// attributes, one table below), tensor methods, scalar builtins, user functions and methods
// (self.<name> parameters passed along), attribute access (.shape, .T, dtypes) and subscripts
// of tensors (slice/gather) and tuples. Attributes must be compile-time constants.
#include <algorithm>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "frontend/lowering.h"

namespace shapevm::frontend {
namespace {

// Roles: T tensor, O optional tensor (None allowed), S shape (ints input), N number input,
// M optional number input, L list of tensors (variadic), G gather indices (tensor or int),
// i int attr, a axes attr (int / tuple / None), p perm attr, f float attr, b bool attr,
// d dtype attr, X split sections-or-sizes, P pads (numpy ((before, after), ...)).
struct ArgSpec {
  std::string name;
  char role;
  std::string attr;                         // attribute name for attribute roles
  std::optional<std::string> default_text;  // nullopt = required; "None" or a literal
};

struct OpBinding {
  std::string py_name;
  std::string op;
  std::vector<ArgSpec> args;
};

// Where the Python surface of an op differs from what its schema row implies (everything else
// -- names, arity, roles, defaults -- is derived from ops.def by bindingOf).
struct PyQuirk {
  const char* op;
  const char* what;  // "hidden", "role:<input>=<role>", "default:<attr>=<text>", "order:<attrs...>", "split"
};
constexpr PyQuirk kPyQuirks[] = {
    {"slice", "hidden"},               // reached through subscripts, not ops.slice
    {"gather", "role:indices=G"},      // a tensor or an int index
    {"pad", "role:pads=P"},            // numpy-style ((before, after), ...) pairs
    {"arange", "default:dtype=None"},  // int64, or float64 when an argument is a float
    {"layer_norm", "order:eps axis"},  // eps is the 4th positional argument
    {"split", "split"},                // sections_or_sizes decides sections or sizes
};

std::string defaultText(const AttrSpec& attr) {
  const AttrValue& v = *attr.default_value;
  switch (attr.kind) {
    case AttrKind::Ints: return v.ints.empty() ? "None" : v.toString();
    case AttrKind::Bool: return v.i ? "True" : "False";
    case AttrKind::Int:
    case AttrKind::Float:
    case AttrKind::DType: return v.toString();
  }
  return v.toString();
}

char attrRole(AttrKind kind) {
  switch (kind) {
    case AttrKind::Int: return 'i';
    case AttrKind::Float: return 'f';
    case AttrKind::Bool: return 'b';
    case AttrKind::Ints: return 'a';
    case AttrKind::DType: return 'd';
  }
  return 'i';
}

// The Python binding of one op: its inputs (tensors, shapes, numbers, a tensor list) and then
// its attributes, in schema order, with the schema's defaults; kPyQuirks applied on top.
std::optional<OpBinding> bindingOf(const OpSchema& schema) {
  OpBinding b{std::string(schema.name), std::string(schema.name), {}};
  std::vector<std::string_view> quirks;
  for (const PyQuirk& q : kPyQuirks) {
    if (schema.name == q.op) quirks.emplace_back(q.what);
  }
  for (std::string_view q : quirks) {
    if (q == "hidden") return std::nullopt;
  }
  for (const InputSpec& in : schema.inputs) {
    ArgSpec arg{in.variadic ? "tensors" : in.name, 'T', "", std::nullopt};
    switch (in.kind) {
      case InputKind::Tensor: arg.role = in.variadic ? 'L' : in.optional ? 'O' : 'T'; break;
      case InputKind::Ints: arg.role = 'S'; break;
      case InputKind::Int:
      case InputKind::Num: arg.role = in.optional ? 'M' : 'N'; break;
    }
    if (in.optional) arg.default_text = "None";
    b.args.push_back(arg);
  }
  std::vector<const AttrSpec*> attrs;
  for (const AttrSpec& attr : schema.attrs) attrs.push_back(&attr);
  for (std::string_view q : quirks) {
    if (q.starts_with("order:")) {
      std::vector<const AttrSpec*> ordered;
      std::size_t i = 6;
      while (i < q.size()) {
        const std::size_t end = std::min(q.find(' ', i), q.size());
        for (const AttrSpec* attr : attrs) {
          if (attr->name == q.substr(i, end - i)) ordered.push_back(attr);
        }
        i = end + 1;
      }
      attrs = ordered;
    }
    if (q == "split") {  // sections and sizes become one argument; axis follows it
      b.args.push_back({"sections_or_sizes", 'X', "", std::nullopt});
      std::erase_if(attrs, [](const AttrSpec* attr) { return attr->name != "axis"; });
    }
  }
  for (const AttrSpec* attr : attrs) {
    ArgSpec arg{attr->name == "axes" ? "axis" : attr->name, attrRole(attr->kind), attr->name, std::nullopt};
    if (attr->default_value) arg.default_text = defaultText(*attr);
    b.args.push_back(arg);
  }
  for (std::string_view q : quirks) {
    const std::size_t eq = q.find('=');
    for (ArgSpec& arg : b.args) {
      if (q.starts_with("role:") && q.substr(5, eq - 5) == arg.name) arg.role = q[eq + 1];
      if (q.starts_with("default:") && q.substr(8, eq - 8) == arg.attr)
        arg.default_text = std::string(q.substr(eq + 1));
    }
  }
  return b;
}

const std::vector<OpBinding>& opBindings() {
  static const std::vector<OpBinding> kBindings = [] {
    std::vector<OpBinding> b;
    for (const OpSchema& schema : OpRegistry::global().schemas()) {
      if (auto binding = bindingOf(schema)) b.push_back(std::move(*binding));
    }
    return b;
  }();
  return kBindings;
}

const OpBinding* findBinding(std::string_view name) {
  for (const OpBinding& b : opBindings()) {
    if (name == b.py_name) return &b;
  }
  return nullptr;
}

std::string signature(const std::string& display, const OpBinding& b) {
  std::string params;
  for (const ArgSpec& a : b.args) {
    params += (params.empty() ? "" : ", ") + a.name + (a.default_text ? "=" + *a.default_text : "");
  }
  return fmt::format("{}({})", display, params);
}

}  // namespace

std::optional<std::vector<PyParam>> opPythonParams(std::string_view op) {
  const OpBinding* b = nullptr;
  for (const OpBinding& binding : opBindings()) {
    if (binding.op == op) b = &binding;
  }
  if (b == nullptr) return std::nullopt;
  std::vector<PyParam> params;
  for (const ArgSpec& a : b->args) params.push_back({a.name, a.default_text});
  return params;
}

Expected<std::vector<Val>> Lowerer::tensorOpMulti(const std::string& op, std::vector<Val> inputs, NamedAttrs attrs,
                                                  const Expr& at, int num_outputs) {
  std::vector<std::int32_t> regs;
  std::vector<TensorDescriptor> in_tokens;
  for (Val& v : inputs) {
    if (v.kind == VKind::None && v.is_const) {
      regs.push_back(-1);
      in_tokens.push_back(TensorDescriptor::notTensor());
      continue;
    }
    if (v.kind == VKind::Str || v.kind == VKind::Namespace || v.kind == VKind::DType) {
      return error(ErrorCode::KindMismatch, fmt::format("`{}` cannot take this value as an input", op), at);
    }
    regs.push_back(materialize(v));
    in_tokens.push_back(v.isTensorLike() ? (v.kind == VKind::Tensor ? v.token : TensorDescriptor::anyTensor())
                                         : TensorDescriptor::notTensor());
  }
  setLoc(at.line, at.col);
  std::vector<std::int32_t> outs;
  std::vector<TensorDescriptor> out_tokens;
  std::vector<Val> results;
  for (int k = 0; k < num_outputs; ++k) {
    outs.push_back(newReg());
    out_tokens.push_back(inferOutput(op, inputs, attrs, k, num_outputs));
    Val r = Val::reg_of(VKind::Tensor, outs.back());
    r.token = out_tokens.back();
    results.push_back(r);
  }
  // Check the site now, so a bad attribute is a compile error at this line.
  const OpSchema* schema = OpRegistry::global().find(op);
  if (schema == nullptr) return error(ErrorCode::UnknownName, fmt::format("`{}` is not a ShapeVM op", op), at);
  auto resolved = resolveAttrs(*schema, attrs);
  if (!resolved) return error(resolved.status().code(), fmt::format("ops.{}: {}", op, resolved.status().message()), at);
  IrInst& inst = emit(Opcode::CallOp);
  inst.op_name = op;
  inst.inputs = regs;
  inst.outputs = outs;
  inst.attrs = std::move(attrs);
  inst.in_tokens = in_tokens;
  inst.out_tokens = out_tokens;
  return results;
}

Expected<Val> Lowerer::tensorOp(const std::string& op, std::vector<Val> inputs, NamedAttrs attrs, const Expr& at,
                                int num_outputs) {
  SVM_ASSIGN_OR_RETURN(std::vector<Val> results, tensorOpMulti(op, std::move(inputs), std::move(attrs), at, num_outputs));
  return results[0];
}

namespace {

// Binds positional and keyword arguments to the spec's parameters; missing optional ones stay null.
Status bindArgs(const Lowerer& lw, const std::string& display, const OpBinding& b, const Expr& call,
                std::vector<const Expr*>& bound, std::size_t skip = 0) {
  bound.assign(b.args.size(), nullptr);
  const std::size_t given = call.items.size();
  if (given + skip > b.args.size()) {
    return lw.error(ErrorCode::InvalidArgument,
                    fmt::format("`{}` takes at most {} arguments, got {}", signature(display, b), b.args.size() - skip, given), call);
  }
  for (std::size_t i = 0; i < given; ++i) bound[i + skip] = call.items[i].get();
  for (const auto& [key, value] : call.keywords) {
    std::size_t index = b.args.size();
    for (std::size_t i = skip; i < b.args.size(); ++i) {
      if (key == b.args[i].name || (key == "dim" && std::string_view(b.args[i].name) == "axis") ||
          (key == "keepdim" && std::string_view(b.args[i].name) == "keepdims")) {
        index = i;
      }
    }
    if (index == b.args.size()) {
      return lw.error(ErrorCode::InvalidArgument, fmt::format("`{}` has no argument `{}`", signature(display, b), key), *value);
    }
    if (bound[index] != nullptr) {
      return lw.error(ErrorCode::InvalidArgument, fmt::format("`{}` got argument `{}` twice", display, key), *value);
    }
    bound[index] = value.get();
  }
  for (std::size_t i = skip; i < b.args.size(); ++i) {
    if (bound[i] == nullptr && !b.args[i].default_text) {
      std::size_t required = 0;
      for (std::size_t k = skip; k < b.args.size(); ++k) required += b.args[k].default_text ? 0 : 1;
      return lw.error(ErrorCode::InvalidArgument,
                      fmt::format("`{}` is missing argument `{}` ({} required, got {})", signature(display, b), b.args[i].name,
                                  required, given + call.keywords.size()),
                      call);
    }
  }
  return Status::ok();
}

}  // namespace

// Lowers a bound op call: `self_value` (a method's object) fills argument 0 when given.
static Expected<Val> lowerBound(Lowerer& lw, const std::string& display, const OpBinding& b, const Expr& call,
                                const std::vector<const Expr*>& bound, const Val* self_value) {
  std::vector<Val> inputs;
  NamedAttrs attrs;
  int num_outputs = 1;
  bool float_arg = false;
  bool dtype_given = false;
  for (std::size_t i = 0; i < b.args.size(); ++i) {
    const ArgSpec& spec = b.args[i];
    const Expr* e = bound[i];
    const std::string what = fmt::format("argument `{}` of `{}`", spec.name, display);
    if (i == 0 && self_value != nullptr) {
      inputs.push_back(*self_value);
      continue;
    }
    switch (spec.role) {
      case 'T':
      case 'G':
      case 'N':
      case 'M':
      case 'O': {
        if (e == nullptr) {
          if (spec.role == 'O') inputs.push_back(Val::none());
          continue;  // trailing optional numbers are omitted
        }
        SVM_ASSIGN_OR_RETURN(Val v, lw.lowerExpr(*e));
        if (spec.role == 'O' && v.kind == VKind::None) {
          inputs.push_back(v);
          continue;
        }
        if ((spec.role == 'N' || spec.role == 'M') && v.kind == VKind::None) {
          if (spec.role == 'M') continue;
          return lw.error(ErrorCode::KindMismatch, fmt::format("{} must be a number", what), *e);
        }
        if (v.kind == VKind::Float) float_arg = true;
        if ((spec.role == 'T' || spec.role == 'O') && !(v.isTensorLike() || v.isScalarKind())) {
          return lw.error(ErrorCode::KindMismatch, fmt::format("{} must be a tensor", what), *e);
        }
        if ((spec.role == 'N' || spec.role == 'M') && !v.isScalarKind()) {
          return lw.error(ErrorCode::KindMismatch, fmt::format("{} must be a number", what), *e);
        }
        if (spec.role == 'G' && !(v.isTensorLike() || v.kind == VKind::Int || v.kind == VKind::Bool)) {
          return lw.error(ErrorCode::KindMismatch, fmt::format("{} must be a tensor or an int", what), *e);
        }
        inputs.push_back(v);
        break;
      }
      case 'S': {
        SVM_ASSIGN_OR_RETURN(Val v, lw.lowerExpr(*e));
        if (v.isScalarKind()) {
          Val t;
          t.kind = VKind::Tuple;
          t.static_tuple = true;
          t.items.push_back(v);
          v = t;
        }
        if (v.kind != VKind::Tuple && !v.isTensorLike()) return lw.error(ErrorCode::KindMismatch, fmt::format("{} must be a shape (a tuple of ints)", what), *e);
        inputs.push_back(v);
        break;
      }
      case 'L': {
        SVM_ASSIGN_OR_RETURN(Val v, lw.lowerExpr(*e));
        if (!v.static_tuple || v.items.empty()) {
          return lw.error(ErrorCode::Unsupported, fmt::format("{} must be a non-empty list or tuple of tensors written out (or returned by ops.split)", what), *e);
        }
        for (const Val& item : v.items) inputs.push_back(item);
        break;
      }
      case 'i': {
        if (e == nullptr) continue;
        SVM_ASSIGN_OR_RETURN(std::int64_t value, lw.constInt(*e, what));
        attrs.emplace_back(spec.attr, AttrValue::ofInt(value));
        break;
      }
      case 'a':
      case 'p': {
        if (e == nullptr) continue;
        auto c = lw.constEval(*e);
        if (c && c->kind == VKind::None) continue;
        SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> values, lw.constInts(*e, what));
        attrs.emplace_back(spec.attr, AttrValue::ofInts(values));
        break;
      }
      case 'P': {
        SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> values, lw.constInts(*e, what));
        attrs.emplace_back(spec.attr, AttrValue::ofInts(values));
        break;
      }
      case 'f': {
        if (e == nullptr) continue;
        auto c = lw.constEval(*e);
        if (!c || !c->is_const || c->kind == VKind::None) return lw.error(ErrorCode::InvalidArgument, fmt::format("{} must be a constant number", what), *e);
        attrs.emplace_back(spec.attr, AttrValue::ofFloat(c->asDouble()));
        break;
      }
      case 'b': {
        if (e == nullptr) continue;
        auto c = lw.constEval(*e);
        if (!c || !c->is_const || c->kind == VKind::None) return lw.error(ErrorCode::InvalidArgument, fmt::format("{} must be a constant bool", what), *e);
        attrs.emplace_back(spec.attr, AttrValue::ofBool(c->asDouble() != 0.0));
        break;
      }
      case 'd': {
        if (e == nullptr) {
          if (!spec.default_text || *spec.default_text == "None") continue;
          auto dt = parseDType(*spec.default_text);
          if (dt) attrs.emplace_back(spec.attr, AttrValue::ofDType(*dt));
          continue;
        }
        auto c = lw.constEval(*e);
        if (c && c->kind == VKind::None) continue;
        if (!c || c->kind != VKind::DType) return lw.error(ErrorCode::InvalidArgument, fmt::format("{} must be a dtype such as ops.float32", what), *e);
        attrs.emplace_back(spec.attr, AttrValue::ofDType(c->dtype));
        dtype_given = true;
        break;
      }
      case 'X': {
        SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> values, lw.constInts(*e, what));
        auto c = lw.constEval(*e);
        if (c && c->is_const) {
          if (values[0] <= 0) return lw.error(ErrorCode::InvalidArgument, fmt::format("{} must be positive", what), *e);
          attrs.emplace_back("sections", AttrValue::ofInt(values[0]));
          num_outputs = static_cast<int>(values[0]);
        } else {
          if (values.empty()) return lw.error(ErrorCode::InvalidArgument, fmt::format("{} must not be empty", what), *e);
          attrs.emplace_back("sizes", AttrValue::ofInts(values));
          num_outputs = static_cast<int>(values.size());
        }
        break;
      }
      default: break;
    }
  }
  if (b.op == "arange" && !dtype_given) {
    attrs.emplace_back("dtype", AttrValue::ofDType(float_arg ? DType::Float64 : DType::Int64));
  }
  lw.setLoc(call.line, call.col);
  SVM_ASSIGN_OR_RETURN(std::vector<Val> results, lw.tensorOpMulti(b.op, std::move(inputs), std::move(attrs), call, num_outputs));
  if (b.op == "split") {
    Val t;
    t.kind = VKind::Tuple;
    t.static_tuple = true;
    t.items = results;
    t.tuple_len = static_cast<int>(results.size());
    return t;
  }
  return results[0];
}

Expected<Val> Lowerer::callOpsFunction(const std::string& name, const Expr& call) {
  const OpBinding* b = findBinding(name);
  if (b == nullptr) return error(ErrorCode::UnknownName, fmt::format("`ops.{}` is not a ShapeVM op", name), call);
  std::vector<const Expr*> bound;
  SVM_RETURN_IF_ERROR(bindArgs(*this, "ops." + name, *b, call, bound));
  return lowerBound(*this, "ops." + name, *b, call, bound, nullptr);
}

Expected<Val> Lowerer::callMethod(const Expr& object_expr, const std::string& method, const Expr& call) {
  SVM_ASSIGN_OR_RETURN(Val self, lowerExpr(object_expr));
  if (!self.isTensorLike()) {
    return error(ErrorCode::Unsupported, fmt::format("method `.{}()` is only supported on tensors", method), call);
  }
  setLoc(call.line, call.col);
  static const std::set<std::string> kReduce = {"sum", "mean", "max", "min", "argmax", "softmax", "log_softmax"};
  const std::string display = "." + method + "()";
  if (kReduce.count(method) || method == "squeeze" || method == "unsqueeze" || method == "contiguous" ||
      method == "astype" || method == "split") {
    const OpBinding* b = findBinding(method == "astype" ? "cast" : method);
    std::vector<const Expr*> bound;
    SVM_RETURN_IF_ERROR(bindArgs(*this, display, *b, call, bound, 1));
    return lowerBound(*this, display, *b, call, bound, &self);
  }
  if (method == "reshape" || method == "transpose" || method == "permute" || method == "view") {
    if (!call.keywords.empty()) return error(ErrorCode::Unsupported, fmt::format("`{}` takes positional arguments only", display), call);
    if (method == "reshape" || method == "view") {
      Val shape;
      if (call.items.size() == 1) {
        SVM_ASSIGN_OR_RETURN(shape, lowerExpr(*call.items[0]));
        if (shape.isScalarKind()) {
          Val t;
          t.kind = VKind::Tuple;
          t.static_tuple = true;
          t.items.push_back(shape);
          shape = t;
        }
      } else {
        shape.kind = VKind::Tuple;
        shape.static_tuple = true;
        for (const ExprPtr& item : call.items) {
          SVM_ASSIGN_OR_RETURN(Val v, lowerExpr(*item));
          shape.items.push_back(v);
        }
      }
      if (shape.kind != VKind::Tuple) return error(ErrorCode::KindMismatch, "reshape needs a shape (ints or a tuple of ints)", call);
      setLoc(call.line, call.col);
      return tensorOp("reshape", {self, shape}, {}, call);
    }
    std::vector<std::int64_t> perm;
    if (call.items.size() == 1) {
      SVM_ASSIGN_OR_RETURN(perm, constInts(*call.items[0], "the permutation"));
    } else {
      for (const ExprPtr& item : call.items) {
        SVM_ASSIGN_OR_RETURN(std::int64_t p, constInt(*item, "a permutation entry"));
        perm.push_back(p);
      }
    }
    NamedAttrs attrs;
    if (!perm.empty()) attrs.emplace_back("perm", AttrValue::ofInts(perm));
    return tensorOp("transpose", {self}, attrs, call);
  }
  return error(ErrorCode::Unsupported, fmt::format("tensor method `.{}()` is not supported in ShapeVM functions", method), call);
}

Expected<Val> Lowerer::callBuiltin(const std::string& name, const Expr& call) {
  if (!call.keywords.empty()) return error(ErrorCode::Unsupported, fmt::format("`{}()` takes no keyword arguments", name), call);
  std::vector<Val> args;
  for (const ExprPtr& a : call.items) {
    SVM_ASSIGN_OR_RETURN(Val v, lowerExpr(*a));
    args.push_back(v);
  }
  setLoc(call.line, call.col);
  auto arity = [&](std::size_t lo, std::size_t hi) -> Status {
    if (args.size() < lo || args.size() > hi) {
      return error(ErrorCode::InvalidArgument,
                   lo == hi ? fmt::format("`{}()` takes {} argument{}, got {}", name, lo, lo == 1 ? "" : "s", args.size())
                            : fmt::format("`{}()` takes {} to {} arguments, got {}", name, lo, hi, args.size()),
                   call);
    }
    return Status::ok();
  };
  if (name == "int" || name == "float" || name == "bool" || name == "abs") {
    SVM_RETURN_IF_ERROR(arity(1, 1));
    Val v = args[0];
    if (name == "abs" && v.isTensorLike()) return tensorOp("abs", {v}, {}, call);
    if (!v.isScalarKind()) return error(ErrorCode::KindMismatch, fmt::format("`{}()` needs a number or bool here", name), call);
    if (name == "int") return scalarUnary(Opcode::ToInt, v, VKind::Int);
    if (name == "float") return scalarUnary(Opcode::ToFloat, v, VKind::Float);
    if (name == "bool") return scalarUnary(Opcode::ToBool, v, VKind::Bool);
    return scalarUnary(Opcode::Abs, v, v.kind == VKind::Bool ? VKind::Int : v.kind);
  }
  if (name == "min" || name == "max") {
    if (args.size() == 1 && args[0].static_tuple) args = args[0].items;
    if (args.size() < 2) return error(ErrorCode::InvalidArgument, fmt::format("`{}()` needs at least 2 numbers", name), call);
    Val acc = args[0];
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (!acc.isScalarKind() || !args[i].isScalarKind()) {
        return error(ErrorCode::Unsupported, fmt::format("`{}()` works on numbers; use ops.{}imum for tensors", name, name), call);
      }
      VKind k = (acc.kind == VKind::Float || args[i].kind == VKind::Float) ? VKind::Float : VKind::Int;
      SVM_ASSIGN_OR_RETURN(acc, scalarBinary(name == "min" ? Opcode::Min : Opcode::Max, acc, args[i], k));
    }
    return acc;
  }
  if (name == "len") {
    SVM_RETURN_IF_ERROR(arity(1, 1));
    Val v = args[0];
    if (v.static_tuple) return Val::ofInt(static_cast<std::int64_t>(v.items.size()));
    if (v.kind == VKind::Tuple) {
      if (options_.fold && v.tuple_len >= 0) return Val::ofInt(v.tuple_len);
      std::int32_t r = newReg();
      emit(Opcode::TupleLen, r, materialize(v));
      return Val::reg_of(VKind::Int, r);
    }
    if (v.isTensorLike()) return dimOf(v, 0, call);
    return error(ErrorCode::KindMismatch, "`len()` needs a tuple, shape or tensor", call);
  }
  if (name == "range") return error(ErrorCode::Unsupported, "`range()` is only supported as the iterable of a `for` loop", call);
  return error(ErrorCode::Unsupported, fmt::format("`{}` is not supported in ShapeVM functions", name), call);
}

Expected<Val> Lowerer::callUser(const FunctionInfo& callee, const Expr& call) {
  const Stmt& def = *callee.def;
  const std::size_t skip = callee.class_name.empty() ? 0 : 1;
  const std::size_t nparams = def.params.size() - skip;
  std::vector<const Expr*> bound(nparams, nullptr);
  if (call.items.size() > nparams) {
    return error(ErrorCode::InvalidArgument, fmt::format("`{}` takes {} arguments, got {}", callee.name, nparams, call.items.size()), call);
  }
  for (std::size_t i = 0; i < call.items.size(); ++i) bound[i] = call.items[i].get();
  for (const auto& [key, value] : call.keywords) {
    std::size_t index = nparams;
    for (std::size_t i = 0; i < nparams; ++i) {
      if (def.params[i + skip].name == key) index = i;
    }
    if (index == nparams) return error(ErrorCode::InvalidArgument, fmt::format("`{}` has no parameter `{}`", callee.name, key), *value);
    if (bound[index] != nullptr) return error(ErrorCode::InvalidArgument, fmt::format("`{}` got parameter `{}` twice", callee.name, key), *value);
    bound[index] = value.get();
  }
  std::vector<std::int32_t> args;
  std::vector<ValueKind> kinds;  // what the inliner needs to prove the callee's parameter checks
  std::vector<TensorDescriptor> tokens;
  auto known = [&](const Val& v) {
    switch (v.kind) {
      case VKind::Tensor: kinds.push_back(ValueKind::Tensor); break;
      case VKind::Int: kinds.push_back(ValueKind::Int); break;
      case VKind::Float: kinds.push_back(ValueKind::Float); break;
      case VKind::Bool: kinds.push_back(ValueKind::Bool); break;
      case VKind::Tuple: kinds.push_back(ValueKind::Tuple); break;
      default: kinds.push_back(ValueKind::None); break;
    }
    tokens.push_back(v.kind == VKind::Tensor ? v.token : TensorDescriptor::notTensor());
  };
  for (std::size_t i = 0; i < nparams; ++i) {
    const frontend::Param& p = def.params[i + skip];
    const Expr* e = bound[i] != nullptr ? bound[i] : p.default_value.get();
    if (e == nullptr) {
      return error(ErrorCode::InvalidArgument,
                   fmt::format("`{}` takes {} arguments, got {} (missing `{}`)", callee.name, nparams,
                               call.items.size() + call.keywords.size(), p.name),
                   call);
    }
    SVM_ASSIGN_OR_RETURN(Val v, lowerExpr(*e));
    if (v.kind == VKind::Str || v.kind == VKind::Namespace || v.kind == VKind::DType || v.kind == VKind::None) {
      return error(ErrorCode::KindMismatch, fmt::format("argument `{}` of `{}` must be a tensor or a number", p.name, callee.name), *e);
    }
    args.push_back(materialize(v));
    known(v);
  }
  for (const std::string& attr : callee.self_attrs) {
    auto it = vars_.find("self." + attr);
    if (it == vars_.end()) return error(ErrorCode::UnknownName, fmt::format("`{}` reads self.{}, which is not available here", callee.name, attr), call);
    args.push_back(it->second.reg);
    known(it->second.value);
  }
  setLoc(call.line, call.col);
  const int n = callee.num_outputs < 0 ? 1 : callee.num_outputs;
  std::vector<std::int32_t> results;
  std::vector<Val> vals;
  for (int k = 0; k < n; ++k) {
    results.push_back(newReg());
    Val r = k < static_cast<int>(callee.result_shapes.size()) ? callee.result_shapes[static_cast<std::size_t>(k)] : Val::reg_of(VKind::Unknown, -1);
    r.reg = results.back();
    vals.push_back(r);
  }
  IrInst& inst = emit(Opcode::Call);
  inst.op_name = callee.name;
  inst.inputs = args;
  inst.outputs = results;
  inst.arg_kinds = std::move(kinds);
  inst.in_tokens = std::move(tokens);
  if (n == 0) return Val::none();
  if (n == 1) return vals[0];
  Val t;
  t.kind = VKind::Tuple;
  t.static_tuple = true;
  t.items = vals;
  t.tuple_len = n;
  return t;
}

Expected<Val> Lowerer::lowerCall(const Expr& e) {
  const Expr& callee = *e.lhs;
  if (callee.kind == ExprKind::Name) {
    if (vars_.count(callee.name) && vars_[callee.name].assignments > 0) {
      return error(ErrorCode::Unsupported, fmt::format("`{}` is a variable and cannot be called", callee.name), callee);
    }
    if (auto it = functions_.find(callee.name); it != functions_.end()) return callUser(it->second, e);
    static const std::set<std::string> kBuiltins = {"int", "float", "bool", "min", "max", "abs", "len", "range"};
    if (kBuiltins.count(callee.name)) return callBuiltin(callee.name, e);
    static const std::set<std::string> kPython = {"print", "list", "dict", "set", "tuple", "str", "sum", "zip", "enumerate",
                                                  "isinstance", "type", "sorted", "reversed", "map", "filter", "any", "all",
                                                  "round", "super", "getattr", "setattr", "hasattr", "iter", "next", "open",
                                                  "pow", "divmod", "hash", "id", "input", "repr", "format", "vars", "eval", "exec"};
    if (kPython.count(callee.name)) {
      return error(ErrorCode::Unsupported, fmt::format("`{}` is not supported in ShapeVM functions", callee.name), callee);
    }
    if (classes_.count(callee.name)) {
      return error(ErrorCode::Unsupported, fmt::format("creating `{}` objects is not supported in ShapeVM functions", callee.name), callee);
    }
    return error(ErrorCode::UnknownName, fmt::format("name `{}` is not defined", callee.name), callee);
  }
  if (callee.kind == ExprKind::Attribute) {
    const Expr& base = *callee.lhs;
    const bool ops_ns = (base.kind == ExprKind::Name && base.name == "ops" && !(vars_.count("ops") && vars_["ops"].assignments)) ||
                        (base.kind == ExprKind::Attribute && base.name == "ops" && base.lhs->kind == ExprKind::Name &&
                         base.lhs->name == "shapevm");
    if (ops_ns) return callOpsFunction(callee.name, e);
    if (base.kind == ExprKind::Name && base.name == "self" && !class_name_.empty()) {
      auto it = functions_.find(class_name_ + "." + callee.name);
      if (it != functions_.end()) return callUser(it->second, e);
      if (callee.name == "__init__" || classes_[class_name_].methods.count(callee.name)) {
        return error(ErrorCode::Unsupported, fmt::format("calling `self.{}` is not supported", callee.name), callee);
      }
    }
    if (base.kind == ExprKind::Name && (base.name == "math" || base.name == "np" || base.name == "numpy" || base.name == "torch")) {
      return error(ErrorCode::Unsupported, fmt::format("`{}.{}` is not supported in ShapeVM functions (use ops.*)", base.name, callee.name), callee);
    }
    return callMethod(base, callee.name, e);
  }
  return error(ErrorCode::Unsupported, "only functions, ops.* and tensor methods can be called", callee);
}

Expected<Val> Lowerer::lowerAttribute(const Expr& e) {
  const Expr& base = *e.lhs;
  if (auto c = constEval(e); c && (c->kind == VKind::DType || (base.kind == ExprKind::Name && base.name == "self"))) return *c;
  if (base.kind == ExprKind::Name && base.name == "self" && !class_name_.empty()) {
    auto it = vars_.find("self." + e.name);
    if (it != vars_.end()) return Val(it->second.value);
    return error(ErrorCode::Unsupported, fmt::format("`self.{}` cannot be used as a value", e.name), e);
  }
  if ((base.kind == ExprKind::Name && base.name == "ops") || (base.kind == ExprKind::Attribute && base.name == "ops")) {
    if (findBinding(e.name)) return error(ErrorCode::Unsupported, fmt::format("`ops.{}` must be called", e.name), e);
    return error(ErrorCode::UnknownName, fmt::format("`ops.{}` is not a ShapeVM op or dtype", e.name), e);
  }
  SVM_ASSIGN_OR_RETURN(Val v, lowerExpr(base));
  setLoc(e.line, e.col);
  if (!v.isTensorLike()) return error(ErrorCode::Unsupported, fmt::format("attribute `.{}` is only supported on tensors", e.name), e);
  if (e.name == "shape") return shapeOf(v, e);
  if (e.name == "T") return tensorOp("transpose", {v}, {}, e);
  if (e.name == "ndim") {
    if (options_.fold && v.kind == VKind::Tensor && !v.token.any_rank) return Val::ofInt(v.token.rank());
    std::int32_t r = newReg();
    emit(Opcode::RankOf, r, materialize(v));
    return Val::reg_of(VKind::Int, r);
  }
  return error(ErrorCode::Unsupported, fmt::format("tensor attribute `.{}` is not supported in ShapeVM functions", e.name), e);
}

Expected<Val> Lowerer::dimOf(Val tensor, std::int64_t axis, const Expr& at) {
  if (tensor.kind == VKind::Tensor && !tensor.token.any_rank) {
    const std::int64_t rank = tensor.token.rank();
    if (axis >= rank || axis < -rank) {
      return error(ErrorCode::IndexOutOfRange, fmt::format("shape index {} is out of range for a rank-{} tensor", axis, rank), at);
    }
    const DimToken& d = tensor.token.dims[static_cast<std::size_t>(axis < 0 ? axis + rank : axis)];
    if (options_.fold && d.is_static) return Val::ofInt(d.size);
    setLoc(at.line, at.col);
    std::int32_t r = newReg();
    emit(Opcode::DimOf, r, materialize(tensor), static_cast<std::int32_t>(axis));
    Val v = Val::reg_of(VKind::Int, r);
    if (!d.is_static) v.dim_id = d.id;
    return v;
  }
  setLoc(at.line, at.col);
  std::int32_t r = newReg();
  emit(Opcode::DimOf, r, materialize(tensor), static_cast<std::int32_t>(axis));
  return Val::reg_of(VKind::Int, r);
}

Expected<Val> Lowerer::shapeOf(Val tensor, const Expr& at) {
  if (tensor.kind == VKind::Tensor && !tensor.token.any_rank) {
    Val t;
    t.kind = VKind::Tuple;
    t.static_tuple = true;
    for (int k = 0; k < tensor.token.rank(); ++k) {
      SVM_ASSIGN_OR_RETURN(Val d, dimOf(tensor, k, at));
      t.items.push_back(d);
    }
    t.tuple_len = tensor.token.rank();
    return t;
  }
  setLoc(at.line, at.col);
  std::int32_t r = newReg();
  emit(Opcode::ShapeOf, r, materialize(tensor));
  Val v = Val::reg_of(VKind::Tuple, r);
  return v;
}

Expected<Val> Lowerer::lowerSubscript(const Expr& e) {
  // x.shape[i] reads one dim directly.
  if (e.lhs->kind == ExprKind::Attribute && e.lhs->name == "shape" && e.rhs->kind != ExprKind::Slice &&
      e.rhs->kind != ExprKind::Tuple) {
    if (auto index = constEval(*e.rhs); index && index->is_const && index->kind == VKind::Int) {
      SVM_ASSIGN_OR_RETURN(Val base, lowerExpr(*e.lhs->lhs));
      if (base.isTensorLike()) return dimOf(base, index->i, e);
    }
  }
  SVM_ASSIGN_OR_RETURN(Val base, lowerExpr(*e.lhs));
  if (base.kind == VKind::Tuple) {
    if (e.rhs->kind == ExprKind::Slice) {
      if (!base.static_tuple) return error(ErrorCode::Unsupported, "slicing a tuple of unknown length is not supported", e);
      std::int64_t parts[3] = {0, static_cast<std::int64_t>(base.items.size()), 1};
      for (int k = 0; k < 3; ++k) {
        if (e.rhs->slice_parts[k]) {
          SVM_ASSIGN_OR_RETURN(parts[k], constInt(*e.rhs->slice_parts[k], "a tuple slice bound"));
        }
      }
      if (parts[2] != 1) return error(ErrorCode::Unsupported, "tuple slices with a step are not supported", e);
      const auto n = static_cast<std::int64_t>(base.items.size());
      auto clamp = [&](std::int64_t x) { if (x < 0) x += n; return std::clamp<std::int64_t>(x, 0, n); };
      Val t;
      t.kind = VKind::Tuple;
      t.static_tuple = true;
      for (std::int64_t k = clamp(parts[0]); k < clamp(parts[1]); ++k) t.items.push_back(base.items[static_cast<std::size_t>(k)]);
      t.tuple_len = static_cast<int>(t.items.size());
      return t;
    }
    SVM_ASSIGN_OR_RETURN(Val index, lowerExpr(*e.rhs));
    if (index.kind != VKind::Int && index.kind != VKind::Bool) return error(ErrorCode::KindMismatch, "tuple indices must be ints", *e.rhs);
    if (base.static_tuple && index.is_const) {
      const auto n = static_cast<std::int64_t>(base.items.size());
      std::int64_t k = index.asInt() < 0 ? index.asInt() + n : index.asInt();
      if (k < 0 || k >= n) return error(ErrorCode::IndexOutOfRange, fmt::format("tuple index {} out of range (length {})", index.asInt(), n), *e.rhs);
      return base.items[static_cast<std::size_t>(k)];
    }
    setLoc(e.line, e.col);
    std::int32_t r = newReg();
    std::int32_t b = materialize(base);
    emit(Opcode::TupleGet, r, b, materialize(index));
    return Val::reg_of(VKind::Int, r);
  }
  if (!base.isTensorLike()) return error(ErrorCode::Unsupported, "only tensors, shapes and tuples can be indexed", e);
  // Tensor indexing: slices on some axes, ints on others (gathers, highest axis first).
  std::vector<const Expr*> parts;
  if (e.rhs->kind == ExprKind::Tuple) {
    for (const ExprPtr& p : e.rhs->items) parts.push_back(p.get());
  } else {
    parts.push_back(e.rhs.get());
  }
  Val starts, stops, steps;
  starts.kind = stops.kind = steps.kind = VKind::Tuple;
  starts.static_tuple = stops.static_tuple = steps.static_tuple = true;
  std::vector<std::int64_t> axes;
  std::vector<std::pair<std::int64_t, Val>> gathers;
  bool any_step = false;
  for (std::size_t axis = 0; axis < parts.size(); ++axis) {
    const Expr& p = *parts[axis];
    if (p.kind == ExprKind::None) return error(ErrorCode::Unsupported, "indexing with None (new axes) is not supported; use ops.unsqueeze", p);
    if (p.kind == ExprKind::Slice) {
      Val bounds[3];
      for (int k = 0; k < 3; ++k) {
        if (p.slice_parts[k]) {
          SVM_ASSIGN_OR_RETURN(bounds[k], lowerExpr(*p.slice_parts[k]));
          if (bounds[k].kind == VKind::None) bounds[k] = Val();
          else if (bounds[k].kind != VKind::Int && bounds[k].kind != VKind::Bool) return error(ErrorCode::KindMismatch, "slice bounds must be ints", *p.slice_parts[k]);
        }
      }
      if (bounds[0].kind == VKind::Unknown && bounds[1].kind == VKind::Unknown && bounds[2].kind == VKind::Unknown) continue;  // `:`
      if (bounds[2].kind != VKind::Unknown) any_step = true;
      const bool negative = bounds[2].is_const && bounds[2].asInt() < 0;
      if (bounds[2].is_const && bounds[2].asInt() == 0) return error(ErrorCode::InvalidArgument, "slice step cannot be zero", p);
      if (bounds[2].kind != VKind::Unknown && !bounds[2].is_const) {
        if (bounds[0].kind == VKind::Unknown || bounds[1].kind == VKind::Unknown) {
          return error(ErrorCode::Unsupported, "a slice with a non-constant step needs explicit start and stop", p);
        }
      }
      const std::int64_t big = std::numeric_limits<std::int64_t>::max();
      const std::int64_t small = std::numeric_limits<std::int64_t>::min();
      starts.items.push_back(bounds[0].kind != VKind::Unknown ? bounds[0] : Val::ofInt(negative ? big : 0));
      stops.items.push_back(bounds[1].kind != VKind::Unknown ? bounds[1] : Val::ofInt(negative ? small : big));
      steps.items.push_back(bounds[2].kind != VKind::Unknown ? bounds[2] : Val::ofInt(1));
      axes.push_back(static_cast<std::int64_t>(axis));
      continue;
    }
    SVM_ASSIGN_OR_RETURN(Val index, lowerExpr(p));
    if (!(index.kind == VKind::Int || index.kind == VKind::Bool || index.isTensorLike())) {
      return error(ErrorCode::KindMismatch, "tensor indices must be ints, slices or int tensors", p);
    }
    gathers.emplace_back(static_cast<std::int64_t>(axis), index);
  }
  // One tensor index beside slices matches numpy; a tensor index together with any other
  // integer or tensor index is numpy "advanced indexing" (broadcast indices, moved axes), which
  // sequential gathers would get wrong — reject it rather than miscompile.
  std::size_t tensor_indices = 0;
  for (const auto& [axis, index] : gathers) tensor_indices += index.isTensorLike() ? 1 : 0;
  if (tensor_indices > 0 && gathers.size() > 1) {
    return error(ErrorCode::Unsupported,
                 "indexing with a tensor index together with other integer or tensor indices (numpy advanced "
                 "indexing) is not supported; index one axis at a time or use ops.gather",
                 e);
  }
  setLoc(e.line, e.col);
  Val result = base;
  if (!axes.empty()) {
    std::vector<Val> inputs = {result, starts, stops};
    if (any_step) inputs.push_back(steps);
    SVM_ASSIGN_OR_RETURN(result, tensorOp("slice", inputs, {{"axes", AttrValue::ofInts(axes)}}, e));
  }
  for (auto it = gathers.rbegin(); it != gathers.rend(); ++it) {
    SVM_ASSIGN_OR_RETURN(result, tensorOp("gather", {result, it->second}, {{"axis", AttrValue::ofInt(it->first)}}, e));
  }
  return result;
}

}  // namespace shapevm::frontend
