// SPDX-License-Identifier: Apache-2.0
// Helpers for the JIT's differential tests: one shared engine, specs from concrete inputs, and
// "compile this spec, run it and the reference kernel on these inputs, compare" as one assertion
// (ggml's test-backend-ops style: the declared case runs on both paths).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../ops/op_test_util.h"
#include "jit/compiled_kernel.h"
#include "jit/engine.h"
#include "jit/kernel_abi.h"
#include "jit/validate.h"

namespace shapevm::jit::testing {

using shapevm::testing::Attrs;

// One engine for the whole test binary (creating LLJIT costs ~10 ms).
inline JitEngine& sharedEngine() {
  static std::unique_ptr<JitEngine> engine = [] {
    auto created = JitEngine::create();
    if (!created) {
      ADD_FAILURE() << created.status().toString();
      std::abort();
    }
    return std::move(*created);
  }();
  return *engine;
}

enum class Dims { Static, Symbolic };

// The spec of `op` for these inputs: all dims static, or all symbolic.
inline KernelSpec specFor(std::string_view op_name, const std::vector<Value>& inputs, const Attrs& attrs = {},
                          Dims dims = Dims::Static) {
  const OpSchema* schema = OpRegistry::global().find(op_name);
  EXPECT_NE(schema, nullptr) << op_name;
  std::vector<const Value*> pointers;
  for (const Value& v : inputs) pointers.push_back(&v);
  auto resolved = resolveAttrs(*schema, attrs);
  EXPECT_TRUE(resolved.hasValue()) << resolved.status().toString();
  KernelSpec spec = exactSpec(schema->id, *resolved, pointers);
  return dims == Dims::Symbolic ? symbolicSpec(std::move(spec)) : spec;
}

// Compiles `spec` (must be supported), runs it and the reference on `inputs`, compares with the
// dtype's tolerance (validate.h). The message names the op, the spec and the error.
inline ::testing::AssertionResult matchesReference(const KernelSpec& spec, const std::vector<Value>& inputs) {
  const KernelFamily* family = familyFor(spec.op);
  if (family == nullptr) return ::testing::AssertionFailure() << "no kernel family for " << spec.signature();
  auto kernel = compileKernel(sharedEngine(), *family, spec);
  if (!kernel) return ::testing::AssertionFailure() << spec.signature() << ": " << kernel.status().toString();
  const OpSchema& schema = OpRegistry::global().schema(spec.op);
  std::vector<std::pair<std::string, AttrValue>> named;
  for (std::size_t a = 0; a < schema.attrs.size(); ++a) named.emplace_back(schema.attrs[a].name, spec.attrs[a]);
  auto expected = callOp(schema.name, inputs, named);
  if (!expected) return ::testing::AssertionFailure() << "reference failed: " << expected.status().toString();
  std::vector<const Value*> pointers;
  for (const Value& v : inputs) pointers.push_back(&v);
  std::vector<Value> actual(static_cast<std::size_t>((*kernel)->num_outputs));
  Status run = invokeCompiled(**kernel, pointers, actual);
  if (!run.isOk()) return ::testing::AssertionFailure() << spec.signature() << ": " << run.toString();
  Comparison comparison = compareOutputs(*expected, actual);
  Status removed = sharedEngine().remove((*kernel)->handle);
  if (!comparison.ok) {
    return ::testing::AssertionFailure() << spec.signature() << " on " << describeInputs(pointers) << ": "
                                         << comparison.reason;
  }
  if (!removed.isOk()) return ::testing::AssertionFailure() << removed.toString();
  return ::testing::AssertionSuccess() << "rel L2 " << comparison.rel_l2;
}

}  // namespace shapevm::jit::testing
