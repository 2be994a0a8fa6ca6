// SPDX-License-Identifier: Apache-2.0
// THE table of ONNX ops the importer maps (default domain, opsets 11-17), with one handler per
// op type. Handlers keep int64 shape arithmetic on shape values (scalar bytecode) when an operand
// is one, fold constant operands at import, and otherwise emit ShapeVM ops with ONNX semantics
// mapped exactly (Reshape's 0, Pow's dtype, Softmax's axis by opset, Expand's two-way broadcast,
// Pad's order). A combination a handler cannot express is an error naming the node.
#include <limits>
#include <map>

#include "onnx/onnx_graph.h"
#include "onnx/onnx_tensor.h"

namespace shapevm::onnx_import {

Expected<Operand> tensorIn(NodeCtx& ctx, std::size_t k) {
  if (!ctx.has(k)) return ctx.fail(ErrorCode::InvalidArgument, "input {} is missing", k);
  return ctx.e->tensor(ctx.input(k),
                       fmt::format("{} input {} ('{}')", ctx.label, k, ctx.node->input(static_cast<int>(k))));
}

Status emitTo(NodeCtx& ctx, std::string_view op, std::vector<Operand> inputs, const NamedAttrs& attrs) {
  SVM_ASSIGN_OR_RETURN(std::vector<Val> out, ctx.e->op(op, std::move(inputs), attrs));
  ctx.out = std::move(out);
  return Status::ok();
}

int normAxis(std::int64_t axis, int rank) {
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Status needRank(NodeCtx& ctx, const Val& v, std::string_view what) {
  if (v.rank < 0)
    return ctx.fail(ErrorCode::Unsupported, "the rank of {} is unknown at import (ONNX shape inference gave none)",
                    what);
  return Status::ok();
}

namespace {

using Kind = Val::Kind;

// Elementwise scalar arithmetic on shape values with ONNX broadcasting of a length-1 operand.
std::optional<Val> shapeBinary(NodeCtx& ctx, Opcode op) {
  if (!ctx.has(0) || !ctx.has(1) || !(ctx.input(0).isShape() || ctx.input(1).isShape())) return std::nullopt;
  std::optional<std::vector<ShapeElem>> a = ctx.e->shapeElems(ctx.input(0)), b = ctx.e->shapeElems(ctx.input(1));
  if (!a || !b) return std::nullopt;
  const std::size_t n = std::max(a->size(), b->size());
  if ((a->size() != n && a->size() != 1) || (b->size() != n && b->size() != 1)) return std::nullopt;
  std::vector<ShapeElem> out;
  for (std::size_t i = 0; i < n; ++i) {
    ShapeElem& x = (*a)[a->size() == 1 ? 0 : i];
    ShapeElem& y = (*b)[b->size() == 1 ? 0 : i];
    out.push_back(ctx.e->scalar(op, x, y));
  }
  const bool scalar = (ctx.input(0).isShape() ? ctx.input(0).scalar : ctx.input(0).rank == 0) &&
                      (ctx.input(1).isShape() ? ctx.input(1).scalar : ctx.input(1).rank == 0);
  return Val::ofShape(std::move(out), scalar);
}

Handler binary(std::string op, Opcode scalar_op = Opcode::Nop) {
  return [op, scalar_op](NodeCtx& ctx) -> Status {
    if (scalar_op != Opcode::Nop) {
      if (std::optional<Val> v = shapeBinary(ctx, scalar_op)) {
        ctx.out = {std::move(*v)};
        return Status::ok();
      }
    }
    SVM_ASSIGN_OR_RETURN(Operand a, tensorIn(ctx, 0));
    SVM_ASSIGN_OR_RETURN(Operand b, tensorIn(ctx, 1));
    return emitTo(ctx, op, {a, b});
  };
}

Handler unary(std::string op) {
  return [op](NodeCtx& ctx) -> Status {
    SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
    return emitTo(ctx, op, {x});
  };
}

// Max/Min/Sum: variadic in ONNX; folded left to right.
Handler variadic(std::string op) {
  return [op](NodeCtx& ctx) -> Status {
    SVM_ASSIGN_OR_RETURN(Operand acc, tensorIn(ctx, 0));
    if (ctx.in.size() == 1) return emitTo(ctx, "identity", {acc});
    for (std::size_t k = 1; k < ctx.in.size(); ++k) {
      SVM_ASSIGN_OR_RETURN(Operand next, tensorIn(ctx, k));
      SVM_ASSIGN_OR_RETURN(Val v, ctx.e->op1(op, {acc, next}));
      ctx.out = {v};
      acc = v.isConst() ? Operand::of(Value::fromTensor(v.constant)) : Operand::ofReg(v.reg);
    }
    return Status::ok();
  };
}

Status handleMean(NodeCtx& ctx) {
  std::vector<Operand> inputs;
  for (std::size_t k = 0; k < ctx.in.size(); ++k) {
    SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, k));
    inputs.push_back(x);
  }
  SVM_ASSIGN_OR_RETURN(Val sum, ctx.e->op1("add_n", inputs));
  const DType dtype = ctx.input(0).dtype.value_or(DType::Float32);
  SVM_ASSIGN_OR_RETURN(Operand s, ctx.e->tensor(sum, "sum"));
  return emitTo(ctx, "div",
                {s, Operand::of(Value::fromTensor(Tensor::scalar(static_cast<double>(ctx.in.size()), dtype)))});
}

Status handlePow(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand a, tensorIn(ctx, 0));
  SVM_ASSIGN_OR_RETURN(Operand b, tensorIn(ctx, 1));
  SVM_ASSIGN_OR_RETURN(Val r, ctx.e->op1("pow", {a, b}));
  const std::optional<DType> base = ctx.input(0).dtype, exponent = ctx.input(1).dtype;
  if (base && (!exponent || *exponent != *base)) {  // ONNX Pow keeps the base's dtype
    SVM_ASSIGN_OR_RETURN(Operand ro, ctx.e->tensor(r, "pow"));
    return emitTo(ctx, "cast", {ro}, {{"dtype", AttrValue::ofDType(*base)}});
  }
  ctx.out = {r};
  return Status::ok();
}

