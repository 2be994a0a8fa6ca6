// SPDX-License-Identifier: Apache-2.0
// The matmul kernel's packed-B cache (PackedOperandCache on CompiledKernel): the first call with a
// B packs it, later calls with the same tensor read the packing; both agree with the reference and
// bit for bit with the kernel packing as it goes (f32/f16/bf16, odd sizes, K and N off the
// blocking, B = W.T, tuned blockings, threads, epilogues). A different tensor (also a view of the
// same storage at another offset) misses; adopted memory (Tensor::wrap) mutated between calls is
// never cached; the cache holds B (so it is never sole-owned, never reused in place), is bounded
// and LRU, gives up when B changes every call, is shared safely by threads, and validation runs
// the cached path too.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "jit_test_util.h"
#include "support/tunables.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

// Rows of a wider matrix, like x[:, t, :]: not contiguous, but each row is (stride 1 along K).
Value rowWindow(DType dtype, std::int64_t m, std::int64_t k, std::mt19937& rng) {
  Tensor wide = randomTensor(dtype, Shape{m, 2 * k + 3}, rng, Layout::Contiguous, 1.0);
  return Value::fromTensor(wide.asStrided(Shape{m, k}, Shape{2 * k + 3, 1}, k).value());
}

// Whether the kernel packs B for a 2-D A and B: not on the dot-product path, which reads B in
// place (A's rows and B's columns contiguous along K, and fewer than MR rows (4 by default) or 16
// columns; strides as a kernel compiled for these operands bakes them in, see codegen_matmul.cc).
bool packsB(const Value& a_value, const Value& b_value, std::int64_t mr = 4) {
  const Tensor& a = a_value.tensor();
  const Tensor& b = b_value.tensor();
  const std::int64_t m = a.dim(0), n = b.dim(1);
  const std::int64_t a_col = a.isContiguous() ? 1 : a.stride(1);
  const std::int64_t b_row = b.isContiguous() ? n : b.stride(0);
  return !(a_col == 1 && b_row == 1 && (m < mr || n < 16));
}

Tensor run(const CompiledKernel& kernel, const std::vector<Value>& inputs) {
  std::vector<Value> out(1);
  Status status = invokeCompiled(kernel, pointersTo(inputs), out);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return out[0].isTensor() ? out[0].tensor() : Tensor();
}

// The kernel's result with the cache off (it packs B block by block as it goes); touches no entry.
Tensor runUncached(const CompiledKernel& kernel, const std::vector<Value>& inputs) {
  const std::int64_t entries = Tunables::get(Tunable::PackedWeightEntries);
  EXPECT_TRUE(Tunables::set(Tunable::PackedWeightEntries, 0).isOk());
  const PackedOperandCache::Stats before = kernel.packed.stats();
  Tensor out = run(kernel, inputs);
  const PackedOperandCache::Stats after = kernel.packed.stats();
  EXPECT_EQ(before.packs, after.packs);
  EXPECT_EQ(before.hits, after.hits);
  EXPECT_TRUE(Tunables::set(Tunable::PackedWeightEntries, entries).isOk());
  return out;
}

bool sameBits(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.rawData(), b.rawData(), static_cast<std::size_t>(a.numel()) * a.itemSize()) == 0;
}

// `got` agrees with the reference (epilogue included) and, bit for bit, with the uncached kernel.
::testing::AssertionResult matches(const CompiledKernel& kernel, const std::vector<Value>& inputs, const Tensor& got) {
  std::vector<Value> expected(1);
  Status reference = kernel.family->reference(kernel.spec, pointersTo(inputs), expected);
  if (!reference.isOk()) return ::testing::AssertionFailure() << reference.toString();
  std::vector<Value> actual = {Value::fromTensor(got)};
  Comparison comparison = compareOutputs(expected, actual);
  if (!comparison.ok) return ::testing::AssertionFailure() << kernel.spec.signature() << ": " << comparison.reason;
  if (!sameBits(got, runUncached(kernel, inputs))) {
    return ::testing::AssertionFailure() << kernel.spec.signature() << ": not the bits of the kernel packing as it goes";
  }
  return ::testing::AssertionSuccess();
}

