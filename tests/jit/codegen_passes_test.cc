// SPDX-License-Identifier: Apache-2.0
// The backend passes per kernel family: a hand-vectorized module (markHandVectorized, the matmul
// and conv families) or a memory-bound one (markMemoryBound, the elementwise family) is compiled
// without loop strength reduction and the post-RA scheduler, other modules with every pass; the
// kernels stay equal to the reference. And a matmul kernel whose B
// spec is strided (x @ W.T) carries no on-the-fly packing tile: run on a B whose rows turn out
// contiguous, its panels are packed before the tiles instead.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/engine.h"
#include "jit_test_util.h"
#include "support/tunables.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

// out[i] = in[i * step] * 2 + 1 over args.shape[0][0] elements (a strided loop: what loop strength
// reduction would rewrite).
Status emitStridedAxpy(llvm::Module& module, const std::string& symbol, std::int64_t step) {
  ir::Builder b(module.getContext());
  llvm::Function* fn = ir::beginKernel(module, symbol, b);
  ir::ArgsView args(b, fn->getArg(0));
  llvm::Value* in = args.data(0);
  llvm::Value* out = args.data(1);
  ir::emitLoop(b, b.getInt64(0), args.dim(0, 0), 1, [&](llvm::Value* i) {
    llvm::Value* x =
        ir::loadCompute(b, DType::Float32, ir::elementPtr(b, DType::Float32, in, b.CreateMul(i, b.getInt64(step))));
    llvm::Value* y = b.CreateFAdd(b.CreateFMul(x, llvm::ConstantFP::get(b.getFloatTy(), 2.0)),
                                  llvm::ConstantFP::get(b.getFloatTy(), 1.0));
    ir::storeCompute(b, DType::Float32, y, ir::elementPtr(b, DType::Float32, out, i));
  });
  b.CreateRetVoid();
  return Status::ok();
}

enum class Mark { None, HandVectorized, MemoryBound };

TEST(CodegenPasses, HandVectorizedAndMemoryBoundModulesSkipTheirBackendPassesAndStayCorrect) {
  auto engine = JitEngine::create();
  ASSERT_TRUE(engine.hasValue()) << engine.status().toString();
  const std::int64_t saved = Tunables::get(Tunable::JitCodegenLevel);
  ASSERT_TRUE(Tunables::set(Tunable::JitCodegenLevel, 3).isOk());
  constexpr std::int64_t kStep = 3, kCount = 37;
  for (Mark mark : {Mark::None, Mark::HandVectorized, Mark::MemoryBound}) {
    const std::string symbol = mark == Mark::None             ? "svm_test_passes_plain"
                               : mark == Mark::HandVectorized ? "svm_test_passes_hand"
                                                              : "svm_test_passes_memory";
    const std::uint64_t skipped = (*engine)->codegenPassesSkipped();
    auto handle = (*engine)->compile(symbol, [&](llvm::Module& m) {
      if (mark == Mark::HandVectorized) markHandVectorized(m);
      if (mark == Mark::MemoryBound) markMemoryBound(m);
      return emitStridedAxpy(m, symbol, kStep);
    });
    ASSERT_TRUE(handle.hasValue()) << handle.status().toString();
    // Loop strength reduction, its freeze canonicalization and the post-RA scheduler: all three are
    // in x86-64's pipeline at this level.
    EXPECT_EQ((*engine)->codegenPassesSkipped() - skipped, mark == Mark::None ? 0u : 3u) << symbol;
    std::vector<float> in(kCount * kStep), out(kCount, -7.0f);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = 0.25f * static_cast<float>(i) - 5.0f;
    KernelArgs args{};
    args.data[0] = in.data();
    args.data[1] = out.data();
    args.shape[0][0] = kCount;
    reinterpret_cast<GeneratedKernelFn>(handle->address)(&args);
    for (std::int64_t i = 0; i < kCount; ++i) {
      EXPECT_FLOAT_EQ(out[static_cast<std::size_t>(i)], in[static_cast<std::size_t>(i * kStep)] * 2 + 1)
          << symbol << " element " << i;
    }
    ASSERT_TRUE((*engine)->remove(*handle).isOk());
  }
  ASSERT_TRUE(Tunables::set(Tunable::JitCodegenLevel, saved).isOk());
}

// [k, n] with rows `row_stride` >= n apart and columns 1 apart: a column slice of a wider matrix.
Value rowStridedWeight(std::int64_t k, std::int64_t n, std::int64_t row_stride, std::mt19937& rng) {
  Tensor wide = randomTensor(DType::Float32, Shape{k, row_stride}, rng, Layout::Contiguous, 1.0);
  return Value::fromTensor(wide.asStrided(Shape{k, n}, Shape{row_stride, 1}, 0).value());
}

// One kernel compiled for x @ W.T (B's strides read at run time) and run on W.T and on row-major
// Bs (what the removed on-the-fly tile used to pack): odd M (whole tiles and a tail), N with whole
// 64-column panels and a partial one, K over one and two blocks; static and symbolic specs.
TEST(CodegenPasses, StridedBSpecRunsOnEveryBLayoutWithoutTheOnTheFlyTile) {
  std::mt19937 rng(23);
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{13, 33, 128}, {7, 300, 65}}) {
    for (Dims dims : {Dims::Static, Dims::Symbolic}) {
      std::vector<std::vector<Value>> sets = {
          {operand(DType::Float32, Shape{m, k}, rng), transposedWeight(DType::Float32, k, n, rng)},
          {operand(DType::Float32, Shape{m, k}, rng), rowStridedWeight(k, n, n + 5, rng)},
          {operand(DType::Float32, Shape{m, k}, rng), rowStridedWeight(k, n, n, rng)},
      };
      EXPECT_TRUE(sameKernelMatches(specFor("matmul", sets[0], {}, dims), sets))
          << m << "x" << k << "x" << n << (dims == Dims::Symbolic ? " symbolic" : " static");
    }
  }
}

}  // namespace
}  // namespace shapevm::jit
