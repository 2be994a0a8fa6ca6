// SPDX-License-Identifier: Apache-2.0
// The k-NN candidate predictor and the nearest-shape baseline (see predictor.h).
#include "tune/predictor.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

namespace shapevm::tune {

namespace {

// Feature weights of the distance, in log2 units of the shape point (one doubling of a dim = 1).
constexpr double kRankMismatch = 6.0;    // points of other lengths (other ranks or operand counts)
constexpr double kClassMismatch = 2.0;   // another op, dtype or rank pattern in the same family
constexpr double kStridedOperand = 1.0;  // per operand whose layout (contiguous/strided) differs
constexpr double kKernelMismatch = 0.5;  // other static dims, attributes or epilogue

int stridedOperands(const std::string& kernel) {
  int count = 0;
  for (std::size_t pos = kernel.find("strided"); pos != std::string::npos; pos = kernel.find("strided", pos + 1))
    ++count;
  return count;
}

double pointDistance(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) {
    return kRankMismatch + std::fabs(static_cast<double>(a.size()) - static_cast<double>(b.size()));
  }
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += std::fabs(a[i] - b[i]);
  return sum;
}

// A parameter in log2 space (0 = the family's choice stays 0; -1 = off stays negative).
double logParam(int value) {
  const double magnitude = std::log2(1.0 + std::fabs(static_cast<double>(value)));
  return value < 0 ? -magnitude : magnitude;
}

constexpr double kOtherImplementation = 16.0;

double paramDistance(const jit::KernelParams& a, const jit::KernelParams& b) {
  const int left[] = {a.mr,       a.nr,      a.mc,           a.kc,     a.nc,    a.k_unroll,
                      a.prefetch, a.threads, a.vector_width, a.unroll, a.chunk, a.bf16_dot};
  const int right[] = {b.mr,       b.nr,      b.mc,           b.kc,     b.nc,    b.k_unroll,
                       b.prefetch, b.threads, b.vector_width, b.unroll, b.chunk, b.bf16_dot};
  double sum = 0;
  for (std::size_t i = 0; i < std::size(left); ++i) sum += std::fabs(logParam(left[i]) - logParam(right[i]));
  // Another implementation (a library primitive vs generated code) is far from every tile: a
  // library winner votes for the library candidate, a generated one for the tiles near it.
  if (a.library != b.library) sum += kOtherImplementation;
  return sum;
}

// A greedy ranking of `space`: the default (space[0]) first, then each time the candidate not yet
// picked with the highest score(c) (ties: the lowest tie(c)), calling picked(c) after each pick.
std::vector<jit::KernelParams> greedyOrder(const std::vector<jit::KernelParams>& space,
                                           const std::function<double(std::size_t)>& score,
                                           const std::function<std::size_t(std::size_t)>& tie,
                                           const std::function<void(std::size_t)>& picked) {
  std::vector<bool> taken(space.size(), false);
  std::vector<jit::KernelParams> ranked;
  auto pick = [&](std::size_t c) {
    taken[c] = true;
    ranked.push_back(space[c]);
    picked(c);
  };
  pick(0);
  while (ranked.size() < space.size()) {
    std::size_t best = space.size();
    double best_score = -1.0;
    for (std::size_t c = 1; c < space.size(); ++c) {
      if (taken[c]) continue;
      const double value = score(c);
      if (best == space.size() || value > best_score || (value == best_score && tie(c) < tie(best)))
        best = c, best_score = value;
    }
    pick(best);
  }
  return ranked;
}

bool sameHost(const KernelKey& key, const TuningRecord& record) {
  return record.family == key.family && record.cpu == key.cpu && record.features == key.features;
}

}  // namespace

std::vector<double> shapePoint(std::span<const Value* const> examples) {
  std::vector<double> point;
  for (const Value* value : examples) {
    if (value == nullptr || !value->isTensor()) continue;
    const Tensor& t = value->tensor();
    for (int d = 0; d < t.rank(); ++d)
      point.push_back(std::log2(static_cast<double>(std::max<std::int64_t>(t.dim(d), 1))));
  }
  return point;
}

CandidatePredictor::CandidatePredictor(std::vector<TuningRecord> records, PredictorSettings settings)
    : settings_(settings) {
  for (TuningRecord& record : records) {
    if (!record.params.isDefault()) records_.push_back(std::move(record));
  }
  std::sort(records_.begin(), records_.end(),
            [](const TuningRecord& a, const TuningRecord& b) { return a.key < b.key; });
}

double CandidatePredictor::distance(const PredictorQuery& query, const TuningRecord& record) {
  if (!sameHost(query.key, record)) return std::numeric_limits<double>::infinity();
  double d = pointDistance(query.point, record.point);
  if (record.shape_class != query.key.shape_class) d += kClassMismatch;
  d += kStridedOperand * std::abs(stridedOperands(record.kernel) - stridedOperands(query.key.kernel));
  if (record.kernel != query.key.kernel) d += kKernelMismatch;
  return d;
}

int CandidatePredictor::history(const PredictorQuery& query) const {
  int count = 0;
  for (const TuningRecord& record : records_) count += sameHost(query.key, record) ? 1 : 0;
  return count;
}

