// SPDX-License-Identifier: Apache-2.0
// Module dumps (see dump_command.h). The text is the canonical disassembly; notes are inserted
// after the instruction lines they belong to, found by their `0xNNNN` PC prefix inside the n-th
// `.func` block, so the disassembler's format stays the one source of truth.
#include "tools/dump_command.h"

#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "bytecode/binary_format.h"
#include "bytecode/module_io.h"
#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "frontend/frontend.h"
#include "vm/vm.h"
#if SHAPEVM_HAVE_JIT
#include "jit/jit.h"
#include "jit/shape_infer.h"
#endif

namespace shapevm {

Expected<Module> extractFunction(const Module& module, int function) {
  std::map<int, int> renumber;  // old function index -> new, in discovery order
  std::vector<int> order{function};
  renumber[function] = 0;
  for (std::size_t next = 0; next < order.size(); ++next) {
    for (const CallSite& call : module.functions[static_cast<std::size_t>(order[next])].call_sites) {
      if (renumber.emplace(call.callee, static_cast<int>(order.size())).second) order.push_back(call.callee);
    }
  }
  Module out;
  out.name = module.name;
  out.source_file = module.source_file;
  out.constants = module.constants;
  std::lock_guard<std::mutex> lock(module.tokenMutex());
  for (int index : order) {
    Function fn = module.functions[static_cast<std::size_t>(index)];
    for (CallSite& call : fn.call_sites) call.callee = renumber[call.callee];
    out.functions.push_back(std::move(fn));
  }
  return out;
}

std::string dumpText(const Module& module, const DumpNotes& notes) {
  std::string source;
  if (!module.source_file.empty()) {
    std::ifstream in(module.source_file, std::ios::binary);
    if (in) source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string text = disassemble(module, DisassembleOptions{source});
  if (!notes) return text;
  std::string out;
  std::istringstream lines(text);
  std::string line;
  int function = -1;
  while (std::getline(lines, line)) {
    out += line + "\n";
    const std::size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos) continue;
    if (line.compare(start, 6, ".func ") == 0) ++function;
    if (function < 0 || line.compare(start, 2, "0x") != 0) continue;
    int pc = 0;
    try {
      pc = std::stoi(line.substr(start + 2, 4), nullptr, 16);
    } catch (const std::exception&) {
      continue;
    }
    for (const std::string& note : notes(function, pc)) out += std::string(start + 8, ' ') + "; " + note + "\n";
  }
  return out;
}

Status writeDump(const Module& module, const std::string& function_name, const std::string& path,
                 const DumpNotes& notes) {
  const Module* chosen = &module;
  Module extracted;
  DumpNotes chosen_notes = notes;
  if (!function_name.empty()) {
    SVM_ASSIGN_OR_RETURN(int index, resolveFunction(module, function_name));
    SVM_ASSIGN_OR_RETURN(extracted, extractFunction(module, index));
    SVM_RETURN_IF_ERROR(verifyModule(extracted).withContext(fmt::format("dump --fn {}", function_name)));
    chosen = &extracted;
    if (notes) {  // notes are keyed by the original function index
      std::vector<int> original;
      for (const Function& fn : extracted.functions) original.push_back(module.findFunction(fn.name));
      chosen_notes = [notes, original](int function, int pc) {
        return notes(original[static_cast<std::size_t>(function)], pc);
      };
    }
  }
  const bool text = path.size() >= 6 && path.compare(path.size() - 6, 6, ".svasm") == 0;
  const bool binary = path.size() >= 4 && path.compare(path.size() - 4, 4, ".svm") == 0;
  if (!text && !binary) {
    return makeError(ErrorCode::InvalidArgument, "dump: '{}' must end in .svasm (text) or .svm (binary)", path);
  }
  if (binary) return saveModuleFile(*chosen, path);
  std::ofstream out(path, std::ios::binary);
  if (!out) return makeError(ErrorCode::IoError, "cannot open '{}' for writing", path);
  const std::string dumped = dumpText(*chosen, chosen_notes);
  out.write(dumped.data(), static_cast<std::streamsize>(dumped.size()));
  if (!out) return makeError(ErrorCode::IoError, "failed writing '{}'", path);
  return Status::ok();
}

#if SHAPEVM_HAVE_JIT
namespace {
std::string_view phaseName(jit::Jit::SiteState::Phase phase) {
  using Phase = jit::Jit::SiteState::Phase;
  switch (phase) {
    case Phase::Cold: return "cold (not compiled yet)";
    case Phase::Queued: return "queued for compile";
    case Phase::Compiled: return "compiled";
    case Phase::NoKernel: return "interpreted (no JIT kernel family for this op)";
    case Phase::Unsupported: return "interpreted (signature not supported by its kernels)";
    case Phase::Blacklisted: return "interpreted (blacklisted after failures)";
  }
  return "?";
}
std::string_view rangePhaseName(jit::Jit::RangeState::Phase phase) {
  using Phase = jit::Jit::RangeState::Phase;
  switch (phase) {
    case Phase::Cold: return "cold";
    case Phase::Queued: return "queued";
    case Phase::Installed: return "installed";
    case Phase::NotFused: return "not fused";
    case Phase::Blacklisted: return "blacklisted";
  }
  return "?";
}
}  // namespace

std::vector<std::string> jitSiteNotes(jit::Jit& jit, VirtualMachine& vm, int function, int pc, bool state) {
  std::vector<std::string> notes;
  const Function& fn = vm.module().functions[static_cast<std::size_t>(function)];
  if (pc < 0 || pc >= static_cast<int>(fn.code.size()) || fn.code[static_cast<std::size_t>(pc)].op != Opcode::CallOp)
    return notes;
  const int site = fn.code[static_cast<std::size_t>(pc)].a;
  for (const jit::RuntimePatchManager::EntryInfo& entry : jit.patches().describe(function, site)) {
    if (entry.region) {
      notes.push_back(fmt::format("jit: region {} kernel {}, launches {} ({})", entry.guard, entry.symbol,
                                  entry.launches, entry.description));
    } else {
      notes.push_back(fmt::format("jit: kernel {}, guard {}, launches {}{}", entry.symbol, entry.guard, entry.launches,
                                  entry.launches_of_site ? " (all of this site's kernels)" : ""));
    }
  }
  if (!state) return notes;
  const jit::Jit::SiteState site_state = jit.siteState(function, site);
  const DispatchSlot& slot = vm.runtime(function).slots[static_cast<std::size_t>(site)];
  const std::uint64_t misses = slot.guard_misses.load(std::memory_order_relaxed);
  notes.push_back(fmt::format("site: {}; calls {}, compiled {}, guard misses {}, failed compiles {}",
                              phaseName(site_state.phase), slot.calls.load(std::memory_order_relaxed),
                              slot.compiled_calls.load(std::memory_order_relaxed), misses,
                              site_state.backoff.failures));
  const std::vector<ProfileRecord> records = vm.runtime(function).profiles[static_cast<std::size_t>(site)].snapshot();
  const ProfileRecord* newest = jit::newestRecord(records);
  if (newest != nullptr) {
    for (const Guard& guard : jit.patches().guards(function, site)) {
      jit::JitReason reason{};
      const std::string why = jit::guardMissReason(guard, *newest, &reason);
      if (!why.empty())
        notes.push_back(
            fmt::format("last fallback: {} misses guard {}: {}", newest->toString(), jit::guardText(guard), why));
    }
  }
  for (const jit::Jit::RangeState& range : jit.rangeStates(function)) {
    if (pc < range.range.start_pc || pc >= range.range.resume_pc) continue;
    notes.push_back(fmt::format("fused range PC 0x{:04X}..0x{:04X}: {}, runs {}, declines {}{}", range.range.start_pc,
                                range.range.resume_pc - 1, rangePhaseName(range.phase), range.runs->load(),
                                range.declines->load(),
                                range.description.empty() ? "" : " (" + range.description + ")"));
  }
  return notes;
}
#endif

}  // namespace shapevm
