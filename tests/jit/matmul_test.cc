// SPDX-License-Identifier: Apache-2.0
// Differential tests of the JIT's matmul family against the reference kernel: odd and tile-sized
// shapes (M and N tails), batched with numpy broadcasting of batch dims, 1-D operands, transposed
// and strided operands (x @ W.T), float16 / bfloat16 / mixed dtypes, static and symbolic specs;
// every candidate of the tuning search space; fused epilogues against the reference run op by op;
// several threads giving the same bits as one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "jit/llvm_cpu/library_onednn.h"
#include "jit_test_util.h"
#include "support/thread_pool.h"
#include "support/tunables.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

::testing::AssertionResult matmulMatches(const Value& a, const Value& b, Dims dims = Dims::Static) {
  std::vector<Value> inputs = {a, b};
  return matchesReference(specFor("matmul", inputs, {}, dims), inputs);
}

// The backend's CPU runs bf16 pair dot products (vdpbf16ps): bf16 x bf16 kernels use them.
bool hostHasBf16Dot() {
  return sharedBackend().capabilities().isa.bf16_dot;
}

// One symbolic kernel compiled for the first pair, run on every pair.
::testing::AssertionResult symbolicKernelMatches(const std::vector<std::vector<Value>>& pairs) {
  return sameKernelMatches(specFor("matmul", pairs[0], {}, Dims::Symbolic), pairs);
}

// Tails (M, N, K blocks, the dot path) at the very edge of mapped memory.
TEST(MatmulJit, NoAccessOutsideTheOperands) {
  std::mt19937 rng(8);
  const std::vector<std::pair<Shape, Shape>> cases = {{Shape{1, 1}, Shape{1, 1}},       {Shape{7, 13}, Shape{13, 5}},
                                                      {Shape{17, 300}, Shape{300, 33}}, {Shape{9, 40}, Shape{40, 50}},
                                                      {Shape{2, 3, 5, 6}, Shape{6, 7}}, {Shape{13}, Shape{13, 3}},
                                                      {Shape{3, 40}, Shape{40}}};
  for (const auto& [a_shape, b_shape] : cases) {
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      std::vector<Value> inputs = {operand(dtype, a_shape, rng), operand(dtype, b_shape, rng)};
      EXPECT_TRUE(guardedRunMatches(specFor("matmul", inputs), inputs)) << a_shape.toString() << b_shape.toString();
    }
    // Both operands stored transposed (a strided kernel; the dot path for B = W.T).
    std::vector<Value> inputs = {operand(DType::Float32, a_shape, rng), operand(DType::Float32, b_shape, rng)};
    std::vector<Value> t = {Value::fromTensor(guardedCopy(inputs[0].tensor(), false, true)),
                            Value::fromTensor(guardedCopy(inputs[1].tensor(), false, true))};
    EXPECT_TRUE(guardedRunMatches(specFor("matmul", t, {}, Dims::Symbolic), inputs, true))
        << a_shape.toString() << b_shape.toString();
  }
}

struct Case {
  Shape a, b;
};

TEST(MatmulJit, Shapes2D) {
  std::mt19937 rng(1);
  const std::vector<Case> cases = {
      {Shape{1, 1}, Shape{1, 1}},          {Shape{7, 13}, Shape{13, 5}},       {Shape{65, 129}, Shape{129, 33}},
      {Shape{320, 128}, Shape{128, 1024}}, {Shape{32, 256}, Shape{256, 1024}}, {Shape{9, 300}, Shape{300, 40}},
      {Shape{17, 513}, Shape{513, 64}},    {Shape{8, 32}, Shape{32, 32}},      {Shape{3, 0}, Shape{0, 5}}};
  for (const Case& c : cases) {
    for (Dims dims : {Dims::Static, Dims::Symbolic}) {
      EXPECT_TRUE(matmulMatches(operand(DType::Float32, c.a, rng), operand(DType::Float32, c.b, rng), dims))
          << c.a.toString() << " x " << c.b.toString() << (dims == Dims::Static ? " static" : " symbolic");
    }
  }
}

TEST(MatmulJit, Batched) {
  std::mt19937 rng(2);
  const std::vector<Case> cases = {{Shape{2, 3, 17, 9}, Shape{9, 11}},     {Shape{4, 1, 5, 6}, Shape{3, 6, 7}},
                                   {Shape{5, 6}, Shape{2, 3, 6, 33}},      {Shape{3, 8, 40}, Shape{3, 40, 35}},
                                   {Shape{2, 1, 9, 4}, Shape{1, 3, 4, 2}}, {Shape{2, 7}, Shape{3, 7, 5}},
                                   {Shape{2, 3, 5, 7}, Shape{7}}};
  for (const Case& c : cases) {
    for (Dims dims : {Dims::Static, Dims::Symbolic}) {
      EXPECT_TRUE(matmulMatches(operand(DType::Float32, c.a, rng), operand(DType::Float32, c.b, rng), dims))
          << c.a.toString() << " x " << c.b.toString();
    }
  }
}

TEST(MatmulJit, VectorOperands) {
  std::mt19937 rng(3);
  const std::vector<Case> cases = {{Shape{13}, Shape{13}}, {Shape{13}, Shape{13, 40}},  {Shape{40, 13}, Shape{13}},
                                   {Shape{1}, Shape{1}},   {Shape{129}, Shape{129, 1}}, {Shape{200}, Shape{200, 70}}};
  for (const Case& c : cases) {
    for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
      EXPECT_TRUE(matmulMatches(operand(DType::Float32, c.a, rng, layout), operand(DType::Float32, c.b, rng, layout)))
          << c.a.toString() << " x " << c.b.toString();
    }
  }
}

