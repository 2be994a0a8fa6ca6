// SPDX-License-Identifier: Apache-2.0
// The tiered JIT end to end on small modules: tier-up exactly at the thresholds (LLVM
// ReOptimizeLayerTest style: old path up to the threshold, compiled after, same results), async
// compiles that never stall the interpreter, guards and ranges, the recompile cap, the patch
// table growing from 1 to 2 entries, validation catching corrupted kernels with back-off and
// blacklisting, token rewriting, several threads running while the compile thread patches, and
// O2 tuning deferred until the time spent in the code repays its estimated cost, the compile
// thread running below the interpreter's priority, and a program waiting for its compiles holding
// no core the compile could use.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "jit/jit.h"
#include "jit/shape_infer.h"
#include "jit/validate.h"
#include "support/cpu_cores.h"
#include "support/tunables.h"
#include "vm/vm.h"

namespace shapevm::jit {
namespace {

// add (site 0) then tanh (site 1) over two [?0,?1] inputs, then a reshape (no kernel family).
constexpr const char* kProgram = R"(.module "tier"
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
)";

std::shared_ptr<Module> load(const char* text) {
  auto module = assemble(text, "tier.svasm");
  EXPECT_TRUE(module.hasValue()) << module.status().toString();
  EXPECT_TRUE(verifyModule(*module).isOk());
  return std::make_shared<Module>(std::move(*module));
}

Tensor random(DType dtype, const Shape& shape, std::uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<double> dist;
  Tensor t = std::move(Tensor::empty(dtype, shape).value());
  for (std::int64_t i = 0; i < t.numel(); ++i) storeFromDouble(t.rawData(), dtype, i, dist(engine));
  return t;
}

// The program's result computed by the reference kernels directly.
Tensor expected(const Value& a, const Value& b) {
  Value sum = callOp("add", {a, b}).value()[0];
  Value th = callOp("tanh", {sum}).value()[0];
  return th.tensor().reshapeView(Shape{th.tensor().numel()}).value();
}

void expectSame(const Tensor& want, const Value& got, double tolerance = 1e-6) {
  ASSERT_TRUE(got.isTensor());
  ASSERT_EQ(want.shape(), got.tensor().shape());
  ASSERT_EQ(want.dtype(), got.tensor().dtype());
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    ASSERT_NEAR(want.elementAsDouble(i), got.tensor().elementAsDouble(i), tolerance) << "element " << i;
  }
}

class TieringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tunables::resetToDefaults();
    ASSERT_TRUE(Tunables::set(Tunable::HotMs, 0).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::JitLevel, 1).isOk());
    // These tests count compiles and guard misses. Every test shares the build's kernel cache, so
    // a wider kernel another test (or an earlier run) kept there would serve a specialization
    // request through the covering lookup and change those counts; kernel_cache_test.cc tests it.
    ASSERT_TRUE(Tunables::set(Tunable::CacheCovering, 0).isOk());
  }
  void TearDown() override { Tunables::resetToDefaults(); }

  // No warm-up, hot after one execution (hot_ms is already 0).
  void eagerTierUp() {
    ASSERT_TRUE(Tunables::set(Tunable::WarmupRuns, 0).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::HotCount, 1).isOk());
  }
  // A JIT whose compiles finish before the next run starts (reproducible tier-up).
  static Expected<std::unique_ptr<Jit>> attachWaiting(VirtualMachine& vm) {
    JitOptions options;
    options.wait_for_compiles = true;
    options.first_sight = false;  // the thresholds, whatever an earlier test left in the shared cache
    return Jit::attach(vm, options);
  }

  std::vector<Value> args(DType dtype, const Shape& shape, std::uint32_t seed) {
    return {Value::fromTensor(random(dtype, shape, seed)), Value::fromTensor(random(dtype, shape, seed + 1))};
  }
};