class PackedWeights : public ::testing::Test {
 protected:
  // Every size is cached unless a test says otherwise.
  void SetUp() override { ASSERT_TRUE(Tunables::set(Tunable::PackedWeightMinElements, 0).isOk()); }
  void TearDown() override {
    for (Tunable t : {Tunable::PackedWeightMinElements, Tunable::PackedWeightEntries, Tunable::PackedWeightMaxUnused}) {
      EXPECT_TRUE(Tunables::set(t, Tunables::info(t).default_value).isOk());
    }
    for (auto& kernel : kernels_) EXPECT_TRUE(sharedBackend().free(kernel->handle).isOk());
  }

  CompiledKernel& compile(const KernelSpec& spec) {
    auto kernel = compileKernel(sharedBackend(), *matmulFamily(OpId::MatMul), spec);
    EXPECT_TRUE(kernel.hasValue()) << spec.signature() << ": " << kernel.status().toString();
    if (!kernel) std::abort();
    kernels_.push_back(std::move(*kernel));
    return *kernels_.back();
  }

  // Call 1 packs B (a miss), call 2 with a fresh A and the same B reads the packing (a hit); both
  // results are right. `packs`: false where the kernel has nothing to pack (then nothing counts).
  void expectPacksThenHits(const CompiledKernel& kernel, const std::vector<Value>& first,
                           const std::vector<Value>& second, const std::string& what, bool packs = true) {
    const PackedOperandCache::Stats s0 = kernel.packed.stats();
    const Tensor one = run(kernel, first);
    const PackedOperandCache::Stats s1 = kernel.packed.stats();
    EXPECT_EQ(s1.packs, s0.packs + (packs ? 1 : 0)) << what;
    EXPECT_EQ(s1.hits, s0.hits) << what;
    const Tensor two = run(kernel, second);
    const PackedOperandCache::Stats s2 = kernel.packed.stats();
    EXPECT_EQ(s2.packs, s1.packs) << what;
    EXPECT_EQ(s2.hits, s1.hits + (packs ? 1 : 0)) << what;
    EXPECT_TRUE(matches(kernel, first, one)) << what;
    EXPECT_TRUE(matches(kernel, second, two)) << what;
  }

  std::vector<std::unique_ptr<CompiledKernel>> kernels_;
};

struct Mkn {
  std::int64_t m, k, n;
};

// Odd sizes; K and N off KC (128 / 256) and NR (64); K over several blocks; M over 64 (the other plan).
const Mkn kShapes[] = {{4, 1, 1},      {7, 17, 63},     {17, 65, 65},   {5, 7, 17},
                       {63, 300, 129}, {32, 128, 1024}, {65, 257, 200}, {33, 129, 16}};

TEST_F(PackedWeights, FirstCallPacksLaterCallsHit) {
  std::mt19937 rng(1);
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
    for (const Mkn& s : kShapes) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
        const Value b = operand(dtype, Shape{s.k, s.n}, rng, layout);
        std::vector<Value> first = {operand(dtype, Shape{s.m, s.k}, rng), b};
        std::vector<Value> second = {operand(dtype, Shape{s.m, s.k}, rng), b};
        const std::string what = fmt::format("{} {}x{}x{} layout {}", dtypeName(dtype), s.m, s.k, s.n,
                                             static_cast<int>(layout));
        const Dims dims = layout == Layout::Strided ? Dims::Symbolic : Dims::Static;
        expectPacksThenHits(compile(specFor("matmul", first, {}, dims)), first, second, what, packsB(first[0], b));
      }
    }
  }
}

