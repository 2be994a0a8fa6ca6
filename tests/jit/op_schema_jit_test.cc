// SPDX-License-Identifier: Apache-2.0
// ops.def's jit column against the JIT: each kernel family takes exactly the ops the column gives
// it, the region planner's op classes follow it, and every op marked `ew` compiles to a kernel
// that passes the JIT's own validation against the reference (an op marked `ew` whose emitter
// is missing computes the wrong values and fails here, by name).
#include <gtest/gtest.h>

#include <random>

#include "jit/conv_family.h"
#include "jit/fusion.h"
#include "jit_test_util.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

TEST(OpSchemaJit, KernelFamiliesTakeExactlyTheOpsTheTableGivesThem) {
  EXPECT_EQ(convFamily(OpId::Conv), familyFor(OpId::Conv));
  for (const OpSchema& schema : OpRegistry::global().schemas()) {
    SCOPED_TRACE(std::string(schema.name));
    EXPECT_EQ(elementwiseFamily(schema.id) != nullptr, schema.jit.elementwise);
    EXPECT_EQ(reduceFamily(schema.id) != nullptr, schema.jit.reduce);
    EXPECT_EQ(matmulFamily(schema.id) != nullptr, schema.jit.matmul);
    EXPECT_EQ(convFamily(schema.id) != nullptr, schema.jit.conv);
    EXPECT_EQ(isFusableElementwise(schema.id), schema.jit.fuse);
    EXPECT_EQ(familyFor(schema.id) != nullptr,
              schema.jit.elementwise || schema.jit.reduce || schema.jit.matmul || schema.jit.conv);
  }
}

// The region planner decomposes exactly these normalizations (planNorm, trailingAxes) and maps
// exactly these reductions to FusedProgram::Reduce (its kReduce table): a new op marked `norm` or
// `freduce` needs its code written there, and these lists updated with it.
TEST(OpSchemaJit, PlannerColumnsAreWhatThePlannerHandles) {
  std::vector<OpId> norm, fused_reduce;
  for (const OpSchema& schema : OpRegistry::global().schemas()) {
    if (schema.jit.norm) norm.push_back(schema.id);
    if (schema.jit.fused_reduce) fused_reduce.push_back(schema.id);
  }
  EXPECT_EQ(norm, (std::vector<OpId>{OpId::Softmax, OpId::LogSoftmax, OpId::LayerNorm}));
  EXPECT_EQ(fused_reduce, (std::vector<OpId>{OpId::Sum, OpId::Mean, OpId::Max, OpId::Min}));
}

Value dataInput(const InputSpec& spec, const Shape& shape, std::mt19937& rng) {
  const DType dtype = spec.domain == InputDomain::Bool ? DType::Bool : DType::Float32;
  Tensor t = randomTensor(dtype, shape, rng);
  if (spec.domain == InputDomain::Positive) {
    float* data = t.data<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i) data[i] = 0.25f + std::abs(data[i]);
  }
  return Value::fromTensor(t);
}

TEST(OpSchemaJit, EveryElementwiseOpCompilesAndPassesValidation) {
  std::mt19937 rng(18);
  int compiled = 0;
  for (const OpSchema& schema : OpRegistry::global().schemas()) {
    if (!schema.jit.elementwise) continue;
    SCOPED_TRACE(std::string(schema.name));
    const Shape shape{3, 37};
    std::vector<Value> inputs;
    const std::size_t count = schema.maxInputs() < 0 ? 3 : schema.inputs.size();
    for (std::size_t i = 0; i < count; ++i) {
      inputs.push_back(dataInput(schema.inputs[std::min(i, schema.inputs.size() - 1)], shape, rng));
    }
    Attrs attrs;
    if (schema.cls == OpClass::Cast) attrs.emplace_back("dtype", AttrValue::ofDType(DType::Float16));
    KernelSpec spec = specFor(schema.name, inputs, attrs, Dims::Symbolic);
    const KernelFamily* family = familyFor(schema.id);
    ASSERT_NE(family, nullptr);
    ASSERT_TRUE(family->supports(spec).isOk()) << family->supports(spec).toString();
    auto kernel = compileKernel(sharedBackend(), *family, spec);
    ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
    std::vector<Shape> observed;
    for (const Value& v : inputs) observed.push_back(v.tensor().shape());
    const auto sets = validationShapes(spec, observed);
    const Status status = validateKernel(**kernel, sets, 7);
    EXPECT_TRUE(status.isOk()) << status.toString();
    EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
    ++compiled;
  }
  EXPECT_GE(compiled, 30);
}

}  // namespace
}  // namespace shapevm::jit
