// SPDX-License-Identifier: Apache-2.0
// The Debug Adapter Protocol server (see dap_command.h). Variable references: a frame's scope is
// kScopeBase + frame index; a tensor's elements are kValueBase + its index in values_, a table
// rebuilt at every stop (references are valid only while stopped, as the protocol says).
#include "tools/dap_command.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "debug/debugger.h"
#include "frontend/frontend.h"
#include "vm/vm.h"

namespace shapevm {
namespace {

using json = nlohmann::json;
constexpr int kScopeBase = 1000;
constexpr int kValueBase = 100000;
constexpr std::int64_t kMaxChildren = 256;

class DapServer {
 public:
  explicit DapServer(int out_fd) : out_fd_(out_fd) {}

  int serve(const DapRunner& runner) {
    while (!disconnected_) {
      std::optional<json> message = readMessage();
      if (!message) break;
      if (message->is_null()) continue;  // malformed: already answered
      const Flow flow = handle(*message, nullptr);
      if (flow == Flow::Launch) launch(runner, *message);
    }
    return 0;
  }

 private:
  enum class Flow { Stay, Resume, Launch };

  // ---- transport ----
  // The next message; nullopt at end of input; a null json when it was malformed (answered).
  std::optional<json> readMessage() {
    std::size_t length = 0;
    bool have_length = false;
    std::string line;
    while (true) {
      if (!std::getline(std::cin, line)) return std::nullopt;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) {
        if (have_length) break;
        continue;
      }
      const std::string key = "Content-Length:";
      if (line.compare(0, key.size(), key) == 0) {
        try {
          length = static_cast<std::size_t>(std::stoull(line.substr(key.size())));
          have_length = true;
        } catch (const std::exception&) {
          failRaw(fmt::format("malformed DAP header '{}': expected Content-Length: N", line));
          return json();
        }
      } else if (line.find(':') == std::string::npos) {
        failRaw(fmt::format("malformed DAP header '{}': expected Content-Length: N", line.substr(0, 80)));
        return json();
      }
    }
    std::string body(length, '\0');
    std::cin.read(body.data(), static_cast<std::streamsize>(length));
    if (static_cast<std::size_t>(std::cin.gcount()) != length) return std::nullopt;
    json message = json::parse(body, nullptr, false);
    if (message.is_discarded() || !message.is_object()) {
      failRaw(fmt::format("malformed DAP message (not a JSON object): {}", body.substr(0, 80)));
      return json();
    }
    if (!message.contains("command") || !message["command"].is_string() || message.value("type", "") != "request") {
      fail(message, "malformed DAP message: expected a request with a \"command\"");
      return json();
    }
    return message;
  }

  void send(json message) {
    message["seq"] = seq_++;
    const std::string body = message.dump();
    const std::string framed = fmt::format("Content-Length: {}\r\n\r\n{}", body.size(), body);
    std::size_t written = 0;
    while (written < framed.size()) {
      const ssize_t n = ::write(out_fd_, framed.data() + written, framed.size() - written);
      if (n <= 0) return;
      written += static_cast<std::size_t>(n);
    }
  }
  void respond(const json& request, json body = json::object()) {
    send(json{{"type", "response"},
              {"request_seq", request.value("seq", 0)},
              {"success", true},
              {"command", request.value("command", "")},
              {"body", std::move(body)}});
  }
  void fail(const json& request, const std::string& message) {
    send(json{{"type", "response"},
              {"request_seq", request.value("seq", 0)},
              {"success", false},
              {"command", request.value("command", "")},
              {"message", message},
              {"body", {{"error", {{"id", 1}, {"format", message}}}}}});
  }
  void failRaw(const std::string& message) { fail(json::object(), message); }
  void event(const std::string& name, json body = json::object()) {
    send(json{{"type", "event"}, {"event", name}, {"body", std::move(body)}});
  }

