// SPDX-License-Identifier: Apache-2.0
// The statistics report as JSON (Session::statsJson, `shapevm run --stats-json`, Python's stats()):
// one object whose keys docs/observability.md lists, built from the VM's counters, the JIT's
// stats and the per-shape latency the Session records. In-tree only (not installed); the keys are
// the contract, so a renamed key is a breaking change to docs and Python alike.
#pragma once

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

// Run latencies by the shapes of the tensor arguments with a dynamic dim ("x=(32,10,128) h=(32,256)"),
// in first-seen order.
struct LatencyBook {
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> samples;
  void add(const std::string& label, double ms);
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
