// SPDX-License-Identifier: Apache-2.0
// Validation on one thread, and the library primitives a validation creates for the program's
// calls (validate.h: KernelThreadsOnThisThread, ProgramCalls): after a validation under a
// ProgramCallsScope, the program's calls at the profiled row counts and task counts create no
// primitive on the calling thread, while a row count the profile never saw still does. With
// defer_creation (the JIT's compile paths), those primitives are made by createDeferred(), after
// the validation and outside its clock. The program's own operand layouts (a transposed weight, a
// row slice of a wider A), as the profile recorded them, get their primitives too.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "jit/llvm_cpu/library_onednn.h"
#include "jit_test_util.h"
#include "support/cpu_cores.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

TEST(KernelThreadsOnThisThread, HoldsTheCallingThreadsCountForTheScope) {
  const int outside = kernelThreads();
  {
    const KernelThreadsOnThisThread one(1);
    EXPECT_EQ(kernelThreads(), 1);
    {
      const KernelThreadsOnThisThread three(3);
      EXPECT_EQ(kernelThreads(), 3);
    }
    EXPECT_EQ(kernelThreads(), 1);
    int other = 0;
    std::thread([&] { other = kernelThreads(); }).join();
    EXPECT_EQ(other, outside) << "another thread keeps its own count";
  }
  EXPECT_EQ(kernelThreads(), outside);
}

ProfileRecord matmulRecord(const Shape& a, const Shape& b) {
  ProfileRecord record;
  for (const Shape& shape : {a, b}) {
    OperandProfile operand;
    operand.is_tensor = true;
    operand.shape = shape;
    record.inputs.push_back(operand);
  }
  return record;
}

TEST(ProgramCalls, AddMatmulKeepsEachKAndNsRowCountsOnce) {
  ProgramCalls calls;
  calls.addMatmul(std::vector<ProfileRecord>{
      matmulRecord(Shape{320, 128}, Shape{128, 1024}), matmulRecord(Shape{640, 128}, Shape{128, 1024}),
      matmulRecord(Shape{320, 128}, Shape{128, 1024}), matmulRecord(Shape{32, 256}, Shape{256, 1024}),
      matmulRecord(Shape{2, 32, 256}, Shape{256, 1024})});
  ASSERT_EQ(calls.matmuls.size(), 2u);
  EXPECT_EQ(calls.matmuls[0].k, 128);
  EXPECT_EQ(calls.matmuls[0].n, 1024);
  EXPECT_EQ(calls.matmuls[0].rows, (std::vector<std::int64_t>{320, 640}));
  EXPECT_EQ(calls.matmuls[1].rows, (std::vector<std::int64_t>{32})) << "a batched record is left out";
  EXPECT_FALSE(calls.threads.empty());
  EXPECT_EQ(ProgramCalls::current(), nullptr);
  {
    const ProgramCallsScope scope(calls);
    EXPECT_EQ(ProgramCalls::current(), &calls);
  }
  EXPECT_EQ(ProgramCalls::current(), nullptr);
}

