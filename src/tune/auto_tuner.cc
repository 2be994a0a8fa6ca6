// SPDX-License-Identifier: Apache-2.0
// The AutoTuner (see auto_tuner.h): database lookup, candidate ordering, compile + measure, and
// the record of the winner.
#include "tune/auto_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "jit/compile_cancel.h"
#include "jit/compiled_kernel.h"
#include "jit/region.h"
#include "jit/validate.h"
#include "support/cpu_cores.h"
#include "support/logging.h"
#include "support/trace.h"
#include "support/tunables.h"

namespace shapevm::tune {

namespace {

using Clock = std::chrono::steady_clock;

// A non-default candidate must beat the default's median by this fraction to be chosen: smaller
// differences are timing noise, and the default is the better-tested code.
constexpr double kNoiseMargin = 0.02;
// Interleaved rounds of the library-vs-generated run-off at least (TuneRepeats when more).
constexpr std::int64_t kMinRunOffRounds = 7;
// Calls per timed sample are capped so a mis-measured warm-up cannot stall the compile thread.
constexpr std::int64_t kMaxCallsPerSample = 100000;

double usSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

std::int64_t setting(std::int64_t option, Tunable tunable) { return option >= 0 ? option : Tunables::get(tunable); }

bool contains(const std::vector<jit::KernelParams>& list, const jit::KernelParams& params) {
  return std::find(list.begin(), list.end(), params) != list.end();
}

// A bfloat16 matmul's default tile in the variant the default is not (the matmul family adds it
// next to the default; jit/bf16_variant.h). Like a library candidate it is kept past the
// predictor's cut and timed past the budget: the host's default variant is measured from it.
bool bf16Twin(const jit::KernelParams& params) {
  return params == jit::KernelParams{.bf16_dot = 1} || params == jit::KernelParams{.bf16_dot = -1};
}
// Which variant compiled code runs: the matmul family's symbols name the pair dot products.
bool runsBf16Pairs(const jit::CompiledKernel& kernel) {
  return kernel.handle.symbol.find("_bf16pairs") != std::string::npos;
}

// Sets each host's default bfloat16 matmul variant from the records' measurements.
void publishBf16Verdicts(const std::vector<TuningRecord>& records) {
  std::set<std::pair<std::string, std::string>> hosts;
  for (const TuningRecord& r : records) {
    if (r.bf16_pairs_us > 0 && r.bf16_widening_us > 0) hosts.insert({r.cpu, r.features});
  }
  for (const auto& [cpu, features] : hosts) {
    const jit::Bf16Variant verdict = bf16Verdict(records, cpu, features);
    if (jit::bf16Default(cpu) == verdict) continue;
    jit::setBf16Default(cpu, verdict);
    logAt(LogLevel::Info, "JIT", "bfloat16 matmuls on {} default to {} (measured by the tuner)", cpu,
          jit::bf16VariantName(verdict));
  }
}

struct Measurement {
  double median_us = 0;  // the samples' summary (Timing::summary): a median, or the fastest on the wall clock
};

double medianOf(std::vector<double> samples) {
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2), samples.end());
  return samples[samples.size() / 2];
}

// How one tune() reads time: the timer, and whether every candidate runs on the calling thread.
struct Timing {
  SampleTimer timer;
  bool one_thread = false;
  // On the calling thread's CPU clock a preempted sample reads the kernel's own work, so the
  // median of the samples; on the wall clock preemption only ever adds time, so the fastest.
  double summary(std::vector<double> samples) const {
    return one_thread ? medianOf(std::move(samples)) : *std::min_element(samples.begin(), samples.end());
  }
};

// Whether each of `candidates` runs on the calling thread only (no kernel pool, one OpenMP thread
// for a library kernel): its threads, or KernelThreads now, are one.
bool runsOnOneThread(const std::vector<jit::KernelParams>& candidates) {
  const int pool = kernelThreads();
  return std::all_of(candidates.begin(), candidates.end(),
                     [&](const jit::KernelParams& p) { return (p.threads > 0 ? p.threads : pool) == 1; });
}