// x @ W.T (the reference workload's case), including a strided A (x[:, t, :]) and mixed dtypes.
TEST_F(PackedWeights, TransposedWeights) {
  std::mt19937 rng(2);
  for (const Mkn& s : kShapes) {
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      const Value w = transposedWeight(dtype, s.k, s.n, rng);
      std::vector<Value> first = {rowWindow(DType::Float32, s.m, s.k, rng), w};
      std::vector<Value> second = {rowWindow(DType::Float32, s.m, s.k, rng), w};
      // N < 16 takes the dot-product path here (both operands contiguous along K): nothing packed.
      EXPECT_EQ(packsB(first[0], w), s.n >= 16);
      expectPacksThenHits(compile(specFor("matmul", first)), first, second,
                          fmt::format("{} {}x{}x{} W.T", dtypeName(dtype), s.m, s.k, s.n), packsB(first[0], w));
      std::vector<Value> strided = {operand(dtype, Shape{s.m, s.k}, rng, Layout::Strided), w};
      expectPacksThenHits(compile(specFor("matmul", strided)), strided, strided,
                          fmt::format("{} {}x{}x{} strided A @ W.T", dtypeName(dtype), s.m, s.k, s.n));
    }
  }
  // Few rows (M < MR): the dot-product path, nothing packed or cached.
  const Value w = transposedWeight(DType::Float32, 64, 80, rng);
  std::vector<Value> few = {operand(DType::Float32, Shape{2, 64}, rng), w};
  expectPacksThenHits(compile(specFor("matmul", few)), few, few, "2 rows @ W.T", false);
}

// Tuned blockings (several panels per NC block, packed A, K unrolled, B in place), threads, a
// batched A over a 2-D B, an epilogue, and a symbolic kernel.
TEST_F(PackedWeights, BlockingsThreadsBatchesEpilogues) {
  std::mt19937 rng(3);
  const KernelParams params[] = {
      KernelParams{.mr = 8, .nr = 32, .kc = 256, .nc = 512, .prefetch = 1},
      KernelParams{.mr = 12, .nr = 32, .mc = 48, .kc = 64, .nc = 64, .k_unroll = 4},
      KernelParams{.mr = 6, .nr = 64, .kc = 96, .nc = 128, .prefetch = -1, .threads = 3},
      KernelParams{.mr = 4, .nr = 16, .kc = 32, .nc = 48, .prefetch = 2, .threads = 2},
  };
  for (const KernelParams& p : params) {
    for (const Mkn& s : {Mkn{65, 300, 129}, Mkn{32, 128, 1024}, Mkn{9, 70, 40}}) {
      const Value b = transposedWeight(DType::Float32, s.k, s.n, rng);
      std::vector<Value> first = {operand(DType::Float32, Shape{s.m, s.k}, rng), b};
      std::vector<Value> second = {operand(DType::Float32, Shape{s.m, s.k}, rng), b};
      KernelSpec spec = specFor("matmul", first);
      spec.params = p;
      expectPacksThenHits(compile(spec), first, second, p.toString(), packsB(first[0], b, p.mr));
    }
  }
  // B read in place (a tuning candidate for small M): nothing to pack.
  {
    const Value b = operand(DType::Float32, Shape{100, 70}, rng);
    std::vector<Value> inputs = {operand(DType::Float32, Shape{8, 100}, rng), b};
    KernelSpec spec = specFor("matmul", inputs);
    spec.params = KernelParams{.mr = 4, .nr = 64, .kc = 256, .nc = -1, .prefetch = 8};
    expectPacksThenHits(compile(spec), inputs, inputs, "B in place", false);
  }
  // A batched A over one 2-D B (every batch matrix reads the same packing); a batched B is not packed.
  {
    const Value b = operand(DType::BFloat16, Shape{40, 70}, rng);
    std::vector<Value> first = {operand(DType::BFloat16, Shape{3, 9, 40}, rng), b};
    std::vector<Value> second = {operand(DType::BFloat16, Shape{3, 9, 40}, rng), b};
    expectPacksThenHits(compile(specFor("matmul", first, {}, Dims::Symbolic)), first, second, "batched A");
    std::vector<Value> batched_b = {operand(DType::Float32, Shape{2, 9, 40}, rng),
                                    operand(DType::Float32, Shape{2, 40, 70}, rng)};
    expectPacksThenHits(compile(specFor("matmul", batched_b)), batched_b, batched_b, "batched B", false);
  }
  // Bias + sigmoid epilogue (an O2 region's matmul step), on a symbolic kernel.
  {
    const Value w = transposedWeight(DType::Float32, 130, 70, rng);
    const Value bias = operand(DType::Float32, Shape{70}, rng);
    std::vector<Value> first = {operand(DType::Float32, Shape{20, 130}, rng), w, bias};
    std::vector<Value> second = {operand(DType::Float32, Shape{20, 130}, rng), w, bias};
    KernelSpec spec = specFor("matmul", {first[0], first[1]}, {}, Dims::Symbolic);
    spec.inputs.push_back(spec.inputs[0]);
    spec.inputs[2].rank = 1;
    spec.inputs[2].dims[0] = DimSpec{};
    spec.inputs[2].contiguous = true;
    spec.epilogue = {{OpId::Add, 2, false}, {OpId::Sigmoid, -1, false}};
    expectPacksThenHits(compile(spec), first, second, "bias sigmoid epilogue");
  }
}