TEST_F(TieringTest, TiersUpExactlyAtTheThresholdsWithTheSameResults) {
  ASSERT_TRUE(Tunables::set(Tunable::WarmupRuns, 3).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, 5).isOk());
  auto module = load(kProgram);
  VirtualMachine vm(module);
  auto jit = attachWaiting(vm);
  ASSERT_TRUE(jit.hasValue()) << jit.status().toString();
  for (int run = 1; run <= 8; ++run) {
    auto in = args(DType::Float32, Shape{6, 37}, static_cast<std::uint32_t>(run));
    const std::uint64_t compiled_before = vm.stats().compiled_calls;
    auto out = vm.run(0, in);
    ASSERT_TRUE(out.hasValue()) << out.status().toString();
    expectSame(expected(in[0], in[1]), (*out)[0]);
    const std::uint64_t compiled = vm.stats().compiled_calls - compiled_before;
    // The region executes once per run: hot after run 5 (>= 5 executions, >= 3 warm-up runs);
    // the compile finishes before run 6 starts (wait_for_compiles), so runs 6.. are compiled.
    if (run <= 5) {
      EXPECT_EQ(compiled, 0u) << "run " << run;
    } else {
      EXPECT_EQ(compiled, 2u) << "run " << run << ": add and tanh compiled, reshape interpreted";
    }
  }
  JitStats stats = (*jit)->stats();
  EXPECT_EQ(stats.compiles, 2u);
  EXPECT_EQ(stats.validation_failures, 0u);
  EXPECT_EQ((*jit)->siteState(0, 2).phase, Jit::SiteState::Phase::NoKernel);
  EXPECT_GT(stats.fallbacks[static_cast<std::size_t>(JitReason::NoKernel)], 0u);
  EXPECT_EQ((*jit)->patches().entries(0, 0), 1u);
}

TEST_F(TieringTest, WarmupRunsAreRespectedEvenWhenTheRegionIsHot) {
  ASSERT_TRUE(Tunables::set(Tunable::WarmupRuns, 4).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, 1).isOk());
  auto module = load(kProgram);
  VirtualMachine vm(module);
  auto jit = attachWaiting(vm);
  ASSERT_TRUE(jit.hasValue());
  for (int run = 1; run <= 6; ++run) {
    auto in = args(DType::Float32, Shape{3, 5}, static_cast<std::uint32_t>(run));
    const std::uint64_t before = vm.stats().compiled_calls;
    ASSERT_TRUE(vm.run(0, in).hasValue());
    EXPECT_EQ(vm.stats().compiled_calls - before, run <= 4 ? 0u : 2u) << "run " << run;
  }
}

TEST_F(TieringTest, SlowCompilesNeverStallTheInterpreter) {
  eagerTierUp();
  ASSERT_TRUE(Tunables::set(Tunable::JitTestCompileDelayMs, 1000).isOk());
  auto module = load(kProgram);
  VirtualMachine vm(module);
  auto jit = Jit::attach(vm);
  ASSERT_TRUE(jit.hasValue());
  auto in = args(DType::Float32, Shape{4, 16}, 7);
  const Tensor want = expected(in[0], in[1]);
  // While the (artificially slow) compile is pending, runs complete at interpreter speed.
  const auto start = std::chrono::steady_clock::now();
  int interpreted_runs = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200)) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = vm.run(0, in);
    ASSERT_TRUE(out.hasValue());
    expectSame(want, (*out)[0]);
    // A run that waited for the compiler would take most of its 1 s delay; the margin below it
    // absorbs a loaded host descheduling this thread (a run itself takes microseconds).
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500)) << "a run waited for the compiler";
    ++interpreted_runs;
  }
  EXPECT_EQ(vm.stats().compiled_calls, 0u) << "the kernel cannot be ready before the delay";
  EXPECT_GT(interpreted_runs, 20);
  // Once ready, the kernel is used.
  bool compiled = false;
  for (int i = 0; i < 400 && !compiled; ++i) {
    auto out = vm.run(0, in);
    ASSERT_TRUE(out.hasValue());
    expectSame(want, (*out)[0]);
    compiled = vm.stats().compiled_calls > 0;
    if (!compiled) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(compiled);
}

