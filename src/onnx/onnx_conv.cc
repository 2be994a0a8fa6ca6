// SPDX-License-Identifier: Apache-2.0
// ONNX handlers of the convolution family: Conv, ConvTranspose, MaxPool, AveragePool, the global
// pools, BatchNormalization, InstanceNormalization, Resize/Upsample, DepthToSpace, SpaceToDepth
// and Pad's mode. ONNX string attributes become the ops' int codes (an unknown string is an error
// naming the node); ONNX pads (all begins, then all ends) become (before, after) pairs. A
// BatchNormalization whose input is a Conv with constant weights, used by nothing else, is folded
// into that conv's weights and bias at import; the conv's value records it (Val::folded_bn) and
// the BatchNormalization then passes that value on.
#include <cmath>
#include <map>

#include <fmt/ranges.h>

#include "onnx/onnx_graph.h"
#include "onnx/onnx_tensor.h"
#include "ops/conv_geometry.h"

namespace shapevm::onnx_import {
namespace {

Expected<Operand> operandOf(NodeCtx& ctx, std::size_t k) {
  if (!ctx.has(k)) return ctx.fail(ErrorCode::InvalidArgument, "input {} is missing", k);
  return ctx.e->tensor(ctx.input(k),
                       fmt::format("{} input {} ('{}')", ctx.label, k, ctx.node->input(static_cast<int>(k))));
}

Status emitAs(NodeCtx& ctx, std::string_view op, std::vector<Operand> inputs, const NamedAttrs& attrs) {
  SVM_ASSIGN_OR_RETURN(std::vector<Val> out, ctx.e->op(op, std::move(inputs), attrs));
  ctx.out = std::move(out);
  return Status::ok();
}

// The code of a string attribute among `names` (its index); an unknown string is an error.
template <std::size_t N>
Expected<std::int64_t> stringCode(const NodeCtx& ctx, std::string_view attr, std::string_view fallback,
                                  const std::string_view (&names)[N]) {
  const std::string value = ctx.attrString(attr, std::string(fallback));
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == value) return static_cast<std::int64_t>(i);
  }
  std::string known;
  for (std::string_view name : names) known += fmt::format("{}{}", known.empty() ? "" : ", ", name);
  return ctx.fail(ErrorCode::InvalidArgument, "unknown {} '{}' (known: {})", attr, value, known);
}

// ONNX pads (x1_begin, x2_begin, ..., x1_end, x2_end) as (before, after) pairs per axis.
Expected<std::vector<std::int64_t>> padPairs(const NodeCtx& ctx, const std::vector<std::int64_t>& onnx_pads) {
  if (onnx_pads.size() % 2 != 0) {
    return ctx.fail(ErrorCode::InvalidArgument, "pads {} has an odd number of entries", joinInts(onnx_pads));
  }
  const std::size_t n = onnx_pads.size() / 2;
  std::vector<std::int64_t> pairs;
  for (std::size_t d = 0; d < n; ++d) {
    pairs.push_back(onnx_pads[d]);
    pairs.push_back(onnx_pads[d + n]);
  }
  return pairs;
}

// strides, pads, dilations and auto_pad of a windowed node, as the ops' attributes.
Expected<NamedAttrs> windowAttrs(const NodeCtx& ctx, bool dilations) {
  SVM_ASSIGN_OR_RETURN(std::int64_t auto_pad, stringCode(ctx, "auto_pad", "NOTSET", kAutoPadNames));
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> pads,
                       padPairs(ctx, ctx.attrInts("pads").value_or(std::vector<std::int64_t>{})));
  NamedAttrs attrs = {{"strides", AttrValue::ofInts(ctx.attrInts("strides").value_or(std::vector<std::int64_t>{}))},
                      {"pads", AttrValue::ofInts(pads)},
                      {"auto_pad", AttrValue::ofInt(auto_pad)}};
  if (dilations) {
    attrs.emplace_back("dilations", AttrValue::ofInts(ctx.attrInts("dilations").value_or(std::vector<std::int64_t>{})));
  }
  return attrs;
}