// A different B of the same shape misses and gives its own result; so does a view of the same
// storage at another offset (same shape and strides); the same bytes through a new handle hit.
TEST_F(PackedWeights, OnlyTheSameBytesHit) {
  std::mt19937 rng(4);
  const Value b1 = operand(DType::Float32, Shape{70, 90}, rng);
  const Value b2 = operand(DType::Float32, Shape{70, 90}, rng);
  std::vector<Value> inputs = {operand(DType::Float32, Shape{10, 70}, rng), b1};
  // Two column windows of one weight [70, 200]: same storage, shape and strides, offsets 0 and 90.
  const Tensor wide = randomTensor(DType::Float32, Shape{70, 200}, rng, Layout::Contiguous, 1.0);
  std::vector<Value> left = {inputs[0], Value::fromTensor(wide.asStrided(Shape{70, 90}, Shape{200, 1}, 0).value())};
  std::vector<Value> right = {inputs[0], Value::fromTensor(wide.asStrided(Shape{70, 90}, Shape{200, 1}, 90).value())};
  CompiledKernel& kernel = compile(specFor("matmul", left, {}, Dims::Symbolic));  // B any layout
  EXPECT_TRUE(matches(kernel, inputs, run(kernel, inputs)));
  inputs[1] = b2;
  const Tensor second = run(kernel, inputs);
  EXPECT_TRUE(matches(kernel, inputs, second));
  PackedOperandCache::Stats stats = kernel.packed.stats();
  EXPECT_EQ(stats.packs, 2u);
  EXPECT_EQ(stats.hits, 0u);

  const Tensor l = run(kernel, left);
  const Tensor r = run(kernel, right);
  EXPECT_TRUE(matches(kernel, left, l));
  EXPECT_TRUE(matches(kernel, right, r));
  EXPECT_FALSE(sameBits(l, r));
  stats = kernel.packed.stats();
  EXPECT_EQ(stats.packs, 4u);
  EXPECT_EQ(stats.hits, 0u);
  // The same view made again (a new Tensor handle over the same bytes) hits.
  std::vector<Value> again = {inputs[0], Value::fromTensor(wide.asStrided(Shape{70, 90}, Shape{200, 1}, 90).value())};
  EXPECT_TRUE(sameBits(run(kernel, again), r));
  EXPECT_EQ(kernel.packed.stats().hits, 1u);
}