// x @ W.T (the common linear layer) and other layouts of either operand.
TEST(MatmulJit, TransposedAndStridedOperands) {
  std::mt19937 rng(4);
  for (auto [m, k, n] :
       {std::tuple<std::int64_t, std::int64_t, std::int64_t>{7, 13, 5}, {65, 129, 33}, {64, 128, 256}, {1, 300, 17}}) {
    EXPECT_TRUE(matmulMatches(operand(DType::Float32, Shape{m, k}, rng), transposedWeight(DType::Float32, k, n, rng)))
        << m << "x" << k << " @ W.T " << n;
    EXPECT_TRUE(matmulMatches(operand(DType::Float32, Shape{m, k}, rng), transposedWeight(DType::Float32, k, n, rng),
                              Dims::Symbolic));
    for (auto [la, lb] :
         {std::pair{Layout::Contiguous, Layout::Transposed}, std::pair{Layout::Transposed, Layout::Contiguous},
          std::pair{Layout::Contiguous, Layout::Strided}, std::pair{Layout::Strided, Layout::Strided},
          std::pair{Layout::Transposed, Layout::Transposed}}) {
      EXPECT_TRUE(
          matmulMatches(operand(DType::Float32, Shape{m, k}, rng, la), operand(DType::Float32, Shape{k, n}, rng, lb)))
          << m << "x" << k << "x" << n;
    }
  }
  // The dot-product path (few rows or columns, both operands contiguous along K), with K tails.
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1024, 70},
                         {3, 129, 9},
                         {7, 15, 4},
                         {1, 1, 1},
                         {200, 65, 3},
                         {5, 0, 6}}) {
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      EXPECT_TRUE(matmulMatches(operand(dtype, Shape{m, k}, rng), transposedWeight(dtype, k, n, rng)))
          << m << "x" << k << "x" << n;
    }
  }
  EXPECT_TRUE(matmulMatches(operand(DType::Float16, Shape{2, 4, 33}, rng),
                            transposedWeight(DType::Float32, 33, 21, rng), Dims::Symbolic));
  // Batched transposed operands.
  EXPECT_TRUE(matmulMatches(operand(DType::Float32, Shape{3, 9, 20}, rng, Layout::Transposed),
                            operand(DType::Float32, Shape{3, 20, 33}, rng, Layout::Strided)));
}

// Packing a B stored K-contiguous (x @ W.T): 16 x 16 blocks transposed in registers, K tails
// (element by element), column tails (zeroed lanes) and 16-column groups past N (zero-filled),
// with K and N around 16 and NR (64) and over two K blocks. A strided A keeps small N off the dot
// path.
TEST(MatmulJit, TransposedBPacking) {
  std::mt19937 rng(11);
  const std::int64_t ks[] = {15, 1, 16, 17, 33, 130, 300};  // the first B sets the spec: not contiguous
  const std::int64_t ns[] = {63, 1, 64, 65, 200};
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    for (Layout a_layout : {Layout::Contiguous, Layout::Strided}) {
      // One symbolic kernel (6 x 64 tiles, K blocks of 256) over every K x N, M with a tail.
      std::vector<std::vector<Value>> pairs;
      for (std::int64_t k : ks) {
        for (std::int64_t n : ns) {
          pairs.push_back({operand(dtype, Shape{13, k}, rng, a_layout), transposedWeight(dtype, k, n, rng)});
        }
      }
      EXPECT_TRUE(symbolicKernelMatches(pairs)) << dtypeName(dtype) << " A layout " << static_cast<int>(a_layout);
    }
    // Static few-row kernels (4 x 64 tiles, K blocks of 128: K = 130 leaves a 2-row block).
    for (auto [k, n] : {std::pair<std::int64_t, std::int64_t>{130, 65}, {17, 200}, {33, 64}}) {
      EXPECT_TRUE(matmulMatches(operand(dtype, Shape{13, k}, rng), transposedWeight(dtype, k, n, rng)))
          << dtypeName(dtype) << " 13x" << k << " @ W.T " << n;
    }
  }
  // The loads stay inside W: its last column ends at a guard page (A transposed too: no dot path).
  for (auto [k, n] : {std::pair<std::int64_t, std::int64_t>{33, 65}, {16, 17}, {130, 1}}) {
    std::vector<Value> inputs = {operand(DType::Float32, Shape{9, k}, rng), operand(DType::Float32, Shape{k, n}, rng)};
    std::vector<Value> t = {Value::fromTensor(guardedCopy(inputs[0].tensor(), false, true)),
                            Value::fromTensor(guardedCopy(inputs[1].tensor(), false, true))};
    EXPECT_TRUE(guardedRunMatches(specFor("matmul", t, {}, Dims::Symbolic), inputs, true)) << k << "x" << n;
  }
  // A contiguous [K, 1] B under a symbolic spec: K-contiguous too (rows of one element), but its
  // columns are 1 apart, so it is packed element by element.
  EXPECT_TRUE(symbolicKernelMatches({{operand(DType::Float32, Shape{20, 40}, rng, Layout::Strided),
                                      operand(DType::Float32, Shape{40, 1}, rng)}}));
}

// Packing A's row panels (candidates with mc > 0): a row-major A goes through the same register
// transpose (K tails element by element, M tails zeroed), a strided one element by element.
TEST(MatmulJit, PackedAPanels) {
  std::mt19937 rng(12);
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    for (Layout a_layout : {Layout::Contiguous, Layout::Strided}) {
      std::vector<std::vector<Value>> sets;
      for (auto [m, k] : {std::pair<std::int64_t, std::int64_t>{20, 15}, {1, 1}, {13, 16}, {7, 17}, {40, 33}, {9, 130},
                          {25, 300}}) {
        sets.push_back({operand(dtype, Shape{m, k}, rng, a_layout), operand(dtype, Shape{k, 70}, rng)});
      }
      KernelSpec spec = specFor("matmul", sets[0], {}, Dims::Symbolic);
      spec.params.mr = 6;
      spec.params.mc = 12;
      spec.params.kc = 256;
      EXPECT_TRUE(sameKernelMatches(spec, sets)) << dtypeName(dtype) << " A layout " << static_cast<int>(a_layout);
    }
  }
}

