// SPDX-License-Identifier: Apache-2.0
// Tier-up priorities and early regions (issue 23): a fused range that becomes hot after the
// warm-up queues on the run that made it hot (its interpreted-cost interval started during the
// warm-up), and O2 tuning runs on its own thread at tune_nice, so a first install is never held
// back by a tuning in progress and cancel() stops both threads.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "jit/compile_cancel.h"
#include "jit/hot_path.h"
#include "jit/jit.h"
#include "jit/validate.h"
#include "jit_test_util.h"
#include "ops/registry.h"
#include "support/tunables.h"
#include "vm/vm.h"

namespace shapevm::jit {
namespace {

namespace fs = std::filesystem;

// Two functions f and g, each the dense layer with a tanh tail (one fusible range: x @ w + b, tanh).
std::string twoDenseLayers() {
  const std::string one = testing::kDenseTanhProgram;
  std::string g = one.substr(one.find(".func f"));
  g.replace(0, 7, ".func g");
  return one + g;
}

Tensor randomTensor(const Shape& shape, std::uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = std::move(Tensor::empty(DType::Float32, shape).value());
  for (std::int64_t i = 0; i < t.numel(); ++i) storeFromDouble(t.rawData(), DType::Float32, i, dist(engine));
  return t;
}

class TierPriorityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tunables::resetToDefaults();
    ASSERT_TRUE(Tunables::set(Tunable::JitLevel, 2).isOk());
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() / fmt::format("svm-prio-{}-{}", ::getpid(), info->name())).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto assembled = assemble(twoDenseLayers(), "prio.svasm");
    ASSERT_TRUE(assembled.hasValue()) << assembled.status().toString();
    ASSERT_TRUE(verifyModule(*assembled).isOk());
    module_ = std::make_shared<Module>(std::move(*assembled));
  }
  void TearDown() override {
    Tunables::resetToDefaults();
    fs::remove_all(dir_);
  }

  JitOptions options() const {
    JitOptions out;
    out.level = 2;
    out.first_sight = false;      // the thresholds, not an install record
    out.kernel_cache_dir = dir_;  // nothing kept by another test serves these compiles
    return out;
  }
  static std::vector<Value> inputs(std::uint32_t seed) {
    return {Value::fromTensor(randomTensor(Shape{2048, 32}, seed)),
            Value::fromTensor(randomTensor(Shape{32, 48}, seed + 1)),
            Value::fromTensor(randomTensor(Shape{48}, seed + 2))};
  }
  // Runs `function` on fresh random inputs and checks the result against the reference kernels.
  void runChecked(VirtualMachine& vm, int function, std::uint32_t seed) {
    const std::vector<Value> in = inputs(seed);
    Value product = callOp("matmul", {in[0], in[1]}).value()[0];
    Value sum = callOp("add", {product, in[2]}).value()[0];
    const std::vector<Value> want = {callOp("tanh", {sum}).value()[0]};
    auto got = vm.run(function, in);
    ASSERT_TRUE(got.hasValue()) << got.status().toString();
    ASSERT_EQ(got->size(), 1u);
    EXPECT_TRUE(compareOutputs(want, *got).ok) << "function " << function << ", seed " << seed;
  }

  std::string dir_;
  std::shared_ptr<Module> module_;
};

// Warm-up 3, hot after 5 executions: the interval that tells the range is worth a launch starts
// after the warm-up, so the 5th run queues it (--jit-wait installs it before the 6th). Before,
// the interval started on the 5th run and the range waited for the 7th.
TEST_F(TierPriorityTest, ARangeQueuesOnTheRunThatMadeItHot) {
  ASSERT_TRUE(Tunables::set(Tunable::WarmupRuns, 3).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, 5).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::HotMs, 1).isOk());  // hot_ms = 0 would skip the interval altogether
  VirtualMachine vm(module_);
  JitOptions opts = options();
  opts.wait_for_compiles = true;
  auto jit = Jit::attach(vm, opts);
  ASSERT_TRUE(jit.hasValue()) << jit.status().toString();
  int installed_after = 0;
  for (int run = 1; run <= 10 && installed_after == 0; ++run) {
    runChecked(vm, 0, static_cast<std::uint32_t>(10 * run));
    const std::vector<Jit::RangeState> ranges = (*jit)->rangeStates(0);
    ASSERT_FALSE(ranges.empty());
    if (ranges[0].phase == Jit::RangeState::Phase::Installed) installed_after = run;
  }
  EXPECT_EQ(installed_after, 5) << (*jit)->statsReport();
  const JitStats stats = (*jit)->stats();
  EXPECT_EQ(stats.fused_regions, 1u);
  EXPECT_EQ(stats.requests, 1u) << "one request: the range, not its ops one by one";
  runChecked(vm, 0, 1000);
  EXPECT_GT(vm.stats().compiled_calls, 0u);
}