// Adopted memory (a numpy array through Tensor::wrap) may change behind the VM's back: it is never
// cached, so a call after the owner rewrote it sees the new values.
TEST_F(PackedWeights, AdoptedMemoryIsNeverCached) {
  std::mt19937 rng(5);
  const std::int64_t k = 130, n = 70;
  std::vector<float> memory(static_cast<std::size_t>(k * n));
  std::normal_distribution<float> normal;
  for (float& x : memory) x = normal(rng);
  const Tensor w = Tensor::wrap(memory.data(), DType::Float32, Shape{n, k}, Shape{k, 1}, memory.size() * sizeof(float),
                                nullptr, nullptr);
  for (const Tensor& b : {w.asStrided(Shape{k, n}, Shape{1, k}, 0).value(),  // W.T of the array
                          Tensor::wrap(memory.data(), DType::Float32, Shape{k, n}, Shape{n, 1},
                                       memory.size() * sizeof(float), nullptr, nullptr)}) {
    std::vector<Value> inputs = {operand(DType::Float32, Shape{16, k}, rng), Value::fromTensor(b)};
    CompiledKernel& kernel = compile(specFor("matmul", inputs));
    const Tensor before = run(kernel, inputs);
    EXPECT_TRUE(matches(kernel, inputs, before));
    for (float& x : memory) x = normal(rng);  // the owner writes its array
    const Tensor after = run(kernel, inputs);
    EXPECT_TRUE(matches(kernel, inputs, after));
    EXPECT_FALSE(sameBits(before, after));
    EXPECT_EQ(kernel.packed.stats().packs, 0u);
    EXPECT_EQ(kernel.packed.stats().hits, 0u);
  }
}

// The cache holds a reference to B: B is not sole-owned, so no in-place reuse (outputBuffer, the
// interpreter handing a register's previous tensor back) can write it while it is cached.
TEST_F(PackedWeights, CachedWeightIsNeverReusedInPlace) {
  std::mt19937 rng(6);
  std::vector<Value> inputs = {operand(DType::Float32, Shape{8, 40}, rng), operand(DType::Float32, Shape{40, 50}, rng)};
  CompiledKernel& kernel = compile(specFor("matmul", inputs));
  EXPECT_TRUE(inputs[1].tensor().isSoleOwner());
  (void)run(kernel, inputs);
  EXPECT_EQ(kernel.packed.stats().entries, 1u);
  EXPECT_FALSE(inputs[1].tensor().isSoleOwner());
  // outputBuffer (how every kernel reuses the previous output the interpreter hands back) must
  // not hand B out while it is cached; with the cache emptied it would (so this can fail).
  const void* b_bytes = inputs[1].tensor().rawData();
  const Shape b_shape = inputs[1].tensor().shape();
  std::vector<Value> previous = {std::move(inputs[1])};
  const OpSchema& schema = OpRegistry::global().schema(OpId::MatMul);
  OpContext ctx{&schema, {}, {}, previous};
  auto cached = outputBuffer(ctx, 0, DType::Float32, b_shape);
  ASSERT_TRUE(cached.hasValue());
  EXPECT_NE(cached->rawData(), b_bytes);
  kernel.packed.clear();
  EXPECT_EQ(kernel.packed.stats().entries, 0u);
  auto released = outputBuffer(ctx, 0, DType::Float32, b_shape);
  ASSERT_TRUE(released.hasValue());
  EXPECT_EQ(released->rawData(), b_bytes);
}

// At most PackedWeightEntries packings, the least recently used replaced.
TEST_F(PackedWeights, BoundedLeastRecentlyUsed) {
  std::mt19937 rng(7);
  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightEntries, 2).isOk());
  const Value a = operand(DType::Float32, Shape{9, 40}, rng);
  const Value b[] = {operand(DType::Float32, Shape{40, 50}, rng), operand(DType::Float32, Shape{40, 50}, rng),
                     operand(DType::Float32, Shape{40, 50}, rng)};
  CompiledKernel& kernel = compile(specFor("matmul", {a, b[0]}));
  auto call = [&](int i) { EXPECT_TRUE(matches(kernel, {a, b[i]}, run(kernel, {a, b[i]}))) << i; };
  call(0);
  call(1);
  call(0);  // hit; b[1] is now the least recently used
  call(2);  // replaces b[1]
  call(0);  // hit
  call(1);  // miss again (replaces b[2])
  const PackedOperandCache::Stats stats = kernel.packed.stats();
  EXPECT_EQ(stats.packs, 4u);
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_FALSE(stats.gave_up);
}

