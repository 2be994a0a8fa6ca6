// SPDX-License-Identifier: Apache-2.0
// The per-call fast paths of a compiled launch: the argument block a kernel keeps while its inputs'
// layout repeats (LaunchArgsCache) must never serve another layout, scalar or broadcast, and the
// JIT's afterRun, which skips its scan once every site has settled, must still notice a new shape
// (guard misses, then a recompile) and a function that starts running.
#include <gtest/gtest.h>

#include <random>

#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "jit/jit.h"
#include "jit_test_util.h"
#include "support/tunables.h"
#include "vm/vm.h"

namespace shapevm::jit {
namespace {
using namespace testing;

// The kernel's outputs on `inputs` against the reference kernels.
::testing::AssertionResult launchMatches(const CompiledKernel& kernel, const std::vector<Value>& inputs) {
  auto expected = referenceOutputs(kernel.spec, inputs);
  if (!expected) return ::testing::AssertionFailure() << "reference: " << expected.status().toString();
  std::vector<Value> actual(static_cast<std::size_t>(kernel.num_outputs));
  const Status status = invokeCompiled(kernel, pointersTo(inputs), actual);
  if (!status.isOk()) return ::testing::AssertionFailure() << status.toString();
  const Comparison comparison = compareOutputs(*expected, actual);
  if (!comparison.ok)
    return ::testing::AssertionFailure() << describeInputs(pointersTo(inputs)) << ": " << comparison.reason;
  return ::testing::AssertionSuccess();
}

TEST(LaunchArgsCache, RepeatedLayoutsReuseTheBlockAndEveryOtherLayoutIsLaidOutAfresh) {
  std::mt19937 rng(31);
  std::vector<Value> xy = {operand(DType::Float32, Shape{4, 8}, rng), operand(DType::Float32, Shape{4, 8}, rng)};
  auto kernel = compileKernel(sharedBackend(), *familyFor(OpId::Add), specFor("add", xy, {}, Dims::Symbolic));
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  const CompiledKernel& add = **kernel;
  ASSERT_TRUE(add.layout_only_args);
  // New data, same layout: served from the block (only the pointers change).
  for (int i = 0; i < 3; ++i) {
    xy = {operand(DType::Float32, Shape{4, 8}, rng), operand(DType::Float32, Shape{4, 8}, rng)};
    EXPECT_TRUE(launchMatches(add, xy));
  }
  EXPECT_EQ(add.args_cache.hits, 2u);
  // Other shapes of the same rank, a broadcast each way, then the first layout again.
  const std::vector<std::pair<Shape, Shape>> layouts = {
      {Shape{7, 3}, Shape{7, 3}}, {Shape{5, 8}, Shape{1, 8}}, {Shape{5, 1}, Shape{5, 8}}, {Shape{5, 8}, Shape{5, 1}}};
  for (const auto& [a, b] : layouts) {
    xy = {operand(DType::Float32, a, rng), operand(DType::Float32, b, rng)};
    EXPECT_TRUE(launchMatches(add, xy)) << a.toString() << " + " << b.toString();
  }
  EXPECT_EQ(add.args_cache.hits, 2u) << "each new layout missed";
  xy = {operand(DType::Float32, Shape{5, 8}, rng), operand(DType::Float32, Shape{5, 1}, rng)};
  EXPECT_TRUE(launchMatches(add, xy));
  EXPECT_EQ(add.args_cache.hits, 3u);
  // The previous output handed back for reuse (sole owner): the block still points at the new one.
  std::vector<Value> out(1);
  ASSERT_TRUE(invokeCompiled(add, pointersTo(xy), out).isOk());
  const void* first = out[0].tensor().rawData();
  ASSERT_TRUE(invokeCompiled(add, pointersTo(xy), out).isOk());
  EXPECT_EQ(out[0].tensor().rawData(), first) << "the reused output buffer";
  EXPECT_TRUE(launchMatches(add, xy));
  EXPECT_TRUE(sharedBackend().free(add.handle).isOk());
}

TEST(LaunchArgsCache, AScalarOperandIsPartOfTheLayout) {
  std::mt19937 rng(32);
  std::vector<Value> xs = {operand(DType::Float32, Shape{6}, rng), Value::fromFloat(2.5)};
  auto kernel = compileKernel(sharedBackend(), *familyFor(OpId::Mul), specFor("mul", xs, {}, Dims::Symbolic));
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  const CompiledKernel& mul = **kernel;
  EXPECT_TRUE(launchMatches(mul, xs));
  EXPECT_TRUE(launchMatches(mul, xs));
  EXPECT_EQ(mul.args_cache.hits, 1u);
  for (double scale : {-1.0, 0.0, 3.25}) {
    xs[1] = Value::fromFloat(scale);
    EXPECT_TRUE(launchMatches(mul, xs)) << "scale " << scale;
  }
  EXPECT_EQ(mul.args_cache.hits, 1u) << "every new scalar missed";
  EXPECT_TRUE(sharedBackend().free(mul.handle).isOk());
}

// f: add (site 0), tanh (site 1), then a reshape (no kernel family). g: mul by itself.
constexpr const char* kProgram = R"(.module "settle"
.const k0 = int -1
.func f
  .param a : f32[?0,?1]
  .param b : f32[?0,?1]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
  CallOp add r2 = r0, r1 : f32[?0,?1] x f32[?0,?1] -> f32[?0,?1]
  CallOp tanh r3 = r2 : f32[?0,?1] -> f32[?0,?1]
  LoadConst r4, k0
  TuplePack r5, [r4]
  CallOp reshape r6 = r3, r5 : f32[?0,?1] x _ -> f32[?2]
  StoreTensor r6, o0
  Return
.end
.func g
  .param a : f32[?0]
  .outputs 1
  LoadTensor r0, a
  CallOp mul r1 = r0, r0 : f32[?0] x f32[?0] -> f32[?0]
  StoreTensor r1, o0
  Return
.end
)";

class SettledScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tunables::resetToDefaults();
    ASSERT_TRUE(Tunables::set(Tunable::JitLevel, 1).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::HotMs, 0).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::WarmupRuns, 0).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::HotCount, 1).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::GuardMissRecompile, 2).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::CacheCovering, 0).isOk());
  }
  void TearDown() override { Tunables::resetToDefaults(); }
};