TEST(MatmulJit, HalfPrecisionAndMixedDTypes) {
  std::mt19937 rng(5);
  const DType dtypes[] = {DType::Float16, DType::BFloat16};
  for (DType dtype : dtypes) {
    for (const Case& c : {Case{Shape{7, 13}, Shape{13, 5}}, Case{Shape{65, 129}, Shape{129, 33}},
                          Case{Shape{32, 256}, Shape{256, 1024}}, Case{Shape{2, 3, 17, 9}, Shape{9, 11}},
                          Case{Shape{300}, Shape{300, 20}}}) {
      EXPECT_TRUE(matmulMatches(operand(dtype, c.a, rng), operand(dtype, c.b, rng)))
          << dtypeName(dtype) << " " << c.a.toString();
    }
    EXPECT_TRUE(matmulMatches(operand(dtype, Shape{33, 64}, rng), transposedWeight(dtype, 64, 48, rng)))
        << dtypeName(dtype);
    EXPECT_TRUE(matmulMatches(operand(dtype, Shape{33, 64}, rng, Layout::Strided), operand(dtype, Shape{64, 50}, rng),
                              Dims::Symbolic));
  }
  // Mixed: f16 x f32 -> f32, bf16 x f16 -> f32, f32 x bf16 -> f32.
  EXPECT_TRUE(matmulMatches(operand(DType::Float16, Shape{17, 40}, rng), operand(DType::Float32, Shape{40, 35}, rng)));
  EXPECT_TRUE(matmulMatches(operand(DType::BFloat16, Shape{17, 40}, rng), operand(DType::Float16, Shape{40, 35}, rng)));
  EXPECT_TRUE(
      matmulMatches(operand(DType::Float32, Shape{5, 40}, rng), transposedWeight(DType::BFloat16, 40, 70, rng)));
}

TEST(MatmulJit, SymbolicKernelOnSeveralShapes) {
  std::mt19937 rng(6);
  // One kernel compiled for [?, ?] x [?, ?] (contiguous), run on many shapes incl. tails and K = 0.
  std::vector<std::vector<Value>> pairs;
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{8, 32, 32},
                         {1, 1, 1},
                         {7, 13, 5},
                         {17, 300, 65},
                         {64, 600, 100},
                         {3, 0, 4},
                         {0, 5, 6},
                         {9, 8, 0}}) {
    pairs.push_back({operand(DType::Float32, Shape{m, k}, rng), operand(DType::Float32, Shape{k, n}, rng)});
  }
  EXPECT_TRUE(symbolicKernelMatches(pairs));
  // The same strided kernel takes the tiled and the dot-product path by the runtime layout.
  std::vector<std::vector<Value>> paths = {
      {operand(DType::Float32, Shape{3, 40}, rng, Layout::Strided), transposedWeight(DType::Float32, 40, 50, rng)},
      {operand(DType::Float32, Shape{3, 40}, rng), transposedWeight(DType::Float32, 40, 50, rng)},
      {operand(DType::Float32, Shape{30, 40}, rng), transposedWeight(DType::Float32, 40, 50, rng)},
      {operand(DType::Float32, Shape{30, 40}, rng), transposedWeight(DType::Float32, 40, 5, rng)},
      {operand(DType::Float32, Shape{3, 40}, rng), operand(DType::Float32, Shape{40, 50}, rng)}};
  EXPECT_TRUE(symbolicKernelMatches(paths));
  // A strided kernel takes any layout.
  std::vector<std::vector<Value>> strided = {
      {operand(DType::Float32, Shape{9, 20}, rng, Layout::Strided), transposedWeight(DType::Float32, 20, 33, rng)},
      {operand(DType::Float32, Shape{40, 70}, rng), operand(DType::Float32, Shape{70, 20}, rng)},
      {operand(DType::Float32, Shape{3, 5}, rng, Layout::Transposed),
       operand(DType::Float32, Shape{5, 129}, rng, Layout::Strided)}};
  EXPECT_TRUE(symbolicKernelMatches(strided));
  // A batched kernel with different broadcasts per call.
  std::vector<std::vector<Value>> batched = {
      {operand(DType::Float32, Shape{2, 3, 5, 6}, rng), operand(DType::Float32, Shape{2, 3, 6, 7}, rng)},
      {operand(DType::Float32, Shape{1, 3, 5, 6}, rng), operand(DType::Float32, Shape{4, 1, 6, 9}, rng)},
      {operand(DType::Float32, Shape{4, 2, 17, 9}, rng), operand(DType::Float32, Shape{1, 1, 9, 40}, rng)}};
  EXPECT_TRUE(symbolicKernelMatches(batched));
}

