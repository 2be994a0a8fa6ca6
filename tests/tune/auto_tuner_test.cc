// SPDX-License-Identifier: Apache-2.0
// The AutoTuner on a test-only kernel family (the real add kernel behind a declared search space
// with one candidate that fails to compile, one that computes the wrong op, and one made slow on
// purpose): failing and disagreeing candidates are skipped, the slow one never wins, the winner is
// never slower than the default, the budget stops the search, the winner is written to the
// database and a second AutoTuner answers from it without timing; corrupted, truncated, edited
// and out-of-space records are reported with file:line and ignored; the predictor times the
// history's winner right after the default.
#include "tune/auto_tuner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "../jit/jit_test_util.h"
#include "jit/compile_cancel.h"
#include "support/tunables.h"
#include "tune_test_util.h"

namespace shapevm::tune {
namespace {

using jit::KernelParams;
using jit::KernelSpec;

KernelParams withUnroll(int unroll) {
  KernelParams p;
  p.unroll = unroll;
  return p;
}
KernelParams withChunk(int chunk) {
  KernelParams p;
  p.chunk = chunk;
  return p;
}
const KernelParams kFailsToCompile = withUnroll(13);
const KernelParams kWrongResult = withChunk(7);

// The elementwise add kernel behind a declared search space. Candidates' params are ignored by
// the real code generator except: kFailsToCompile (emit fails), kWrongResult (compiles sub), and
// the `slow` set (prepare() spins for slow_us on every call).
class FakeAddFamily final : public jit::KernelFamily, public jit::LlvmKernelEmitter {
 public:
  FakeAddFamily(std::vector<KernelParams> space, std::vector<KernelParams> slow = {}, double slow_us = 0)
      : inner_(jit::familyFor(OpId::Add)), space_(std::move(space)), slow_(std::move(slow)), slow_us_(slow_us) {}

  std::string_view name() const override { return "fake_add"; }
  Status supports(const KernelSpec& spec) const override { return inner_->supports(spec); }
  Status outputs(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                 std::span<Shape> shapes) const override {
    return inner_->outputs(spec, inputs, dtypes, shapes);
  }
  Status prepare(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<const Tensor> outputs,
                 jit::KernelArgs& args) const override {
    if (std::find(slow_.begin(), slow_.end(), spec.params) != slow_.end()) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(slow_us_);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    return inner_->prepare(spec, inputs, outputs, args);
  }
  Status emit(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) const override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      compiled_.push_back(spec.params);
    }
    if (spec.params == kFailsToCompile) return makeError(ErrorCode::JitError, "test: this candidate never compiles");
    if (spec.params == kWrongResult) {
      KernelSpec sub = spec;
      sub.op = OpId::Sub;
      return dynamic_cast<const jit::LlvmKernelEmitter&>(*jit::familyFor(OpId::Sub)).emit(sub, module, symbol);
    }
    return dynamic_cast<const jit::LlvmKernelEmitter&>(*inner_).emit(spec, module, symbol);
  }
  std::string symbolStem(const KernelSpec& spec) const override { return "fake_" + inner_->symbolStem(spec); }
  std::vector<KernelParams> searchSpace(const KernelSpec&) const override { return space_; }

  std::vector<KernelParams> compiled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return compiled_;
  }

 private:
  const jit::KernelFamily* inner_;
  std::vector<KernelParams> space_;
  std::vector<KernelParams> slow_;
  double slow_us_;
  mutable std::mutex mutex_;
  mutable std::vector<KernelParams> compiled_;
};

// Example inputs of add over two f32 [n] vectors, and their spec.
struct Case {
  std::vector<Value> inputs;
  std::vector<const Value*> pointers;
  KernelSpec spec;
};
Case addCase(std::int64_t n) {
  Case c;
  c.spec = jit::exactSpec(OpId::Add, {}, {});
  jit::OperandSpec operand;
  operand.dtype = DType::Float32;
  operand.rank = 1;
  operand.dims[0].size = n;
  c.spec.inputs = {operand, operand};
  const std::vector<Shape> shapes = {Shape{n}, Shape{n}};
  auto drawn = jit::randomInputs(c.spec, shapes, 42);
  EXPECT_TRUE(drawn.hasValue());
  c.inputs = std::move(*drawn);
  for (const Value& v : c.inputs) c.pointers.push_back(&v);
  return c;
}

