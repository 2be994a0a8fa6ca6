// SPDX-License-Identifier: Apache-2.0
// LayerNorm and exact-GELU recognition at import (onnx_fuse.h). The matcher walks from an anchor
// node (the first ReduceMean of a LayerNorm, the Erf of a GELU) through single-consumer values,
// checks every constant, and replaces the chain by one node placed where its last node was.
#include "onnx/onnx_fuse.h"

#include <cmath>
#include <optional>
#include <unordered_map>

#include "onnx/onnx_tensor.h"

namespace shapevm::onnx_import {
namespace {

bool isDefaultDomain(const std::string& domain) {
  return domain.empty() || domain == "ai.onnx";
}

bool near(double value, double want) {
  return std::fabs(value - want) <= 1e-6 * std::max(1.0, std::fabs(want));
}

class Matcher {
 public:
  Matcher(const onnx::GraphProto& graph, const std::string& base_dir) : graph_(graph), base_dir_(base_dir) {
    for (int i = 0; i < graph.node_size(); ++i) {
      const onnx::NodeProto& node = graph.node(i);
      for (const std::string& out : node.output()) {
        if (!out.empty()) producer_[out] = i;
      }
      for (const std::string& in : node.input()) {
        if (!in.empty()) consumers_[in].push_back(i);
      }
      if (node.op_type() == "Constant" && isDefaultDomain(node.domain()) && node.output_size() == 1)
        constant_nodes_[node.output(0)] = &node;
    }
    for (const auto& out : graph.output()) consumers_[out.name()].push_back(-1);  // never fusable away
    for (const auto& init : graph.initializer()) initializers_[init.name()] = &init;
    removed_.assign(static_cast<std::size_t>(graph.node_size()), false);
    replacement_.assign(static_cast<std::size_t>(graph.node_size()), std::nullopt);
  }

  FusedGraph run() {
    FusedGraph result;
    for (int i = 0; i < graph_.node_size(); ++i) {
      if (removed_[static_cast<std::size_t>(i)]) continue;
      const onnx::NodeProto& node = graph_.node(i);
      if (!isDefaultDomain(node.domain()) || !wellFormed(node)) continue;
      if (node.op_type() == "ReduceMean" && matchLayerNorm(i)) ++result.layer_norms;
      else if (node.op_type() == "Erf" && matchGelu(i)) ++result.gelus;
    }
    for (int i = 0; i < graph_.node_size(); ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (replacement_[k]) result.nodes.push_back(*replacement_[k]);
      else if (!removed_[k]) result.nodes.push_back(graph_.node(i));
    }
    return result;
  }

 private:
  const onnx::NodeProto& node(int i) const { return graph_.node(i); }

  // Every op of the patterns has one output and one (ReduceMean, Sqrt, Erf, Identity) or two
  // inputs; a node of another shape (a malformed model) never matches.
  static bool wellFormed(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    const int arity = op == "ReduceMean" || op == "Sqrt" || op == "Erf" || op == "Identity" ? 1 : 2;
    return n.output_size() == 1 && n.input_size() == arity;
  }

  // The one node consuming `value` when it has exactly one consumer (not a graph output) of
  // type `op_type`; -1 otherwise.
  int soleConsumer(const std::string& value, std::string_view op_type) const {
    auto it = consumers_.find(value);
    if (it == consumers_.end() || it->second.size() != 1 || it->second[0] < 0) return -1;
    const int c = it->second[0];
    if (removed_[static_cast<std::size_t>(c)] || node(c).op_type() != op_type || !isDefaultDomain(node(c).domain()) ||
        !wellFormed(node(c)))
      return -1;
    return c;
  }

  int producerOf(const std::string& value, std::string_view op_type) const {
    auto it = producer_.find(value);
    if (it == producer_.end()) return -1;
    const int p = it->second;
    if (removed_[static_cast<std::size_t>(p)] || node(p).op_type() != op_type || !isDefaultDomain(node(p).domain()) ||
        !wellFormed(node(p)))
      return -1;
    return p;
  }

  std::size_t uses(const std::string& value) const {
    auto it = consumers_.find(value);
    return it == consumers_.end() ? 0 : it->second.size();
  }

  // A constant's dims (initializer or Constant node with a tensor value), without reading data.
  std::optional<std::vector<std::int64_t>> constDims(const std::string& name) const {
    const onnx::TensorProto* t = constProto(name);
    if (t == nullptr) return std::nullopt;
    return std::vector<std::int64_t>(t->dims().begin(), t->dims().end());
  }