// A region's first compile on a process with a spare core counts a quarter of its estimated cost
// (it runs beside the program); on one core all of it.
TEST(CompilePayoffTest, ASpareCoreCountsAQuarterOfTheCompileCost) {
  EXPECT_DOUBLE_EQ(countedCompileCost(270.0, 0), 270.0);
  EXPECT_DOUBLE_EQ(countedCompileCost(270.0, 1), 270.0 * kSpareCoreCostFraction);
  EXPECT_DOUBLE_EQ(countedCompileCost(270.0, 3), 270.0 * kSpareCoreCostFraction);
  // The reference cell: 3 kernels at the 90 ms prior, ~27 ms per interpreted call on an idle host.
  EXPECT_FALSE(compilePaysOff(5 * 27.0, countedCompileCost(270.0, 0))) << "one core: still deferred after 5 calls";
  EXPECT_TRUE(compilePaysOff(5 * 27.0, countedCompileCost(270.0, 1))) << "a spare core: compiled when hot";
  EXPECT_FALSE(compilePaysOff(1.0, countedCompileCost(1e6, 1))) << "a huge estimate still waits";
}

// Pay-off aware hotness (issue 23 item 7), the decision alone: interpreted time that repays the
// counted compile estimate, at least hot_ms, and at least kEarlyCompileMinCallNs per execution.
TEST(CompilePayoffTest, ARangeIsHotBeforeHotCountOnlyWhenItsInterpretedTimeRepaysTheCompile) {
  Tunables::resetToDefaults();
  ASSERT_TRUE(Tunables::set(Tunable::HotMs, 20).isOk());
  // The reference cell after its 3 warm-up runs: ~20 ms per interpreted call, 3 kernels at 35 ms,
  // a spare core (a quarter counted): 60 ms x 75% >= 26 ms.
  const double cost = countedCompileCost(3 * 35.0, 1);
  EXPECT_TRUE(paysOffBeforeHot(60.0, 20e6, cost));
  EXPECT_FALSE(paysOffBeforeHot(30.0, 10e6, countedCompileCost(3 * 35.0, 0))) << "one core: all of it counts";
  EXPECT_FALSE(paysOffBeforeHot(19.0, 6e6, 1.0)) << "under hot_ms";
  EXPECT_FALSE(paysOffBeforeHot(60.0, kEarlyCompileMinCallNs / 2, 1.0)) << "cheap calls wait for hot_count";
  EXPECT_FALSE(paysOffBeforeHot(60.0, 20e6, 1e6)) << "a huge estimate";
  EXPECT_FALSE(paysOffBeforeHot(60.0, 20e6, 0.0)) << "no estimate (compile_payoff_ms = 0): hot_count decides";
  ASSERT_TRUE(Tunables::set(Tunable::HotMs, 0).isOk());
  EXPECT_FALSE(paysOffBeforeHot(60.0, 20e6, cost)) << "hot_ms = 0: hot_count decides";
  Tunables::resetToDefaults();
}

// The same in a VM: f's calls are expensive (262144 rows: tens of ms each), g's cheap (64 rows:
// microseconds, under hot_ms = 30 however the host preempts its 3 runs). With hot_count far away,
// f's range is queued right after the warm-up (3 runs), its interpreted time having repaid the
// estimate; g's stays cold. A huge estimate, or --jit-wait, keeps f cold too.
TEST_F(TierPriorityTest, AnExpensiveRangeCompilesAfterTheWarmUpACheapOneWaitsForHotCount) {
  ASSERT_TRUE(Tunables::set(Tunable::WarmupRuns, 3).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, 1000).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::HotMs, 30).isOk());
  const auto rows_inputs = [](std::int64_t rows, std::uint32_t seed) {
    return std::vector<Value>{Value::fromTensor(randomTensor(Shape{rows, 32}, seed)),
                              Value::fromTensor(randomTensor(Shape{32, 48}, seed + 1)),
                              Value::fromTensor(randomTensor(Shape{48}, seed + 2))};
  };
  const std::vector<Value> big = rows_inputs(262144, 7), small = rows_inputs(64, 9);
  struct Case {
    std::int64_t payoff_ms;
    bool wait;
    bool f_early;
  };
  for (const Case c : {Case{1, false, true}, Case{1000000, false, false}, Case{1, true, false}}) {
    SCOPED_TRACE(fmt::format("compile_payoff_ms={} wait_for_compiles={}", c.payoff_ms, c.wait));
    ASSERT_TRUE(Tunables::set(Tunable::CompilePayoffMs, c.payoff_ms).isOk());
    VirtualMachine vm(module_);
    JitOptions opts = options();
    opts.wait_for_compiles = c.wait;
    auto jit = Jit::attach(vm, opts);
    ASSERT_TRUE(jit.hasValue()) << jit.status().toString();
    const auto phase = [&](int function) { return (*jit)->rangeStates(function).at(0).phase; };
    for (int run = 1; run <= 4; ++run) {
      for (int function : {0, 1}) {
        auto got = vm.run(function, function == 0 ? big : small);
        ASSERT_TRUE(got.hasValue()) << got.status().toString();
      }
      (*jit)->waitIdle();
      if (run < 3) {
        EXPECT_EQ(phase(0), Jit::RangeState::Phase::Cold) << "run " << run << ": the warm-up compiles nothing";
      }
    }
    EXPECT_EQ(phase(0), c.f_early ? Jit::RangeState::Phase::Installed : Jit::RangeState::Phase::Cold)
        << (*jit)->statsReport();
    EXPECT_EQ(phase(1), Jit::RangeState::Phase::Cold) << "g's calls are cheap: hot_count decides";
    EXPECT_EQ((*jit)->stats().early_compiles, c.f_early ? 1u : 0u);
    // Whatever tier serves it, f's result is the reference's.
    const std::vector<Value> want = {
        callOp("tanh", {callOp("add", {callOp("matmul", {big[0], big[1]}).value()[0], big[2]}).value()[0]}).value()[0]};
    auto got = vm.run(0, big);
    ASSERT_TRUE(got.hasValue());
    EXPECT_TRUE(compareOutputs(want, *got).ok);
  }
}