// Why a conv's input rank `x_rank` does not fit its weight's rank `w_rank` ("" when it does; -1 =
// unknown): the weight is [M, C/groups, k...] with 1 to 3 spatial axes, and the input has as many.
std::string convRankMismatch(std::string_view x_name, int x_rank, std::string_view w_name, int w_rank) {
  if (w_rank >= 0 && (w_rank < 3 || w_rank > 5)) {
    return fmt::format(
        "the weight '{}' has rank {}, but a conv weight has two channel axes and 1 to 3 "
        "spatial axes (rank 3 to 5)",
        w_name, w_rank);
  }
  if (x_rank < 0 || w_rank < 0 || x_rank == w_rank) return "";
  return fmt::format(
      "input '{}' has rank {} but the weight '{}' is a {}-D kernel (rank {}), which needs a rank-{} input", x_name,
      x_rank, w_name, w_rank - 2, w_rank, w_rank);
}

// An input rank that does not fit the weight is an error at import when both are known, and so is
// a `kernel_shape` attribute that is not the weight's spatial extents.
Status checkConvRanks(NodeCtx& ctx) {
  const Val& x = ctx.input(0);
  const Val& w = ctx.input(1);
  const int w_rank = w.isConst() ? w.constant.rank() : w.rank;
  const std::string ranks = convRankMismatch(ctx.node->input(0), x.rank, ctx.node->input(1), w_rank);
  if (!ranks.empty()) return ctx.fail(ErrorCode::ShapeMismatch, "{}", ranks);
  const std::optional<std::vector<std::int64_t>> kernel = ctx.attrInts("kernel_shape");
  if (!kernel || w_rank < 0) return Status::ok();
  const std::vector<std::int64_t> w_dims =
      w.isConst() ? std::vector<std::int64_t>(w.constant.shape().begin(), w.constant.shape().end()) : w.dims;
  if (w_dims.size() != static_cast<std::size_t>(w_rank)) return Status::ok();
  bool fits = kernel->size() + 2 == w_dims.size();
  for (std::size_t a = 0; fits && a < kernel->size(); ++a) fits = w_dims[a + 2] < 0 || w_dims[a + 2] == (*kernel)[a];
  if (!fits) {
    return ctx.fail(ErrorCode::ShapeMismatch, "kernel_shape [{}] is not the spatial extents of the weight '{}' [{}]",
                    fmt::join(*kernel, ","), ctx.node->input(1), fmt::join(w_dims, ","));
  }
  return Status::ok();
}

// ---- Conv + BatchNormalization folding ----

int countUses(const onnx::GraphProto& graph, const std::string& name) {
  int uses = 0;
  for (const onnx::NodeProto& node : graph.node()) {
    for (const std::string& input : node.input()) uses += input == name ? 1 : 0;
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.has_g()) uses += countUses(attr.g(), name);
      for (const onnx::GraphProto& g : attr.graphs()) uses += countUses(g, name);
    }
  }
  for (const onnx::ValueInfoProto& output : graph.output()) uses += output.name() == name ? 1 : 0;
  return uses;
}

// The BatchNormalization `conv` folds into, or nullptr: conv's only output is used once, by an
// inference BatchNormalization's X whose four parameters are constants and whose other outputs are
// unused; the conv's weight and bias are constants.
const onnx::NodeProto* foldableBatchNorm(const NodeCtx& ctx) {
  const onnx::NodeProto& conv = *ctx.node;
  if (ctx.graph == nullptr || !ctx.lookup || conv.output_size() != 1 || !ctx.input(1).isConst() ||
      (ctx.has(2) && !ctx.input(2).isConst()) || countUses(*ctx.graph, conv.output(0)) != 1) {
    return nullptr;
  }
  for (const onnx::NodeProto& node : ctx.graph->node()) {
    if (node.op_type() != "BatchNormalization" || node.input_size() != 5 || node.input(0) != conv.output(0)) continue;
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.name() == "training_mode" && attr.i() != 0) return nullptr;
    }
    for (int k = 1; k < node.output_size(); ++k) {
      if (!node.output(k).empty()) return nullptr;
    }
    for (int k = 1; k < 5; ++k) {
      const Val* v = ctx.lookup(node.input(k));
      if (v == nullptr || !v->isConst()) return nullptr;
    }
    return &node;
  }
  return nullptr;
}

