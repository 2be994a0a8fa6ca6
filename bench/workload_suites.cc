// SPDX-License-Identifier: Apache-2.0
// The reference workload's suites: lstm_cell / lstm_loop at O0/O1/O2 against the measured FMA
// floor (with compile latency, tuning-database hits and a two-thread O2 row), cold costs (first
// call, latency while compiles are in flight at O1 and O2 against O0) and memory (VM context, JIT with its kernels).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_common.h"
#include "jit/jit.h"
#include "jit/llvm_cpu/library_cache.h"
#include "support/tunables.h"

namespace shapevm::bench {
namespace {

// Matmul FLOPs of one call (2mnk per matmul). The cell: [B*S,128]x[128,1024] and [B,256]x[256,1024];
// the loop: [B,128]x[128,1024] and [B,256]x[256,1024] per step. The elementwise tail (bias adds,
// gate nonlinearities, c/h updates: ~4.4 kflop per row of batch*seq vs 262 kflop of matmul, under 2%)
// is not counted, so the floor is slightly optimistic.
double workloadFlops(const std::string& variant, std::int64_t batch, std::int64_t seq) {
  const double b = static_cast<double>(batch), s = static_cast<double>(seq);
  if (variant == "lstm_loop") return s * (2.0 * b * 128 * 1024 + 2.0 * b * 256 * 1024);
  return 2.0 * b * s * 128 * 1024 + 2.0 * b * 256 * 1024;
}

// Fused ranges still waiting for their one background tuning: queued, or installed untuned.
int untunedRanges(const Instance& instance) {
  int untuned = 0;
  for (std::size_t f = 0; f < instance.module->functions.size(); ++f) {
    for (const jit::Jit::RangeState& range : instance.jit()->rangeStates(static_cast<int>(f))) {
      using Phase = jit::Jit::RangeState::Phase;
      if (range.phase == Phase::Queued || (range.phase == Phase::Installed && !range.tuned)) ++untuned;
    }
  }
  return untuned;
}

struct WarmUp {
  double ms = 0;
  int extra_passes = 0;  // passes over every shape after the first seven, waiting for tuning
  int untuned = 0;       // fused ranges still untuned at the end (0 unless the pass cap was hit)
};

// Every shape of the run (the fixed seqs six times, then the stream), each compile allowed to
// finish after the run that queued it. With a tuner attached, more passes follow until every
// installed fused region has been re-tuned: a region is installed untuned first, and a later run
// queues its tuning (and a region widened for new shapes is installed untuned again).
Expected<WarmUp> warmUp(Instance& instance, const Weights& weights, std::int64_t batch,
                        const std::vector<std::int64_t>& seqs, const std::vector<std::int64_t>& stream) {
  const Function& fn = instance.module->functions[static_cast<std::size_t>(instance.function)];
  const Clock::time_point start = Clock::now();
  auto pass = [&](const std::vector<std::int64_t>& list) -> Status {
    for (std::int64_t seq : list) {
      if (auto ran = instance.session->run(instance.function, workloadArgs(fn, weights, batch, seq, 7)); !ran)
        return ran.status();
      if (instance.jit()) instance.jit()->waitIdle();
    }
    return Status::ok();
  };
  for (int r = 0; r < 6; ++r) SVM_RETURN_IF_ERROR(pass(seqs));
  SVM_RETURN_IF_ERROR(pass(stream));
  WarmUp result;
  if (instance.tuner()) {
    constexpr int kMaxExtraPasses = 12;
    while ((result.untuned = untunedRanges(instance)) > 0 && result.extra_passes < kMaxExtraPasses) {
      SVM_RETURN_IF_ERROR(pass(seqs));
      SVM_RETURN_IF_ERROR(pass(stream));
      ++result.extra_passes;
    }
  }
  result.ms = msSince(start);
  return result;
}

// Outputs of `instance` equal O0's (`reference`) on fresh inputs at every seq.
Status checkAgainst(Instance& reference, Instance& instance, const Weights& weights, std::int64_t batch,
                    const std::vector<std::int64_t>& seqs, const std::string& what) {
  const Function& fn = reference.module->functions[static_cast<std::size_t>(reference.function)];
  for (std::int64_t seq : seqs) {
    auto args = workloadArgs(fn, weights, batch, seq, 1000 + static_cast<std::uint64_t>(seq));
    SVM_ASSIGN_OR_RETURN(Tensor want, firstOutput(reference, args));
    SVM_ASSIGN_OR_RETURN(Tensor got, firstOutput(instance, args));
    const double err = relL2(got, want);
    if (!(err <= 1e-5)) {
      return makeError(ErrorCode::Internal, "{} {} differs from O0 at seq {}: rel L2 {:.3g}", instance.variant, what,
                       seq, err);
    }
  }
  return Status::ok();
}

// One compile event, classified for the compile-latency tables.
struct TaggedEvent {
  std::string variant;
  std::string category;
  jit::CompileEvent event;
};

// O1: every event is one op's kernel. O2: "Region@PC" = a fused range installed untuned,
// "Region@PC (tuned)" = its background re-tune (the AutoTuner, then codegen of the winners), other
// signatures = single-op kernels outside fused ranges (tuned inline when a tuner is attached).
std::string eventCategory(int level, const jit::CompileEvent& e, bool cache_instance) {
  if (level == 1) return "O1 op kernel";
  const bool region = e.signature.rfind("Region@", 0) == 0;
  const bool tuned = e.signature.find("(tuned)") != std::string::npos;
  if (region && !tuned) return "O2 fused region, untuned install";
  if (region) {
    if (e.tuning_cache_hit) return "O2 fused region re-tune, tuning-database hit";
    return cache_instance ? "O2 fused region re-tune, database miss (timed)" : "O2 fused region re-tune, cold (timed)";
  }
  if (e.tuning_cache_hit) return "O2 op kernel, tuning-database hit";
  return e.tuning_ms > 0 ? "O2 op kernel, tuned by timing" : "O2 op kernel";
}

json jitStatsJson(const std::string& variant, const std::string& role, int level, const jit::JitStats& stats,
                  const WarmUp& warm) {
  return {{"variant", variant},
          {"role", role},
          {"level", fmt::format("O{}", level)},
          {"compiles", stats.compiles},
          {"fused_regions", stats.fused_regions},
          {"fused_ops", stats.fused_ops},
          {"region_declines", stats.region_declines},
          {"tuning_ms", stats.tuning_ms},
          {"tuned_kernels", stats.tuned_kernels},
          {"tuning_cache_hits", stats.tuning_cache_hits},
          {"compile_failures", stats.compile_failures},
          {"validation_failures", stats.validation_failures},
          {"warmup_s", warm.ms / 1000.0},
          {"warmup_extra_passes", warm.extra_passes},
          {"untuned_ranges", warm.untuned}};
}

}  // namespace

// `out`: the workload rows; `compile_out`: the O1 per-kernel summary (end to end median/p90, mean
// split); `extra`: compile_latency (per category, median/p90 of each part), compile_paths (per
// fused range: untuned install, cold re-tune, database-hit re-tune), workload_jit (JIT stats) and
// workload_2t (O2 timed again with kernel_threads = 2 in the same rounds, fixed seqs).
Status workloadSuite(const BenchFlags& flags, jit::JitEngine& engine, const Weights& weights,
                     const std::string& tmp_dir, json& out, json& compile_out, json& extra) {
  const std::int64_t batch = 32;
  const std::vector<std::int64_t> seqs =
      flags.quick ? std::vector<std::int64_t>{10, 30} : std::vector<std::int64_t>{10, 20, 30, 120};
  const std::vector<std::int64_t> stream = benchStream(flags.quick);
  const int rounds = flags.quick ? 3 : 7;
  const int per_round = flags.quick ? 2 : 4;
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<PeakMeter> meter, PeakMeter::create(engine));
  // --quick keeps under its 2 minutes with a shorter tuning budget (the matmul suite's tuning-
  // quality check keeps the default).
  const std::int64_t tune_budget_ms = flags.quick ? std::min<std::int64_t>(500, Tunables::get(Tunable::TuneBudgetMs))
                                                  : Tunables::get(Tunable::TuneBudgetMs);
  std::vector<TaggedEvent> events;
  json jit_stats = json::array(), paths = json::array(), two_thread_rows = json::array();
  for (const std::string variant : {"lstm_cell", "lstm_loop"}) {
    // O2 tunes with an AutoTuner on a fresh database (per variant): the warm-up includes tuning.
    const std::string tuning_db = tmp_dir + "/" + variant + "/tuning.jsonl";
    std::vector<Instance> instances;
    for (int level = 0; level <= 2; ++level) {
      SVM_ASSIGN_OR_RETURN(Instance instance, makeInstance(flags, variant, level, tuning_db, tune_budget_ms));
      instances.push_back(std::move(instance));
    }
    const Function& fn = instances[0].module->functions[static_cast<std::size_t>(instances[0].function)];
    std::vector<WarmUp> warm;
    for (Instance& instance : instances) {
      SVM_ASSIGN_OR_RETURN(WarmUp w, warmUp(instance, weights, batch, seqs, stream));
      warm.push_back(w);
    }
    for (std::size_t l = 1; l < instances.size(); ++l) {
      SVM_RETURN_IF_ERROR(checkAgainst(instances[0], instances[l], weights, batch, seqs, fmt::format("at O{}", l)));
    }
    if (warm[2].untuned > 0) {
      fmt::print("workload {:<9} O2: {} fused ranges still untuned after {} extra warm-up passes\n", variant,
                 warm[2].untuned, warm[2].extra_passes);
    }
    // Timing: rounds interleave the levels (and an FMA-peak measurement); each round runs every
    // seq `per_round` times, then the stream once.
    struct Acc {
      std::vector<double> ms;
      std::uint64_t runs = 0, allocs = 0, system_allocs = 0, compiled = 0, calls = 0;
    };
    std::map<std::pair<int, std::int64_t>, Acc> acc;          // (level, seq or -1 = stream)
    std::map<std::int64_t, std::vector<double>> two_threads;  // O2 with kernel_threads = 2: seq -> ms
    std::map<std::int64_t, std::vector<Value>> args_by_seq;
    for (std::int64_t seq : seqs)
      args_by_seq[seq] = workloadArgs(fn, weights, batch, seq, 2000 + static_cast<std::uint64_t>(seq));
    for (std::int64_t seq : stream) {
      if (!args_by_seq.count(seq))
        args_by_seq[seq] = workloadArgs(fn, weights, batch, seq, 3000 + static_cast<std::uint64_t>(seq));
    }
    for (int round = 0; round < rounds; ++round) {
      meter->measure();
      for (Instance& instance : instances) {
        auto timed = [&](std::int64_t seq, std::int64_t key) -> Status {
          const ExecStats before = instance.vm->stats();
          const Clock::time_point start = Clock::now();
          auto ran = instance.session->run(instance.function, args_by_seq[seq]);
          const double ms = msSince(start);
          if (!ran) return ran.status();
          const ExecStats& after = instance.vm->stats();
          Acc& a = acc[{instance.level, key}];
          a.ms.push_back(key < 0 ? ms / static_cast<double>(batch * seq) * 1e3 : ms);  // stream: us per token
          ++a.runs;
          a.allocs += after.alloc_requests - before.alloc_requests;
          a.system_allocs += after.system_allocations - before.system_allocations;
          a.compiled += after.compiled_calls - before.compiled_calls;
          a.calls += after.op_calls - before.op_calls;
          return Status::ok();
        };
        for (std::int64_t seq : seqs) {
          for (int k = 0; k < per_round; ++k) SVM_RETURN_IF_ERROR(timed(seq, seq));
        }
        for (std::int64_t seq : stream) SVM_RETURN_IF_ERROR(timed(seq, -1));
      }
      // "Report both": the same O2 kernels (tuned on one thread; those whose parameters leave
      // `threads` open read the tunable per call) with kernel_threads = 2, in the same rounds.
      // Untimed runs come first for 20 ms: on this VM the second vCPU, idle while the one-thread
      // levels ran, takes a few milliseconds to come up to speed (the cell at seq 10 ran 0.65-0.74
      // ms for its first five calls, then 0.32 ms), which a program that keeps two threads busy
      // does not see. The pool's workers spin 200 us after a job and are asleep before O0's turn.
      if (Tunables::get(Tunable::KernelThreads) == 1) {
        SVM_RETURN_IF_ERROR(Tunables::set(Tunable::KernelThreads, 2));
        Status status = Status::ok();
        const Clock::time_point warm_start = Clock::now();
        for (int k = 0; status.isOk() && (k < 2 || msSince(warm_start) < 20.0); ++k) {
          if (auto ran = instances[2].session->run(instances[2].function, args_by_seq[seqs[0]]); !ran)
            status = ran.status();
        }
        for (std::int64_t seq : seqs) {
          for (int k = 0; k < per_round && status.isOk(); ++k) {
            const Clock::time_point start = Clock::now();
            auto ran = instances[2].session->run(instances[2].function, args_by_seq[seq]);
            if (!ran) status = ran.status();
            two_threads[seq].push_back(msSince(start));
          }
        }
        SVM_RETURN_IF_ERROR(Tunables::set(Tunable::KernelThreads, 1));
        SVM_RETURN_IF_ERROR(status);
      }
    }
    const double peak = meter->best();
    double stream_flops = 0, stream_tokens = 0;
    for (std::int64_t seq : stream) {
      stream_flops += workloadFlops(variant, batch, seq);
      stream_tokens += static_cast<double>(batch * seq);
    }
    std::map<std::pair<int, std::int64_t>, double> medians;
    for (auto& [key, a] : acc) medians[key] = summarizeLatency(a.ms).median;
    for (auto& [key, a] : acc) {
      LatencySummary s = summarizeLatency(a.ms);
      const double runs = static_cast<double>(a.runs);
      json row = {{"variant", variant},
                  {"level", fmt::format("O{}", key.first)},
                  {"batch", batch},
                  {"runs", a.runs},
                  {"allocs_per_run", static_cast<double>(a.allocs) / runs},
                  {"system_allocs_per_run", static_cast<double>(a.system_allocs) / runs},
                  {"compiled_calls_per_run", static_cast<double>(a.compiled) / runs},
                  {"interpreted_calls_per_run", static_cast<double>(a.calls - a.compiled) / runs},
                  {"peak_gflops", peak}};
      // The compute floor: matmul FLOPs / the FMA peak measured in the same rounds.
      double floor = 0;
      if (key.second < 0) {
        row["seq"] = "stream";
        row["median_us_per_token"] = s.median;
        row["min_us_per_token"] = s.low;
        row["max_us_per_token"] = s.high;
        row["gflop_per_token"] = stream_flops / stream_tokens / 1e9;
        floor = stream_flops / stream_tokens / (peak * 1e3);  // us per token, averaged over the stream
        row["floor_us_per_token"] = floor;
      } else {
        row["seq"] = key.second;
        row["median_ms"] = s.median;
        row["min_ms"] = s.low;
        row["max_ms"] = s.high;
        row["p99_ms"] = s.p99;
        row["median_us_per_token"] = s.median * 1e3 / static_cast<double>(batch * key.second);
        row["gflop_per_call"] = workloadFlops(variant, batch, key.second) / 1e9;
        floor = workloadFlops(variant, batch, key.second) / (peak * 1e6);  // ms
        row["floor_ms"] = floor;
      }
      if (peak > 0) {
        row["vs_floor"] = s.median / floor;
        row["gflops"] = (key.second < 0 ? stream_flops / stream_tokens / (s.median * 1e3)
                                        : workloadFlops(variant, batch, key.second) / (s.median * 1e6));
      }
      if (medians.count({0, key.second}) && s.median > 0) row["speedup_vs_o0"] = medians[{0, key.second}] / s.median;
      out.push_back(row);
      fmt::print(
          "workload {:<9} O{} seq {:>6}: median {:.3f} {} (min {:.3f}, max {:.3f}) = {:.2f}x the floor, {:.2f}x O0; "
          "{:.1f} allocs/run, {:.0f}/{:.0f} compiled/interpreted calls/run\n",
          variant, key.first, key.second < 0 ? std::string("stream") : std::to_string(key.second), s.median,
          key.second < 0 ? "us/token" : "ms", s.low, s.high, s.median / floor, row.value("speedup_vs_o0", 0.0),
          static_cast<double>(a.allocs) / runs, static_cast<double>(a.compiled) / runs,
          static_cast<double>(a.calls - a.compiled) / runs);
    }
    fmt::print("workload {:<9}: FMA peak {:.1f} GFLOP/s (best of the rounds); the floor counts matmul FLOPs only\n",
               variant, peak);
    for (const auto& [seq, ms] : two_threads) {
      const LatencySummary s = summarizeLatency(ms);
      const double floor = workloadFlops(variant, batch, seq) / (peak * 1e6);  // one core's, ms
      const double one_thread = medians.count({2, seq}) ? medians[{2, seq}] : 0.0;
      two_thread_rows.push_back({{"variant", variant},
                                 {"level", "O2"},
                                 {"threads", 2},
                                 {"batch", batch},
                                 {"seq", seq},
                                 {"runs", ms.size()},
                                 {"median_ms", s.median},
                                 {"min_ms", s.low},
                                 {"max_ms", s.high},
                                 {"floor_ms", floor},
                                 {"vs_floor", s.median / floor},
                                 {"vs_two_core_floor", s.median / (floor / 2)},
                                 {"one_thread_ms", one_thread},
                                 {"speedup_vs_one_thread", s.median > 0 ? one_thread / s.median : 0.0}});
      fmt::print(
          "workload {:<9} O2 seq {:>6} with 2 kernel threads: median {:.3f} ms (min {:.3f}, max {:.3f}) = {:.2f}x "
          "the one-core floor, {:.2f}x a two-core floor; {:.2f}x O2 on one thread\n",
          variant, seq, s.median, s.low, s.high, s.median / floor, s.median / (floor / 2),
          s.median > 0 ? one_thread / s.median : 0.0);
    }

    // Compile events of O1 and of the cold O2 instance (its tuning timed every candidate).
    for (int level = 1; level <= 2; ++level) {
      const jit::JitStats stats = instances[static_cast<std::size_t>(level)].jit()->stats();
      jit_stats.push_back(
          jitStatsJson(variant, level == 2 ? "cold" : "", level, stats, warm[static_cast<std::size_t>(level)]));
      if (level == 2) jit_stats.back()["tune_budget_ms"] = tune_budget_ms;
      for (const jit::CompileEvent& e : stats.events) events.push_back({variant, eventCategory(level, e, false), e});
    }
    // Tuning-cache hits: a second O2 VM + Jit with a NEW AutoTuner reading the database the first
    // one wrote, warmed up on the same shapes; its re-tunes should all come from the database.
    SVM_ASSIGN_OR_RETURN(Instance cached, makeInstance(flags, variant, 2, tuning_db, tune_budget_ms));
    SVM_ASSIGN_OR_RETURN(WarmUp cached_warm, warmUp(cached, weights, batch, seqs, stream));
    SVM_RETURN_IF_ERROR(checkAgainst(instances[0], cached, weights, batch, seqs, "at O2 (tuning-database instance)"));
    const jit::JitStats cached_stats = cached.jit()->stats();
    jit_stats.push_back(jitStatsJson(variant, "database", 2, cached_stats, cached_warm));
    jit_stats.back()["tune_budget_ms"] = tune_budget_ms;
    for (const jit::CompileEvent& e : cached_stats.events) events.push_back({variant, eventCategory(2, e, true), e});
    const jit::JitStats cold_stats = instances[2].jit()->stats();
    fmt::print(
        "workload {:<9} O2 tuning: cold {:.0f} ms ({} kernels timed, {} database hits, warm-up {:.1f} s); "
        "second AutoTuner on its database: {:.1f} ms ({} timed, {} hits, warm-up {:.1f} s)\n",
        variant, cold_stats.tuning_ms, cold_stats.tuned_kernels, cold_stats.tuning_cache_hits, warm[2].ms / 1000.0,
        cached_stats.tuning_ms, cached_stats.tuned_kernels, cached_stats.tuning_cache_hits, cached_warm.ms / 1000.0);
    // Per hot path (fused range): its untuned install, the cold re-tune and the database-hit re-tune.
    std::map<std::string, json> by_path;
    std::vector<std::string> order;
    auto path_of = [](const std::string& signature) {
      const std::size_t cut = signature.find(" (tuned)");
      return cut == std::string::npos ? signature : signature.substr(0, cut);
    };
    auto note = [&](const jit::CompileEvent& e, const char* prefix) {
      const std::string path = path_of(e.signature);
      if (path.rfind("Region@", 0) != 0) return;
      if (!by_path.count(path)) {
        by_path[path] = {{"variant", variant}, {"path", path}};
        order.push_back(path);
      }
      json& row = by_path[path];
      const bool tuned = e.signature != path;
      const std::string key = std::string(prefix) + (tuned ? "retune" : "install");
      if (row.contains(key + "_total_ms")) {  // a widened range compiles again: count, keep the first
        row[key + "_count"] = row.value(key + "_count", 1) + 1;
        return;
      }
      row[key + "_total_ms"] = e.shape_infer_ms + e.codegen_ms + e.validate_patch_ms + e.tuning_ms;
      row[key + "_tuning_ms"] = e.tuning_ms;
      row[key + "_codegen_ms"] = e.codegen_ms;
      row[key + "_cache_hit"] = e.tuning_cache_hit;
      row[key + "_count"] = 1;
    };
    for (const jit::CompileEvent& e : cold_stats.events) note(e, "cold_");
    for (const jit::CompileEvent& e : cached_stats.events) note(e, "db_");
    for (const std::string& path : order) paths.push_back(by_path[path]);
  }
  // Compile latency per hot path and category, over both variants: median and p90 of each part.
  const std::vector<std::string> known_order = {"O1 op kernel",
                                                "O2 fused region, untuned install",
                                                "O2 fused region re-tune, cold (timed)",
                                                "O2 fused region re-tune, tuning-database hit",
                                                "O2 fused region re-tune, database miss (timed)",
                                                "O2 op kernel",
                                                "O2 op kernel, tuned by timing",
                                                "O2 op kernel, tuning-database hit"};
  std::vector<std::string> categories;
  for (const std::string& category : known_order) {
    if (std::any_of(events.begin(), events.end(), [&](const TaggedEvent& t) { return t.category == category; })) {
      categories.push_back(category);
    }
  }
  json latency = json::array();
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
  };
  for (const std::string& category : categories) {
    std::vector<double> total, infer, codegen, tuning, validate;
    for (const TaggedEvent& t : events) {
      if (t.category != category) continue;
      const jit::CompileEvent& e = t.event;
      total.push_back(e.shape_infer_ms + e.codegen_ms + e.validate_patch_ms + e.tuning_ms);
      infer.push_back(e.shape_infer_ms);
      codegen.push_back(e.codegen_ms);
      tuning.push_back(e.tuning_ms);
      validate.push_back(e.validate_patch_ms);
    }
    json row = {{"category", category},
                {"level", category.substr(0, 2)},
                {"count", total.size()},
                {"region", category.find("region") != std::string::npos}};
    for (auto& [name, v] : std::vector<std::pair<std::string, std::vector<double>*>>{{"total", &total},
                                                                                     {"shape_infer", &infer},
                                                                                     {"codegen", &codegen},
                                                                                     {"tuning", &tuning},
                                                                                     {"validate_patch", &validate}}) {
      row[name + "_median_ms"] = pct(*v, 0.5);
      row[name + "_p90_ms"] = pct(*v, 0.9);
    }
    latency.push_back(row);
    fmt::print(
        "compile {:<48} n={:<3} median {:8.1f} ms, p90 {:8.1f}; shape inference {:.2f}, codegen {:.1f}, tuning {:.1f}, "
        "validation+patch {:.1f} ms (medians){}\n",
        category, total.size(), row["total_median_ms"].get<double>(), row["total_p90_ms"].get<double>(),
        row["shape_infer_median_ms"].get<double>(), row["codegen_median_ms"].get<double>(),
        row["tuning_median_ms"].get<double>(), row["validate_patch_median_ms"].get<double>(),
        row["region"].get<bool>() ? " [region: shape inference = its plan]" : "");
  }
  extra = {{"compile_latency", latency},
           {"compile_paths", paths},
           {"workload_jit", jit_stats},
           {"workload_2t", two_thread_rows}};
  // The O1 summary in its earlier form (end to end per kernel; means of the split).
  std::vector<double> compile_ms;
  double infer = 0, codegen = 0, validate = 0;
  for (const TaggedEvent& t : events) {
    if (t.category != "O1 op kernel") continue;
    compile_ms.push_back(t.event.shape_infer_ms + t.event.codegen_ms + t.event.validate_patch_ms + t.event.tuning_ms);
    infer += t.event.shape_infer_ms;
    codegen += t.event.codegen_ms;
    validate += t.event.validate_patch_ms;
  }
  if (!compile_ms.empty()) {
    const double n = static_cast<double>(compile_ms.size());
    compile_out = {{"level", "O1"},
                   {"count", compile_ms.size()},
                   {"median_ms", pct(compile_ms, 0.5)},
                   {"p90_ms", pct(compile_ms, 0.9)},
                   {"shape_infer_ms", infer / n},
                   {"codegen_ms", codegen / n},
                   {"validate_patch_ms", validate / n}};
  }
  return Status::ok();
}

