// SPDX-License-Identifier: Apache-2.0
// LSTM and GRU lowered to bytecode loops: per direction, the input projection X @ W^T (+ bias)
// runs once for all steps, then a counted loop (LoopStart/LoopEnd, so the step body is a hot
// region for the JIT) computes the gates from one time step and the carried state registers.
// Supports forward/reverse/bidirectional, layout 0 and 1, initial states, sequence_lens (masked
// steps keep the state and write zeros to Y), GRU's linear_before_reset, and the activations
// Sigmoid/Tanh/Relu and the parameterized ones (activation_alpha/beta, consumed in order by the
// activations that take them, as onnxruntime does), LSTM peepholes, clip and input_forget.
// Y's rows collect in kChunk step registers (views of each step's H) that one concat moves onto
// Y every kChunk steps; a single direction's Y/Y_h/Y_c are views (unsqueeze), not stacked copies.
#include <map>

#include "onnx/onnx_graph.h"

namespace shapevm::onnx_import {
namespace {

constexpr int kChunk = 32;  // step registers that collect Y's rows before they move onto Y

Operand operandOf(const Val& v) {
  return v.isConst() ? Operand::of(Value::fromTensor(v.constant)) : Operand::ofReg(v.reg);
}

// A value held in a register (constants loaded), for loop-carried state.
int regOfVal(GraphEmitter& e, const Val& v) {
  return e.regOf(operandOf(v));
}

// One activation function with its parameters.
struct Activation {
  std::string name;  // the ONNX name, e.g. "Sigmoid", "LeakyRelu"
  double alpha = 0.0, beta = 0.0;
};

struct Recurrent {
  bool lstm = true;
  int gates = 4;
  std::int64_t hidden = 0;
  std::vector<Activation> activations;  // per direction: f, g (, h)
  bool linear_before_reset = false;
  DType dtype = DType::Float32;
};

// The activations, with how many of activation_alpha / activation_beta each consumes and their
// defaults (those of the ONNX ops of the same name).
struct ActivationKind {
  int alphas = 0, betas = 0;
  double alpha = 0.0, beta = 0.0;
};
const std::map<std::string, ActivationKind, std::less<>>& activationKinds() {
  static const auto* kinds = new std::map<std::string, ActivationKind, std::less<>>{
      {"Sigmoid", {}},
      {"Tanh", {}},
      {"Relu", {}},
      {"Softsign", {}},
      {"Softplus", {}},
      {"LeakyRelu", {1, 0, 0.01, 0.0}},
      {"ThresholdedRelu", {1, 0, 1.0, 0.0}},
      {"Elu", {1, 0, 1.0, 0.0}},
      {"Affine", {1, 1, 1.0, 0.0}},
      {"ScaledTanh", {1, 1, 1.0, 1.0}},
      {"HardSigmoid", {1, 1, 0.2, 0.5}},
  };
  return *kinds;
}

// The activations named by the node (or the defaults), with their alpha/beta.
Expected<std::vector<Activation>> activationsOf(const NodeCtx& ctx, std::vector<std::string> names) {
  std::vector<float> alphas, betas;
  if (const auto* a = ctx.attr("activation_alpha")) alphas.assign(a->floats().begin(), a->floats().end());
  if (const auto* a = ctx.attr("activation_beta")) betas.assign(a->floats().begin(), a->floats().end());
  std::size_t next_alpha = 0, next_beta = 0;
  std::vector<Activation> out;
  for (const std::string& name : names) {
    auto it = activationKinds().find(name);
    if (it == activationKinds().end()) {
      std::string known;
      for (const auto& [k, v] : activationKinds()) known += (known.empty() ? "" : ", ") + k;
      return ctx.fail(ErrorCode::Unsupported, "activation '{}' (supported: {})", name, known);
    }
    Activation act{name, it->second.alpha, it->second.beta};
    if (it->second.alphas > 0 && next_alpha < alphas.size()) act.alpha = alphas[next_alpha++];
    if (it->second.betas > 0 && next_beta < betas.size()) act.beta = betas[next_beta++];
    out.push_back(act);
  }
  return out;
}

// f(x) for one activation, composed of ShapeVM ops.
Expected<Val> applyActivation(GraphEmitter& e, const Activation& act, int x, DType dtype) {
  auto scalar = [&](double v) { return Operand::of(Value::fromTensor(Tensor::scalar(v, dtype))); };
  auto reg = [](const Val& v) { return Operand::ofReg(v.reg); };
  const Operand in = Operand::ofReg(x);
  if (act.name == "Sigmoid") return e.op1("sigmoid", {in});
  if (act.name == "Tanh") return e.op1("tanh", {in});
  if (act.name == "Relu") return e.op1("relu", {in});
  if (act.name == "Softsign") {  // x / (1 + |x|)
    SVM_ASSIGN_OR_RETURN(Val a, e.op1("abs", {in}));
    SVM_ASSIGN_OR_RETURN(Val d, e.op1("add", {reg(a), scalar(1.0)}));
    return e.op1("div", {in, reg(d)});
  }
  if (act.name == "Softplus") {  // log(1 + exp(x))
    SVM_ASSIGN_OR_RETURN(Val ex, e.op1("exp", {in}));
    SVM_ASSIGN_OR_RETURN(Val d, e.op1("add", {reg(ex), scalar(1.0)}));
    return e.op1("log", {reg(d)});
  }
  if (act.name == "LeakyRelu") {  // x >= 0 ? x : alpha x
    SVM_ASSIGN_OR_RETURN(Val pos, e.op1("greater_equal", {in, scalar(0.0)}));
    SVM_ASSIGN_OR_RETURN(Val scaled, e.op1("mul", {in, scalar(act.alpha)}));
    return e.op1("where", {reg(pos), in, reg(scaled)});
  }
  if (act.name == "ThresholdedRelu") {  // x > alpha ? x : 0
    SVM_ASSIGN_OR_RETURN(Val above, e.op1("greater", {in, scalar(act.alpha)}));
    return e.op1("where", {reg(above), in, scalar(0.0)});
  }
  if (act.name == "Elu") {  // x >= 0 ? x : alpha (exp(x) - 1)
    SVM_ASSIGN_OR_RETURN(Val pos, e.op1("greater_equal", {in, scalar(0.0)}));
    SVM_ASSIGN_OR_RETURN(Val ex, e.op1("exp", {in}));
    SVM_ASSIGN_OR_RETURN(Val em1, e.op1("sub", {reg(ex), scalar(1.0)}));
    SVM_ASSIGN_OR_RETURN(Val neg, e.op1("mul", {reg(em1), scalar(act.alpha)}));
    return e.op1("where", {reg(pos), in, reg(neg)});
  }
  if (act.name == "Affine") {  // alpha x + beta
    SVM_ASSIGN_OR_RETURN(Val m, e.op1("mul", {in, scalar(act.alpha)}));
    return e.op1("add", {reg(m), scalar(act.beta)});
  }
  if (act.name == "ScaledTanh") {  // alpha tanh(beta x)
    SVM_ASSIGN_OR_RETURN(Val m, e.op1("mul", {in, scalar(act.beta)}));
    SVM_ASSIGN_OR_RETURN(Val t, e.op1("tanh", {reg(m)}));
    return e.op1("mul", {reg(t), scalar(act.alpha)});
  }
  // HardSigmoid: max(0, min(1, alpha x + beta))
  SVM_ASSIGN_OR_RETURN(Val m, e.op1("mul", {in, scalar(act.alpha)}));
  SVM_ASSIGN_OR_RETURN(Val a, e.op1("add", {reg(m), scalar(act.beta)}));
  SVM_ASSIGN_OR_RETURN(Val lo, e.op1("minimum", {reg(a), scalar(1.0)}));
  return e.op1("maximum", {reg(lo), scalar(0.0)});
}

Status lowerRecurrent(NodeCtx& ctx, bool lstm) {
  GraphEmitter& e = *ctx.e;
  Recurrent rec;
  rec.lstm = lstm;
  rec.gates = lstm ? 4 : 3;
  rec.linear_before_reset = !lstm && ctx.attrInt("linear_before_reset", 0) != 0;
  const std::string direction = ctx.attrString("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return ctx.fail(ErrorCode::InvalidArgument, "direction '{}'", direction);
  }
  const int num_dirs = direction == "bidirectional" ? 2 : 1;
  const bool layout1 = ctx.attrInt("layout", 0) != 0;
  std::optional<double> clip;
  if (ctx.attr("clip")) {
    clip = ctx.attrFloat("clip", 0.0);
    if (!(*clip > 0.0)) return ctx.fail(ErrorCode::InvalidArgument, "clip {} must be > 0", *clip);
  }
  const bool input_forget = lstm && ctx.attrInt("input_forget", 0) != 0;
  const int per_dir = lstm ? 3 : 2;
  std::vector<std::string> names;
  if (const auto* a = ctx.attr("activations")) {
    for (const std::string& s : a->strings()) names.push_back(s);
  } else {
    for (int d = 0; d < num_dirs; ++d) {
      names.push_back("Sigmoid");
      names.push_back("Tanh");
      if (lstm) names.push_back("Tanh");
    }
  }
  if (static_cast<int>(names.size()) != per_dir * num_dirs) {
    return ctx.fail(ErrorCode::InvalidArgument, "{} activations given, {} expected", names.size(), per_dir * num_dirs);
  }
  SVM_ASSIGN_OR_RETURN(rec.activations, activationsOf(ctx, names));
  rec.hidden = ctx.attrInt("hidden_size", -1);
  if (rec.hidden < 0 && ctx.has(2) && ctx.input(2).isConst()) rec.hidden = ctx.input(2).constant.dim(2);
  if (rec.hidden <= 0) return ctx.fail(ErrorCode::Unsupported, "hidden_size unknown at import");
  rec.dtype = ctx.input(0).dtype.value_or(DType::Float32);
  const std::int64_t H = rec.hidden;
  const std::int64_t GH = rec.gates * H;

  auto opv = [&](std::string_view op, std::vector<Operand> in, const NamedAttrs& attrs = {}) {
    return e.op1(op, std::move(in), attrs);
  };
  auto perm = [](std::vector<std::int64_t> p) { return NamedAttrs{{"perm", AttrValue::ofInts(std::move(p))}}; };

  // X as [seq, batch, input].
  SVM_ASSIGN_OR_RETURN(Operand x0, e.tensor(ctx.input(0), ctx.label + " X"));
  Val X = Val::ofTensor(e.regOf(x0));
  if (layout1) {
    SVM_ASSIGN_OR_RETURN(X, opv("transpose", {Operand::ofReg(X.reg)}, perm({1, 0, 2})));
  }
  const int seq = e.newReg(), batch = e.newReg();
  e.fn().emit(Opcode::DimOf, seq, X.reg, 0);
  e.fn().emit(Opcode::DimOf, batch, X.reg, 1);
  ShapeElem batch_elem{std::nullopt, batch};
  auto stateShape = [&](std::int64_t first) {
    std::vector<ShapeElem> elems = {batch_elem, ShapeElem{H, -1}};
    if (first >= 0) elems.insert(elems.begin(), ShapeElem{first, -1});
    return Operand::ofReg(e.tupleOf(elems));
  };
  auto zerosOf = [&](std::int64_t first) {
    return opv("full", {stateShape(first), Operand::of(Value::fromFloat(0.0))},
               {{"dtype", AttrValue::ofDType(rec.dtype)}});
  };
  // Initial states as [num_dirs, batch, hidden].
  auto initial = [&](std::size_t k) -> Expected<std::optional<Val>> {
    if (!ctx.has(k)) return std::optional<Val>();
    SVM_ASSIGN_OR_RETURN(Operand o, e.tensor(ctx.input(k), ctx.label + " initial state"));
    if (!layout1) return std::optional<Val>(ctx.input(k).isConst() ? ctx.input(k) : Val::ofTensor(o.reg));
    SVM_ASSIGN_OR_RETURN(Val t, opv("transpose", {o}, perm({1, 0, 2})));
    return std::optional<Val>(t);
  };
  SVM_ASSIGN_OR_RETURN(std::optional<Val> h_init, initial(5));
  std::optional<Val> c_init;
  if (lstm) {
    SVM_ASSIGN_OR_RETURN(c_init, initial(6));
  }
  std::optional<Operand> seq_lens;
  if (ctx.has(4)) {
    SVM_ASSIGN_OR_RETURN(Operand s, e.tensor(ctx.input(4), ctx.label + " sequence_lens"));
    seq_lens = s;
  }

  std::vector<Val> ys, hs, cs;
  for (int d = 0; d < num_dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const Activation* act = &rec.activations[static_cast<std::size_t>(d * per_dir)];
    auto activate = [&](const Activation& a, const Val& v) { return applyActivation(e, a, v.reg, rec.dtype); };
    auto dirSlice = [&](std::size_t k) -> Expected<Val> {
      SVM_ASSIGN_OR_RETURN(Operand w, e.tensor(ctx.input(k), ctx.label + " weights"));
      return opv("gather", {w, Operand::of(Value::fromInt(d))}, {{"axis", AttrValue::ofInt(0)}});
    };
    SVM_ASSIGN_OR_RETURN(Val W, dirSlice(1));
    SVM_ASSIGN_OR_RETURN(Val R, dirSlice(2));
    SVM_ASSIGN_OR_RETURN(Val Wt, opv("transpose", {operandOf(W)}));
    SVM_ASSIGN_OR_RETURN(Val Rt, opv("transpose", {operandOf(R)}));
    // LSTM peepholes P = [p_i, p_o, p_f] per direction.
    int p_i = -1, p_o = -1, p_f = -1;
    if (lstm && ctx.has(7)) {
      SVM_ASSIGN_OR_RETURN(Val P, dirSlice(7));
      for (auto [slot, k] : {std::pair{&p_i, 0}, std::pair{&p_o, 1}, std::pair{&p_f, 2}}) {
        SVM_ASSIGN_OR_RETURN(Val part, opv("slice", {operandOf(P), e.ints({k * H}), e.ints({(k + 1) * H})}));
        *slot = regOfVal(e, part);
      }
    }
    // The input projection for all steps: [seq, batch, G*H].
    SVM_ASSIGN_OR_RETURN(Val XW, opv("matmul", {Operand::ofReg(X.reg), operandOf(Wt)}));
    std::optional<Val> hidden_bias;
    if (ctx.has(3)) {
      SVM_ASSIGN_OR_RETURN(Val B, dirSlice(3));
      auto part = [&](std::int64_t from) { return opv("slice", {operandOf(B), e.ints({from}), e.ints({from + GH})}); };
      SVM_ASSIGN_OR_RETURN(Val wb, part(0));
      SVM_ASSIGN_OR_RETURN(Val rb, part(GH));
      if (rec.linear_before_reset) {
        SVM_ASSIGN_OR_RETURN(XW, opv("add", {operandOf(XW), operandOf(wb)}));
        hidden_bias = rb;
      } else {
        SVM_ASSIGN_OR_RETURN(Val bias, opv("add", {operandOf(wb), operandOf(rb)}));
        SVM_ASSIGN_OR_RETURN(XW, opv("add", {operandOf(XW), operandOf(bias)}));
      }
    }
    // GRU without linear_before_reset: R's z|r part and h part separately.
    std::optional<Val> Rt_zr, Rt_h;
    if (!lstm && !rec.linear_before_reset) {
      SVM_ASSIGN_OR_RETURN(
          Val zr, opv("slice", {operandOf(Rt), e.ints({0}), e.ints({2 * H})}, {{"axes", AttrValue::ofInts({1})}}));
      SVM_ASSIGN_OR_RETURN(
          Val hh, opv("slice", {operandOf(Rt), e.ints({2 * H}), e.ints({3 * H})}, {{"axes", AttrValue::ofInts({1})}}));
      Rt_zr = zr;
      Rt_h = hh;
    }
    // Loop-carried registers: H, C, Y.
    auto carried = [&](const std::optional<Val>& init, std::int64_t first) -> Expected<int> {
      Val v;
      if (init) {
        SVM_ASSIGN_OR_RETURN(
            v, opv("gather", {operandOf(*init), Operand::of(Value::fromInt(d))}, {{"axis", AttrValue::ofInt(0)}}));
      } else {
        SVM_ASSIGN_OR_RETURN(v, zerosOf(first));
      }
      const int r = e.newReg();
      e.fn().emit(Opcode::Move, r, regOfVal(e, v));
      e.markTensor(r);
      return r;
    };
    SVM_ASSIGN_OR_RETURN(const int h_reg, carried(h_init, -1));
    int c_reg = -1;
    if (lstm) {
      SVM_ASSIGN_OR_RETURN(c_reg, carried(c_init, -1));
    }
    // Y's rows: step i leaves its [1, batch, hidden] row (a view of H) in step register i mod
    // kChunk, chosen by a binary tree of comparisons, and every kChunk steps one concat moves the
    // registers onto Y and empties them ([0, batch, hidden]). So a row is copied once when its
    // chunk moves and Y once per kChunk steps; appending each step to a growing tensor copied
    // the chunk built so far every step (BENCHMARKS.md, round 3 of issue 20).
    SVM_ASSIGN_OR_RETURN(const int y_reg, carried(std::nullopt, 0));
    SVM_ASSIGN_OR_RETURN(const int empty_reg, carried(std::nullopt, 0));
    std::vector<int> step_regs;
    for (int k = 0; k < kChunk; ++k) {
      step_regs.push_back(e.newReg());
      e.fn().emit(Opcode::Move, step_regs.back(), empty_reg);
      e.markTensor(step_regs.back());
    }
    std::vector<int> index_regs;  // the ints 0 .. kChunk - 1 for the tree's comparisons
    for (int k = 0; k < kChunk; ++k) index_regs.push_back(e.constReg(e.module().constInt(k)));
    // Loop-invariant operands in registers before the loop.
    const int rt_reg = regOfVal(e, Rt);
    const int rt_zr_reg = Rt_zr ? regOfVal(e, *Rt_zr) : -1;
    const int rt_h_reg = Rt_h ? regOfVal(e, *Rt_h) : -1;
    const int hb_reg = hidden_bias ? regOfVal(e, *hidden_bias) : -1;
    const int xw_reg = regOfVal(e, XW);
    const int zero_reg = e.constReg(e.module().constTensor(Tensor::scalar(0.0, rec.dtype)));
    const int one_reg = e.constReg(e.module().constTensor(Tensor::scalar(1.0, rec.dtype)));
    const int one_int = e.constReg(e.module().constInt(1));
    auto tensorReg = [&](double v) { return e.regOf(Operand::of(Value::fromTensor(Tensor::scalar(v, rec.dtype)))); };
    const int clip_hi = clip ? tensorReg(*clip) : -1;
    const int clip_lo = clip ? tensorReg(-*clip) : -1;
    const int zero_int = e.constReg(e.module().constInt(0));
    const int chunk_int = e.constReg(e.module().constInt(kChunk));
    const int counter = e.newReg();
    e.fn().emit(Opcode::LoadConst, counter, e.module().constInt(0));

    FunctionBuilder& fn = e.fn();
    const int loop = e.newLoop();
    Label head = fn.newLabel(), body = fn.newLabel(), done = fn.newLabel();
    SVM_RETURN_IF_ERROR(fn.bind(head));
    const int cond = e.newReg();
    fn.emit(Opcode::Lt, cond, counter, seq);
    fn.emitBranchIf(cond, body, done);
    SVM_RETURN_IF_ERROR(fn.bind(body));
    fn.emit(Opcode::LoopStart, loop);
    int t = counter;
    if (reverse) {  // t = seq - 1 - i
      const int last = e.newReg();
      fn.emit(Opcode::Sub, last, seq, one_int);
      t = e.newReg();
      fn.emit(Opcode::Sub, t, last, counter);
    }
    auto R_ = [](int r) { return Operand::ofReg(r); };
    auto clipped = [&](const Val& v) -> Expected<Val> {  // the clip attribute, on gate inputs
      if (!clip) return v;
      SVM_ASSIGN_OR_RETURN(Val lo, opv("minimum", {R_(v.reg), R_(clip_hi)}));
      return opv("maximum", {R_(lo.reg), R_(clip_lo)});
    };
    SVM_ASSIGN_OR_RETURN(Val xt, opv("gather", {R_(xw_reg), R_(t)}, {{"axis", AttrValue::ofInt(0)}}));
    Val h_new, c_new;
    if (lstm) {
      SVM_ASSIGN_OR_RETURN(Val hr, opv("matmul", {R_(h_reg), R_(rt_reg)}));
      SVM_ASSIGN_OR_RETURN(Val g, opv("add", {R_(xt.reg), R_(hr.reg)}));
      SVM_ASSIGN_OR_RETURN(
          std::vector<Val> parts,
          e.op("split", {R_(g.reg)}, {{"axis", AttrValue::ofInt(-1)}, {"sections", AttrValue::ofInt(4)}}));
      // Gate pre-activations: + peephole * cell state, then clipped to [-clip, clip].
      auto gate = [&](Val pre, int peephole, int cell) -> Expected<Val> {
        if (peephole >= 0) {
          SVM_ASSIGN_OR_RETURN(Val pc, opv("mul", {R_(peephole), R_(cell)}));
          SVM_ASSIGN_OR_RETURN(pre, opv("add", {R_(pre.reg), R_(pc.reg)}));
        }
        return clipped(pre);
      };
      SVM_ASSIGN_OR_RETURN(Val pre_i, gate(parts[0], p_i, c_reg));
      SVM_ASSIGN_OR_RETURN(Val i, activate(act[0], pre_i));
      Val f;
      if (input_forget) {  // coupled gates: f = 1 - i
        SVM_ASSIGN_OR_RETURN(f, opv("sub", {R_(one_reg), R_(i.reg)}));
      } else {
        SVM_ASSIGN_OR_RETURN(Val pre_f, gate(parts[2], p_f, c_reg));
        SVM_ASSIGN_OR_RETURN(f, activate(act[0], pre_f));
      }
      SVM_ASSIGN_OR_RETURN(Val pre_c, clipped(parts[3]));
      SVM_ASSIGN_OR_RETURN(Val c, activate(act[1], pre_c));
      SVM_ASSIGN_OR_RETURN(Val fc, opv("mul", {R_(f.reg), R_(c_reg)}));
      SVM_ASSIGN_OR_RETURN(Val ic, opv("mul", {R_(i.reg), R_(c.reg)}));
      SVM_ASSIGN_OR_RETURN(c_new, opv("add", {R_(fc.reg), R_(ic.reg)}));
      SVM_ASSIGN_OR_RETURN(Val pre_o, gate(parts[1], p_o, c_new.reg));  // o peeks at the new cell state
      SVM_ASSIGN_OR_RETURN(Val o, activate(act[0], pre_o));
      SVM_ASSIGN_OR_RETURN(Val hc, activate(act[2], c_new));
      SVM_ASSIGN_OR_RETURN(h_new, opv("mul", {R_(o.reg), R_(hc.reg)}));
    } else {
      SVM_ASSIGN_OR_RETURN(
          std::vector<Val> xparts,
          e.op("split", {R_(xt.reg)}, {{"axis", AttrValue::ofInt(-1)}, {"sections", AttrValue::ofInt(3)}}));
      Val z, r, hh;
      if (rec.linear_before_reset) {
        SVM_ASSIGN_OR_RETURN(Val hr, opv("matmul", {R_(h_reg), R_(rt_reg)}));
        if (hb_reg >= 0) {
          SVM_ASSIGN_OR_RETURN(hr, opv("add", {R_(hr.reg), R_(hb_reg)}));
        }
        SVM_ASSIGN_OR_RETURN(
            std::vector<Val> hparts,
            e.op("split", {R_(hr.reg)}, {{"axis", AttrValue::ofInt(-1)}, {"sections", AttrValue::ofInt(3)}}));
        SVM_ASSIGN_OR_RETURN(Val zs, opv("add", {R_(xparts[0].reg), R_(hparts[0].reg)}));
        SVM_ASSIGN_OR_RETURN(Val rs, opv("add", {R_(xparts[1].reg), R_(hparts[1].reg)}));
        SVM_ASSIGN_OR_RETURN(zs, clipped(zs));
        SVM_ASSIGN_OR_RETURN(rs, clipped(rs));
        SVM_ASSIGN_OR_RETURN(z, activate(act[0], zs));
        SVM_ASSIGN_OR_RETURN(r, activate(act[0], rs));
        SVM_ASSIGN_OR_RETURN(Val rh, opv("mul", {R_(r.reg), R_(hparts[2].reg)}));
        SVM_ASSIGN_OR_RETURN(Val hs, opv("add", {R_(xparts[2].reg), R_(rh.reg)}));
        SVM_ASSIGN_OR_RETURN(hs, clipped(hs));
        SVM_ASSIGN_OR_RETURN(hh, activate(act[1], hs));
      } else {
        SVM_ASSIGN_OR_RETURN(Val hr, opv("matmul", {R_(h_reg), R_(rt_zr_reg)}));
        SVM_ASSIGN_OR_RETURN(
            std::vector<Val> hparts,
            e.op("split", {R_(hr.reg)}, {{"axis", AttrValue::ofInt(-1)}, {"sections", AttrValue::ofInt(2)}}));
        SVM_ASSIGN_OR_RETURN(Val zs, opv("add", {R_(xparts[0].reg), R_(hparts[0].reg)}));
        SVM_ASSIGN_OR_RETURN(Val rs, opv("add", {R_(xparts[1].reg), R_(hparts[1].reg)}));
        SVM_ASSIGN_OR_RETURN(zs, clipped(zs));
        SVM_ASSIGN_OR_RETURN(rs, clipped(rs));
        SVM_ASSIGN_OR_RETURN(z, activate(act[0], zs));
        SVM_ASSIGN_OR_RETURN(r, activate(act[0], rs));
        SVM_ASSIGN_OR_RETURN(Val rh, opv("mul", {R_(r.reg), R_(h_reg)}));
        SVM_ASSIGN_OR_RETURN(Val rhr, opv("matmul", {R_(rh.reg), R_(rt_h_reg)}));
        SVM_ASSIGN_OR_RETURN(Val hs, opv("add", {R_(xparts[2].reg), R_(rhr.reg)}));
        SVM_ASSIGN_OR_RETURN(hs, clipped(hs));
        SVM_ASSIGN_OR_RETURN(hh, activate(act[1], hs));
      }
      // H = (1 - z) * hh + z * H
      SVM_ASSIGN_OR_RETURN(Val omz, opv("sub", {R_(one_reg), R_(z.reg)}));
      SVM_ASSIGN_OR_RETURN(Val a, opv("mul", {R_(omz.reg), R_(hh.reg)}));
      SVM_ASSIGN_OR_RETURN(Val b, opv("mul", {R_(z.reg), R_(h_reg)}));
      SVM_ASSIGN_OR_RETURN(h_new, opv("add", {R_(a.reg), R_(b.reg)}));
    }
    Val y_t = h_new;
    if (seq_lens) {  // steps at or past a sequence's length keep the state and write zeros
      SVM_ASSIGN_OR_RETURN(Val live, opv("greater", {*seq_lens, R_(t)}));
      SVM_ASSIGN_OR_RETURN(Val mask, opv("unsqueeze", {R_(live.reg)}, {{"axes", AttrValue::ofInts({1})}}));
      SVM_ASSIGN_OR_RETURN(h_new, opv("where", {R_(mask.reg), R_(h_new.reg), R_(h_reg)}));
      if (lstm) {
        SVM_ASSIGN_OR_RETURN(c_new, opv("where", {R_(mask.reg), R_(c_new.reg), R_(c_reg)}));
      }
      SVM_ASSIGN_OR_RETURN(y_t, opv("where", {R_(mask.reg), R_(h_new.reg), R_(zero_reg)}));
    }
    SVM_ASSIGN_OR_RETURN(Val y1, opv("unsqueeze", {R_(y_t.reg)}, {{"axes", AttrValue::ofInts({0})}}));
    // Moves the step registers onto Y in time order (a reverse direction runs backwards: its
    // later registers hold earlier steps, and the chunk goes before Y), then empties them unless
    // this is the last chunk (Moves after it would only lengthen the JIT's range of the ops that
    // follow with a register no op reads).
    auto flushSteps = [&](bool empty_after) -> Status {
      std::vector<Operand> pieces;
      if (!reverse) pieces.push_back(R_(y_reg));
      for (int k = 0; k < kChunk; ++k) {
        pieces.push_back(R_(step_regs[static_cast<std::size_t>(reverse ? kChunk - 1 - k : k)]));
      }
      if (reverse) pieces.push_back(R_(y_reg));
      SVM_ASSIGN_OR_RETURN(Val joined, opv("concat", pieces, {{"axis", AttrValue::ofInt(0)}}));
      fn.emit(Opcode::Move, y_reg, joined.reg);
      if (empty_after) {
        for (int r : step_regs) fn.emit(Opcode::Move, r, empty_reg);
      }
      return Status::ok();
    };
    fn.emit(Opcode::Move, h_reg, h_new.reg);
    if (lstm) fn.emit(Opcode::Move, c_reg, c_new.reg);
    // y1 into step register (counter mod kChunk): a binary tree of comparisons over the index.
    const int slot = e.newReg();
    fn.emit(Opcode::Mod, slot, counter, chunk_int);
    Label stored = fn.newLabel();
    auto storeRow = [&](auto& self, int lo, int hi) -> Status {
      if (hi - lo == 1) {
        fn.emit(Opcode::Move, step_regs[static_cast<std::size_t>(lo)], y1.reg);
        fn.emitJump(stored);
        return Status::ok();
      }
      const int mid = (lo + hi) / 2;
      const int below = e.newReg();
      fn.emit(Opcode::Lt, below, slot, index_regs[static_cast<std::size_t>(mid)]);
      Label left = fn.newLabel(), right = fn.newLabel();
      fn.emitBranchIf(below, left, right);
      SVM_RETURN_IF_ERROR(fn.bind(left));
      SVM_RETURN_IF_ERROR(self(self, lo, mid));
      SVM_RETURN_IF_ERROR(fn.bind(right));
      return self(self, mid, hi);
    };
    SVM_RETURN_IF_ERROR(storeRow(storeRow, 0, kChunk));
    SVM_RETURN_IF_ERROR(fn.bind(stored));
    const int next = e.newReg(), phase = e.newReg(), flush = e.newReg();
    fn.emit(Opcode::Add, next, counter, one_int);
    fn.emit(Opcode::Mod, phase, next, chunk_int);
    fn.emit(Opcode::Eq, flush, phase, zero_int);
    Label flush_label = fn.newLabel(), step_end = fn.newLabel();
    fn.emitBranchIf(flush, flush_label, step_end);
    SVM_RETURN_IF_ERROR(fn.bind(flush_label));
    SVM_RETURN_IF_ERROR(flushSteps(true));
    SVM_RETURN_IF_ERROR(fn.bind(step_end));
    fn.emit(Opcode::LoopEnd, loop);
    fn.emit(Opcode::Add, counter, counter, one_int);
    fn.emitJump(head);
    SVM_RETURN_IF_ERROR(fn.bind(done));
    SVM_RETURN_IF_ERROR(flushSteps(false));
    ys.push_back(Val::ofTensor(y_reg, rec.dtype, 3));
    hs.push_back(Val::ofTensor(h_reg, rec.dtype, 2));
    if (lstm) cs.push_back(Val::ofTensor(c_reg, rec.dtype, 2));
  }
  // Y: [seq, num_dirs, batch, hidden]; Y_h/Y_c: [num_dirs, batch, hidden] (layout 1 transposes).
  auto join = [&](std::vector<Val>& parts, std::int64_t axis) -> Expected<Val> {
    if (parts.size() == 1) {  // one direction: a view, not a copy
      return opv("unsqueeze", {Operand::ofReg(parts[0].reg)}, {{"axes", AttrValue::ofInts({axis})}});
    }
    std::vector<Operand> in;
    for (Val& v : parts) in.push_back(Operand::ofReg(v.reg));
    return opv("stack", in, {{"axis", AttrValue::ofInt(axis)}});
  };
  SVM_ASSIGN_OR_RETURN(Val Y, join(ys, 1));
  SVM_ASSIGN_OR_RETURN(Val Yh, join(hs, 0));
  std::optional<Val> Yc;
  if (lstm) {
    SVM_ASSIGN_OR_RETURN(Yc, join(cs, 0));
  }
  if (layout1) {
    SVM_ASSIGN_OR_RETURN(Y, opv("transpose", {Operand::ofReg(Y.reg)}, perm({2, 0, 1, 3})));
    SVM_ASSIGN_OR_RETURN(Yh, opv("transpose", {Operand::ofReg(Yh.reg)}, perm({1, 0, 2})));
    if (Yc) {
      SVM_ASSIGN_OR_RETURN(Yc, opv("transpose", {Operand::ofReg(Yc->reg)}, perm({1, 0, 2})));
    }
  }
  Y.rank = 4;
  Yh.rank = 3;
  ctx.out = {Y, Yh};
  if (Yc) {
    Yc->rank = 3;
    ctx.out.push_back(*Yc);
  }
  return Status::ok();
}

}  // namespace

Status lowerLstm(NodeCtx& ctx) {
  return lowerRecurrent(ctx, true);
}
Status lowerGru(NodeCtx& ctx) {
  return lowerRecurrent(ctx, false);
}

}  // namespace shapevm::onnx_import