  // ---- the program ----
  void launch(const DapRunner& runner, const json& request) {
    const json args = request.value("arguments", json::object());
    const std::string program = args.value("program", "");
    std::vector<std::string> argv{program};
    if (args.contains("function") && args["function"].is_string()) {
      argv.push_back("--fn");
      argv.push_back(args["function"].get<std::string>());
    }
    if (args.contains("args") && args["args"].is_array()) {
      for (const json& item : args["args"]) {
        if (!item.is_string()) {
          fail(request, "launch: \"args\" must be a list of strings (shapevm run flags)");
          return;
        }
        argv.push_back(item.get<std::string>());
      }
    }
    stop_on_entry_ = args.value("stopOnEntry", false);
    target_ = DebugTarget{program, args.value("function", ""), false, ""};
    for (std::size_t i = 1; i < argv.size(); ++i) {
      if (argv[i] == "--no-opt") target_.no_opt = true;
    }
    auto hooks = std::make_shared<RunHooks>();
    bool attached = false;
    hooks->before_runs = [&](Session& session, int function) {
      SVM_RETURN_IF_ERROR(debug::hooksCompiledIn());
      debugger_ = attachDebugger(session, function, target_);
      debugger_->setStopHandler([this](const debug::Stop& stop) { return onStop(stop); });
      attached = true;
      respond(request);
      event("initialized");
      applyBreakpoints();
      return Status::ok();
    };
    // A `restart` request ends the run through the debugger's quit: that is no user's end.
    hooks->ended_by_user = [this]() { return debugger_ && debugger_->quitRequested() && !restart_requested_; };
    hooks->after_runs = [this](bool completed) { return afterTheEnd(completed ? 0 : 1, ""); };
    hooks->after_error = [this](const Status& error) {
      if (restart_requested_) return restart();
      return afterTheEnd(1, error.toString());
    };
    auto code = runner(argv, hooks);
    if (!code) {
      fail(request, "launch: " + code.status().message());
    } else if (!attached) {
      fail(request, fmt::format("launch: `shapevm run {}` failed before the program started (exit code {}; its "
                                "message is on the adapter's stderr)",
                                program, *code));
    } else if (*code != 0 && !end_announced_) {
      event("output", {{"category", "stderr"}, {"output", fmt::format("the program failed (exit code {})\n", *code)}});
      event("exited", {{"exitCode", *code}});
      event("terminated");
    }
    debugger_.reset();
  }

  // The program ended (`error`: why it failed): exited and terminated, then requests until the
  // client sends `restart` (true: the program runs again from the start, breakpoints kept) or
  // disconnects.
  bool afterTheEnd(int exit_code, const std::string& error) {
    if (!error.empty()) event("output", {{"category", "stderr"}, {"output", error + "\n"}});
    event("exited", {{"exitCode", exit_code}});
    event("terminated");
    end_announced_ = true;
    while (!disconnected_) {
      std::optional<json> message = readMessage();
      if (!message) return false;
      if (message->is_null()) continue;
      if ((*message)["command"] == "restart") {
        respond(*message);
        return restart();
      }
      (void)handle(*message, nullptr);
    }
    return false;
  }

  bool restart() {
    restart_requested_ = false;
    end_announced_ = false;
    debugger_->restart(stop_on_entry_);
    return true;
  }

  debug::Resume onStop(const debug::Stop& stop) {
    values_.clear();
    if (stop.reason == debug::StopReason::Entry) {
      if (configured_ && !stop_on_entry_) return debug::Resume::Continue;
    }
    if (stop.reason != debug::StopReason::Entry || configured_) announce(stop);
    while (true) {
      std::optional<json> message = readMessage();
      if (!message) return debug::Resume::Quit;
      if (message->is_null()) continue;
      debug::Resume resume = debug::Resume::Continue;
      const Flow flow = handle(*message, &stop, &resume);
      if (disconnected_) return debug::Resume::Quit;
      if (flow == Flow::Resume) return resume;
    }
  }