class AutoTunerTest : public testing::TunerTest {
 protected:
  void SetUp() override {
    TunerTest::SetUp();
    path_ = options_.database_path;
  }
  AutoTunerOptions options(bool use_database = true) const {
    AutoTunerOptions o;
    o.use_database = use_database;
    o.database_path = path_;
    return o;
  }
  std::vector<std::string> lines() const {
    std::ifstream in(path_);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  std::string path_;
};

const std::vector<KernelParams> kSpace = {KernelParams{}, withUnroll(2), kFailsToCompile, kWrongResult, withUnroll(99),
                                          withUnroll(4)};

TEST_F(AutoTunerTest, FailingAndDisagreeingCandidatesAreSkippedAndTheSlowOneLoses) {
  FakeAddFamily family(kSpace, {withUnroll(99)}, 2000);
  Case c = addCase(4096);
  jit::KernelBackend& engine = jit::testing::sharedBackend();
  const std::size_t live = engine.liveKernels();
  AutoTuner tuner(options(false));
  auto outcome = tuner.tune(engine, family, c.spec, c.pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  EXPECT_FALSE(outcome->from_database);
  EXPECT_EQ(outcome->candidates, 6);
  EXPECT_EQ(outcome->failed, 2);  // one never compiles, one computes sub instead of add
  EXPECT_EQ(outcome->timed, 4);
  EXPECT_NE(outcome->params, withUnroll(99));
  EXPECT_NE(outcome->params, kFailsToCompile);
  EXPECT_NE(outcome->params, kWrongResult);
  EXPECT_GT(outcome->default_us, 0);
  EXPECT_LE(outcome->best_us, outcome->default_us);  // never slower than the default
  EXPECT_GT(outcome->tuning_ms, 0);
  EXPECT_EQ(engine.liveKernels(), live) << "every candidate's code is removed";
  EXPECT_FALSE(std::filesystem::exists(path_)) << "use_database=false writes nothing";
  ASSERT_EQ(tuner.reports().size(), 1u);
  EXPECT_EQ(tuner.reports()[0].family, "fake_add");
}

TEST_F(AutoTunerTest, ASlowDefaultLosesToAFasterCandidate) {
  FakeAddFamily family({KernelParams{}, withUnroll(2), withUnroll(4)}, {KernelParams{}}, 1000);
  Case c = addCase(1024);
  AutoTuner tuner(options(false));
  auto outcome = tuner.tune(jit::testing::sharedBackend(), family, c.spec, c.pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  EXPECT_FALSE(outcome->params.isDefault());
  EXPECT_GT(outcome->default_us, 900);
  EXPECT_LT(outcome->best_us * 2, outcome->default_us);
}

TEST_F(AutoTunerTest, TheChoiceIsNeverSlowerThanTheDefaultByItsOwnTiming) {
  // Identical code under every params: whichever wins, by the tuner's own medians it is no slower
  // than the default, which is always timed. (Re-timing the two afterwards is a timed test: under
  // a loaded ctest -j run the noise exceeded any fixed margin. The benchmark suite compares the
  // AutoTuner's choice with the default and the exhaustive best.)
  FakeAddFamily family({KernelParams{}, withUnroll(2), withUnroll(4), withUnroll(8)});
  Case c = addCase(1 << 16);
  ASSERT_TRUE(Tunables::set(Tunable::TuneRepeats, 9).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::TuneSampleUs, 500).isOk());
  AutoTuner tuner(options(false));
  auto outcome = tuner.tune(jit::testing::sharedBackend(), family, c.spec, c.pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  EXPECT_GT(outcome->default_us, 0.0);
  EXPECT_LE(outcome->best_us, outcome->default_us) << "chosen " << outcome->params.toString();
  EXPECT_EQ(outcome->timed, 4);
}

TEST_F(AutoTunerTest, EveryCandidateFailingIsAnError) {
  FakeAddFamily family({kFailsToCompile, kFailsToCompile});
  Case c = addCase(64);
  AutoTuner tuner(options());
  auto outcome = tuner.tune(jit::testing::sharedBackend(), family, c.spec, c.pointers);
  ASSERT_FALSE(outcome.hasValue());
  EXPECT_NE(outcome.status().message().find("every candidate failed"), std::string::npos) << outcome.status().message();
  EXPECT_FALSE(std::filesystem::exists(path_)) << "no winner, no record";
}

TEST_F(AutoTunerTest, TheBudgetStopsTheSearchButTheDefaultIsAlwaysTimed) {
  std::vector<KernelParams> space{KernelParams{}};
  for (int u = 1; u <= 20; ++u) space.push_back(withUnroll(u));
  FakeAddFamily family(space, space, 3000);  // every call takes >= 3 ms
  Case c = addCase(256);
  ASSERT_TRUE(Tunables::set(Tunable::TuneSampleUs, 0).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::TuneBudgetMs, 40).isOk());
  AutoTuner tuner(options(false));
  auto outcome = tuner.tune(jit::testing::sharedBackend(), family, c.spec, c.pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  EXPECT_GE(outcome->timed, 1);
  EXPECT_LT(outcome->timed, 21);
  // At most one candidate (6 calls of 3 ms + its compile) runs past the budget.
  EXPECT_LT(outcome->tuning_ms, 40 + 400) << outcome->timed << " timed";

  ASSERT_TRUE(Tunables::set(Tunable::TuneBudgetMs, 0).isOk());
  AutoTuner only_default(options(false));
  auto first = only_default.tune(jit::testing::sharedBackend(), family, c.spec, c.pointers);
  ASSERT_TRUE(first.hasValue());
  EXPECT_EQ(first->timed, 1);
  EXPECT_TRUE(first->params.isDefault());
}

TEST_F(AutoTunerTest, TheWinnerIsWrittenAndASecondTunerAnswersFromTheDatabase) {
  FakeAddFamily family({KernelParams{}, withUnroll(2), withUnroll(4)}, {KernelParams{}}, 500);
  Case c = addCase(2048);
  jit::KernelBackend& engine = jit::testing::sharedBackend();
  jit::KernelParams winner;
  {
    AutoTuner first(options());
    auto outcome = first.tune(engine, family, c.spec, c.pointers);
    ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
    EXPECT_FALSE(outcome->from_database);
    EXPECT_EQ(outcome->timed, 3);
    winner = outcome->params;
    EXPECT_FALSE(winner.isDefault());
  }
  std::vector<std::string> written = lines();
  ASSERT_EQ(written.size(), 1u);
  auto record = parseRecord(written[0]);
  ASSERT_TRUE(record.hasValue()) << record.status().toString() << "\n" << written[0];
  EXPECT_EQ(record->family, "fake_add");
  EXPECT_EQ(record->signature, "Add:(2048)x(2048)");
  EXPECT_EQ(record->params, winner);
  EXPECT_EQ(record->cpu, engine.capabilities().target);
  EXPECT_EQ(record->features,
            kernelKey(family, c.spec, engine.capabilities().target, engine.capabilities().features).features);
  EXPECT_EQ(kernelKey(family, c.spec, "cpu", "b a c").features, "a b c") << "features are sorted";
  EXPECT_EQ(record->candidates, 3);
  EXPECT_GT(record->default_us, record->us);
  // The whole timing table (the predictor's training data): every candidate once, the winner's
  // time the record's.
  ASSERT_EQ(record->times.size(), 3u);
  for (const KernelParams& p : {KernelParams{}, withUnroll(2), withUnroll(4)}) {
    EXPECT_EQ(std::count_if(record->times.begin(), record->times.end(),
                            [&](const TuningRecord::Timed& t) { return t.params == p && t.us > 0; }),
              1)
        << p.toString();
  }
  const auto winner_time = std::find_if(record->times.begin(), record->times.end(),
                                        [&](const TuningRecord::Timed& t) { return t.params == winner; });
  ASSERT_NE(winner_time, record->times.end());
  EXPECT_DOUBLE_EQ(winner_time->us, record->us);
  EXPECT_EQ(record->key, kernelKey(family, c.spec, engine.capabilities().target, engine.capabilities().features).key());

  const std::size_t compiles_before = family.compiled().size();
  AutoTuner second(options());
  EXPECT_EQ(second.database().size(), 1u);
  EXPECT_TRUE(second.database().warnings().empty());
  auto again = second.tune(engine, family, c.spec, c.pointers);
  ASSERT_TRUE(again.hasValue()) << again.status().toString();
  EXPECT_TRUE(again->from_database);
  EXPECT_EQ(again->timed, 0);
  EXPECT_EQ(again->params, winner);
  EXPECT_EQ(family.compiled().size(), compiles_before) << "a database hit compiles nothing";
  EXPECT_EQ(lines().size(), 1u) << "a hit appends nothing";

  // Another shape is another key: tuned and appended.
  Case other = addCase(4096);
  auto tuned = second.tune(engine, family, other.spec, other.pointers);
  ASSERT_TRUE(tuned.hasValue());
  EXPECT_FALSE(tuned->from_database);
  EXPECT_EQ(lines().size(), 2u);

  // --no-cache / TuneCache=0: neither read nor written.
  ASSERT_TRUE(Tunables::set(Tunable::TuneCache, 0).isOk());
  AutoTuner uncached(options());
  EXPECT_FALSE(uncached.databaseEnabled());
  auto timed = uncached.tune(engine, family, c.spec, c.pointers);
  ASSERT_TRUE(timed.hasValue());
  EXPECT_FALSE(timed->from_database);
  EXPECT_GT(timed->timed, 0);
  EXPECT_EQ(lines().size(), 2u);
}

TEST_F(AutoTunerTest, CorruptedTruncatedAndEditedLinesAreReportedAndIgnored) {
  FakeAddFamily family({KernelParams{}, withUnroll(2), withUnroll(4)}, {KernelParams{}}, 500);
  jit::KernelBackend& engine = jit::testing::sharedBackend();
  Case c = addCase(512);
  Case other = addCase(300);
  // Real records to mangle: tune both shapes into a scratch database first.
  std::string good_line, other_line;
  {
    const std::string scratch = dir_ + "/scratch.jsonl";
    AutoTunerOptions o = options();
    o.database_path = scratch;
    AutoTuner tuner(o);
    ASSERT_TRUE(tuner.tune(engine, family, c.spec, c.pointers).hasValue());
    ASSERT_TRUE(tuner.tune(engine, family, other.spec, other.pointers).hasValue());
    std::ifstream in(scratch);
    std::getline(in, good_line);
    std::getline(in, other_line);
  }
  std::string edited = other_line;
  const std::size_t at = edited.find("\"params\":\"unroll=");
  ASSERT_NE(at, std::string::npos) << edited;
  edited.replace(at, std::string("\"params\":\"unroll=").size() + 1, "\"params\":\"unroll=8");
  {
    std::ofstream out(path_);
    out << "this is not json\n";                                // 1
    out << "{\"key\": 1}\n";                                    // 2: wrong field type
    out << "\n";                                                // 3: blank lines are fine
    out << edited << "\n";                                      // 4: checksum mismatch
    out << "[1,2,3]\n";                                         // 5: not an object
    out << good_line.substr(0, good_line.size() / 2);           // 6: truncated, no newline
  }
  AutoTuner tuner(options());
  std::vector<std::string> warnings = tuner.database().warnings();
  ASSERT_EQ(warnings.size(), 5u);
  for (int line : {1, 2, 4, 5, 6}) {
    const std::string where = fmt::format("{}:{}:", path_, line);
    EXPECT_TRUE(std::any_of(warnings.begin(), warnings.end(), [&](const std::string& w) { return w.find(where) == 0; }))
        << where;
  }
  EXPECT_NE(warnings[2].find("checksum"), std::string::npos) << warnings[2];
  EXPECT_NE(warnings[4].find("truncated"), std::string::npos) << warnings[4];
  EXPECT_EQ(tuner.database().size(), 0u);

  // Neither the truncated nor the edited record is trusted: both kernels are timed again.
  auto outcome = tuner.tune(engine, family, c.spec, c.pointers);
  ASSERT_TRUE(outcome.hasValue());
  EXPECT_FALSE(outcome->from_database);
  EXPECT_GT(outcome->timed, 0);
  auto edited_outcome = tuner.tune(engine, family, other.spec, other.pointers);
  ASSERT_TRUE(edited_outcome.hasValue());
  EXPECT_FALSE(edited_outcome->from_database);

  // The appended record starts on its own line after the torn one, so it reads back.
  AutoTuner reread(options());
  EXPECT_EQ(reread.database().size(), 2u);
  auto hit = reread.tune(engine, family, c.spec, c.pointers);
  ASSERT_TRUE(hit.hasValue());
  EXPECT_TRUE(hit->from_database);
}

TEST_F(AutoTunerTest, ARecordOutsideTheCurrentSearchSpaceIsIgnoredAndRetuned) {
  Case c = addCase(1000);
  jit::KernelBackend& engine = jit::testing::sharedBackend();
  {
    FakeAddFamily old_space({KernelParams{}, withUnroll(16)}, {KernelParams{}}, 500);
    AutoTuner tuner(options());
    auto outcome = tuner.tune(engine, old_space, c.spec, c.pointers);
    ASSERT_TRUE(outcome.hasValue());
    ASSERT_EQ(outcome->params, withUnroll(16));
  }
  FakeAddFamily new_space({KernelParams{}, withUnroll(2)}, {KernelParams{}}, 500);
  AutoTuner tuner(options());
  EXPECT_EQ(tuner.database().size(), 1u);
  auto outcome = tuner.tune(engine, new_space, c.spec, c.pointers);
  ASSERT_TRUE(outcome.hasValue());
  EXPECT_FALSE(outcome->from_database);
  EXPECT_EQ(outcome->params, withUnroll(2));
  std::vector<std::string> warnings = tuner.database().warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("not in the fake_add family's search space"), std::string::npos) << warnings[0];
}

TEST_F(AutoTunerTest, ThePredictorTimesTheNearestShapesWinnerRightAfterTheDefault) {
  std::vector<KernelParams> space{KernelParams{}};
  for (int u = 1; u <= 10; ++u) space.push_back(withUnroll(u));
  jit::KernelBackend& engine = jit::testing::sharedBackend();
  {
    // History: at n=1000 only unroll=7 is fast.
    std::vector<KernelParams> slow = space;
    slow.erase(slow.begin() + 7);
    FakeAddFamily history(space, slow, 300);
    AutoTuner tuner(options());
    Case c = addCase(1000);
    auto outcome = tuner.tune(engine, history, c.spec, c.pointers);
    ASSERT_TRUE(outcome.hasValue());
    ASSERT_EQ(outcome->params, withUnroll(7));
  }
  // A nearby shape with TuneCandidates=2: the default, then the neighbour's winner.
  ASSERT_TRUE(Tunables::set(Tunable::TuneCandidates, 2).isOk());
  FakeAddFamily family(space);
  AutoTuner tuner(options());
  Case near = addCase(1200);
  auto outcome = tuner.tune(engine, family, near.spec, near.pointers);
  ASSERT_TRUE(outcome.hasValue());
  EXPECT_FALSE(outcome->from_database);
  EXPECT_EQ(outcome->timed, 2);
  EXPECT_EQ(family.compiled(), (std::vector<KernelParams>{KernelParams{}, withUnroll(7)}));
}

TEST_F(AutoTunerTest, ShutdownCancelsTuningPromptlyAndRecordsNothing) {
  std::vector<KernelParams> space{KernelParams{}};
  for (int u = 1; u <= 20; ++u) space.push_back(withUnroll(u));
  FakeAddFamily family(space, space, 3000);  // every call takes >= 3 ms: ~25 ms per sample, seconds in all
  Case c = addCase(256);
  ASSERT_TRUE(Tunables::set(Tunable::TuneSampleUs, 20000).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::TuneBudgetMs, 600000).isOk());
  jit::KernelBackend& engine = jit::testing::sharedBackend();
  const std::size_t live = engine.liveKernels();
  AutoTuner tuner(options());
  std::mutex mutex;
  std::condition_variable started_cv;
  bool started = false;
  tuner.setProgress([&](const TuneProgress& progress) {
    if (progress.done || progress.candidate < 1) return;
    std::lock_guard<std::mutex> lock(mutex);
    started = true;
    started_cv.notify_all();
  });
  std::atomic<bool> cancel{false};
  Expected<jit::TuneOutcome> outcome = jit::TuneOutcome{};
  std::thread compile_thread([&] {
    const jit::CompileCancelScope scope(&cancel);
    outcome = tuner.tune(engine, family, c.spec, c.pointers);
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(started_cv.wait_for(lock, std::chrono::seconds(60), [&] { return started; }));
  }
  const auto cancelled_at = std::chrono::steady_clock::now();
  cancel.store(true);
  compile_thread.join();
  const double waited_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - cancelled_at).count();
  // One kernel call (3 ms) or one add-kernel compile, not the ~19 candidates x 0.2 s still to come.
  EXPECT_LT(waited_ms, 500) << "the tuner did not stop at its next cancellation point";
  ASSERT_FALSE(outcome.hasValue());
  EXPECT_NE(outcome.status().message().find("cancelled"), std::string::npos) << outcome.status().message();
  EXPECT_TRUE(lines().empty()) << "half-finished tuning leaves no record";
  EXPECT_TRUE(tuner.reports().empty()) << "nor a report";
  EXPECT_EQ(engine.liveKernels(), live) << "every candidate's code is removed";
  // Outside a cancelled scope the same tuner works (the flag belongs to the compile thread's request).
  ASSERT_TRUE(Tunables::set(Tunable::TuneSampleUs, 0).isOk());
  FakeAddFamily quick({KernelParams{}, withUnroll(2)});
  auto again = tuner.tune(engine, quick, c.spec, c.pointers);
  ASSERT_TRUE(again.hasValue()) << again.status().toString();
  EXPECT_EQ(lines().size(), 1u);
}

TEST_F(AutoTunerTest, TheTuningEstimateIsFreeOnADatabaseHitAndBudgetCappedOnAMiss) {
  std::vector<KernelParams> space{KernelParams{}};
  for (int u = 1; u <= 9; ++u) space.push_back(withUnroll(u));
  FakeAddFamily family(space, {KernelParams{}}, 300);
  Case c = addCase(512);
  jit::KernelBackend& engine = jit::testing::sharedBackend();
  ASSERT_TRUE(Tunables::set(Tunable::TuneRepeats, 3).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::TuneSampleUs, 1000).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::TuneBudgetMs, 100000).isOk());
  AutoTuner tuner(options());
  // A miss without history: every candidate, each compiled (20 ms here) and timed (5 samples of 1 ms).
  jit::TuneEstimate miss = tuner.estimate(engine, family, c.spec, 20.0);
  EXPECT_DOUBLE_EQ(miss.cost_ms, 10 * (20.0 + 5.0));
  EXPECT_DOUBLE_EQ(miss.gain, AutoTuner::kDefaultGain);
  ASSERT_TRUE(Tunables::set(Tunable::TuneBudgetMs, 30).isOk());
  EXPECT_DOUBLE_EQ(tuner.estimate(engine, family, c.spec, 20.0).cost_ms, 30 + 25.0) << "the budget caps it";
  auto outcome = tuner.tune(engine, family, c.spec, c.pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  jit::TuneEstimate hit = tuner.estimate(engine, family, c.spec, 20.0);
  EXPECT_EQ(hit.cost_ms, 0.0) << "the database answers: nothing to pay";
  // Another shape now has history: the family's recorded saving is the expected gain.
  Case other = addCase(4096);
  const jit::TuneEstimate next = tuner.estimate(engine, family, other.spec, 20.0);
  EXPECT_GT(next.cost_ms, 0.0);
  const double saved = 1.0 - outcome->best_us / outcome->default_us;
  EXPECT_NEAR(next.gain, std::clamp(saved, 0.0, 1.0), 1e-9);
}

