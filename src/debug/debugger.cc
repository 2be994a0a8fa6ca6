// SPDX-License-Identifier: Apache-2.0
// The debugger core (see debugger.h). Liveness is a backward dataflow over the bytecode's own
// reads/writes/successors (bytecode/instruction_info.h), computed once per function.
#include "debug/debugger.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

#include "bytecode/instruction_info.h"
#include "support/trace_hooks.h"

namespace shapevm::debug {

namespace {

std::vector<std::vector<bool>> liveIn(const Function& fn) {
  const std::size_t n = fn.code.size();
  const auto regs = static_cast<std::size_t>(std::max(fn.num_registers, 0));
  std::vector<std::vector<bool>> in(n, std::vector<bool>(regs, false));
  bool changed = true;
  while (changed) {
    changed = false;
    for (std::size_t k = n; k-- > 0;) {
      const Instruction& inst = fn.code[k];
      std::vector<bool> live(regs, false);
      for (int succ : successors(inst, static_cast<int>(k))) {
        if (succ < 0 || static_cast<std::size_t>(succ) >= n) continue;
        for (std::size_t r = 0; r < regs; ++r) live[r] = live[r] || in[static_cast<std::size_t>(succ)][r];
      }
      forEachWrite(fn, inst, [&](int r) {
        if (r >= 0 && static_cast<std::size_t>(r) < regs) live[static_cast<std::size_t>(r)] = false;
      });
      forEachRead(fn, inst, [&](int r) {
        if (r >= 0 && static_cast<std::size_t>(r) < regs) live[static_cast<std::size_t>(r)] = true;
      });
      if (live != in[k]) {
        in[k] = std::move(live);
        changed = true;
      }
    }
  }
  return in;
}

// The source variable each register holds: the frontend's names, else the parameter it loads.
std::string registerName(const Function& fn, int reg) {
  if (static_cast<std::size_t>(reg) < fn.register_names.size() &&
      !fn.register_names[static_cast<std::size_t>(reg)].empty()) {
    return fn.register_names[static_cast<std::size_t>(reg)];
  }
  for (const Instruction& inst : fn.code) {
    if ((inst.op == Opcode::LoadTensor || inst.op == Opcode::LoadArg) && inst.a == reg &&
        static_cast<std::size_t>(inst.b) < fn.params.size()) {
      return fn.params[static_cast<std::size_t>(inst.b)].name;
    }
  }
  return "";
}

std::string number(double x) {
  return fmt::format("{:.4g}", x);
}

std::string trim(std::string_view text) {
  const std::size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  const std::size_t end = text.find_last_not_of(" \t\r");
  return std::string(text.substr(begin, end - begin + 1));
}

std::string baseName(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace

Status hooksCompiledIn() {
  if (trace::kHooksCompiledIn) return Status::ok();
  return makeError(ErrorCode::Unsupported,
                   "this shapevm was built with SHAPEVM_TRACE_HOOKS=OFF (the debug hooks compiled out): it cannot "
                   "debug a program");
}

std::string previewValue(const Value& value, int elements) {
  switch (value.kind()) {
    case ValueKind::None: return "None";
    case ValueKind::Int: return std::to_string(value.asInt());
    case ValueKind::Float: return fmt::format("{:.6g}", value.asFloat());
    case ValueKind::Bool: return value.asBool() ? "True" : "False";
    case ValueKind::Tuple: return value.describe();
    case ValueKind::Tensor: break;
  }
  const Tensor& t = value.tensor();
  if (!t.device().isCpu()) return "(on " + t.device().toString() + ")";
  std::string out = "[";
  const std::int64_t shown = std::min<std::int64_t>(t.numel(), elements);
  for (std::int64_t i = 0; i < shown; ++i) out += (i ? ", " : "") + number(t.elementAsDouble(i));
  if (t.numel() > shown) out += ", ...";
  return out + "]";
}

std::string describeValue(const Value& value, int elements) {
  if (!value.isTensor()) return fmt::format("{} = {}", valueKindName(value.kind()), previewValue(value, elements));
  const Tensor& t = value.tensor();
  std::string out =
      fmt::format("tensor shape {} dtype {} strides {}{}", t.shape().toString(), dtypeShortName(t.dtype()),
                  t.strides().toString(), t.isContiguous() ? "" : " (not contiguous)");
  if (t.numel() > 0 && t.device().isCpu()) {
    double low = std::numeric_limits<double>::infinity(), high = -low, sum = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const double x = t.elementAsDouble(i);
      low = std::min(low, x);
      high = std::max(high, x);
      sum += x;
    }
    out += fmt::format("\n  min {}  max {}  mean {}", number(low), number(high),
                       number(sum / static_cast<double>(t.numel())));
  }
  return out +
         fmt::format("\n  first {}: {}", std::min<std::int64_t>(t.numel(), elements), previewValue(value, elements));
}

Debugger::Debugger(std::shared_ptr<const Module> module, std::string source_text, std::set<int> unoptimized_lines,
                   int entry)
    : module_(std::move(module)), unoptimized_lines_(std::move(unoptimized_lines)), entry_(entry) {
  std::istringstream lines(source_text);
  for (std::string line; std::getline(lines, line);) source_lines_.push_back(line);
  for (const Function& fn : module_->functions) live_in_.push_back(liveIn(fn));
}

int Debugger::lineOf(int function, int pc) const {
  const Function& fn = module_->functions[static_cast<std::size_t>(function)];
  return pc >= 0 && static_cast<std::size_t>(pc) < fn.locs.size() ? fn.locs[static_cast<std::size_t>(pc)].line : 0;
}

std::string Debugger::sourceLine(int line) const {
  return line > 0 && static_cast<std::size_t>(line) <= source_lines_.size()
             ? trim(source_lines_[static_cast<std::size_t>(line - 1)])
             : "";
}

// ---- breakpoints ----

Expected<Breakpoint> Debugger::addBreakpoint(std::string_view spec_in, int function) {
  const std::string spec = trim(spec_in);
  Breakpoint bp;
  bp.spec = spec;
  auto parseInt = [](std::string_view text, int base, int* out) {
    auto result = std::from_chars(text.data(), text.data() + text.size(), *out, base);
    return result.ec == std::errc() && result.ptr == text.data() + text.size() && !text.empty();
  };
  if (spec.empty())
    return makeError(ErrorCode::InvalidArgument, "break: expected LINE, FILE:LINE, PC=0x.. or FUNCTION");
  int value = 0;
  if (spec.rfind("PC=", 0) == 0 || spec.rfind("pc=", 0) == 0) {
    std::string_view digits = std::string_view(spec).substr(3);
    if (digits.rfind("0x", 0) == 0 || digits.rfind("0X", 0) == 0) digits.remove_prefix(2);
    const Function& fn = module_->functions[static_cast<std::size_t>(function)];
    if (!parseInt(digits, 16, &value))
      return makeError(ErrorCode::InvalidArgument, "break {}: expected PC=0xNNNN (hex)", spec);
    if (value < 0 || value >= static_cast<int>(fn.code.size())) {
      return makeError(ErrorCode::IndexOutOfRange, "break {}: function '{}' has PCs 0x0000..0x{:04X}", spec, fn.name,
                       fn.code.size() - 1);
    }
    bp.locations.emplace_back(function, value);
    bp.line = lineOf(function, value);
  } else {
    std::string line_text = spec;
    if (const std::size_t colon = spec.rfind(':'); colon != std::string::npos) {
      const std::string file = spec.substr(0, colon);
      if (module_->source_file.empty() ||
          (file != module_->source_file && baseName(file) != baseName(module_->source_file))) {
        return makeError(ErrorCode::UnknownName, "break {}: no source file '{}' in this program (its source is '{}')",
                         spec, file, module_->source_file.empty() ? "unknown" : module_->source_file);
      }
      line_text = spec.substr(colon + 1);
    }
    if (parseInt(line_text, 10, &value)) {
      // A line: the first PC of each run of its code, in every function.
      auto locate = [&](int line) {
        std::vector<std::pair<int, int>> found;
        for (std::size_t f = 0; f < module_->functions.size(); ++f) {
          const Function& fn = module_->functions[f];
          for (std::size_t pc = 0; pc < fn.locs.size(); ++pc) {
            if (fn.locs[pc].line == line && (pc == 0 || fn.locs[pc - 1].line != line))
              found.emplace_back(static_cast<int>(f), static_cast<int>(pc));
          }
        }
        return found;
      };
      bp.line = value;
      bp.locations = locate(value);
      if (bp.locations.empty()) {
        // Which function's lines surround it, and its nearest lines with code.
        int before = 0, after = 0;
        for (const Function& fn : module_->functions) {
          int lo = std::numeric_limits<int>::max(), hi = 0;
          for (const SourceLoc& loc : fn.locs) {
            if (loc.line <= 0) continue;
            lo = std::min(lo, loc.line);
            hi = std::max(hi, loc.line);
          }
          if (value < lo || value > hi) continue;
          for (const SourceLoc& loc : fn.locs) {
            if (loc.line > 0 && loc.line < value) before = std::max(before, loc.line);
            if (loc.line > value && (after == 0 || loc.line < after)) after = loc.line;
          }
        }
        const std::string text = sourceLine(value);
        if (unoptimized_lines_.count(value) > 0 && (after > 0 || before > 0)) {
          const int instead = after > 0 ? after : before;
          bp.note = fmt::format(
              "line {} has no code after optimization (moved or removed: `{}`); it stops at line {} instead", value,
              text, instead);
          bp.line = instead;
          bp.locations = locate(instead);
        } else {
          std::string nearest;
          if (before > 0) nearest += std::to_string(before);
          if (after > 0) nearest += (nearest.empty() ? "" : " and ") + std::to_string(after);
          return makeError(ErrorCode::InvalidArgument, "break {}: line {} has no code{}{}", spec, value,
                           text.empty() ? "" : " (`" + text + "`)",
                           nearest.empty() ? std::string(" and is outside every function")
                                           : "; the nearest lines with code are " + nearest);
        }
      }
    } else {
      // A function: by name, or a method by its short name when unique.
      int found = module_->findFunction(spec);
      if (found < 0) {
        for (std::size_t f = 0; f < module_->functions.size(); ++f) {
          const std::string& name = module_->functions[f].name;
          if (name.size() > spec.size() && name.compare(name.size() - spec.size(), spec.size(), spec) == 0 &&
              name[name.size() - spec.size() - 1] == '.') {
            found = found < 0 ? static_cast<int>(f) : -2;
          }
        }
      }
      if (found < 0) {
        std::string names;
        for (const Function& fn : module_->functions) names += (names.empty() ? "" : ", ") + fn.name;
        return makeError(ErrorCode::UnknownName, "break {}: not a line, PC=0x.. or function (functions: {})", spec,
                         names);
      }
      bp.locations.emplace_back(found, 0);
      bp.line = lineOf(found, 0);
    }
  }
  bp.function = bp.locations.front().first;
  bp.pc = bp.locations.front().second;
  bp.id = next_id_++;
  breakpoints_.push_back(bp);
  return bp;
}

Status Debugger::deleteBreakpoint(int id) {
  auto it = std::find_if(breakpoints_.begin(), breakpoints_.end(), [&](const Breakpoint& bp) { return bp.id == id; });
  if (it == breakpoints_.end()) {
    std::string ids;
    for (const Breakpoint& bp : breakpoints_) ids += (ids.empty() ? "" : ", ") + std::to_string(bp.id);
    return makeError(ErrorCode::UnknownName, "delete {}: no such breakpoint ({})", id,
                     ids.empty() ? "none set" : "set: " + ids);
  }
  breakpoints_.erase(it);
  return Status::ok();
}

std::string Debugger::breakpointTable() const {
  if (breakpoints_.empty()) return "No breakpoints.\n";
  std::string out = fmt::format("{:<4} {:<20} {:<28} {:>6} {}\n", "Num", "Spec", "Where", "Hits", "Note");
  for (const Breakpoint& bp : breakpoints_) {
    std::string where =
        fmt::format("{} PC 0x{:04X}", module_->functions[static_cast<std::size_t>(bp.function)].name, bp.pc);
    if (bp.line > 0) where += fmt::format(" line {}", bp.line);
    if (bp.locations.size() > 1) where += fmt::format(" (+{})", bp.locations.size() - 1);
    out += fmt::format("{:<4} {:<20} {:<28} {:>6} {}\n", bp.id, bp.spec, where, bp.hits, bp.note);
  }
  return out;
}

// ---- the hook ----

Status Debugger::stopAt(const Stop& stop) {
  const Resume resume = handler_ ? handler_(stop) : Resume::Continue;
  mode_ = resume;
  step_depth_ = stop.frame->depth;
  step_line_ = lineOf(stop.frame->function, stop.frame->pc);
  step_function_ = stop.frame->function;
  if (resume == Resume::Quit) {
    quit_ = true;
    return makeError(ErrorCode::InvalidArgument, "the debugger ended the run (quit)");
  }
  return Status::ok();
}

Status Debugger::beforeInstruction(const DebugFrame& frame) {
  if (quit_) return makeError(ErrorCode::InvalidArgument, "the debugger ended the run (quit)");
  if (!started_) {
    started_ = true;
    SVM_RETURN_IF_ERROR(stopAt(Stop{StopReason::Entry, &frame, 0}));
  }
  for (Breakpoint& bp : breakpoints_) {
    for (const auto& [function, pc] : bp.locations) {
      if (function == frame.function && pc == frame.pc) {
        ++bp.hits;
        return stopAt(Stop{StopReason::Breakpoint, &frame, bp.id});
      }
    }
  }
  const int line = lineOf(frame.function, frame.pc);
  bool stop = false;
  switch (mode_) {
    case Resume::Continue:
    case Resume::Quit: break;
    case Resume::StepInstruction: stop = true; break;
    case Resume::NextLine:
      stop = frame.depth < step_depth_ || (frame.depth == step_depth_ && line > 0 && line != step_line_);
      break;
    case Resume::StepIn: stop = line > 0 && (frame.depth != step_depth_ || line != step_line_); break;
    case Resume::Finish: stop = frame.depth < step_depth_; break;
  }
  if (stop) return stopAt(Stop{StopReason::Step, &frame, 0});
  return Status::ok();
}

void Debugger::onError(const DebugFrame& frame, const Status& error) {
  if (quit_) return;  // the error is the debugger's own `quit`
  (void)stopAt(Stop{StopReason::Error, &frame, 0, error.toString()});
}

void Debugger::restart(bool stop_at_entry) {
  if (stop_at_entry) started_ = false;
  mode_ = Resume::Continue;
  quit_ = false;
  declined_.clear();
}

bool Debugger::allowRegion(int function, int pc, int resume_pc) {
  bool allow = mode_ != Resume::StepInstruction;  // instruction stepping walks the range op by op
  for (const Breakpoint& bp : breakpoints_) {
    for (const auto& [f, p] : bp.locations) allow = allow && !(f == function && p >= pc && p < resume_pc);
  }
  if (!allow) declined_.emplace(function, pc, resume_pc);
  return allow;
}

// ---- views ----

bool Debugger::isLive(int function, int pc, int reg) const {
  const auto& in = live_in_[static_cast<std::size_t>(function)];
  return pc >= 0 && static_cast<std::size_t>(pc) < in.size() && reg >= 0 &&
         static_cast<std::size_t>(reg) < in[static_cast<std::size_t>(pc)].size() &&
         in[static_cast<std::size_t>(pc)][static_cast<std::size_t>(reg)];
}

std::string Debugger::where(const DebugFrame& frame) const {
  const Function& fn = module_->functions[static_cast<std::size_t>(frame.function)];
  const int line = lineOf(frame.function, frame.pc);
  std::string out = fmt::format("{} PC 0x{:04X}", fn.name, frame.pc);
  if (line > 0)
    out += fmt::format(" at {}:{}", module_->source_file.empty() ? std::string("line") : baseName(module_->source_file),
                       line);
  return out;
}

std::vector<VariableView> Debugger::liveVariables(const DebugFrame& frame) const {
  std::vector<VariableView> out;
  const Function& fn = module_->functions[static_cast<std::size_t>(frame.function)];
  for (std::size_t r = 0; r < frame.registers.size(); ++r) {
    const Value& v = frame.registers[r];
    if (v.isNone() || !isLive(frame.function, frame.pc, static_cast<int>(r))) continue;
    VariableView view;
    view.reg = static_cast<int>(r);
    view.name = registerName(fn, view.reg);
    view.kind = std::string(valueKindName(v.kind()));
    if (v.isTensor()) {
      view.dtype = std::string(dtypeShortName(v.tensor().dtype()));
      view.shape = v.tensor().shape().toString();
      view.strides = v.tensor().strides().toString();
    }
    view.preview = previewValue(v, 4);
    view.value = &v;
    out.push_back(std::move(view));
  }
  return out;
}

std::string Debugger::regionNote(const DebugFrame& frame) const {
  for (const auto& [function, pc, resume] : declined_) {
    if (function == frame.function && frame.pc >= pc && frame.pc < resume) {
      return fmt::format(
          "inside compiled region PC 0x{:04X}..0x{:04X}: it declines while a breakpoint is set in it, so "
          "this range runs interpreted\n",
          pc, resume - 1);
    }
  }
  return "";
}

std::string Debugger::frameView(const DebugFrame& frame) const {
  const int line = lineOf(frame.function, frame.pc);
  std::string out = fmt::format("frame: {}", where(frame));
  const std::string text = sourceLine(line);
  out += text.empty() ? "\n" : fmt::format(": {}\n", text);
  out += regionNote(frame);
  const std::vector<VariableView> vars = liveVariables(frame);
  if (vars.empty()) return out + "no live registers\n";
  out += fmt::format("  {:<4} {:<10} {:<7} {:<6} {:<16} {:<16} {}\n", "reg", "name", "kind", "dtype", "shape",
                     "strides", "value");
  for (const VariableView& v : vars) {
    out += fmt::format("  r{:<3} {:<10} {:<7} {:<6} {:<16} {:<16} {}\n", v.reg, v.name.empty() ? "-" : v.name, v.kind,
                       v.dtype.empty() ? "-" : v.dtype, v.shape.empty() ? "-" : v.shape,
                       v.strides.empty() ? "-" : v.strides, v.preview);
  }
  return out;
}

Expected<const Value*> Debugger::lookup(const DebugFrame& frame, std::string_view what_in) const {
  const std::string what = trim(what_in);
  const Function& fn = module_->functions[static_cast<std::size_t>(frame.function)];
  const std::string at = fmt::format("PC 0x{:04X} (line {})", frame.pc, lineOf(frame.function, frame.pc));
  int reg = -1;
  if (what.size() > 1 && what[0] == 'r' &&
      std::all_of(what.begin() + 1, what.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    reg = std::stoi(what.substr(1));
    if (reg >= static_cast<int>(frame.registers.size())) {
      return makeError(ErrorCode::UnknownName, "unknown register {}: function '{}' has r0..r{}", what, fn.name,
                       frame.registers.size() - 1);
    }
  } else {
    std::string names;
    for (std::size_t r = 0; r < frame.registers.size(); ++r) {
      const std::string name = registerName(fn, static_cast<int>(r));
      if (name.empty()) continue;
      if (name == what && (reg < 0 || isLive(frame.function, frame.pc, static_cast<int>(r)))) reg = static_cast<int>(r);
      if (names.find(" " + name + ",") == std::string::npos) names += " " + name + ",";
    }
    if (reg < 0) {
      if (!names.empty()) names.pop_back();
      return makeError(ErrorCode::UnknownName, "no variable or register '{}' in function '{}' (variables:{})", what,
                       fn.name, names.empty() ? " none known" : names);
    }
  }
  const Value& v = frame.registers[static_cast<std::size_t>(reg)];
  if (v.isNone() || !isLive(frame.function, frame.pc, reg)) {
    return makeError(ErrorCode::InvalidArgument, "'{}' (r{}) is not live at {}: {}", what, reg, at,
                     v.isNone() ? "it has no value yet" : "its value is not used any more");
  }
  return &v;
}

Expected<std::string> Debugger::print(const DebugFrame& frame, std::string_view what) const {
  SVM_ASSIGN_OR_RETURN(const Value* value, lookup(frame, what));
  return fmt::format("{} = {}\n", trim(what), describeValue(*value));
}

std::string Debugger::backtrace(const DebugFrame& frame) const {
  std::string out;
  int index = 0;
  for (const DebugFrame* f = &frame; f != nullptr; f = f->caller, ++index) {
    const std::string text = sourceLine(lineOf(f->function, f->pc));
    out += fmt::format("#{}  {}{}\n", index, where(*f), text.empty() ? "" : ": " + text);
  }
  return out;
}

std::string Debugger::listing(int line, int context) const {
  if (source_lines_.empty()) return "no source text for this program\n";
  const int first = std::max(1, line - context);
  const int last = std::min(static_cast<int>(source_lines_.size()), line + context);
  std::string out;
  for (int k = first; k <= last; ++k) {
    out += fmt::format("{}{:>4}  {}\n", k == line ? "=>" : "  ", k, source_lines_[static_cast<std::size_t>(k - 1)]);
  }
  return out;
}

std::string Debugger::jitInfo(const DebugFrame& frame) const {
  const Function& fn = module_->functions[static_cast<std::size_t>(frame.function)];
  const Instruction& inst = fn.code[static_cast<std::size_t>(frame.pc)];
  if (inst.op != Opcode::CallOp) {
    return fmt::format("PC 0x{:04X} is {}, not an op call: it has no dispatch entries\n", frame.pc,
                       opcodeName(inst.op));
  }
  std::string out =
      fmt::format("PC 0x{:04X} {} (site {}):\n", frame.pc,
                  OpRegistry::global().schema(fn.op_sites[static_cast<std::size_t>(inst.a)].op).name, inst.a);
  std::vector<std::string> notes = jit_notes_ ? jit_notes_(frame.function, frame.pc) : std::vector<std::string>{};
  if (!jit_notes_) notes.push_back("no JIT attached (jit level O0): the site runs its reference kernel");
  for (const std::string& note : notes) out += "  " + note + "\n";
  out += regionNote(frame);
  return out;
}

}  // namespace shapevm::debug
