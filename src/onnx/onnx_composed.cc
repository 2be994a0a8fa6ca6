// SPDX-License-Identifier: Apache-2.0
// ONNX ops ShapeVM has no single op for, composed from existing ops at import: CumSum (a matmul
// with a 0/1 triangular mask built from arange), Einsum for matmul-like equations (transpose,
// unsqueeze, matmul, squeeze) and TopK with k known at import (k rounds of argmax/max, masking
// each winner). Invariant: what a composition cannot express exactly is an error naming the node.
#include <algorithm>
#include <limits>

#include "onnx/onnx_graph.h"
#include "onnx/onnx_tensor.h"

namespace shapevm::onnx_import {
namespace {

Expected<Operand> operandOf(NodeCtx& ctx, Val v, std::string_view what) {
  return ctx.e->tensor(v, fmt::format("{} {}", ctx.label, what));
}

// A runtime view of input 0 whose dims can be read (a constant is materialized first).
Expected<Val> readable(NodeCtx& ctx, Operand& xo) {
  Val& x = ctx.input(0);
  SVM_RETURN_IF_ERROR(needRank(ctx, x, "input 0"));
  SVM_ASSIGN_OR_RETURN(xo, tensorIn(ctx, 0));
  if (!x.isConst()) return x;
  Val src = Val::ofTensor(ctx.e->regOf(xo), x.dtype, x.rank);
  src.dims = x.dims;
  xo = Operand::ofReg(src.reg);  // every op below is emitted, none folded
  return src;
}

Expected<Val> arangeOf(NodeCtx& ctx, ShapeElem n) {
  return ctx.e->op1("arange", {Operand::ofReg(ctx.e->intReg(n))}, {{"dtype", AttrValue::ofDType(DType::Int64)}});
}

// perm of `rank` axes with a and b swapped.
std::vector<std::int64_t> swapped(int rank, int a, int b) {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) perm[static_cast<std::size_t>(i)] = i;
  std::swap(perm[static_cast<std::size_t>(a)], perm[static_cast<std::size_t>(b)]);
  return perm;
}

}  // namespace

// y[..i..] = sum over j of x[..j..] * m[j, i], m[j, i] = (j <= i) (exclusive: <; reverse: >=, >).
Status handleCumSum(NodeCtx& ctx) {
  Operand xo;
  SVM_ASSIGN_OR_RETURN(Val src, readable(ctx, xo));
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> axes, ctx.constInts(1, "CumSum axis"));
  const int rank = src.rank;
  if (axes.size() != 1 || axes[0] < -rank || axes[0] >= rank)
    return ctx.fail(ErrorCode::InvalidArgument, "axis must be one value in [{}, {}]", -rank, rank - 1);
  const int axis = normAxis(axes[0], rank);
  const bool exclusive = ctx.attrInt("exclusive", 0) != 0, reverse = ctx.attrInt("reverse", 0) != 0;
  SVM_ASSIGN_OR_RETURN(Val r, arangeOf(ctx, ctx.e->dimOf(src, axis)));
  SVM_ASSIGN_OR_RETURN(Val col, ctx.e->op1("unsqueeze", {Operand::ofReg(r.reg)}, {{"axes", AttrValue::ofInts({1})}}));
  const char* compare = reverse ? (exclusive ? "greater" : "greater_equal") : (exclusive ? "less" : "less_equal");
  SVM_ASSIGN_OR_RETURN(Val mask, ctx.e->op1(compare, {Operand::ofReg(col.reg), Operand::ofReg(r.reg)}));
  const DType dtype = src.dtype.value_or(DType::Float32);
  SVM_ASSIGN_OR_RETURN(Val weights,
                       ctx.e->op1("cast", {Operand::ofReg(mask.reg)}, {{"dtype", AttrValue::ofDType(dtype)}}));
  const Operand m = Operand::ofReg(weights.reg);
  if (axis == rank - 1) return emitTo(ctx, "matmul", {xo, m});
  const NamedAttrs perm = {{"perm", AttrValue::ofInts(swapped(rank, axis, rank - 1))}};
  SVM_ASSIGN_OR_RETURN(Val moved, ctx.e->op1("transpose", {xo}, perm));
  SVM_ASSIGN_OR_RETURN(Val summed, ctx.e->op1("matmul", {Operand::ofReg(moved.reg), m}));
  return emitTo(ctx, "transpose", {Operand::ofReg(summed.reg)}, perm);
}