// ---- cold costs: first call, first call after a new shape, latency while compiles are in flight ----

// What one call cost its thread: wall time, the thread's CPU, the time it sat runnable waiting for
// a core (the scheduler's run delay, /proc/thread-self/schedstat), and the CPU the process's other
// threads (compile threads, their helpers, kernel-pool workers) used meanwhile.
struct CallCost {
  double wall_ms = 0, cpu_ms = 0, wait_ms = 0, others_cpu_ms = 0;
  long minor_faults = 0;  // the thread's minor page faults during the call (getrusage RUSAGE_THREAD)
  // When the call started and ended, in seconds of the steady clock (CLOCK_MONOTONIC on Linux):
  // printed with SHAPEVM_BENCH_COLD_CALLS, so a profile taken with `perf record -k monotonic` can be
  // cut to one call's samples.
  double start_s = 0, end_s = 0;
};

class CallMeter {
 public:
  CallMeter()
      : start_(Clock::now()),
        cpu_(cpuMs(CLOCK_THREAD_CPUTIME_ID)),
        process_(cpuMs(CLOCK_PROCESS_CPUTIME_ID)),
        wait_(runDelayMs()),
        faults_(minorFaults()) {}
  CallCost stop() const {
    CallCost c;
    c.minor_faults = minorFaults() - faults_;
    c.wall_ms = msSince(start_);
    c.cpu_ms = cpuMs(CLOCK_THREAD_CPUTIME_ID) - cpu_;
    c.wait_ms = runDelayMs() - wait_;
    c.others_cpu_ms = std::max(0.0, cpuMs(CLOCK_PROCESS_CPUTIME_ID) - process_ - c.cpu_ms);
    c.start_s = std::chrono::duration<double>(start_.time_since_epoch()).count();
    c.end_s = c.start_s + c.wall_ms * 1e-3;
    return c;
  }

