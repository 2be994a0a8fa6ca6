// SPDX-License-Identifier: Apache-2.0
// Helpers for the frontend tests: compile a snippet (verified), run a function on the VM, build
// float tensors, and read a file of the repository.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "frontend/frontend.h"
#include "vm/vm.h"

namespace shapevm::testing {

inline Module compileOk(const std::string& source, FrontendOptions options = {}) {
  auto module = compilePython(source, "test.py", options);
  EXPECT_TRUE(module.hasValue()) << (module ? "" : module.status().toString());
  if (!module) return Module();
  Status verified = verifyModule(*module);
  EXPECT_TRUE(verified.isOk()) << verified.toString() << "\n" << disassemble(*module);
  return std::move(*module);
}

// The compile error message ("" when it compiled).
inline std::string compileError(const std::string& source, FrontendOptions options = {}) {
  auto module = compilePython(source, "test.py", options);
  if (module) return "";
  return module.status().toString();
}

inline Tensor floats(std::vector<double> values, std::vector<std::int64_t> dims) {
  Shape shape;
  for (std::int64_t d : dims) shape.push_back(d);
  Tensor t = std::move(Tensor::empty(DType::Float32, shape).value());
  for (std::size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = static_cast<float>(values[i]);
  return t;
}

inline std::vector<double> elements(const Value& v) {
  std::vector<double> out;
  if (!v.isTensor()) return out;
  for (std::int64_t i = 0; i < v.tensor().numel(); ++i) out.push_back(v.tensor().elementAsDouble(i));
  return out;
}

inline Expected<std::vector<Value>> runModule(const Module& module, const std::string& fn, std::vector<Value> args) {
  auto shared = std::make_shared<Module>(module);
  VirtualMachine vm(shared);
  auto index = resolveFunction(*shared, fn);
  if (!index) return index.status();
  return vm.run(*index, args);
}

inline std::string readRepoFile(const std::string& relative) {
  std::ifstream in(std::string(SHAPEVM_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace shapevm::testing