TEST_F(TieringTest, GuardMissesFallBackThenARangeKernelCoversTheNewShapes) {
  eagerTierUp();
  ASSERT_TRUE(Tunables::set(Tunable::GuardMissRecompile, 2).isOk());
  auto module = load(kProgram);
  VirtualMachine vm(module);
  auto jit = attachWaiting(vm);
  ASSERT_TRUE(jit.hasValue());
  auto run = [&](std::int64_t rows, std::uint32_t seed) {
    auto in = args(DType::Float32, Shape{rows, 24}, seed);
    auto out = vm.run(0, in);
    EXPECT_TRUE(out.hasValue());
    if (out) expectSame(expected(in[0], in[1]), (*out)[0]);
  };
  run(20, 1);  // compiles add/tanh specialized for [20,24]
  EXPECT_EQ((*jit)->siteState(0, 0).compiles, 1);
  std::uint64_t misses = vm.stats().guard_misses;
  run(40, 2);  // outside the specialization: both sites miss, run interpreted, counted
  EXPECT_EQ(vm.stats().guard_misses - misses, 2u);
  run(40, 3);  // second miss at each site: recompile with the observed range 20..40 -> 16..64
  EXPECT_EQ((*jit)->siteState(0, 0).compiles, 2);
  // The new range kernel covers (and replaced) the specialized one.
  EXPECT_EQ((*jit)->patches().entries(0, 0), 1u);
  misses = vm.stats().guard_misses;
  const std::uint64_t compiled = vm.stats().compiled_calls;
  for (std::int64_t rows : {16, 33, 64}) run(rows, static_cast<std::uint32_t>(rows));
  EXPECT_EQ(vm.stats().guard_misses, misses) << "16..64 is inside the bucketed range";
  EXPECT_EQ(vm.stats().compiled_calls - compiled, 6u);
  // The replaced specialized kernels were retired and their code freed (no run was in progress).
  EXPECT_EQ((*jit)->patches().retiredPending(), 0u);
  EXPECT_EQ((*jit)->backend().liveKernels(), 2u) << "only the two range kernels are still loaded";
  run(65, 9);  // leaves the range: a counted miss, still the right answer
  EXPECT_EQ(vm.stats().guard_misses - misses, 2u);
  // dis shows what the JIT believes.
  const std::string listing = disassemble(*module);
  EXPECT_NE(listing.find("?0:16..64"), std::string::npos) << listing;
}

TEST_F(TieringTest, RecompileCapEndsInAFullySymbolicKernel) {
  eagerTierUp();
  ASSERT_TRUE(Tunables::set(Tunable::GuardMissRecompile, 1).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::MaxRecompiles, 2).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::RangeBuckets, 0).isOk());  // exact min..max ranges: every new extreme misses
  auto module = load(kProgram);
  VirtualMachine vm(module);
  auto jit = attachWaiting(vm);
  ASSERT_TRUE(jit.hasValue());
  std::uint32_t seed = 1;
  for (std::int64_t rows : {5, 9, 13, 17, 21, 25, 29}) {
    auto in = args(DType::Float32, Shape{rows, 3}, seed++);
    auto out = vm.run(0, in);
    ASSERT_TRUE(out.hasValue());
    expectSame(expected(in[0], in[1]), (*out)[0]);
  }
  // 1: [5,3]; 2: range 5..9; 3 (cap reached): symbolic — and then no more misses, no more compiles.
  EXPECT_EQ((*jit)->siteState(0, 0).compiles, 3);
  const std::uint64_t misses = vm.stats().guard_misses;
  auto in = args(DType::Float32, Shape{1000, 7}, 99);
  ASSERT_TRUE(vm.run(0, in).hasValue());
  EXPECT_EQ(vm.stats().guard_misses, misses);
  EXPECT_EQ((*jit)->siteState(0, 0).compiles, 3);
}

TEST_F(TieringTest, ASiteTableGrowsFromOneEntryToTwoForASecondDtype) {
  eagerTierUp();
  ASSERT_TRUE(Tunables::set(Tunable::GuardMissRecompile, 1).isOk());
  auto module = load(R"(.module "poly"
.func f
  .param a : [?0,?1]
  .param b : [?0,?1]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
  CallOp add r2 = r0, r1 : [?0,?1] x [?0,?1] -> [?0,?1]
  StoreTensor r2, o0
  Return
.end
)");
  VirtualMachine vm(module);
  auto jit = attachWaiting(vm);
  ASSERT_TRUE(jit.hasValue());
  auto in32 = args(DType::Float32, Shape{8, 8}, 1);
  ASSERT_TRUE(vm.run(0, in32).hasValue());
  EXPECT_EQ((*jit)->patches().entries(0, 0), 1u);
  auto in16 = args(DType::Float16, Shape{8, 8}, 2);
  auto out16 = vm.run(0, in16);  // misses (dtype), recompiles for float16
  ASSERT_TRUE(out16.hasValue());
  EXPECT_EQ((*jit)->patches().entries(0, 0), 2u);
  // Both dtypes now run compiled, with the reference's results.
  const std::uint64_t compiled = vm.stats().compiled_calls;
  for (auto* in : {&in32, &in16}) {
    auto out = vm.run(0, *in);
    ASSERT_TRUE(out.hasValue());
    Value want = callOp("add", {(*in)[0], (*in)[1]}).value()[0];
    expectSame(want.tensor(), (*out)[0], 1e-2);
  }
  EXPECT_EQ(vm.stats().compiled_calls - compiled, 2u);
}