 private:
  static double cpuMs(clockid_t clock) {
    timespec ts{};
    clock_gettime(clock, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
  }
  // The thread's time runnable but not running (schedstat's second field, ns); 0 without the file.
  static double runDelayMs() {
    std::FILE* file = std::fopen("/proc/thread-self/schedstat", "r");
    if (file == nullptr) return 0;
    unsigned long long run = 0, delay = 0;
    const int read = std::fscanf(file, "%llu %llu", &run, &delay);
    std::fclose(file);
    return read == 2 ? static_cast<double>(delay) * 1e-6 : 0;
  }
  static long minorFaults() {
    rusage usage{};
    return getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_minflt : 0;
  }
  Clock::time_point start_;
  double cpu_, process_, wait_;
  long faults_;
};

namespace {

// An O0 call outside compiles: its index in the start's call sequence, its seq, its CPU.
struct TimedO0Call {
  int index = 0;
  std::int64_t seq = 0;
  double cpu_ms = 0;
};

// The CPU of O0's calls of `seq` nearest call `index` of the same fresh start: the mean of the last one
// before it and the first one after it (either alone at the ends). The host's speed drifts by tens of
// percent over seconds (other work on it, its clock), so a call while compiling is compared with the
// same work a few calls away, not with a median over minutes; nullopt without any O0 call of `seq`.
std::optional<double> nearbyO0Cpu(const std::vector<TimedO0Call>& calls, int index, std::int64_t seq) {
  const TimedO0Call* before = nullptr;
  const TimedO0Call* after = nullptr;
  for (const TimedO0Call& c : calls) {
    if (c.seq != seq) continue;
    if (c.index < index && (before == nullptr || c.index > before->index)) before = &c;
    if (c.index > index && (after == nullptr || c.index < after->index)) after = &c;
  }
  if (before != nullptr && after != nullptr) return (before->cpu_ms + after->cpu_ms) / 2;
  if (before != nullptr) return before->cpu_ms;
  if (after != nullptr) return after->cpu_ms;
  return std::nullopt;
}

}  // namespace

// Fewer calls while compiling than this, and the printed "p99" is simply the slowest call.
constexpr std::size_t kFewCalls = 20;
// The full suite's fresh starts per variant: at least kMinStarts, then more until kEnoughCalls calls
// fell inside a compile (p99 by nearest rank is then not the slowest call), at most kMaxStarts.
constexpr int kMinStarts = 4;
constexpr int kMaxStarts = 24;
constexpr std::size_t kEnoughCalls = 101;

// At O1 and at O2 (fresh tuning database: its background re-tunes run while the program does), per
// variant: each call of the JIT instance made while no compile is pending is followed by the same
// call on an O0 instance (same shape, same inputs), so "while compiling" latencies are compared with
// O0's median of the same shape measured in the same rounds; calls while compiling follow each other
// (twice as many fall inside a compile). A compile is in flight for only a few calls, so the full
// suite repeats the whole measurement from fresh starts (new instances, empty caches) and pools the
// calls: at least kMinStarts, and more until kEnoughCalls calls fell inside a compile (so p99 is not
// the slowest call) or kMaxStarts were made. Beside wall time, each call's CPU (over O0's CPU median
// of the same shape) and its wait for a core say whether a slow call did more work or lost its core.
// SHAPEVM_BENCH_COLD_CALLS=1 prints every call (with its minor page faults, and the JIT call's
// compiled op calls, guard and inline-cache misses and system allocations); SHAPEVM_BENCH_COLD_ONLY=
// lstm_cell:2 measures that variant and level only; SHAPEVM_BENCH_COLD_STARTS=N makes exactly N fresh
// starts per variant; SHAPEVM_BENCH_COLD_PAIRED=1 follows every JIT call while compiling by O0's too
// (a control: the same work in the same window; half as many calls fall inside a compile) and reports
// the JIT call's CPU over that O0 call's. Before a variant's first start a throwaway O0 instance runs
// each shape once (the process's first touches of memory; SHAPEVM_BENCH_COLD_NO_WARMUP=1: not).
Status coldSuite(const BenchFlags& flags, const Weights& weights, const std::string& tmp_dir, json& out,
                 json& timeline) {
  const bool print_calls = std::getenv("SHAPEVM_BENCH_COLD_CALLS") != nullptr;
  const char* only = std::getenv("SHAPEVM_BENCH_COLD_ONLY");
  const char* starts_env = std::getenv("SHAPEVM_BENCH_COLD_STARTS");
  const bool paired = std::getenv("SHAPEVM_BENCH_COLD_PAIRED") != nullptr;
  const bool warm_process = std::getenv("SHAPEVM_BENCH_COLD_NO_WARMUP") == nullptr;
  const bool o0_first_env = std::getenv("SHAPEVM_BENCH_COLD_O0_FIRST") != nullptr;
  const int fixed_starts = starts_env != nullptr ? std::max(1, std::atoi(starts_env)) : (flags.quick ? 1 : 0);
  const int runs = flags.quick ? 40 : 120;
  const std::int64_t cycle[] = {10, 20, 30};
  for (const std::string variant : {"lstm_cell", "lstm_loop"}) {
    for (int level = 1; level <= 2; ++level) {
      if (only != nullptr && fmt::format("{}:{}", variant, level) != only) continue;
      std::vector<std::pair<std::int64_t, CallCost>> during;        // (seq, cost) of calls while compiling
      // Their CPU over the nearby O0 calls' (nearbyO0Cpu): the host's speed drifts over seconds.
      std::vector<double> nearby_ratio;
      std::vector<double> paired_ratio, o0_during_ratio_cpu;        // SHAPEVM_BENCH_COLD_PAIRED: (JIT, O0) CPU
      std::vector<std::pair<std::int64_t, CallCost>> o0_during;     // ... O0's calls while compiling
      std::map<std::int64_t, std::vector<double>> o0_wall, o0_cpu;  // per seq
      std::vector<double> steady;
      double first = 0, after_new_shape = 0;
      int starts = 0;
      for (int start_index = 0;
           fixed_starts > 0 ? start_index < fixed_starts
                            : start_index < kMinStarts || (during.size() < kEnoughCalls && start_index < kMaxStarts);
           ++start_index) {
        ++starts;
        std::vector<std::pair<int, CallCost>> start_during;  // (call index, cost) while compiling
        std::vector<TimedO0Call> start_o0;                   // O0's calls outside compiles
        // A fresh folder per start: the compiled-kernel cache lives next to the tuning database,
        // and a kernel from it would make the run warm, not cold.
        const std::string cache_dir = fmt::format("{}/cold/{}/O{}/{}", tmp_dir, variant, level, start_index);
        std::error_code ignored;
        std::filesystem::remove_all(cache_dir, ignored);
        if (start_index == 0 && warm_process) {
          // The process's first call of each shape touches memory no one used before (the
          // allocator's first blocks of each size, the interpreter's first outputs): a cost of the
          // process, not of the JIT, that the JIT instance would always pay (it runs first, and
          // with an early compile its first seq-30 call is inside one). A throwaway O0 instance pays
          // it here, before anything is measured.
          SVM_ASSIGN_OR_RETURN(Instance warm, makeInstance(flags, variant, 0));
          const Function& warm_fn = warm.module->functions[static_cast<std::size_t>(warm.function)];
          for (const std::int64_t seq : cycle) {
            auto args = workloadArgs(warm_fn, weights, 32, seq, 11);
            if (auto ran = warm.session->run(warm.function, args); !ran) return ran.status();
          }
        }
        const Clock::time_point t0 = Clock::now();
        SVM_ASSIGN_OR_RETURN(Instance o0, makeInstance(flags, variant, 0));
        SVM_ASSIGN_OR_RETURN(Instance instance, makeInstance(flags, variant, level, cache_dir + "/tuning.jsonl"));
        const Function& fn = instance.module->functions[static_cast<std::size_t>(instance.function)];
        const bool record_timeline = variant == "lstm_cell" && level == 1 && start_index == 0;
        for (int i = 0; i < runs; ++i) {
          const std::int64_t seq = cycle[i % 3];
          auto args = workloadArgs(fn, weights, 32, seq, 11);
          const Clock::time_point start = Clock::now();
          const ExecStats exec_before = instance.vm->stats();
          // SHAPEVM_BENCH_COLD_O0_FIRST (paired): while a compile is pending, O0's call of the pair
          // runs first, so that it, not the JIT call, follows another shape's call (a control of the
          // order: the second call of a pair finds the same inputs in the caches).
          std::optional<CallCost> o0_first;
          if (paired && o0_first_env) {
            const jit::JitStats pending = instance.jit()->stats();
            if (pending.requests > pending.compiles + pending.compile_failures + pending.validation_failures) {
              const CallMeter o0_meter;
              if (auto ran = o0.session->run(o0.function, args); !ran) return ran.status();
              o0_first = o0_meter.stop();
            }
          }
          const double created_before = jit::library::threadCreateMs();
          const CallMeter meter;
          if (auto ran = instance.session->run(instance.function, args); !ran) return ran.status();
          const CallCost cost = meter.stop();
          // CPU this (the program's) thread spent creating library primitives during the call.
          const double created_ms = jit::library::threadCreateMs() - created_before;
          const ExecStats& exec_after = instance.vm->stats();
          if (i == 0 && start_index == 0) first = cost.wall_ms;
          const jit::JitStats stats = instance.jit()->stats();
          const bool compiling = stats.requests > stats.compiles + stats.compile_failures + stats.validation_failures;
          if (compiling) {
            during.emplace_back(seq, cost);
            start_during.emplace_back(i, cost);
          }
          if (record_timeline && timeline.size() < 400) {
            timeline.push_back({{"thread", "interpreter"},
                                {"name", fmt::format("run seq={}", seq)},
                                {"start_ms", std::chrono::duration<double, std::milli>(start - t0).count()},
                                {"dur_ms", cost.wall_ms}});
          }
          std::optional<CallCost> o0_cost;
          // While compiling the JIT calls follow each other, unless paired: then the O0 call right
          // after each one is the same work in the same window (same compile beside it, same
          // neighbours on the host), and the JIT call's CPU over it is what the JIT itself added.
          if (!compiling || paired) {
            if (compiling && o0_first) {
              o0_cost = o0_first;
            } else {
              const CallMeter o0_meter;
              if (auto ran = o0.session->run(o0.function, args); !ran) return ran.status();
              o0_cost = o0_meter.stop();
            }
            if (!compiling) {
              o0_wall[seq].push_back(o0_cost->wall_ms);
              o0_cpu[seq].push_back(o0_cost->cpu_ms);
              start_o0.push_back({i, seq, o0_cost->cpu_ms});
            } else {
              o0_during.emplace_back(seq, *o0_cost);
              if (o0_cost->cpu_ms > 0) paired_ratio.push_back(cost.cpu_ms / o0_cost->cpu_ms);
            }
          }
          if (print_calls) {
            fmt::print(
                "  cold {} O{} start {} call {:3}: {} compiled op calls, {} guard misses, {} ic misses, {} system "
                "allocations, {} installs so far, {:.2f} ms creating library primitives\n",
                variant, level, start_index, i, exec_after.compiled_calls - exec_before.compiled_calls,
                exec_after.guard_misses - exec_before.guard_misses, exec_after.ic_misses - exec_before.ic_misses,
                exec_after.system_allocations - exec_before.system_allocations, stats.compiles, created_ms);
            std::vector<std::pair<std::string, CallCost>> printed = {{fmt::format("O{}", level), cost}};
            if (o0_cost) printed.emplace_back("O0", *o0_cost);
            for (const auto& [what, c] : printed) {
              fmt::print(
                  "  cold {} {} start {} call {:3} seq {}{}: wall {:6.2f} cpu {:6.2f} wait {:6.2f} others' cpu {:6.2f} "
                  "ms, {} minor faults, at {:.6f}-{:.6f} s\n",
                  variant, what, start_index, i, seq, compiling ? " (compiling)" : "", c.wall_ms, c.cpu_ms, c.wait_ms,
                  c.others_cpu_ms, c.minor_faults, c.start_s, c.end_s);
            }
          }
        }
        for (const auto& [i, cost] : start_during) {
          const std::optional<double> nearby = nearbyO0Cpu(start_o0, i, cycle[i % 3]);
          if (nearby && *nearby > 0) nearby_ratio.push_back(cost.cpu_ms / *nearby);
        }
        instance.jit()->waitIdle();
        for (int i = 0; i < 30; ++i) {
          auto args = workloadArgs(fn, weights, 32, cycle[i % 3], 11);
          const Clock::time_point start = Clock::now();
          if (auto ran = instance.session->run(instance.function, args); !ran) return ran.status();
          if (cycle[i % 3] == 20) steady.push_back(msSince(start));
        }
        if (start_index == 0) {
          // A shape never seen: interpreted (guard miss) at first.
          auto fresh = workloadArgs(fn, weights, 32, 77, 12);
          const Clock::time_point start = Clock::now();
          if (auto ran = instance.session->run(instance.function, fresh); !ran) return ran.status();
          after_new_shape = msSince(start);
        }
        if (record_timeline) {
          for (const jit::CompileEvent& e : instance.jit()->stats().events) {
            timeline.push_back({{"thread", "compile"},
                                {"name", e.signature},
                                {"start_ms", e.start_ms},
                                {"dur_ms", e.shape_infer_ms + e.codegen_ms + e.validate_patch_ms}});
          }
        }
      }
      std::map<std::int64_t, double> wall_median, cpu_median;
      for (const auto& [seq, ms] : o0_wall) wall_median[seq] = summarizeLatency(ms).median;
      for (const auto& [seq, ms] : o0_cpu) cpu_median[seq] = summarizeLatency(ms).median;
      std::vector<double> wall, wall_ratio, cpu_ratio, wait;
      for (const auto& [seq, cost] : during) {
        wall.push_back(cost.wall_ms);
        wall_ratio.push_back(cost.wall_ms / wall_median[seq]);
        cpu_ratio.push_back(cost.cpu_ms / cpu_median[seq]);
        wait.push_back(cost.wait_ms);
      }
      const LatencySummary d = summarizeLatency(wall), s = summarizeLatency(steady);
      const LatencySummary ratio = summarizeLatency(wall_ratio), cpu = summarizeLatency(cpu_ratio);
      const LatencySummary waited = summarizeLatency(wait);
      for (const auto& [seq, cost] : o0_during) o0_during_ratio_cpu.push_back(cost.cpu_ms / cpu_median[seq]);
      const LatencySummary o0_cpu_during = summarizeLatency(o0_during_ratio_cpu);
      const LatencySummary pair = summarizeLatency(paired_ratio);
      const LatencySummary nearby = summarizeLatency(nearby_ratio);
      const bool few = during.size() < kFewCalls;
      out.push_back({{"variant", variant},
                     {"level", fmt::format("O{}", level)},
                     {"fresh_starts", starts},
                     {"first_call_ms", first},
                     {"first_after_new_shape_ms", after_new_shape},
                     {"p50_during_compile_ms", d.median},
                     {"p99_during_compile_ms", d.p99},
                     {"runs_during_compile", during.size()},
                     {"few_runs_during_compile", few},
                     {"p50_during_compile_over_o0_median", ratio.median},
                     {"p99_during_compile_over_o0_median", ratio.p99},
                     {"cpu_during_compile_over_o0_cpu_median_p50", cpu.median},
                     {"cpu_during_compile_over_o0_cpu_median_p99", cpu.p99},
                     {"cpu_during_compile_over_o0_cpu_median_max", cpu.high},
                     {"cpu_during_compile_over_nearby_o0_cpu_p50", nearby.median},
                     {"cpu_during_compile_over_nearby_o0_cpu_p99", nearby.p99},
                     {"cpu_during_compile_over_nearby_o0_cpu_max", nearby.high},
                     {"wait_for_core_during_compile_p50_ms", waited.median},
                     {"wait_for_core_during_compile_max_ms", waited.high},
                     {"p50_o0_ms", wall_median[20]},
                     {"p50_steady_ms", s.median}});
      if (paired) {
        out.back()["paired_calls_during_compile"] = paired_ratio.size();
        out.back()["cpu_during_compile_over_paired_o0_cpu_p50"] = pair.median;
        out.back()["cpu_during_compile_over_paired_o0_cpu_p99"] = pair.p99;
        out.back()["o0_cpu_during_compile_over_o0_cpu_median_p50"] = o0_cpu_during.median;
        out.back()["o0_cpu_during_compile_over_o0_cpu_median_p99"] = o0_cpu_during.p99;
      }
      fmt::print(
          "cold {:<9} O{}: first call {:.2f} ms, first after a new shape {:.2f} ms, while compiling ({} runs, {} fresh "
          "start{}{}) p50 {:.2f} / p99 {:.2f} ms, over the O0 median of the same seq p50 {:.2f} / p99 {:.2f}; their "
          "CPU over O0's p50 {:.2f} / p99 {:.2f} / max {:.2f}, waiting for a core p50 {:.2f} / max {:.2f} ms; "
          "O0 p50 {:.2f} ms, steady p50 {:.2f} ms (seq 20)\n",
          variant, level, first, after_new_shape, during.size(), starts, starts == 1 ? "" : "s",
          few ? fmt::format("; under {}: p99 is the slowest call", kFewCalls) : "", d.median, d.p99, ratio.median,
          ratio.p99, cpu.median, cpu.p99, cpu.high, waited.median, waited.high, wall_median[20], s.median);
      fmt::print(
          "cold {:<9} O{}: their CPU over the nearby O0 calls' (same seq, same start) p50 {:.2f} / p99 {:.2f} / "
          "max {:.2f}\n",
          variant, level, nearby.median, nearby.p99, nearby.high);
      if (paired) {
        fmt::print(
            "cold {:<9} O{}: paired ({} calls while compiling, each followed by O0's): JIT CPU over that O0 call's p50 "
            "{:.2f} / p99 {:.2f}; O0's CPU while compiling over its median p50 {:.2f} / p99 {:.2f}\n",
            variant, level, paired_ratio.size(), pair.median, pair.p99, o0_cpu_during.median, o0_cpu_during.p99);
      }
    }
  }
  return Status::ok();
}

// ---- memory ----

Status memorySuite(const BenchFlags& flags, const Weights& weights, json& out) {
  for (const std::string variant : {"lstm_cell", "lstm_loop"}) {
    const std::int64_t before = heapBytes();
    // jit_wait: the O1 JIT attached below waits for its compiles.
    SVM_ASSIGN_OR_RETURN(Instance instance, makeInstance(flags, variant, 0, "", -1, /*jit_wait=*/true));
    const std::int64_t context = heapBytes() - before;
    // The JIT beside it: engine, kernels, LLVM's own code pages — reported separately.
    const Function& fn = instance.module->functions[static_cast<std::size_t>(instance.function)];
    const std::int64_t before_jit = residentBytes();
    const std::int64_t before_jit_heap = heapBytes();
    SVM_RETURN_IF_ERROR(instance.session->set("jit_level", 1));
    SVM_RETURN_IF_ERROR(instance.session->jitStatus());
    for (int i = 0; i < 8; ++i) {
      if (auto ran = instance.session->run(instance.function, workloadArgs(fn, weights, 32, 10, 3)); !ran)
        return ran.status();
    }
    const std::int64_t jit_bytes = residentBytes() - before_jit;
    const std::int64_t jit_heap = heapBytes() - before_jit_heap;
    out.push_back({{"module", variant},
                   {"context_bytes", context},
                   {"llvm_code_bytes", jit_bytes},
                   {"jit_heap_bytes", jit_heap},
                   {"kernels", instance.jit()->stats().compiles}});
    fmt::print(
        "memory {:<9}: VM context (module + runtime state, heap) {:.1f} KB; JIT with {} kernels (incl. LLVM): {:.1f} "
        "KB RSS, {:.1f} KB heap\n",
        variant, static_cast<double>(context) / 1024, instance.jit()->stats().compiles,
        static_cast<double>(jit_bytes) / 1024, static_cast<double>(jit_heap) / 1024);
  }
  return Status::ok();
}

}  // namespace shapevm::bench
