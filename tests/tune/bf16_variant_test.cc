// SPDX-License-Identifier: Apache-2.0
// The bfloat16 matmul's variant (pair dot products or widening to float32) is chosen per host by
// measurement (jit/bf16_variant.h): the AutoTuner times the default tile in both variants (the
// other one even past the budget, then both again in interleaved rounds), the record names the
// generated winner's variant and keeps both times, and the database's verdict on this host
// becomes the untuned default. A recorded default winner of the other variant is answered as that
// variant. No timing assertion: which variant is faster is the host's business; the tests check
// that the choice follows the times.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "../jit/jit_test_util.h"
#include "jit/bf16_variant.h"
#include "support/tunables.h"
#include "tune/auto_tuner.h"
#include "tune_test_util.h"

namespace shapevm::tune {
namespace {

using jit::Bf16Variant;
using jit::KernelParams;
using jit::KernelSpec;
using testing::MatmulSubspace;

const KernelParams kPairs{.bf16_dot = 1};
const KernelParams kWidening{.bf16_dot = -1};

class Bf16VariantTest : public testing::TunerTest {
 protected:
  void SetUp() override {
    TunerTest::SetUp();
    jit::setBf16Default(host(), Bf16Variant::Unmeasured);
  }
  void TearDown() override {
    jit::setBf16Default(host(), Bf16Variant::Unmeasured);
    TunerTest::TearDown();
  }
  static jit::KernelBackend& engine() { return jit::testing::sharedBackend(); }
  static const std::string& host() { return engine().capabilities().target; }
  static bool hostHasPairs() { return engine().capabilities().isa.bf16_dot; }
  static bool usesPairs(const KernelSpec& spec) {
    return jit::familyFor(OpId::MatMul)->symbolStem(engine().targetSpec(spec)).find("bf16pairs") != std::string::npos;
  }
  // A record on this host with the default tile's two times (the verdict's input).
  TuningRecord measured(const KernelSpec& spec, double pairs_us, double widening_us) const {
    const KernelKey key =
        kernelKey(*jit::familyFor(OpId::MatMul), engine().targetSpec(spec), host(), engine().capabilities().features);
    TuningRecord record = recordOf(key);
    record.signature = spec.signature();
    record.us = std::min(pairs_us, widening_us);
    record.default_us = pairs_us;
    record.bf16 = pairs_us <= widening_us ? "pairs" : "widening";
    record.bf16_pairs_us = pairs_us;
    record.bf16_widening_us = widening_us;
    return record;
  }
  void writeDatabase(const std::vector<TuningRecord>& records) const {
    std::ofstream out(options_.database_path);
    for (const TuningRecord& r : records) out << recordToJson(r) << '\n';
  }
};

// Odd sizes, B transposed (x @ W.T): the default tile in both variants matches the reference.
std::vector<Value> oddOperands(std::mt19937& rng, std::int64_t m, std::int64_t k, std::int64_t n) {
  return {jit::testing::operand(DType::BFloat16, Shape{m, k}, rng),
          jit::testing::transposedWeight(DType::BFloat16, k, n, rng)};
}

TEST_F(Bf16VariantTest, TheTunerTimesBothVariantsAndRecordsTheWinner) {
  if (!hostHasPairs()) GTEST_SKIP() << "no AVX512_BF16 on this CPU: bfloat16 matmuls only widen";
  // A budget spent once the default ran: the other tile is skipped, the other variant is not.
  ASSERT_TRUE(Tunables::set(Tunable::TuneBudgetMs, 0).isOk());
  std::mt19937 rng(3);
  const std::vector<Value> inputs = oddOperands(rng, 23, 37, 29);
  const std::vector<const Value*> pointers = jit::testing::pointersTo(inputs);
  const KernelSpec spec = jit::exactSpec(OpId::MatMul, {}, pointers);
  MatmulSubspace family({KernelParams{}, KernelParams{.mr = 4, .nr = 32}, kWidening});
  AutoTuner tuner(options_);
  auto outcome = tuner.tune(engine(), family, spec, pointers);
  ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
  const TuneReport report = tuner.reports().at(0);
  ASSERT_EQ(report.timings.size(), 2u);
  EXPECT_EQ(report.timings[0].params, KernelParams{});
  EXPECT_EQ(report.timings[1].params, kWidening);
  ASSERT_TRUE(std::isfinite(report.timings[0].us) && std::isfinite(report.timings[1].us));
  // Both variants timed again side by side: the record and the verdict take the run-off's medians,
  // not the sweep's one sample of each.
  ASSERT_TRUE(report.bf16_runoff.has_value());
  EXPECT_GE(report.bf16_runoff->rounds, 7);
  const double pairs_us = report.bf16_runoff->pairs_us, widening_us = report.bf16_runoff->widening_us;
  ASSERT_TRUE(pairs_us > 0 && widening_us > 0 && std::isfinite(pairs_us) && std::isfinite(widening_us));
  // The record: both times, and the variant of the winner (the default runs the pairs).
  auto record = parseRecord(lastLine());
  ASSERT_TRUE(record.hasValue()) << record.status().toString();
  EXPECT_EQ(record->bf16_pairs_us, pairs_us);
  EXPECT_EQ(record->bf16_widening_us, widening_us);
  EXPECT_EQ(record->bf16, outcome->params == kWidening ? "widening" : "pairs") << lastLine();
  // The host's default follows the measurement, and the new default compiles to that variant.
  const Bf16Variant verdict = pairs_us <= widening_us ? Bf16Variant::Pairs : Bf16Variant::Widening;
  EXPECT_EQ(jit::bf16Default(host()), verdict);
  EXPECT_EQ(usesPairs(spec), verdict == Bf16Variant::Pairs);
  // Both variants (the winner and the default are one of them) match the reference.
  for (const KernelParams& params : {kPairs, kWidening}) {
    KernelSpec compiled = spec;
    compiled.params = params;
    EXPECT_TRUE(jit::testing::matchesReference(compiled, inputs)) << params.toString();
  }
}

TEST_F(Bf16VariantTest, TheUntunedDefaultFollowsTheRecordedVerdict) {
  if (!hostHasPairs()) GTEST_SKIP() << "no AVX512_BF16 on this CPU: bfloat16 matmuls only widen";
  std::mt19937 rng(4);
  const std::vector<Value> inputs = oddOperands(rng, 17, 33, 19);
  const KernelSpec spec = jit::exactSpec(OpId::MatMul, {}, jit::testing::pointersTo(inputs));
  const jit::KernelFamily& family = *jit::familyFor(OpId::MatMul);
  EXPECT_TRUE(usesPairs(spec)) << "unmeasured: the pairs (the prior)";
  // Widening measured faster (geometric mean of the records' ratios above 1).
  std::vector<Value> other = oddOperands(rng, 40, 64, 48);
  const KernelSpec other_spec = jit::exactSpec(OpId::MatMul, {}, jit::testing::pointersTo(other));
  writeDatabase({measured(spec, 30.0, 10.0), measured(other_spec, 9.0, 10.0)});
  {
    AutoTuner tuner(options_);
    EXPECT_EQ(jit::bf16Default(host()), Bf16Variant::Widening);
    EXPECT_FALSE(usesPairs(spec));
    const std::vector<KernelParams> space = family.searchSpace(engine().targetSpec(spec));
    EXPECT_NE(std::find(space.begin(), space.end(), kPairs), space.end()) << "the pairs stay a candidate";
    EXPECT_EQ(std::find(space.begin(), space.end(), kWidening), space.end());
    EXPECT_TRUE(jit::testing::matchesReference(spec, inputs));
    // The spec's own record chose the default when it ran the pairs: answered as the pairs.
    TuningRecord pairs_won = measured(spec, 10.0, 30.0);
    writeDatabase({pairs_won, measured(other_spec, 90.0, 10.0)});
    AutoTuner again(options_);
    auto outcome = again.tune(engine(), family, spec, jit::testing::pointersTo(inputs));
    ASSERT_TRUE(outcome.hasValue()) << outcome.status().toString();
    EXPECT_TRUE(outcome->from_database);
    EXPECT_EQ(outcome->params, kPairs);
  }
  // Pairs measured faster: the default runs them again.
  writeDatabase({measured(spec, 10.0, 11.0)});
  AutoTuner tuner(options_);
  EXPECT_EQ(jit::bf16Default(host()), Bf16Variant::Pairs);
  EXPECT_TRUE(usesPairs(spec));
  // Records of another CPU say nothing about this one.
  TuningRecord elsewhere = measured(spec, 50.0, 10.0);
  elsewhere.cpu = "another-cpu";
  EXPECT_EQ(bf16Verdict({elsewhere}, host(), engine().capabilities().features), Bf16Variant::Unmeasured);
}

// With library candidates off the space holds no library kernel but both variants still.
TEST_F(Bf16VariantTest, LibraryCandidatesOffKeepsBothVariants) {
  if (!hostHasPairs()) GTEST_SKIP() << "no AVX512_BF16 on this CPU: bfloat16 matmuls only widen";
  std::mt19937 rng(5);
  const std::vector<Value> inputs = oddOperands(rng, 9, 31, 21);
  const KernelSpec spec = engine().targetSpec(jit::exactSpec(OpId::MatMul, {}, jit::testing::pointersTo(inputs)));
  for (std::int64_t on : {1, 0}) {
    ASSERT_TRUE(Tunables::set(Tunable::LibraryCandidates, on).isOk());
    const std::vector<KernelParams> space = jit::familyFor(OpId::MatMul)->searchSpace(spec);
    EXPECT_NE(std::find(space.begin(), space.end(), kWidening), space.end());
    if (on == 0) {
      EXPECT_TRUE(std::none_of(space.begin(), space.end(), [](const KernelParams& p) { return p.library != 0; }));
    }
  }
}

TEST(TuningRecordBf16, FieldsRoundTripAndTheVerdictIsAGeometricMean) {
  TuningRecord record = recordOf(KernelKey{"f", "k", "b", "cpu", "feat", "c"});
  record.bf16 = "widening";
  record.bf16_pairs_us = 3.0;
  record.bf16_widening_us = 2.0;
  const std::string line = recordToJson(record);
  auto parsed = parseRecord(line);
  ASSERT_TRUE(parsed.hasValue()) << parsed.status().toString();
  EXPECT_EQ(parsed->bf16, "widening");
  EXPECT_EQ(parsed->bf16_pairs_us, 3.0);
  EXPECT_EQ(parsed->bf16_widening_us, 2.0);
  std::string edited = line;
  edited.replace(edited.find("\"widening\""), 10, "\"fastest\"");
  EXPECT_FALSE(parseRecord(edited).hasValue());
  // 3/2 and 1/2: geometric mean sqrt(3/4) < 1, pairs (an arithmetic mean of the ratios, 1, would tie).
  TuningRecord faster = record;
  faster.bf16_pairs_us = 1.0;
  EXPECT_EQ(bf16Verdict({record, faster}, "cpu", "feat"), Bf16Variant::Pairs);
  EXPECT_EQ(bf16Verdict({record}, "cpu", "feat"), Bf16Variant::Widening);
  EXPECT_EQ(bf16Verdict({record}, "cpu", "other features"), Bf16Variant::Unmeasured);
  // A record without the two times (another kernel) is no measurement.
  TuningRecord plain = record;
  plain.bf16_pairs_us = plain.bf16_widening_us = 0;
  EXPECT_EQ(parseRecord(recordToJson(plain))->bf16_pairs_us, 0.0);
  EXPECT_EQ(bf16Verdict({plain}, "cpu", "feat"), Bf16Variant::Unmeasured);
}

}  // namespace
}  // namespace shapevm::tune