  // The TensorProto behind `name`: an initializer or a Constant's value, through Identity nodes
  // (torch writes a deduplicated parameter as Identity of the one it kept).
  const onnx::TensorProto* constProto(const std::string& name, int depth = 0) const {
    if (auto it = initializers_.find(name); it != initializers_.end()) return it->second;
    if (const int p = producerOf(name, "Identity"); p >= 0 && node(p).input_size() == 1 && depth < 8)
      return constProto(node(p).input(0), depth + 1);
    if (auto it = constant_nodes_.find(name); it != constant_nodes_.end()) {
      for (const auto& a : it->second->attribute()) {
        if (a.name() == "value" && a.has_t()) return &a.t();
      }
    }
    return nullptr;
  }

  // The value of a one-element floating constant (a Constant's value_float too).
  std::optional<double> scalarConst(const std::string& name) const {
    if (auto it = constant_nodes_.find(name); it != constant_nodes_.end()) {
      for (const auto& a : it->second->attribute()) {
        if (a.name() == "value_float") return a.f();
      }
    }
    const onnx::TensorProto* t = constProto(name);
    if (t == nullptr) return std::nullopt;
    std::int64_t n = 1;
    for (std::int64_t d : t->dims()) n *= d;
    if (n != 1) return std::nullopt;
    Expected<Tensor> tensor = tensorFromProto(*t, name, base_dir_);
    if (!tensor || !isFloating(tensor->dtype())) return std::nullopt;
    return tensor->elementAsDouble(0);
  }

  // The operand of binary node `b` other than `value` (or "" when `value` is not an operand).
  std::string otherOperand(int b, const std::string& value) const {
    const onnx::NodeProto& n = node(b);
    if (n.input_size() != 2) return "";
    if (n.input(0) == value) return n.input(1);
    if (n.input(1) == value) return n.input(0);
    return "";
  }

  // A ReduceMean over the last axis only, keeping it (axes as an attribute: opsets < 18).
  bool lastAxisMean(int i) const {
    const onnx::NodeProto& n = node(i);
    if (n.input_size() != 1) return false;
    bool axes_ok = false;
    for (const auto& a : n.attribute()) {
      if (a.name() == "keepdims" && a.i() == 0) return false;
      if (a.name() == "axes") axes_ok = a.ints_size() == 1 && a.ints(0) == -1;
    }
    return axes_ok;
  }

  // A scale or shift the layer_norm op takes as is: a constant over the last axis.
  bool affineConst(const std::string& name) const {
    std::optional<std::vector<std::int64_t>> dims = constDims(name);
    return dims && dims->size() <= 1;
  }

  void replace(const std::vector<int>& chain, int last, onnx::NodeProto fused) {
    for (int i : chain) removed_[static_cast<std::size_t>(i)] = true;
    replacement_[static_cast<std::size_t>(last)] = std::move(fused);
  }

  // mean = ReduceMean(x); d = x - mean; var = ReduceMean(d ^ 2); y = d / sqrt(var + eps)
  // [* w [+ b]].
  bool matchLayerNorm(int rm1) {
    if (!lastAxisMean(rm1)) return false;
    const std::string& x = node(rm1).input(0);
    const int sub = soleConsumer(node(rm1).output(0), "Sub");
    if (sub < 0 || node(sub).input(0) != x || node(sub).input(1) != node(rm1).output(0)) return false;
    const std::string& d = node(sub).output(0);
    if (uses(d) != 2) return false;
    int pow = -1, div = -1;
    for (int c : consumers_.at(d)) {
      if (c < 0 || removed_[static_cast<std::size_t>(c)]) return false;
      if (!wellFormed(node(c))) return false;
      if (node(c).op_type() == "Pow" && node(c).input(0) == d) pow = c;
      else if (node(c).op_type() == "Div" && node(c).input(0) == d) div = c;
    }
    if (pow < 0 || div < 0) return false;
    std::optional<double> exponent = scalarConst(node(pow).input(1));
    if (!exponent || *exponent != 2.0) return false;
    const int rm2 = soleConsumer(node(pow).output(0), "ReduceMean");
    if (rm2 < 0 || !lastAxisMean(rm2)) return false;
    const int add = soleConsumer(node(rm2).output(0), "Add");
    if (add < 0) return false;
    std::optional<double> eps = scalarConst(otherOperand(add, node(rm2).output(0)));
    if (!eps || !(*eps >= 0.0)) return false;
    const int sqrt = soleConsumer(node(add).output(0), "Sqrt");
    if (sqrt < 0 || soleConsumer(node(sqrt).output(0), "Div") != div || node(div).input(1) != node(sqrt).output(0))
      return false;
    std::vector<int> chain = {rm1, sub, pow, rm2, add, sqrt, div};
    std::vector<std::string> inputs = {x};
    int last = div;
    if (const int mul = soleConsumer(node(div).output(0), "Mul"); mul >= 0) {
      const std::string w = otherOperand(mul, node(div).output(0));
      if (affineConst(w)) {
        chain.push_back(mul);
        inputs.push_back(w);
        last = mul;
        if (const int shift = soleConsumer(node(mul).output(0), "Add"); shift >= 0) {
          const std::string b = otherOperand(shift, node(mul).output(0));
          if (affineConst(b)) {
            chain.push_back(shift);
            inputs.push_back(b);
            last = shift;
          }
        }
      }
    }
    onnx::NodeProto fused;
    fused.set_op_type("LayerNormalization");
    fused.set_name(fmt::format("{} (LayerNorm recognized at import)", node(rm1).name()));
    for (const std::string& in : inputs) fused.add_input(in);
    fused.add_output(node(last).output(0));
    auto* axis = fused.add_attribute();
    axis->set_name("axis");
    axis->set_type(onnx::AttributeProto::INT);
    axis->set_i(-1);
    auto* epsilon = fused.add_attribute();
    epsilon->set_name("epsilon");
    epsilon->set_type(onnx::AttributeProto::FLOAT);
    epsilon->set_f(static_cast<float>(*eps));
    replace(chain, last, std::move(fused));
    return true;
  }