TEST(ProgramCalls, ValidationCreatesTheProgramsPrimitivesAtProfiledRows) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  // Run alone (as ctest runs it) the cache is empty; after other tests it may hold too many.
  if (onednn::stats().primitives + 16 >= onednn::kMaxPrimitives / 2)
    GTEST_SKIP() << "the primitive cache is half full: no primitives are made ahead of the calls";
  std::mt19937 rng(91);
  // Sizes no other test uses: every primitive is new to the process-wide cache.
  const std::int64_t k = 88, n = 56;
  const std::int64_t validated = 1500 + static_cast<std::int64_t>(rng() % 200);
  const std::int64_t profiled = validated + 211;
  const std::int64_t unseen = validated + 419;
  const Value b = operand(DType::Float32, Shape{k, n}, rng);
  const Value bias = operand(DType::Float32, Shape{n}, rng);
  const std::vector<Value> first = {operand(DType::Float32, Shape{validated, k}, rng), b, bias};
  KernelSpec spec = symbolicSpec(exactSpec(OpId::MatMul, {}, pointersTo(first)));
  spec.epilogue = {{OpId::Add, 2, false}};
  spec.params = {.library = 1};
  auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), spec);
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();

  ProgramCalls calls;
  calls.threads = {2, 1};
  calls.addMatmul(std::vector<ProfileRecord>{matmulRecord(Shape{validated, k}, Shape{k, n}),
                                             matmulRecord(Shape{profiled, k}, Shape{k, n})});
  {
    const ProgramCallsScope scope(calls);
    const std::vector<Shape> observed = {Shape{validated, k}, Shape{k, n}, Shape{n}};
    ASSERT_TRUE(validateKernel(**kernel, validationShapes((*kernel)->spec, observed), 5).isOk());
  }
  // The program's calls: each returns the primitive time it spent on this thread.
  const auto call = [&](std::int64_t m, int threads) {
    const KernelThreadsOnThisThread scope(threads);
    const std::vector<Value> inputs = {operand(DType::Float32, Shape{m, k}, rng), b, bias};
    std::vector<Value> actual(1);
    const double before = sharedBackend().threadLibraryCodegenMs();
    EXPECT_TRUE(invokeCompiled(**kernel, pointersTo(inputs), actual).isOk());
    const double spent = sharedBackend().threadLibraryCodegenMs() - before;
    auto product = callOp("matmul", {inputs[0], inputs[1]}, {});
    auto expected = product ? callOp("add", {(*product)[0], bias}, {}) : product;
    EXPECT_TRUE(expected.hasValue() && compareOutputs(*expected, actual).ok) << "m = " << m;
    return spent;
  };
  for (const std::int64_t m : {validated, profiled}) {
    for (const int threads : calls.threads) {
      EXPECT_EQ(call(m, threads), 0.0) << "m = " << m << ", " << threads << " threads: created by the program";
    }
  }
  EXPECT_GT(call(unseen, 2), 0.0) << "a row count the profile never saw is created at its first call";
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

// A record of the operands' shapes and strides, as the interpreter's profile keeps them.
ProfileRecord matmulRecordOf(const Value& a, const Value& b) {
  ProfileRecord record;
  for (const Value* value : {&a, &b}) {
    OperandProfile operand;
    operand.is_tensor = true;
    operand.shape = value->tensor().shape();
    operand.strides = value->tensor().strides();
    record.inputs.push_back(operand);
  }
  return record;
}

// Rows [0, m) of columns [offset, offset + k) of a random [m, width] matrix: A with row stride width.
Value rowSlice(std::int64_t m, std::int64_t k, std::int64_t width, std::int64_t offset, std::mt19937& rng) {
  Tensor wide = randomTensor(DType::Float32, Shape{m, width}, rng, Layout::Contiguous, 1.0);
  return Value::fromTensor(wide.asStrided(Shape{m, k}, Shape{width, 1}, offset).value());
}

TEST(ProgramCalls, AddMatmulKeepsEachLayoutOnce) {
  std::mt19937 rng(95);
  const Value b = transposedWeight(DType::Float32, 128, 1024, rng);
  const Value dense_b = operand(DType::Float32, Shape{128, 1024}, rng);
  const Value a = rowSlice(32, 128, 384, 128, rng);
  ProgramCalls calls;
  calls.addMatmul(
      std::vector<ProfileRecord>{matmulRecordOf(a, b), matmulRecordOf(a, b), matmulRecordOf(a, dense_b),
                                 matmulRecordOf(rowSlice(64, 128, 256, 0, rng), b),
                                 matmulRecordOf(rowSlice(1, 128, 384, 0, rng), b),  // one row: oneDNN may restride it
                                 matmulRecord(Shape{96, 128}, Shape{128, 1024})});  // no strides recorded
  ASSERT_EQ(calls.matmuls.size(), 1u);
  EXPECT_EQ(calls.matmuls[0].rows, (std::vector<std::int64_t>{32, 64, 1, 96}));
  using L = ProgramCalls::Matmul::Layout;
  EXPECT_EQ(calls.matmuls[0].layouts,
            (std::vector<L>{L{32, {384, 1}, {1, 128}}, L{32, {384, 1}, {1024, 1}}, L{64, {256, 1}, {1, 128}}}));
}