// A range kernel (M in [lo, hi], K and N static) run at both range ends and at odd sizes inside:
// with N a multiple of every tile width the kernel has no partial-panel code, with M static and a
// multiple of the tile rows no 1-row tiles (matmul_emitter.cc: cols_whole_, rows_whole_), and a B
// = W.T goes through the compiled column packer (PackBColumnsFn). Odd K leaves a K tail in it.
TEST(MatmulJit, RangeKernelAtTheEndsAndOddSizes) {
  std::mt19937 rng(23);
  struct RangeCase {
    std::int64_t lo, hi, k, n;
    bool transposed_b;
  };
  for (const RangeCase& c :
       {RangeCase{256, 1024, 128, 128, false}, RangeCase{256, 1024, 37, 128, true}, RangeCase{1, 97, 48, 64, false},
        RangeCase{5, 70, 131, 200, true}, RangeCase{7, 40, 20, 75, false}}) {
    auto inputsAt = [&](std::int64_t m) {
      return std::vector<Value>{operand(DType::Float32, Shape{m, c.k}, rng),
                                c.transposed_b ? transposedWeight(DType::Float32, c.k, c.n, rng)
                                               : operand(DType::Float32, Shape{c.k, c.n}, rng)};
    };
    KernelSpec spec = specFor("matmul", inputsAt(c.lo));
    spec.inputs[0].dims[0].size = -1;
    static_cast<DimRange&>(spec.inputs[0].dims[0]) = DimRange::between(c.lo, c.hi);
    std::vector<std::vector<Value>> sets;
    for (std::int64_t m : {c.lo, c.hi, c.lo + 1, ((c.lo + c.hi) / 2) | 1, c.hi - 1}) sets.push_back(inputsAt(m));
    EXPECT_TRUE(sameKernelMatches(spec, sets))
        << c.lo << ".." << c.hi << " x " << c.k << " x " << c.n << (c.transposed_b ? " (B = W.T)" : "");
  }
  // Static M and N that are multiples of the tiles (4/6 rows, 16/64 columns): whole tiles only.
  for (bool transposed_b : {false, true}) {
    for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{960, 128, 128}, {48, 33, 64}}) {
      std::vector<Value> inputs = {
          operand(DType::Float32, Shape{m, k}, rng),
          transposed_b ? transposedWeight(DType::Float32, k, n, rng) : operand(DType::Float32, Shape{k, n}, rng)};
      EXPECT_TRUE(matchesReference(specFor("matmul", inputs), inputs)) << m << "x" << k << "x" << n;
    }
  }
}

// x @ W.T with M a range: A's rows and B's columns are contiguous along K, so a call with fewer
// than MR rows (6 for a dynamic M) takes the dot-product path. A range whose low end has MR rows
// never does, and its kernel carries no dot-product code (fewer basic blocks before the IR
// passes); both kernels agree with the reference at their range ends and inside.
TEST(MatmulJit, ARangeThatCannotTakeTheDotPathEmitsNoDotPath) {
  std::mt19937 rng(29);
  const Value w = transposedWeight(DType::Float32, 96, 1024, rng);
  auto inputsAt = [&](std::int64_t m) { return std::vector<Value>{operand(DType::Float32, Shape{m, 96}, rng), w}; };
  auto rangeSpec = [&](std::int64_t lo) {
    KernelSpec spec = specFor("matmul", inputsAt(lo));
    spec.inputs[0].dims[0].size = -1;
    static_cast<DimRange&>(spec.inputs[0].dims[0]) = DimRange::between(lo, 200);
    return sharedLlvmBackend().targetSpec(spec);
  };
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  ASSERT_NE(family, nullptr);
  const auto* emitter = dynamic_cast<const LlvmKernelEmitter*>(family);
  ASSERT_NE(emitter, nullptr);
  auto blocks = [&](const KernelSpec& spec) {
    llvm::LLVMContext context;
    llvm::Module module("range", context);
    const Status status = emitter->emit(spec, module, "svm_test_range");
    EXPECT_TRUE(status.isOk()) << status.toString();
    std::size_t count = 0;
    for (const llvm::Function& function : module) count += function.size();
    return count;
  };
  const KernelSpec may_dot = rangeSpec(5), never_dot = rangeSpec(6);
  EXPECT_LT(blocks(never_dot), blocks(may_dot));
  for (const KernelSpec& spec : {may_dot, never_dot}) {
    const std::int64_t lo = spec.inputs[0].dims[0].lo;
    std::vector<std::vector<Value>> sets;
    for (std::int64_t m : {lo, lo + 1, std::int64_t{97}, std::int64_t{200}}) sets.push_back(inputsAt(m));
    EXPECT_TRUE(sameKernelMatches(spec, sets)) << "M in " << lo << "..200";
  }
}

TEST(MatmulJit, SupportAndSymbols) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(matmulFamily(OpId::Sum), nullptr);
  std::mt19937 rng(7);
  std::vector<Value> ints = {Value::fromTensor(randomTensor(DType::Int64, Shape{3, 4}, rng)),
                             Value::fromTensor(randomTensor(DType::Int64, Shape{4, 2}, rng))};
  Status status = family->supports(specFor("matmul", ints));
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("int64 x int64 stays interpreted"), std::string::npos) << status.message();
  std::vector<Value> rank5 = {operand(DType::Float32, Shape{1, 2, 2, 3, 4}, rng),
                              operand(DType::Float32, Shape{4, 2}, rng)};
  EXPECT_FALSE(family->supports(specFor("matmul", rank5)).isOk());
  std::vector<Value> mismatch = {operand(DType::Float32, Shape{3, 4}, rng), operand(DType::Float32, Shape{5, 2}, rng)};
  EXPECT_FALSE(family->supports(specFor("matmul", mismatch)).isOk());

  std::vector<Value> linear = {operand(DType::Float32, Shape{320, 128}, rng),
                               operand(DType::Float32, Shape{128, 1024}, rng)};
  KernelSpec spec = specFor("matmul", linear);
  spec.inputs[0].dims[0] = DimSpec{};
  EXPECT_EQ(family->symbolStem(spec), "matmul_f32_Mdyn_K128_N1024");
  std::vector<Value> batched = {operand(DType::BFloat16, Shape{2, 3, 17, 9}, rng),
                                transposedWeight(DType::BFloat16, 9, 11, rng)};
  EXPECT_EQ(family->symbolStem(specFor("matmul", batched)),
            std::string("matmul_bf16_b2_M17_K9_N11_Bstrided") + (hostHasBf16Dot() ? "_bf16pairs" : ""));
  std::vector<Value> vec = {operand(DType::Float16, Shape{9}, rng), operand(DType::Float32, Shape{9, 4}, rng)};
  EXPECT_EQ(family->symbolStem(specFor("matmul", vec, {}, Dims::Symbolic)), "matmul_f16f32_Mvec_Kdyn_Ndyn");
  // A kernel declines inputs that do not fit its spec (the reference then runs).
  auto kernel = compileKernel(sharedBackend(), *family, specFor("matmul", linear));
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  std::vector<Value> other = {operand(DType::Float32, Shape{320, 64}, rng),
                              operand(DType::Float32, Shape{64, 1024}, rng)};
  std::vector<const Value*> pointers = {&other[0], &other[1]};
  std::vector<Value> out(1);
  EXPECT_FALSE(invokeCompiled(**kernel, pointers, out).isOk());
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

