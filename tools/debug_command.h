// SPDX-License-Identifier: Apache-2.0
// `shapevm debug PROGRAM [run flags]`: the gdb-like front end of the debugger core (src/debug).
// `run` drives the program (RunHooks below): the debugger attaches before the first run and gets
// control before its first instruction, so breakpoints are set at the prompt before `run`. A run
// error stops in the failing frame (post-mortem: frame, print, bt), and `run` after the end or
// an error starts the program again with the same breakpoints. Commands
// come from stdin, with line editing and history (readline) when stdin is a terminal; every
// mistake (bad breakpoint, unknown command or register, dead variable) prints `error: ...` and the
// session goes on.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>

#include "shapevm/shapevm.h"

namespace shapevm {
namespace debug {
class Debugger;
}

// What `shapevm run` calls when a debugger front end drives it (debug, dap).
struct RunHooks {
  // After the program is loaded, before the first run (attaches the debugger).
  std::function<Status(Session& session, int function)> before_runs;
  // True when the user ended the run from the debugger: the failed run is no error.
  std::function<bool()> ended_by_user;
  // After the last run (the program's outputs are printed; `completed` false: the user ended it):
  // the prompt after the end / DAP exit. True runs the program again from the start (`run`).
  std::function<bool(bool completed)> after_runs;
  // After a run failed with `error` (the debugger stopped at it first, post-mortem): true runs the
  // program again from the start; false ends as `shapevm run` does, with the error.
  std::function<bool(const Status& error)> after_error;
};

struct DebugTarget {
  std::string program;   // .py, .svasm or .svm
  std::string function;  // --fn ("" = the default entry)
  bool no_opt = false;
  std::string opt_list;
};

// The hooks of a `shapevm debug` session reading commands from stdin.
std::shared_ptr<RunHooks> makeCliDebugger(const DebugTarget& target);

// The source text of a .py program and the lines that have code when it is compiled without
// optimizations (the debugger's "moved or removed by optimization" test); empty for modules.
struct DebugSource {
  std::string text;
  std::set<int> unoptimized_lines;
};
DebugSource loadDebugSource(const DebugTarget& target);

// A debugger for `session`'s loaded program (its source, the JIT's notes when a JIT is attached),
// attached to the session's VM as its DebugHook; `function` is the entry the runs start in.
std::unique_ptr<debug::Debugger> attachDebugger(Session& session, int function, const DebugTarget& target);

}  // namespace shapevm