// W' = W * s and B' = (B - mean) * s + bias per output channel, s = scale / sqrt(var + eps).
Status foldedConvOperands(NodeCtx& ctx, const onnx::NodeProto& bn, Operand& w, Operand& b) {
  const Tensor& weight = ctx.input(1).constant;
  std::vector<double> param[4];
  const std::int64_t channels = weight.rank() > 0 ? weight.dim(0) : 0;
  for (int k = 0; k < 4; ++k) {
    const Val* v = ctx.lookup(bn.input(k + 1));
    if (v == nullptr || !v->isConst() || v->constant.numel() != channels) {
      return ctx.fail(ErrorCode::ShapeMismatch, "BatchNormalization parameter '{}' must have the {} conv channels",
                      bn.input(k + 1), channels);
    }
    for (std::int64_t i = 0; i < channels; ++i) param[k].push_back(v->constant.elementAsDouble(i));
  }
  double eps = 1e-5;
  for (const onnx::AttributeProto& attr : bn.attribute()) {
    if (attr.name() == "epsilon") eps = attr.f();
  }
  SVM_ASSIGN_OR_RETURN(Tensor folded_w, weight.clone());
  SVM_ASSIGN_OR_RETURN(Tensor folded_b, Tensor::empty(weight.dtype(), Shape{channels}));
  const std::int64_t per_channel = channels > 0 ? weight.numel() / channels : 0;
  for (std::int64_t m = 0; m < channels; ++m) {
    const std::size_t c = static_cast<std::size_t>(m);
    const double s = param[0][c] / std::sqrt(param[3][c] + eps);
    for (std::int64_t i = 0; i < per_channel; ++i) {
      const std::int64_t at = m * per_channel + i;
      storeFromDouble(folded_w.rawData(), weight.dtype(), at, folded_w.elementAsDouble(at) * s);
    }
    const double bias = ctx.has(2) ? ctx.input(2).constant.elementAsDouble(m) : 0.0;
    storeFromDouble(folded_b.rawData(), weight.dtype(), m, (bias - param[2][c]) * s + param[1][c]);
  }
  w = Operand::of(Value::fromTensor(folded_w));
  b = Operand::of(Value::fromTensor(folded_b));
  return Status::ok();
}

}  // namespace

Status lowerConv(NodeCtx& ctx) {
  SVM_RETURN_IF_ERROR(checkConvRanks(ctx));
  SVM_ASSIGN_OR_RETURN(NamedAttrs attrs, windowAttrs(ctx, true));
  attrs.emplace_back("groups", AttrValue::ofInt(ctx.attrInt("group", 1)));
  SVM_ASSIGN_OR_RETURN(Operand x, operandOf(ctx, 0));
  SVM_ASSIGN_OR_RETURN(Operand w, operandOf(ctx, 1));
  Operand b = Operand::none();
  if (ctx.has(2)) {
    SVM_ASSIGN_OR_RETURN(b, operandOf(ctx, 2));
  }
  const onnx::NodeProto* bn = foldableBatchNorm(ctx);
  if (bn != nullptr) {
    SVM_RETURN_IF_ERROR(foldedConvOperands(ctx, *bn, w, b));
  }
  SVM_RETURN_IF_ERROR(emitAs(ctx, "conv", {x, w, b}, attrs));
  if (bn != nullptr && !ctx.out.empty()) ctx.out[0].folded_bn = bn->output(0);
  return Status::ok();
}

Status lowerConvTranspose(NodeCtx& ctx) {
  SVM_RETURN_IF_ERROR(checkConvRanks(ctx));
  SVM_ASSIGN_OR_RETURN(NamedAttrs attrs, windowAttrs(ctx, true));
  attrs.emplace_back("groups", AttrValue::ofInt(ctx.attrInt("group", 1)));
  attrs.emplace_back("output_padding",
                     AttrValue::ofInts(ctx.attrInts("output_padding").value_or(std::vector<std::int64_t>{})));
  attrs.emplace_back("output_shape",
                     AttrValue::ofInts(ctx.attrInts("output_shape").value_or(std::vector<std::int64_t>{})));
  // output_shape may list N and C too (older exporters); the op takes the spatial extents.
  const Val& x = ctx.input(0);
  std::vector<std::int64_t>& shape = attrs.back().second.ints;
  if (x.rank >= 0 && static_cast<int>(shape.size()) == x.rank) shape.erase(shape.begin(), shape.begin() + 2);
  SVM_ASSIGN_OR_RETURN(Operand xo, operandOf(ctx, 0));
  SVM_ASSIGN_OR_RETURN(Operand w, operandOf(ctx, 1));
  Operand b = Operand::none();
  if (ctx.has(2)) {
    SVM_ASSIGN_OR_RETURN(b, operandOf(ctx, 2));
  }
  return emitAs(ctx, "conv_transpose", {xo, w, b}, attrs);
}