// A tuner whose estimate says tuning pays off at once, and whose tune() records the calling
// thread's scheduling and then blocks until the request is cancelled (or `release` is set).
class BlockingTuner final : public Tuner {
 public:
  TuneEstimate estimate(KernelBackend&, const KernelFamily&, const KernelSpec&, double) const override {
    return {1e-3, 1.0};
  }
  Expected<TuneOutcome> tune(KernelBackend&, const KernelFamily&, const KernelSpec&,
                             std::span<const Value* const>) override {
    policy.store(sched_getscheduler(0));
    nice.store(getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))));
    calls.fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // never hang the suite
    while (!compileCancelled() && !release.load() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (compileCancelled()) {
      cancelled.fetch_add(1);
      return makeError(ErrorCode::JitError, "{}", kCompileCancelledMessage);
    }
    return makeError(ErrorCode::Unsupported, "released");
  }
  std::atomic<int> calls{0}, cancelled{0};
  std::atomic<int> policy{-1}, nice{0};
  std::atomic<bool> release{false};
};

TEST_F(TierPriorityTest, TuningRunsOnItsOwnThreadAndNeverHoldsAFirstInstallBack) {
  ASSERT_TRUE(Tunables::set(Tunable::WarmupRuns, 0).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::HotCount, 1).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::HotMs, 0).isOk());  // compile as soon as hot; tuning still waits for pay-off
  ASSERT_TRUE(Tunables::set(Tunable::CompileNice, 2).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::TuneNice, 7).isOk());
  const int caller_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  VirtualMachine vm(module_);
  BlockingTuner tuner;
  JitOptions opts = options();
  opts.tuner = &tuner;  // no wait_for_compiles: the first install is untuned, tuning a later request
  auto jit = Jit::attach(vm, opts);
  ASSERT_TRUE(jit.hasValue()) << jit.status().toString();
  // f tiers up, untuned first; then its tuning starts and blocks in the tuner.
  for (int run = 0; run < 3000 && tuner.calls.load() == 0; ++run) {  // seconds at most, under sanitizers too
    runChecked(vm, 0, static_cast<std::uint32_t>(run));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_GT(tuner.calls.load(), 0) << "f's tuning never started\n" << (*jit)->statsReport();
  EXPECT_EQ(tuner.policy.load(), SCHED_BATCH);
  EXPECT_EQ(tuner.nice.load(), std::min(19, caller_nice + 7)) << "tuning runs at tune_nice";
  EXPECT_EQ((*jit)->rangeStates(0)[0].phase, Jit::RangeState::Phase::Queued) << "f's tuning is in flight";
  // While it is, g's first install goes through the compile thread.
  bool g_installed = false;
  for (int run = 0; run < 3000 && !g_installed; ++run) {
    runChecked(vm, 1, static_cast<std::uint32_t>(5000 + run));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    g_installed = (*jit)->rangeStates(1)[0].compiles > 0;  // installed (its own tuning may be queued since)
  }
  EXPECT_TRUE(g_installed) << "a tuning in progress held g's first install back\n" << (*jit)->statsReport();
  EXPECT_EQ(tuner.cancelled.load(), 0);
  const JitStats stats = (*jit)->stats();
  EXPECT_EQ(stats.fused_regions, 2u);
  EXPECT_GE(stats.compiles_pending, 1u) << "f's tuning counts as pending";
  // Shutdown reaches the tuning thread too: the blocked tuning stops at its next cancellation point.
  (*jit)->cancel();
  EXPECT_TRUE((*jit)->waitStopped(std::chrono::seconds(30))) << "the tuning thread was not cancelled";
  EXPECT_GE(tuner.cancelled.load(), 1);
  EXPECT_EQ((*jit)->stats().compiles_pending, 0u);
  tuner.release.store(true);
  runChecked(vm, 0, 9000);  // still right after the shutdown, on the untuned region
}

}  // namespace
}  // namespace shapevm::jit