Status handleReciprocal(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  const DType dtype = ctx.input(0).dtype.value_or(DType::Float32);
  return emitTo(ctx, "div", {Operand::of(Value::fromTensor(Tensor::scalar(1.0, dtype))), x});
}

Status handleClip(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  Val cur;
  Operand acc = x;
  ctx.out.clear();
  if (ctx.opset < 11) return ctx.fail(ErrorCode::Unsupported, "Clip before opset 11 is not supported");
  for (std::size_t k : {std::size_t{1}, std::size_t{2}}) {
    if (!ctx.has(k)) continue;
    SVM_ASSIGN_OR_RETURN(Operand bound, tensorIn(ctx, k));
    SVM_ASSIGN_OR_RETURN(cur, ctx.e->op1(k == 1 ? "maximum" : "minimum", {acc, bound}));
    acc = cur.isConst() ? Operand::of(Value::fromTensor(cur.constant)) : Operand::ofReg(cur.reg);
    ctx.out = {cur};
  }
  if (ctx.out.empty()) return emitTo(ctx, "identity", {x});
  return Status::ok();
}

// Gelu (opset 20, and the node onnx_fuse.cc writes for a recognized x*0.5*(1+erf(x/sqrt2))).
Status handleGelu(NodeCtx& ctx) {
  const std::string approximate = ctx.attrString("approximate", "none");
  if (approximate != "none") return ctx.fail(ErrorCode::Unsupported, "Gelu approximate='{}' (exact only)", approximate);
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  return emitTo(ctx, "gelu", {x});
}

Status handleIdentity(NodeCtx& ctx) {
  if (!ctx.has(0)) return ctx.fail(ErrorCode::InvalidArgument, "input 0 is missing");
  ctx.out = {ctx.input(0)};
  return Status::ok();
}

Status handleDropout(NodeCtx& ctx) {
  if (ctx.has(2)) {
    SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> training, ctx.constInts(2, "training_mode"));
    bool zero_ratio = false;  // training mode with ratio 0 drops nothing: the identity
    if (ctx.has(1) && ctx.input(1).isConst() && ctx.input(1).constant.numel() == 1)
      zero_ratio = ctx.input(1).constant.elementAsDouble(0) == 0.0;
    if (!training.empty() && training[0] != 0 && !zero_ratio)
      return ctx.fail(ErrorCode::Unsupported, "training-mode Dropout with a non-zero ratio is random (inference only)");
  }
  SVM_RETURN_IF_ERROR(handleIdentity(ctx));
  if (ctx.node->output_size() > 1 && !ctx.node->output(1).empty()) {
    SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
    const int shape = ctx.e->newReg();
    ctx.e->fn().emit(Opcode::ShapeOf, shape, ctx.e->regOf(x));
    SVM_ASSIGN_OR_RETURN(Val mask,
                         ctx.e->op1("ones", {Operand::ofReg(shape)}, {{"dtype", AttrValue::ofDType(DType::Bool)}}));
    ctx.out.push_back(mask);
  }
  return Status::ok();
}

Status handleCast(NodeCtx& ctx) {
  const int to = static_cast<int>(ctx.attrInt("to", 0));
  std::optional<DType> dtype = dtypeFromOnnx(to);
  if (!dtype) return ctx.fail(ErrorCode::Unsupported, "Cast to {}, a dtype ShapeVM lacks", onnxTypeName(to));
  if (ctx.input(0).isShape() && (*dtype == DType::Int64 || *dtype == DType::Int32)) {
    ctx.out = {ctx.input(0)};
    return Status::ok();
  }
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  SVM_RETURN_IF_ERROR(emitTo(ctx, "cast", {x}, {{"dtype", AttrValue::ofDType(*dtype)}}));
  ctx.out[0].dtype = dtype;
  return Status::ok();
}

Status handleCastLike(NodeCtx& ctx) {
  std::optional<DType> dtype = ctx.has(1) ? ctx.input(1).dtype : std::nullopt;
  if (!dtype) return ctx.fail(ErrorCode::Unsupported, "CastLike target dtype unknown at import");
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  return emitTo(ctx, "cast", {x}, {{"dtype", AttrValue::ofDType(*dtype)}});
}

Status handleWhere(NodeCtx& ctx) {
  if (ctx.input(0).isShape()) {
    std::optional<std::vector<ShapeElem>> c = ctx.e->shapeElems(ctx.input(0)), a = ctx.e->shapeElems(ctx.input(1)),
                                          b = ctx.e->shapeElems(ctx.input(2));
    if (c && a && b && a->size() == c->size() && b->size() == c->size()) {
      std::vector<ShapeElem> out;
      for (std::size_t i = 0; i < c->size(); ++i) {  // b + c * (a - b)
        ShapeElem diff = ctx.e->scalar(Opcode::Sub, (*a)[i], (*b)[i]);
        ShapeElem pick = ctx.e->scalar(Opcode::Mul, (*c)[i], diff);
        out.push_back(ctx.e->scalar(Opcode::Add, (*b)[i], pick));
      }
      ctx.out = {Val::ofShape(std::move(out), ctx.input(0).scalar)};
      return Status::ok();
    }
  }
  SVM_ASSIGN_OR_RETURN(Operand c, tensorIn(ctx, 0));
  SVM_ASSIGN_OR_RETURN(Operand a, tensorIn(ctx, 1));
  SVM_ASSIGN_OR_RETURN(Operand b, tensorIn(ctx, 2));
  return emitTo(ctx, "where", {c, a, b});
}

