// SPDX-License-Identifier: Apache-2.0
// Evaluates the AutoTuner's learned candidate predictor (src/tune/predictor.h) against the
// nearest-shape ordering it replaced. Every candidate of the matmul family is timed exhaustively
// on a seeded sample of shapes (log-uniform M, K, N; B contiguous or the workload's W.T); then,
// leave one shape out at a time, each ranking is trained on the other shapes' winners and scored
// on the held-out shape: is the best of its top K (default 8) within 3% of the exhaustive best,
// and what share of the exhaustive tuning time (compile + timing of each candidate) its top K
// cost; also the same for what the AutoTuner times of a ranking (its top K plus the library
// candidates past them, tune::cutRanking). The learned predictor trains on the training shapes'
// timing tables (TuningRecord::times): whole (as exhaustive searches leave them), cut to what
// the tuner would have timed, and none (winners only). Deterministic rankings given the timings;
// the timings are this machine's, this run's.
// Usage: svm_predictor_eval [--shapes N] [--seed S] [--top-k K] [--passes P] [--sweep] [--json FILE]
//                           [--save FILE | --load FILE]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "jit/kernel_abi.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"
#include "ops/registry.h"
#include "support/tunables.h"
#include "tune/auto_tuner.h"
#include "tune/predictor.h"

