// SPDX-License-Identifier: Apache-2.0
// ProfileBuffer recording and snapshots; dispatch-slot signature keys and guard checks; the
// profile report and the interpreter's timeline events.
#include "vm/profile.h"

#include <algorithm>

#include "ops/registry.h"
#include "support/json_text.h"
#include "support/trace.h"
#include "vm/dispatch_slot.h"
#include "vm/vm.h"

namespace shapevm {

ProfileBuffer::ProfileBuffer(std::size_t capacity)
    : slots_(std::make_unique<Slot[]>(capacity == 0 ? 1 : capacity)), capacity_(capacity == 0 ? 1 : capacity) {}

bool ProfileBuffer::matches(const Slot& slot, std::span<const Value* const> inputs) {
  if (slot.inputs.size() != inputs.size()) return false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const OperandProfile& p = slot.inputs[i];
    const Value* v = inputs[i];
    bool is_tensor = v != nullptr && v->isTensor();
    if (p.is_tensor != is_tensor) return false;
    if (!is_tensor) {
      if (p.kind != (v == nullptr ? ValueKind::None : v->kind())) return false;
      continue;
    }
    const Tensor& t = v->tensor();
    if (t.dtype() != p.dtype || t.shape() != p.shape || t.strides() != p.strides) return false;
  }
  return true;
}

void ProfileBuffer::bump(Slot& slot, std::uint64_t call_number) {
  slot.count.store(slot.count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  slot.last_seen.store(call_number, std::memory_order_relaxed);
}

void ProfileBuffer::record(std::span<const Value* const> inputs, std::uint64_t call_number) {
  const std::size_t size = size_.load(std::memory_order_relaxed);
  if (size > 0 && matches(slots_[newest_], inputs)) {
    bump(slots_[newest_], call_number);
    return;
  }
  for (std::size_t i = 0; i < size; ++i) {
    if (matches(slots_[i], inputs)) {
      newest_ = i;
      bump(slots_[i], call_number);
      return;
    }
  }
  std::vector<OperandProfile> profile;
  profile.reserve(inputs.size());
  for (const Value* v : inputs) {
    OperandProfile p;
    if (v != nullptr && v->isTensor()) {
      p.is_tensor = true;
      p.dtype = v->tensor().dtype();
      p.shape = v->tensor().shape();
      p.strides = v->tensor().strides();
    } else if (v != nullptr) {
      p.kind = v->kind();
      if (v->isInt() || v->isFloat() || v->isBool()) p.scalar = v->toDouble();
    }
    profile.push_back(p);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t target = size;
  if (size < capacity_) {
    size_.store(size + 1, std::memory_order_relaxed);
  } else {
    target = 0;  // evict the least recently seen record
    for (std::size_t i = 1; i < size; ++i) {
      if (slots_[i].last_seen.load(std::memory_order_relaxed) < slots_[target].last_seen.load(std::memory_order_relaxed)) target = i;
    }
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
  Slot& slot = slots_[target];
  slot.inputs = std::move(profile);
  slot.count.store(1, std::memory_order_relaxed);
  slot.last_seen.store(call_number, std::memory_order_relaxed);
  newest_ = target;
}

std::vector<ProfileRecord> ProfileBuffer::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ProfileRecord> out;
  const std::size_t size = size_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(ProfileRecord{slots_[i].inputs, slots_[i].count.load(std::memory_order_relaxed),
                                slots_[i].last_seen.load(std::memory_order_relaxed)});
  }
  return out;
}

std::string ProfileRecord::toString() const {
  std::string text;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i) text += " x ";
    if (!inputs[i].is_tensor) {
      text += "_";
      continue;
    }
    text += std::string(dtypeShortName(inputs[i].dtype));
    std::string dims = "(";
    for (int d = 0; d < inputs[i].shape.rank(); ++d) dims += (d ? "," : "") + std::to_string(inputs[i].shape[d]);
    text += dims + ")";
  }
  return text;
}