// Microseconds per call over `calls` back-to-back calls (outputs reused, as on the compiled path).
Expected<double> sampleUs(const Timing& timing, const jit::KernelParams& params, const jit::CompiledKernel& kernel,
                          std::span<const Value* const> examples, std::vector<Value>& outputs, std::int64_t calls) {
  return timing.timer(params, calls, timing.one_thread, [&]() -> Status {
    for (std::int64_t c = 0; c < calls; ++c) {
      // Shutdown cancels within one call (a relaxed load per call: nothing next to a kernel call).
      if (jit::compileCancelled()) return makeError(ErrorCode::JitError, "{}", jit::kCompileCancelledMessage);
      SVM_RETURN_IF_ERROR(jit::invokeCompiled(kernel, examples, outputs));
    }
    return Status::ok();
  });
}

std::int64_t callsPerSample(double one_us, std::int64_t sample_us) {
  return std::clamp<std::int64_t>(
      static_cast<std::int64_t>(std::ceil(static_cast<double>(sample_us) / std::max(one_us, 0.01))), 1,
      kMaxCallsPerSample);
}

// Runs `kernel` (compiled for `params`) on the examples: a warm-up call checked against `baseline`
// (set by the first candidate that runs), then `repeats` samples of enough calls to last
// `sample_us` each.
Expected<Measurement> measure(const Timing& timing, const jit::KernelParams& params, const jit::CompiledKernel& kernel,
                              std::span<const Value* const> examples, std::vector<Value>& baseline,
                              std::int64_t repeats, std::int64_t sample_us) {
  std::vector<Value> outputs(static_cast<std::size_t>(kernel.num_outputs));
  SVM_RETURN_IF_ERROR(jit::invokeCompiled(kernel, examples, outputs));
  if (baseline.empty()) {
    baseline = std::move(outputs);  // keep the reference result; time with fresh buffers
    outputs.assign(static_cast<std::size_t>(kernel.num_outputs), Value());
    SVM_RETURN_IF_ERROR(jit::invokeCompiled(kernel, examples, outputs));
  } else {
    jit::Comparison comparison = jit::compareOutputs(baseline, outputs);
    if (!comparison.ok) {
      return makeError(ErrorCode::JitError, "its result disagrees with the first candidate's: {}", comparison.reason);
    }
  }
  // Calibrate: one call (outputs are reused from here on, as on the compiled path).
  SVM_ASSIGN_OR_RETURN(const double one_us, sampleUs(timing, params, kernel, examples, outputs, 1));
  const std::int64_t calls = callsPerSample(one_us, sample_us);
  std::vector<double> samples;
  for (std::int64_t r = 0; r < repeats; ++r) {
    SVM_ASSIGN_OR_RETURN(const double us, sampleUs(timing, params, kernel, examples, outputs, calls));
    samples.push_back(us);
  }
  return Measurement{timing.summary(std::move(samples))};
}

// A bfloat16 matmul's default tile in both variants (0: not timed) and the winner's variant.
struct Bf16Timings {
  double pairs_us = 0, widening_us = 0;
  std::string winner;  // "pairs", "widening"; "" when no twin is in the space or a library kernel won
};

// A candidate that compiled, ran and agreed, kept compiled until tune() returns (the run-off
// times it again).
struct Timed {
  jit::KernelParams params;
  std::unique_ptr<jit::CompiledKernel> kernel;
  double us = 0;
};

// The run-off: the contenders timed again in `rounds` interleaved rounds (the order alternating
// per round, so neither always runs right after a stall), one warm-up call and one sample of
// ~sample_us each per round; each contender's samples summarized (Timing::summary).
Expected<std::vector<double>> runOff(const Timing& timing, const std::vector<const Timed*>& contenders,
                                     std::span<const Value* const> examples, std::int64_t rounds,
                                     std::int64_t sample_us) {
  std::vector<std::vector<Value>> outputs;
  std::vector<std::int64_t> calls;
  for (const Timed* timed : contenders) {
    outputs.emplace_back(static_cast<std::size_t>(timed->kernel->num_outputs));
    calls.push_back(callsPerSample(timed->us, sample_us));
  }
  std::vector<std::vector<double>> samples(contenders.size());
  for (std::int64_t r = 0; r < rounds; ++r) {
    for (std::size_t j = 0; j < contenders.size(); ++j) {
      const std::size_t i = r % 2 == 0 ? j : contenders.size() - 1 - j;
      // An untimed call first: the sample times the kernel warm (its operands and buffers in the
      // caches), as the sweep and a hot call site do, not right after the other contender evicted them.
      const Timed& contender = *contenders[i];
      SVM_RETURN_IF_ERROR(jit::invokeCompiled(*contender.kernel, examples, outputs[i]));
      SVM_ASSIGN_OR_RETURN(const double us,
                           sampleUs(timing, contender.params, *contender.kernel, examples, outputs[i], calls[i]));
      samples[i].push_back(us);
    }
  }
  std::vector<double> summaries;
  for (std::vector<double>& list : samples) summaries.push_back(timing.summary(std::move(list)));
  return summaries;
}

}  // namespace

