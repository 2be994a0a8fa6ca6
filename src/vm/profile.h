// SPDX-License-Identifier: Apache-2.0
// ProfileBuffer: a bounded history of the distinct (shape, dtype, strides) signatures a CallOp
// site has seen, with a count each. Recording compares with the newest record first, so a
// site whose signature does not change pays one comparison. Read by the JIT's shape inference
// under the buffer's mutex (the interpreter holds it only when a new signature appears).
// Also the VM's observability: the profile report (--profile: one row per op site and per compiled
// region, from the dispatch slots' counters) and the interpreter's timeline events (support/trace.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "bytecode/module.h"
#include "shapevm/value.h"
#include "vm/dispatch_slot.h"

namespace shapevm {

struct OperandProfile {
  bool is_tensor = false;
  DType dtype = DType::Float32;
  Shape shape;
  Shape strides;
  ValueKind kind = ValueKind::None;  // non-tensors: None (omitted input), Int, Float, Bool, Tuple
  double scalar = 0.0;               // non-tensors: the value when first recorded (an example)
  bool operator==(const OperandProfile& other) const {
    return is_tensor == other.is_tensor && dtype == other.dtype && shape == other.shape && strides == other.strides &&
           kind == other.kind;
  }
};

// A snapshot of one record.
struct ProfileRecord {
  std::vector<OperandProfile> inputs;
  std::uint64_t count = 0;
  std::uint64_t last_seen = 0;  // site call number when last seen
  std::string toString() const; // "f32(640,128) x f32(128,1024)"
};

// Single writer (the interpreter thread), any number of readers (the JIT). The writer
// compares against the newest record without locking (only it changes the records' contents)
// and bumps that record's atomic count; it takes the mutex only to add or evict a record,
// which is also what snapshot() holds while copying.
class ProfileBuffer {
 public:
  explicit ProfileBuffer(std::size_t capacity = 16);
  void record(std::span<const Value* const> inputs, std::uint64_t call_number);
  std::vector<ProfileRecord> snapshot() const;
  std::uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::vector<OperandProfile> inputs;
    std::atomic<std::uint64_t> count{0};
    std::atomic<std::uint64_t> last_seen{0};
  };
  static bool matches(const Slot& slot, std::span<const Value* const> inputs);
  static void bump(Slot& slot, std::uint64_t call_number);
  mutable std::mutex mutex_;
  std::unique_ptr<Slot[]> slots_;
  std::size_t capacity_ = 0;
  std::atomic<std::size_t> size_{0};
  std::size_t newest_ = 0;
  std::atomic<std::uint64_t> evictions_{0};
};

class VirtualMachine;

// ---- the profile report (`shapevm run --profile`, `--profile-json`) ----

struct ProfileRow {
  std::string kind;  // "op", "region" (a compiled fused range starting at pc) or "other" (the rest of the run)
  int pc = -1;       // op: its CallOp; region: its first CallOp
  int end_pc = -1;   // region: its last PC
  std::string name;  // op name; region: "region"
  std::uint64_t calls = 0;
  double total_ms = 0;
  double mean_us = 0;
  double share = 0;                             // of the function's run time (fraction)
  std::uint64_t compiled = 0, interpreted = 0;  // launches
  std::uint64_t guard_misses = 0;               // op: compiled entries rejected the shapes; region: declines
  std::uint64_t allocations = 0;                // tensors allocated (counted with VmOptions::count_allocations)
  std::string signatures;                       // op: the shapes seen, with counts
};
struct FunctionProfile {
  std::string function;
  std::uint64_t calls = 0;
  double run_ms = 0;  // the entry function: every run's time; a callee: its rows' total
  std::vector<ProfileRow> rows;
};
// Every function that ran. Region rows need the regions' PC ranges: call it while no compile is
// being installed (after the runs, with the JIT stopped or idle).
std::vector<FunctionProfile> buildProfile(VirtualMachine& vm, int entry_function);
std::string profileText(const std::vector<FunctionProfile>& profile);
std::string profileJson(const std::vector<FunctionProfile>& profile);

// ---- timeline hooks (called only while support/trace.h's tracing is on) ----

// One top-level run: the run event, then per op site and compiled region what it ran in this run
// (aggregated: calls and time), laid out one after another inside the run's span.
class RunTrace {
 public:
  RunTrace(VirtualMachine& vm, int function);
  void finish(const Status& status);

 private:
  struct Counters {
    std::uint64_t calls = 0, compiled = 0, ticks = 0, region_calls = 0, region_ticks = 0, misses = 0;
  };
  static Counters read(const DispatchSlot& slot);
  VirtualMachine& vm_;
  int function_;
  double start_us_;
  std::vector<std::vector<Counters>> before_;  // per function, per op site
};
// --trace-ops: one event per op (or region) execution.
void traceOpEvent(const Function& fn, int site, int pc, double start_us, const CompiledEntry* region,
                  bool compiled = false);
// A guard miss or a region's decline (instant event).
void traceFallback(const Function& fn, int site, int pc, const char* what, std::span<const Value* const> inputs = {});

}  // namespace shapevm