// ---- the search space: every candidate is a correct kernel ----

::testing::AssertionResult everyCandidateMatches(const std::vector<Value>& inputs, Dims dims = Dims::Static) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  const KernelSpec base = specFor("matmul", inputs, {}, dims);
  const std::vector<KernelParams> space = family->searchSpace(base);
  if (space.empty() || !space[0].isDefault()) return ::testing::AssertionFailure() << "the default is not first";
  for (const KernelParams& params : space) {
    KernelSpec spec = base;
    spec.params = params;
    if (params.library != 0) {
      // A oneDNN primitive: this CPU may lack its ISA for the dtype (bf16/f16 without AVX-512),
      // which fails the compile with oneDNN's reason (the tuner then keeps generated code).
      if (Status created = onednn::createFor(spec); !created.isOk()) {
        if (created.message().find("oneDNN") == std::string::npos)
          return ::testing::AssertionFailure() << created.message();
        continue;
      }
    }
    ::testing::AssertionResult result = matchesReference(spec, inputs);
    if (!result) return result << " [" << params.toString() << "]";
  }
  return ::testing::AssertionSuccess() << space.size() << " candidates";
}

TEST(MatmulJit, EveryCandidateMatchesReference) {
  std::mt19937 rng(9);
  // Small M (B read in place, tail panels packed), large M with several K / M / N blocks and tails.
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{17, 300, 65},
                         {1, 17, 7},
                         {63, 513, 97},
                         {130, 600, 530}}) {
    std::vector<Value> inputs = {operand(DType::Float32, Shape{m, k}, rng), operand(DType::Float32, Shape{k, n}, rng)};
    ::testing::AssertionResult result = everyCandidateMatches(inputs);
    EXPECT_TRUE(result) << m << "x" << k << "x" << n;
  }
  // 16-bit operands (converted while packing), batches, a transposed B, a symbolic kernel.
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    EXPECT_TRUE(everyCandidateMatches({operand(dtype, Shape{65, 129}, rng), operand(dtype, Shape{129, 33}, rng)}))
        << dtypeName(dtype);
  }
  EXPECT_TRUE(everyCandidateMatches(
      {operand(DType::Float32, Shape{2, 3, 17, 40}, rng), operand(DType::Float32, Shape{3, 40, 70}, rng)}));
  EXPECT_TRUE(
      everyCandidateMatches({operand(DType::Float32, Shape{33, 64}, rng), transposedWeight(DType::Float32, 64, 48, rng)}));
  EXPECT_TRUE(everyCandidateMatches(
      {operand(DType::Float32, Shape{70, 300}, rng), operand(DType::Float32, Shape{300, 45}, rng)}, Dims::Symbolic));
}

TEST(MatmulJit, SearchSpaceAndParamSymbols) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  std::mt19937 rng(10);
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{32, 768, 4096}, {640, 128, 1024}}) {
    std::vector<Value> inputs = {operand(DType::Float32, Shape{m, k}, rng), operand(DType::Float32, Shape{k, n}, rng)};
    const KernelSpec base = specFor("matmul", inputs);
    const std::vector<KernelParams> space = family->searchSpace(base);
    ASSERT_FALSE(space.empty());
    EXPECT_TRUE(space[0].isDefault());
    std::vector<std::string> stems;
    for (const KernelParams& params : space) {
      KernelSpec spec = base;
      spec.params = params;
      EXPECT_TRUE(family->supports(spec).isOk()) << params.toString();
      stems.push_back(family->symbolStem(spec));
    }
    std::sort(stems.begin(), stems.end());
    EXPECT_EQ(std::adjacent_find(stems.begin(), stems.end()), stems.end()) << "two candidates share a symbol";
  }
  std::vector<Value> inputs = {operand(DType::Float32, Shape{8, 8}, rng), operand(DType::Float32, Shape{8, 8}, rng)};
  KernelSpec spec = specFor("matmul", inputs);
  spec.params = KernelParams{.mr = 8, .nr = 32, .kc = 512};
  EXPECT_EQ(family->symbolStem(spec), "matmul_f32_M8_K8_N8_mr8_nr32_kc512");
  spec.params = KernelParams{.mr = 16, .nr = 64};  // 64 accumulators: more than the registers
  EXPECT_FALSE(family->supports(spec).isOk());
  spec.params = KernelParams{.nr = 24};
  EXPECT_FALSE(family->supports(spec).isOk());
}

// ---- bfloat16 pair dot products ----

// C = A @ B in double from the operands' own values, rounded once to `dtype` (bfloat16 by
// default): what an exact kernel would store (an oracle independent of the reference kernel).
Tensor exactProduct(const Tensor& a, const Tensor& b, DType dtype = DType::BFloat16) {
  const std::int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  Tensor c = std::move(Tensor::empty(dtype, Shape{m, n}).value());
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < k; ++p) sum += a.elementAsDouble(i * k + p) * b.elementAsDouble(p * n + j);
      storeFromDouble(c.rawData(), dtype, i * n + j, sum);
    }
  }
  return c;
}

// Validation's relative L2 error of `got` against `want`.
double relL2(const Tensor& got, const Tensor& want) {
  const std::vector<Value> expected = {Value::fromTensor(want)}, actual = {Value::fromTensor(got)};
  return compareOutputs(expected, actual).rel_l2;
}

