// SPDX-License-Identifier: Apache-2.0
// `shapevm debug`: the command loop over the debugger core (see debug_command.h). Output goes to
// stdout in program order (stops, views, `error: ...` lines, the program's own output), so a
// session piped through stdin is a stable transcript; each command read from a pipe is echoed
// after the prompt.
#include "tools/debug_command.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>

#include "debug/debugger.h"
#include "frontend/frontend.h"
#include "ops/registry.h"
#include "session/session_access.h"
#include "tools/dump_command.h"
#include "vm/vm.h"
#if SHAPEVM_HAVE_JIT
#include "jit/jit.h"
#endif
#if SHAPEVM_HAVE_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#endif

namespace shapevm {

DebugSource loadDebugSource(const DebugTarget& target) {
  DebugSource source;
  const bool python = target.program.size() >= 3 && target.program.compare(target.program.size() - 3, 3, ".py") == 0;
  std::string path = target.program;
  if (!python) {
    auto module = loadProgram(target.program, FrontendOptions());
    path = module ? module->source_file : "";
  }
  if (path.empty()) return source;
  std::ifstream in(path, std::ios::binary);
  if (!in) return source;
  source.text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (python) {
    FrontendOptions options = FrontendOptions::none();
    options.entry = target.function;
    if (auto plain = compilePython(source.text, path, options)) {
      for (const Function& fn : plain->functions) {
        for (const SourceLoc& loc : fn.locs) {
          if (loc.line > 0) source.unoptimized_lines.insert(loc.line);
        }
      }
    }
  }
  return source;
}

std::unique_ptr<debug::Debugger> attachDebugger(Session& session, int function, const DebugTarget& target) {
  VirtualMachine* vm = SessionAccess::vm(session);
  DebugSource source = loadDebugSource(target);
  auto debugger = std::make_unique<debug::Debugger>(SessionAccess::module(session), std::move(source.text),
                                                    std::move(source.unoptimized_lines), function);
#if SHAPEVM_HAVE_JIT
  if (jit::Jit* jit = SessionAccess::jit(session)) {
    debugger->setJitNotes([jit, vm](int fn, int pc) { return jitSiteNotes(*jit, *vm, fn, pc, true); });
  }
#endif
  vm->options().debug = debugger.get();
  return debugger;
}

namespace {

std::string trimmed(const std::string& text) {
  const std::size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1);
}

// Reads one command: readline (editing, history) on a terminal, else a line of stdin, echoed.
class CommandReader {
 public:
  CommandReader() : terminal_(isatty(STDIN_FILENO) != 0) {}
  bool read(std::string* line) {
    std::fflush(stdout);
#if SHAPEVM_HAVE_READLINE
    if (terminal_) {
      char* text = readline("(svmdb) ");
      if (text == nullptr) return false;
      *line = text;
      std::free(text);
      if (!trimmed(*line).empty()) add_history(line->c_str());
      return true;
    }
#endif
    if (terminal_) std::fputs("(svmdb) ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, *line)) return false;
    if (!terminal_) std::printf("(svmdb) %s\n", line->c_str());
    return true;
  }

 private:
  bool terminal_;
};

class CliDebugger {
 public:
  explicit CliDebugger(DebugTarget target) : target_(std::move(target)) {}

  Status attach(Session& session, int function) {
    SVM_RETURN_IF_ERROR(debug::hooksCompiledIn());
    debugger_ = attachDebugger(session, function, target_);
    debugger_->setStopHandler([this](const debug::Stop& stop) { return onStop(stop); });
    return Status::ok();
  }

  // A quit at the post-mortem prompt is not "ended by the user": the run's error is reported.
  bool endedByUser() const { return debugger_ && debugger_->quitRequested() && !quit_at_error_; }

  bool afterRuns(bool completed) {
    if (!completed) return false;
    std::printf("[program exited normally]\n");
    return promptAfterTheEnd();
  }

  bool afterError(const Status& error) {
    if (quit_) return false;
    // Stopped at the error already: `run` there asked for a restart. Else (the error came from
    // outside the interpreter, e.g. building the arguments) say so and offer the same prompt.
    if (!rerun_) {
      std::printf("[program failed: %s]\n", error.toString().c_str());
      return promptAfterTheEnd();
    }
    return restart();
  }

 private:
  void error(const std::string& message) { std::printf("error: %s\n", message.c_str()); }