namespace shapevm {
namespace {

struct Sample {
  std::int64_t m = 0, k = 0, n = 0;
  bool transposed_b = false;
  tune::TuningRecord record;  // the exhaustive winner, as the AutoTuner would record it
  std::vector<tune::CandidateTiming> timings;
  double best_us = 0;
};

Tensor uniform(const Shape& shape, std::mt19937& rng) {
  Tensor t = std::move(Tensor::empty(DType::Float32, shape).value());
  std::uniform_real_distribution<float> draw(-1.0f, 1.0f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = draw(rng);
  return t;
}

std::int64_t logUniform(std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> draw(std::log2(lo), std::log2(hi));
  return static_cast<std::int64_t>(std::lround(std::exp2(draw(rng))));
}

// One sample as a JSON line: the shape, the winner's record (with its table) and every timing.
std::string sampleToJson(const Sample& s) {
  nlohmann::json j;
  j["m"] = s.m;
  j["k"] = s.k;
  j["n"] = s.n;
  j["wt"] = s.transposed_b;
  j["record"] = tune::recordToJson(s.record);
  nlohmann::json timings = nlohmann::json::array();
  for (const tune::CandidateTiming& t : s.timings) {
    timings.push_back({t.params.toString(), std::isfinite(t.us) ? t.us : -1.0, t.cost_ms});
  }
  j["timings"] = std::move(timings);
  return j.dump();
}

Expected<std::vector<Sample>> loadSamples(const std::string& path) {
  std::ifstream in(path);
  std::vector<Sample> samples;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (text.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    auto bad = [&](const std::string& why) { return makeError(ErrorCode::ParseError, "line {}: {}", line, why); };
    if (j.is_discarded() || !j.is_object() || !j.contains("record") || !j["record"].is_string() ||
        !j.contains("timings") || !j["timings"].is_array())
      return bad("not a sample written by --save");
    Sample s;
    s.m = j.value("m", 0);
    s.k = j.value("k", 0);
    s.n = j.value("n", 0);
    s.transposed_b = j.value("wt", false);
    auto record = tune::parseRecord(j["record"].get<std::string>());
    if (!record) return bad(record.status().message());
    s.record = std::move(*record);
    s.best_us = std::numeric_limits<double>::infinity();
    for (const nlohmann::json& t : j["timings"]) {
      if (!t.is_array() || t.size() != 3 || !t[0].is_string() || !t[1].is_number() || !t[2].is_number())
        return bad("a timing that is not [params, us, cost_ms]");
      auto params = jit::KernelParams::parse(t[0].get<std::string>());
      if (!params) return bad(params.status().message());
      const double us = t[1].get<double>();
      s.timings.push_back({*params, us > 0 ? us : std::numeric_limits<double>::infinity(), t[2].get<double>()});
      s.best_us = std::min(s.best_us, s.timings.back().us);
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

// The best time among the first `k` of `order` (the default is always among them).
double bestOfTop(const Sample& s, const std::vector<jit::KernelParams>& order, std::size_t k, double* cost_ms) {
  double best = std::numeric_limits<double>::infinity();
  *cost_ms = 0;
  for (std::size_t i = 0; i < order.size() && i < k; ++i) {
    for (const tune::CandidateTiming& t : s.timings) {
      if (!(t.params == order[i])) continue;
      best = std::min(best, t.us);
      *cost_ms += t.cost_ms;
    }
  }
  return best;
}

int run(int argc, char** argv) {
  int shapes = 24;
  unsigned seed = 2026;
  std::size_t top_k = 8;
  std::string json, save, load;
  bool sweep = false;
  int passes = 1;
  CLI::App app{
      "Scores the AutoTuner's learned candidate predictor against the nearest-shape ordering, "
      "leaving one exhaustively timed shape out at a time",
      "svm_predictor_eval"};
  app.add_option("--shapes", shapes, "matmul shapes to time exhaustively")->check(CLI::Range(2, 1000));
  app.add_option("--seed", seed, "seed of the shape sample");
  app.add_option("--top-k", top_k, "candidates each ranking may time")->check(CLI::Range(1, 1000));
  app.add_option("--json", json, "also write the results here");
  app.add_option("--save", save, "write the shapes' timings here (JSON lines), to score again with --load");
  app.add_option("--load", load, "score the timings --save wrote instead of timing (--shapes, --seed, --passes unused)")
      ->check(CLI::ExistingFile);
  app.add_option("--passes", passes,
                 "exhaustive searches per shape; a candidate's time is its median over them (steadier "
                 "winners than one pass's single timing of ~40 near-equal candidates)")
      ->check(CLI::Range(1, 9));
  app.add_flag("--sweep", sweep,
               "also score other predictor settings (neighbours, parameter sharpness, coverage) on the same timings");
  CLI11_PARSE(app, argc, argv);
  auto backend = jit::LlvmCpuBackend::create();
  if (!backend) {
    fmt::print(stderr, "cannot start the LLVM CPU backend: {}\n", backend.status().toString());
    return 1;
  }
  jit::KernelBackend& engine = **backend;
  const OpSchema* schema = OpRegistry::global().find("matmul");
  const jit::KernelFamily* family = jit::familyFor(OpId::MatMul);
  auto attrs = resolveAttrs(*schema, {});
  (void)Tunables::set(Tunable::TuneRepeats, 5);
  (void)Tunables::set(Tunable::TuneSampleUs, 300);
  tune::AutoTunerOptions options;
  options.use_database = false;
  options.budget_ms = 3600000;
  options.max_candidates = 0;
  options.top_k = 0;
  tune::AutoTuner tuner(options);
  std::mt19937 rng(seed);
  std::vector<Sample> samples;
  if (!load.empty()) {
    auto loaded = loadSamples(load);
    if (!loaded) {
      fmt::print(stderr, "{}: {}\n", load, loaded.status().toString());
      return 1;
    }
    samples = std::move(*loaded);
    shapes = 0;
    fmt::print("{} shapes' timings from {}\n", samples.size(), load);
  }
  for (int i = 0; i < shapes; ++i) {
    Sample s;
    s.m = logUniform(rng, 16, 1024);
    s.k = logUniform(rng, 64, 512);
    s.n = logUniform(rng, 64, 1024);
    s.transposed_b = (i % 2) == 1;
    std::vector<Value> inputs{Value::fromTensor(uniform(Shape{s.m, s.k}, rng))};
    if (s.transposed_b) {
      Tensor w = uniform(Shape{s.n, s.k}, rng);
      inputs.push_back(Value::fromTensor(w.asStrided(Shape{s.k, s.n}, Shape{1, s.k}, 0).value()));
    } else {
      inputs.push_back(Value::fromTensor(uniform(Shape{s.k, s.n}, rng)));
    }
    std::vector<const Value*> pointers{&inputs[0], &inputs[1]};
    const jit::KernelSpec spec = engine.targetSpec(jit::exactSpec(OpId::MatMul, *attrs, pointers));
    auto outcome = tuner.tune(engine, *family, spec, pointers);
    if (!outcome) {
      fmt::print(stderr, "shape {}x{}x{}: {}\n", s.m, s.k, s.n, outcome.status().toString());
      continue;
    }
    s.timings = tuner.reports().back().timings;
    // More passes: each candidate's median over them (the cost stays one pass's: what tuning costs).
    std::vector<std::vector<double>> times(s.timings.size());
    for (std::size_t c = 0; c < s.timings.size(); ++c) times[c].push_back(s.timings[c].us);
    for (int pass = 1; pass < passes; ++pass) {
      if (!tuner.tune(engine, *family, spec, pointers)) break;
      for (const tune::CandidateTiming& t : tuner.reports().back().timings) {
        for (std::size_t c = 0; c < s.timings.size(); ++c) {
          if (s.timings[c].params == t.params) times[c].push_back(t.us);
        }
      }
    }
    for (std::size_t c = 0; c < s.timings.size(); ++c) {
      std::vector<double>& v = times[c];
      std::sort(v.begin(), v.end());
      s.timings[c].us = v.size() % 2 == 1 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    }
    s.best_us = std::numeric_limits<double>::infinity();
    for (const tune::CandidateTiming& t : s.timings) {
      if (t.us >= s.best_us) continue;
      s.best_us = t.us;
      if (passes > 1) outcome->params = t.params, outcome->best_us = t.us;  // the winner of the medians
    }
    const tune::KernelKey key =
        tune::kernelKey(*family, spec, engine.capabilities().target, engine.capabilities().features);
    s.record.key = key.key();
    s.record.family = key.family;
    s.record.kernel = key.kernel;
    s.record.bucket = key.bucket;
    s.record.shape_class = key.shape_class;
    s.record.cpu = key.cpu;
    s.record.features = key.features;
    s.record.point = tune::shapePoint(pointers);
    s.record.params = outcome->params;
    s.record.us = outcome->best_us;
    s.record.default_us = outcome->default_us;
    for (const tune::CandidateTiming& t : s.timings) {
      if (std::isfinite(t.us) && t.us > 0) s.record.times.push_back({t.params, t.us});
    }
    fmt::print("shape {:>4}x{:>3}x{:>4}{}: {} candidates, exhaustive best {:.1f} us ({}), default {:.1f} us\n", s.m,
               s.k, s.n, s.transposed_b ? " (B=W.T)" : "        ", s.timings.size(), s.best_us,
               outcome->params.toString(), outcome->default_us);
    std::fflush(stdout);
    samples.push_back(std::move(s));
  }
  if (!save.empty()) {
    std::ofstream out(save);
    for (const Sample& s : samples) out << sampleToJson(s) << "\n";
    if (!out) {
      fmt::print(stderr, "cannot write {}\n", save);
      return 1;
    }
  }
  struct Score {
    int within = 0;
    double cost_ms = 0, gap = 0;
    std::size_t timed = 0;
  };
  Score learned, winners_only, cut_tables, nearest, default_only, learned_timed, nearest_timed;
  tune::PredictorSettings vote_settings;
  vote_settings.use_tables = false;
  std::vector<tune::PredictorSettings> sweep_settings;
  if (sweep) {
    for (const int neighbours : {4, 8, 16}) {
      for (const double tolerance : {0.0, 0.01, 0.02, 0.03}) {
        tune::PredictorSettings p;
        p.neighbours = neighbours;
        p.tolerance = tolerance;
        sweep_settings.push_back(p);
      }
    }
    for (const int neighbours : {4, 8, 16}) {
      for (const double sharpness : {1.0, 2.0, 4.0}) {
        for (const double coverage : {0.0, 0.5, 1.0})
          sweep_settings.push_back({neighbours, sharpness, coverage, 0.0, /*use_tables=*/false});
      }
    }
  }
  std::vector<Score> swept(sweep_settings.size());
  double exhaustive_ms = 0;
  std::string rows;
  auto queryOf = [](const Sample& s) {
    return tune::PredictorQuery{tune::KernelKey{s.record.family, s.record.kernel, s.record.bucket, s.record.cpu,
                                                s.record.features, s.record.shape_class},
                                s.record.point};
  };
  auto spaceOf = [](const Sample& s) {
    std::vector<jit::KernelParams> space;
    for (const tune::CandidateTiming& t : s.timings) space.push_back(t.params);
    return space;
  };
  for (std::size_t held = 0; held < samples.size(); ++held) {
    const Sample& s = samples[held];
    std::vector<tune::TuningRecord> training;
    for (std::size_t j = 0; j < samples.size(); ++j) {
      if (j != held) training.push_back(samples[j].record);
    }
    const std::vector<jit::KernelParams> space = spaceOf(s);
    for (const tune::CandidateTiming& t : s.timings) exhaustive_ms += t.cost_ms;
    const tune::PredictorQuery query = queryOf(s);
    const std::vector<jit::KernelParams> ranked = tune::CandidatePredictor(training).rank(query, space);
    // As the database fills once the predictor cuts the search: each training record holds only
    // what the tuner would have timed (the top K of the winners-only vote of the other training
    // shapes, and the library candidates), and its winner is the best of those.
    std::vector<tune::TuningRecord> cut_training;
    for (std::size_t j = 0; j < samples.size(); ++j) {
      if (j == held) continue;
      std::vector<tune::TuningRecord> others;
      for (std::size_t i = 0; i < samples.size(); ++i) {
        if (i != held && i != j) others.push_back(samples[i].record);
      }
      const std::vector<jit::KernelParams> order = tune::cutRanking(
          tune::CandidatePredictor(others, vote_settings).rank(queryOf(samples[j]), spaceOf(samples[j])), top_k);
      tune::TuningRecord cut = samples[j].record;
      cut.times.clear();
      cut.us = std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < order.size(); ++i) {
        for (const tune::TuningRecord::Timed& t : samples[j].record.times) {
          if (!(t.params == order[i])) continue;
          cut.times.push_back(t);
          if (t.us < cut.us) cut.us = t.us, cut.params = t.params;
        }
      }
      if (!cut.times.empty()) cut_training.push_back(std::move(cut));
    }
    std::vector<tune::TuningRecord> same_class;
    for (const tune::TuningRecord& r : training) {
      if (r.shape_class == s.record.shape_class) same_class.push_back(r);
    }
    const std::vector<jit::KernelParams> baseline = tune::nearestShapeOrder(space, same_class, s.record.point);
    auto score = [&](const std::vector<jit::KernelParams>& order, std::size_t k, Score& into) {
      double cost = 0;
      const double best = bestOfTop(s, order, k, &cost);
      into.within += best <= s.best_us * 1.03 ? 1 : 0;
      into.cost_ms += cost;
      into.gap += best / s.best_us - 1.0;
      into.timed += std::min(k, order.size());
      return best / s.best_us - 1.0;
    };
    // What the AutoTuner times of a ranking: its top K and the library candidates past them.
    auto scoreAsTimed = [&](const std::vector<jit::KernelParams>& order, Score& into) {
      const std::vector<jit::KernelParams> timed = tune::cutRanking(order, top_k);
      return score(timed, timed.size(), into);
    };
    const double learned_gap = score(ranked, top_k, learned);
    (void)scoreAsTimed(ranked, learned_timed);
    (void)score(tune::CandidatePredictor(training, vote_settings).rank(query, space), top_k, winners_only);
    (void)score(tune::CandidatePredictor(cut_training).rank(query, space), top_k, cut_tables);
    const double nearest_gap = score(baseline, top_k, nearest);
    (void)scoreAsTimed(baseline, nearest_timed);
    const double default_gap = score(space, 1, default_only);
    for (std::size_t v = 0; v < sweep_settings.size(); ++v)
      (void)score(tune::CandidatePredictor(training, sweep_settings[v]).rank(query, space), top_k, swept[v]);
    rows += fmt::format(
        "{}{{\"m\":{},\"k\":{},\"n\":{},\"wt\":{},\"candidates\":{},\"best_us\":{:.3f},\"learned_gap\":{:.4f},"
        "\"nearest_gap\":{:.4f},\"default_gap\":{:.4f}}}",
        rows.empty() ? "" : ",", s.m, s.k, s.n, s.transposed_b, s.timings.size(), s.best_us, learned_gap, nearest_gap,
        default_gap);
  }
  const double n = static_cast<double>(std::max<std::size_t>(samples.size(), 1));
  auto line = [&](const char* name, const Score& x) {
    return fmt::format(
        "{:<34} {:>4.1f} timed, best within 3% of exhaustive: {:>2}/{} ({:.0f}%), mean gap {:.1f}%, tuning time "
        "{:.0f}% of exhaustive",
        name, static_cast<double>(x.timed) / n, x.within, samples.size(), 100.0 * x.within / n, 100.0 * x.gap / n,
        100.0 * x.cost_ms / std::max(exhaustive_ms, 1e-9));
  };
  fmt::print("\nleave-one-out over {} matmul shapes ({} exhaustive tuning ms in all):\n", samples.size(),
             exhaustive_ms);
  fmt::print("top {} of each ranking:\n{}\n{}\n{}\n{}\n", top_k, line("learned predictor (k-NN)", learned),
             line("k-NN, training tables cut as timed", cut_tables), line("k-NN vote of winners only", winners_only),
             line("nearest-shape baseline", nearest));
  fmt::print("as the AutoTuner times a ranking (its top {} and the library candidates past them):\n{}\n{}\n", top_k,
             line("learned predictor (k-NN)", learned_timed), line("nearest-shape baseline", nearest_timed));
  fmt::print("{}\n", line("default only", default_only));
  for (std::size_t v = 0; v < sweep_settings.size(); ++v) {
    const tune::PredictorSettings& p = sweep_settings[v];
    const std::string name =
        p.use_tables ? fmt::format("tables k={:<2} tolerance={:.2f}", p.neighbours, p.tolerance)
                     : fmt::format("vote k={:<2} sharp={} cover={:.1f}", p.neighbours, p.param_sharpness, p.coverage);
    fmt::print("{}\n", line(name.c_str(), swept[v]));
  }
  if (!json.empty()) {
    std::ofstream out(json);
    out << fmt::format(
        "{{\"top_k\":{},\"shapes\":{},\"learned_within\":{},\"winners_only_within\":{},\"cut_tables_within\":{},"
        "\"learned_timed_within\":{},\"nearest_timed_within\":{},\"nearest_within\":{},"
        "\"default_within\":{},"
        "\"learned_cost_share\":{:.4f},\"nearest_cost_share\":{:.4f},\"rows\":[{}]}}\n",
        top_k, samples.size(), learned.within, winners_only.within, cut_tables.within, learned_timed.within,
        nearest_timed.within, nearest.within, default_only.within, learned.cost_ms / std::max(exhaustive_ms, 1e-9),
        nearest.cost_ms / std::max(exhaustive_ms, 1e-9), rows);
  }
  return 0;
}

}  // namespace
}  // namespace shapevm

int main(int argc, char** argv) {
  return shapevm::run(argc, argv);
}
