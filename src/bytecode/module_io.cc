// SPDX-License-Identifier: Apache-2.0
// File I/O for modules: extension dispatch, whole-file reads, verification on load.
#include "bytecode/module_io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "bytecode/binary_format.h"
#include "bytecode/text_format.h"
#include "bytecode/verifier.h"

namespace shapevm {
namespace {

bool endsWith(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Expected<std::vector<std::uint8_t>> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError(ErrorCode::IoError, "cannot open '{}': {}", path, std::strerror(errno));
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return makeError(ErrorCode::IoError, "cannot read '{}'", path);
  return bytes;
}

}  // namespace

Expected<Module> loadModuleFile(const std::string& path) {
  const bool binary = endsWith(path, ".svm");
  if (!binary && !endsWith(path, ".svasm")) {
    return makeError(ErrorCode::InvalidArgument, "'{}': unknown module file type (expected .svm or .svasm)", path);
  }
  SVM_ASSIGN_OR_RETURN(std::vector<std::uint8_t> bytes, readFile(path));
  Expected<Module> module = binary ? deserializeModule(bytes, path)
                                   : assemble(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
  if (!module) return module;
  Status status = verifyModule(*module);
  if (!status.isOk()) return status.withContext(path);
  return module;
}

Status saveModuleFile(const Module& module, const std::string& path) {
  std::vector<std::uint8_t> bytes;
  if (endsWith(path, ".svm")) {
    bytes = serializeModule(module);
  } else if (endsWith(path, ".svasm")) {
    std::string text = disassemble(module);
    bytes.assign(text.begin(), text.end());
  } else {
    return makeError(ErrorCode::InvalidArgument, "'{}': unknown module file type (expected .svm or .svasm)", path);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return makeError(ErrorCode::IoError, "cannot write '{}': {}", path, std::strerror(errno));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return makeError(ErrorCode::IoError, "cannot write '{}'", path);
  return Status::ok();
}

}  // namespace shapevm