namespace {

struct Equation {
  std::vector<std::string> inputs;
  std::string output;
};

Expected<Equation> parseEquation(NodeCtx& ctx, std::string text) {
  text.erase(std::remove(text.begin(), text.end(), ' '), text.end());
  Equation eq;
  const std::size_t arrow = text.find("->");
  const std::string lhs = text.substr(0, arrow);
  for (std::size_t start = 0;;) {
    const std::size_t comma = lhs.find(',', start);
    eq.inputs.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (arrow != std::string::npos) {
    eq.output = text.substr(arrow + 2);
  } else {  // implicit output: the letters that appear once, in alphabetical order
    for (char c = 'A'; c <= 'z'; ++c) {
      if (std::count(lhs.begin(), lhs.end(), c) == 1) eq.output += c;
    }
  }
  for (const std::string& term : eq.inputs) {
    for (std::size_t i = 0; i < term.size(); ++i) {
      if (!std::isalpha(static_cast<unsigned char>(term[i])))
        return ctx.fail(ErrorCode::Unsupported, "Einsum '{}': only letter subscripts (no ellipsis)", text);
      if (term.find(term[i], i + 1) != std::string::npos)
        return ctx.fail(ErrorCode::Unsupported, "Einsum '{}': a repeated subscript in one operand (a diagonal)", text);
    }
  }
  return eq;
}

// Sums the letters of `term` that `keep` lacks; returns the remaining letters.
Expected<std::string> sumOut(NodeCtx& ctx, Operand& x, const std::string& term, const std::string& keep) {
  std::vector<std::int64_t> axes;
  std::string rest;
  for (std::size_t i = 0; i < term.size(); ++i) {
    if (keep.find(term[i]) == std::string::npos) axes.push_back(static_cast<std::int64_t>(i));
    else rest += term[i];
  }
  if (axes.empty()) return rest;
  SVM_ASSIGN_OR_RETURN(
      Val s, ctx.e->op1("sum", {x}, {{"axes", AttrValue::ofInts(axes)}, {"keepdims", AttrValue::ofBool(false)}}));
  SVM_ASSIGN_OR_RETURN(x, operandOf(ctx, s, "partial sum"));
  return rest;
}

// Transposes x (letters `from`) to the letter order `to` (a permutation of `from`).
Status permute(NodeCtx& ctx, Operand& x, const std::string& from, const std::string& to) {
  if (from == to) return Status::ok();
  std::vector<std::int64_t> perm;
  for (char c : to) perm.push_back(static_cast<std::int64_t>(from.find(c)));
  SVM_ASSIGN_OR_RETURN(Val t, ctx.e->op1("transpose", {x}, {{"perm", AttrValue::ofInts(perm)}}));
  SVM_ASSIGN_OR_RETURN(x, operandOf(ctx, t, "transpose"));
  return Status::ok();
}

Status unsqueezeAt(NodeCtx& ctx, Operand& x, std::int64_t axis) {
  SVM_ASSIGN_OR_RETURN(Val t, ctx.e->op1("unsqueeze", {x}, {{"axes", AttrValue::ofInts({axis})}}));
  SVM_ASSIGN_OR_RETURN(x, operandOf(ctx, t, "unsqueeze"));
  return Status::ok();
}

}  // namespace

// One operand: sums and a transpose. Two: batch letters (in both and the output), at most one
// left-only, one contracted and one right-only letter: a batched matmul.
Status handleEinsum(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Equation eq, parseEquation(ctx, ctx.attrString("equation", "")));
  if (eq.inputs.size() != ctx.in.size() || eq.inputs.empty() || eq.inputs.size() > 2)
    return ctx.fail(ErrorCode::Unsupported, "Einsum with {} operands (one or two are supported)", ctx.in.size());
  std::vector<Operand> xs;
  for (std::size_t k = 0; k < eq.inputs.size(); ++k) {
    SVM_ASSIGN_OR_RETURN(Operand x, tensorIn(ctx, k));
    if (ctx.input(k).rank >= 0 && ctx.input(k).rank != static_cast<int>(eq.inputs[k].size()))
      return ctx.fail(ErrorCode::ShapeMismatch, "Einsum operand {} has rank {} but subscripts '{}'", k,
                      ctx.input(k).rank, eq.inputs[k]);
    xs.push_back(x);
  }
  const std::string& out = eq.output;
  if (xs.size() == 1) {
    SVM_ASSIGN_OR_RETURN(std::string rest, sumOut(ctx, xs[0], eq.inputs[0], out));
    if (rest.size() != out.size()) return ctx.fail(ErrorCode::InvalidArgument, "Einsum output letter not in the input");
    SVM_RETURN_IF_ERROR(permute(ctx, xs[0], rest, out));
    return emitTo(ctx, "identity", {xs[0]});
  }
  const std::string &a = eq.inputs[0], &b = eq.inputs[1];
  std::string batch, left, contracted, right;
  for (char c : a) {
    const bool in_b = b.find(c) != std::string::npos, in_out = out.find(c) != std::string::npos;
    if (in_b && in_out) batch += c;
    else if (in_b) contracted += c;
    else if (in_out) left += c;
  }
  for (char c : b) {
    if (a.find(c) == std::string::npos && out.find(c) != std::string::npos) right += c;
  }
  for (char c : out) {
    if (a.find(c) == std::string::npos && b.find(c) == std::string::npos)
      return ctx.fail(ErrorCode::InvalidArgument, "Einsum output letter '{}' is in no operand", c);
  }
  if (left.size() > 1 || contracted.size() > 1 || right.size() > 1) {
    return ctx.fail(ErrorCode::Unsupported,
                    "Einsum: only matmul-like equations (batch letters plus at most one row, one contracted and "
                    "one column letter) are supported");
  }
  SVM_ASSIGN_OR_RETURN(std::string ra, sumOut(ctx, xs[0], a, batch + left + contracted));
  SVM_ASSIGN_OR_RETURN(std::string rb, sumOut(ctx, xs[1], b, batch + contracted + right));
  // A to [batch, left|1, contracted|1], B to [batch, contracted|1, right|1].
  SVM_RETURN_IF_ERROR(permute(ctx, xs[0], ra, batch + left + contracted));
  SVM_RETURN_IF_ERROR(permute(ctx, xs[1], rb, batch + contracted + right));
  const auto nb = static_cast<std::int64_t>(batch.size());
  if (left.empty()) {
    SVM_RETURN_IF_ERROR(unsqueezeAt(ctx, xs[0], nb));
  }
  if (contracted.empty()) {
    SVM_RETURN_IF_ERROR(unsqueezeAt(ctx, xs[0], nb + 1));
    SVM_RETURN_IF_ERROR(unsqueezeAt(ctx, xs[1], nb));
  }
  if (right.empty()) {
    SVM_RETURN_IF_ERROR(unsqueezeAt(ctx, xs[1], nb + 1));
  }
  SVM_ASSIGN_OR_RETURN(Val y, ctx.e->op1("matmul", {xs[0], xs[1]}));
  SVM_ASSIGN_OR_RETURN(Operand yo, operandOf(ctx, y, "matmul"));
  std::vector<std::int64_t> squeeze;
  if (left.empty()) squeeze.push_back(nb);
  if (right.empty()) squeeze.push_back(nb + 1);
  if (!squeeze.empty()) {
    SVM_ASSIGN_OR_RETURN(Val s, ctx.e->op1("squeeze", {yo}, {{"axes", AttrValue::ofInts(squeeze)}}));
    SVM_ASSIGN_OR_RETURN(yo, operandOf(ctx, s, "squeeze"));
  }
  SVM_RETURN_IF_ERROR(permute(ctx, yo, batch + left + right, out));
  return emitTo(ctx, "identity", {yo});
}

