// SPDX-License-Identifier: Apache-2.0
// O2 region fusion, step 1: finding the fusible ranges of a hot region (see region.h). A range is
// a maximal run of range ops (CallOps with tensor inputs), the Moves between them and a prelude of
// replayable shape arithmetic; reads and writes come from bytecode/instruction_info.h.
#include <algorithm>
#include <set>

#include "bytecode/instruction_info.h"
#include "jit/region.h"
#include "jit/region_plan.h"

namespace shapevm::jit {

namespace {

// Ops a range may hold: every input a tensor (or omitted), at least one tensor input; reshape's
// target shape may be a tuple (read from its register at entry). Other ops with scalar or tuple
// inputs (gather's index ...) end a range.
bool rangeOp(const OpSite& site) {
  if (site.inputs.empty() || site.inputs[0] < 0) return false;
  for (std::size_t k = 0; k < site.input_tokens.size(); ++k) {
    if (site.input_tokens[k].is_tensor || (k < site.inputs.size() && site.inputs[k] < 0)) continue;
    if (site.op == OpId::Reshape && k == 1) continue;
    return false;
  }
  return true;
}

}  // namespace

std::vector<FusionRange> fusionRanges(const Function& function, const Region& region) {
  std::vector<FusionRange> ranges;
  FusionRange current;
  std::set<int> read, written, prelude_reads, prelude_writes;  // by the current range's ops / its prelude
  auto flush = [&](int end_pc) {
    if (current.sites.size() >= 2) {
      current.resume_pc = end_pc;
      // Prelude instructions after the last CallOp are not part of the range.
      std::erase_if(current.prelude, [&](int pc) { return pc >= end_pc; });
      ranges.push_back(current);
    }
    current = FusionRange{};
    read.clear();
    written.clear();
    prelude_reads.clear();
    prelude_writes.clear();
  };
  std::vector<int> reads, writes;
  for (int pc = region.start_pc; pc < region.end_pc; ++pc) {
    const Instruction& in = function.code[static_cast<std::size_t>(pc)];
    reads.clear();
    writes.clear();
    forEachRead(function, in, [&](int r) { reads.push_back(r); });
    forEachWrite(function, in, [&](int r) { writes.push_back(r); });
    const auto any = [](const std::vector<int>& regs, const std::set<int>& set) {
      return std::any_of(regs.begin(), regs.end(), [&](int r) { return set.count(r) > 0; });
    };
    bool joins = false;
    bool callop = false;  // a CallOp that may be in a range
    if (in.op == Opcode::CallOp) {
      const OpSite& site = function.op_sites[static_cast<std::size_t>(in.a)];
      // Only this region's own sites (an inner loop's body is that loop's region).
      const bool own = std::find(region.sites.begin(), region.sites.end(), in.a) != region.sites.end();
      joins = callop = own && rangeOp(site);
    } else if (in.op == Opcode::Move) {
      joins = !current.sites.empty();
    } else if (preludeOp(in.op)) {
      // Replayable at entry, and again by the interpreter after a decline: reads nothing the
      // range computes, writes nothing the range reads or writes, and nothing the prelude read
      // (itself included: `r7 = r7 + r8` would not give the same value twice).
      std::set<int> own_reads(reads.begin(), reads.end());
      joins = !current.sites.empty() && !any(reads, written) && !any(writes, read) && !any(writes, written) &&
              !any(writes, prelude_writes) && !any(writes, prelude_reads) && !any(writes, own_reads);
      if (joins) {
        current.prelude.push_back(pc);
        prelude_reads.insert(reads.begin(), reads.end());
        prelude_writes.insert(writes.begin(), writes.end());
        continue;
      }
    }
    if (joins && any(writes, prelude_writes)) {
      flush(current.pcs.empty() ? pc : current.pcs.back() + 1);  // would overwrite a replayed register
      joins = callop;                                            // it may start the next range
    }
    if (joins) {
      if (in.op == Opcode::CallOp) {
        if (current.sites.empty()) current.start_pc = pc;
        current.sites.push_back(in.a);
        current.pcs.push_back(pc);
      }
      read.insert(reads.begin(), reads.end());
      written.insert(writes.begin(), writes.end());
      continue;
    }
    // The range ends at its last CallOp (trailing Moves stay interpreted).
    flush(current.pcs.empty() ? pc : current.pcs.back() + 1);
  }
  flush(current.pcs.empty() ? region.end_pc : current.pcs.back() + 1);
  return ranges;
}

}  // namespace shapevm::jit
