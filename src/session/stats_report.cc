// SPDX-License-Identifier: Apache-2.0
// statsJson: every figure of `--stats` under the keys docs/observability.md documents.
#include "session/stats_report.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <sys/resource.h>

#include <fmt/format.h>

#include "bytecode/module.h"
#include "support/json_text.h"
#include "vm/vm.h"
#if SHAPEVM_HAVE_JIT
#include "jit/jit.h"
#endif

namespace shapevm {

namespace {
std::string num(double value) {
  return std::isfinite(value) ? fmt::format("{:.6g}", value) : "null";
}

// One object member per call: "key": value.
struct Members {
  std::string text;
  Members& raw(std::string_view key, const std::string& value) {
    text += fmt::format("{}{}: {}", text.empty() ? "" : ", ", jsonString(key), value);
    return *this;
  }
  Members& add(std::string_view key, std::uint64_t value) { return raw(key, std::to_string(value)); }
  Members& add(std::string_view key, double value) { return raw(key, num(value)); }
  Members& add(std::string_view key, bool value) { return raw(key, value ? "true" : "false"); }
  Members& add(std::string_view key, std::string_view value) { return raw(key, jsonString(value)); }
  std::string object() const { return "{" + text + "}"; }
};

Members latencyMembers(const LatencySeries& series) {
  const LatencySummary s = series.summary();
  Members m;
  m.add("runs", series.runs).add("median_ms", s.median).add("p99_ms", s.p99).add("min_ms", s.low).add("max_ms", s.high);
  return m;
}
}  // namespace

LatencySummary summarizeLatency(std::vector<double> samples) {
  LatencySummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.median = samples[samples.size() / 2];
  s.p99 = samples[std::min(samples.size() - 1,
                           static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(samples.size()))) - 1)];
  s.low = samples.front();
  s.high = samples.back();
  return s;
}

void LatencySeries::add(double ms) {
  low = runs == 0 ? ms : std::min(low, ms);
  high = runs == 0 ? ms : std::max(high, ms);
  ++runs;
  if (sample.size() < kLatencySample) {
    sample.push_back(ms);
    return;
  }
  rng ^= rng << 13;  // xorshift64: run k replaces a random slot with probability kLatencySample / k
  rng ^= rng >> 7;
  rng ^= rng << 17;
  if (const std::uint64_t slot = rng % runs; slot < kLatencySample) sample[slot] = ms;
}

LatencySummary LatencySeries::summary() const {
  LatencySummary s = summarizeLatency(sample);
  s.low = low;
  s.high = high;
  return s;
}

namespace {
// Calls f(param_index, shape) for every tensor argument whose parameter has a dynamic dim: a fixed
// shape (weights) says nothing about the run's size.
template <typename F>
void forEachDynamicTensor(const Function& fn, std::span<const Value> args, F&& f) {
  for (std::size_t i = 0; i < args.size() && i < fn.params.size(); ++i) {
    if (!args[i].isTensor()) continue;
    const TensorDescriptor& token = fn.params[i].token;
    if (token.any_rank ||
        std::any_of(token.dims.begin(), token.dims.end(), [](const DimToken& d) { return !d.is_static; }))
      f(i, args[i].tensor().shape());
  }
}

// Their dims, each tensor ended by -1.
void shapeKey(const Function& fn, std::span<const Value> args, std::vector<std::int64_t>& key) {
  key.clear();
  forEachDynamicTensor(fn, args, [&](std::size_t, const Shape& shape) {
    for (int d = 0; d < shape.rank(); ++d) key.push_back(shape[d]);
    key.push_back(-1);
  });
}
}  // namespace

void LatencyBook::add(const Function& fn, std::span<const Value> args, double ms) {
  all_.add(ms);
  shapeKey(fn, args, key_);
  const bool same = last_ < entries_.size() && last_ != other_ && entries_[last_].key == key_;  // the usual case
  if (!same) {
    if (auto found = index_.find(key_); found != index_.end()) {
      last_ = found->second;
    } else if (entries_.size() < kLatencyShapes) {
      last_ = entries_.size();
      index_.emplace(key_, last_);
      entries_.push_back(Entry{shapeLabel(fn, args), key_, {}});
    } else {
      if (other_ == SIZE_MAX) {
        other_ = entries_.size();
        entries_.push_back(Entry{"(other shapes)", {}, {}});
      }
      last_ = other_;
    }
  }
  entries_[last_].series.add(ms);
}

std::string shapeLabel(const Function& fn, std::span<const Value> args) {
  std::string label;
  forEachDynamicTensor(fn, args, [&](std::size_t i, const Shape& shape) {
    std::string dims;
    for (int d = 0; d < shape.rank(); ++d) dims += (d ? "," : "") + std::to_string(shape[d]);
    label += fmt::format("{}{}=({})", label.empty() ? "" : " ", fn.params[i].name, dims);
  });
  return label;
}

