// SPDX-License-Identifier: Apache-2.0
// The debugger core behind `shapevm debug` and `shapevm dap`: breakpoints (source line, PC,
// function), stepping (instruction, line, into, out), and the views of a stopped frame (live
// registers with their source variable names and runtime shapes, print, backtrace, listing).
// It is the VM's DebugHook: the interpreter calls it before each instruction while it is attached,
// and it hands each stop to a front end (StopHandler), which decides how to resume. A compiled
// region whose PC range holds a breakpoint declines while the breakpoint is set (it runs
// interpreted), so stops and values are the interpreter's and results never change.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bytecode/module.h"
#include "vm/vm.h"

namespace shapevm::debug {

struct Breakpoint {
  int id = 0;
  std::string spec;  // as the user wrote it ("12", "cell.py:12", "PC=0x0003", "lstm_cell")
  int function = 0;  // of its first location
  int pc = 0;        // its first location's PC
  int line = 0;      // source line it stops at (0 = none known)
  // Every (function, PC) that stops: a line stops at the first PC of each run of its code (a
  // loop header may start at several places).
  std::vector<std::pair<int, int>> locations;
  std::string note;  // e.g. "line 14 has no code after optimization; stops at line 15 instead"
  std::uint64_t hits = 0;
};

// How the program goes on after a stop.
enum class Resume { Continue, StepInstruction, NextLine, StepIn, Finish, Quit };
enum class StopReason { Entry, Breakpoint, Step, Error };

struct Stop {
  StopReason reason = StopReason::Step;
  const DebugFrame* frame = nullptr;
  int breakpoint = 0;  // reason == Breakpoint: its id
  std::string error;   // reason == Error: the run's error (what, function, PC, line)
};

// One live register of a frame, as the frame view and the DAP variables pane show it.
struct VariableView {
  int reg = 0;
  std::string name;     // source variable ("" when unknown)
  std::string kind;     // tensor, int, float, bool, tuple
  std::string dtype;    // tensors
  std::string shape;    // tensors: "[2,10,128]"
  std::string strides;  // tensors: "[1280,128,1]"
  std::string preview;  // a short value: first elements / the scalar / the tuple
  const Value* value = nullptr;
};

class Debugger : public DebugHook {
 public:
  using StopHandler = std::function<Resume(const Stop&)>;
  using JitNotes = std::function<std::vector<std::string>(int function, int pc)>;

  // `source_text`: the text of module.source_file ("" when unknown). `unoptimized_lines`: the lines
  // that have code when the program is compiled without optimizations (a line with code there but
  // none here was moved or removed by optimization). `entry`: the function the run starts in.
  Debugger(std::shared_ptr<const Module> module, std::string source_text, std::set<int> unoptimized_lines, int entry);

  void setStopHandler(StopHandler handler) { handler_ = std::move(handler); }
  void setJitNotes(JitNotes notes) { jit_notes_ = std::move(notes); }

  // Breakpoints. `spec`: LINE, FILE:LINE, PC=0x.. (in `function`), or a function name. Returns
  // the breakpoint (its note says where it stops when optimization moved the line); errors name
  // what was wrong (a line without code lists the nearest lines that have some).
  Expected<Breakpoint> addBreakpoint(std::string_view spec, int function);
  Status deleteBreakpoint(int id);
  void clearBreakpoints() { breakpoints_.clear(); }
  const std::vector<Breakpoint>& breakpoints() const { return breakpoints_; }
  std::string breakpointTable() const;

  // Views of a stopped frame.
  std::string where(const DebugFrame& frame) const;      // "lstm_cell () at cell.py:14, PC 0x0005"
  std::string frameView(const DebugFrame& frame) const;  // PC, line and text, every live register
  std::vector<VariableView> liveVariables(const DebugFrame& frame) const;
  // A register (rN) or variable name: its value if live, else an error saying why not.
  Expected<const Value*> lookup(const DebugFrame& frame, std::string_view what) const;
  Expected<std::string> print(const DebugFrame& frame, std::string_view what) const;
  std::string backtrace(const DebugFrame& frame) const;
  std::string listing(int line, int context = 5) const;  // source lines around `line`, `>` marks it
  std::string jitInfo(const DebugFrame& frame) const;
  int lineOf(int function, int pc) const;
  std::string sourceLine(int line) const;  // "" when unknown
  const Module& module() const { return *module_; }
  int entry() const { return entry_; }

  bool quitRequested() const { return quit_; }
  // Before the program runs again from the start (the front end's `run` after an end or an
  // error, DAP's `restart`): stepping state is dropped, breakpoints stay; `stop_at_entry` stops
  // before the first instruction again (StopReason::Entry).
  void restart(bool stop_at_entry = false);

  // DebugHook.
  Status beforeInstruction(const DebugFrame& frame) override;
  bool allowRegion(int function, int pc, int resume_pc) override;
  // A post-mortem stop: the handler sees the failing frame; the run ends with its error whatever
  // it answers (Quit also ends the session).
  void onError(const DebugFrame& frame, const Status& error) override;

 private:
  Status stopAt(const Stop& stop);
  bool isLive(int function, int pc, int reg) const;
  std::string regionNote(const DebugFrame& frame) const;

  std::shared_ptr<const Module> module_;
  std::vector<std::string> source_lines_;
  std::set<int> unoptimized_lines_;
  int entry_ = 0;
  StopHandler handler_;
  JitNotes jit_notes_;
  std::vector<Breakpoint> breakpoints_;
  int next_id_ = 1;
  // live_in_[function][pc]: registers live before pc (read later on some path before a write).
  std::vector<std::vector<std::vector<bool>>> live_in_;
  // Stepping state.
  bool started_ = false;
  bool quit_ = false;
  Resume mode_ = Resume::Continue;
  int step_depth_ = 0;
  int step_line_ = 0;
  int step_function_ = 0;
  // Regions declined for a breakpoint (function, pc, resume_pc), for the frame view.
  std::set<std::tuple<int, int, int>> declined_;
};

// Ok when the interpreter's debug hooks are compiled in; else the error a front end reports (a
// build with SHAPEVM_TRACE_HOOKS=OFF would never stop).
Status hooksCompiledIn();

// A short preview of a value: "f32[2,3] [0.1, 0.2, 0.3, ...]", "int 5", "(2, 3)".
std::string previewValue(const Value& value, int elements = 6);
// print's statistics line for a tensor: shape, dtype, min/max/mean, the first elements.
std::string describeValue(const Value& value, int elements = 10);

}  // namespace shapevm::debug