TEST_F(SettledScanTest, AfterRunSkipsTheScanOnceSettledYetSeesANewShapeAndANewFunction) {
  auto module = assemble(kProgram, "settle.svasm");
  ASSERT_TRUE(module.hasValue()) << module.status().toString();
  ASSERT_TRUE(verifyModule(*module).isOk());
  VirtualMachine vm(std::make_shared<Module>(std::move(*module)));
  JitOptions options;
  options.wait_for_compiles = true;  // compiles finish before the next run: counts are exact
  options.kernel_cache = false;
  auto attached = Jit::attach(vm, options);
  ASSERT_TRUE(attached.hasValue()) << attached.status().toString();
  Jit& jit = **attached;
  std::mt19937 rng(33);
  auto runF = [&](std::int64_t rows) {
    std::vector<Value> in = {operand(DType::Float32, Shape{rows, 5}, rng),
                             operand(DType::Float32, Shape{rows, 5}, rng)};
    auto out = vm.run(0, in);
    ASSERT_TRUE(out.hasValue()) << out.status().toString();
    Value sum = callOp("add", {in[0], in[1]}).value()[0];
    Tensor want = callOp("tanh", {sum}).value()[0].tensor();
    ASSERT_EQ((*out)[0].tensor().numel(), want.numel());
    for (std::int64_t i = 0; i < want.numel(); ++i) {
      ASSERT_NEAR((*out)[0].tensor().elementAsDouble(i), want.elementAsDouble(i), 1e-6) << "rows " << rows;
    }
  };
  for (int i = 0; i < 12; ++i) runF(6);
  ASSERT_EQ(jit.siteState(0, 0).compiles, 1);
  ASSERT_EQ(jit.siteState(0, 2).phase, Jit::SiteState::Phase::NoKernel);
  const std::uint64_t settled = jit.settledRuns();
  EXPECT_GT(settled, 0u) << "compiled, tuned and no misses: afterRun stops scanning";
  // A new shape after the skip began: counted misses, then a recompile for the wider range.
  const std::uint64_t misses = vm.stats().guard_misses;
  runF(9);
  runF(9);
  EXPECT_GT(vm.stats().guard_misses, misses);
  EXPECT_EQ(jit.siteState(0, 0).compiles, 2);
  const std::uint64_t compiled = vm.stats().compiled_calls;
  runF(9);
  EXPECT_EQ(vm.stats().compiled_calls - compiled, 2u) << "add and tanh compiled for the new shape";
  for (int i = 0; i < 10; ++i) runF(9);
  const std::uint64_t settled_again = jit.settledRuns();
  EXPECT_GT(settled_again, settled) << "settled again after the recompile";
  // A function that had never run (its sites cold) gets hot and compiles on its first runs.
  std::vector<Value> x = {operand(DType::Float32, Shape{7}, rng)};
  ASSERT_TRUE(vm.run(1, x).hasValue());
  EXPECT_EQ(jit.siteState(1, 0).compiles, 1);
  const std::uint64_t before_g = vm.stats().compiled_calls;
  auto out = vm.run(1, x);
  ASSERT_TRUE(out.hasValue());
  EXPECT_EQ(vm.stats().compiled_calls - before_g, 1u);
  for (std::int64_t i = 0; i < 7; ++i) {
    const double v = x[0].tensor().elementAsDouble(i);
    EXPECT_NEAR((*out)[0].tensor().elementAsDouble(i), v * v, 1e-6);
  }
}

}  // namespace
}  // namespace shapevm::jit