Status handleConstant(NodeCtx& ctx) {
  if (const auto* a = ctx.attr("value")) {
    SVM_ASSIGN_OR_RETURN(Tensor t, tensorFromProto(a->t(), ctx.label));
    ctx.out = {Val::ofConst(t)};
    return Status::ok();
  }
  Tensor t;
  if (const auto* a = ctx.attr("value_float")) {
    t = Tensor::scalar(a->f(), DType::Float32);
  } else if (const auto* a = ctx.attr("value_int")) {
    t = Tensor::scalar(static_cast<double>(a->i()), DType::Int64);
  } else if (const auto* a = ctx.attr("value_ints")) {
    SVM_ASSIGN_OR_RETURN(t, Tensor::empty(DType::Int64, *Shape::from(std::vector<std::int64_t>{a->ints_size()})));
    std::copy(a->ints().begin(), a->ints().end(), t.data<std::int64_t>());
  } else if (const auto* a = ctx.attr("value_floats")) {
    SVM_ASSIGN_OR_RETURN(t, Tensor::empty(DType::Float32, *Shape::from(std::vector<std::int64_t>{a->floats_size()})));
    std::copy(a->floats().begin(), a->floats().end(), t.data<float>());
  } else {
    return ctx.fail(ErrorCode::Unsupported, "Constant without a value, value_float or value_int attribute");
  }
  ctx.out = {Val::ofConst(t)};
  return Status::ok();
}

Status handleMatMul(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand a, tensorIn(ctx, 0));
  SVM_ASSIGN_OR_RETURN(Operand b, tensorIn(ctx, 1));
  return emitTo(ctx, "matmul", {a, b});
}

Status handleGemm(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand a, tensorIn(ctx, 0));
  SVM_ASSIGN_OR_RETURN(Operand b, tensorIn(ctx, 1));
  auto asOperand = [](const Val& v) {
    return v.isConst() ? Operand::of(Value::fromTensor(v.constant)) : Operand::ofReg(v.reg);
  };
  if (ctx.attrInt("transA", 0)) {
    SVM_ASSIGN_OR_RETURN(Val t, ctx.e->op1("transpose", {a}));
    a = asOperand(t);
  }
  if (ctx.attrInt("transB", 0)) {
    SVM_ASSIGN_OR_RETURN(Val t, ctx.e->op1("transpose", {b}));
    b = asOperand(t);
  }
  const DType dtype = ctx.input(0).dtype.value_or(DType::Float32);
  SVM_ASSIGN_OR_RETURN(Val y, ctx.e->op1("matmul", {a, b}));
  const double alpha = ctx.attrFloat("alpha", 1.0), beta = ctx.attrFloat("beta", 1.0);
  if (alpha != 1.0) {
    SVM_ASSIGN_OR_RETURN(
        y, ctx.e->op1("mul", {asOperand(y), Operand::of(Value::fromTensor(Tensor::scalar(alpha, dtype)))}));
  }
  if (ctx.has(2) && beta != 0.0) {
    SVM_ASSIGN_OR_RETURN(Operand c, tensorIn(ctx, 2));
    if (beta != 1.0) {
      SVM_ASSIGN_OR_RETURN(Val cb, ctx.e->op1("mul", {c, Operand::of(Value::fromTensor(Tensor::scalar(beta, dtype)))}));
      c = asOperand(cb);
    }
    SVM_ASSIGN_OR_RETURN(y, ctx.e->op1("add", {asOperand(y), c}));
  }
  ctx.out = {y};
  return Status::ok();
}

// ---- shapes ----

Status handleShape(NodeCtx& ctx) {
  Val& x = ctx.input(0);
  if (x.isConst()) {
    ctx.out = {Val::ofConst(*Tensor::zeros(DType::Int64, *Shape::from(std::vector<std::int64_t>{x.constant.rank()})))};
    auto dims = x.constant.shape().span();
    for (int i = 0; i < x.constant.rank(); ++i)
      ctx.out[0].constant.data<std::int64_t>()[i] = dims[static_cast<std::size_t>(i)];
  } else {
    SVM_RETURN_IF_ERROR(needRank(ctx, x, "the Shape input"));
    std::vector<ShapeElem> elems;
    for (int i = 0; i < x.rank; ++i) elems.push_back(ctx.e->dimOf(x, i));
    ctx.out = {Val::ofShape(std::move(elems))};
  }
  const int rank = static_cast<int>(ctx.out[0].isConst() ? ctx.out[0].constant.numel()
                                                         : static_cast<std::int64_t>(ctx.out[0].elems.size()));
  std::int64_t start = ctx.attrInt("start", 0), end = ctx.attrInt("end", rank);
  start = std::clamp<std::int64_t>(start < 0 ? start + rank : start, 0, rank);
  end = std::clamp<std::int64_t>(end < 0 ? end + rank : end, 0, rank);
  if (start != 0 || end != rank) {
    std::optional<std::vector<ShapeElem>> elems = ctx.e->shapeElems(ctx.out[0]);
    std::vector<ShapeElem> part(elems->begin() + start, elems->begin() + std::max(start, end));
    ctx.out = {Val::ofShape(std::move(part))};
  }
  return Status::ok();
}

Status handleSize(NodeCtx& ctx) {
  Val& x = ctx.input(0);
  SVM_RETURN_IF_ERROR(needRank(ctx, x, "the Size input"));
  ShapeElem acc{1, -1};
  for (int i = 0; i < x.rank; ++i) {
    ShapeElem d = x.isConst() ? ShapeElem{x.constant.dim(i), -1} : ctx.e->dimOf(x, i);
    acc = ctx.e->scalar(Opcode::Mul, acc, d);
  }
  ctx.out = {Val::ofShape({acc}, true)};
  return Status::ok();
}

Status handleGather(NodeCtx& ctx) {
  Val& data = ctx.input(0);
  const std::int64_t axis = ctx.attrInt("axis", 0);
  if (data.isShape() && ctx.input(1).isConst()) {
    std::vector<std::int64_t> indices = intsOfTensor(ctx.input(1).constant);
    std::vector<ShapeElem> out;
    const auto n = static_cast<std::int64_t>(data.elems.size());
    for (std::int64_t i : indices) {
      const std::int64_t j = i < 0 ? i + n : i;
      if (j < 0 || j >= n)
        return ctx.fail(ErrorCode::IndexOutOfRange, "index {} is out of range for {} elements", i, n);
      out.push_back(data.elems[static_cast<std::size_t>(j)]);
    }
    ctx.out = {Val::ofShape(std::move(out), ctx.input(1).constant.rank() == 0)};
    return Status::ok();
  }
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  SVM_ASSIGN_OR_RETURN(Operand idx, tensorIn(ctx, 1));
  return emitTo(ctx, "gather", {x, idx}, {{"axis", AttrValue::ofInt(axis)}});
}