std::vector<jit::KernelParams> CandidatePredictor::rank(const PredictorQuery& query,
                                                        const std::vector<jit::KernelParams>& space) const {
  if (space.empty()) return {};
  // The k nearest records (ties by key: records_ is sorted by key and the sort is stable).
  std::vector<std::pair<double, const TuningRecord*>> near;
  for (const TuningRecord& record : records_) {
    const double d = distance(query, record);
    if (std::isfinite(d)) near.emplace_back(d, &record);
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (near.size() > static_cast<std::size_t>(settings_.neighbours))
    near.resize(static_cast<std::size_t>(std::max(settings_.neighbours, 0)));
  std::vector<jit::KernelParams> by_vote = rankByVote(near, space);
  const bool tables = settings_.use_tables &&
                      std::any_of(near.begin(), near.end(), [](const auto& n) { return !n.second->times.empty(); });
  if (!tables) return by_vote;

  // value[r][c]: candidate c's time over neighbour r's best, no lower than 1 + tolerance; NaN
  // where r did not time c. A record without a table knows two: its winner (1) and the default.
  constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  const double floor = 1.0 + std::max(settings_.tolerance, 0.0);
  std::vector<std::vector<double>> value(near.size(), std::vector<double>(space.size(), kUnknown));
  std::vector<double> current(near.size(), floor), weight(near.size());
  for (std::size_t r = 0; r < near.size(); ++r) {
    const TuningRecord& record = *near[r].second;
    weight[r] = std::exp(-near[r].first);
    std::vector<TuningRecord::Timed> table = record.times;
    if (table.empty()) {
      table.push_back({record.params, 1.0});
      if (record.us > 0 && record.default_us > 0) table.push_back({jit::KernelParams{}, record.default_us / record.us});
    }
    double best = std::numeric_limits<double>::infinity();
    for (const TuningRecord::Timed& t : table) best = std::min(best, t.us);
    for (std::size_t c = 0; c < space.size(); ++c) {
      for (const TuningRecord::Timed& t : table) {
        if (t.params == space[c]) value[r][c] = std::max(t.us / best, floor);
      }
    }
    // Before any pick: as slow as the slowest candidate r timed.
    for (const TuningRecord::Timed& t : table) current[r] = std::max(current[r], std::max(t.us / best, floor));
  }
  std::vector<std::size_t> vote_at(space.size());
  for (std::size_t c = 0; c < space.size(); ++c)
    vote_at[c] = static_cast<std::size_t>(std::find(by_vote.begin(), by_vote.end(), space[c]) - by_vote.begin());
  // Ties (none of the neighbours gains any more, say): the vote's order.
  return greedyOrder(
      space,
      [&](std::size_t c) {
        double gain = 0;
        for (std::size_t r = 0; r < near.size(); ++r) {
          if (!std::isnan(value[r][c])) gain += weight[r] * std::max(0.0, current[r] - value[r][c]);
        }
        return gain;
      },
      [&](std::size_t c) { return vote_at[c]; },
      [&](std::size_t c) {
        for (std::size_t r = 0; r < near.size(); ++r) {
          if (!std::isnan(value[r][c])) current[r] = std::min(current[r], value[r][c]);
        }
      });
}

std::vector<jit::KernelParams> CandidatePredictor::rankByVote(
    const std::vector<std::pair<double, const TuningRecord*>>& near,
    const std::vector<jit::KernelParams>& space) const {
  // Each neighbour votes exp(-distance) for its winner, spread over the candidates by their
  // parameter distance to it (an exact match gets the whole vote). Picks are greedy: the default
  // first, then the candidate with the most vote left; each pick shrinks the votes it covers.
  std::vector<double> vote(near.size());
  std::vector<std::vector<double>> similar(space.size(), std::vector<double>(near.size()));
  for (std::size_t r = 0; r < near.size(); ++r) {
    vote[r] = std::exp(-near[r].first);
    for (std::size_t c = 0; c < space.size(); ++c)
      similar[c][r] = std::exp(-settings_.param_sharpness * paramDistance(space[c], near[r].second->params));
  }
  return greedyOrder(
      space,
      [&](std::size_t c) {
        double score = 0;
        for (std::size_t r = 0; r < near.size(); ++r) score += vote[r] * similar[c][r];
        return score;
      },
      [](std::size_t c) { return c; },  // ties: the search space's order
      [&](std::size_t c) {
        for (std::size_t r = 0; r < near.size(); ++r) vote[r] *= 1.0 - settings_.coverage * similar[c][r];
      });
}

std::vector<jit::KernelParams> nearestShapeOrder(const std::vector<jit::KernelParams>& space,
                                                 std::vector<TuningRecord> same_class,
                                                 const std::vector<double>& point) {
  if (space.empty()) return {};
  auto contains = [](const std::vector<jit::KernelParams>& list, const jit::KernelParams& params) {
    return std::find(list.begin(), list.end(), params) != list.end();
  };
  auto l1 = [&](const std::vector<double>& other) {
    if (other.size() != point.size()) return std::numeric_limits<double>::infinity();
    double sum = 0;
    for (std::size_t i = 0; i < point.size(); ++i) sum += std::fabs(point[i] - other[i]);
    return sum;
  };
  std::vector<jit::KernelParams> ordered{space.front()};
  std::stable_sort(same_class.begin(), same_class.end(),
                   [&](const TuningRecord& a, const TuningRecord& b) { return l1(a.point) < l1(b.point); });
  for (const TuningRecord& record : same_class) {
    if (contains(space, record.params) && !contains(ordered, record.params)) ordered.push_back(record.params);
  }
  for (const jit::KernelParams& params : space) {
    if (!contains(ordered, params)) ordered.push_back(params);
  }
  return ordered;
}

}  // namespace shapevm::tune