  // Reads commands after the end until `run` (true: restart) or `quit` / end of input (false).
  bool promptAfterTheEnd() {
    running_ = false;
    finished_ = true;
    while (!quit_ && !rerun_) {
      std::string line;
      if (!reader_.read(&line)) return false;
      (void)command(line, nullptr);
    }
    return rerun_ && restart();
  }

  bool restart() {
    rerun_ = false;
    running_ = true;
    finished_ = false;
    debugger_->restart();
    std::printf("[restarting the program]\n");
    return true;
  }

  void announce(const debug::Stop& stop) {
    const DebugFrame& frame = *stop.frame;
    const Function& fn = debugger_->module().functions[static_cast<std::size_t>(frame.function)];
    const Instruction& inst = fn.code[static_cast<std::size_t>(frame.pc)];
    std::string what{opcodeName(inst.op)};
    if (inst.op == Opcode::CallOp)
      what += " " + std::string(OpRegistry::global().schema(fn.op_sites[static_cast<std::size_t>(inst.a)].op).name);
    if (inst.op == Opcode::Call)
      what += " " + debugger_->module()
                        .functions[static_cast<std::size_t>(fn.call_sites[static_cast<std::size_t>(inst.a)].callee)]
                        .name;
    if (stop.reason == debug::StopReason::Breakpoint) std::printf("Breakpoint %d, ", stop.breakpoint);
    if (stop.reason == debug::StopReason::Error) std::printf("Program stopped with an error: %s\n", stop.error.c_str());
    std::printf("%s (%s)\n", debugger_->where(frame).c_str(), what.c_str());
    const int line = debugger_->lineOf(frame.function, frame.pc);
    const std::string text = debugger_->sourceLine(line);
    if (!text.empty()) std::printf("%d\t%s\n", line, text.c_str());
  }

  debug::Resume onStop(const debug::Stop& stop) {
    if (stop.reason != debug::StopReason::Entry) announce(stop);
    at_error_ = stop.reason == debug::StopReason::Error;
    if (at_error_) running_ = true;  // a live frame, even when the error came before `run`
    while (true) {
      std::string line;
      if (!reader_.read(&line)) {
        quit_ = true;
        quit_at_error_ = at_error_;
        return debug::Resume::Quit;
      }
      if (auto resume = command(line, stop.frame)) {
        at_error_ = false;
        return *resume;
      }
    }
  }

