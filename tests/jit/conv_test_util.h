// SPDX-License-Identifier: Apache-2.0
// Helpers of the conv family's tests (conv_test.cc, conv_library_test.cc): dynamic-extent specs
// and a fused epilogue checked against the op-by-op reference.
#pragma once

#include <random>
#include <vector>

#include "jit/conv_family.h"
#include "jit_test_util.h"

namespace shapevm::jit::testing {

// The spec for `inputs` with the batch and spatial dims dynamic (channels and the weight static).
inline KernelSpec dynamicSpec(const std::vector<Value>& inputs, const Attrs& attrs = {}) {
  KernelSpec spec = specFor("conv", inputs, attrs);
  OperandSpec& x = spec.inputs[0];
  for (int d = 0; d < x.rank; ++d) {
    if (d != 1) x.dims[d] = DimSpec{};
  }
  return spec;
}

// A conv with a fused epilogue, against the reference conv and then each step op by op (what the
// region planner hands a conv: bias, activations, a residual add). `steps` read inputs 3.. (the
// operands, of the output's shape, after the bias; `given` replaces the first of them, e.g. by
// one-element bounds). The kernel is compiled with `params` (the generated default, or e.g. the
// oneDNN candidate).
inline ::testing::AssertionResult epilogueMatches(const std::vector<Value>& own, const Attrs& attrs,
                                                  const std::vector<EpilogueStep>& steps, std::mt19937& rng,
                                                  bool dynamic, const std::vector<Value>& given = {},
                                                  const KernelParams& params = {}) {
  const KernelSpec conv = dynamic ? dynamicSpec(own, attrs) : specFor("conv", own, attrs);
  auto value = referenceOutputs(conv, own);
  if (!value) return ::testing::AssertionFailure() << "reference conv: " << value.status().toString();
  const Shape out = (*value)[0].tensor().shape();
  std::vector<Value> inputs = own;
  KernelSpec spec = conv;
  spec.epilogue = steps;
  spec.params = params;
  for (const EpilogueStep& step : steps) {
    const std::string_view op = OpRegistry::global().schema(step.op).name;
    if (step.operand < 0) {
      value = callOp(op, {(*value)[0]}, {});
      if (!value) return ::testing::AssertionFailure() << op << ": " << value.status().toString();
      continue;
    }
    while (inputs.size() <= static_cast<std::size_t>(step.operand)) {
      const std::size_t at = inputs.size() - own.size();
      inputs.push_back(at < given.size() ? given[at] : operand(DType::Float32, out, rng));
      OperandSpec extra = specFor("relu", {inputs.back()}).inputs[0];
      for (int d = 0; d < extra.rank && dynamic && at >= given.size(); ++d) {
        if (d != 1) extra.dims[d] = DimSpec{};
      }
      spec.inputs.push_back(extra);
    }
    const Value& extra = inputs[static_cast<std::size_t>(step.operand)];
    const Value current = (*value)[0];
    value = callOp(op, step.swapped ? std::vector<Value>{extra, current} : std::vector<Value>{current, extra}, {});
    if (!value) return ::testing::AssertionFailure() << op << ": " << value.status().toString();
  }
  auto kernel = compileKernel(sharedBackend(), *familyFor(OpId::Conv), spec);
  if (!kernel) return ::testing::AssertionFailure() << spec.signature() << ": " << kernel.status().toString();
  std::vector<Value> actual(1);
  Status run = invokeCompiled(**kernel, pointersTo(inputs), actual);
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  if (!run.isOk()) return ::testing::AssertionFailure() << spec.signature() << ": " << run.toString();
  Comparison comparison = compareOutputs(*value, actual);
  if (!comparison.ok) return ::testing::AssertionFailure() << spec.signature() << ": " << comparison.reason;
  return ::testing::AssertionSuccess();
}

}  // namespace shapevm::jit::testing
