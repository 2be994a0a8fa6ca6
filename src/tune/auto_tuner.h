// SPDX-License-Identifier: Apache-2.0
// AutoTuner: the JIT's Tuner (jit/tuner.h). For a kernel it first asks the tuning database; on a
// miss it compiles the family's searchSpace() candidates one by one in the calling (compile)
// thread, runs each on scratch copies of the example inputs (a warm-up call whose outputs must
// agree with the first candidate that ran, then TuneRepeats timed samples, summarized as the
// clock below says), stops starting new candidates once TuneBudgetMs is spent (on that clock), and
// appends the winner to the database.
// The learned predictor (predictor.h) ranks the candidates from the database's history of the
// kernel's family on this host and only its top TuneTopK are timed (the default always first);
// without history every candidate is timed; TuneCandidates > 0 caps the count. Library candidates
// are kept through the predictor's cut and timed even past the budget. Shutdown cancels
// tuning between candidates and inside timing loops (jit/compile_cancel.h): nothing is recorded.
// Invariant: every candidate's code is removed from the engine before tune() returns (the JIT
// compiles the winner's params again through its validated path); a candidate that fails to
// compile, to run or to agree counts as infinitely slow; tune() never throws away the default.
// The library candidates (KernelParams::library: oneDNN's primitive, its sgemm) and the fastest
// generated one are timed again in interleaved rounds; the generated one wins only by beating the
// fastest library time by the margin.
// The clock: where every candidate runs on the calling thread only (KernelThreads / the candidates'
// threads say one), that thread's CPU time and the median of the samples; a preempted sample then
// reads the kernel's own work, not the other processes' time on the core. Otherwise the wall
// clock and the fastest sample (preemption only ever adds to it). AutoTunerOptions::timer replaces
// the clock (tests script the times).
// A bfloat16 matmul's default tile in the other variant (pairs <-> widening, the family's
// KernelParams{.bf16_dot = +-1}) is kept and timed like a library candidate; the record names the
// generated winner's variant and keeps both variants' times, and the geometric mean of those over
// the database's records on this host sets the untuned default (jit/bf16_variant.h), at
// construction and after every such tune().
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "jit/tuner.h"
#include "tune/predictor.h"
#include "tune/tuning_db.h"

namespace shapevm::tune {

// Reads one timed sample: runs `run` (`calls` back-to-back calls of the candidate `params`) and
// returns microseconds per call. `one_thread`: the candidate runs on the calling thread only.
using SampleTimer = std::function<Expected<double>(const jit::KernelParams& params, std::int64_t calls, bool one_thread,
                                                   const std::function<Status()>& run)>;

// The default timer: the calling thread's CPU time when `one_thread`, else the steady clock.
Expected<double> timeSample(const jit::KernelParams& params, std::int64_t calls, bool one_thread,
                            const std::function<Status()>& run);

struct AutoTunerOptions {
  bool use_database = true;      // read and append the tuning database (false: --no-cache)
  std::string database_path;     // "" = defaultCacheDir() + "/tuning.jsonl"
  // -1: read from the tunables table at each tune() (TuneBudgetMs, TuneRepeats, TuneSampleUs,
  // TuneCandidates); use_database is also cleared by TuneCache=0.
  std::int64_t budget_ms = -1;
  std::int64_t repeats = -1;
  std::int64_t sample_us = -1;
  std::int64_t max_candidates = -1;
  std::int64_t top_k = -1;  // TuneTopK
  SampleTimer timer;        // empty: timeSample
};

// One candidate as tune() timed it (the predictor's evaluation reads these).
struct CandidateTiming {
  jit::KernelParams params;
  double us = 0;       // median per call; infinity when it failed to compile, run or agree
  double cost_ms = 0;  // compiling and timing it
};

// The library-vs-generated run-off (auto_tuner.cc): all timed again in interleaved rounds;
// `library` is the library candidate with the lowest median.
struct RunOff {
  jit::KernelParams generated, library;
  double generated_us = 0, library_us = 0;  // over the rounds: the median (CPU time) or fastest (wall)
  int rounds = 0;
  bool cpu_clock = false;  // the calling thread's CPU time (every candidate on one thread), else wall
  // The two fastest contenders within the noise margin of each other were timed again in this
  // many more interleaved rounds, those alone deciding (0: the first rounds told them apart).
  int decider_rounds = 0;
};

// A bfloat16 matmul's default tile timed again in both variants, interleaved (auto_tuner.cc): the
// times its tuning record keeps and the host's verdict reads (jit/bf16_variant.h).
struct Bf16RunOff {
  double pairs_us = 0, widening_us = 0;  // over the rounds, as RunOff's
  int rounds = 0;
};

// One tune() call as the CLI's summary and progress bar see it.
struct TuneReport {
  std::string signature;
  std::string family;
  jit::TuneOutcome outcome;
  std::vector<CandidateTiming> timings;  // in the order timed (empty on a database hit)
  int ranked_by_predictor = 0;           // > 0: the predictor ordered the candidates from this many records
  std::optional<RunOff> runoff;          // when a library and a generated candidate were both timed
  std::optional<Bf16RunOff> bf16_runoff;  // when both variants of a bfloat16 default tile were timed
};

struct TuneProgress {
  std::string signature;
  int kernel = 0;         // 1-based index of the kernel being tuned (tune() calls so far)
  int candidate = 0;      // candidates finished for this kernel
  int to_time = 0;        // candidates this kernel will time at most
  bool done = false;      // the kernel is finished (report holds its outcome)
  const TuneReport* report = nullptr;
};

// What the AutoTuner times of a predictor's ranking: its first `top_k`, then every later library
// candidate and bfloat16 twin (the bars the generated candidates are run off against).
std::vector<jit::KernelParams> cutRanking(const std::vector<jit::KernelParams>& ranked, std::size_t top_k);

class AutoTuner final : public jit::Tuner {
 public:
  explicit AutoTuner(AutoTunerOptions options = {});

  Expected<jit::TuneOutcome> tune(jit::KernelBackend& engine, const jit::KernelFamily& family,
                                  const jit::KernelSpec& spec, std::span<const Value* const> examples) override;
  // Cost: 0 on a database hit, else the candidates it would time x (compile_ms + the timing
  // samples), capped by the budget; gain: the mean saving of the family's winners on this host
  // in the database (kDefaultGain without history).
  jit::TuneEstimate estimate(jit::KernelBackend& engine, const jit::KernelFamily& family, const jit::KernelSpec& spec,
                             double compile_ms) const override;
  static constexpr double kDefaultGain = 0.10;

  // Called from the compile thread after every candidate and at the end of every kernel.
  void setProgress(std::function<void(const TuneProgress&)> progress);
  std::vector<TuneReport> reports() const;
  const TuningDatabase& database() const { return database_; }
  bool databaseEnabled() const { return use_database_; }

 private:
  // The candidates to time, best first: the predictor's ranking cut to TuneTopK when it has
  // history for the family on this host, else the whole space; then capped by TuneCandidates.
  std::vector<jit::KernelParams> order(const std::vector<jit::KernelParams>& space, const KernelKey& key,
                                       const std::vector<double>& point, int* ranked_by) const;

  AutoTunerOptions options_;
  bool use_database_ = true;
  TuningDatabase database_;
  std::mutex tuning_mutex_;   // one kernel timed at a time (compile threads would disturb each other)
  mutable std::mutex state_mutex_;
  std::vector<TuneReport> reports_;
  std::function<void(const TuneProgress&)> progress_;
};

}  // namespace shapevm::tune