Expected<double> timeSample(const jit::KernelParams& /*params*/, std::int64_t calls, bool one_thread,
                            const std::function<Status()>& run) {
  const double cpu_start = one_thread ? jit::threadCpuMs() : 0.0;
  const Clock::time_point start = Clock::now();
  SVM_RETURN_IF_ERROR(run());
  const double us = one_thread ? (jit::threadCpuMs() - cpu_start) * 1000.0 : usSince(start);
  return us / static_cast<double>(calls);
}

AutoTuner::AutoTuner(AutoTunerOptions options) : options_(std::move(options)) {
  use_database_ = options_.use_database && Tunables::get(Tunable::TuneCache) != 0;
  if (!use_database_) return;
  std::string path = options_.database_path;
  if (path.empty()) {
    const std::string dir = defaultCacheDir();
    if (dir.empty()) {
      logAt(LogLevel::Warn, "tune", "no cache directory (set SHAPEVM_CACHE_DIR or HOME); tuning results are not kept");
      use_database_ = false;
      return;
    }
    path = dir + "/tuning.jsonl";
  }
  database_ = TuningDatabase::open(std::move(path));
  publishBf16Verdicts(database_.records());
}

void AutoTuner::setProgress(std::function<void(const TuneProgress&)> progress) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  progress_ = std::move(progress);
}

std::vector<jit::KernelParams> cutRanking(const std::vector<jit::KernelParams>& ranked, std::size_t top_k) {
  if (ranked.size() <= top_k) return ranked;
  std::vector<jit::KernelParams> cut(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(top_k));
  for (std::size_t i = top_k; i < ranked.size(); ++i) {
    if (ranked[i].library != 0 || bf16Twin(ranked[i])) cut.push_back(ranked[i]);
  }
  return cut;
}

std::vector<TuneReport> AutoTuner::reports() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return reports_;
}

std::vector<jit::KernelParams> AutoTuner::order(const std::vector<jit::KernelParams>& space, const KernelKey& key,
                                                const std::vector<double>& point, int* ranked_by) const {
  std::vector<jit::KernelParams> ordered = space;
  *ranked_by = 0;
  if (use_database_) {
    const CandidatePredictor predictor(database_.records());
    const PredictorQuery query{key, point};
    *ranked_by = predictor.history(query);
    if (*ranked_by > 0) {
      ordered = predictor.rank(query, space);
      const std::int64_t top_k = setting(options_.top_k, Tunable::TuneTopK);
      if (top_k > 0) ordered = cutRanking(ordered, static_cast<std::size_t>(top_k));
    }
  }
  const std::int64_t limit = setting(options_.max_candidates, Tunable::TuneCandidates);
  if (limit > 0 && static_cast<std::int64_t>(ordered.size()) > limit) ordered.resize(static_cast<std::size_t>(limit));
  return ordered;
}