// A B that changes every call (an activation, not a weight) is not cached for long: after
// PackedWeightMaxUnused packings evicted unused in a row the kernel stops caching; below
// PackedWeightMinElements nothing is cached at all.
TEST_F(PackedWeights, GivesUpOnChangingOperandsAndSmallOnes) {
  std::mt19937 rng(8);
  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightEntries, 2).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightMaxUnused, 3).isOk());
  std::vector<Value> inputs = {operand(DType::Float32, Shape{9, 40}, rng), operand(DType::Float32, Shape{40, 50}, rng)};
  CompiledKernel& kernel = compile(specFor("matmul", inputs));
  for (int call = 0; call < 8; ++call) {
    inputs[1] = operand(DType::Float32, Shape{40, 50}, rng);
    EXPECT_TRUE(matches(kernel, inputs, run(kernel, inputs))) << call;
  }
  // Packs 1, 2; 3 evicts 1 (unused 1), 4 evicts 2 (2), 5 evicts 3 (3: gives up); 6-8 pack nothing.
  PackedOperandCache::Stats stats = kernel.packed.stats();
  EXPECT_EQ(stats.packs, 5u);
  EXPECT_TRUE(stats.gave_up);

  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightMinElements, 40 * 50 + 1).isOk());
  CompiledKernel& small = compile(specFor("matmul", inputs));
  expectPacksThenHits(small, inputs, inputs, "below the threshold", false);
  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightMinElements, 40 * 50).isOk());
  expectPacksThenHits(small, inputs, inputs, "at the threshold");
}

// Several threads call one kernel with two shared weights (hits) and, now and then, a fresh one
// (evictions while other calls read a packing): every result is the uncached kernel's bits.
TEST_F(PackedWeights, SeveralThreadsShareOneKernel) {
  std::mt19937 rng(9);
  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightEntries, 2).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightMaxUnused, 1000000).isOk());
  const std::int64_t m = 24, k = 150, n = 130;
  const Value weights[2] = {transposedWeight(DType::Float32, k, n, rng), transposedWeight(DType::Float32, k, n, rng)};
  constexpr int kThreads = 4, kCalls = 12;
  struct Job {
    std::vector<Value> inputs;
    Tensor want;
  };
  std::vector<Job> jobs;
  const KernelSpec spec = specFor("matmul", {operand(DType::Float32, Shape{m, k}, rng), weights[0]});
  CompiledKernel& kernel = compile(spec);
  for (int j = 0; j < kThreads * kCalls; ++j) {
    Value b = j % 5 == 4 ? transposedWeight(DType::Float32, k, n, rng) : weights[j % 2];
    Job job{{operand(DType::Float32, Shape{m, k}, rng), b}, Tensor()};
    job.want = runUncached(kernel, job.inputs);
    jobs.push_back(std::move(job));
  }
  std::vector<Tensor> got(jobs.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        const std::size_t j = static_cast<std::size_t>(c * kThreads + t);
        std::vector<Value> out(1);
        if (invokeCompiled(kernel, pointersTo(jobs[j].inputs), out).isOk()) got[j] = out[0].tensor();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (std::size_t j = 0; j < jobs.size(); ++j) EXPECT_TRUE(sameBits(got[j], jobs[j].want)) << "call " << j;
  const PackedOperandCache::Stats stats = kernel.packed.stats();
  EXPECT_GT(stats.hits, 0u);
  EXPECT_LE(stats.entries, 2u);
  EXPECT_EQ(stats.packs + stats.hits, jobs.size());
}

// Validation runs a call that packed once more, reading the cached packing, and leaves the cache
// empty (the validation inputs are of no use afterwards).
TEST_F(PackedWeights, ValidationRunsTheCachedPathAndEmptiesTheCache) {
  std::mt19937 rng(10);
  std::vector<Value> inputs = {operand(DType::Float32, Shape{32, 128}, rng),
                               transposedWeight(DType::Float32, 128, 1024, rng)};
  CompiledKernel& kernel = compile(specFor("matmul", inputs));
  const std::vector<std::vector<Shape>> shapes = {{Shape{32, 128}, Shape{128, 1024}}};
  ASSERT_TRUE(validateKernel(kernel, shapes, 1).isOk());
  const PackedOperandCache::Stats stats = kernel.packed.stats();
  EXPECT_EQ(stats.packs, 1u);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.entries, 0u);
}