std::uint64_t signatureKey(std::span<const Value* const> inputs) {
  // Per input one byte: bit 7 tensor, bits 4-6 dtype, bit 3 contiguous, bits 0-2 rank (0..7).
  // Rank 8, more than 7 inputs or a tensor off the CPU: uncacheable (~0), resolved (and its
  // inputs checked, which refuses the device) on every call.
  if (inputs.size() > 7) return ~std::uint64_t{0};
  std::uint64_t key = 0;
  const Shape* first = nullptr;
  bool same_shape = true;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Value* v = inputs[i];
    std::uint64_t byte = 0;
    if (v != nullptr && v->isTensor()) {
      const Tensor& t = v->tensor();
      if (t.rank() >= 8 || !t.device().isCpu()) return ~std::uint64_t{0};
      byte = 0x80u | (static_cast<std::uint64_t>(t.dtype()) << 4) | static_cast<std::uint64_t>(t.rank());
      if (t.isContiguous()) byte |= 0x08u;
      if (first == nullptr) first = &t.shape();
      else if (same_shape && t.shape() != *first) same_shape = false;
    } else {
      same_shape = false;
      byte = v == nullptr ? 0x01u : 0x02u + static_cast<std::uint64_t>(v->kind());
    }
    key |= byte << (8 * i);
  }
  return key | (static_cast<std::uint64_t>(same_shape) << 56);
}

bool Guard::passes(std::span<const Value* const> values) const {
  if (values.size() != inputs.size()) return false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const InputGuard& g = inputs[i];
    const Value* v = values[i];
    if (!g.is_tensor) {
      if ((v == nullptr ? ValueKind::None : v->kind()) != g.scalar_kind) return false;
      continue;
    }
    if (v == nullptr || !v->isTensor()) return false;
    const Tensor& t = v->tensor();
    if (t.dtype() != g.dtype || t.rank() != g.rank) return false;
    if (g.require_contiguous && !t.isContiguous()) return false;
    for (int d = 0; d < g.rank; ++d) {
      if (!g.dims[d].accepts(t.dim(d))) return false;
    }
  }
  return true;
}

}  // namespace shapevm

// ---- the profile report ----

