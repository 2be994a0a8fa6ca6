// SPDX-License-Identifier: Apache-2.0
// Import-time pattern recognition: exporters write LayerNorm (opset < 17) and exact GELU as chains
// of elementwise ops; these become one LayerNormalization / Gelu node each, which the importer
// maps to ShapeVM's layer_norm / gelu ops. Invariant: a chain is replaced only when it matches
// exactly (op types, operand positions, constants: Pow exponent 2, GELU's 0.5, 1 and sqrt(2)) and
// none of its intermediate values has a consumer outside the chain or is a graph output.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

namespace shapevm::onnx_import {

struct FusedGraph {
  std::vector<onnx::NodeProto> nodes;  // the graph's nodes with each matched chain replaced
  int layer_norms = 0;
  int gelus = 0;
};

// The nodes of `graph` with the patterns above replaced. `base_dir` resolves external data of the
// scalar constants the matcher reads (weights are never read).
FusedGraph fusePatterns(const onnx::GraphProto& graph, const std::string& base_dir);

}  // namespace shapevm::onnx_import