Status handleUnsqueeze(NodeCtx& ctx) {
  std::vector<std::int64_t> axes;
  if (ctx.opset >= 13) {
    SVM_ASSIGN_OR_RETURN(axes, ctx.constInts(1, "Unsqueeze axes"));
  } else axes = ctx.attrInts("axes").value_or(std::vector<std::int64_t>{});
  Val& x = ctx.input(0);
  if (x.isShape() && x.scalar && axes.size() == 1 && (axes[0] == 0 || axes[0] == -1)) {
    ctx.out = {Val::ofShape(x.elems, false)};
    return Status::ok();
  }
  SVM_ASSIGN_OR_RETURN(Operand xo, tensorIn(ctx, 0));
  SVM_RETURN_IF_ERROR(emitTo(ctx, "unsqueeze", {xo}, {{"axes", AttrValue::ofInts(axes)}}));
  if (x.rank >= 0) ctx.out[0].rank = x.rank + static_cast<int>(axes.size());
  return Status::ok();
}

Status handleSqueeze(NodeCtx& ctx) {
  std::vector<std::int64_t> axes;
  if (ctx.opset >= 13) {
    if (ctx.has(1)) {
      SVM_ASSIGN_OR_RETURN(axes, ctx.constInts(1, "Squeeze axes"));
    }
  } else {
    axes = ctx.attrInts("axes").value_or(std::vector<std::int64_t>{});
  }
  Val& x = ctx.input(0);
  if (x.isShape() && !x.scalar && x.elems.size() == 1) {
    ctx.out = {Val::ofShape(x.elems, true)};
    return Status::ok();
  }
  SVM_ASSIGN_OR_RETURN(Operand xo, tensorIn(ctx, 0));
  return emitTo(ctx, "squeeze", {xo}, {{"axes", AttrValue::ofInts(axes)}});
}

Status handleConcat(NodeCtx& ctx) {
  bool any_shape = false, all_shape = true;
  for (std::size_t k = 0; k < ctx.in.size(); ++k) {
    if (!ctx.has(k)) continue;
    any_shape = any_shape || ctx.input(k).isShape();
    all_shape = all_shape && ctx.e->shapeElems(ctx.input(k)).has_value() && ctx.input(k).rank == 1;
  }
  if (any_shape && all_shape) {
    std::vector<ShapeElem> out;
    for (std::size_t k = 0; k < ctx.in.size(); ++k) {
      if (!ctx.has(k)) continue;
      const std::optional<std::vector<ShapeElem>> elems = ctx.e->shapeElems(ctx.input(k));
      out.insert(out.end(), elems->begin(), elems->end());
    }
    ctx.out = {Val::ofShape(std::move(out))};
    return Status::ok();
  }
  std::vector<Operand> inputs;
  for (std::size_t k = 0; k < ctx.in.size(); ++k) {
    if (!ctx.has(k)) continue;
    SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, k));
    inputs.push_back(x);
  }
  return emitTo(ctx, "concat", std::move(inputs), {{"axis", AttrValue::ofInt(ctx.attrInt("axis", 0))}});
}

// Python-style slice bounds, as ShapeVM's slice and ONNX's Slice clamp them.
std::vector<std::size_t> sliceIndices(std::int64_t n, std::int64_t start, std::int64_t end, std::int64_t step) {
  auto clamp = [&](std::int64_t v) {
    if (v < 0) v += n;
    return step > 0 ? std::clamp<std::int64_t>(v, 0, n) : std::clamp<std::int64_t>(v, -1, n - 1);
  };
  std::vector<std::size_t> out;
  const std::int64_t s = clamp(start), e = clamp(end);
  for (std::int64_t i = s; step > 0 ? i < e : i > e; i += step) out.push_back(static_cast<std::size_t>(i));
  return out;
}

Status handleSlice(NodeCtx& ctx) {
  Val& x = ctx.input(0);
  if (x.isShape() && !x.scalar) {
    Expected<std::vector<std::int64_t>> starts = ctx.constInts(1, "Slice starts"),
                                        ends = ctx.constInts(2, "Slice ends");
    std::vector<std::int64_t> steps = {1};
    bool ok = starts && ends && starts->size() == 1;
    if (ctx.has(4)) {
      Expected<std::vector<std::int64_t>> s = ctx.constInts(4, "Slice steps");
      ok = ok && s && s->size() == 1;
      if (s) steps = *s;
    }
    if (ok && steps[0] != 0) {
      std::vector<ShapeElem> out;
      for (std::size_t i : sliceIndices(static_cast<std::int64_t>(x.elems.size()), (*starts)[0], (*ends)[0], steps[0]))
        out.push_back(x.elems[i]);
      ctx.out = {Val::ofShape(std::move(out))};
      return Status::ok();
    }
  }
  SVM_ASSIGN_OR_RETURN(Operand xo, tensorIn(ctx, 0));
  std::vector<Operand> inputs = {xo};
  for (std::size_t k : {std::size_t{1}, std::size_t{2}}) {
    SVM_ASSIGN_OR_RETURN(Operand o, ctx.e->ints(ctx.input(k), "Slice bounds"));
    inputs.push_back(o);
  }
  if (ctx.has(4)) {
    SVM_ASSIGN_OR_RETURN(Operand o, ctx.e->ints(ctx.input(4), "Slice steps"));
    inputs.push_back(o);
  }
  NamedAttrs attrs;
  if (ctx.has(3)) {
    SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> axes, ctx.constInts(3, "Slice axes"));
    attrs.emplace_back("axes", AttrValue::ofInts(axes));
  }
  return emitTo(ctx, "slice", std::move(inputs), attrs);
}