TEST_F(TieringTest, CorruptedKernelsAreRejectedBackedOffAndBlacklisted) {
  eagerTierUp();
  ASSERT_TRUE(Tunables::set(Tunable::BackoffExecutions, 2).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::BlacklistAfter, 3).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::JitTestCorruptKernels, 1).isOk());
  auto module = load(kProgram);
  VirtualMachine vm(module);
  auto jit = attachWaiting(vm);
  ASSERT_TRUE(jit.hasValue());
  std::vector<int> attempts_at;  // runs after which the failure count grew
  int failures = 0;
  for (int run = 1; run <= 30; ++run) {
    auto in = args(DType::Float32, Shape{5, 11}, static_cast<std::uint32_t>(run));
    auto out = vm.run(0, in);
    ASSERT_TRUE(out.hasValue());
    expectSame(expected(in[0], in[1]), (*out)[0]);  // results never change
    const int now = (*jit)->siteState(0, 0).backoff.failures;
    if (now > failures) attempts_at.push_back(run);
    failures = now;
  }
  EXPECT_EQ(vm.stats().compiled_calls, 0u) << "no corrupted kernel may ever run";
  EXPECT_EQ((*jit)->siteState(0, 0).phase, Jit::SiteState::Phase::Blacklisted);
  EXPECT_EQ((*jit)->siteState(0, 0).backoff.failures, 3);
  ASSERT_EQ(attempts_at.size(), 3u);
  // Back-off doubles: the retry waits 2, then 4 region executions.
  EXPECT_EQ(attempts_at[1] - attempts_at[0], 2);
  EXPECT_EQ(attempts_at[2] - attempts_at[1], 4);
  JitStats stats = (*jit)->stats();
  EXPECT_EQ(stats.validation_failures, 6u) << "3 per site, add and tanh";
  EXPECT_EQ(stats.blacklisted_sites, 2u);
  EXPECT_GT(stats.fallbacks[static_cast<std::size_t>(JitReason::Blacklisted)], 0u);
}

TEST_F(TieringTest, NonContiguousInputsUseAStridedKernelOrAreCountedMisses) {
  eagerTierUp();
  ASSERT_TRUE(Tunables::set(Tunable::GuardMissRecompile, 1).isOk());
  auto module = load(kProgram);
  VirtualMachine vm(module);
  auto jit = attachWaiting(vm);
  ASSERT_TRUE(jit.hasValue());
  auto in = args(DType::Float32, Shape{12, 12}, 3);
  ASSERT_TRUE(vm.run(0, in).hasValue());  // contiguous kernels
  // Transposed views: the contiguous add kernel's guard misses (counted, reason GuardContiguity).
  std::vector<Value> transposed;
  for (const Value& v : in) transposed.push_back(callOp("transpose", {v}).value()[0]);
  const std::uint64_t misses = vm.stats().guard_misses;
  auto out = vm.run(0, transposed);
  ASSERT_TRUE(out.hasValue());
  expectSame(expected(transposed[0], transposed[1]), (*out)[0]);
  EXPECT_EQ(vm.stats().guard_misses - misses, 1u) << "add misses; tanh reads add's contiguous output";
  // ...then a strided kernel is compiled beside the contiguous one and serves them.
  ASSERT_TRUE(vm.run(0, transposed).hasValue());
  const std::uint64_t compiled = vm.stats().compiled_calls;
  out = vm.run(0, transposed);
  ASSERT_TRUE(out.hasValue());
  expectSame(expected(transposed[0], transposed[1]), (*out)[0]);
  EXPECT_EQ(vm.stats().compiled_calls - compiled, 2u);
  JitStats stats = (*jit)->stats();
  EXPECT_GE(stats.fallbacks[static_cast<std::size_t>(JitReason::GuardContiguity)], 1u);
}

