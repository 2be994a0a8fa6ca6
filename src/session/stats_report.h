// SPDX-License-Identifier: Apache-2.0
// The statistics report as JSON (Session::statsJson, `shapevm run --stats-json`, Python's stats()):
// one object whose keys docs/observability.md lists, built from the VM's counters, the JIT's
// stats and the per-shape latency the Session records. In-tree only (not installed); the keys are
// the contract, so a renamed key is a breaking change to docs and Python alike.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "shapevm/shapevm.h"

namespace shapevm {

struct ExecStats;
struct Function;
namespace jit {
struct JitStats;
}

// Median, p99, min and max of latency samples (ms); zeros when empty.
struct LatencySummary {
  double median = 0, p99 = 0, low = 0, high = 0;
};
LatencySummary summarizeLatency(std::vector<double> samples);

// The latencies of one series of runs in bounded memory: every run counted, min and max exact,
// median and p99 from a uniform sample of at most kLatencySample runs (reservoir sampling, seeded
// per series, so a report is reproducible). Exact while runs <= kLatencySample.
inline constexpr std::size_t kLatencySample = 1024;
struct LatencySeries {
  std::uint64_t runs = 0;
  double low = 0, high = 0;
  std::vector<double> sample;
  std::uint64_t rng = 0x9E3779B97F4A7C15ull;
  void add(double ms);
  LatencySummary summary() const;  // median and p99 of the sample; min and max of every run
};

// Run latencies by the shapes of the tensor arguments with a dynamic dim ("x=(32,10,128) h=(32,256)"),
// in first-seen order, plus all runs together. A run of the last shape seen costs no allocation and
// no formatting (the label is written once per new shape); past kLatencyShapes distinct shapes, new
// ones share one "(other shapes)" series, so a serving Session's stats never grow without bound.
inline constexpr std::size_t kLatencyShapes = 1024;
class LatencyBook {
 public:
  struct Entry {
    std::string label;
    std::vector<std::int64_t> key;  // shapeKey of its runs (empty for "(other shapes)")
    LatencySeries series;
  };
  void add(const Function& fn, std::span<const Value> args, double ms);
  const std::vector<Entry>& entries() const { return entries_; }
  const LatencySeries& all() const { return all_; }

 private:
  std::vector<Entry> entries_;
  std::map<std::vector<std::int64_t>, std::size_t> index_;  // shape key -> entries_ position
  std::vector<std::int64_t> key_;                           // scratch: this run's key
  std::size_t last_ = 0;                                    // the entry of the previous run
  std::size_t other_ = SIZE_MAX;                            // the "(other shapes)" entry, once made
  LatencySeries all_;
};
std::string shapeLabel(const Function& fn, std::span<const Value> args);

struct StatsSources {
  const SessionStats* session = nullptr;
  const ExecStats* exec = nullptr;
  const LatencyBook* latency = nullptr;
  const jit::JitStats* jit = nullptr;  // nullptr without a JIT
};
std::string statsJson(const StatsSources& sources);

}  // namespace shapevm