  void announce(const debug::Stop& stop) {
    json body{{"threadId", 1}, {"allThreadsStopped", true}};
    switch (stop.reason) {
      case debug::StopReason::Entry: body["reason"] = "entry"; break;
      case debug::StopReason::Breakpoint:
        body["reason"] = "breakpoint";
        body["hitBreakpointIds"] = json::array({stop.breakpoint});
        break;
      case debug::StopReason::Step: body["reason"] = "step"; break;
      case debug::StopReason::Error:  // post-mortem: the frame stays inspectable until the client resumes
        body["reason"] = "exception";
        body["description"] = "Paused on the run's error";
        body["text"] = stop.error;
        break;
    }
    event("stopped", body);
  }

  // ---- breakpoints ----
  json applyBreakpoints() {
    json out = json::array();
    if (!debugger_) return out;
    debugger_->clearBreakpoints();
    for (const auto& [path, lines] : breakpoint_lines_) {
      const std::string mine = debugger_->module().source_file;
      const bool ours =
          !mine.empty() && std::filesystem::path(path).filename() == std::filesystem::path(mine).filename();
      for (int line : lines) {
        json item{{"verified", false}, {"line", line}};
        if (!ours) {
          item["message"] = fmt::format("'{}' is not this program's source ({})", path, mine.empty() ? "none" : mine);
        } else if (auto bp = debugger_->addBreakpoint(std::to_string(line), debugger_->entry())) {
          item = json{{"id", bp->id}, {"verified", true}, {"line", bp->line}};
          if (!bp->note.empty()) item["message"] = bp->note;
        } else {
          item["message"] = bp.status().message();
        }
        out.push_back(item);
      }
    }
    return out;
  }

  // ---- frames and variables ----
  const DebugFrame* frameAt(const debug::Stop* stop, int id) const {
    const DebugFrame* frame = stop ? stop->frame : nullptr;
    for (int k = 0; frame != nullptr && k < id; ++k) frame = frame->caller;
    return frame;
  }

  int valueRef(const Value& value) {
    if (!value.isTensor() || value.tensor().numel() == 0) return 0;
    values_.push_back(&value);
    return kValueBase + static_cast<int>(values_.size()) - 1;
  }

  json variable(const std::string& name, const Value& value) {
    std::string text = debug::previewValue(value, 4);
    std::string type(valueKindName(value.kind()));
    if (value.isTensor()) {
      const Tensor& t = value.tensor();
      type = std::string(dtypeShortName(t.dtype())) + t.shape().toString();
      text = type + " " + text;
    }
    return json{{"name", name}, {"value", text}, {"type", type}, {"variablesReference", valueRef(value)}};
  }

  json elements(const Value& value) {
    json out = json::array();
    const Tensor& t = value.tensor();
    const std::int64_t shown = std::min<std::int64_t>(t.numel(), kMaxChildren);
    for (std::int64_t i = 0; i < shown; ++i) {
      std::string index;
      std::int64_t rest = i;
      std::vector<std::int64_t> coords(static_cast<std::size_t>(t.rank()));
      for (int d = t.rank() - 1; d >= 0; --d) {
        coords[static_cast<std::size_t>(d)] = rest % t.dim(d);
        rest /= t.dim(d);
      }
      for (std::int64_t c : coords) index += (index.empty() ? "" : ",") + std::to_string(c);
      out.push_back(json{{"name", "[" + index + "]"},
                         {"value", fmt::format("{:.6g}", t.elementAsDouble(i))},
                         {"variablesReference", 0}});
    }
    if (t.numel() > shown) {
      out.push_back(json{
          {"name", "..."}, {"value", fmt::format("{} more elements", t.numel() - shown)}, {"variablesReference", 0}});
    }
    return out;
  }