  // y = x * 0.5 * (1 + erf(x / sqrt2)) in any association of the two products; x / sqrt2 may be
  // x * (1 / sqrt2).
  bool matchGelu(int erf) {
    if (node(erf).input_size() != 1) return false;
    const std::string& scaled = node(erf).input(0);
    if (uses(scaled) != 1) return false;
    std::string x;
    int pre = producerOf(scaled, "Div");
    if (pre >= 0) {
      std::optional<double> c = scalarConst(node(pre).input(1));
      if (!c || !near(*c, std::sqrt(2.0))) return false;
      x = node(pre).input(0);
    } else if ((pre = producerOf(scaled, "Mul")) >= 0) {
      for (int k = 0; k < 2 && x.empty(); ++k) {
        std::optional<double> c = scalarConst(node(pre).input(k));
        if (c && near(*c, 1.0 / std::sqrt(2.0))) x = node(pre).input(1 - k);
      }
      if (x.empty()) return false;
    } else {
      return false;
    }
    const int add = soleConsumer(node(erf).output(0), "Add");
    if (add < 0) return false;
    std::optional<double> one = scalarConst(otherOperand(add, node(erf).output(0)));
    if (!one || *one != 1.0) return false;
    const std::string& phi = node(add).output(0);
    const int m1 = soleConsumer(phi, "Mul");
    if (m1 < 0) return false;
    const std::string o1 = otherOperand(m1, phi);
    auto isHalf = [&](const std::string& name) {
      std::optional<double> c = scalarConst(name);
      return c && *c == 0.5;
    };
    std::vector<int> chain = {pre, erf, add, m1};
    int last = m1;
    if (o1 == x || isHalf(o1)) {  // (x * phi) * 0.5 or (phi * 0.5) * x
      const int m2 = soleConsumer(node(m1).output(0), "Mul");
      if (m2 < 0) return false;
      const std::string o2 = otherOperand(m2, node(m1).output(0));
      if (!(o1 == x ? isHalf(o2) : o2 == x)) return false;
      chain.push_back(m2);
      last = m2;
    } else {  // (x * 0.5) * phi
      const int half = producerOf(o1, "Mul");
      if (half < 0 || uses(o1) != 1) return false;
      const std::string& h = node(half).input(0) == x ? node(half).input(1) : node(half).input(0);
      if (!(node(half).input(0) == x || node(half).input(1) == x) || !isHalf(h)) return false;
      chain.push_back(half);
    }
    onnx::NodeProto fused;
    fused.set_op_type("Gelu");
    fused.set_name(fmt::format("{} (GELU recognized at import)", node(erf).name()));
    fused.add_input(x);
    fused.add_output(node(last).output(0));
    replace(chain, last, std::move(fused));
    return true;
  }

  const onnx::GraphProto& graph_;
  const std::string& base_dir_;
  std::unordered_map<std::string, int> producer_;
  std::unordered_map<std::string, std::vector<int>> consumers_;  // -1: a graph output
  std::unordered_map<std::string, const onnx::NodeProto*> constant_nodes_;
  std::unordered_map<std::string, const onnx::TensorProto*> initializers_;
  std::vector<bool> removed_;
  std::vector<std::optional<onnx::NodeProto>> replacement_;
};

}  // namespace

FusedGraph fusePatterns(const onnx::GraphProto& graph, const std::string& base_dir) {
  return Matcher(graph, base_dir).run();
}

}  // namespace shapevm::onnx_import