// k rounds: the round's winner (argmax, first index on ties, as ONNX orders equal values) and its
// value (max), then the winner is masked with the lowest value. Smallest: the same on -x.
Status handleTopK(NodeCtx& ctx) {
  Operand xo;
  SVM_ASSIGN_OR_RETURN(Val src, readable(ctx, xo));
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> ks, ctx.constInts(1, "TopK k"));
  constexpr std::int64_t kMaxK = 256;
  if (ks.size() != 1 || ks[0] < 1 || ks[0] > kMaxK)
    return ctx.fail(ErrorCode::Unsupported, "TopK k must be one value in [1, {}] (it is composed of k rounds)", kMaxK);
  const int rank = src.rank;
  const std::int64_t a = ctx.attrInt("axis", -1);
  if (rank < 1 || a < -rank || a >= rank) return ctx.fail(ErrorCode::InvalidArgument, "axis {} for rank {}", a, rank);
  const int axis = normAxis(a, rank);
  const bool largest = ctx.attrInt("largest", 1) != 0;
  const DType dtype = src.dtype.value_or(DType::Float32);
  if (!largest && !isFloating(dtype) && dtype != DType::Int32 && dtype != DType::Int64)
    return ctx.fail(ErrorCode::Unsupported, "TopK largest=0 on {}", dtypeName(dtype));
  const ShapeElem n = ctx.e->dimOf(src, axis);
  if (n.known && *n.known < ks[0])
    return ctx.fail(ErrorCode::InvalidArgument, "k {} exceeds the axis length {}", ks[0], *n.known);
  if (!n.known) {  // a dynamic axis: checked when it runs (past its length the rounds would repeat index 0)
    ShapeElem len = n;
    const int ok = ctx.e->newReg();
    ctx.e->fn().emit(Opcode::Le, ok, ctx.e->constReg(ctx.e->module().constInt(ks[0])), ctx.e->intReg(len));
    ctx.e->fn().emit(Opcode::Assert, ok,
                     ctx.e->module().constString(fmt::format("{}: TopK k {} exceeds the length of axis {} of the input",
                                                             ctx.label, ks[0], axis)));
  }
  Operand work = xo;
  if (!largest) {
    SVM_ASSIGN_OR_RETURN(Val neg, ctx.e->op1("neg", {xo}));
    SVM_ASSIGN_OR_RETURN(work, operandOf(ctx, neg, "negation"));
  }
  // Positions along the axis, shaped to broadcast against x.
  SVM_ASSIGN_OR_RETURN(Val pos, arangeOf(ctx, n));
  std::vector<std::int64_t> others;
  for (int i = 0; i < rank; ++i) {
    if (i != axis) others.push_back(i);
  }
  Operand positions = Operand::ofReg(pos.reg);
  if (!others.empty()) {
    SVM_ASSIGN_OR_RETURN(Val p, ctx.e->op1("unsqueeze", {positions}, {{"axes", AttrValue::ofInts(others)}}));
    positions = Operand::ofReg(p.reg);
  }
  const double lowest = isFloating(dtype)       ? -std::numeric_limits<double>::infinity()
                        : dtype == DType::Int32 ? std::numeric_limits<std::int32_t>::lowest()
                                                : static_cast<double>(std::numeric_limits<std::int64_t>::lowest());
  const Operand masked = Operand::of(Value::fromTensor(Tensor::scalar(lowest, dtype)));
  const NamedAttrs reduce = {{"axes", AttrValue::ofInts({axis})}, {"keepdims", AttrValue::ofBool(true)}};
  std::vector<Operand> values, indices;
  for (std::int64_t round = 0; round < ks[0]; ++round) {
    SVM_ASSIGN_OR_RETURN(
        Val idx,
        ctx.e->op1("argmax", {work}, {{"axis", AttrValue::ofInt(axis)}, {"keepdims", AttrValue::ofBool(true)}}));
    SVM_ASSIGN_OR_RETURN(Val best, ctx.e->op1("max", {work}, reduce));
    indices.push_back(Operand::ofReg(idx.reg));
    values.push_back(Operand::ofReg(best.reg));
    if (round + 1 == ks[0]) break;
    SVM_ASSIGN_OR_RETURN(Val hit, ctx.e->op1("equal", {positions, Operand::ofReg(idx.reg)}));
    SVM_ASSIGN_OR_RETURN(Val next, ctx.e->op1("where", {Operand::ofReg(hit.reg), masked, work}));
    work = Operand::ofReg(next.reg);
  }
  const NamedAttrs cat = {{"axis", AttrValue::ofInt(axis)}};
  SVM_ASSIGN_OR_RETURN(Val vals,
                       values.size() == 1 ? ctx.e->op1("identity", values) : ctx.e->op1("concat", values, cat));
  if (!largest) {
    SVM_ASSIGN_OR_RETURN(vals, ctx.e->op1("neg", {Operand::ofReg(vals.reg)}));
  }
  SVM_ASSIGN_OR_RETURN(Val idxs,
                       indices.size() == 1 ? ctx.e->op1("identity", indices) : ctx.e->op1("concat", indices, cat));
  vals.dtype = dtype;
  idxs.dtype = DType::Int64;
  ctx.out = {vals, idxs};
  return Status::ok();
}