// With several shape sets and a static weight, later sets pass the first set's weight again: their
// calls read the cached packing and are checked against the reference, so no extra call is made.
TEST_F(PackedWeights, LaterShapeSetsReadTheFirstSetsPacking) {
  std::mt19937 rng(11);
  std::vector<Value> inputs = {operand(DType::Float32, Shape{32, 128}, rng),
                               transposedWeight(DType::Float32, 128, 1024, rng)};
  CompiledKernel& kernel = compile(specFor("matmul", inputs, {}, Dims::Symbolic));
  const std::vector<std::vector<Shape>> shapes = {{Shape{32, 128}, Shape{128, 1024}},
                                                  {Shape{48, 128}, Shape{128, 1024}}};
  ASSERT_TRUE(validateKernel(kernel, shapes, 3).isOk());
  const PackedOperandCache::Stats stats = kernel.packed.stats();
  EXPECT_EQ(stats.packs, 1u);
  EXPECT_EQ(stats.hits, 1u) << "the second set reads the first set's packing; nothing runs a third time";
  EXPECT_EQ(stats.entries, 0u);
}

// Validation's packing buffer stays as a spare after its entry is dropped: the program's first call
// (another weight) packs into it instead of a fresh allocation, and reads the right bits; the spare
// is used once, and a buffer a call still holds is never handed out.
TEST_F(PackedWeights, ValidationsBufferTakesTheProgramsFirstPacking) {
  std::mt19937 rng(12);
  std::vector<Value> inputs = {operand(DType::Float32, Shape{32, 128}, rng),
                               transposedWeight(DType::Float32, 128, 1024, rng)};
  CompiledKernel& kernel = compile(specFor("matmul", inputs));
  const std::vector<std::vector<Shape>> shapes = {{Shape{32, 128}, Shape{128, 1024}}};
  ASSERT_TRUE(validateKernel(kernel, shapes, 1).isOk());
  ASSERT_EQ(kernel.packed.stats().packs, 1u);
  EXPECT_EQ(kernel.packed.stats().entries, 0u);
  EXPECT_EQ(kernel.packed.stats().spare_reuses, 0u);

  const Tensor first = run(kernel, inputs);  // a weight validation never saw
  PackedOperandCache::Stats stats = kernel.packed.stats();
  EXPECT_EQ(stats.packs, 2u);
  EXPECT_EQ(stats.spare_reuses, 1u);
  EXPECT_EQ(stats.entries, 1u);
  EXPECT_TRUE(matches(kernel, inputs, first));

  std::vector<Value> other = {operand(DType::Float32, Shape{32, 128}, rng),
                              transposedWeight(DType::Float32, 128, 1024, rng)};
  const Tensor second = run(kernel, other);  // no spare left: a fresh buffer
  stats = kernel.packed.stats();
  EXPECT_EQ(stats.packs, 3u);
  EXPECT_EQ(stats.spare_reuses, 1u);
  EXPECT_TRUE(matches(kernel, other, second));
  EXPECT_TRUE(matches(kernel, inputs, run(kernel, inputs)));  // the first packing is still right

  // A spare something else still references is not handed out.
  PackedOperandCache cache;
  const Tensor weight = operand(DType::Float32, Shape{16, 16}, rng).tensor();
  const Tensor held = Tensor::empty(DType::Float32, Shape{256}).value();
  cache.insert(weight, held);
  cache.clear();
  EXPECT_FALSE(cache.takeSpare(1024).defined()) << "`held` still references it";
  Tensor sole = Tensor::empty(DType::Float32, Shape{256}).value();
  cache.insert(weight, std::move(sole));
  cache.clear();
  EXPECT_FALSE(cache.takeSpare(4096).defined()) << "too small for 4096 bytes";
  cache.insert(weight, Tensor::empty(DType::Float32, Shape{256}).value());
  cache.clear();
  EXPECT_TRUE(cache.takeSpare(1024).defined());
  EXPECT_FALSE(cache.takeSpare(1024).defined()) << "taken once";
  EXPECT_EQ(cache.stats().spare_reuses, 1u);
}

}  // namespace
}  // namespace shapevm::jit
