// SPDX-License-Identifier: Apache-2.0
// GraphEmitter and NodeCtx (onnx_graph.h): emitting or folding ops, materializing shape values.
#include "onnx/onnx_graph.h"

#include <algorithm>

#include "ops/registry.h"

namespace shapevm::onnx_import {

Val Val::ofConst(Tensor t) {
  Val v;
  v.kind = Kind::Const;
  v.dtype = t.dtype();
  v.rank = t.rank();
  v.dims.assign(t.shape().span().begin(), t.shape().span().end());
  v.constant = std::move(t);
  return v;
}

Val Val::ofTensor(int reg, std::optional<DType> dtype, int rank) {
  Val v;
  v.kind = Kind::Tensor;
  v.reg = reg;
  v.dtype = dtype;
  v.rank = rank;
  if (rank >= 0) v.dims.assign(static_cast<std::size_t>(rank), -1);
  return v;
}

Val Val::ofShape(std::vector<ShapeElem> elems, bool scalar) {
  Val v;
  v.kind = Kind::Shape;
  v.scalar = scalar;
  v.dtype = DType::Int64;
  v.rank = scalar ? 0 : 1;
  v.dims = scalar ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{static_cast<std::int64_t>(elems.size())};
  v.elems = std::move(elems);
  return v;
}

std::vector<std::int64_t> intsOfTensor(const Tensor& t) {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::Int64 && t.isContiguous()) out.push_back(t.data<std::int64_t>()[i]);
    else out.push_back(static_cast<std::int64_t>(t.elementAsDouble(i)));
  }
  return out;
}

int GraphEmitter::constReg(int const_index) {
  const int r = newReg();
  fn_.emit(Opcode::LoadConst, r, const_index);
  return r;
}

int GraphEmitter::regOf(const Operand& o) {
  if (!o.is_const) return o.reg;
  const Value& v = o.constant;
  if (v.isTensor()) {
    const int r = constReg(module_.constTensor(v.tensor()));
    markTensor(r);
    return r;
  }
  if (v.isInt()) return constReg(module_.constInt(v.asInt()));
  if (v.isFloat()) return constReg(module_.constFloat(v.asFloat()));
  if (v.isBool()) return constReg(module_.constBool(v.asBool()));
  if (v.isTuple()) {
    Expected<std::vector<std::int64_t>> ints = v.toInts("constant");
    if (ints) return constReg(module_.constInts(*ints));
  }
  return constReg(module_.constNone());
}

int GraphEmitter::intReg(ShapeElem& e) {
  if (e.reg < 0) e.reg = constReg(module_.constInt(*e.known));
  return e.reg;
}

int GraphEmitter::tupleOf(std::vector<ShapeElem>& elems) {
  bool all_known = true;
  std::vector<std::int64_t> known;
  for (const ShapeElem& e : elems) {
    all_known = all_known && e.known.has_value();
    if (e.known) known.push_back(*e.known);
  }
  if (all_known) return constReg(module_.constInts(known));
  std::vector<std::int32_t> regs;
  for (ShapeElem& e : elems) regs.push_back(intReg(e));
  const int r = newReg();
  fn_.emitTuplePack(r, regs);
  return r;
}

ShapeElem GraphEmitter::scalar(Opcode op, ShapeElem& a, ShapeElem& b) {
  if (a.known && b.known) {
    const std::int64_t x = *a.known, y = *b.known;
    switch (op) {
      case Opcode::Add: return {x + y, -1};
      case Opcode::Sub: return {x - y, -1};
      case Opcode::Mul: return {x * y, -1};
      case Opcode::Div:
        if (y != 0) return {x / y, -1};
        break;  // ONNX int Div truncates
      case Opcode::Min: return {std::min(x, y), -1};
      case Opcode::Max: return {std::max(x, y), -1};
      case Opcode::Eq: return {x == y, -1};
      case Opcode::Lt: return {x < y, -1};
      case Opcode::Gt: return {x > y, -1};
      default: break;
    }
  }
  const int ra = intReg(a), rb = intReg(b);
  const int r = newReg();
  if (op == Opcode::Div) {  // truncating int division: int(a / b)
    fn_.emit(Opcode::Div, r, ra, rb);
    const int t = newReg();
    fn_.emit(Opcode::ToInt, t, r);
    return {std::nullopt, t};
  }
  fn_.emit(op, r, ra, rb);
  return {std::nullopt, r};
}

ShapeElem GraphEmitter::dimOf(Val& v, int axis) {
  if (axis >= 0 && static_cast<std::size_t>(axis) < v.dims.size() && v.dims[static_cast<std::size_t>(axis)] >= 0) {
    return {v.dims[static_cast<std::size_t>(axis)], -1};
  }
  const int r = newReg();
  fn_.emit(Opcode::DimOf, r, v.reg, axis);
  return {std::nullopt, r};
}