// bfloat16 x bfloat16 with A contiguous along K runs vdpbf16ps on K pairs where the CPU has it
// (the symbol says "bf16pairs"): odd K (the last pair half zero), odd K blocks, M / N tails, B
// row-major, transposed (x @ W.T) and strided, one symbolic kernel over every shape, and the
// packed-weight cache. Each result matches the reference and is within bfloat16 rounding of the
// exact product (tighter than validation's 1.6e-2), over several K blocks too; bf16dot=-1,
// packed A, a strided A and float32 keep the widening path.
TEST(MatmulJit, Bf16PairDotProducts) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  std::mt19937 rng(21);
  const bool pairs = hostHasBf16Dot();
  auto usesPairs = [&](const KernelSpec& spec) {
    return family->symbolStem(spec).find("bf16pairs") != std::string::npos;
  };
  std::vector<Value> square = {operand(DType::BFloat16, Shape{8, 8}, rng), operand(DType::BFloat16, Shape{8, 8}, rng)};
  KernelSpec spec = specFor("matmul", square);
  EXPECT_EQ(usesPairs(spec), pairs);
  spec.params.bf16_dot = -1;
  EXPECT_FALSE(usesPairs(spec));
  spec.params = KernelParams{.mr = 6, .mc = 12};
  EXPECT_FALSE(usesPairs(spec)) << "packed A panels are float32";
  EXPECT_FALSE(usesPairs(
      specFor("matmul", {operand(DType::BFloat16, Shape{8, 8}, rng, Layout::Strided), square[1]}, {}, Dims::Symbolic)));
  EXPECT_FALSE(usesPairs(specFor("matmul", {operand(DType::Float32, Shape{8, 8}, rng), square[1]})));
  KernelSpec f32 = specFor("matmul", {operand(DType::Float32, Shape{8, 8}, rng), square[1]});
  f32.params.bf16_dot = 1;
  EXPECT_FALSE(family->supports(f32).isOk()) << "bf16dot=1 where pairs cannot run is an error, not a silent widening";
  spec = specFor("matmul", square);
  spec.params.bf16_dot = 1;
  EXPECT_EQ(family->supports(spec).isOk(), pairs);
  if (pairs) {
    const std::vector<KernelParams> space = family->searchSpace(specFor("matmul", square));
    EXPECT_NE(std::find(space.begin(), space.end(), KernelParams{.bf16_dot = -1}), space.end())
        << "the tuner must be able to measure the widening kernel against the pairs";
  }

  const std::int64_t ks[] = {13, 1, 2, 16, 17, 33, 63, 130, 301};
  const std::int64_t ns[] = {65, 1, 16, 64, 130};
  for (int layout = 0; layout < 3; ++layout) {
    std::vector<std::vector<Value>> sets;
    for (std::int64_t k : ks) {
      for (std::int64_t n : ns) {
        Value b = layout == 0   ? operand(DType::BFloat16, Shape{k, n}, rng)
                  : layout == 1 ? transposedWeight(DType::BFloat16, k, n, rng)
                                : operand(DType::BFloat16, Shape{k, n}, rng, Layout::Strided);
        sets.push_back({operand(DType::BFloat16, Shape{7 + k % 11, k}, rng), b});
      }
    }
    for (int kc : {0, 16, 7}) {  // default K blocks, even ones, odd ones
      KernelSpec symbolic = specFor("matmul", sets[0], {}, Dims::Symbolic);
      symbolic.params.kc = kc;
      EXPECT_EQ(usesPairs(symbolic), pairs);
      EXPECT_TRUE(sameKernelMatches(symbolic, sets)) << "B layout " << layout << " kc " << kc;
      auto kernel = compileKernel(sharedBackend(), *family, symbolic);
      ASSERT_TRUE(static_cast<bool>(kernel)) << kernel.status().toString();
      for (const std::vector<Value>& inputs : sets) {
        std::vector<const Value*> pointers = pointersTo(inputs);
        std::vector<Value> out(1);
        ASSERT_TRUE(invokeCompiled(**kernel, pointers, out).isOk());
        // Rounding to bfloat16 once, up to 2^-9 relative per element: the partial sums between
        // K blocks stay float32.
        const Tensor exact = exactProduct(inputs[0].tensor(), inputs[1].tensor().contiguous().value());
        EXPECT_LE(relL2(out[0].tensor(), exact), 4e-3)
            << inputs[0].tensor().describe() << " @ " << inputs[1].tensor().describe() << " layout " << layout << " kc "
            << kc;
      }
      ASSERT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
    }
  }

  // float16 too: its partial sums over 19 K blocks stay float32 (in float16 they drifted).
  {
    std::vector<Value> inputs = {operand(DType::Float16, Shape{9, 301}, rng),
                                 operand(DType::Float16, Shape{301, 70}, rng)};
    KernelSpec half = specFor("matmul", inputs);
    half.params.kc = 16;
    auto kernel = compileKernel(sharedBackend(), *family, half);
    ASSERT_TRUE(static_cast<bool>(kernel)) << kernel.status().toString();
    std::vector<Value> out(1);
    ASSERT_TRUE(invokeCompiled(**kernel, pointersTo(inputs), out).isOk());
    EXPECT_LE(relL2(out[0].tensor(), exactProduct(inputs[0].tensor(), inputs[1].tensor(), DType::Float16)), 5e-4);
    ASSERT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  }

  // A weight packed once into the cache (pairs layout) and read back by later calls.
  struct Restore {
    std::int64_t entries = Tunables::get(Tunable::PackedWeightEntries);
    std::int64_t min_elements = Tunables::get(Tunable::PackedWeightMinElements);
    ~Restore() {
      (void)Tunables::set(Tunable::PackedWeightEntries, entries);
      (void)Tunables::set(Tunable::PackedWeightMinElements, min_elements);
    }
  } restore;
  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightEntries, 2).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightMinElements, 0).isOk());
  std::vector<Value> inputs = {operand(DType::BFloat16, Shape{20, 77}, rng),
                               transposedWeight(DType::BFloat16, 77, 150, rng)};
  auto kernel = compileKernel(sharedBackend(), *family, specFor("matmul", inputs));
  ASSERT_TRUE(static_cast<bool>(kernel)) << kernel.status().toString();
  const Tensor exact = exactProduct(inputs[0].tensor(), inputs[1].tensor().contiguous().value());
  for (int call = 0; call < 3; ++call) {
    std::vector<Value> out(1);
    ASSERT_TRUE(invokeCompiled(**kernel, pointersTo(inputs), out).isOk());
    EXPECT_LE(relL2(out[0].tensor(), exact), 4e-3) << "call " << call;
  }
  EXPECT_GE((*kernel)->packed.stats().hits, 2u);
  ASSERT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

