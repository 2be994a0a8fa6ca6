// SPDX-License-Identifier: Apache-2.0
// The run command's --trace, --trace-ops, --profile, --profile-json and --stats-json.
#include "tools/observability.h"

#include <cstdio>

#include <fmt/format.h>

#include "support/trace.h"
#include "vm/vm.h"

namespace shapevm {

void addObservabilityFlags(CLI::App& command, ObservabilityFlags& flags) {
  command.add_option("--trace", flags.trace,
                     "write a timeline of the interpreter and compile threads to this file (Chrome Trace Event "
                     "Format JSON: open it in ui.perfetto.dev or chrome://tracing)");
  command.add_flag("--trace-ops", flags.trace_ops,
                   "with --trace: one event per op and region execution (default: aggregated per run)");
  command.add_flag("--profile", flags.profile,
                   "print one table per function: a row per op site and per compiled region (calls, time, share, "
                   "compiled vs interpreted launches, guard misses, allocations)");
  command.add_option("--profile-json", flags.profile_json, "write the --profile tables to this file as JSON");
  command.add_option("--stats-json", flags.stats_json,
                     "write every --stats figure to this file as JSON (keys: docs/observability.md)");
}

Status startObservability(const ObservabilityFlags& flags) {
  if (flags.trace_ops && flags.trace.empty()) {
    return makeError(ErrorCode::InvalidArgument, "--trace-ops needs --trace FILE");
  }
  if (flags.trace.empty()) return Status::ok();
  return Session::startTrace(flags.trace, flags.trace_ops).withContext("--trace");
}

void prepareProfile(const ObservabilityFlags& flags, VirtualMachine& vm) {
  if (flags.profile || !flags.profile_json.empty()) vm.options().count_allocations = true;
}

Status writeStatsJson(const ObservabilityFlags& flags, const Session& session) {
  if (flags.stats_json.empty()) return Status::ok();
  return session.writeStatsJson(flags.stats_json).withContext("--stats-json");
}

Status finishObservability(const ObservabilityFlags& flags, VirtualMachine& vm, int function) {
  if (flags.profile || !flags.profile_json.empty()) {
    const std::vector<FunctionProfile> profile = buildProfile(vm, function);
    if (flags.profile) fmt::print("{}", profileText(profile));
    if (!flags.profile_json.empty()) {
      std::FILE* file = std::fopen(flags.profile_json.c_str(), "w");
      if (file == nullptr)
        return makeError(ErrorCode::IoError, "--profile-json: cannot open '{}' for writing", flags.profile_json);
      const std::string text = profileJson(profile);
      const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
      if (std::fclose(file) != 0 || !written) {
        return makeError(ErrorCode::IoError, "--profile-json: failed writing '{}'", flags.profile_json);
      }
    }
  }
  if (!flags.trace.empty()) SVM_RETURN_IF_ERROR(Session::stopTrace().withContext("--trace"));
  return Status::ok();
}

}  // namespace shapevm