std::optional<std::vector<ShapeElem>> GraphEmitter::shapeElems(const Val& v) const {
  if (v.kind == Val::Kind::Shape) return v.elems;
  if (v.kind == Val::Kind::Const && v.constant.rank() <= 1 && v.constant.numel() <= 64 &&
      (v.constant.dtype() == DType::Int64 || v.constant.dtype() == DType::Int32)) {
    std::vector<ShapeElem> elems;
    for (std::int64_t x : intsOfTensor(v.constant)) elems.push_back({x, -1});
    return elems;
  }
  return std::nullopt;
}

Expected<std::optional<std::vector<ShapeElem>>> GraphEmitter::elemsOf(Val& v) {
  if (std::optional<std::vector<ShapeElem>> elems = shapeElems(v)) return elems;
  constexpr std::int64_t kMaxElems = 64;
  const bool int_tensor =
      v.kind == Val::Kind::Tensor && v.dtype && (*v.dtype == DType::Int64 || *v.dtype == DType::Int32);
  if (!int_tensor || v.rank < 0 || v.rank > 1 ||
      (v.rank == 1 && (v.dims.empty() || v.dims[0] < 0 || v.dims[0] > kMaxElems))) {
    return std::optional<std::vector<ShapeElem>>();
  }
  std::vector<ShapeElem> elems;
  const std::int64_t n = v.rank == 0 ? 1 : v.dims[0];
  for (std::int64_t i = 0; i < n; ++i) {
    int item = v.reg;
    if (v.rank == 1) {
      SVM_ASSIGN_OR_RETURN(Val g, op1("gather", {Operand::ofReg(v.reg), Operand::of(Value::fromInt(i))},
                                      {{"axis", AttrValue::ofInt(0)}}));
      item = g.reg;
    }
    const int r = newReg();
    fn_.emit(Opcode::ToInt, r, item);
    elems.push_back({std::nullopt, r});
  }
  return std::optional<std::vector<ShapeElem>>(std::move(elems));
}

Expected<Operand> GraphEmitter::tensor(Val& v, std::string_view what) {
  switch (v.kind) {
    case Val::Kind::Missing:
      return makeError(ErrorCode::Unsupported, "{} is not available: {}", what, v.missing_reason);
    case Val::Kind::Const: return Operand::of(Value::fromTensor(v.constant));
    case Val::Kind::Tensor: return Operand::ofReg(v.reg);
    case Val::Kind::Shape: break;
  }
  if (v.reg >= 0) return Operand::ofReg(v.reg);
  if (std::all_of(v.elems.begin(), v.elems.end(), [](const ShapeElem& e) { return e.known.has_value(); })) {
    std::vector<std::int64_t> known;
    for (const ShapeElem& e : v.elems) known.push_back(*e.known);
    SVM_ASSIGN_OR_RETURN(
        Tensor t,
        Tensor::empty(DType::Int64,
                      *Shape::from(v.scalar ? std::vector<std::int64_t>{}
                                            : std::vector<std::int64_t>{static_cast<std::int64_t>(known.size())})));
    std::copy(known.begin(), known.end(), t.data<std::int64_t>());
    return Operand::of(Value::fromTensor(t));
  }
  // Materialize: one 0-d int64 tensor per element (full), stacked unless the value is 0-d.
  std::vector<Operand> items;
  for (ShapeElem& e : v.elems) {
    SVM_ASSIGN_OR_RETURN(Val item, op1("full", {ints(std::vector<std::int64_t>{}), Operand::ofReg(intReg(e))},
                                       {{"dtype", AttrValue::ofDType(DType::Int64)}}));
    items.push_back(Operand::ofReg(item.reg));
  }
  if (v.scalar) {
    v.reg = items.at(0).reg;
  } else if (items.empty()) {
    SVM_ASSIGN_OR_RETURN(
        Val empty, op1("zeros", {ints(std::vector<std::int64_t>{0})}, {{"dtype", AttrValue::ofDType(DType::Int64)}}));
    v.reg = regOf(empty.isConst() ? Operand::of(Value::fromTensor(empty.constant)) : Operand::ofReg(empty.reg));
  } else {
    SVM_ASSIGN_OR_RETURN(Val stacked, op1("stack", std::move(items)));
    v.reg = stacked.reg;
  }
  return Operand::ofReg(v.reg);
}

Expected<Operand> GraphEmitter::ints(Val& v, std::string_view what) {
  if (std::optional<std::vector<ShapeElem>> elems = shapeElems(v)) {
    bool all_known = true;
    std::vector<std::int64_t> known;
    for (const ShapeElem& e : *elems) {
      all_known = all_known && e.known.has_value();
      if (e.known) known.push_back(*e.known);
    }
    if (all_known) return ints(known);
    return Operand::ofReg(tupleOf(v.elems));
  }
  if (v.kind == Val::Kind::Const) return Operand::of(Value::fromInts(intsOfTensor(v.constant)));
  if (v.kind == Val::Kind::Tensor) return Operand::ofReg(v.reg);
  return makeError(ErrorCode::Unsupported, "{} is not available: {}", what, v.missing_reason);
}

