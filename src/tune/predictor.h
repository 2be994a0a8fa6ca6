// SPDX-License-Identifier: Apache-2.0
// The AutoTuner's learned candidate predictor (SYSTEM.md 3.6, 36 candidates -> 8): trained from
// the tuning database's records of a kernel family on this CPU, it ranks a new kernel's search
// space from its k nearest records by log features — shape point (log2 dims), op/dtype/rank class,
// strided operands, static kernel text. Where the neighbours carry their timing tables, the
// ranking is greedy over the expected best of the list: each pick is the candidate that most
// lowers, summed over the neighbours by closeness, the time of the best candidate picked so far
// relative to that neighbour's best. Without tables, each neighbour's winner credits every
// candidate by its distance in log2 parameter space (a vote). Also the baseline it replaced
// (nearest-shape ordering). Invariant: deterministic given the records (ties by key, then by
// search-space order), and the default always ranks first.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tune/tuning_db.h"

namespace shapevm::tune {

// What the predictor knows about the kernel being tuned.
struct PredictorQuery {
  KernelKey key;
  std::vector<double> point;  // log2 of the example shapes' dims (shapePoint)
};

// log2 of every dim of the example tensors (the records' `point`).
std::vector<double> shapePoint(std::span<const Value* const> examples);

// How the vote is taken (svm_predictor_eval --sweep scores other settings on one run's timings).
struct PredictorSettings {
  int neighbours = 8;            // records that vote: the nearest by distance()
  double param_sharpness = 1.0;  // a candidate gets exp(-sharpness * its log2 parameter distance) of a vote
  // After each pick, a neighbour's vote shrinks by coverage * its similarity to the pick, so the
  // next picks go to winners the list does not cover yet (0: one scoring pass, no shrinking).
  double coverage = 0.0;
  // Neighbours with a timing table (TuningRecord::times): a candidate within this share of a
  // neighbour's best counts as its best (differences under the noise of a timing do not steer).
  double tolerance = 0.02;
  bool use_tables = true;  // false: winners only, as if no record had a table
};

class CandidatePredictor {
 public:
  // Trains on `records`: keeps those whose winner is not the default, sorted by key (a model per
  // family and host is the subset matching a query's family, cpu and features).
  explicit CandidatePredictor(std::vector<TuningRecord> records, PredictorSettings settings = {});

  // Records of the query's family on its host that can vote (0: the predictor has no history).
  int history(const PredictorQuery& query) const;
  // The search space best first (the default first of all).
  std::vector<jit::KernelParams> rank(const PredictorQuery& query, const std::vector<jit::KernelParams>& space) const;
  // The feature distance between the query and a record (log2 units; infinity across families/hosts).
  static double distance(const PredictorQuery& query, const TuningRecord& record);

 private:
  // The vote's ranking (every neighbour's winner only).
  std::vector<jit::KernelParams> rankByVote(const std::vector<std::pair<double, const TuningRecord*>>& near,
                                            const std::vector<jit::KernelParams>& space) const;

  std::vector<TuningRecord> records_;
  PredictorSettings settings_;
};

// The baseline: the default, then the winners of the same shape class's records by L1 distance
// of their points, then the rest of the space in its order.
std::vector<jit::KernelParams> nearestShapeOrder(const std::vector<jit::KernelParams>& space,
                                                 std::vector<TuningRecord> same_class,
                                                 const std::vector<double>& point);

}  // namespace shapevm::tune
