// SPDX-License-Identifier: Apache-2.0
// The AutoTuner with oneDNN library candidates (KernelParams::library, "impl=onednn") in a
// matmul search space: a library winner is recorded with impl=onednn and read back from the
// database; a bfloat16 primitive this CPU's oneDNN cannot create (no AVX-512) fails as a
// candidate with oneDNN's reason and the generated kernel wins (impl=jit); the record's impl
// field is checked against its params when read. The primitive with a generated tail
// ("impl=onednn+tail") for an epilogue post-ops cannot express: recorded as such, run off
// against a generated kernel, and refused as a candidate where oneDNN cannot create it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "../jit/jit_test_util.h"
#include "jit/llvm_cpu/library_onednn.h"
#include "support/tunables.h"
#include "tune/auto_tuner.h"
#include "tune_test_util.h"

namespace shapevm::tune {
namespace {

using jit::KernelParams;
using jit::KernelSpec;
using testing::MatmulSubspace;

const KernelParams kLibrary{.library = 1};
const KernelParams kTail{.library = 2};
const KernelParams kSgemm{.library = 3};
const KernelParams kSgemmTail{.library = 4};
const KernelParams kTooManyAccumulators{.mr = 16, .nr = 64};  // refused by the matmul family

struct Example {
  std::vector<Value> inputs;
  std::vector<const Value*> pointers;
  KernelSpec spec;
};
Example matmulExample(DType dtype, std::int64_t m, std::int64_t k, std::int64_t n) {
  Example e;
  std::mt19937 rng(5);
  e.inputs = {jit::testing::operand(dtype, Shape{m, k}, rng), jit::testing::operand(dtype, Shape{k, n}, rng)};
  for (const Value& v : e.inputs) e.pointers.push_back(&v);
  e.spec = jit::exactSpec(OpId::MatMul, {}, e.pointers);
  return e;
}

// The same with an epilogue post-ops cannot express all of: + bias (a post-op), then erf.
Example erfExample(DType dtype, std::int64_t m, std::int64_t k, std::int64_t n) {
  Example e = matmulExample(dtype, m, k, n);
  std::mt19937 rng(6);
  e.inputs.push_back(jit::testing::operand(dtype, Shape{n}, rng));
  e.pointers.clear();
  for (const Value& v : e.inputs) e.pointers.push_back(&v);
  e.spec = jit::exactSpec(OpId::MatMul, {}, e.pointers);
  e.spec.epilogue = {{OpId::Add, 2, false}, {OpId::Erf, -1, false}};
  return e;
}

class LibraryCandidates : public testing::TunerTest {
 protected:
  // Tunes `e` with `family` (whose space makes `winner` win), checks the record names the winner
  // and its implementation (`impl`, e.g. "onednn") and that a second tuner answers it from the database.
  void expectRecordedAndReadBack(const jit::KernelFamily& family, const Example& e, const KernelParams& winner,
                                 const std::string& impl) {
    jit::KernelBackend& engine = jit::testing::sharedBackend();
    AutoTuner tuner(options_);
    auto outcome = tuner.tune(engine, family, e.spec, e.pointers);
    ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
    EXPECT_EQ(outcome->params, winner);
    EXPECT_EQ(outcome->failed, 1);
    const std::string line = lastLine();
    EXPECT_NE(line.find("\"params\":\"impl=" + impl + "\""), std::string::npos) << line;
    EXPECT_NE(line.find("\"impl\":\"" + impl + "\""), std::string::npos) << line;
    AutoTuner again(options_);
    auto cached = again.tune(engine, family, e.spec, e.pointers);
    ASSERT_TRUE(cached.hasValue());
    EXPECT_TRUE(cached->from_database);
    EXPECT_EQ(cached->params, winner);
  }
};

// The pick follows the run-off (auto_tuner.cc): the faster median wins; where the two fastest were
// within the noise margin they were timed again (decider_rounds) and that decided, so the first
// rounds' figures fix the pick only without a decider.
void expectPickFollowsRunOff(const KernelParams& pick, const RunOff& runoff) {
  if (runoff.decider_rounds == 0) {
    EXPECT_EQ(pick, runoff.generated_us < runoff.library_us ? runoff.generated : runoff.library)
        << "run-off: " << runoff.library.toString() << " " << runoff.library_us << " us, generated "
        << runoff.generated.toString() << " " << runoff.generated_us << " us";
  } else {
    EXPECT_TRUE(pick == runoff.generated || pick == runoff.library) << pick.toString();
  }
}

TEST_F(LibraryCandidates, ALibraryWinnerIsRecordedAsOnednn) {
  MatmulSubspace family({kLibrary, kTooManyAccumulators});
  expectRecordedAndReadBack(family, matmulExample(DType::Float32, 48, 64, 40), kLibrary, "onednn");
}

TEST_F(LibraryCandidates, APrimitiveOneDnnCannotCreateLosesToTheGeneratedKernel) {
  Example e = matmulExample(DType::BFloat16, 24, 40, 32);
  KernelSpec library = e.spec;
  library.params = kLibrary;
  if (jit::onednn::createFor(library).isOk()) {
    GTEST_SKIP() << "this CPU's oneDNN has a bfloat16 matmul (AVX-512): nothing falls back here";
  }
  MatmulSubspace family({KernelParams{}, kLibrary});
  AutoTuner tuner(options_);
  auto outcome = tuner.tune(jit::testing::sharedBackend(), family, e.spec, e.pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  EXPECT_EQ(outcome->params, KernelParams{});
  EXPECT_EQ(outcome->failed, 1);
  ASSERT_EQ(tuner.reports().size(), 1u);
  EXPECT_EQ(tuner.reports()[0].timings.size(), 2u);
  EXPECT_FALSE(std::isfinite(tuner.reports()[0].timings[1].us)) << "the library candidate failed";
  EXPECT_NE(lastLine().find("\"impl\":\"jit\""), std::string::npos) << lastLine();
}

// The run-off (auto_tuner.h): a library and a generated candidate that both ran are timed again
// side by side, and the pick follows its medians. Which of a one-row generated tile and oneDNN is
// faster depends on the host and its load (CI once measured the tile ahead), so the first half
// checks that the pick follows the run-off's medians whichever way they fall. The second half
// fixes the order: oneDNN made to fail every execution runs the scalar fallback loop, many times
// slower than the default generated kernel, so the generated kernel must win.
TEST_F(LibraryCandidates, TheRunOffPicksTheFasterOfLibraryAndGenerated) {
  Example e = matmulExample(DType::Float32, 96, 96, 96);
  jit::KernelBackend& engine = jit::testing::sharedBackend();
  const KernelParams one_row{.mr = 1, .nr = 16, .kc = 16, .k_unroll = 1};  // one row, short K blocks
  {
    MatmulSubspace family({one_row, kLibrary});
    AutoTuner tuner(options_);
    auto outcome = tuner.tune(engine, family, e.spec, e.pointers);
    ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
    const std::vector<TuneReport> reports = tuner.reports();  // a copy: references below point into it
    ASSERT_EQ(reports.size(), 1u);
    ASSERT_TRUE(reports[0].runoff.has_value());
    const RunOff& runoff = *reports[0].runoff;
    EXPECT_GE(runoff.rounds, 7);
    EXPECT_EQ(runoff.generated, one_row);
    EXPECT_EQ(runoff.library, kLibrary);
    ASSERT_TRUE(std::isfinite(runoff.library_us) && std::isfinite(runoff.generated_us));
    expectPickFollowsRunOff(outcome->params, runoff);
    // The record keeps the sweep's median (the measurement every candidate and the default share).
    double picked_sweep_us = -1;
    for (const CandidateTiming& timing : reports[0].timings) {
      if (timing.params == outcome->params) picked_sweep_us = timing.us;
    }
    EXPECT_EQ(outcome->best_us, picked_sweep_us);
  }
  jit::onednn::failExecutionsForTesting(true);
  MatmulSubspace family({KernelParams{}, kLibrary});
  Example other = matmulExample(DType::Float32, 96, 96, 80);  // another key: not answered from the database
  AutoTuner tuner(options_);
  auto outcome = tuner.tune(engine, family, other.spec, other.pointers);
  jit::onednn::failExecutionsForTesting(false);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  const std::vector<TuneReport> reports = tuner.reports();
  ASSERT_TRUE(reports[0].runoff.has_value());
  const RunOff& runoff = *reports[0].runoff;
  EXPECT_LT(runoff.generated_us, runoff.library_us);
  EXPECT_EQ(outcome->params, KernelParams{});
  EXPECT_NE(lastLine().find("\"impl\":\"jit\""), std::string::npos) << lastLine();
}

// Past the budget (0 ms here: spent once the default ran) generated candidates are skipped, but a
// library candidate is still timed and run off against the default.
TEST_F(LibraryCandidates, ALibraryCandidateIsTimedPastTheBudget) {
  ASSERT_TRUE(Tunables::set(Tunable::TuneBudgetMs, 0).isOk());
  const KernelParams other{.mr = 2, .nr = 16};
  MatmulSubspace family({KernelParams{}, other, kLibrary});
  Example e = matmulExample(DType::Float32, 32, 48, 64);
  AutoTuner tuner(options_);
  auto outcome = tuner.tune(jit::testing::sharedBackend(), family, e.spec, e.pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  EXPECT_EQ(outcome->timed, 2);
  const TuneReport report = tuner.reports().at(0);
  ASSERT_EQ(report.timings.size(), 2u);
  EXPECT_EQ(report.timings[0].params, KernelParams{});
  EXPECT_EQ(report.timings[1].params, kLibrary);
  ASSERT_TRUE(report.runoff.has_value());
  EXPECT_EQ(report.runoff->generated, KernelParams{});
}

// With library candidates off nothing is run off and no library kernel is in the space.
TEST_F(LibraryCandidates, OffMeansNoRunOff) {
  ASSERT_TRUE(Tunables::set(Tunable::LibraryCandidates, 0).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::TuneCandidates, 3).isOk());
  Example e = matmulExample(DType::Float32, 40, 48, 56);
  AutoTuner tuner(options_);
  auto outcome = tuner.tune(jit::testing::sharedBackend(), *jit::familyFor(OpId::MatMul), e.spec, e.pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  EXPECT_EQ(outcome->params.library, 0);
  const std::vector<TuneReport> reports = tuner.reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_FALSE(reports[0].runoff.has_value());
  for (const CandidateTiming& timing : reports[0].timings) EXPECT_EQ(timing.params.library, 0);
}

// The primitive with a generated tail as one candidate: the winner is recorded (params and impl
// "onednn+tail") and read back; against a generated kernel both are run off and the pick follows
// the run-off's medians, whichever way they fall.
TEST_F(LibraryCandidates, ATailCandidateIsRecordedAndRunOff) {
  jit::KernelBackend& engine = jit::testing::sharedBackend();
  expectRecordedAndReadBack(MatmulSubspace({kTail, kTooManyAccumulators}), erfExample(DType::Float32, 24, 40, 37),
                            kTail, "onednn+tail");
  MatmulSubspace family({KernelParams{}, kTail});
  Example e = erfExample(DType::Float32, 48, 40, 37);
  AutoTuner tuner(options_);
  auto outcome = tuner.tune(engine, family, e.spec, e.pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  const std::vector<TuneReport> reports = tuner.reports();
  ASSERT_EQ(reports.size(), 1u);
  ASSERT_TRUE(reports[0].runoff.has_value());
  const RunOff& runoff = *reports[0].runoff;
  EXPECT_EQ(runoff.library, kTail);
  EXPECT_EQ(runoff.generated, KernelParams{});
  ASSERT_TRUE(std::isfinite(runoff.library_us) && std::isfinite(runoff.generated_us));
  expectPickFollowsRunOff(outcome->params, runoff);
  EXPECT_NE(lastLine().find(outcome->params == kTail ? "\"impl\":\"onednn+tail\"" : "\"impl\":\"jit\""),
            std::string::npos)
      << lastLine();
}

// A tail candidate whose primitive oneDNN cannot create (a 16-bit dtype its build has no kernel
// for on this CPU) fails, and the generated kernel wins (impl=jit).
TEST_F(LibraryCandidates, ATailWhosePrimitiveCannotBeCreatedLoses) {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    Example e = erfExample(dtype, 16, 24, 32);
    KernelSpec library = e.spec;
    library.params = kTail;
    if (jit::onednn::createFor(library).isOk()) continue;
    MatmulSubspace family({KernelParams{}, kTail});
    AutoTuner tuner(options_);
    auto outcome = tuner.tune(jit::testing::sharedBackend(), family, e.spec, e.pointers);
    ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
    EXPECT_EQ(outcome->params, KernelParams{});
    EXPECT_EQ(outcome->failed, 1);
    EXPECT_NE(lastLine().find("\"impl\":\"jit\""), std::string::npos) << lastLine();
    return;
  }
  GTEST_SKIP() << "this CPU's oneDNN has float16 and bfloat16 matmuls";
}

// dnnl_sgemm as a candidate (library = 3, 4): a winner is recorded as impl "sgemm" / "sgemm+tail"
// and read back; next to the primitive and a generated kernel all three are run off, the
// library bar is the faster library median, and the pick follows the medians.
TEST_F(LibraryCandidates, SgemmWinnersAreRecordedAndRunOffAgainstThePrimitive) {
  jit::KernelBackend& engine = jit::testing::sharedBackend();
  expectRecordedAndReadBack(MatmulSubspace({kSgemm, kTooManyAccumulators}), matmulExample(DType::Float32, 40, 56, 48),
                            kSgemm, "sgemm");
  expectRecordedAndReadBack(MatmulSubspace({kSgemmTail, kTooManyAccumulators}), erfExample(DType::Float32, 24, 40, 37),
                            kSgemmTail, "sgemm+tail");
  MatmulSubspace family({KernelParams{}, kLibrary, kSgemm});
  Example e = matmulExample(DType::Float32, 64, 72, 80);
  AutoTuner tuner(options_);
  auto outcome = tuner.tune(engine, family, e.spec, e.pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  const std::vector<TuneReport> reports = tuner.reports();
  ASSERT_EQ(reports.size(), 1u);
  ASSERT_EQ(reports[0].timings.size(), 3u);
  ASSERT_TRUE(reports[0].runoff.has_value());
  const RunOff& runoff = *reports[0].runoff;
  EXPECT_TRUE(runoff.library == kLibrary || runoff.library == kSgemm) << runoff.library.toString();
  EXPECT_EQ(runoff.generated, KernelParams{});
  expectPickFollowsRunOff(outcome->params, runoff);
}

TEST(TuningRecordImpl, TheImplFieldMustNameTheParams) {
  const Example e = matmulExample(DType::Float32, 4, 8, 16);
  const KernelKey key = kernelKey(*jit::familyFor(OpId::MatMul), e.spec, "cpu", "features");
  TuningRecord record = recordOf(key);
  record.params = kLibrary;
  const std::string line = recordToJson(record);
  EXPECT_NE(line.find("\"impl\":\"onednn\""), std::string::npos) << line;
  auto parsed = parseRecord(line);
  ASSERT_TRUE(parsed.hasValue()) << parsed.status().toString();
  EXPECT_EQ(parsed->params, kLibrary);
  EXPECT_EQ(implName(KernelParams{}), "jit");
  EXPECT_EQ(implName(kTail), "onednn+tail");
  EXPECT_EQ(implName(kSgemm), "sgemm");
  EXPECT_EQ(implName(kSgemmTail), "sgemm+tail");
  // An edited impl (params still say onednn) is refused before the checksum is looked at.
  std::string edited = line;
  edited.replace(edited.find("\"impl\":\"onednn\""), 15, "\"impl\":\"jit\"");
  auto bad = parseRecord(edited);
  ASSERT_FALSE(bad.hasValue());
  EXPECT_NE(bad.status().message().find("impl"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace shapevm::tune