// ---- threads ----

TEST(MatmulJit, TwoThreadsGiveTheSameBits) {
  std::mt19937 rng(11);
  // Split by column panels (packed and in-place B), and by rows when there are too few panels;
  // 1x256x1024 and 5x128x1024 are under kMinParallelWork but split for their large B.
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{100, 300, 200},
                         {32, 256, 1024},
                         {1000, 100, 16},
                         {3, 4096, 400},
                         {1, 256, 1024},
                         {5, 128, 1024}}) {
    std::vector<Value> inputs = {operand(DType::Float32, Shape{m, k}, rng), operand(DType::Float32, Shape{k, n}, rng)};
    std::vector<const Value*> pointers = pointersTo(inputs);
    std::vector<Value> results[2];
    for (int threads : {1, 2}) {
      KernelSpec spec = specFor("matmul", inputs);
      spec.params.threads = threads;
      auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), spec);
      ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
      std::vector<Value>& out = results[threads - 1];
      out.resize(1);
      ASSERT_TRUE(invokeCompiled(**kernel, pointers, out).isOk());
      EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
    }
    const Tensor& one = results[0][0].tensor();
    const Tensor& two = results[1][0].tensor();
    ASSERT_EQ(one.shape(), two.shape());
    EXPECT_EQ(std::memcmp(one.rawData(), two.rawData(), static_cast<std::size_t>(one.numel()) * 4), 0)
        << m << "x" << k << "x" << n;
    EXPECT_TRUE(matchesReference(specFor("matmul", inputs), inputs));
  }
  EXPECT_GE(ThreadPool::global().workers(), 1);
}

// ---- epilogues ----

struct EpilogueCase {
  std::string name;
  std::vector<Value> inputs;        // a, b, extras
  std::vector<EpilogueStep> steps;  // operands index into inputs
};

// matmul, then each step with the reference kernels (each op's output rounded to its dtype).
Expected<std::vector<Value>> epilogueReference(const EpilogueCase& c) {
  SVM_ASSIGN_OR_RETURN(std::vector<Value> value, callOp("matmul", {c.inputs[0], c.inputs[1]}, {}));
  for (const EpilogueStep& step : c.steps) {
    const std::string_view op = OpRegistry::global().schema(step.op).name;
    if (step.operand < 0) {
      SVM_ASSIGN_OR_RETURN(value, callOp(op, {value[0]}, {}));
    } else {
      const Value& extra = c.inputs[static_cast<std::size_t>(step.operand)];
      SVM_ASSIGN_OR_RETURN(value, callOp(op, step.swapped ? std::vector<Value>{extra, value[0]}
                                                          : std::vector<Value>{value[0], extra},
                                         {}));
    }
  }
  return value;
}

::testing::AssertionResult epilogueMatches(const EpilogueCase& c, const KernelParams& params = {},
                                           Dims dims = Dims::Static) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  KernelSpec spec = exactSpec(OpId::MatMul, {}, pointersTo(c.inputs));
  if (dims == Dims::Symbolic) spec = symbolicSpec(std::move(spec));
  spec.epilogue = c.steps;
  spec.params = params;
  auto kernel = compileKernel(sharedBackend(), *family, spec);
  if (!kernel) return ::testing::AssertionFailure() << c.name << ": " << kernel.status().toString();
  auto expected = epilogueReference(c);
  if (!expected) return ::testing::AssertionFailure() << c.name << ": reference: " << expected.status().toString();
  std::vector<Value> actual(1);
  Status run = invokeCompiled(**kernel, pointersTo(c.inputs), actual);
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  if (!run.isOk()) return ::testing::AssertionFailure() << c.name << ": " << run.toString();
  Comparison comparison = compareOutputs(*expected, actual);
  if (!comparison.ok) {
    return ::testing::AssertionFailure() << c.name << " [" << params.toString() << "]: " << comparison.reason;
  }
  return ::testing::AssertionSuccess();
}

Value filled(DType dtype, const Shape& shape, double value) {
  Tensor t = Tensor::empty(dtype, shape).value();
  for (std::int64_t i = 0; i < t.numel(); ++i) storeFromDouble(t.rawData(), dtype, i, value);
  return Value::fromTensor(t);
}

std::vector<EpilogueCase> epilogueCases(DType dtype, std::int64_t m, std::int64_t k, std::int64_t n,
                                        std::mt19937& rng) {
  auto a = [&] { return operand(dtype, Shape{m, k}, rng); };
  auto b = [&] { return operand(dtype, Shape{k, n}, rng); };
  auto bias = [&] { return operand(dtype, Shape{n}, rng); };
  const EpilogueStep add_bias{OpId::Add, 2, false};
  std::vector<EpilogueCase> cases = {
      {"bias", {a(), b(), bias()}, {add_bias}},
      {"residual", {a(), b(), operand(dtype, Shape{m, n}, rng)}, {{OpId::Add, 2, false}}},
      {"column mul", {a(), b(), operand(dtype, Shape{m, 1}, rng)}, {{OpId::Mul, 2, false}}},
      {"scalar-like max", {a(), b(), operand(dtype, Shape{1, 1}, rng)}, {{OpId::Maximum, 2, true}}},
      {"swapped sub", {a(), b(), bias()}, {{OpId::Sub, 2, true}}},
      // |C| + 2 keeps the divisor away from 0.
      {"swapped div",
       {a(), b(), filled(dtype, Shape{n}, 2.0), bias()},
       {{OpId::Abs, -1, false}, {OpId::Add, 2, false}, {OpId::Div, 3, true}}},
      {"bias residual min", {a(), b(), bias(), operand(dtype, Shape{m, n}, rng)},
       {add_bias, {OpId::Add, 3, true}, {OpId::Minimum, 3, false}}},
  };
  for (OpId act : {OpId::Sigmoid, OpId::Tanh, OpId::Relu, OpId::Gelu, OpId::Silu}) {
    cases.push_back({fmt::format("bias {}", opIdent(act)), {a(), b(), bias()}, {add_bias, {act, -1, false}}});
  }
  return cases;
}