TEST_F(TieringTest, ThreadsRunTheModuleWhileTheCompileThreadPatches) {
  ASSERT_TRUE(Tunables::set(Tunable::WarmupRuns, 1).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, 2).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::GuardMissRecompile, 2).isOk());
  auto module = load(kProgram);
  VirtualMachine vm(module);
  auto jit = Jit::attach(vm);
  ASSERT_TRUE(jit.hasValue());
  constexpr int kThreads = 3;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        const std::int64_t rows = 1 + (i * 7 + t * 3) % 40;  // shapes keep changing: recompiles while running
        auto in = args(DType::Float32, Shape{rows, 9}, static_cast<std::uint32_t>(t * 1000 + i));
        auto out = vm.run(0, in);
        if (!out) {
          ++wrong;
          continue;
        }
        const Tensor want = expected(in[0], in[1]);
        for (std::int64_t k = 0; k < want.numel(); ++k) {
          if (std::abs(want.elementAsDouble(k) - (*out)[0].tensor().elementAsDouble(k)) > 1e-6) {
            ++wrong;
            break;
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  (*jit)->waitIdle();
  EXPECT_GT((*jit)->stats().compiles, 0u);
}

TEST_F(TieringTest, ScalarOperandSitesCompileValidateAndGuardTheScalarKind) {
  eagerTierUp();
  auto module = load(R"(.module "scalar"
.func f
  .param a : f32[?0]
  .param s : float
  .outputs 1
  LoadTensor r0, a
  LoadArg r1, s
  CallOp mul r2 = r0, r1 : f32[?0] x _ -> f32[?0]
  StoreTensor r2, o0
  Return
.end
)");
  VirtualMachine vm(module);
  auto jit = attachWaiting(vm);
  ASSERT_TRUE(jit.hasValue());
  for (double scale : {0.5, -3.25, 7.0}) {
    std::vector<Value> in = {Value::fromTensor(random(DType::Float32, Shape{33}, 4)), Value::fromFloat(scale)};
    auto out = vm.run(0, in);
    ASSERT_TRUE(out.hasValue()) << out.status().toString();
    expectSame(callOp("mul", {in[0], in[1]}).value()[0].tensor(), (*out)[0]);
  }
  EXPECT_EQ((*jit)->siteState(0, 0).compiles, 1);
  EXPECT_EQ((*jit)->stats().validation_failures, 0u);
  EXPECT_EQ(vm.stats().compiled_calls, 2u) << "runs 2 and 3 ran the compiled kernel with new scalar values";
}

TEST_F(TieringTest, AFullQueueDropsRequestsThatAreRetriedLater) {
  eagerTierUp();
  ASSERT_TRUE(Tunables::set(Tunable::CompileQueue, 1).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::JitTestCompileDelayMs, 150).isOk());
  // Three sites hot at once: the worker holds one (sleeping 150 ms, so an interpreter preempted on
  // a loaded host still makes all three requests meanwhile), the 1-slot queue takes the next, and
  // the third is dropped — whichever order the worker's pop and the requests take.
  auto module = load(R"(.module "three"
.func f
  .param a : f32[?0]
  .param b : f32[?0]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
  CallOp add r2 = r0, r1 : f32[?0] x f32[?0] -> f32[?0]
  CallOp tanh r3 = r2 : f32[?0] -> f32[?0]
  CallOp neg r4 = r3 : f32[?0] -> f32[?0]
  StoreTensor r4, o0
  Return
.end
)");
  VirtualMachine vm(module);
  auto jit = Jit::attach(vm);
  ASSERT_TRUE(jit.hasValue());
  auto in = args(DType::Float32, Shape{16}, 1);
  const Tensor sum = callOp("add", {in[0], in[1]}).value()[0].tensor();
  const Tensor want = callOp("neg", {callOp("tanh", {Value::fromTensor(sum)}).value()[0]}).value()[0].tensor();
  for (int i = 0; i < 3000 && (*jit)->stats().compiles < 3; ++i) {  // up to ~6 s: slow under ASan and load
    auto out = vm.run(0, in);
    ASSERT_TRUE(out.hasValue());
    expectSame(want, (*out)[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  (*jit)->waitIdle();
  const JitStats stats = (*jit)->stats();
  EXPECT_GE(stats.dropped_requests, 1u);
  EXPECT_GE(stats.fallbacks[static_cast<std::size_t>(JitReason::QueueFull)], 1u);
  EXPECT_EQ(stats.compiles, 3u) << "the dropped site was requested again and compiled";
}

TEST_F(TieringTest, LevelZeroNeverCompiles) {
  ASSERT_TRUE(Tunables::set(Tunable::WarmupRuns, 0).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, 0).isOk());
  auto module = load(kProgram);
  VirtualMachine vm(module);
  JitOptions options;
  options.level = 0;
  options.wait_for_compiles = true;
  auto jit = Jit::attach(vm, options);
  ASSERT_TRUE(jit.hasValue());
  for (int run = 0; run < 5; ++run) ASSERT_TRUE(vm.run(0, args(DType::Float32, Shape{2, 2}, 1)).hasValue());
  EXPECT_EQ(vm.stats().compiled_calls, 0u);
  EXPECT_EQ((*jit)->stats().requests, 0u);
}

TEST_F(TieringTest, DetachingLeavesTheVmInterpreting) {
  eagerTierUp();
  auto module = load(kProgram);
  VirtualMachine vm(module);
  {
    auto jit = attachWaiting(vm);
    ASSERT_TRUE(jit.hasValue());
    ASSERT_TRUE(vm.run(0, args(DType::Float32, Shape{3, 3}, 1)).hasValue());
    ASSERT_TRUE(vm.run(0, args(DType::Float32, Shape{3, 3}, 2)).hasValue());
    EXPECT_GT(vm.stats().compiled_calls, 0u);
  }
  EXPECT_EQ(vm.options().observer, nullptr);
  const std::uint64_t compiled = vm.stats().compiled_calls;
  auto in = args(DType::Float32, Shape{3, 3}, 5);
  auto out = vm.run(0, in);
  ASSERT_TRUE(out.hasValue());
  expectSame(expected(in[0], in[1]), (*out)[0]);
  EXPECT_EQ(vm.stats().compiled_calls, compiled);
}

// A tuner whose estimate is fixed and whose tune() answers the default parameters at once.
class FixedCostTuner final : public Tuner {
 public:
  explicit FixedCostTuner(double cost_ms) : cost_ms_(cost_ms) {}
  TuneEstimate estimate(KernelBackend&, const KernelFamily&, const KernelSpec&, double) const override {
    return {cost_ms_, 1.0};
  }
  Expected<TuneOutcome> tune(KernelBackend&, const KernelFamily&, const KernelSpec&,
                             std::span<const Value* const>) override {
    TuneOutcome outcome;
    outcome.timed = 1;
    return outcome;
  }

 private:
  double cost_ms_;
};

TEST_F(TieringTest, O2TuningWaitsUntilTheTimeSpentRepaysItsEstimatedCost) {
  eagerTierUp();
  auto module = load(kProgram);
  std::uint64_t untuned_compiles = 0;
  for (const double cost_ms : {1e9, 1e-3}) {
    VirtualMachine vm(module);
    FixedCostTuner tuner(cost_ms);
    JitOptions options;
    options.level = 2;
    options.tuner = &tuner;  // no wait_for_compiles: pay-off waiting applies
    auto jit = Jit::attach(vm, options);
    ASSERT_TRUE(jit.hasValue()) << jit.status().toString();
    for (int run = 0; run < 40; ++run) {
      auto in = args(DType::Float32, Shape{16, 64}, static_cast<std::uint32_t>(run));
      auto out = vm.run(0, in);
      ASSERT_TRUE(out.hasValue()) << out.status().toString();
      expectSame(expected(in[0], in[1]), (*out)[0]);
      if (run % 10 == 9) (*jit)->waitIdle();  // let the installs (and any tuning) land
    }
    (*jit)->waitIdle();
    const JitStats stats = (*jit)->stats();
    EXPECT_GT(stats.compiles, 0u) << "the default-parameter kernels are installed first";
    // add and tanh compile on their own here (no fused range): the elementwise family has no
    // candidates to time, so the tuned recompile is what shows that tuning started.
    if (cost_ms > 1) {
      EXPECT_GT(stats.tuning_deferred, 0u) << "tuning never repays 1e9 ms here\n" << (*jit)->statsReport();
      untuned_compiles = stats.compiles;
    } else {
      EXPECT_EQ(stats.tuning_deferred, 0u) << (*jit)->statsReport();
      EXPECT_GT(stats.compiles, untuned_compiles) << "a microsecond of tuning pays off at once: tuned recompiles\n"
                                                  << (*jit)->statsReport();
    }
  }
}

// The scheduling policy and nice value of the thread that compiles and tunes (asked for tuning,
// it records them and answers "no tuning": default parameters).
class PriorityRecordingTuner final : public Tuner {
 public:
  Expected<TuneOutcome> tune(KernelBackend&, const KernelFamily&, const KernelSpec&,
                             std::span<const Value* const>) override {
    policy = sched_getscheduler(0);
    nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
    // The compile may start before the program reaches its wait (wait_for_compiles): give it up to
    // 5 s to get there, so the counts below are those of a waiting program, not of the race.
    for (int i = 0; i < 5000 && busyProgramThreads() != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    program_threads = busyProgramThreads();
    compile_threads = busyCompileThreads();
    kernel_threads = kernelThreads();
    calls.fetch_add(1);
    return makeError(ErrorCode::Unsupported, "recording only");
  }
  std::atomic<int> calls{0};
  std::atomic<int> policy{-1};
  std::atomic<int> nice{0};
  std::atomic<int> program_threads{-1}, compile_threads{-1}, kernel_threads{-1};  // as the compile saw them
};

TEST_F(TieringTest, TheCompileThreadRunsBelowTheInterpretersPriority) {
  eagerTierUp();
  ASSERT_TRUE(Tunables::set(Tunable::JitLevel, 2).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::CompileNice, 6).isOk());
  const int caller_policy = sched_getscheduler(0);
  const int caller_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  // A lone matmul (nothing to fuse): at O2 its site compile asks the tuner first.
  auto module = load(R"(.module "mm"
.func f
  .param a : f32[?0,32]
  .param b : f32[32,48]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
  CallOp matmul r2 = r0, r1 : f32[?0,32] x f32[32,48] -> f32[?0,48]
  StoreTensor r2, o0
  Return
.end
)");
  VirtualMachine vm(module);
  PriorityRecordingTuner tuner;
  JitOptions options;
  options.wait_for_compiles = true;
  options.tuner = &tuner;
  auto jit = Jit::attach(vm, options);
  ASSERT_TRUE(jit.hasValue()) << jit.status().toString();
  const std::vector<Value> in = {Value::fromTensor(random(DType::Float32, Shape{8, 32}, 3)),
                                 Value::fromTensor(random(DType::Float32, Shape{32, 48}, 4))};
  const Tensor want = callOp("matmul", {in[0], in[1]}).value()[0].tensor();
  for (int run = 0; run < 12 && tuner.calls.load() == 0; ++run) {
    const BusyProgramThread program;  // as Session::run marks the program's thread
    auto out = vm.run(0, in);
    ASSERT_TRUE(out.hasValue()) << out.status().toString();
    expectSame(want, (*out)[0], 1e-4);
    EXPECT_EQ(busyProgramThreads(), 1) << "the program thread counts again once its wait is over";
  }
  ASSERT_GT(tuner.calls.load(), 0) << "the O2 JIT never asked the tuner";
  EXPECT_EQ(sched_getscheduler(0), caller_policy) << "the interpreter thread is left alone";
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))), caller_nice);
  EXPECT_EQ(tuner.policy.load(), SCHED_BATCH);
  EXPECT_EQ(tuner.nice.load(), std::min(19, caller_nice + 6));
  // The program waiting for its compiles (wait_for_compiles) holds no core meanwhile, so a region's
  // helper threads may take it; the compile thread counts as busy, and kernels leave it its core.
  EXPECT_EQ(busyProgramThreads(), 0);
  EXPECT_EQ(tuner.program_threads.load(), 0) << "the waiting program was counted as holding a core";
  EXPECT_GE(tuner.compile_threads.load(), 1);
  EXPECT_EQ(tuner.kernel_threads.load(), std::max(1, availableCores() - tuner.compile_threads.load()));
}

}  // namespace
}  // namespace shapevm::jit