Status handleIf(NodeCtx& ctx) {
  const onnx::AttributeProto *then_branch = ctx.attr("then_branch"), *else_branch = ctx.attr("else_branch");
  if (then_branch == nullptr || else_branch == nullptr || !then_branch->has_g() || !else_branch->has_g())
    return ctx.fail(ErrorCode::InvalidArgument, "If needs then_branch and else_branch graphs");
  if (!ctx.has(0)) return ctx.fail(ErrorCode::InvalidArgument, "the condition is missing");
  Val& cond = ctx.input(0);
  std::optional<bool> known;
  if (cond.isConst() && cond.constant.numel() == 1) known = cond.constant.elementAsDouble(0) != 0.0;
  if (cond.isShape() && cond.elems.size() == 1 && cond.elems[0].known) known = *cond.elems[0].known != 0;
  if (known) {  // exporters often write a condition that folds: import the taken branch only
    SVM_ASSIGN_OR_RETURN(ctx.out, ctx.subgraph((*known ? then_branch : else_branch)->g(), {}));
    return Status::ok();
  }
  SVM_ASSIGN_OR_RETURN(Operand c, tensorIn(ctx, 0));
  GraphEmitter& e = *ctx.e;
  FunctionBuilder& fn = e.fn();
  const int flag = e.newReg();
  fn.emit(Opcode::ToBool, flag, e.regOf(c));
  const int outputs = ctx.node->output_size();
  std::vector<int> results;
  for (int k = 0; k < outputs; ++k) {
    results.push_back(e.newReg());
    e.markTensor(results.back());
  }
  Label then_label = fn.newLabel(), else_label = fn.newLabel(), end = fn.newLabel();
  fn.emitBranchIf(flag, then_label, else_label);
  std::vector<Val> branch_outs[2];
  for (int b = 0; b < 2; ++b) {
    SVM_RETURN_IF_ERROR(fn.bind(b == 0 ? then_label : else_label));
    SVM_ASSIGN_OR_RETURN(branch_outs[b], ctx.subgraph((b == 0 ? then_branch : else_branch)->g(), {}));
    if (static_cast<int>(branch_outs[b].size()) != outputs)
      return ctx.fail(ErrorCode::InvalidArgument, "the {} branch has {} outputs, the node {}", b == 0 ? "then" : "else",
                      branch_outs[b].size(), outputs);
    for (int k = 0; k < outputs; ++k) {
      SVM_ASSIGN_OR_RETURN(Operand o, e.tensor(branch_outs[b][static_cast<std::size_t>(k)],
                                               fmt::format("{} branch output {}", ctx.label, k)));
      fn.emit(Opcode::Move, results[static_cast<std::size_t>(k)], e.regOf(o));
    }
    fn.emitJump(end);
  }
  SVM_RETURN_IF_ERROR(fn.bind(end));
  ctx.out.clear();
  for (int k = 0; k < outputs; ++k) {
    const Val& a = branch_outs[0][static_cast<std::size_t>(k)];
    const Val& b = branch_outs[1][static_cast<std::size_t>(k)];
    Val v = Val::ofTensor(results[static_cast<std::size_t>(k)], a.dtype == b.dtype ? a.dtype : std::nullopt,
                          a.rank == b.rank ? a.rank : -1);
    ctx.out.push_back(std::move(v));
  }
  return Status::ok();
}