TEST(MatmulJit, EpiloguesMatchTheOpByOpReference) {
  std::mt19937 rng(12);
  const std::vector<KernelParams> params = {
      KernelParams{},
      KernelParams{.mr = 6, .nr = 64, .kc = 256, .nc = -1, .prefetch = 8},           // B in place (small M)
      KernelParams{.mr = 12, .nr = 32, .mc = 48, .kc = 64, .nc = 64, .k_unroll = 4},  // A and B packed, K blocks
  };
  // Each (case, blocking) pair once, at a different shape per blocking (a Latin square over
  // shapes x blockings): every case meets every blocking and every shape, at a third of the compiles.
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> shapes = {
      {17, 300, 65}, {1, 7, 17}, {65, 129, 63}};
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    const auto [m, k, n] = shapes[s];
    const std::vector<EpilogueCase> cases = epilogueCases(DType::Float32, m, k, n, rng);
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const KernelParams& p = params[(c + s) % params.size()];
      EXPECT_TRUE(epilogueMatches(cases[c], p)) << m << "x" << k << "x" << n;
    }
  }
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    for (const EpilogueCase& c : epilogueCases(dtype, 33, 70, 40, rng)) {
      EXPECT_TRUE(epilogueMatches(c, params[2])) << dtypeName(dtype);
      EXPECT_TRUE(epilogueMatches(c)) << dtypeName(dtype);
    }
  }
  // Batched, with operands broadcast over the batch dims; a symbolic kernel.
  EpilogueCase batched{"batched",
                       {operand(DType::Float32, Shape{2, 5, 7}, rng), operand(DType::Float32, Shape{7, 9}, rng),
                        operand(DType::Float32, Shape{9}, rng), operand(DType::Float32, Shape{2, 5, 9}, rng),
                        operand(DType::Float32, Shape{5, 1}, rng)},
                       {{OpId::Add, 2, false}, {OpId::Tanh, -1, false}, {OpId::Add, 3, false}, {OpId::Mul, 4, true}}};
  EXPECT_TRUE(epilogueMatches(batched));
  EXPECT_TRUE(epilogueMatches(batched, {}, Dims::Symbolic));
  // The dot-product path (few rows, B = W.T) and matrix @ vector.
  EpilogueCase dot{"dot path",
                   {operand(DType::Float32, Shape{3, 40}, rng), transposedWeight(DType::Float32, 40, 50, rng),
                    operand(DType::Float32, Shape{50}, rng)},
                   {{OpId::Add, 2, false}, {OpId::Relu, -1, false}}};
  EXPECT_TRUE(epilogueMatches(dot));
  EpilogueCase vec{"matrix @ vector",
                   {operand(DType::Float32, Shape{20, 40}, rng), operand(DType::Float32, Shape{40}, rng),
                    operand(DType::Float32, Shape{20}, rng)},
                   {{OpId::Sub, 2, true}, {OpId::Sigmoid, -1, false}}};
  EXPECT_TRUE(epilogueMatches(vec));
}

TEST(MatmulJit, EpilogueSupport) {
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  std::mt19937 rng(13);
  std::vector<Value> inputs = {operand(DType::Float32, Shape{4, 5}, rng), operand(DType::Float32, Shape{5, 6}, rng),
                               operand(DType::Float16, Shape{6}, rng)};
  KernelSpec spec = exactSpec(OpId::MatMul, {}, pointersTo(inputs));
  spec.epilogue = {{OpId::Add, 2, false}};
  EXPECT_FALSE(family->supports(spec).isOk());  // dtype differs from the output's
  inputs[2] = operand(DType::Float32, Shape{6}, rng);
  spec = exactSpec(OpId::MatMul, {}, pointersTo(inputs));
  spec.epilogue = {{OpId::Add, 2, false}};
  EXPECT_TRUE(family->supports(spec).isOk());
  spec.epilogue = {{OpId::Equal, 2, false}};
  EXPECT_FALSE(family->supports(spec).isOk());  // not an arithmetic op
  spec.epilogue = {{OpId::Add, 2, false}, {OpId::Rsqrt, -1, false}};
  EXPECT_FALSE(family->supports(spec).isOk());
  spec.epilogue = {};
  EXPECT_FALSE(family->supports(spec).isOk());  // an input nothing uses
  // An operand that would broadcast the output up is declined at run time.
  std::vector<Value> bigger = {operand(DType::Float32, Shape{4, 5}, rng), operand(DType::Float32, Shape{5, 6}, rng),
                               operand(DType::Float32, Shape{3, 4, 6}, rng)};
  spec = exactSpec(OpId::MatMul, {}, pointersTo(bigger));
  spec.epilogue = {{OpId::Add, 2, false}};
  auto kernel = compileKernel(sharedBackend(), *family, spec);
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  std::vector<Value> out(1);
  EXPECT_FALSE(invokeCompiled(**kernel, pointersTo(bigger), out).isOk());
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

}  // namespace
}  // namespace shapevm::jit
