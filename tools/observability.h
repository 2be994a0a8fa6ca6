// SPDX-License-Identifier: Apache-2.0
// `shapevm run`'s observability flags: --trace/--trace-ops (the timeline, support/trace.h),
// --profile/--profile-json (vm/profile.h's report) and --stats-json (session/stats_report.h).
// The trace file is opened before anything runs (a bad path fails the command at once) and
// written by finishObservability, which every successful run reaches before the process exits.
// --stats-json is written with --stats (a compile still running then is reported as pending).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "shapevm/shapevm.h"

namespace shapevm {

class VirtualMachine;

struct ObservabilityFlags {
  std::string trace, profile_json, stats_json;
  bool trace_ops = false;
  bool profile = false;
};

void addObservabilityFlags(CLI::App& command, ObservabilityFlags& flags);
// Before the Session is made: opens the trace file and starts tracing.
Status startObservability(const ObservabilityFlags& flags);
// Before the runs: per-site allocation counting for the profile.
void prepareProfile(const ObservabilityFlags& flags, VirtualMachine& vm);
// After the runs, where --stats prints (before the JIT is stopped): --stats-json.
Status writeStatsJson(const ObservabilityFlags& flags, const Session& session);
// After the runs: prints/writes the profile, then writes the trace.
Status finishObservability(const ObservabilityFlags& flags, VirtualMachine& vm, int function);

}  // namespace shapevm