Status handleReshape(NodeCtx& ctx) {
  Val& x = ctx.input(0);
  const bool allow_zero = ctx.attrInt("allowzero", 0) != 0;
  SVM_ASSIGN_OR_RETURN(Operand xo, tensorIn(ctx, 0));
  SVM_ASSIGN_OR_RETURN(std::optional<std::vector<ShapeElem>> elems, ctx.e->elemsOf(ctx.input(1)));
  if (!elems) {
    if (ctx.input(1).kind != Kind::Tensor) return ctx.fail(ErrorCode::Unsupported, "Reshape target is not available");
    return emitTo(ctx, "reshape", {xo, Operand::ofReg(ctx.input(1).reg)});  // a runtime int64 tensor (no 0 entries)
  }
  Val src = x;
  if (x.isConst() || x.isShape()) src = Val::ofTensor(ctx.e->regOf(xo), x.dtype, x.rank);
  if (x.isConst()) src.dims = x.dims;
  for (std::size_t i = 0; i < elems->size() && !allow_zero; ++i) {
    ShapeElem& e = (*elems)[i];
    if (e.known && *e.known == 0) {  // ONNX: 0 copies the input's extent
      if (x.isConst()) e = {x.constant.dim(static_cast<int>(i)), -1};
      else e = ctx.e->dimOf(src, static_cast<int>(i));
    } else if (!e.known && (x.rank < 0 || static_cast<int>(i) < x.rank)) {  // v + (v == 0) * dim
      ShapeElem zero{0, -1};
      ShapeElem is_zero = ctx.e->scalar(Opcode::Eq, e, zero);
      ShapeElem dim = ctx.e->dimOf(src, static_cast<int>(i));
      ShapeElem pick = ctx.e->scalar(Opcode::Mul, is_zero, dim);
      e = ctx.e->scalar(Opcode::Add, e, pick);
    }
  }
  Val target = Val::ofShape(*elems);
  SVM_ASSIGN_OR_RETURN(Operand shape, ctx.e->ints(target, "Reshape shape"));
  SVM_RETURN_IF_ERROR(emitTo(ctx, "reshape", {xo, shape}));
  ctx.out[0].rank = static_cast<int>(elems->size());
  return Status::ok();
}

Status handleFlatten(NodeCtx& ctx) {
  Val& x = ctx.input(0);
  SVM_RETURN_IF_ERROR(needRank(ctx, x, "the Flatten input"));
  SVM_ASSIGN_OR_RETURN(Operand xo, tensorIn(ctx, 0));
  const int axis = normAxis(ctx.attrInt("axis", 1), x.rank);
  Val src = x.isConst() ? Val::ofTensor(ctx.e->regOf(xo), x.dtype, x.rank) : x;
  if (x.isConst()) src.dims = x.dims;
  ShapeElem outer{1, -1}, inner{1, -1};
  for (int i = 0; i < x.rank; ++i) {
    ShapeElem d = ctx.e->dimOf(src, i);
    (i < axis ? outer : inner) = ctx.e->scalar(Opcode::Mul, i < axis ? outer : inner, d);
  }
  Val target = Val::ofShape({outer, inner});
  SVM_ASSIGN_OR_RETURN(Operand shape, ctx.e->ints(target, "Flatten shape"));
  SVM_RETURN_IF_ERROR(emitTo(ctx, "reshape", {xo, shape}));
  ctx.out[0].rank = 2;
  return Status::ok();
}

Status handleExpand(NodeCtx& ctx) {
  Val& x = ctx.input(0);
  SVM_RETURN_IF_ERROR(needRank(ctx, x, "the Expand input"));
  SVM_ASSIGN_OR_RETURN(std::optional<std::vector<ShapeElem>> shape, ctx.e->elemsOf(ctx.input(1)));
  if (!shape) return ctx.fail(ErrorCode::Unsupported, "the Expand shape is a runtime tensor of unknown length");
  SVM_ASSIGN_OR_RETURN(Operand xo, tensorIn(ctx, 0));
  Val src = x.isConst() ? Val::ofTensor(ctx.e->regOf(xo), x.dtype, x.rank) : x;
  if (x.isConst()) src.dims = x.dims;
  const int n = static_cast<int>(shape->size());
  const int m = std::max(n, x.rank);
  std::vector<ShapeElem> target;
  for (int j = 0; j < m; ++j) {  // two-way broadcast: the larger extent where one is 1
    const int xi = j - (m - x.rank), si = j - (m - n);
    if (xi < 0) {
      target.push_back((*shape)[static_cast<std::size_t>(si)]);
    } else if (si < 0) {
      target.push_back(ctx.e->dimOf(src, xi));
    } else {
      ShapeElem d = ctx.e->dimOf(src, xi);
      ShapeElem& s = (*shape)[static_cast<std::size_t>(si)];
      target.push_back(s.known && *s.known == 1 ? d : d.known && *d.known == 1 ? s : ctx.e->scalar(Opcode::Max, d, s));
    }
  }
  Val t = Val::ofShape(target);
  SVM_ASSIGN_OR_RETURN(Operand to, ctx.e->ints(t, "Expand shape"));
  SVM_RETURN_IF_ERROR(emitTo(ctx, "broadcast_to", {xo, to}));
  ctx.out[0].rank = m;
  return Status::ok();
}

Status handleConstantOfShape(NodeCtx& ctx) {
  double value = 0.0;
  DType dtype = DType::Float32;
  if (const auto* a = ctx.attr("value")) {
    SVM_ASSIGN_OR_RETURN(Tensor t, tensorFromProto(a->t(), ctx.label + " value"));
    value = t.elementAsDouble(0);
    dtype = t.dtype();
  }
  Value number = isFloating(dtype)      ? Value::fromFloat(value)
                 : dtype == DType::Bool ? Value::fromBool(value != 0)
                                        : Value::fromInt(static_cast<std::int64_t>(value));
  SVM_ASSIGN_OR_RETURN(Operand shape, ctx.e->ints(ctx.input(0), "ConstantOfShape shape"));
  SVM_RETURN_IF_ERROR(emitTo(ctx, "full", {shape, Operand::of(number)}, {{"dtype", AttrValue::ofDType(dtype)}}));
  ctx.out[0].dtype = dtype;
  return Status::ok();
}