Expected<std::vector<Val>> GraphEmitter::op(std::string_view name, std::vector<Operand> inputs,
                                            const NamedAttrs& attrs) {
  const OpSchema* schema = OpRegistry::global().find(name);
  if (schema == nullptr) return makeError(ErrorCode::Internal, "importer maps to unknown op '{}'", name);
  bool all_const = true;
  for (const Operand& o : inputs) all_const = all_const && (o.is_const || o.reg < 0);
  if (all_const) {
    std::vector<Value> values;
    for (const Operand& o : inputs) values.push_back(o.is_const ? o.constant : Value());
    while (!values.empty() && values.back().isNone()) values.pop_back();
    SVM_ASSIGN_OR_RETURN(std::vector<Value> results, callOp(name, std::move(values), attrs));
    std::vector<Val> out;
    for (Value& r : results) {
      if (r.isTensor()) out.push_back(Val::ofConst(r.tensor()));
      else return makeError(ErrorCode::Internal, "folding {} gave a non-tensor", name);
    }
    return out;
  }
  std::vector<std::int32_t> regs;
  for (const Operand& o : inputs) regs.push_back(o.is_const ? regOf(o) : o.reg);
  while (!regs.empty() && regs.back() < 0) regs.pop_back();
  std::vector<TensorDescriptor> input_tokens;
  for (std::int32_t r : regs) {
    input_tokens.push_back(r >= 0 && tensor_regs_.count(r) ? TensorDescriptor::anyTensor()
                                                           : TensorDescriptor::notTensor());
  }
  int outputs = schema->num_outputs;
  if (outputs < 0) {  // split: the attributes decide
    outputs = 0;
    for (const auto& [key, value] : attrs) {
      if (key == "sections") outputs = std::max<int>(outputs, static_cast<int>(value.i));
      if (key == "sizes") outputs = std::max<int>(outputs, static_cast<int>(value.ints.size()));
    }
  }
  std::vector<std::int32_t> out_regs;
  std::vector<Val> out;
  for (int k = 0; k < outputs; ++k) {
    out_regs.push_back(newReg());
    markTensor(out_regs.back());
    out.push_back(Val::ofTensor(out_regs.back()));
  }
  SVM_ASSIGN_OR_RETURN(int pc,
                       fn_.emitCallOp(name, std::move(regs), std::move(out_regs), attrs, std::move(input_tokens)));
  (void)pc;
  return out;
}

Expected<Val> GraphEmitter::op1(std::string_view name, std::vector<Operand> inputs, const NamedAttrs& attrs) {
  SVM_ASSIGN_OR_RETURN(std::vector<Val> out, op(name, std::move(inputs), attrs));
  return std::move(out.at(0));
}

const onnx::AttributeProto* NodeCtx::attr(std::string_view name) const {
  for (const auto& a : node->attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

std::int64_t NodeCtx::attrInt(std::string_view name, std::int64_t fallback) const {
  const auto* a = attr(name);
  return a ? a->i() : fallback;
}

double NodeCtx::attrFloat(std::string_view name, double fallback) const {
  const auto* a = attr(name);
  return a ? a->f() : fallback;
}

std::string NodeCtx::attrString(std::string_view name, std::string fallback) const {
  const auto* a = attr(name);
  return a ? a->s() : fallback;
}

std::optional<std::vector<std::int64_t>> NodeCtx::attrInts(std::string_view name) const {
  const auto* a = attr(name);
  if (!a) return std::nullopt;
  return std::vector<std::int64_t>(a->ints().begin(), a->ints().end());
}

Expected<std::vector<std::int64_t>> NodeCtx::constInts(std::size_t k, std::string_view what) const {
  if (!has(k)) return fail(ErrorCode::InvalidArgument, "input {} ({}) is missing", k, what);
  const Val& v = input(k);
  if (std::optional<std::vector<ShapeElem>> elems = e->shapeElems(v)) {
    std::vector<std::int64_t> out;
    for (const ShapeElem& el : *elems) {
      if (!el.known)
        return fail(ErrorCode::Unsupported, "{} must be known at import, but it is computed at run time", what);
      out.push_back(*el.known);
    }
    return out;
  }
  if (v.isConst()) return intsOfTensor(v.constant);
  return fail(ErrorCode::Unsupported,
              "{} must be known at import (a constant or initializer), but it is computed at run time", what);
}

}  // namespace shapevm::onnx_import