TEST(ProgramCalls, ValidationCreatesThePrimitivesOfTheProgramsLayouts) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  if (onednn::stats().primitives + 16 >= onednn::kMaxPrimitives / 2)
    GTEST_SKIP() << "the primitive cache is half full: no primitives are made ahead of the calls";
  std::mt19937 rng(97);
  // Sizes no other test uses: every primitive is new to the process-wide cache.
  const std::int64_t k = 84, n = 52;
  const std::int64_t m = 1200 + static_cast<std::int64_t>(rng() % 100);
  // The workload's layouts: x·Wᵀ with x a column block of a wider input (the looped cell's x[:, t]).
  const Value b = transposedWeight(DType::Float32, k, n, rng);
  const Value a = rowSlice(m, k, 3 * k, k, rng);
  const std::vector<Value> first = {a, b};
  KernelSpec spec = symbolicSpec(exactSpec(OpId::MatMul, {}, pointersTo(first)));
  spec.params = {.library = 1};
  auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), spec);
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();

  ProgramCalls calls;
  calls.threads = {2, 1};
  calls.addMatmul(std::vector<ProfileRecord>{matmulRecordOf(a, b)});
  ASSERT_EQ(calls.matmuls.size(), 1u);
  ASSERT_EQ(calls.matmuls[0].layouts.size(), 1u);
  {
    const ProgramCallsScope scope(calls);
    const std::vector<Shape> observed = {Shape{m, k}, Shape{k, n}};
    ASSERT_TRUE(validateKernel(**kernel, validationShapes((*kernel)->spec, observed), 7).isOk());
  }
  // The program's call in `x`'s layout: the primitive time it spent on this thread.
  const auto call = [&](const Value& x, int threads) {
    const KernelThreadsOnThisThread scope(threads);
    const std::vector<Value> inputs = {x, b};
    std::vector<Value> actual(1);
    const double before = sharedBackend().threadLibraryCodegenMs();
    EXPECT_TRUE(invokeCompiled(**kernel, pointersTo(inputs), actual).isOk());
    const double spent = sharedBackend().threadLibraryCodegenMs() - before;
    auto expected = callOp("matmul", {x, b}, {});
    EXPECT_TRUE(expected.hasValue() && compareOutputs(*expected, actual).ok);
    return spent;
  };
  for (const int threads : calls.threads) {
    // Fresh data in the profiled layout (the same strides, another buffer).
    EXPECT_EQ(call(rowSlice(m, k, 3 * k, k, rng), threads), 0.0)
        << threads << " threads: the profiled layout's primitive was created by the program";
  }
  EXPECT_GT(call(rowSlice(m, k, 2 * k, 0, rng), 2), 0.0) << "a row stride the profile never saw is made at its call";
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

TEST(ProgramCalls, DeferredCreationWaitsForCreateDeferredAndCountsAsLibraryCodegen) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  if (onednn::stats().primitives + 16 >= onednn::kMaxPrimitives / 2)
    GTEST_SKIP() << "the primitive cache is half full: no primitives are made ahead of the calls";
  std::mt19937 rng(93);
  // Sizes no other test uses: every primitive is new to the process-wide cache.
  const std::int64_t k = 76, n = 44;
  const std::int64_t validated = 1300 + static_cast<std::int64_t>(rng() % 150);
  const std::int64_t profiled = validated + 173;
  const Value b = operand(DType::Float32, Shape{k, n}, rng);
  const std::vector<Value> first = {operand(DType::Float32, Shape{validated, k}, rng), b};
  KernelSpec spec = symbolicSpec(exactSpec(OpId::MatMul, {}, pointersTo(first)));
  spec.params = {.library = 1};
  auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), spec);
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();

  ProgramCalls calls;
  calls.threads = {1};
  calls.defer_creation = true;
  calls.addMatmul(std::vector<ProfileRecord>{matmulRecord(Shape{profiled, k}, Shape{k, n})});
  const std::size_t primitives_before = onednn::stats().primitives;
  std::size_t after_validation = 0;
  {
    const ProgramCallsScope scope(calls);
    const std::vector<Shape> observed = {Shape{validated, k}, Shape{k, n}};
    ASSERT_TRUE(validateKernel(**kernel, validationShapes((*kernel)->spec, observed), 5).isOk());
    EXPECT_GT(calls.deferredCount(), 0u) << "the validation run asked for the program's primitives";
    after_validation = onednn::stats().primitives;
  }
  EXPECT_GT(after_validation, primitives_before) << "the validation's own shapes were created";
  // Made now, on this thread, counted as library codegen.
  const double codegen_before = sharedBackend().threadLibraryCodegenMs();
  calls.createDeferred();
  EXPECT_EQ(calls.deferredCount(), 0u);
  EXPECT_GT(onednn::stats().primitives, after_validation) << "the profiled row count's primitive";
  EXPECT_GT(sharedBackend().threadLibraryCodegenMs(), codegen_before);
  // The program's call at the profiled rows creates nothing.
  {
    const KernelThreadsOnThisThread scope(1);
    const std::vector<Value> inputs = {operand(DType::Float32, Shape{profiled, k}, rng), b};
    std::vector<Value> actual(1);
    const double before = sharedBackend().threadLibraryCodegenMs();
    EXPECT_TRUE(invokeCompiled(**kernel, pointersTo(inputs), actual).isOk());
    EXPECT_EQ(sharedBackend().threadLibraryCodegenMs() - before, 0.0) << "created by the program";
    auto expected = callOp("matmul", {inputs[0], inputs[1]}, {});
    EXPECT_TRUE(expected.hasValue() && compareOutputs(*expected, actual).ok);
  }
  // Dropped work is never done.
  calls.defer([] { ADD_FAILURE() << "dropped work ran"; });
  calls.dropDeferred();
  calls.createDeferred();
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