Status handleRange(NodeCtx& ctx) {
  const DType dtype = ctx.input(0).dtype.value_or(DType::Int64);
  std::vector<Operand> inputs;
  for (std::size_t k = 0; k < 3; ++k) {
    Val& v = ctx.input(k);
    if (v.isConst()) {
      const double x = v.constant.elementAsDouble(0);
      inputs.push_back(
          Operand::of(isFloating(dtype) ? Value::fromFloat(x) : Value::fromInt(static_cast<std::int64_t>(x))));
    } else if (v.isShape() && v.elems.size() == 1) {
      inputs.push_back(Operand::ofReg(ctx.e->intReg(v.elems[0])));
    } else if (v.kind == Kind::Tensor && v.rank == 0) {  // a runtime scalar: int() or float() of it
      const int r = ctx.e->newReg();
      ctx.e->fn().emit(isFloating(dtype) ? Opcode::ToFloat : Opcode::ToInt, r, v.reg);
      inputs.push_back(Operand::ofReg(r));
    } else {
      return ctx.fail(ErrorCode::Unsupported, "Range input {} is not a scalar known at import", k);
    }
  }
  SVM_RETURN_IF_ERROR(emitTo(ctx, "arange", inputs, {{"dtype", AttrValue::ofDType(dtype)}}));
  ctx.out[0].dtype = dtype;
  ctx.out[0].rank = 1;
  return Status::ok();
}

Status handleTranspose(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  return emitTo(ctx, "transpose", {x},
                {{"perm", AttrValue::ofInts(ctx.attrInts("perm").value_or(std::vector<std::int64_t>{}))}});
}

Status handleSplit(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  NamedAttrs attrs = {{"axis", AttrValue::ofInt(ctx.attrInt("axis", 0))}};
  std::optional<std::vector<std::int64_t>> sizes;
  if (ctx.has(1)) {
    SVM_ASSIGN_OR_RETURN(sizes, ctx.constInts(1, "Split sizes"));
  } else sizes = ctx.attrInts("split");
  if (sizes) attrs.emplace_back("sizes", AttrValue::ofInts(*sizes));
  else attrs.emplace_back("sections", AttrValue::ofInt(ctx.node->output_size()));
  return emitTo(ctx, "split", {x}, attrs);
}

Status handlePad(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(std::int64_t mode, padModeCode(ctx));
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> onnx_pads, ctx.constInts(1, "Pad pads"));
  if (ctx.has(3)) return ctx.fail(ErrorCode::Unsupported, "Pad with an axes input");
  double value = 0.0;
  if (ctx.has(2)) {
    if (!ctx.input(2).isConst()) return ctx.fail(ErrorCode::Unsupported, "a runtime Pad constant_value");
    value = ctx.input(2).constant.elementAsDouble(0);
  }
  const std::size_t rank = onnx_pads.size() / 2;
  std::vector<std::int64_t> pads;  // ONNX: all begins, then all ends; ShapeVM: (before, after) per axis
  for (std::size_t axis = 0; axis < rank; ++axis) {
    pads.push_back(onnx_pads[axis]);
    pads.push_back(onnx_pads[axis + rank]);
  }
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  return emitTo(
      ctx, "pad", {x},
      {{"pads", AttrValue::ofInts(pads)}, {"value", AttrValue::ofFloat(value)}, {"mode", AttrValue::ofInt(mode)}});
}

Status handleTile(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> repeats, ctx.constInts(1, "Tile repeats"));
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  Val cur;
  bool any = false;
  for (std::size_t axis = 0; axis < repeats.size(); ++axis) {
    if (repeats[axis] == 1) continue;
    std::vector<Operand> copies(static_cast<std::size_t>(std::max<std::int64_t>(repeats[axis], 0)), x);
    if (copies.empty()) return ctx.fail(ErrorCode::Unsupported, "Tile with a zero repeat");
    SVM_ASSIGN_OR_RETURN(cur,
                         ctx.e->op1("concat", copies, {{"axis", AttrValue::ofInt(static_cast<std::int64_t>(axis))}}));
    x = cur.isConst() ? Operand::of(Value::fromTensor(cur.constant)) : Operand::ofReg(cur.reg);
    any = true;
  }
  if (!any) return emitTo(ctx, "identity", {x});
  ctx.out = {cur};
  return Status::ok();
}

// Trilu: keep x where (col - row) >= k (upper) or <= k (lower), else 0.
Status handleTrilu(NodeCtx& ctx) {
  Val& x = ctx.input(0);
  SVM_RETURN_IF_ERROR(needRank(ctx, x, "the Trilu input"));
  std::int64_t k = 0;
  if (ctx.has(1)) {
    SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> ks, ctx.constInts(1, "Trilu k"));
    k = ks.at(0);
  }
  const bool upper = ctx.attrInt("upper", 1) != 0;
  SVM_ASSIGN_OR_RETURN(Operand xo, tensorIn(ctx, 0));
  Val src = x.isConst() ? Val::ofTensor(ctx.e->regOf(xo), x.dtype, x.rank) : x;
  if (x.isConst()) src.dims = x.dims;
  ShapeElem rows = ctx.e->dimOf(src, x.rank - 2), cols = ctx.e->dimOf(src, x.rank - 1);
  auto arange = [&](ShapeElem& n) -> Expected<Val> {
    return ctx.e->op1("arange", {Operand::ofReg(ctx.e->intReg(n))}, {{"dtype", AttrValue::ofDType(DType::Int64)}});
  };
  SVM_ASSIGN_OR_RETURN(Val r, arange(rows));
  SVM_ASSIGN_OR_RETURN(Val c, arange(cols));
  SVM_ASSIGN_OR_RETURN(Val r2, ctx.e->op1("unsqueeze", {Operand::ofReg(r.reg)}, {{"axes", AttrValue::ofInts({1})}}));
  SVM_ASSIGN_OR_RETURN(Val diff, ctx.e->op1("sub", {Operand::ofReg(c.reg), Operand::ofReg(r2.reg)}));
  SVM_ASSIGN_OR_RETURN(
      Val mask, ctx.e->op1(upper ? "greater_equal" : "less_equal",
                           {Operand::ofReg(diff.reg),
                            Operand::of(Value::fromTensor(Tensor::scalar(static_cast<double>(k), DType::Int64)))}));
  const DType dtype = x.dtype.value_or(DType::Float32);
  return emitTo(ctx, "where", {Operand::ofReg(mask.reg), xo, Operand::of(Value::fromTensor(Tensor::scalar(0, dtype)))});
}

