// SPDX-License-Identifier: Apache-2.0
// The ONNX importer's entry points: a model file (or its bytes) to a verified bytecode Module with
// one function whose parameters are the graph's inputs (in graph order, named as in the graph) and
// whose outputs are the graph's outputs. Invariant: every failure is a Status naming the node, the
// op type or the tensor involved; nothing here throws or aborts (see docs/onnx.md).
#pragma once

#include <string>
#include <string_view>

#include "bytecode/module.h"
#include "shapevm/status.h"

namespace shapevm {

struct OnnxImportOptions {
  std::string function_name = "main";  // the imported function's name
  // Recognize exported LayerNorm and exact-GELU chains and import them as layer_norm / gelu
  // (onnx_fuse.h); off imports every node as written.
  bool fuse_patterns = true;
};

// Whether the importer maps ONNX op `op_type` of the default domain (some attribute values or
// dtypes of a mapped op may still be refused, with an Unsupported error naming the node).
bool onnxOpSupported(std::string_view op_type);

// Reads `path` (external-data files resolve relative to its folder) and imports it.
Expected<Module> importOnnxFile(const std::string& path, const OnnxImportOptions& options = {});
// Imports serialized ModelProto bytes; `base_dir` resolves external data ("" = none allowed) and
// `name` names the model in errors.
Expected<Module> importOnnxBytes(std::string_view bytes, const std::string& base_dir, const std::string& name,
                                 const OnnxImportOptions& options = {});

}  // namespace shapevm
