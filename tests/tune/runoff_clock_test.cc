// SPDX-License-Identifier: Apache-2.0
// The AutoTuner's clock (auto_tuner.h): with every candidate on the calling thread it reads that
// thread's CPU time and takes the median of the samples, otherwise the wall clock and the fastest
// sample. With a scripted timer (AutoTunerOptions::timer) the decision follows the scripted times
// alone: the same times give the same pick and the same run-off figures every time, and stalled
// samples (a preempted contender) do not turn it.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "../jit/jit_test_util.h"
#include "support/tunables.h"
#include "tune/auto_tuner.h"
#include "tune_test_util.h"

namespace shapevm::tune {
namespace {

using jit::KernelParams;
using testing::MatmulSubspace;

const KernelParams kSgemm{.library = 3};

// Scripted per-call times: each candidate's samples in turn read `us`, except the ones whose
// index (counted per candidate, from 0) is in `stalled`, which read 50x that (preempted samples).
struct Script {
  double us = 0;
  std::vector<int> stalled;
};
class ScriptedTimer {
 public:
  explicit ScriptedTimer(std::map<std::string, Script> scripts) : scripts_(std::move(scripts)) {}
  SampleTimer timer() {
    return [this](const KernelParams& params, std::int64_t /*calls*/, bool one_thread,
                  const std::function<Status()>& run) -> Expected<double> {
      SVM_RETURN_IF_ERROR(run());  // the kernels still run (and must run correctly)
      one_thread_seen_.push_back(one_thread);
      const std::string name = params.toString();
      const Script& script = scripts_.at(name);
      const int index = counts_[name]++;
      const bool stall = std::find(script.stalled.begin(), script.stalled.end(), index) != script.stalled.end();
      return stall ? script.us * 50 : script.us;
    };
  }
  const std::vector<bool>& oneThreadSeen() const { return one_thread_seen_; }
  int samples(const KernelParams& params) const {
    auto found = counts_.find(params.toString());
    return found == counts_.end() ? 0 : found->second;
  }

