// SPDX-License-Identifier: Apache-2.0
// `shapevm import MODEL.onnx -o OUT.svm|.svasm`: converts an ONNX model to a verified bytecode
// module (docs/onnx.md), and the loader `dis` uses for a model path. Invariant: a failure prints
// one error line naming the model and returns a non-zero exit code; nothing is written then.
#pragma once

#include <string>

#include "bytecode/module.h"
#include "shapevm/status.h"

namespace shapevm {

bool isOnnxModel(const std::string& path);
// The imported module of an .onnx file (an error when this build has no importer).
Expected<Module> importModel(const std::string& path);
// Imports `model` and writes it to `out` (.svm binary or .svasm text); returns the exit code.
int importCommand(const std::string& model, const std::string& out);

}  // namespace shapevm