// ---- reductions and normalizations ----

Handler reduce(std::string op) {
  return [op](NodeCtx& ctx) -> Status {
    std::vector<std::int64_t> axes;
    if (ctx.has(1)) {
      SVM_ASSIGN_OR_RETURN(axes, ctx.constInts(1, "reduction axes"));
    } else axes = ctx.attrInts("axes").value_or(std::vector<std::int64_t>{});
    SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
    if (axes.empty() && ctx.attrInt("noop_with_empty_axes", 0) != 0) return emitTo(ctx, "identity", {x});
    const bool keepdims = ctx.attrInt("keepdims", 1) != 0;
    return emitTo(ctx, op, {x}, {{"axes", AttrValue::ofInts(axes)}, {"keepdims", AttrValue::ofBool(keepdims)}});
  };
}

// select_last_index=1: the first maximum of x reversed along the axis, at n - 1 - j.
Status handleArgMax(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, 0));
  const NamedAttrs attrs = {{"axis", AttrValue::ofInt(ctx.attrInt("axis", 0))},
                            {"keepdims", AttrValue::ofBool(ctx.attrInt("keepdims", 1) != 0)}};
  if (ctx.attrInt("select_last_index", 0) == 0) return emitTo(ctx, "argmax", {x}, attrs);
  Val& in = ctx.input(0);
  SVM_RETURN_IF_ERROR(needRank(ctx, in, "the ArgMax input"));
  const std::int64_t a = ctx.attrInt("axis", 0);
  if (a < -in.rank || a >= in.rank) return ctx.fail(ErrorCode::InvalidArgument, "axis {} for rank {}", a, in.rank);
  const int axis = normAxis(a, in.rank);
  Val src = in.isConst() ? Val::ofTensor(ctx.e->regOf(x), in.dtype, in.rank) : in;
  if (in.isConst()) src.dims = in.dims;
  SVM_ASSIGN_OR_RETURN(Val reversed,
                       ctx.e->op1("slice",
                                  {Operand::ofReg(src.reg), ctx.e->ints({-1}),
                                   ctx.e->ints({std::numeric_limits<std::int64_t>::min()}), ctx.e->ints({-1})},
                                  {{"axes", AttrValue::ofInts({axis})}}));
  SVM_ASSIGN_OR_RETURN(Val j, ctx.e->op1("argmax", {Operand::ofReg(reversed.reg)}, attrs));
  ShapeElem n = ctx.e->dimOf(src, axis), one{1, -1};
  ShapeElem last = ctx.e->scalar(Opcode::Sub, n, one);
  SVM_ASSIGN_OR_RETURN(
      Val base, ctx.e->op1("full", {ctx.e->ints(std::vector<std::int64_t>{}), Operand::ofReg(ctx.e->intReg(last))},
                           {{"dtype", AttrValue::ofDType(DType::Int64)}}));
  return emitTo(ctx, "sub", {Operand::ofReg(base.reg), Operand::ofReg(j.reg)});
}

// Softmax/LogSoftmax: opset >= 13 normalizes along `axis` (default -1); before, the input is
// coerced to 2-D at `axis` (default 1) and normalized along the flattened trailing dims.
Handler softmax(std::string op) {
  return [op](NodeCtx& ctx) -> Status {
    SVM_ASSIGN_OR_RETURN(Operand xo, tensorIn(ctx, 0));
    Val& x = ctx.input(0);
    if (ctx.opset >= 13) return emitTo(ctx, op, {xo}, {{"axis", AttrValue::ofInt(ctx.attrInt("axis", -1))}});
    SVM_RETURN_IF_ERROR(needRank(ctx, x, "the softmax input"));
    const int axis = normAxis(ctx.attrInt("axis", 1), x.rank);
    if (axis == x.rank - 1) return emitTo(ctx, op, {xo}, {{"axis", AttrValue::ofInt(-1)}});
    Val src = x.isConst() ? Val::ofTensor(ctx.e->regOf(xo), x.dtype, x.rank) : x;
    if (x.isConst()) src.dims = x.dims;
    ShapeElem outer{1, -1};
    for (int i = 0; i < axis; ++i) {
      ShapeElem d = ctx.e->dimOf(src, i);
      outer = ctx.e->scalar(Opcode::Mul, outer, d);
    }
    Val flat_shape = Val::ofShape({outer, ShapeElem{-1, -1}});
    SVM_ASSIGN_OR_RETURN(Operand fs, ctx.e->ints(flat_shape, "softmax shape"));
    SVM_ASSIGN_OR_RETURN(Val flat, ctx.e->op1("reshape", {Operand::ofReg(src.reg), fs}));
    SVM_ASSIGN_OR_RETURN(Val norm, ctx.e->op1(op, {Operand::ofReg(flat.reg)}, {{"axis", AttrValue::ofInt(-1)}}));
    const int shape = ctx.e->newReg();
    ctx.e->fn().emit(Opcode::ShapeOf, shape, src.reg);
    return emitTo(ctx, "reshape", {Operand::ofReg(norm.reg), Operand::ofReg(shape)});
  };
}