Status lowerMaxPool(NodeCtx& ctx) {
  if (ctx.node->output_size() > 1 && !ctx.node->output(1).empty()) {
    return ctx.fail(ErrorCode::Unsupported, "MaxPool's Indices output");
  }
  SVM_ASSIGN_OR_RETURN(NamedAttrs attrs, windowAttrs(ctx, true));
  attrs.emplace_back("kernel", AttrValue::ofInts(ctx.attrInts("kernel_shape").value_or(std::vector<std::int64_t>{})));
  attrs.emplace_back("ceil_mode", AttrValue::ofBool(ctx.attrInt("ceil_mode", 0) != 0));
  SVM_ASSIGN_OR_RETURN(Operand x, operandOf(ctx, 0));
  return emitAs(ctx, "max_pool", {x}, attrs);
}

Status lowerAveragePool(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(NamedAttrs attrs, windowAttrs(ctx, false));
  attrs.emplace_back("kernel", AttrValue::ofInts(ctx.attrInts("kernel_shape").value_or(std::vector<std::int64_t>{})));
  attrs.emplace_back("ceil_mode", AttrValue::ofBool(ctx.attrInt("ceil_mode", 0) != 0));
  attrs.emplace_back("count_include_pad", AttrValue::ofBool(ctx.attrInt("count_include_pad", 0) != 0));
  SVM_ASSIGN_OR_RETURN(Operand x, operandOf(ctx, 0));
  return emitAs(ctx, "avg_pool", {x}, attrs);
}

Status lowerGlobalAveragePool(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand x, operandOf(ctx, 0));
  return emitAs(ctx, "global_avg_pool", {x}, {});
}

Status lowerGlobalMaxPool(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand x, operandOf(ctx, 0));
  return emitAs(ctx, "global_max_pool", {x}, {});
}

Status lowerBatchNorm(NodeCtx& ctx) {
  if (ctx.attrInt("training_mode", 0) != 0) {
    return ctx.fail(ErrorCode::Unsupported, "BatchNormalization with training_mode=1 (inference only)");
  }
  if (ctx.has(0) && !ctx.input(0).folded_bn.empty() && ctx.input(0).folded_bn == ctx.node->output(0)) {
    ctx.out = {ctx.input(0)};  // folded into the producing Conv: its output is already normalized
    ctx.out[0].folded_bn.clear();
    return Status::ok();
  }
  std::vector<Operand> inputs;
  for (std::size_t k = 0; k < 5; ++k) {
    SVM_ASSIGN_OR_RETURN(Operand v, operandOf(ctx, k));
    inputs.push_back(v);
  }
  return emitAs(ctx, "batch_norm", std::move(inputs), {{"eps", AttrValue::ofFloat(ctx.attrFloat("epsilon", 1e-5))}});
}

Status lowerInstanceNorm(NodeCtx& ctx) {
  std::vector<Operand> inputs;
  for (std::size_t k = 0; k < 3; ++k) {
    SVM_ASSIGN_OR_RETURN(Operand v, operandOf(ctx, k));
    inputs.push_back(v);
  }
  return emitAs(ctx, "instance_norm", std::move(inputs), {{"eps", AttrValue::ofFloat(ctx.attrFloat("epsilon", 1e-5))}});
}

namespace {

constexpr std::string_view kResizeModes[] = {"nearest", "linear", "cubic"};
constexpr std::string_view kCoordinateModes[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
                                                 "tf_half_pixel_for_nn"};
constexpr std::string_view kNearestModes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

bool isEmptyInput(const NodeCtx& ctx, std::size_t k) {
  return !ctx.has(k) || (ctx.input(k).isConst() && ctx.input(k).constant.numel() == 0);
}

}  // namespace