TEST(TuningDatabase, RecordsRoundTripAndKeysSeparateKernelBucketAndHost) {
  TuningRecord r;
  r.family = "matmul";
  r.kernel = "MatMul|f32[?,128]|f32[128,1024]";
  r.bucket = "0:256..1024";
  r.shape_class = "matmul|MatMul|f32r2|f32r2";
  r.point = {8.3, 7.0};
  r.cpu = "znver4";
  r.features = "+avx512f";
  r.key = KernelKey{r.family, r.kernel, r.bucket, r.cpu, r.features, r.shape_class}.key();
  r.signature = "MatMul:(256..1024,128)x(128,1024)";
  r.params.mr = 8;
  r.params.nr = 32;
  r.us = 12.5;
  r.default_us = 20;
  r.candidates = 36;
  r.timed = 12;
  KernelParams slower;
  slower.mr = 4;
  r.times = {{KernelParams{}, 20}, {r.params, 12.5}, {slower, 14.25}};
  auto back = parseRecord(recordToJson(r));
  ASSERT_TRUE(back.hasValue()) << back.status().toString();
  EXPECT_EQ(back->params, r.params);
  EXPECT_EQ(back->times, r.times);
  // A table entry that is not a [params, positive time] pair never parses into a record.
  for (const char* bad : {"[\"mr=4\",-1]", "[\"mr=4\"]", "[\"mr=four\",3]", "7"}) {
    std::string line = recordToJson(r);
    const std::size_t at = line.find("[\"mr=4\",14.25]");
    ASSERT_NE(at, std::string::npos) << line;
    line.replace(at, std::string("[\"mr=4\",14.25]").size(), bad);
    auto parsed = parseRecord(line);
    ASSERT_FALSE(parsed.hasValue()) << bad;
    EXPECT_NE(parsed.status().message().find("times"), std::string::npos) << parsed.status().message();
  }
  // An older line without a table reads, with an empty one.
  r.times.clear();
  auto old_line = parseRecord(recordToJson(r));
  ASSERT_TRUE(old_line.hasValue());
  EXPECT_TRUE(old_line->times.empty());
  EXPECT_EQ(recordToJson(r).find("times"), std::string::npos);
  EXPECT_EQ(back->point, r.point);
  EXPECT_DOUBLE_EQ(back->us, 12.5);
  EXPECT_EQ(back->key, r.key);
  KernelKey other_cpu{r.family, r.kernel, r.bucket, "skylake-avx512", r.features, r.shape_class};
  KernelKey other_bucket{r.family, r.kernel, "0:128..256", r.cpu, r.features, r.shape_class};
  EXPECT_NE(other_cpu.key(), r.key);
  EXPECT_NE(other_bucket.key(), r.key);
  // Bad params never parse into a record.
  std::string text = recordToJson(r);
  text.replace(text.find("mr=8 nr=32"), 10, "mr=eight!!");
  EXPECT_FALSE(parseRecord(text).hasValue());
  // The dims' ranges are the bucket; static dims and dtypes are the kernel.
  jit::KernelSpec spec;
  spec.op = OpId::MatMul;
  jit::OperandSpec a, b;
  a.rank = b.rank = 2;
  a.dims[0].lo = 256;
  a.dims[0].hi = 1024;
  a.dims[1].size = 128;
  b.dims[0].size = 128;
  b.dims[1].size = 1024;
  spec.inputs = {a, b};
  const KernelKey key = kernelKey(*jit::familyFor(OpId::MatMul), spec, "cpu", "feat");
  EXPECT_EQ(key.bucket, "0:256..1024;");
  EXPECT_NE(key.kernel.find("f32[?,128]"), std::string::npos) << key.kernel;
  EXPECT_NE(key.kernel.find("f32[128,1024]"), std::string::npos) << key.kernel;
}

TEST(TuningDatabase, TheCacheDirectoryFollowsTheEnvironment) {
  const char* saved_cache = std::getenv("SHAPEVM_CACHE_DIR");
  const char* saved_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string cache = saved_cache ? saved_cache : "";
  const std::string xdg = saved_xdg ? saved_xdg : "";
  setenv("SHAPEVM_CACHE_DIR", "/tmp/a", 1);
  setenv("XDG_CACHE_HOME", "/tmp/x", 1);
  EXPECT_EQ(defaultCacheDir(), "/tmp/a");
  unsetenv("SHAPEVM_CACHE_DIR");
  EXPECT_EQ(defaultCacheDir(), "/tmp/x/shapevm");
  unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME")) {
    EXPECT_EQ(defaultCacheDir(), std::string(home) + "/.cache/shapevm");
  }
  if (saved_cache) setenv("SHAPEVM_CACHE_DIR", cache.c_str(), 1);
  if (saved_xdg) setenv("XDG_CACHE_HOME", xdg.c_str(), 1);
}

}  // namespace
}  // namespace shapevm::tune