namespace shapevm {

namespace {
double ticksMs(std::uint64_t ticks) {
  return ticksToNanos(ticks) / 1e6;
}

ProfileRow finishRow(ProfileRow row, double total_ms) {
  row.mean_us = row.calls > 0 ? row.total_ms * 1e3 / static_cast<double>(row.calls) : 0.0;
  row.share = total_ms > 0 ? row.total_ms / total_ms : 0.0;
  return row;
}

}  // namespace

std::vector<FunctionProfile> buildProfile(VirtualMachine& vm, int entry_function) {
  const double total_ms = ticksMs(vm.stats().run_ticks);
  std::vector<FunctionProfile> out;
  double rows_ms = 0;
  for (std::size_t f = 0; f < vm.module().functions.size(); ++f) {
    const Function& fn = vm.module().functions[f];
    FunctionRuntime& rt = vm.runtime(static_cast<int>(f));
    FunctionProfile profile;
    profile.function = fn.name;
    profile.calls = rt.calls.load(std::memory_order_relaxed);
    if (profile.calls == 0) continue;
    for (std::size_t pc = 0; pc < fn.code.size(); ++pc) {
      if (fn.code[pc].op != Opcode::CallOp) continue;
      const auto site = static_cast<std::size_t>(fn.code[pc].a);
      const DispatchSlot& slot = rt.slots[site];
      const std::uint64_t region_calls = slot.region_calls.load(std::memory_order_relaxed);
      const std::uint64_t region_ticks = slot.region_ticks.load(std::memory_order_relaxed);
      if (region_calls > 0) {
        ProfileRow row;
        row.kind = "region";
        row.pc = static_cast<int>(pc);
        row.name = "region";
        if (const PatchTable* table = slot.patched.load(std::memory_order_acquire)) {
          for (const CompiledEntry& entry : table->entries) {
            if (entry.region != nullptr) {
              row.end_pc = entry.resume_pc - 1;
              break;
            }
          }
        }
        row.calls = region_calls;
        row.total_ms = ticksMs(region_ticks);
        row.compiled = region_calls;
        row.interpreted = slot.region_declines.load(std::memory_order_relaxed);
        row.guard_misses = row.interpreted;
        profile.rows.push_back(finishRow(row, total_ms));
        rows_ms += row.total_ms;
      }
      ProfileRow row;
      row.kind = "op";
      row.pc = static_cast<int>(pc);
      row.name = std::string(OpRegistry::global().schema(fn.op_sites[site].op).name);
      row.calls = slot.calls.load(std::memory_order_relaxed) - region_calls;
      if (row.calls == 0) continue;  // only ever ran inside a region (or never)
      row.total_ms = ticksMs(slot.ticks.load(std::memory_order_relaxed) - region_ticks);
      row.compiled = slot.compiled_calls.load(std::memory_order_relaxed) - region_calls;
      row.interpreted = row.calls - row.compiled;
      row.guard_misses = slot.guard_misses.load(std::memory_order_relaxed);
      row.allocations = slot.allocations.load(std::memory_order_relaxed);
      for (const ProfileRecord& r : rt.profiles[site].snapshot()) {
        row.signatures += (row.signatures.empty() ? "" : "; ") + r.toString() + " x" + std::to_string(r.count);
      }
      profile.rows.push_back(finishRow(row, total_ms));
      rows_ms += row.total_ms;
    }
    profile.run_ms = total_ms;
    out.push_back(std::move(profile));
  }
  // The rest of the run: scalar instructions, moves, calls' frames, the interpreter's own loop.
  for (FunctionProfile& profile : out) {
    if (profile.function != vm.module().functions[static_cast<std::size_t>(entry_function)].name) continue;
    ProfileRow other;
    other.kind = "other";
    other.name = "(interpreter: other instructions)";
    other.calls = vm.stats().runs;
    other.total_ms = std::max(0.0, total_ms - rows_ms);
    profile.rows.push_back(finishRow(other, total_ms));
  }
  return out;
}

std::string profileText(const std::vector<FunctionProfile>& profile) {
  std::string text;
  for (const FunctionProfile& fp : profile) {
    text +=
        fmt::format("profile of '{}': {} calls; shares are of {:.3f} ms run time\n", fp.function, fp.calls, fp.run_ms);
    text +=
        fmt::format("  {:<14} {:<18} {:>8} {:>11} {:>11} {:>6} {:>9} {:>11} {:>7} {:>7}  {}\n", "PC", "op", "calls",
                    "total ms", "mean us", "share", "compiled", "interpreted", "misses", "allocs", "signatures seen");
    for (const ProfileRow& row : fp.rows) {
      std::string where = row.pc < 0 ? "-" : fmt::format("0x{:04X}", row.pc);
      if (row.kind == "region") where += row.end_pc >= 0 ? fmt::format("..0x{:04X}", row.end_pc) : "..";
      text += fmt::format("  {:<14} {:<18} {:>8} {:>11.3f} {:>11.2f} {:>5.1f}% {:>9} {:>11} {:>7} {:>7}  {}\n", where,
                          row.name, row.calls, row.total_ms, row.mean_us, row.share * 100, row.compiled,
                          row.interpreted, row.guard_misses, row.allocations, row.signatures);
    }
  }
  return text;
}

std::string profileJson(const std::vector<FunctionProfile>& profile) {
  std::string text = "{\"functions\": [";
  for (std::size_t f = 0; f < profile.size(); ++f) {
    const FunctionProfile& fp = profile[f];
    text += fmt::format("{}\n  {{\"function\": {}, \"calls\": {}, \"run_ms\": {:.6f}, \"rows\": [", f ? "," : "",
                        jsonString(fp.function), fp.calls, fp.run_ms);
    for (std::size_t r = 0; r < fp.rows.size(); ++r) {
      const ProfileRow& row = fp.rows[r];
      text += fmt::format(
          "{}\n    {{\"kind\": {}, \"pc\": {}, \"end_pc\": {}, \"name\": {}, \"calls\": {}, \"total_ms\": {:.6f}, "
          "\"mean_us\": {:.4f}, \"share\": {:.6f}, \"compiled\": {}, \"interpreted\": {}, \"guard_misses\": {}, "
          "\"allocations\": {}, \"signatures\": {}}}",
          r ? "," : "", jsonString(row.kind), row.pc, row.end_pc, jsonString(row.name), row.calls, row.total_ms,
          row.mean_us, row.share, row.compiled, row.interpreted, row.guard_misses, row.allocations,
          jsonString(row.signatures));
    }
    text += "]}";
  }
  return text + "\n]}\n";
}

// ---- timeline hooks ----

RunTrace::Counters RunTrace::read(const DispatchSlot& slot) {
  return Counters{
      slot.calls.load(std::memory_order_relaxed),        slot.compiled_calls.load(std::memory_order_relaxed),
      slot.ticks.load(std::memory_order_relaxed),        slot.region_calls.load(std::memory_order_relaxed),
      slot.region_ticks.load(std::memory_order_relaxed), slot.guard_misses.load(std::memory_order_relaxed)};
}

RunTrace::RunTrace(VirtualMachine& vm, int function) : vm_(vm), function_(function) {
  trace::nameThreadOnce("interpreter");
  for (std::size_t f = 0; f < vm.module().functions.size(); ++f) {
    FunctionRuntime& rt = vm.runtime(static_cast<int>(f));
    std::vector<Counters> sites;
    for (std::size_t s = 0; s < vm.module().functions[f].op_sites.size(); ++s) sites.push_back(read(rt.slots[s]));
    before_.push_back(std::move(sites));
  }
  start_us_ = trace::nowUs();
}

void RunTrace::finish(const Status& status) {
  const double end_us = trace::nowUs();
  const Module& module = vm_.module();
  trace::Args run_args;
  run_args.add("function", module.functions[static_cast<std::size_t>(function_)].name)
      .add("run", vm_.runtime(function_).calls.load(std::memory_order_relaxed))
      .add("status", status.isOk() ? std::string("ok") : status.toString());
  trace::complete("run", module.functions[static_cast<std::size_t>(function_)].name, start_us_, end_us - start_us_,
                  run_args);
  if (trace::opsEnabled()) return;  // --trace-ops: each execution has its own event instead
  // Aggregates, one after another from the run's start (their sum never exceeds the run).
  double cursor = start_us_;
  for (std::size_t f = 0; f < module.functions.size(); ++f) {
    const Function& fn = module.functions[f];
    FunctionRuntime& rt = vm_.runtime(static_cast<int>(f));
    for (std::size_t pc = 0; pc < fn.code.size(); ++pc) {
      if (fn.code[pc].op != Opcode::CallOp) continue;
      const auto site = static_cast<std::size_t>(fn.code[pc].a);
      const Counters now = read(rt.slots[site]);
      const Counters& was = before_[f][site];
      const std::uint64_t regions = now.region_calls - was.region_calls;
      const std::uint64_t calls = now.calls - was.calls - regions;
      const double region_us = std::min(ticksToNanos(now.region_ticks - was.region_ticks) / 1e3, end_us - cursor);
      if (regions > 0) {
        trace::Args args;
        args.addPc(static_cast<int>(pc)).add("function", fn.name).add("executions", regions).add("aggregated", 1);
        trace::complete("region", fmt::format("region@0x{:02X} x{}", pc, regions), cursor, region_us, args);
        cursor += region_us;
      }
      if (calls == 0) continue;
      const std::uint64_t compiled = now.compiled - was.compiled - regions;
      const double op_us = std::min(ticksToNanos((now.ticks - was.ticks) - (now.region_ticks - was.region_ticks)) / 1e3,
                                    end_us - cursor);
      const std::string_view op = OpRegistry::global().schema(fn.op_sites[site].op).name;
      trace::Args args;
      args.addPc(static_cast<int>(pc))
          .add("function", fn.name)
          .add("calls", calls)
          .add("compiled", compiled)
          .add("interpreted", calls - compiled)
          .add("guard_misses", now.misses - was.misses)
          .add("aggregated", 1);
      trace::complete("op", fmt::format("{} x{}", op, calls), cursor, op_us, args);
      cursor += op_us;
    }
  }
}

void traceOpEvent(const Function& fn, int site, int pc, double start_us, const CompiledEntry* region, bool compiled) {
  trace::Args args;
  args.addPc(pc).add("function", fn.name);
  if (region != nullptr) {
    args.add("kernel_id", region->id).add("resume_pc", region->resume_pc);
    trace::complete("region", fmt::format("region@0x{:02X}", pc), start_us, trace::nowUs() - start_us, args);
    return;
  }
  args.add("path", compiled ? "compiled" : "interpreted");
  trace::complete("op", std::string(OpRegistry::global().schema(fn.op_sites[static_cast<std::size_t>(site)].op).name),
                  start_us, trace::nowUs() - start_us, args);
}

void traceFallback(const Function& fn, int site, int pc, const char* what, std::span<const Value* const> inputs) {
  trace::Args args;
  args.addPc(pc)
      .add("function", fn.name)
      .add("op", OpRegistry::global().schema(fn.op_sites[static_cast<std::size_t>(site)].op).name)
      .add("reason", what);
  if (!inputs.empty()) args.add("signature", describeInputs(inputs));
  trace::instant("fallback", what, args);
}

}  // namespace shapevm