Status handleLayerNorm(NodeCtx& ctx) {
  std::vector<Operand> inputs;
  for (std::size_t k = 0; k < 3; ++k) {
    if (!ctx.has(k)) continue;
    SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, k));
    inputs.push_back(x);
  }
  SVM_RETURN_IF_ERROR(emitTo(ctx, "layer_norm", inputs,
                             {{"axis", AttrValue::ofInt(ctx.attrInt("axis", -1))},
                              {"eps", AttrValue::ofFloat(ctx.attrFloat("epsilon", 1e-5))}}));
  const bool stats_used =
      ctx.node->output_size() > 1 &&
      (!ctx.node->output(1).empty() || (ctx.node->output_size() > 2 && !ctx.node->output(2).empty()));
  if (!stats_used) return Status::ok();
  // Mean and InvStdDev over axes [axis, rank), kept as size-1 dims.
  Val& x = ctx.input(0);
  SVM_RETURN_IF_ERROR(needRank(ctx, x, "the LayerNormalization input"));
  std::vector<std::int64_t> axes;
  for (int i = normAxis(ctx.attrInt("axis", -1), x.rank); i < x.rank; ++i) axes.push_back(i);
  const NamedAttrs reduce = {{"axes", AttrValue::ofInts(axes)}, {"keepdims", AttrValue::ofBool(true)}};
  auto operand = [](const Val& v) {
    return v.isConst() ? Operand::of(Value::fromTensor(v.constant)) : Operand::ofReg(v.reg);
  };
  SVM_ASSIGN_OR_RETURN(Val mean, ctx.e->op1("mean", {inputs[0]}, reduce));
  SVM_ASSIGN_OR_RETURN(Val centered, ctx.e->op1("sub", {inputs[0], operand(mean)}));
  SVM_ASSIGN_OR_RETURN(Val square, ctx.e->op1("mul", {operand(centered), operand(centered)}));
  SVM_ASSIGN_OR_RETURN(Val var, ctx.e->op1("mean", {operand(square)}, reduce));
  const DType dtype = x.dtype.value_or(DType::Float32);
  SVM_ASSIGN_OR_RETURN(Val shifted, ctx.e->op1("add", {operand(var), Operand::of(Value::fromTensor(Tensor::scalar(
                                                                         ctx.attrFloat("epsilon", 1e-5), dtype)))}));
  SVM_ASSIGN_OR_RETURN(Val inv_std, ctx.e->op1("rsqrt", {operand(shifted)}));
  ctx.out.push_back(mean);
  ctx.out.push_back(inv_std);
  return Status::ok();
}

const std::map<std::string, Handler, std::less<>>& handlers() {
  static const auto* table = new std::map<std::string, Handler, std::less<>>{
      {"Add", binary("add", Opcode::Add)},
      {"Sub", binary("sub", Opcode::Sub)},
      {"Mul", binary("mul", Opcode::Mul)},
      {"Div", binary("div", Opcode::Div)},
      {"Pow", handlePow},
      {"Max", variadic("maximum")},
      {"Min", variadic("minimum")},
      {"Sum", variadic("add")},
      {"Mean", handleMean},
      {"Equal", binary("equal", Opcode::Eq)},
      {"Less", binary("less", Opcode::Lt)},
      {"LessOrEqual", binary("less_equal")},
      {"Greater", binary("greater", Opcode::Gt)},
      {"GreaterOrEqual", binary("greater_equal")},
      {"And", binary("logical_and")},
      {"Or", binary("logical_or")},
      {"Not", unary("logical_not")},
      {"Neg", unary("neg")},
      {"Abs", unary("abs")},
      {"Exp", unary("exp")},
      {"Log", unary("log")},
      {"Sqrt", unary("sqrt")},
      {"Reciprocal", handleReciprocal},
      {"Sigmoid", unary("sigmoid")},
      {"Tanh", unary("tanh")},
      {"Relu", unary("relu")},
      {"Erf", unary("erf")},
      {"Gelu", handleGelu},
      {"Identity", handleIdentity},
      {"Dropout", handleDropout},
      {"Clip", handleClip},
      {"Where", handleWhere},
      {"Cast", handleCast},
      {"CastLike", handleCastLike},
      {"Constant", handleConstant},
      {"MatMul", handleMatMul},
      {"Gemm", handleGemm},
      {"Shape", handleShape},
      {"Size", handleSize},
      {"Gather", handleGather},
      {"Unsqueeze", handleUnsqueeze},
      {"Squeeze", handleSqueeze},
      {"Concat", handleConcat},
      {"Slice", handleSlice},
      {"Reshape", handleReshape},
      {"Flatten", handleFlatten},
      {"Expand", handleExpand},
      {"ConstantOfShape", handleConstantOfShape},
      {"Range", handleRange},
      {"Transpose", handleTranspose},
      {"Split", handleSplit},
      {"Pad", handlePad},
      {"Tile", handleTile},
      {"Trilu", handleTrilu},
      {"ReduceSum", reduce("sum")},
      {"ReduceMean", reduce("mean")},
      {"ReduceMax", reduce("max")},
      {"ReduceMin", reduce("min")},
      {"ArgMax", handleArgMax},
      {"Softmax", softmax("softmax")},
      {"LogSoftmax", softmax("log_softmax")},
      {"LayerNormalization", handleLayerNorm},
      {"CumSum", handleCumSum},
      {"Einsum", handleEinsum},
      {"TopK", handleTopK},
      {"If", handleIf},
      {"Loop", handleLoop},
      {"LSTM", lowerLstm},
      {"GRU", lowerGru},
      {"Conv", lowerConv},
      {"ConvTranspose", lowerConvTranspose},
      {"MaxPool", lowerMaxPool},
      {"AveragePool", lowerAveragePool},
      {"GlobalAveragePool", lowerGlobalAveragePool},
      {"GlobalMaxPool", lowerGlobalMaxPool},
      {"BatchNormalization", lowerBatchNorm},
      {"InstanceNormalization", lowerInstanceNorm},
      {"Resize", lowerResize},
      {"Upsample", lowerUpsample},
      {"DepthToSpace", lowerDepthToSpace},
      {"SpaceToDepth", lowerSpaceToDepth},
  };
  return *table;
}

}  // namespace

const Handler* findHandler(std::string_view op_type) {
  auto it = handlers().find(op_type);
  return it == handlers().end() ? nullptr : &it->second;
}

}  // namespace shapevm::onnx_import