  // Runs one command; a value = resume the program that way.
  std::optional<debug::Resume> command(const std::string& raw, const DebugFrame* frame) {
    std::string line = trimmed(raw);
    if (line.empty()) line = last_;
    if (line.empty()) return std::nullopt;
    last_ = line;
    std::istringstream words(line);
    std::string verb, rest;
    words >> verb;
    std::getline(words, rest);
    rest = trimmed(rest);
    const bool stopped = running_ && frame != nullptr;
    auto needFrame = [&]() {
      if (stopped) return true;
      error(finished_ ? "the program is not running any more (`run` starts it again)"
                      : "the program is not running yet (use `run`)");
      return false;
    };
    if (verb == "quit" || verb == "q") {
      quit_ = true;
      quit_at_error_ = at_error_;
      return debug::Resume::Quit;
    }
    if (verb == "break" || verb == "b") {
      auto bp = debugger_->addBreakpoint(rest, frame != nullptr ? frame->function : debugger_->entry());
      if (!bp) {
        error(bp.status().message());
      } else {
        std::printf("Breakpoint %d at %s PC 0x%04X%s\n", bp->id,
                    debugger_->module().functions[static_cast<std::size_t>(bp->function)].name.c_str(), bp->pc,
                    bp->line > 0 ? (": line " + std::to_string(bp->line)).c_str() : "");
        if (!bp->note.empty()) std::printf("note: %s\n", bp->note.c_str());
      }
      return std::nullopt;
    }
    if (verb == "delete" || verb == "d") {
      int id = 0;
      try {
        id = std::stoi(rest);
      } catch (const std::exception&) {
        error("delete: expected a breakpoint number (see `info breakpoints`)");
        return std::nullopt;
      }
      Status s = debugger_->deleteBreakpoint(id);
      if (!s.isOk()) error(s.message());
      else std::printf("Deleted breakpoint %d\n", id);
      return std::nullopt;
    }
    if (verb == "info" || verb == "i") {
      if (rest == "breakpoints" || rest == "break" || rest == "b") {
        std::printf("%s", debugger_->breakpointTable().c_str());
      } else if (rest == "registers" || rest == "reg" || rest == "r" || rest == "frame") {
        if (needFrame()) std::printf("%s", debugger_->frameView(*frame).c_str());
      } else if (rest == "jit") {
        if (needFrame()) std::printf("%s", debugger_->jitInfo(*frame).c_str());
      } else {
        error("info: expected `info breakpoints`, `info registers` or `info jit`, got `info " + rest + "`");
      }
      return std::nullopt;
    }
    if (verb == "run" || verb == "r") {
      if (finished_ || at_error_) {  // again from the start, with the same breakpoints
        rerun_ = true;
        return debug::Resume::Continue;
      }
      if (running_) {
        error("the program is already running (use `continue`)");
        return std::nullopt;
      }
      running_ = true;
      return debug::Resume::Continue;
    }
    struct Step {
      const char* long_name;
      const char* short_name;
      debug::Resume resume;
    };
    static const Step kSteps[] = {
        {"continue", "c", debug::Resume::Continue},      {"step", "s", debug::Resume::StepInstruction},
        {"stepi", "si", debug::Resume::StepInstruction}, {"next", "n", debug::Resume::NextLine},
        {"stepin", "sl", debug::Resume::StepIn},         {"finish", "fin", debug::Resume::Finish}};
    for (const Step& step : kSteps) {
      if (verb != step.long_name && verb != step.short_name) continue;
      if (!needFrame()) return std::nullopt;
      if (at_error_) {
        error("the program stopped with an error and cannot go on (`run` starts it again, `quit` ends)");
        return std::nullopt;
      }
      if (step.resume == debug::Resume::Finish && frame->caller == nullptr) {
        std::printf("note: `finish` in the outermost frame runs to the end of this run\n");
      }
      return step.resume;
    }
    if (verb == "frame" || verb == "f") {
      if (needFrame()) std::printf("%s", debugger_->frameView(*frame).c_str());
      return std::nullopt;
    }
    if (verb == "print" || verb == "p") {
      if (!needFrame()) return std::nullopt;
      if (rest.empty()) {
        error("print: expected a variable name or a register (rN)");
        return std::nullopt;
      }
      auto text = debugger_->print(*frame, rest);
      if (!text) error(text.status().message());
      else std::printf("%s", text->c_str());
      return std::nullopt;
    }
    if (verb == "bt" || verb == "backtrace" || verb == "where") {
      if (needFrame()) std::printf("%s", debugger_->backtrace(*frame).c_str());
      return std::nullopt;
    }
    if (verb == "list" || verb == "l") {
      int around = stopped ? debugger_->lineOf(frame->function, frame->pc) : debugger_->lineOf(debugger_->entry(), 0);
      if (!rest.empty()) {
        try {
          around = std::stoi(rest);
        } catch (const std::exception&) {
          error("list: expected a line number, got `" + rest + "`");
          return std::nullopt;
        }
      }
      std::printf("%s", debugger_->listing(around).c_str());
      return std::nullopt;
    }
    if (verb == "help" || verb == "h") {
      std::printf(
          "break LINE | FILE:LINE | PC=0x.. | FUNCTION, delete N, info breakpoints,\n"
          "run (again after the end or an error), continue (c), step (s: one instruction),\n"
          "next (n: one source line), stepin (into calls), finish, frame / info registers,\n"
          "print NAME|rN, bt, list [LINE], info jit, quit\n");
      return std::nullopt;
    }
    error("unknown command `" + verb + "` (try `help`)");
    return std::nullopt;
  }

  DebugTarget target_;
  std::unique_ptr<debug::Debugger> debugger_;
  CommandReader reader_;
  std::string last_;  // an empty line repeats the last command (as in gdb)
  bool running_ = false;
  bool finished_ = false;
  bool quit_ = false;
  bool at_error_ = false;       // stopped post-mortem, in the frame that failed
  bool quit_at_error_ = false;  // `quit` (or end of input) there: the run's error is still reported
  bool rerun_ = false;          // `run` after the end or at an error: start again
};

}  // namespace

std::shared_ptr<RunHooks> makeCliDebugger(const DebugTarget& target) {
  auto debugger = std::make_shared<CliDebugger>(target);
  auto hooks = std::make_shared<RunHooks>();
  hooks->before_runs = [debugger](Session& session, int function) { return debugger->attach(session, function); };
  hooks->ended_by_user = [debugger]() { return debugger->endedByUser(); };
  hooks->after_runs = [debugger](bool completed) { return debugger->afterRuns(completed); };
  hooks->after_error = [debugger](const Status& error) { return debugger->afterError(error); };
  return hooks;
}

}  // namespace shapevm
