// SPDX-License-Identifier: Apache-2.0
// `shapevm import` (see import_command.h).
#include "tools/import_command.h"

#include <fmt/format.h>

#include "bytecode/module_io.h"
#if SHAPEVM_HAVE_ONNX
#include "onnx/onnx_import.h"
#endif

namespace shapevm {

bool isOnnxModel(const std::string& path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
}

Expected<Module> importModel(const std::string& path) {
#if SHAPEVM_HAVE_ONNX
  return importOnnxFile(path);
#else
  return makeError(ErrorCode::Unsupported, "{}: this ShapeVM was built without the ONNX importer (libonnx-dev)", path);
#endif
}

int importCommand(const std::string& model, const std::string& out) {
  Expected<Module> module = importModel(model);
  Status status = module ? saveModuleFile(*module, out) : module.status();
  if (!status.isOk()) {
    fmt::print(stderr, "shapevm: error: {}\n", status.toString());
    return 1;
  }
  return 0;
}

}  // namespace shapevm