jit::TuneEstimate AutoTuner::estimate(jit::KernelBackend& engine, const jit::KernelFamily& family,
                                      const jit::KernelSpec& unstamped, double compile_ms) const {
  jit::TuneEstimate estimate{0.0, 0.0};
  const jit::KernelSpec spec = engine.targetSpec(unstamped);
  const std::vector<jit::KernelParams> space = family.searchSpace(spec);
  if (space.size() <= 1) return estimate;  // nothing to choose between
  const KernelKey key = kernelKey(family, spec, engine.capabilities().target, engine.capabilities().features);
  std::vector<TuningRecord> history;
  if (use_database_) {
    if (std::optional<TuningRecord> record = database_.find(key.key()); record && contains(space, record->params)) {
      return estimate;  // a database hit costs nothing
    }
    history = database_.similar(key.shape_class, key.cpu, key.features);
  }
  double saved = 0;
  int counted = 0;
  for (const TuningRecord& record : history) {
    if (record.default_us <= 0 || record.us <= 0) continue;
    saved += std::clamp(1.0 - record.us / record.default_us, 0.0, 1.0);
    ++counted;
  }
  estimate.gain = counted > 0 ? saved / counted : kDefaultGain;
  int ranked_by = 0;
  const auto candidates = static_cast<std::int64_t>(order(space, key, {}, &ranked_by).size());
  const std::int64_t repeats = std::max<std::int64_t>(1, setting(options_.repeats, Tunable::TuneRepeats));
  const double timing_ms = static_cast<double>(repeats + 2) *
                           static_cast<double>(setting(options_.sample_us, Tunable::TuneSampleUs)) / 1000.0;
  const double per_candidate_ms = std::max(compile_ms, 0.0) + timing_ms;
  const double budget_ms = static_cast<double>(setting(options_.budget_ms, Tunable::TuneBudgetMs));
  estimate.cost_ms = std::min(static_cast<double>(candidates) * per_candidate_ms, budget_ms + per_candidate_ms);
  return estimate;
}