 private:
  std::map<std::string, Script> scripts_;
  std::map<std::string, int> counts_;
  std::vector<bool> one_thread_seen_;
};

struct Example {
  std::vector<Value> inputs;
  std::vector<const Value*> pointers;
  jit::KernelSpec spec;
};
Example matmulExample(std::int64_t m, std::int64_t k, std::int64_t n) {
  Example e;
  std::mt19937 rng(9);
  e.inputs = {jit::testing::operand(DType::Float32, Shape{m, k}, rng),
              jit::testing::operand(DType::Float32, Shape{k, n}, rng)};
  for (const Value& v : e.inputs) e.pointers.push_back(&v);
  e.spec = jit::exactSpec(OpId::MatMul, {}, e.pointers);
  return e;
}

class RunOffClock : public testing::TunerTest {
 protected:
  // Tunes {default, sgemm} on a 48x40x56 matmul with the scripted times, without the database
  // (every tune() times afresh); the outcome and its run-off.
  std::pair<KernelParams, RunOff> tuneScripted(ScriptedTimer& scripted,
                                               std::vector<KernelParams> space = {KernelParams{}, kSgemm}) {
    AutoTunerOptions options = options_;
    options.use_database = false;
    options.timer = scripted.timer();
    AutoTuner tuner(options);
    MatmulSubspace family(std::move(space));
    const Example e = matmulExample(48, 40, 56);
    auto outcome = tuner.tune(jit::testing::sharedBackend(), family, e.spec, e.pointers);
    EXPECT_TRUE(outcome.hasValue()) << outcome.status().toString();
    const std::vector<TuneReport> reports = tuner.reports();
    EXPECT_EQ(reports.size(), 1u);
    EXPECT_TRUE(!reports.empty() && reports[0].runoff.has_value());
    if (!outcome || reports.empty() || !reports[0].runoff) return {};
    return {outcome->params, *reports[0].runoff};
  }
};

// One thread: the run-off's figure per contender is the median of its samples, so the library
// candidate, 20% faster, wins though 3 of its 7 run-off samples stalled (it would lose on their
// mean); the same times give the same decision and figures every time.
TEST_F(RunOffClock, OnOneThreadTheMedianDecidesAndTheSameTimesGiveTheSamePick) {
  ASSERT_TRUE(Tunables::set(Tunable::KernelThreads, 1).isOk());
  // Sweep: one calibration sample + 3 repeats (indices 0..3); run-off: 7 rounds (4..10).
  const std::map<std::string, Script> scripts = {{KernelParams{}.toString(), {100.0, {}}},
                                                 {kSgemm.toString(), {80.0, {1, 4, 7, 10}}}};
  std::vector<std::pair<KernelParams, RunOff>> runs;
  for (int run = 0; run < 3; ++run) {
    ScriptedTimer scripted(scripts);
    runs.push_back(tuneScripted(scripted));
    EXPECT_EQ(scripted.samples(kSgemm), 11);
    ASSERT_FALSE(scripted.oneThreadSeen().empty());
    for (bool one : scripted.oneThreadSeen()) EXPECT_TRUE(one);
  }
  for (const auto& [params, runoff] : runs) {
    EXPECT_EQ(params, kSgemm);
    EXPECT_TRUE(runoff.cpu_clock);
    EXPECT_EQ(runoff.rounds, 7);
    EXPECT_EQ(runoff.generated, KernelParams{});
    EXPECT_EQ(runoff.library, kSgemm);
    EXPECT_DOUBLE_EQ(runoff.generated_us, 100.0);
    EXPECT_DOUBLE_EQ(runoff.library_us, 80.0);
  }

  // Reversed: the generated kernel is faster and stalls as often; it wins.
  ScriptedTimer reversed({{KernelParams{}.toString(), {80.0, {1, 4, 7, 10}}}, {kSgemm.toString(), {100.0, {}}}});
  const auto [params, runoff] = tuneScripted(reversed);
  EXPECT_EQ(params, KernelParams{});
  EXPECT_DOUBLE_EQ(runoff.generated_us, 80.0);
  EXPECT_DOUBLE_EQ(runoff.library_us, 100.0);
}

// A close call (the two fastest within the 2% noise margin) is timed again, those two alone, in
// twice the rounds, and the faster there wins whichever kind it is: before, a generated kernel
// had to beat the library by the margin, so a library kernel 1% slower was kept.
TEST_F(RunOffClock, ACloseCallIsTimedAgainAndTheFasterWins) {
  ASSERT_TRUE(Tunables::set(Tunable::KernelThreads, 1).isOk());
  for (const bool generated_faster : {true, false}) {
    SCOPED_TRACE(generated_faster ? "generated 1% faster" : "library 1% faster");
    ScriptedTimer scripted({{KernelParams{}.toString(), {generated_faster ? 99.0 : 100.0, {}}},
                            {kSgemm.toString(), {generated_faster ? 100.0 : 99.0, {}}}});
    const auto [params, runoff] = tuneScripted(scripted);
    EXPECT_EQ(params, generated_faster ? KernelParams{} : kSgemm);
    EXPECT_EQ(runoff.rounds, 7);
    EXPECT_EQ(runoff.decider_rounds, 14);
    EXPECT_EQ(scripted.samples(kSgemm), 4 + 7 + 14);  // sweep, run-off, decider
    EXPECT_DOUBLE_EQ(runoff.generated_us, generated_faster ? 99.0 : 100.0);
    EXPECT_DOUBLE_EQ(runoff.library_us, generated_faster ? 100.0 : 99.0);
  }
  // Far apart: no decider.
  ScriptedTimer apart({{KernelParams{}.toString(), {100.0, {}}}, {kSgemm.toString(), {90.0, {}}}});
  const auto [params, runoff] = tuneScripted(apart);
  EXPECT_EQ(params, kSgemm);
  EXPECT_EQ(runoff.decider_rounds, 0);
  EXPECT_EQ(apart.samples(kSgemm), 4 + 7);
}

// The sweep's second fastest generated candidate runs in the run-off too: a candidate whose sweep
// samples all stalled (preempted) reads slow there, but wins the run-off on its own time.
TEST_F(RunOffClock, TheSweepsRunnerUpIsTimedAgain) {
  ASSERT_TRUE(Tunables::set(Tunable::KernelThreads, 1).isOk());
  const KernelParams tile{.mr = 4, .nr = 32};
  ScriptedTimer scripted({{KernelParams{}.toString(), {100.0, {}}},
                          {tile.toString(), {80.0, {0, 1, 2, 3}}},
                          {kSgemm.toString(), {95.0, {}}}});
  const auto [params, runoff] = tuneScripted(scripted, {KernelParams{}, tile, kSgemm});
  EXPECT_EQ(params, tile);
  EXPECT_EQ(runoff.generated, tile);
  EXPECT_DOUBLE_EQ(runoff.generated_us, 80.0);
  EXPECT_DOUBLE_EQ(runoff.library_us, 95.0);
  EXPECT_EQ(scripted.samples(tile), 4 + 7);
}

// Kernels on the pool (KernelThreads=2): the wall clock, and the fastest sample per contender, so
// a contender stalled in 6 of its 7 run-off rounds still reads its own time and wins.
TEST_F(RunOffClock, OnThePoolTheFastestWallSampleDecides) {
  ASSERT_TRUE(Tunables::set(Tunable::KernelThreads, 2).isOk());
  ScriptedTimer scripted({{KernelParams{}.toString(), {100.0, {}}}, {kSgemm.toString(), {90.0, {4, 5, 6, 7, 8, 10}}}});
  const auto [params, runoff] = tuneScripted(scripted);
  EXPECT_EQ(params, kSgemm);
  EXPECT_FALSE(runoff.cpu_clock);
  EXPECT_DOUBLE_EQ(runoff.library_us, 90.0);
  EXPECT_DOUBLE_EQ(runoff.generated_us, 100.0);
  ASSERT_FALSE(scripted.oneThreadSeen().empty());
  for (bool one : scripted.oneThreadSeen()) EXPECT_FALSE(one);
}

// The default timer on one thread counts the calling thread's CPU time: time the thread spends off
// the core (here asleep, as when other processes hold it) is not counted; the wall clock counts it.
TEST_F(RunOffClock, TheDefaultTimerOnOneThreadCountsOnlyThisThreadsWork) {
  auto sleep = [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return Status::ok();
  };
  Expected<double> cpu = timeSample(KernelParams{}, 2, true, sleep);
  Expected<double> wall = timeSample(KernelParams{}, 2, false, sleep);
  ASSERT_TRUE(cpu.hasValue() && wall.hasValue());
  EXPECT_GE(*wall, 15000.0);  // 30 ms over 2 calls
  EXPECT_LT(*cpu, 5000.0);
  EXPECT_GE(*cpu, 0.0);
  Status failed = makeError(ErrorCode::JitError, "stopped");
  EXPECT_FALSE(timeSample(KernelParams{}, 1, true, [&] { return failed; }).hasValue());
}

}  // namespace
}  // namespace shapevm::tune
