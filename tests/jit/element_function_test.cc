// SPDX-License-Identifier: Apache-2.0
// ir::callElementFunction: an expensive element function (a transcendental's polynomial) is one
// internal function per module, called from every loop that computes it; the loop vectorizer widens
// the call to a vector variant, and the engine compiles only the variants some loop calls.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <llvm/Object/ObjectFile.h>

#include "jit/llvm_cpu/codegen_math.h"
#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/engine.h"
#include "support/tunables.h"

namespace shapevm::jit {
namespace {

constexpr const char* kFunction = "svm_test_sigmoid_f32";

// out0[i] = sigmoid(in[i]) and out1[i] = sigmoid(in[i]) + 1 over args.shape[0][0] elements: two
// vectorizable loops (with their scalar remainders) computing the same element function.
Status emitTwoLoops(llvm::Module& module, const std::string& symbol) {
  ir::Builder b(module.getContext());
  llvm::Function* fn = ir::beginKernel(module, symbol, b);
  ir::ArgsView args(b, fn->getArg(0));
  llvm::Value* in = args.data(0);
  llvm::Value* n = args.dim(0, 0);
  const ir::LoopHints hints{.no_unroll_after_vectorize = true};
  for (int loop = 0; loop < 2; ++loop) {
    llvm::Value* out = args.data(1 + loop);
    ir::emitLoop(
        b, b.getInt64(0), n, 1,
        [&](llvm::Value* i) {
          llvm::Value* x = ir::loadCompute(b, DType::Float32, ir::elementPtr(b, DType::Float32, in, i));
          llvm::Value* y = ir::callElementFunction(b, kFunction, x,
                                                   [](ir::Builder& builder, llvm::Value* v) {
                                                     return ir::unaryOp(builder, OpId::Sigmoid, DType::Float32, v);
                                                   },
                                                   {4, 8, 16});
          if (loop == 1) y = b.CreateFAdd(y, llvm::ConstantFP::get(b.getFloatTy(), 1.0));
          ir::storeCompute(b, DType::Float32, y, ir::elementPtr(b, DType::Float32, out, i));
        },
        "i", hints);
  }
  b.CreateRetVoid();
  return Status::ok();
}

// The names of the functions the object defines whose name starts with kFunction.
std::vector<std::string> elementFunctionsIn(std::string_view bytes) {
  auto buffer = llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(bytes.data(), bytes.size()), "kernel", false);
  auto file = llvm::object::ObjectFile::createObjectFile(buffer->getMemBufferRef());
  EXPECT_TRUE(static_cast<bool>(file));
  std::vector<std::string> names;
  if (!file) {
    llvm::consumeError(file.takeError());
    return names;
  }
  for (const llvm::object::SymbolRef& symbol : (*file)->symbols()) {
    auto name = symbol.getName();
    auto flags = symbol.getFlags();
    if (!name || !flags) {
      llvm::consumeError(name.takeError());
      llvm::consumeError(flags.takeError());
      continue;
    }
    if ((*flags & llvm::object::SymbolRef::SF_Undefined) == 0 && name->starts_with(kFunction))
      names.push_back(name->str());
  }
  return names;
}

// Under the kernel pipeline and LLVM's O3 one (jit_opt_pipeline=0, which deletes unused internal
// functions before its vectorizer runs).
class ElementFunction : public ::testing::TestWithParam<std::int64_t> {
 protected:
  void SetUp() override { ASSERT_TRUE(Tunables::set(Tunable::JitOptPipeline, GetParam()).isOk()); }
  void TearDown() override { Tunables::resetToDefaults(); }
};

TEST_P(ElementFunction, IsCompiledOncePerLaneCountAndComputesTheInlineResult) {
  auto engine = JitEngine::create();
  ASSERT_TRUE(engine.hasValue()) << engine.status().toString();
  const std::string symbol = "svm_test_two_sigmoid_loops";
  auto built = (*engine)->build(symbol, [&](llvm::Module& m) { return emitTwoLoops(m, symbol); });
  ASSERT_TRUE(built.hasValue()) << built.status().toString();
  auto object = (*engine)->emitObject(std::move(*built));
  ASSERT_TRUE(object.hasValue()) << object.status().toString();
  // The scalar function (both remainders call it) and the vector variants the vectorized loops call:
  // the main loops' width and, where the target's cost model vectorizes the epilogue too (znver5
  // does, at half the width), a narrower one. The variants of the other lane counts (at least one
  // of the three offered) were dropped before codegen.
  const std::vector<std::string> names = elementFunctionsIn((*engine)->objectBytes(**object));
  int scalar = 0, vector_variants = 0;
  for (const std::string& name : names) (name.find("_v") != std::string::npos ? vector_variants : scalar) += 1;
  EXPECT_EQ(scalar, 1) << ::testing::PrintToString(names);
  EXPECT_GE(vector_variants, 1) << ::testing::PrintToString(names);
  EXPECT_LE(vector_variants, 2) << ::testing::PrintToString(names);

  auto handle = (*engine)->link(std::move(*object));
  ASSERT_TRUE(handle.hasValue()) << handle.status().toString();
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> value(-30.f, 30.f);
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{67}, std::size_t{1000}}) {
    std::vector<float> in(n), out0(n, -7.f), out1(n, -7.f);
    for (float& x : in) x = value(rng);
    KernelArgs args{};
    args.data[0] = in.data();
    args.data[1] = out0.data();
    args.data[2] = out1.data();
    args.shape[0][0] = static_cast<std::int64_t>(n);
    reinterpret_cast<GeneratedKernelFn>(handle->address)(&args);
    for (std::size_t i = 0; i < n; ++i) {
      const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(in[i])));
      EXPECT_NEAR(out0[i], want, 1e-6 * want + 1e-37) << "n " << n << " element " << i;
      EXPECT_EQ(out1[i], out0[i] + 1.f) << "n " << n << " element " << i;
    }
  }
  ASSERT_TRUE((*engine)->remove(*handle).isOk());
}

INSTANTIATE_TEST_SUITE_P(Pipelines, ElementFunction, ::testing::Values(1, 0),
                         [](const ::testing::TestParamInfo<std::int64_t>& info) {
                           return info.param == 1 ? std::string("Kernel") : std::string("O3");
                         });

}  // namespace
}  // namespace shapevm::jit