  // ---- requests ----
  Flow handle(const json& request, const debug::Stop* stop, debug::Resume* resume = nullptr) {
    const std::string command = request["command"].get<std::string>();
    const json args = request.value("arguments", json::object());
    auto resumeWith = [&](debug::Resume how) {
      if (stop == nullptr) {
        fail(request, command + ": the program is not stopped");
        return Flow::Stay;
      }
      respond(request, command == "continue" ? json{{"allThreadsContinued", true}} : json::object());
      *resume = how;
      return Flow::Resume;
    };
    if (command == "initialize") {
      respond(request, {{"supportsConfigurationDoneRequest", true},
                        {"supportsEvaluateForHovers", true},
                        {"supportsStepInTargetsRequest", false},
                        {"supportsRestartRequest", true},
                        {"supportsTerminateRequest", false}});
      return Flow::Stay;
    }
    if (command == "launch") {
      if (launched_) {
        fail(request, "launch: a program was already launched in this session");
        return Flow::Stay;
      }
      if (!args.contains("program") || !args["program"].is_string()) {
        fail(request, "launch: \"program\" (a .py, .svasm or .svm path) is required");
        return Flow::Stay;
      }
      launched_ = true;
      return Flow::Launch;
    }
    if (command == "setBreakpoints") {
      const std::string path = args.value("source", json::object()).value("path", "");
      std::vector<int> lines;
      for (const json& bp : args.value("breakpoints", json::array())) lines.push_back(bp.value("line", 0));
      if (path.empty()) {
        fail(request, "setBreakpoints: \"source.path\" is required");
        return Flow::Stay;
      }
      breakpoint_lines_[path] = lines;
      json result = applyBreakpoints();
      if (!debugger_) {  // not launched yet: verified once the program is loaded
        for (int line : lines)
          result.push_back(json{{"verified", false}, {"line", line}, {"message", "pending until launch"}});
      }
      respond(request, {{"breakpoints", result}});
      return Flow::Stay;
    }
    if (command == "setExceptionBreakpoints") {  // VS Code always sends it; every run error stops (no filters)
      respond(request, {{"breakpoints", json::array()}});
      return Flow::Stay;
    }
    if (command == "configurationDone") {
      configured_ = true;
      respond(request);
      if (stop != nullptr && stop->reason == debug::StopReason::Entry) {
        if (stop_on_entry_) {
          announce(*stop);
          return Flow::Stay;
        }
        *resume = debug::Resume::Continue;
        return Flow::Resume;
      }
      return Flow::Stay;
    }
    if (command == "threads") {
      respond(request, {{"threads", json::array({json{{"id", 1}, {"name", "interpreter"}}})}});
      return Flow::Stay;
    }
    if (command == "stackTrace") {
      if (stop == nullptr || !debugger_) {
        fail(request, "stackTrace: the program is not stopped");
        return Flow::Stay;
      }
      json frames = json::array();
      int id = 0;
      const std::string file = debugger_->module().source_file;
      for (const DebugFrame* f = stop->frame; f != nullptr; f = f->caller, ++id) {
        json frame{{"id", id},
                   {"name", debugger_->module().functions[static_cast<std::size_t>(f->function)].name},
                   {"line", debugger_->lineOf(f->function, f->pc)},
                   {"column", 1},
                   {"instructionPointerReference", fmt::format("0x{:04X}", f->pc)}};
        if (!file.empty()) {
          frame["source"] = json{{"name", std::filesystem::path(file).filename().string()},
                                 {"path", std::filesystem::absolute(file).string()}};
        }
        frames.push_back(frame);
      }
      respond(request, {{"stackFrames", frames}, {"totalFrames", id}});
      return Flow::Stay;
    }
    if (command == "scopes") {
      const int frame_id = args.value("frameId", 0);
      if (frameAt(stop, frame_id) == nullptr) {
        fail(request, fmt::format("scopes: no frame {} (the program is not stopped there)", frame_id));
        return Flow::Stay;
      }
      respond(request, {{"scopes", json::array({json{{"name", "Live registers"},
                                                     {"presentationHint", "locals"},
                                                     {"variablesReference", kScopeBase + frame_id},
                                                     {"expensive", false}}})}});
      return Flow::Stay;
    }
    if (command == "variables") {
      const int ref = args.value("variablesReference", 0);
      json vars = json::array();
      if (ref >= kValueBase && static_cast<std::size_t>(ref - kValueBase) < values_.size()) {
        vars = elements(*values_[static_cast<std::size_t>(ref - kValueBase)]);
      } else if (const DebugFrame* frame =
                     ref >= kScopeBase && ref < kValueBase ? frameAt(stop, ref - kScopeBase) : nullptr) {
        for (const debug::VariableView& v : debugger_->liveVariables(*frame)) {
          vars.push_back(variable(v.name.empty() ? "r" + std::to_string(v.reg) : v.name, *v.value));
          vars.back()["evaluateName"] = v.name.empty() ? "r" + std::to_string(v.reg) : v.name;
        }
      } else {
        fail(request,
             fmt::format("variables: unknown variablesReference {} (references last only while stopped)", ref));
        return Flow::Stay;
      }
      respond(request, {{"variables", vars}});
      return Flow::Stay;
    }
    if (command == "evaluate") {
      const DebugFrame* frame = frameAt(stop, args.value("frameId", 0));
      if (frame == nullptr || !debugger_) {
        fail(request, "evaluate: the program is not stopped");
        return Flow::Stay;
      }
      auto value = debugger_->lookup(*frame, args.value("expression", ""));
      if (!value) {
        fail(request, value.status().message());
        return Flow::Stay;
      }
      json shown = variable(args.value("expression", ""), **value);
      respond(
          request,
          {{"result", shown["value"]}, {"type", shown["type"]}, {"variablesReference", shown["variablesReference"]}});
      return Flow::Stay;
    }
    if (command == "continue") return resumeWith(debug::Resume::Continue);
    if (command == "next") return resumeWith(debug::Resume::NextLine);
    if (command == "stepIn") return resumeWith(debug::Resume::StepIn);
    if (command == "stepOut") return resumeWith(debug::Resume::Finish);
    if (command == "restart") {  // while stopped (after the end, afterTheEnd takes it); new arguments are not read
      if (stop == nullptr) {
        fail(request, "restart: no program is stopped or ended (launch one)");
        return Flow::Stay;
      }
      respond(request);
      restart_requested_ = true;  // the run ends through the debugger's quit, then starts again
      *resume = debug::Resume::Quit;
      return Flow::Resume;
    }
    if (command == "disconnect" || command == "terminate") {
      respond(request);
      disconnected_ = true;
      if (resume != nullptr) *resume = debug::Resume::Quit;
      return stop != nullptr ? Flow::Resume : Flow::Stay;
    }
    fail(request,
         fmt::format("unknown request '{}' (supported: initialize, launch, setBreakpoints, configurationDone, "
                     "threads, stackTrace, scopes, variables, evaluate, continue, next, stepIn, stepOut, restart, "
                     "disconnect)",
                     command));
    return Flow::Stay;
  }

  int out_fd_;
  int seq_ = 1;
  bool launched_ = false;
  bool configured_ = false;
  bool stop_on_entry_ = false;
  bool disconnected_ = false;
  bool restart_requested_ = false;  // a `restart` while stopped: the run ends, then starts again
  bool end_announced_ = false;      // exited and terminated were sent for this run
  DebugTarget target_;
  std::unique_ptr<debug::Debugger> debugger_;
  std::map<std::string, std::vector<int>> breakpoint_lines_;  // by source path, as the client set them
  std::vector<const Value*> values_;                          // tensors with children, this stop
};

}  // namespace

int dapCommand(const DapRunner& runner) {
  // stdout carries only the protocol: the program's own output (summaries, logs) goes to stderr.
  std::fflush(stdout);
  const int protocol = ::dup(STDOUT_FILENO);
  if (protocol < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    fmt::print(stderr, "shapevm: error: dap: cannot separate the protocol from the program's output\n");
    return 1;
  }
  DapServer server(protocol);
  const int code = server.serve(runner);
  ::close(protocol);
  return code;
}

}  // namespace shapevm