Expected<jit::TuneOutcome> AutoTuner::tune(jit::KernelBackend& engine, const jit::KernelFamily& family,
                                           const jit::KernelSpec& unstamped, std::span<const Value* const> examples) {
  std::lock_guard<std::mutex> tuning(tuning_mutex_);
  const Clock::time_point start = Clock::now();
  jit::TuneOutcome outcome;
  // The candidates fit the backend's target (vector width, registers, ISA features).
  const jit::KernelSpec spec = engine.targetSpec(unstamped);
  const std::vector<jit::KernelParams> space = family.searchSpace(spec);
  outcome.candidates = static_cast<int>(space.size());
  if (space.size() <= 1) return outcome;  // nothing to choose between: the default, untimed
  const std::string signature = spec.signature();
  const KernelKey key = kernelKey(family, spec, engine.capabilities().target, engine.capabilities().features);
  const std::string key_text = key.key();
  const std::vector<double> point = shapePoint(examples);

  TuneReport report{signature, std::string(family.name()), {}};
  int kernel_index = 0;
  std::function<void(const TuneProgress&)> progress;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    kernel_index = static_cast<int>(reports_.size()) + 1;
    progress = progress_;
  }
  auto finish = [&](const jit::TuneOutcome& result) {
    report.outcome = result;
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      reports_.push_back(report);
    }
    if (progress) progress(TuneProgress{signature, kernel_index, result.timed + result.failed, result.timed + result.failed, true, &report});
  };

  // 1. The database: a winner for exactly this kernel, bucket and host, still in the space.
  if (use_database_) {
    if (std::optional<TuningRecord> record = database_.find(key_text)) {
      if (contains(space, record->params)) {
        outcome.params = record->params;
        // A default winner of the other variant than today's default (the host's verdict moved
        // since it was recorded) is that variant's default tile.
        const jit::KernelParams twin{.bf16_dot = record->bf16 == "pairs" ? 1 : -1};
        if (record->params.isDefault() && !record->bf16.empty() && contains(space, twin)) outcome.params = twin;
        outcome.from_database = true;
        outcome.tuning_ms = usSince(start) / 1000.0;
        finish(outcome);
        return outcome;
      }
      database_.warn(fmt::format("{}: the record for {} (key {}) chose '{}', which is not in the {} family's search space; "
                                 "ignored and tuned again", database_.path(), signature, key_text, record->params.toString(),
                                 family.name()));
      database_.forget(key_text);
    }
  }

  // 2. Time the candidates, default first, within the budget.
  const std::int64_t budget_ms = setting(options_.budget_ms, Tunable::TuneBudgetMs);
  const std::int64_t repeats = std::max<std::int64_t>(1, setting(options_.repeats, Tunable::TuneRepeats));
  const std::int64_t sample_us = setting(options_.sample_us, Tunable::TuneSampleUs);
  const std::vector<jit::KernelParams> candidates = order(space, key, point, &report.ranked_by_predictor);
  const int to_time = static_cast<int>(candidates.size());
  const Timing timing{options_.timer ? options_.timer : SampleTimer(timeSample), runsOnOneThread(candidates)};
  // The budget is spent on the samples' clock: on one thread this thread's CPU time (compiling and
  // timing), so a loaded host's preemptions do not cut the sweep short after a few candidates.
  const double cpu_start_ms = jit::threadCpuMs();
  auto spent_ms = [&] { return timing.one_thread ? jit::threadCpuMs() - cpu_start_ms : usSince(start) / 1000.0; };

  std::vector<jit::KernelHandle> handles;
  std::vector<Timed> timed;
  std::vector<Value> baseline;
  double best_us = std::numeric_limits<double>::infinity();
  jit::KernelParams best = space.front();
  bool default_timed = false;
  std::string first_failure;
  for (int i = 0; i < to_time; ++i) {
    if (jit::compileCancelled()) {
      // Shutdown: half-finished tuning leaves no trace (no report, no database record).
      for (const jit::KernelHandle& handle : handles) (void)engine.free(handle);
      return makeError(ErrorCode::JitError, "{}", jit::kCompileCancelledMessage);
    }
    // Past the budget only library candidates (and the bfloat16 twin) are still timed: like the
    // default, they are the bar (a kernel that takes 100 ms a call on a loaded host leaves room
    // for no other candidate).
    if (i > 0 && spent_ms() >= static_cast<double>(budget_ms) && candidates[static_cast<std::size_t>(i)].library == 0 &&
        !bf16Twin(candidates[static_cast<std::size_t>(i)]))
      continue;
    jit::KernelSpec candidate_spec = spec;
    candidate_spec.params = candidates[static_cast<std::size_t>(i)];
    const std::string params_text = candidate_spec.params.toString();
    const Clock::time_point candidate_start = Clock::now();
    auto kernel = jit::compileKernel(engine, family, candidate_spec);
    Expected<Measurement> measured =
        kernel ? measure(timing, candidate_spec.params, **kernel, examples, baseline, repeats, sample_us)
               : Expected<Measurement>(kernel.status());
    if (kernel) handles.push_back((*kernel)->handle);
    if (measured) timed.push_back(Timed{candidate_spec.params, std::move(*kernel), measured->median_us});
    report.timings.push_back(CandidateTiming{candidate_spec.params,
                                             measured ? measured->median_us : std::numeric_limits<double>::infinity(),
                                             usSince(candidate_start) / 1000.0});
    trace::completeSince("tune", "candidate " + params_text, candidate_start,
                         trace::Args().add("signature", signature).add("median_us", report.timings.back().us));
    if (!measured) {
      ++outcome.failed;
      logAt(LogLevel::Info, "JIT", "Tuning {}: candidate {} skipped ({})", signature, params_text, measured.status().message());
      if (first_failure.empty()) first_failure = fmt::format("{}: {}", params_text, measured.status().message());
    } else {
      ++outcome.timed;
      logAt(LogLevel::Debug, "JIT", "Tuning {}: candidate {} median {:.1f} us", signature, params_text,
            measured->median_us);
      if (i == 0) {
        default_timed = true;
        outcome.default_us = measured->median_us;
      }
      if (measured->median_us < best_us) {
        best_us = measured->median_us;
        best = candidate_spec.params;
      }
    }
    if (progress) progress(TuneProgress{signature, kernel_index, i + 1, to_time, false, nullptr});
  }
  if (outcome.timed == 0 || jit::compileCancelled()) {
    for (const jit::KernelHandle& handle : handles) (void)engine.free(handle);
    if (jit::compileCancelled()) return makeError(ErrorCode::JitError, "{}", jit::kCompileCancelledMessage);
    outcome.tuning_ms = usSince(start) / 1000.0;
    finish(outcome);
    return makeError(ErrorCode::JitError, "every candidate failed ({} of {}; first: {})", outcome.failed, to_time,
                     first_failure);
  }
  if (default_timed && !(best == space.front()) && best_us > outcome.default_us * (1.0 - kNoiseMargin)) {
    best = space.front();  // within noise of the default: keep the default
    best_us = outcome.default_us;
  }
  // 3. A library kernel against the generated ones (library_onednn.h): one sample each, taken
  // minutes apart on a loaded host, cannot tell them apart, and the library is the bar users
  // compare with. The two fastest generated candidates (the first after the default rule above:
  // the sweep may have misranked two close ones) and every library candidate (oneDNN's primitive,
  // its sgemm) are timed again side by side. Where the two fastest by run-off median are within
  // the noise margin of each other, those two alone are timed again in twice as many rounds
  // (the decider) and the faster there wins: a close call is measured, not given to either
  // kind. A generated kernel and a library one that are far apart are decided by the first rounds.
  const Timed* generated = nullptr;
  std::vector<const Timed*> libraries;
  const Timed* fallback = nullptr;  // the default
  for (const Timed& candidate : timed) {
    if (candidate.params == space.front()) fallback = &candidate;
    if (candidate.params.library != 0) {
      libraries.push_back(&candidate);
    } else if (generated == nullptr || candidate.us < generated->us) {
      generated = &candidate;
    }
  }
  if (generated != nullptr && fallback != nullptr && generated->us > fallback->us * (1.0 - kNoiseMargin))
    generated = fallback;
  const Timed* runner_up = nullptr;  // the fastest other generated candidate
  for (const Timed& candidate : timed) {
    if (candidate.params.library == 0 && &candidate != generated &&
        (runner_up == nullptr || candidate.us < runner_up->us))
      runner_up = &candidate;
  }
  if (generated != nullptr && !libraries.empty()) {
    const std::int64_t rounds = std::max<std::int64_t>(kMinRunOffRounds, repeats);
    std::vector<const Timed*> contenders = {generated};
    contenders.insert(contenders.end(), libraries.begin(), libraries.end());
    if (runner_up != nullptr) contenders.push_back(runner_up);
    Expected<std::vector<double>> medians = runOff(timing, contenders, examples, rounds, sample_us);
    if (!medians) {
      for (const jit::KernelHandle& handle : handles) (void)engine.free(handle);
      return medians.status();  // cancelled (all ran before)
    }
    std::vector<std::size_t> order(contenders.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return (*medians)[x] < (*medians)[y]; });
    std::int64_t decider_rounds = 0;
    double decided_us[2] = {0, 0};
    if ((*medians)[order[0]] > (*medians)[order[1]] * (1.0 - kNoiseMargin)) {
      decider_rounds = 2 * rounds;
      Expected<std::vector<double>> decider =
          runOff(timing, {contenders[order[0]], contenders[order[1]]}, examples, decider_rounds, sample_us);
      if (!decider) {
        for (const jit::KernelHandle& handle : handles) (void)engine.free(handle);
        return decider.status();
      }
      decided_us[0] = (*decider)[0];
      decided_us[1] = (*decider)[1];
      if (decided_us[1] < decided_us[0]) {
        std::swap(order[0], order[1]);
        std::swap(decided_us[0], decided_us[1]);
      }
    }
    const Timed* winner = contenders[order[0]];
    // The report names the fastest library candidate and the fastest generated one (by the
    // decider where it timed them), with their medians over the first rounds; the log has the
    // decider's.
    std::size_t library_at = 0, generated_at = 0;
    bool library_seen = false, generated_seen = false;
    for (std::size_t i : order) {
      if (contenders[i]->params.library != 0 && !library_seen) {
        library_at = i;
        library_seen = true;
      }
      if (contenders[i]->params.library == 0 && !generated_seen) {
        generated_at = i;
        generated_seen = true;
      }
    }
    best = winner->params;
    // The record keeps the sweep's medians (one measurement for the winner, every other candidate
    // and the default); the run-off's own medians are in the report and the log.
    best_us = winner->us;
    report.runoff = RunOff{contenders[generated_at]->params, contenders[library_at]->params, (*medians)[generated_at],
                           (*medians)[library_at],           static_cast<int>(rounds),       timing.one_thread,
                           static_cast<int>(decider_rounds)};
    std::string figures;
    for (std::size_t i = 0; i < contenders.size(); ++i) {
      figures += fmt::format("{}{} {:.1f}us", i == 0 ? "" : ", ", contenders[i]->params.toString(), (*medians)[i]);
    }
    std::string decided;
    if (decider_rounds > 0) {
      decided = fmt::format("; within {:.0f}%, {} more rounds of {} {:.1f}us vs {} {:.1f}us", kNoiseMargin * 100,
                            decider_rounds, contenders[order[0]]->params.toString(), decided_us[0],
                            contenders[order[1]]->params.toString(), decided_us[1]);
    }
    logAt(LogLevel::Info, "JIT", "Tuning {}: run-off over {} interleaved rounds ({}): {}{}; chose {}", signature,
          rounds, timing.one_thread ? "thread CPU time, median" : "wall time, fastest", figures, decided,
          best.toString());
  }
  // 4. A bfloat16 matmul: the default tile's two variants, and the variant of the generated winner.
  // The two variants are timed again side by side (a run-off, as for the library above): the
  // sweep's one median of each, taken at different moments on a loaded host, can record a stall
  // rather than the kernels, and the host's default (the verdict over these records) follows them.
  Bf16Timings bf16;
  const bool has_twin = std::any_of(space.begin(), space.end(), bf16Twin);
  const Timed* bf16_default = nullptr;
  const Timed* bf16_twin = nullptr;
  for (const Timed& candidate : timed) {
    if (candidate.params == space.front()) bf16_default = &candidate;
    if (bf16Twin(candidate.params)) bf16_twin = &candidate;
    if (candidate.params == best && best.library == 0 && has_twin)
      bf16.winner = runsBf16Pairs(*candidate.kernel) ? "pairs" : "widening";
  }
  if (bf16_default != nullptr && bf16_twin != nullptr &&
      runsBf16Pairs(*bf16_default->kernel) != runsBf16Pairs(*bf16_twin->kernel)) {
    const std::int64_t rounds = std::max<std::int64_t>(kMinRunOffRounds, repeats);
    Expected<std::vector<double>> medians = runOff(timing, {bf16_default, bf16_twin}, examples, rounds, sample_us);
    if (!medians) {
      for (const jit::KernelHandle& handle : handles) (void)engine.free(handle);
      return medians.status();
    }
    const bool default_pairs = runsBf16Pairs(*bf16_default->kernel);
    bf16.pairs_us = (*medians)[default_pairs ? 0 : 1];
    bf16.widening_us = (*medians)[default_pairs ? 1 : 0];
    report.bf16_runoff = Bf16RunOff{bf16.pairs_us, bf16.widening_us, static_cast<int>(rounds)};
  }
  timed.clear();
  for (const jit::KernelHandle& handle : handles) (void)engine.free(handle);
  outcome.tuning_ms = usSince(start) / 1000.0;
  outcome.params = best;
  outcome.best_us = best_us;

  // 5. Remember the winner.
  if (use_database_) {
    TuningRecord record = recordOf(key);
    record.signature = signature;
    record.point = point;
    record.params = best;
    record.us = best_us;
    record.default_us = outcome.default_us;
    record.candidates = outcome.candidates;
    record.timed = outcome.timed;
    record.bf16 = bf16.winner;
    record.bf16_pairs_us = bf16.pairs_us;
    record.bf16_widening_us = bf16.widening_us;
    for (const CandidateTiming& t : report.timings) {
      if (std::isfinite(t.us) && t.us > 0) record.times.push_back({t.params, t.us});
    }
    if (Status appended = database_.append(record); !appended.isOk()) {
      database_.warn(fmt::format("{}: cannot record the winner for {}: {}", database_.path(), signature, appended.message()));
    }
  }
  if (bf16.pairs_us > 0 && bf16.widening_us > 0) {
    logAt(LogLevel::Info, "JIT",
          "Tuning {}: bfloat16 default tile {:.1f} us with pair dot products, {:.1f} us widening", signature,
          bf16.pairs_us, bf16.widening_us);
    // The host's default follows every measurement (the database's, or this one without it).
    TuningRecord measured;
    measured.cpu = key.cpu;
    measured.features = key.features;
    measured.bf16_pairs_us = bf16.pairs_us;
    measured.bf16_widening_us = bf16.widening_us;
    publishBf16Verdicts(use_database_ ? database_.records() : std::vector<TuningRecord>{measured});
  }
  finish(outcome);
  return outcome;
}

}  // namespace shapevm::tune