// In a fresh process (AnUntunedLibraryKernelDeclinesALayoutOnUngeneratedSgemmCode): nothing has
// generated oneDNN's sgemm kernels yet. The looped cell's x[:, t]·Wᵀ (A's rows 10 K apart, B a
// transposed weight) as an O1 install compiles it: with avoid_one_time_codegen its library kernel
// does not compile exactly when the layout's primitive would first generate that code, and
// compiles once the code exists. Exit 0 when every expectation held.
TEST(DISABLED_ProgramCallsChild, DeclineUngeneratedSgemm) {
  if (!onednn::available()) return;
  std::mt19937 rng(101);
  const std::int64_t m = 32, k = 128, n = 1024;
  const Value a = rowSlice(m, k, 10 * k, 3 * k, rng);
  const Value b = transposedWeight(DType::Float32, k, n, rng);
  const std::vector<Value> inputs = {a, b};
  KernelSpec spec = exactSpec(OpId::MatMul, {}, pointersTo(inputs));
  spec.params = {.library = 1};
  ASSERT_FALSE(onednn::sgemmKernelsGenerated()) << "a fresh process";
  ProgramCalls calls;
  calls.threads = {1};
  calls.defer_creation = true;
  calls.addMatmul(std::vector<ProfileRecord>{matmulRecordOf(a, b)});
  calls.avoid_one_time_codegen = true;
  bool declined = false;
  {
    const ProgramCallsScope scope(calls);
    auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), spec);
    declined = !kernel.hasValue();
    if (declined) {
      EXPECT_NE(kernel.status().message().find("sgemm"), std::string::npos) << kernel.status().message();
    } else {
      EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
    }
  }
  EXPECT_FALSE(onednn::sgemmKernelsGenerated()) << "the check generates nothing";
  // Without the flag: compiled, validated, the program's primitives made (createDeferred); the
  // sgemm code is generated exactly when the check declined.
  calls.avoid_one_time_codegen = false;
  {
    const ProgramCallsScope scope(calls);
    auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), spec);
    ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
    const std::vector<Shape> observed = {Shape{m, k}, Shape{k, n}};
    ASSERT_TRUE(validateKernel(**kernel, validationShapes((*kernel)->spec, observed), 11).isOk());
    calls.createDeferred();
    std::vector<Value> actual(1);
    ASSERT_TRUE(invokeCompiled(**kernel, pointersTo(inputs), actual).isOk());
    auto expected = callOp("matmul", {a, b}, {});
    ASSERT_TRUE(expected.hasValue());
    EXPECT_TRUE(compareOutputs(*expected, actual).ok);
    EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  }
  EXPECT_EQ(onednn::sgemmKernelsGenerated(), declined)
      << "declined exactly when the program's layout needed oneDNN's sgemm code";
  // Once the code exists, nothing is avoided: the library kernel compiles with the flag.
  calls.avoid_one_time_codegen = true;
  {
    const ProgramCallsScope scope(calls);
    auto again = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), spec);
    ASSERT_TRUE(again.hasValue()) << again.status().toString();
    EXPECT_TRUE(sharedBackend().free((*again)->handle).isOk());
  }
}

TEST(ProgramCalls, AnUntunedLibraryKernelDeclinesALayoutOnUngeneratedSgemmCode) {
  if (!onednn::available()) GTEST_SKIP() << "LibraryCandidates=0";
  EXPECT_EQ(runTestInChild("DISABLED_ProgramCallsChild.DeclineUngeneratedSgemm"), 0);
}

}  // namespace
}  // namespace shapevm::jit
