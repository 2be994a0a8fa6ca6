// SPDX-License-Identifier: Apache-2.0
// VirtualMachine: runs a verified Module. Owns the runtime state that sits beside the static
// module — one DispatchSlot and ProfileBuffer per CallOp site, per-PC execution counters, loop
// region counters — which the JIT (a higher layer) reads and patches through DispatchSlot.
// One call runs at a time per VirtualMachine (run() serializes callers).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "bytecode/module.h"
#include "vm/dispatch_slot.h"
#include "vm/profile.h"

namespace shapevm {

// Monotonic timestamp ticks (TSC on x86-64) and their conversion to nanoseconds.
std::uint64_t nowTicks();
double ticksToNanos(std::uint64_t ticks);

struct LoopCounters {
  std::atomic<std::uint64_t> iterations{0};
  std::atomic<std::uint64_t> ticks{0};
};

// Runtime state of one function, parallel to its static tables.
struct FunctionRuntime {
  std::unique_ptr<DispatchSlot[]> slots;        // per op site
  std::unique_ptr<ProfileBuffer[]> profiles;    // per op site
  std::unique_ptr<std::atomic<std::uint64_t>[]> pc_counts;  // per instruction
  std::unique_ptr<LoopCounters[]> loops;        // per loop region
  std::atomic<std::uint64_t> calls{0};
  int num_dims = 0;                             // dynamic dim ids 0..num_dims-1
  // Per op site output check: rank, dtype (-1 any) and static dims (-1 dynamic), from the tokens at load.
  struct OutputCheck {
    int rank = -1;  // -1: not checked (any rank / not a tensor)
    int dtype = -1;
    std::int64_t dims[kMaxRank];
  };
  std::vector<std::vector<OutputCheck>> output_checks;
  std::vector<std::vector<Value>> scratch;      // per op site: kernel output buffer
};

struct ExecStats {
  std::uint64_t instructions = 0;
  std::uint64_t op_calls = 0;           // CallOp executions
  std::uint64_t compiled_calls = 0;     // ... of which ran a compiled (JIT) entry
  std::uint64_t guard_misses = 0;       // patched site whose guards all failed
  std::uint64_t region_declines = 0;    // compiled region entries that declined (each entry tried counts)
  std::uint64_t ic_misses = 0;          // inline-cache re-resolutions
  std::uint64_t function_calls = 0;
  std::uint64_t alloc_requests = 0;     // tensor allocations requested (CachingAllocator)
  std::uint64_t system_allocations = 0; // ... that reached the system allocator
  std::uint64_t runs = 0;               // top-level run() calls
  std::uint64_t run_ticks = 0;          // their time, summed (timestamp ticks)
};

class VirtualMachine;

// The hook through which a higher layer (the JIT) watches execution. Called on the interpreter
// thread; implementations must return quickly and never wait for compiles.
class ExecutionObserver {
 public:
  virtual ~ExecutionObserver() = default;
  // After every top-level run() (successful or not), outside any frame.
  virtual void afterRun(VirtualMachine& vm, int function) = 0;
  // Every kLoopPollInterval iterations of a loop region, inside the run.
  virtual void onLoopPoll(VirtualMachine& vm, int function, int loop) = 0;
};
inline constexpr std::uint64_t kLoopPollInterval = 16;

// One interpreter frame as the debugger sees it (valid only during the DebugHook call).
struct DebugFrame {
  int function = 0;
  int pc = 0;
  int depth = 0;                     // 0 = the run's entry function
  std::span<const Value> registers;  // the frame's registers
  const DebugFrame* caller = nullptr;
};

// The debugger's hook (src/debug). With none attached the interpreter pays one predictable branch
// per instruction (shared with `trace`).
class DebugHook {
 public:
  virtual ~DebugHook() = default;
  // Before every instruction of every frame; an error stops the run.
  virtual Status beforeInstruction(const DebugFrame& frame) = 0;
  // Before a compiled region entry covering [pc, resume_pc) runs: false makes it decline for this
  // execution (the range runs interpreted, op by op; results never change).
  virtual bool allowRegion(int function, int pc, int resume_pc) = 0;
  // Once per failed run, in the innermost frame, before any frame unwinds: `error` carries the
  // function, PC and line (post-mortem inspection of the registers that led to it).
  virtual void onError(const DebugFrame& frame, const Status& error) {
    (void)frame;
    (void)error;
  }
};

struct VmOptions {
  bool profile = true;       // per-site timing and ProfileBuffer recording
  bool check_tokens = true;  // check CallOp outputs against their tokens' rank/dtype/static dims
  bool count_allocations = false;  // per-site allocation counts (--profile; costs two allocator reads per op)
  // Called before every instruction when set (the debugger's hook); returning an error stops the run.
  std::function<Status(int function, int pc)> trace;
  // The debugger (not owned); nullptr = none attached.
  DebugHook* debug = nullptr;
  // The JIT's hook (not owned); nullptr = interpret only.
  ExecutionObserver* observer = nullptr;
};

class VirtualMachine {
 public:
  // The module must already be verified (loadModuleFile does that).
  explicit VirtualMachine(std::shared_ptr<Module> module, VmOptions options = {});

  // Runs `function` with `args` (matched to its parameters by position) and returns its
  // outputs in slot order. Errors carry function, PC and source line.
  Expected<std::vector<Value>> run(int function, std::span<const Value> args);
  Expected<std::vector<Value>> run(std::string_view function, std::span<const Value> args);

  const Module& module() const { return *module_; }
  std::shared_ptr<Module> sharedModule() const { return module_; }
  FunctionRuntime& runtime(int function) { return *runtimes_[static_cast<std::size_t>(function)]; }
  const ExecStats& stats() const { return stats_; }
  void resetStats() { stats_ = ExecStats{}; }
  VmOptions& options() { return options_; }
  // Odd while a run() is in progress, even between runs; bumped (seq_cst) at run entry and exit.
  // A patch table unpublished when the epoch was E can be freed once runEpoch() != E or E is even.
  std::uint64_t runEpoch() const { return run_epoch_.load(std::memory_order_seq_cst); }

 private:
  Status execute(int function, std::span<const Value> args, std::vector<Value>& results, int depth);
  Status where(Status status, int function, int pc) const;

  std::shared_ptr<Module> module_;
  VmOptions options_;
  std::vector<std::unique_ptr<FunctionRuntime>> runtimes_;
  std::vector<const OpSchema*> schemas_;
  ExecStats stats_;
  std::uint64_t run_start_instructions_ = 0;  // stats_.instructions when the current run() began
  static constexpr int kTracebackFrames = 8;  // outermost frames an error names (plus the innermost)
  std::int64_t elided_frames_ = 0;            // frames of the failing run's traceback left out so far
  std::mutex run_mutex_;
  std::atomic<std::uint64_t> run_epoch_{0};
  const DebugFrame* debug_top_ = nullptr;  // innermost frame while a debugger is attached
  bool debug_error_reported_ = false;      // this run's error went to DebugHook::onError
};

}  // namespace shapevm