std::string statsJson(const StatsSources& sources) {
  const SessionStats& st = *sources.session;
  Members m;
  m.add("runs", st.runs)
      .add("instructions", st.instructions)
      .add("launches_compiled", st.launches_compiled)
      .add("launches_interpreted", st.launches_interpreted)
      .add("guard_misses", st.guard_misses)
      .add("inline_cache_misses", sources.exec != nullptr ? sources.exec->ic_misses : 0);
  std::string by_shape;
  const LatencySeries none;
  if (sources.latency != nullptr) {
    for (const LatencyBook::Entry& entry : sources.latency->entries())
      by_shape += (by_shape.empty() ? "" : ", ") + latencyMembers(entry.series).add("shape", entry.label).object();
  }
  m.raw("latency", latencyMembers(sources.latency != nullptr ? sources.latency->all() : none).object())
      .raw("latency_by_shape", "[" + by_shape + "]");
  m.add("allocations_requested", st.allocations_requested).add("allocations_system", st.allocations_system);
  const AllocatorStats alloc = CachingAllocator::global().stats();
  m.raw("memory", Members()
                      .add("live_bytes", static_cast<std::uint64_t>(alloc.live_bytes))
                      .add("peak_bytes", static_cast<std::uint64_t>(alloc.peak_bytes))
                      .add("cached_bytes", static_cast<std::uint64_t>(alloc.cached_bytes))
                      .object());
  m.add("jit_level", static_cast<std::uint64_t>(st.jit_level))
      .add("kernels_installed", st.kernels_installed)
      .add("compile_failures", st.compile_failures)
      .add("compile_ms", st.compile_ms)
      .add("fused_regions", st.fused_regions)
      .add("tuning_ms", st.tuning_ms)
      .add("kernels_from_cache", st.kernels_from_cache)
      .add("codegen_count", st.codegen_count)
      .add("compiles_pending", st.compiles_pending)
      .add("tuning_in_progress", st.compiles_pending > 0);
#if SHAPEVM_HAVE_JIT
  if (sources.jit != nullptr) {
    const jit::JitStats& js = *sources.jit;
    std::vector<double> times = js.compile_ms;
    std::sort(times.begin(), times.end());
    std::vector<double> cpu = js.compile_cpu_ms;
    std::sort(cpu.begin(), cpu.end());
    // Every install: wall time queued and compiling, and the CPU its threads spent per phase.
    std::string installs;
    for (const jit::CompileEvent& e : js.events) {
      installs += (installs.empty() ? "" : ", ") + Members()
                                                       .add("signature", e.signature)
                                                       .add("region", e.region)
                                                       .add("kernels", static_cast<std::uint64_t>(e.kernels))
                                                       .add("start_ms", e.start_ms)
                                                       .add("queued_ms", e.queued_ms)
                                                       .add("wall_ms", e.total_ms)
                                                       .add("cpu_ms", e.cpu_ms)
                                                       .add("helper_cpu_ms", e.helper_cpu_ms)
                                                       .add("shape_inference_cpu_ms", e.shape_infer_cpu_ms)
                                                       .add("codegen_cpu_ms", e.codegen_cpu_ms)
                                                       .add("validation_patch_cpu_ms", e.validate_patch_cpu_ms)
                                                       .add("tuning_cpu_ms", e.tuning_cpu_ms)
                                                       .add("tuning_cache_hit", e.tuning_cache_hit)
                                                       .object();
    }
    m.raw("compile", Members()
                         .add("requests", js.requests)
                         .add("dropped_requests", js.dropped_requests)
                         .add("kernels_installed", js.compiles)
                         .add("compile_failures", js.compile_failures)
                         .add("validation_failures", js.validation_failures)
                         .add("blacklisted_sites", js.blacklisted_sites)
                         .add("first_sight_installs", js.first_sight_installs)
                         .add("total_ms", std::accumulate(times.begin(), times.end(), 0.0))
                         .add("shape_inference_ms", js.shape_infer_ms)
                         .add("codegen_ms", js.codegen_ms)
                         .add("validation_patch_ms", js.validate_patch_ms)
                         .add("tuning_ms", js.tuning_ms)
                         .add("median_ms", times.empty() ? 0.0 : times[times.size() / 2])
                         .add("max_ms", times.empty() ? 0.0 : times.back())
                         .add("cpu_ms", std::accumulate(cpu.begin(), cpu.end(), 0.0))
                         .add("shape_inference_cpu_ms", js.shape_infer_cpu_ms)
                         .add("codegen_cpu_ms", js.codegen_cpu_ms)
                         .add("validation_patch_cpu_ms", js.validate_patch_cpu_ms)
                         .add("tuning_cpu_ms", js.tuning_cpu_ms)
                         .add("median_cpu_ms", cpu.empty() ? 0.0 : cpu[cpu.size() / 2])
                         .add("max_cpu_ms", cpu.empty() ? 0.0 : cpu.back())
                         .raw("installs", "[" + installs + "]")
                         .object());
    m.raw("regions", Members()
                         .add("fused", js.fused_regions)
                         .add("fused_ops", js.fused_ops)
                         .add("runs", js.region_runs)
                         .add("declines", js.region_declines)
                         .add("row_blocked", js.region_row_blocked)
                         .add("opaque_fallbacks", js.region_opaque_fallbacks)
                         .object());
    m.raw("tuning", Members()
                        .add("ms", js.tuning_ms)
                        .add("tuned_kernels", js.tuned_kernels)
                        .add("cache_hits", js.tuning_cache_hits)
                        .add("deferred", js.tuning_deferred)
                        .add("in_progress", js.compiles_pending > 0)
                        .object());
    Members reasons;
    for (int r = 0; r < jit::kNumJitReasons; ++r) {
      reasons.add(jit::jitReasonName(static_cast<jit::JitReason>(r)), js.fallbacks[static_cast<std::size_t>(r)]);
    }
    m.raw("fallbacks", reasons.object());
  }
#endif
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto ms = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) * 1e-3;
  };
  m.add("process_cpu_ms", ms(usage.ru_utime) + ms(usage.ru_stime));  // every thread, so far
  m.add("jit_report", st.jit_report);
  return m.object() + "\n";
}

}  // namespace shapevm
