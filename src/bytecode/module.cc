// SPDX-License-Identifier: Apache-2.0
// Module lookups and the serialized shape-token rewrite API.
#include "bytecode/module.h"

namespace shapevm {

int Function::paramIndex(std::string_view param_name) const {
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == param_name) return static_cast<int>(i);
  }
  return -1;
}

int Function::dimId(std::string_view dim_name) const {
  for (std::size_t i = 0; i < dim_names.size(); ++i) {
    if (!dim_name.empty() && dim_names[i] == dim_name) return static_cast<int>(i);
  }
  return -1;
}

int Module::findFunction(std::string_view function_name) const {
  for (std::size_t i = 0; i < functions.size(); ++i) {
    if (functions[i].name == function_name) return static_cast<int>(i);
  }
  return -1;
}

Module::Module(const Module& other)
    : name(other.name), source_file(other.source_file), constants(other.constants) {
  std::lock_guard<std::mutex> lock(other.token_mutex_);
  functions = other.functions;
}

Module& Module::operator=(const Module& other) {
  if (this == &other) return *this;
  Module copy(other);
  *this = std::move(copy);
  return *this;
}

Module::Module(Module&& other) noexcept
    : name(std::move(other.name)), source_file(std::move(other.source_file)),
      constants(std::move(other.constants)), functions(std::move(other.functions)) {}

Module& Module::operator=(Module&& other) noexcept {
  name = std::move(other.name);
  source_file = std::move(other.source_file);
  constants = std::move(other.constants);
  functions = std::move(other.functions);
  return *this;
}

Status Module::rewriteSiteToken(int function, int site, bool output, int operand, const TensorDescriptor& token) {
  std::lock_guard<std::mutex> lock(token_mutex_);
  if (function < 0 || function >= static_cast<int>(functions.size())) {
    return makeError(ErrorCode::IndexOutOfRange, "rewriteSiteToken: no function {}", function);
  }
  Function& fn = functions[static_cast<std::size_t>(function)];
  if (site < 0 || site >= static_cast<int>(fn.op_sites.size())) {
    return makeError(ErrorCode::IndexOutOfRange, "rewriteSiteToken: function {} has no op site {}", fn.name, site);
  }
  auto& tokens = output ? fn.op_sites[static_cast<std::size_t>(site)].output_tokens
                        : fn.op_sites[static_cast<std::size_t>(site)].input_tokens;
  if (operand < 0 || operand >= static_cast<int>(tokens.size())) {
    return makeError(ErrorCode::IndexOutOfRange, "rewriteSiteToken: site {} of {} has no {} {}", site, fn.name,
                     output ? "output" : "input", operand);
  }
  TensorDescriptor& current = tokens[static_cast<std::size_t>(operand)];
  if (current.is_tensor != token.is_tensor || (!current.any_rank && !token.any_rank && current.rank() != token.rank())) {
    return makeError(ErrorCode::InvalidArgument, "rewriteSiteToken: {} cannot replace {} (kind or rank differs)",
                     token.toString(), current.toString());
  }
  current = token;
  return Status::ok();
}

TensorDescriptor Module::tokenSnapshot(int function, int site, bool output, int operand) const {
  std::lock_guard<std::mutex> lock(token_mutex_);
  const OpSite& s = functions[static_cast<std::size_t>(function)].op_sites[static_cast<std::size_t>(site)];
  return output ? s.output_tokens[static_cast<std::size_t>(operand)] : s.input_tokens[static_cast<std::size_t>(operand)];
}

}  // namespace shapevm