namespace {

// A zero-trip Loop's scan output: [0, per-iteration dims] when the body declares every dim, else [0].
std::vector<std::int64_t> emptyScanShape(const onnx::ValueInfoProto& out) {
  std::vector<std::int64_t> dims = {0};
  if (!out.type().has_tensor_type() || !out.type().tensor_type().has_shape()) return dims;
  for (const onnx::TensorShapeProto_Dimension& d : out.type().tensor_type().shape().dim()) {
    if (!d.has_dim_value()) return {0};
    dims.push_back(d.dim_value());
  }
  return dims;
}

DType scanDType(const onnx::ValueInfoProto& out) {
  if (!out.type().has_tensor_type()) return DType::Float32;
  return dtypeFromOnnx(out.type().tensor_type().elem_type()).value_or(DType::Float32);
}

}  // namespace

// head: continue while (i < M) and cond; body: LoopStart, the body graph on (i, cond, v...),
// carried values moved back (through temporaries: a body may swap them), each scan output
// appended (the first iteration starts it), LoopEnd, i += 1.
Status handleLoop(NodeCtx& ctx) {
  const onnx::AttributeProto* body_attr = ctx.attr("body");
  if (body_attr == nullptr || !body_attr->has_g()) return ctx.fail(ErrorCode::InvalidArgument, "Loop needs a body");
  const onnx::GraphProto& body = body_attr->g();
  const int carried_count = std::max(ctx.node->input_size() - 2, 0);
  const int scan_count = body.output_size() - 1 - carried_count;
  if (scan_count < 0 || body.input_size() != 2 + carried_count || ctx.node->output_size() != carried_count + scan_count)
    return ctx.fail(ErrorCode::InvalidArgument, "the body's inputs/outputs do not match the Loop's");
  GraphEmitter& e = *ctx.e;
  FunctionBuilder& fn = e.fn();
  // The trip limit as an int register, the condition as a carried bool tensor.
  int limit = -1;
  if (ctx.has(0)) {
    Val& m = ctx.input(0);
    if (std::optional<std::vector<ShapeElem>> elems = e.shapeElems(m); elems && elems->size() == 1) {
      limit = e.intReg((*elems)[0]);
    } else {
      SVM_ASSIGN_OR_RETURN(Operand mo, tensorIn(ctx, 0));
      limit = e.newReg();
      fn.emit(Opcode::ToInt, limit, e.regOf(mo));
    }
  }
  int cond = -1;
  if (ctx.has(1)) {
    SVM_ASSIGN_OR_RETURN(Operand co, tensorIn(ctx, 1));
    cond = e.newReg();
    fn.emit(Opcode::Move, cond, e.regOf(co));
    e.markTensor(cond);
  }
  std::vector<int> carried;
  std::vector<Val> carried_vals;
  for (int k = 0; k < carried_count; ++k) {
    SVM_ASSIGN_OR_RETURN(Operand v, tensorIn(ctx, static_cast<std::size_t>(k + 2)));
    carried.push_back(e.newReg());
    fn.emit(Opcode::Move, carried.back(), e.regOf(v));
    e.markTensor(carried.back());
    const Val& init = ctx.input(static_cast<std::size_t>(k + 2));
    carried_vals.push_back(Val::ofTensor(carried.back(), init.dtype, init.rank));
  }
  std::vector<int> scans;
  for (int k = 0; k < scan_count; ++k) {  // empty until the first iteration
    SVM_ASSIGN_OR_RETURN(Val empty,
                         e.op1("zeros", {e.ints(emptyScanShape(body.output(1 + carried_count + k)))},
                               {{"dtype", AttrValue::ofDType(scanDType(body.output(1 + carried_count + k)))}}));
    SVM_ASSIGN_OR_RETURN(Operand eo, e.tensor(empty, "empty scan output"));
    scans.push_back(e.newReg());
    fn.emit(Opcode::Move, scans.back(), e.regOf(eo));
    e.markTensor(scans.back());
  }
  const int counter = e.newReg(), one = e.constReg(e.module().constInt(1)), zero = e.constReg(e.module().constInt(0));
  fn.emit(Opcode::LoadConst, counter, e.module().constInt(0));
  const int loop = e.newLoop();
  Label head = fn.newLabel(), body_label = fn.newLabel(), done = fn.newLabel();
  SVM_RETURN_IF_ERROR(fn.bind(head));
  int go = -1;
  if (limit >= 0) {
    go = e.newReg();
    fn.emit(Opcode::Lt, go, counter, limit);
  }
  if (cond >= 0) {
    const int c = e.newReg();
    fn.emit(Opcode::ToBool, c, cond);
    if (go >= 0) {
      const int both = e.newReg();
      fn.emit(Opcode::And, both, go, c);
      go = both;
    } else {
      go = c;
    }
  }
  if (go < 0) return ctx.fail(ErrorCode::Unsupported, "a Loop without a trip count or a condition never ends");
  fn.emitBranchIf(go, body_label, done);
  SVM_RETURN_IF_ERROR(fn.bind(body_label));
  fn.emit(Opcode::LoopStart, loop);
  std::vector<Val> inputs = {Val::ofShape({ShapeElem{std::nullopt, counter}}, true)};
  if (cond >= 0) {
    inputs.push_back(Val::ofTensor(cond, DType::Bool, 0));
  } else {
    inputs.push_back(Val::ofConst(Tensor::scalar(1.0, DType::Bool)));
  }
  for (const Val& v : carried_vals) inputs.push_back(v);
  SVM_ASSIGN_OR_RETURN(std::vector<Val> outs, ctx.subgraph(body, std::move(inputs)));
  std::vector<int> next;  // every new value first, then the moves (a body may swap carried values)
  for (int k = 0; k < 1 + carried_count; ++k) {
    if (k == 0 && cond < 0) {
      next.push_back(-1);
      continue;
    }
    SVM_ASSIGN_OR_RETURN(Operand o,
                         e.tensor(outs[static_cast<std::size_t>(k)], fmt::format("{} body output {}", ctx.label, k)));
    const int t = e.newReg();
    fn.emit(Opcode::Move, t, e.regOf(o));
    next.push_back(t);
  }
  if (cond >= 0) fn.emit(Opcode::Move, cond, next[0]);
  for (int k = 0; k < carried_count; ++k)
    fn.emit(Opcode::Move, carried[static_cast<std::size_t>(k)], next[static_cast<std::size_t>(k + 1)]);
  for (int k = 0; k < scan_count; ++k) {
    SVM_ASSIGN_OR_RETURN(Operand o, e.tensor(outs[static_cast<std::size_t>(1 + carried_count + k)],
                                             fmt::format("{} scan output {}", ctx.label, k)));
    SVM_ASSIGN_OR_RETURN(Val row, e.op1("unsqueeze", {o}, {{"axes", AttrValue::ofInts({0})}}));
    const int first = e.newReg();
    fn.emit(Opcode::Eq, first, counter, zero);
    Label start = fn.newLabel(), append = fn.newLabel(), joined = fn.newLabel();
    fn.emitBranchIf(first, start, append);
    SVM_RETURN_IF_ERROR(fn.bind(start));
    fn.emit(Opcode::Move, scans[static_cast<std::size_t>(k)], row.reg);
    fn.emitJump(joined);
    SVM_RETURN_IF_ERROR(fn.bind(append));
    SVM_ASSIGN_OR_RETURN(Val cat,
                         e.op1("concat", {Operand::ofReg(scans[static_cast<std::size_t>(k)]), Operand::ofReg(row.reg)},
                               {{"axis", AttrValue::ofInt(0)}}));
    fn.emit(Opcode::Move, scans[static_cast<std::size_t>(k)], cat.reg);
    SVM_RETURN_IF_ERROR(fn.bind(joined));
  }
  fn.emit(Opcode::LoopEnd, loop);
  fn.emit(Opcode::Add, counter, counter, one);
  fn.emitJump(head);
  SVM_RETURN_IF_ERROR(fn.bind(done));
  ctx.out = carried_vals;
  for (int k = 0; k < scan_count; ++k) ctx.out.push_back(Val::ofTensor(scans[static_cast<std::size_t>(k)]));
  return Status::ok();
}

}  // namespace shapevm::onnx_import
