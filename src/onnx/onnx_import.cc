// SPDX-License-Identifier: Apache-2.0
// The import driver: parse the ModelProto, check opsets (11-17 for the default domain), infer
// ranks and dtypes (ONNX shape inference), list every unsupported node at once, sort the nodes
// topologically (a cycle is an error), declare the graph inputs as parameters with shape tokens
// (dim_param -> a named dynamic dim, unknown -> a fresh one, dim_value -> static), then emit each
// node through its handler and store the graph outputs. The result is verified.
#include "onnx/onnx_import.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>

#include "bytecode/verifier.h"
#include "onnx/onnx_fuse.h"
#include "onnx/onnx_graph.h"
#include "onnx/onnx_tensor.h"

namespace shapevm {
namespace {

using onnx_import::GraphEmitter;
using onnx_import::NodeCtx;
using onnx_import::Val;

constexpr std::int64_t kMinOpset = 11;
constexpr std::int64_t kMaxOpset = 17;

bool isDefaultDomain(const std::string& domain) {
  return domain.empty() || domain == "ai.onnx";
}

std::string nodeLabel(const onnx::NodeProto& node, int index) {
  const std::string name = node.name().empty() ? fmt::format("#{}", index) : node.name();
  return fmt::format("node '{}' ({})", name, node.op_type());
}

// Declared type of each value name: graph inputs, outputs and (inferred) value_info.
struct TypeInfo {
  std::optional<DType> dtype;
  int rank = -1;
  std::vector<std::int64_t> dims;  // -1 = dynamic
};

void recordTypes(const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& infos,
                 std::unordered_map<std::string, TypeInfo>& types) {
  for (const auto& info : infos) {
    if (!info.type().has_tensor_type()) continue;
    const auto& tt = info.type().tensor_type();
    TypeInfo t;
    t.dtype = dtypeFromOnnx(tt.elem_type());
    if (tt.has_shape()) {
      t.rank = tt.shape().dim_size();
      for (const auto& d : tt.shape().dim()) t.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
    types[info.name()] = t;
  }
}

// The inferred types inside If branches (their names are unique across the model).
void recordSubgraphTypes(const onnx::GraphProto& graph, std::unordered_map<std::string, TypeInfo>& types,
                         int depth = 0) {
  if (depth > 16) return;
  for (const auto& node : graph.node()) {
    for (const auto& a : node.attribute()) {
      if (!a.has_g()) continue;
      recordTypes(a.g().value_info(), types);
      recordTypes(a.g().input(), types);
      recordTypes(a.g().output(), types);
      recordSubgraphTypes(a.g(), types, depth + 1);
    }
  }
}

// Nodes in an order where each runs after the producers of its inputs (Kahn; stable).
Expected<std::vector<int>> topologicalOrder(const onnx::GraphProto& graph, const std::set<std::string>& available) {
  const int n = graph.node_size();
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < n; ++i) {
    for (const std::string& out : graph.node(i).output()) {
      if (!out.empty()) producer[out] = i;
    }
  }
  std::vector<std::vector<int>> users(static_cast<std::size_t>(n));
  std::vector<int> pending(static_cast<std::size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    for (const std::string& in : graph.node(i).input()) {
      if (in.empty()) continue;
      auto it = producer.find(in);
      if (it == producer.end()) {
        if (available.count(in) == 0) {
          return makeError(ErrorCode::UnknownName,
                           "{}: input '{}' is neither a graph input, an initializer nor a node output",
                           nodeLabel(graph.node(i), i), in);
        }
        continue;
      }
      users[static_cast<std::size_t>(it->second)].push_back(i);
      ++pending[static_cast<std::size_t>(i)];
    }
  }
  std::vector<int> order, ready;
  for (int i = n - 1; i >= 0; --i) {
    if (pending[static_cast<std::size_t>(i)] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    std::vector<int> next;
    for (int u : users[static_cast<std::size_t>(i)]) {
      if (--pending[static_cast<std::size_t>(u)] == 0) next.push_back(u);
    }
    for (auto it = next.rbegin(); it != next.rend(); ++it) ready.push_back(*it);
  }
  if (static_cast<int>(order.size()) != n) {
    std::string cycle;
    for (int i = 0; i < n && cycle.size() < 400; ++i) {
      if (pending[static_cast<std::size_t>(i)] > 0) cycle += (cycle.empty() ? "" : ", ") + nodeLabel(graph.node(i), i);
    }
    return makeError(ErrorCode::InvalidArgument, "the graph has a cycle: these nodes wait on each other: {}", cycle);
  }
  return order;
}

class Importer {
 public:
  Importer(const onnx::ModelProto& model, std::string base_dir, std::string name)
      : model_(model), base_dir_(std::move(base_dir)), name_(std::move(name)) {}

  Expected<Module> run(const OnnxImportOptions& options);

 private:
  Status checkOpsets();
  Status checkSupported(const onnx::GraphProto& graph);
  Status declareInputs(const onnx::GraphProto& graph, FunctionBuilder& fn, GraphEmitter& emitter);
  Status emitNode(const onnx::NodeProto& node, int index, GraphEmitter& emitter);
  Expected<std::vector<Val>> emitSubgraph(const onnx::GraphProto& graph, std::vector<Val> inputs,
                                          GraphEmitter& emitter);
  void applyType(const std::string& name, Val& v) const;

  const onnx::ModelProto& model_;
  std::string base_dir_;
  std::string name_;
  std::int64_t opset_ = 0;
  std::unordered_map<std::string, TypeInfo> types_;
  std::unordered_map<std::string, Val> values_;
  int subgraph_depth_ = 0;
};

Status Importer::checkOpsets() {
  bool found = false;
  for (const auto& entry : model_.opset_import()) {
    if (!isDefaultDomain(entry.domain())) continue;
    found = true;
    opset_ = entry.version();
  }
  if (!found)
    return makeError(ErrorCode::Unsupported, "{}: the model imports no opset of the default ONNX domain", name_);
  if (opset_ < kMinOpset || opset_ > kMaxOpset) {
    return makeError(ErrorCode::Unsupported, "{}: opset {} of the default ONNX domain is outside the supported {}..{}",
                     name_, opset_, kMinOpset, kMaxOpset);
  }
  return Status::ok();
}

Status Importer::checkSupported(const onnx::GraphProto& graph) {
  std::string unsupported;
  int count = 0;
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& node = graph.node(i);
    for (const auto& a : node.attribute()) {  // If branches: their nodes are checked too
      if (a.has_g()) {
        Status inner = checkSupported(a.g());
        if (!inner.isOk()) return inner;
      }
    }
    const bool known = isDefaultDomain(node.domain()) && onnx_import::findHandler(node.op_type()) != nullptr;
    if (known) continue;
    ++count;
    unsupported += fmt::format("\n  {}{}", nodeLabel(node, i),
                               isDefaultDomain(node.domain()) ? "" : fmt::format(" in domain '{}'", node.domain()));
  }
  if (count == 0) return Status::ok();
  return makeError(ErrorCode::Unsupported, "{}: {} node(s) use ops the importer does not support:{}", name_, count,
                   unsupported);
}

void Importer::applyType(const std::string& name, Val& v) const {
  if (v.kind != Val::Kind::Tensor) return;
  auto it = types_.find(name);
  if (it == types_.end()) return;
  if (!v.dtype) v.dtype = it->second.dtype;
  if (v.rank < 0 && it->second.rank >= 0) {
    v.rank = it->second.rank;
    v.dims = it->second.dims;
  }
}

Status Importer::declareInputs(const onnx::GraphProto& graph, FunctionBuilder& fn, GraphEmitter& emitter) {
  std::map<std::string, int> dim_ids;
  int next_dim = 0;
  std::set<std::string> initializer_names;
  for (const auto& init : graph.initializer()) initializer_names.insert(init.name());
  for (const auto& input : graph.input()) {
    if (initializer_names.count(input.name())) continue;  // a default value: the initializer wins
    if (!input.type().has_tensor_type()) {
      return makeError(ErrorCode::Unsupported,
                       "{}: graph input '{}' is not a tensor (sequences and maps are not supported)", name_,
                       input.name());
    }
    const auto& tt = input.type().tensor_type();
    std::optional<DType> dtype = dtypeFromOnnx(tt.elem_type());
    if (!dtype) {
      return makeError(ErrorCode::Unsupported, "{}: graph input '{}' has dtype {}, which ShapeVM lacks", name_,
                       input.name(), onnxTypeName(tt.elem_type()));
    }
    TensorDescriptor token;
    token.dtype = dtype;
    std::vector<std::int64_t> dims;
    if (!tt.has_shape()) {
      token.any_rank = true;
    } else {
      for (const auto& d : tt.shape().dim()) {
        if (d.has_dim_value() && d.dim_value() >= 0) {
          token.dims.push_back(DimToken::fixed(d.dim_value()));
          dims.push_back(d.dim_value());
          continue;
        }
        int id;
        if (d.has_dim_param() && !d.dim_param().empty()) {
          auto [it, inserted] = dim_ids.emplace(d.dim_param(), next_dim);
          if (inserted) fn.declareDim(next_dim++, d.dim_param());
          id = it->second;
        } else {
          id = next_dim;
          fn.declareDim(next_dim++, "");
        }
        token.dims.push_back(DimToken::dynamic(id));
        dims.push_back(-1);
      }
    }
    const int param = fn.addParam(input.name(), ValueKind::Tensor, token);
    const int reg = emitter.newReg();
    fn.emit(Opcode::LoadTensor, reg, param);
    emitter.markTensor(reg);
    Val v = Val::ofTensor(reg, dtype, token.any_rank ? -1 : token.rank());
    if (!token.any_rank) v.dims = dims;
    values_[input.name()] = v;
  }
  for (const auto& init : graph.initializer()) {
    SVM_ASSIGN_OR_RETURN(Tensor t, tensorFromProto(init, fmt::format("initializer '{}'", init.name()), base_dir_));
    values_[init.name()] = Val::ofConst(std::move(t));
  }
  return Status::ok();
}

// The node's input and output counts against ONNX's schema of its op at the model's opset (a
// malformed model otherwise reaches a handler without an input it relies on). Nodes without a
// schema at this opset (the Gelu / LayerNormalization nodes onnx_fuse.cc writes) are ours.
Status checkArity(const onnx::NodeProto& node, std::int64_t opset, const std::string& label) {
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(opset), "");
  if (schema == nullptr) return Status::ok();
  const int inputs = node.input_size(), outputs = node.output_size();
  if (inputs < schema->min_input() || inputs > schema->max_input()) {
    return makeError(ErrorCode::InvalidArgument, "{}: {} inputs given, but {} takes {} to {}", label, inputs,
                     node.op_type(), schema->min_input(), schema->max_input());
  }
  if (outputs < schema->min_output() || outputs > schema->max_output()) {
    return makeError(ErrorCode::InvalidArgument, "{}: {} outputs given, but {} has {} to {}", label, outputs,
                     node.op_type(), schema->min_output(), schema->max_output());
  }
  const auto& formal = schema->inputs();
  for (int k = 0; k < inputs && k < static_cast<int>(formal.size()); ++k) {
    if (node.input(k).empty() && formal[static_cast<std::size_t>(k)].GetOption() == onnx::OpSchema::Single)
      return makeError(ErrorCode::InvalidArgument, "{}: input {} ('{}') is required", label, k,
                       formal[static_cast<std::size_t>(k)].GetName());
  }
  return Status::ok();
}

Status Importer::emitNode(const onnx::NodeProto& node, int index, GraphEmitter& emitter) {
  SVM_RETURN_IF_ERROR(checkArity(node, opset_, nodeLabel(node, index)));
  NodeCtx ctx;
  ctx.node = &node;
  ctx.opset = opset_;
  ctx.e = &emitter;
  ctx.label = nodeLabel(node, index);
  ctx.graph = &model_.graph();
  ctx.lookup = [this](const std::string& name) -> const Val* {
    auto it = values_.find(name);
    return it == values_.end() ? nullptr : &it->second;
  };
  for (const std::string& name : node.input()) {
    if (name.empty()) {
      ctx.in.push_back(nullptr);
      continue;
    }
    auto it = values_.find(name);
    if (it == values_.end()) return ctx.fail(ErrorCode::UnknownName, "input '{}' has no value", name);
    ctx.in.push_back(&it->second);
  }
  while (!ctx.in.empty() && ctx.in.back() == nullptr) ctx.in.pop_back();
  ctx.subgraph = [this, &emitter](const onnx::GraphProto& g, std::vector<Val> inputs) {
    return emitSubgraph(g, std::move(inputs), emitter);
  };
  Status status = (*onnx_import::findHandler(node.op_type()))(ctx);
  if (!status.isOk()) {
    // Errors from the op library (folding) or the builder get the node's name in front.
    if (status.message().find(ctx.label) == std::string::npos)
      return Status(status.code(), ctx.label + ": " + status.message());
    return status;
  }
  for (int k = 0; k < node.output_size(); ++k) {
    const std::string& name = node.output(k);
    if (name.empty()) continue;
    Val v;
    if (static_cast<std::size_t>(k) < ctx.out.size()) {
      v = std::move(ctx.out[static_cast<std::size_t>(k)]);
    } else {
      v.missing_reason = fmt::format("{} does not produce output {} ('{}')", ctx.label, k, name);
    }
    applyType(name, v);
    values_[name] = std::move(v);
  }
  return Status::ok();
}

Expected<std::vector<Val>> Importer::emitSubgraph(const onnx::GraphProto& graph, std::vector<Val> inputs,
                                                  GraphEmitter& emitter) {
  if (++subgraph_depth_ > 16) {
    --subgraph_depth_;
    return makeError(ErrorCode::LimitExceeded, "{}: subgraphs nested more than 16 deep", name_);
  }
  const auto saved = values_;  // the branch's values and its cached registers end with it
  Expected<std::vector<Val>> result = [&]() -> Expected<std::vector<Val>> {
    if (graph.initializer_size() > 0)
      return makeError(ErrorCode::Unsupported, "{}: a subgraph with its own initializers", name_);
    if (static_cast<std::size_t>(graph.input_size()) != inputs.size()) {
      return makeError(ErrorCode::InvalidArgument, "{}: subgraph '{}' has {} inputs, {} given", name_, graph.name(),
                       graph.input_size(), inputs.size());
    }
    for (int k = 0; k < graph.input_size(); ++k) {
      Val v = std::move(inputs[static_cast<std::size_t>(k)]);
      applyType(graph.input(k).name(), v);
      values_[graph.input(k).name()] = std::move(v);
    }
    std::set<std::string> available;
    for (const auto& [name, v] : values_) available.insert(name);
    SVM_ASSIGN_OR_RETURN(std::vector<int> order, topologicalOrder(graph, available));
    for (int index : order) SVM_RETURN_IF_ERROR(emitNode(graph.node(index), index, emitter));
    std::vector<Val> outs;
    for (const auto& out : graph.output()) {
      auto it = values_.find(out.name());
      if (it == values_.end())
        return makeError(ErrorCode::UnknownName, "{}: subgraph output '{}' is never produced", name_, out.name());
      outs.push_back(it->second);
    }
    return outs;
  }();
  values_ = saved;
  --subgraph_depth_;
  return result;
}

Expected<Module> Importer::run(const OnnxImportOptions& options) {
  SVM_RETURN_IF_ERROR(checkOpsets());
  const onnx::GraphProto& graph = model_.graph();
  SVM_RETURN_IF_ERROR(checkSupported(graph));

  SVM_RETURN_IF_ERROR(onnx_import::checkConvRanks(graph, name_));
  // Ranks and dtypes of intermediate values, from ONNX's own shape inference (best effort).
  onnx::ModelProto inferred = model_;
  try {
    onnx::shape_inference::InferShapes(inferred);
  } catch (const std::exception&) {
    inferred = model_;  // inference is an aid: without it, ranks come from the handlers
  }
  recordTypes(inferred.graph().value_info(), types_);
  recordSubgraphTypes(inferred.graph(), types_);
  recordTypes(inferred.graph().output(), types_);
  recordTypes(inferred.graph().input(), types_);

  ModuleBuilder builder(name_);
  builder.setSourceFile(name_);
  FunctionBuilder& fn = builder.addFunction(options.function_name);
  GraphEmitter emitter(builder, fn);
  SVM_RETURN_IF_ERROR(declareInputs(graph, fn, emitter));

  std::set<std::string> available;
  for (const auto& [name, v] : values_) available.insert(name);
  // The nodes to emit: the graph's, with recognized LayerNorm / GELU chains replaced.
  onnx::GraphProto nodes;
  if (options.fuse_patterns) {
    for (onnx::NodeProto& node : onnx_import::fusePatterns(graph, base_dir_).nodes) *nodes.add_node() = std::move(node);
  } else {
    *nodes.mutable_node() = graph.node();
  }
  SVM_ASSIGN_OR_RETURN(std::vector<int> order, topologicalOrder(nodes, available));
  for (int index : order) SVM_RETURN_IF_ERROR(emitNode(nodes.node(index), index, emitter));

  fn.setOutputs(graph.output_size());
  for (int k = 0; k < graph.output_size(); ++k) {
    const std::string& name = graph.output(k).name();
    auto it = values_.find(name);
    if (it == values_.end())
      return makeError(ErrorCode::UnknownName, "{}: graph output '{}' is never produced", name_, name);
    SVM_ASSIGN_OR_RETURN(onnx_import::Operand out, emitter.tensor(it->second, fmt::format("graph output '{}'", name)));
    fn.emit(Opcode::StoreTensor, emitter.regOf(out), k);
  }
  fn.emit(Opcode::Return);
  SVM_ASSIGN_OR_RETURN(Module module, builder.finish());
  if (Status s = verifyModule(module); !s.isOk()) {
    return Status(s.code(), fmt::format("{}: internal importer error (the imported bytecode does not verify): {}",
                                        name_, s.message()));
  }
  return module;
}

}  // namespace

bool onnxOpSupported(std::string_view op_type) {
  return onnx_import::findHandler(op_type) != nullptr;
}

Expected<Module> importOnnxBytes(std::string_view bytes, const std::string& base_dir, const std::string& name,
                                 const OnnxImportOptions& options) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return makeError(ErrorCode::BadFormat, "{}: not a valid ONNX model (the protobuf is malformed or truncated)", name);
  }
  if (!model.has_graph()) return makeError(ErrorCode::BadFormat, "{}: the ONNX model has no graph", name);
  Importer importer(model, base_dir, name);
  return importer.run(options);
}

Expected<Module> importOnnxFile(const std::string& path, const OnnxImportOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError(ErrorCode::IoError, "cannot open '{}'", path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string base_dir = std::filesystem::path(path).parent_path().string();
  if (base_dir.empty()) base_dir = ".";
  return importOnnxBytes(bytes, base_dir, path, options);
}

}  // namespace shapevm
