// SPDX-License-Identifier: Apache-2.0
// The learned candidate predictor (tune/predictor.h): training and ranking are deterministic given
// the records (any order in, the same ranking out), the nearest shape's winner ranks right after
// the default and candidates near it in parameter space follow, records of other families or
// hosts and default winners do not vote, and the nearest-shape baseline keeps its order. With
// timing tables, the candidate close to every neighbour's best ranks first, and a record without a
// table counts its winner and default time.
#include "tune/predictor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

namespace shapevm::tune {
namespace {

using jit::KernelParams;

KernelParams tile(int mr, int nr, int kc) {
  KernelParams p;
  p.mr = mr;
  p.nr = nr;
  p.kc = kc;
  return p;
}

std::vector<KernelParams> space() {
  std::vector<KernelParams> out{KernelParams{}};
  for (int mr : {2, 4, 6, 8})
    for (int nr : {16, 32, 64})
      for (int kc : {128, 256, 512}) out.push_back(tile(mr, nr, kc));
  return out;  // 37: the default and 36 tiles
}

TuningRecord record(std::string key, std::vector<double> point, KernelParams winner, std::string family = "matmul",
                    std::string cpu = "znver3") {
  TuningRecord r;
  r.key = std::move(key);
  r.family = std::move(family);
  r.kernel = "MatMul|f32[?,128]|f32[128,1024]";
  r.shape_class = "matmul|MatMul|f32r2|f32r2";
  r.point = std::move(point);
  r.cpu = std::move(cpu);
  r.features = "+avx2 +fma";
  r.params = winner;
  r.us = 10;
  r.default_us = 12;
  return r;
}

PredictorQuery query(std::vector<double> point) {
  PredictorQuery q;
  q.key.family = "matmul";
  q.key.kernel = "MatMul|f32[?,128]|f32[128,1024]";
  q.key.shape_class = "matmul|MatMul|f32r2|f32r2";
  q.key.cpu = "znver3";
  q.key.features = "+avx2 +fma";
  q.point = std::move(point);
  return q;
}

std::vector<TuningRecord> history() {
  return {record("a", {5, 7, 7, 10}, tile(4, 64, 256)),
          record("b", {9, 7, 7, 10}, tile(8, 32, 128)),
          record("c", {10, 7, 7, 10}, tile(8, 32, 128)),
          record("d", {3, 7, 7, 10}, tile(2, 16, 512)),
          record("e", {6, 7, 7, 10}, KernelParams{}),                          // the default won: no vote
          record("f", {6, 7, 7, 10}, tile(6, 16, 128), "fused"),               // another family
          record("g", {6, 7, 7, 10}, tile(6, 16, 128), "matmul", "skylake")};  // another host
}

TEST(CandidatePredictor, RanksTheNearestShapesWinnerRightAfterTheDefault) {
  const CandidatePredictor predictor(history());
  const std::vector<KernelParams> ranked = predictor.rank(query({5.2, 7, 7, 10}), space());
  ASSERT_EQ(ranked.size(), space().size());
  EXPECT_TRUE(ranked[0].isDefault());
  EXPECT_EQ(ranked[1], tile(4, 64, 256));
  // A large shape: the two large neighbours' winner.
  EXPECT_EQ(predictor.rank(query({9.5, 7, 7, 10}), space())[1], tile(8, 32, 128));
  // Every candidate is still there, once.
  std::vector<KernelParams> sorted = ranked;
  for (const KernelParams& p : space()) EXPECT_EQ(std::count(sorted.begin(), sorted.end(), p), 1);
  // Neighbours of the winner in parameter space come before far ones.
  const auto position = [&](const KernelParams& p) {
    return std::find(ranked.begin(), ranked.end(), p) - ranked.begin();
  };
  EXPECT_LT(position(tile(4, 64, 512)), position(tile(2, 16, 512)));
}

TEST(CandidatePredictor, CoverageMovesTheNextNeighboursWinnerAheadOfTheFirstWinnersNeighbours) {
  const PredictorQuery near_a = query({5.2, 7, 7, 10});  // "a" is nearest, "d" next (2.2 away)
  const std::vector<KernelParams> plain = CandidatePredictor(history()).rank(near_a, space());
  PredictorSettings covering;
  covering.coverage = 1.0;
  const std::vector<KernelParams> covered = CandidatePredictor(history(), covering).rank(near_a, space());
  ASSERT_EQ(covered.size(), space().size());
  EXPECT_TRUE(covered[0].isDefault());
  EXPECT_EQ(plain[1], tile(4, 64, 256));
  EXPECT_EQ(covered[1], tile(4, 64, 256));
  // Without coverage the first winner's tile neighbours outvote "d"'s winner; with it, "a"'s vote
  // is spent on its pick and "d"'s winner comes next.
  EXPECT_NE(plain[2], tile(2, 16, 512));
  EXPECT_EQ(covered[2], tile(2, 16, 512));
  for (const KernelParams& p : space()) EXPECT_EQ(std::count(covered.begin(), covered.end(), p), 1);
  // One neighbour: only "a" votes, so "d"'s winner is nowhere near the front.
  PredictorSettings one_neighbour;
  one_neighbour.neighbours = 1;
  const std::vector<KernelParams> one = CandidatePredictor(history(), one_neighbour).rank(near_a, space());
  EXPECT_EQ(one[1], tile(4, 64, 256));
  EXPECT_GT(std::find(one.begin(), one.end(), tile(2, 16, 512)) - one.begin(), 8);
}

// A record whose table holds `times` (params, us): the winner is the fastest of them.
TuningRecord tabled(std::string key, std::vector<double> point, std::vector<TuningRecord::Timed> times) {
  TuningRecord r = record(std::move(key), std::move(point), KernelParams{});
  r.us = std::numeric_limits<double>::infinity();
  for (const TuningRecord::Timed& t : times) {
    if (t.us < r.us) r.us = t.us, r.params = t.params;
    if (t.params.isDefault()) r.default_us = t.us;
  }
  r.times = std::move(times);
  return r;
}

TEST(CandidatePredictor, TimingTablesPickTheCandidateCloseToEveryNeighboursBestFirst) {
  // Two neighbours at the same distance, each with its own winner; (6, 32, 256) is within 1% of
  // both winners but the winner of neither. The vote ranks a winner (or its tile neighbours) after
  // the default; the tables rank the candidate close to both first, then the two winners.
  const KernelParams shared = tile(6, 32, 256), left = tile(2, 64, 128), right = tile(8, 16, 512);
  const std::vector<TuningRecord> records{
      tabled("p", {5, 7, 7, 10}, {{KernelParams{}, 20}, {left, 10}, {shared, 10.1}, {right, 19}}),
      tabled("q", {7, 7, 7, 10}, {{KernelParams{}, 30}, {right, 15}, {shared, 15.1}, {left, 29}}),
  };
  const PredictorQuery between = query({6, 7, 7, 10});
  const std::vector<KernelParams> ranked = CandidatePredictor(records).rank(between, space());
  ASSERT_EQ(ranked.size(), space().size());
  EXPECT_TRUE(ranked[0].isDefault());
  EXPECT_EQ(ranked[1], shared);
  for (const KernelParams& p : space()) EXPECT_EQ(std::count(ranked.begin(), ranked.end(), p), 1);
  // Then the winners in the vote's order: after the shared pick both neighbours are within the
  // tolerance, no candidate gains more, and ties follow the vote. With tolerance 0 the winners
  // gain their neighbour's last 1% and still come after the shared one.
  EXPECT_EQ(ranked[2], left);
  EXPECT_EQ(ranked[3], right);
  PredictorSettings exact;
  exact.tolerance = 0;
  const std::vector<KernelParams> strict = CandidatePredictor(records, exact).rank(between, space());
  EXPECT_EQ(strict[1], shared);
  EXPECT_TRUE((strict[2] == left && strict[3] == right) || (strict[2] == right && strict[3] == left));
  // Winners only: the shared candidate is nobody's winner and does not come second.
  PredictorSettings vote;
  vote.use_tables = false;
  const std::vector<KernelParams> voted = CandidatePredictor(records, vote).rank(between, space());
  EXPECT_NE(voted[1], shared);
  EXPECT_TRUE(voted[1] == left || voted[1] == right) << voted[1].toString();
}

TEST(CandidatePredictor, ANeighbourWithoutATableCountsItsWinnerAndDefault) {
  // "p" (a table) and "r" (an older line: winner and default times only), equally near. Each
  // winner gains its own record the time its default loses: with r twice as slow at its default
  // (2.0 against p's 1.3), r's winner comes first.
  const KernelParams p_best = tile(2, 64, 128), r_best = tile(8, 16, 512);
  TuningRecord r = record("r", {7, 7, 7, 10}, r_best);
  r.us = 10;
  r.default_us = 20;
  const std::vector<TuningRecord> records{tabled("p", {5, 7, 7, 10}, {{KernelParams{}, 13}, {p_best, 10}}), r};
  const std::vector<KernelParams> ranked = CandidatePredictor(records).rank(query({6, 7, 7, 10}), space());
  EXPECT_EQ(ranked[1], r_best);
  EXPECT_EQ(ranked[2], p_best);
  r.default_us = 11;  // now r gains less than p from its winner
  const std::vector<KernelParams> swapped = CandidatePredictor({records[0], r}).rank(query({6, 7, 7, 10}), space());
  EXPECT_EQ(swapped[1], p_best);
  EXPECT_EQ(swapped[2], r_best);
}

TEST(CandidatePredictor, OtherFamiliesHostsAndDefaultWinnersDoNotVote) {
  const CandidatePredictor predictor(history());
  EXPECT_EQ(predictor.history(query({6, 7, 7, 10})), 4);
  PredictorQuery other = query({6, 7, 7, 10});
  other.key.cpu = "icelake";
  EXPECT_EQ(predictor.history(other), 0);
  EXPECT_EQ(predictor.rank(other, space()), space()) << "no history: the space's own order";
  EXPECT_TRUE(std::isinf(CandidatePredictor::distance(other, history()[0])));
  // A strided operand or another shape class is farther than the same point.
  PredictorQuery strided = query({5, 7, 7, 10});
  strided.key.kernel += "strided";
  EXPECT_GT(CandidatePredictor::distance(strided, history()[0]),
            CandidatePredictor::distance(query({5, 7, 7, 10}), history()[0]));
}

TEST(CandidatePredictor, TrainingAndRankingAreDeterministicGivenTheRecords) {
  std::vector<TuningRecord> records = history();
  // Two records at the same distance with different winners: the tie is broken by key, not by order.
  records.push_back(record("h", {6, 7, 7, 10}, tile(6, 64, 128)));
  records.push_back(record("i", {6, 7, 7, 10}, tile(2, 32, 256)));
  // Two records with timing tables at the same distance too, their candidates tied.
  records.push_back(tabled("j", {6, 7, 7, 10}, {{KernelParams{}, 12}, {tile(4, 16, 128), 10}, {tile(6, 16, 256), 10}}));
  records.push_back(tabled("k", {6, 7, 7, 10}, {{KernelParams{}, 12}, {tile(6, 16, 256), 10}, {tile(4, 16, 128), 10}}));
  const std::vector<KernelParams> expected = CandidatePredictor(records).rank(query({6, 7, 7, 10}), space());
  std::mt19937 rng(7);
  for (int round = 0; round < 10; ++round) {
    std::shuffle(records.begin(), records.end(), rng);
    EXPECT_EQ(CandidatePredictor(records).rank(query({6, 7, 7, 10}), space()), expected) << "round " << round;
  }
}

TEST(CandidatePredictor, TheNearestShapeBaselineKeepsItsOrder) {
  std::vector<TuningRecord> same = history();
  same.resize(4);
  const std::vector<KernelParams> order = nearestShapeOrder(space(), same, {9.2, 7, 7, 10});
  ASSERT_EQ(order.size(), space().size());
  EXPECT_TRUE(order[0].isDefault());
  EXPECT_EQ(order[1], tile(8, 32, 128));
  EXPECT_EQ(order[2], tile(4, 64, 256));
  EXPECT_EQ(order[3], tile(2, 16, 512));
  EXPECT_EQ(order[4], space()[1]) << "then the space in its order";
}

}  // namespace
}  // namespace shapevm::tune