Status lowerResize(NodeCtx& ctx) {
  if (ctx.attrString("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize") {
    return ctx.fail(ErrorCode::Unsupported, "Resize coordinate_transformation_mode 'tf_crop_and_resize'");
  }
  if (ctx.attrInt("antialias", 0) != 0 || ctx.attr("axes") != nullptr) {
    return ctx.fail(ErrorCode::Unsupported, "Resize with antialias or axes (opset 18)");
  }
  SVM_ASSIGN_OR_RETURN(std::int64_t mode, stringCode(ctx, "mode", "nearest", kResizeModes));
  SVM_ASSIGN_OR_RETURN(std::int64_t coord,
                       stringCode(ctx, "coordinate_transformation_mode", "half_pixel", kCoordinateModes));
  SVM_ASSIGN_OR_RETURN(std::int64_t nearest, stringCode(ctx, "nearest_mode", "round_prefer_floor", kNearestModes));
  const NamedAttrs attrs = {{"mode", AttrValue::ofInt(mode)},
                            {"coordinate_mode", AttrValue::ofInt(coord)},
                            {"nearest_mode", AttrValue::ofInt(nearest)},
                            {"cubic_coeff_a", AttrValue::ofFloat(ctx.attrFloat("cubic_coeff_a", -0.75))},
                            {"exclude_outside", AttrValue::ofBool(ctx.attrInt("exclude_outside", 0) != 0)}};
  SVM_ASSIGN_OR_RETURN(Operand x, operandOf(ctx, 0));
  if (!isEmptyInput(ctx, 3)) {  // sizes
    SVM_ASSIGN_OR_RETURN(Operand sizes, ctx.e->ints(ctx.input(3), ctx.label + " sizes"));
    return emitAs(ctx, "resize", {x, sizes}, attrs);
  }
  if (isEmptyInput(ctx, 2)) return ctx.fail(ErrorCode::InvalidArgument, "Resize needs scales or sizes");
  SVM_ASSIGN_OR_RETURN(Operand scales, operandOf(ctx, 2));
  return emitAs(ctx, "resize", {x, Operand::none(), scales}, attrs);
}

// Upsample (deprecated since opset 10): scales, nearest (floor of the asymmetric coordinate) or linear.
Status lowerUpsample(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(std::int64_t mode, stringCode(ctx, "mode", "nearest", kResizeModes));
  if (mode == 2) return ctx.fail(ErrorCode::InvalidArgument, "unknown Upsample mode 'cubic' (nearest, linear)");
  SVM_ASSIGN_OR_RETURN(Operand x, operandOf(ctx, 0));
  SVM_ASSIGN_OR_RETURN(Operand scales, operandOf(ctx, 1));
  return emitAs(ctx, "resize", {x, Operand::none(), scales},
                {{"mode", AttrValue::ofInt(mode)},
                 {"coordinate_mode", AttrValue::ofInt(1)},
                 {"nearest_mode", AttrValue::ofInt(2)}});
}

Status lowerDepthToSpace(NodeCtx& ctx) {
  constexpr std::string_view kModes[] = {"DCR", "CRD"};
  SVM_ASSIGN_OR_RETURN(std::int64_t mode, stringCode(ctx, "mode", "DCR", kModes));
  SVM_ASSIGN_OR_RETURN(Operand x, operandOf(ctx, 0));
  return emitAs(ctx, "depth_to_space", {x},
                {{"blocksize", AttrValue::ofInt(ctx.attrInt("blocksize", 1))}, {"mode", AttrValue::ofInt(mode)}});
}

Status lowerSpaceToDepth(NodeCtx& ctx) {
  SVM_ASSIGN_OR_RETURN(Operand x, operandOf(ctx, 0));
  return emitAs(ctx, "space_to_depth", {x}, {{"blocksize", AttrValue::ofInt(ctx.attrInt("blocksize", 1))}});
}

Status checkConvRanks(const onnx::GraphProto& graph, std::string_view model) {
  std::map<std::string, int, std::less<>> ranks;  // declared ranks: initializers, inputs, value_info
  for (const onnx::TensorProto& init : graph.initializer()) ranks.emplace(init.name(), init.dims_size());
  auto declare = [&](const onnx::ValueInfoProto& info) {
    if (info.type().has_tensor_type() && info.type().tensor_type().has_shape())
      ranks.emplace(info.name(), info.type().tensor_type().shape().dim_size());
  };
  for (const onnx::ValueInfoProto& info : graph.input()) declare(info);
  for (const onnx::ValueInfoProto& info : graph.value_info()) declare(info);
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& node = graph.node(i);
    if ((node.op_type() != "Conv" && node.op_type() != "ConvTranspose") || node.input_size() < 2) continue;
    auto x = ranks.find(node.input(0)), w = ranks.find(node.input(1));
    const std::string why = convRankMismatch(node.input(0), x == ranks.end() ? -1 : x->second, node.input(1),
                                             w == ranks.end() ? -1 : w->second);
    if (why.empty()) continue;
    return makeError(ErrorCode::ShapeMismatch, "{}: node '{}' ({}): {}", model,
                     node.name().empty() ? fmt::format("#{}", i) : node.name(), node.op_type(), why);
  }
  return Status::ok();
}

Expected<std::int64_t> padModeCode(const NodeCtx& ctx) {
  constexpr std::string_view kModes[] = {"constant", "reflect", "edge"};
  return stringCode(ctx, "mode", "constant", kModes);
}

}  // namespace shapevm::onnx_import
