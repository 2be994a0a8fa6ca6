// SPDX-License-Identifier: Apache-2.0
// The BytecodeExecutor: a register interpreter over verified bytecode. Dispatch is computed
// goto where the compiler has it and a switch otherwise, both behind SVM_CASE/SVM_NEXT. The
// debugger/trace hook runs before each instruction while one is attached: computed goto then
// dispatches through a second table whose every entry is the hook, so without one SVM_NEXT tests
// nothing (the switch tests a flag). CallOp goes through the site's DispatchSlot: JIT patch
// table first (one acquire load), then the inline cache of the resolved reference kernel (no
// hashing, no string lookup while the signature key is unchanged).
// Invariant: no object with a destructor is alive when SVM_NEXT() runs — a computed goto leaves
// the scope without running cleanups — so case bodies keep such locals in an inner block.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>

#include "bytecode/scalar_ops.h"
#include "support/logging.h"
#include "support/native_stack.h"
#include "support/trace.h"
#include "support/trace_hooks.h"
#include "support/tunables.h"
#include "vm/vm.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#if defined(__GNUC__) && !defined(SHAPEVM_NO_COMPUTED_GOTO)
#define SVM_COMPUTED_GOTO 1
// Labels-as-values is a GNU extension; this file uses it on purpose.
#pragma GCC diagnostic ignored "-Wpedantic"
#else
#define SVM_COMPUTED_GOTO 0
#endif

namespace shapevm {

// ---- time ----

namespace {
struct TickOrigin {
  std::uint64_t ticks;
  std::chrono::steady_clock::time_point time;
};
const TickOrigin& tickOrigin() {
  static const TickOrigin origin{nowTicks(), std::chrono::steady_clock::now()};
  return origin;
}
[[maybe_unused]] const TickOrigin& kInitOrigin = tickOrigin();
}  // namespace

std::uint64_t nowTicks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

double ticksToNanos(std::uint64_t ticks) {
#if defined(__x86_64__)
  // Calibrated against steady_clock over the process lifetime so far (at least 1 ms).
  const TickOrigin& origin = tickOrigin();
  auto elapsed = std::chrono::steady_clock::now() - origin.time;
  double nanos = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  double tick_span = static_cast<double>(nowTicks() - origin.ticks);
  if (nanos < 1e6 || tick_span <= 0) {
    auto start = std::chrono::steady_clock::now();
    std::uint64_t t0 = nowTicks();
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2)) {
    }
    nanos = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    tick_span = static_cast<double>(nowTicks() - t0);
  }
  return static_cast<double>(ticks) * nanos / tick_span;
#else
  return static_cast<double>(ticks);
#endif
}

// ---- construction ----

VirtualMachine::VirtualMachine(std::shared_ptr<Module> module, VmOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  const auto profile_capacity = static_cast<std::size_t>(Tunables::get(Tunable::ProfileEntries));
  for (const Function& fn : module_->functions) {
    auto rt = std::make_unique<FunctionRuntime>();
    rt->slots = std::make_unique<DispatchSlot[]>(fn.op_sites.size());
    rt->profiles = std::make_unique<ProfileBuffer[]>(fn.op_sites.size());
    for (std::size_t i = 0; i < fn.op_sites.size(); ++i) {
      rt->profiles[i].~ProfileBuffer();
      new (&rt->profiles[i]) ProfileBuffer(profile_capacity);
    }
    rt->pc_counts = std::make_unique<std::atomic<std::uint64_t>[]>(fn.code.size());
    rt->loops = std::make_unique<LoopCounters[]>(static_cast<std::size_t>(fn.num_loops));
    int max_id = static_cast<int>(fn.dim_names.size()) - 1;
    for (const Param& p : fn.params) {
      for (const DimToken& d : p.token.dims) max_id = std::max(max_id, static_cast<int>(d.id));
    }
    rt->num_dims = max_id + 1;
    for (const OpSite& site : fn.op_sites) {
      std::vector<FunctionRuntime::OutputCheck> checks;
      for (const TensorDescriptor& token : site.output_tokens) {
        FunctionRuntime::OutputCheck check;
        if (token.is_tensor && !token.any_rank) {
          check.rank = token.rank();
          check.dtype = token.dtype ? static_cast<int>(*token.dtype) : -1;
          for (int d = 0; d < token.rank() && d < kMaxRank; ++d) {
            const DimToken& dim = token.dims[static_cast<std::size_t>(d)];
            check.dims[d] = dim.is_static ? dim.size : -1;
          }
        }
        checks.push_back(check);
      }
      rt->output_checks.push_back(std::move(checks));
      rt->scratch.emplace_back(site.outputs.size());
    }
    runtimes_.push_back(std::move(rt));
  }
  const OpRegistry& registry = OpRegistry::global();
  for (const OpSchema& schema : registry.schemas()) schemas_.push_back(&schema);
}

Expected<std::vector<Value>> VirtualMachine::run(std::string_view function, std::span<const Value> args) {
  int index = module_->findFunction(function);
  if (index < 0) {
    std::string known;
    for (const Function& fn : module_->functions) known += (known.empty() ? "" : ", ") + fn.name;
    return makeError(ErrorCode::UnknownName, "module has no function '{}' (functions: {})", function, known);
  }
  return run(index, args);
}

Expected<std::vector<Value>> VirtualMachine::run(int function, std::span<const Value> args) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (function < 0 || function >= static_cast<int>(module_->functions.size())) {
    return makeError(ErrorCode::UnknownName, "module has no function #{}", function);
  }
  AllocatorStats before = CachingAllocator::global().stats();
  run_start_instructions_ = stats_.instructions;
  elided_frames_ = 0;
  std::vector<Value> results;
  std::optional<RunTrace> run_trace;
  if (trace::kHooksCompiledIn && trace::enabled()) run_trace.emplace(*this, function);
  const std::uint64_t run_start = nowTicks();
  run_epoch_.fetch_add(1, std::memory_order_seq_cst);  // odd: a run is in progress
  // A failed run unwinds every frame without popping its debug frame.
  debug_top_ = nullptr;
  debug_error_reported_ = false;
  Status status = execute(function, args, results, 0);
  run_epoch_.fetch_add(1, std::memory_order_seq_cst);  // even: no frame of this VM is running
  ++stats_.runs;
  stats_.run_ticks += nowTicks() - run_start;
  if (run_trace) run_trace->finish(status);
  if (options_.observer != nullptr) options_.observer->afterRun(*this, function);
  AllocatorStats after = CachingAllocator::global().stats();
  stats_.alloc_requests += static_cast<std::uint64_t>(after.requests - before.requests);
  stats_.system_allocations += static_cast<std::uint64_t>(after.system_allocations - before.system_allocations);
  if (!status.isOk()) return status;
  return results;
}

constexpr std::string_view kFrameContext = "in function ";

Status VirtualMachine::where(Status status, int function, int pc) const {
  const Function& fn = module_->functions[static_cast<std::size_t>(function)];
  const SourceLoc loc =
      pc >= 0 && pc < static_cast<int>(fn.locs.size()) ? fn.locs[static_cast<std::size_t>(pc)] : SourceLoc{};
  // Code inlined from another function names that function, as its own frame did before inlining.
  const bool inlined = loc.inlined >= 0 && static_cast<std::size_t>(loc.inlined) < fn.inlined_functions.size();
  std::string context =
      fmt::format("{}'{}' at PC 0x{:04X}", kFrameContext,
                  inlined ? fn.inlined_functions[static_cast<std::size_t>(loc.inlined)] : fn.name, pc);
  if (loc.line > 0) {
    context += fmt::format(" ({}line {}:{})", module_->source_file.empty() ? "" : module_->source_file + " ",
                           loc.line, loc.col);
  }
  if (inlined) context += fmt::format(", inlined into '{}'", fn.name);
  return status.withContext(context);
}

namespace {

// A frame's registers: in the frame itself for the usual few (no heap block per call), else on the heap.
class FrameRegisters {
 public:
  explicit FrameRegisters(std::size_t count) : size_(count) {
    data_ = count <= kInline ? reinterpret_cast<Value*>(inline_)
                             : static_cast<Value*>(::operator new(count * sizeof(Value)));
    std::uninitialized_value_construct_n(data_, count);
  }
  ~FrameRegisters() {
    std::destroy_n(data_, size_);
    if (data_ != reinterpret_cast<Value*>(inline_)) ::operator delete(data_);
  }
  FrameRegisters(const FrameRegisters&) = delete;
  FrameRegisters& operator=(const FrameRegisters&) = delete;
  Value& operator[](std::size_t i) { return data_[i]; }
  Value* data() { return data_; }
  std::size_t size() const { return size_; }
  Value* begin() { return data_; }
  Value* end() { return data_ + size_; }

 private:
  static constexpr std::size_t kInline = 16;
  alignas(Value) unsigned char inline_[kInline * sizeof(Value)];
  Value* data_;
  std::size_t size_;
};

inline void bumpCounter(std::atomic<std::uint64_t>& counter, std::uint64_t delta = 1) {
  // Single writer (the executing thread); readers (the JIT) only load.
  counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
}

Status checkOutputs(const OpSchema& schema, std::span<const FunctionRuntime::OutputCheck> checks,
                    std::span<const Value> outputs) {
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const FunctionRuntime::OutputCheck& check = checks[i];
    if (check.rank < 0) continue;
    if (!outputs[i].isTensor()) {
      return makeError(ErrorCode::KindMismatch, "op '{}' output {} is {}, but its token says tensor", schema.name, i,
                       outputs[i].describe());
    }
    const Tensor& t = outputs[i].tensor();
    bool ok = t.rank() == check.rank && (check.dtype < 0 || static_cast<int>(t.dtype()) == check.dtype);
    for (int d = 0; ok && d < check.rank; ++d) ok = check.dims[d] < 0 || check.dims[d] == t.dim(d);
    if (!ok) {
      std::string token = check.dtype >= 0 ? std::string(dtypeShortName(static_cast<DType>(check.dtype))) + "[" : "[";
      for (int d = 0; d < check.rank; ++d) token += (d ? "," : "") + (check.dims[d] < 0 ? std::string("?") : std::to_string(check.dims[d]));
      return makeError(ErrorCode::ShapeMismatch, "op '{}' output {} is {} but its shape token says {}]", schema.name, i,
                       t.describe(), token);
    }
  }
  return Status::ok();
}

}  // namespace

// ---- the interpreter loop ----

Status VirtualMachine::execute(int function, std::span<const Value> args, std::vector<Value>& results, int depth) {
  const Function& fn = module_->functions[static_cast<std::size_t>(function)];
  FunctionRuntime& rt = *runtimes_[static_cast<std::size_t>(function)];
  if (depth >= Tunables::get(Tunable::MaxCallDepth)) {
    return makeError(ErrorCode::LimitExceeded, "call depth {} exceeded entering function '{}' (tunable max_call_depth)",
                     depth, fn.name);
  }
  if (!nativeStackHasRoom()) {  // each call nests a native frame; a thread's stack holds what it holds
    return makeError(ErrorCode::LimitExceeded,
                     "call depth {} entering function '{}' would overflow the native stack ({} KiB left); lower "
                     "tunable max_call_depth or run on a thread with a bigger stack",
                     depth, fn.name, nativeStackLeft() / 1024);
  }
  if (args.size() != fn.params.size()) {
    std::string names;
    for (const Param& p : fn.params) names += (names.empty() ? "" : ", ") + p.name;
    return makeError(ErrorCode::InvalidArgument, "function '{}' takes {} arguments ({}), got {}", fn.name,
                     fn.params.size(), names, args.size());
  }
  bumpCounter(rt.calls);
  ++stats_.function_calls;

  FrameRegisters regs(static_cast<std::size_t>(fn.num_registers));
  // The outputs go straight into `results` (the caller's; it only reads them after a success).
  std::vector<Value>& outputs = results;
  outputs.clear();
  outputs.resize(static_cast<std::size_t>(fn.num_outputs));
  // Dynamic dims bound by the parameters, and the parameter that bound each: inline for the usual few.
  constexpr int kInlineDims = 16;
  std::int64_t inline_dims[kInlineDims];
  int inline_owners[kInlineDims];
  std::vector<std::int64_t> heap_dims;
  std::vector<int> heap_owners;
  std::int64_t* dims = inline_dims;
  int* dim_owner = inline_owners;
  if (rt.num_dims > kInlineDims) {
    heap_dims.resize(static_cast<std::size_t>(rt.num_dims));
    heap_owners.resize(static_cast<std::size_t>(rt.num_dims));
    dims = heap_dims.data();
    dim_owner = heap_owners.data();
  }
  std::fill_n(dims, rt.num_dims, std::int64_t{-1});
  std::fill_n(dim_owner, rt.num_dims, -1);
  std::vector<std::uint64_t> loop_start(static_cast<std::size_t>(fn.num_loops), 0);

  const Instruction* const code = fn.code.data();
  const OpRegistry& registry = OpRegistry::global();
  const bool profile = options_.profile;
  const bool check_tokens = options_.check_tokens;
  ExecutionObserver* const observer = options_.observer;
  // SHAPEVM_TRACE_HOOKS=OFF (support/trace_hooks.h): no debugger, no timeline; every hook folds away.
  DebugHook* const debug = options_.debug;
  const bool tracing = trace::kHooksCompiledIn && (static_cast<bool>(options_.trace) || debug != nullptr);
  DebugFrame debug_frame{function, 0, depth, std::span<const Value>(regs), debug_top_};
  if (trace::kHooksCompiledIn && debug != nullptr) debug_top_ = &debug_frame;
  const bool trace_ops = trace::kHooksCompiledIn && trace::opsEnabled();  // --trace-ops: an event per op
  const bool count_allocations = options_.count_allocations;
  const std::int64_t max_steps = Tunables::get(Tunable::MaxSteps);
  std::uint64_t executed = 0;
  int pc = 0;
  const Instruction* in = nullptr;
  Status status;

  constexpr int kInlineInputs = 16;
  const Value* input_buffer[kInlineInputs];
  std::vector<const Value*> input_overflow;

#define SVM_FAIL(expr)       \
  do {                       \
    status = (expr);         \
    goto fail;               \
  } while (0)
#define SVM_TRY(expr)                       \
  do {                                      \
    Status svm_try_ = (expr);               \
    if (!svm_try_.isOk()) SVM_FAIL(std::move(svm_try_)); \
  } while (0)
#define SVM_TRACE()                                                         \
  do {                                                                      \
    if (tracing) {                                                          \
      if (options_.trace) SVM_TRY(options_.trace(function, pc));            \
      debug_frame.pc = pc;                                                  \
      if (debug != nullptr) SVM_TRY(debug->beforeInstruction(debug_frame)); \
    }                                                                       \
  } while (0)
  // The step budget counts instructions; checking it at control transfers is enough, since
  // straight-line code between two of them is bounded by the function's length.
#define SVM_BRANCH_BUDGET()                                                                           \
  do {                                                                                                \
    if (max_steps > 0 && stats_.instructions + executed - run_start_instructions_ >                   \
                             static_cast<std::uint64_t>(max_steps))                                   \
      SVM_FAIL(makeError(ErrorCode::LimitExceeded, "step budget of {} instructions exceeded (tunable max_steps)", \
                         max_steps));                                                                 \
  } while (0)
#define R(i) regs[static_cast<std::size_t>(i)]

#if SVM_COMPUTED_GOTO
  static void* const kLabels[] = {
#define SVM_OPCODE(name, format, meaning) &&op_##name,
#include "bytecode/opcodes.def"
#undef SVM_OPCODE
  };
  static_assert(sizeof(kLabels) / sizeof(kLabels[0]) == kNumOpcodes, "dispatch table covers every opcode");
  // With a hook attached every instruction dispatches through `hooked`, which calls it and then
  // goes on to the instruction; without one, dispatch goes straight there (no per-instruction test).
  static void* const kHookedLabels[] = {
#define SVM_OPCODE(name, format, meaning) &&hooked,
#include "bytecode/opcodes.def"
#undef SVM_OPCODE
  };
  void* const* const labels = tracing ? kHookedLabels : kLabels;
#define SVM_CASE(name) op_##name:
#define SVM_NEXT()                                           \
  do {                                                       \
    in = &code[pc];                                          \
    bumpCounter(rt.pc_counts[static_cast<std::size_t>(pc)]); \
    ++executed;                                              \
    goto* labels[static_cast<int>(in->op)];                  \
  } while (0)
  SVM_NEXT();
hooked:
  SVM_TRACE();
  goto* kLabels[static_cast<int>(in->op)];
#else
#define SVM_CASE(name) case Opcode::name:
#define SVM_NEXT() goto dispatch
dispatch:
  in = &code[pc];
  bumpCounter(rt.pc_counts[static_cast<std::size_t>(pc)]);
  ++executed;
  SVM_TRACE();
  switch (in->op) {
#endif

  SVM_CASE(Nop) { ++pc; SVM_NEXT(); }
  SVM_CASE(Move) {
    R(in->a) = R(in->b);
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(LoadConst) {
    R(in->a) = module_->constants[static_cast<std::size_t>(in->b)].value;
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(LoadTensor) {
    const Param& param = fn.params[static_cast<std::size_t>(in->b)];
    const Value& arg = args[static_cast<std::size_t>(in->b)];
    if (!arg.isTensor()) {
      SVM_FAIL(makeError(ErrorCode::KindMismatch, "parameter '{}' must be a tensor {}, got {}", param.name,
                         param.token.toString(), arg.describe()));
    }
    const Tensor& t = arg.tensor();
    // The parameter's name is formatted into the error only when the check fails (every call pays the check).
    if (!param.token.check(t, {}).isOk()) SVM_FAIL(param.token.check(t, fmt::format("parameter '{}'", param.name)));
    for (std::size_t d = 0; d < param.token.dims.size() && !param.token.any_rank; ++d) {
      int id = param.token.dims[d].id;
      if (param.token.dims[d].is_static || id < 0) continue;
      auto& bound = dims[static_cast<std::size_t>(id)];
      if (bound < 0) {
        bound = t.dim(static_cast<int>(d));
        dim_owner[static_cast<std::size_t>(id)] = in->b;
      } else if (bound != t.dim(static_cast<int>(d))) {
        const std::string& dim_name = static_cast<std::size_t>(id) < fn.dim_names.size() ? fn.dim_names[static_cast<std::size_t>(id)] : "";
        const Param& owner = fn.params[static_cast<std::size_t>(dim_owner[static_cast<std::size_t>(id)])];
        SVM_FAIL(makeError(ErrorCode::ShapeMismatch,
                           "dynamic dim ?{}{} is {} in parameter '{}' {} but {} in parameter '{}' {}", id,
                           dim_name.empty() ? "" : " (" + dim_name + ")", bound, owner.name,
                           args[static_cast<std::size_t>(dim_owner[static_cast<std::size_t>(id)])].tensor().shape().toString(),
                           t.dim(static_cast<int>(d)), param.name, t.shape().toString()));
      }
    }
    R(in->a) = arg;
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(LoadArg) {
    const Param& param = fn.params[static_cast<std::size_t>(in->b)];
    const Value& arg = args[static_cast<std::size_t>(in->b)];
    bool ok = param.kind == arg.kind() || (param.kind == ValueKind::Float && (arg.isInt() || arg.isBool())) ||
              (param.kind == ValueKind::Int && arg.isBool());
    if (!ok) {
      SVM_FAIL(makeError(ErrorCode::KindMismatch, "parameter '{}' must be {}, got {}", param.name,
                         valueKindName(param.kind), arg.describe()));
    }
    R(in->a) = param.kind == ValueKind::Float && !arg.isFloat() ? Value::fromFloat(arg.toDouble())
             : param.kind == ValueKind::Int && arg.isBool()     ? Value::fromInt(arg.asBool())
                                                                : arg;
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(CallOp) {
    const OpSite& site = fn.op_sites[static_cast<std::size_t>(in->a)];
    DispatchSlot& slot = rt.slots[static_cast<std::size_t>(in->a)];
    // seq_cst (a plain load on x86-64): ordered after this run's epoch bump, which is what lets
    // the patch manager retire a replaced table once the epoch moves on (see runEpoch()).
    const PatchTable* table = slot.patched.load(std::memory_order_seq_cst);
    const double trace_start_us = trace_ops ? trace::nowUs() : 0;
    if (table != nullptr && table->has_region) {
      const std::uint64_t region_start = profile ? nowTicks() : 0;
      bool ran = false;
      for (const CompiledEntry& entry : table->entries) {
        if (entry.region != nullptr &&
            (!trace::kHooksCompiledIn || debug == nullptr || debug->allowRegion(function, pc, entry.resume_pc)) &&
            entry.region(entry.state, std::span<Value>(regs))) {
          bumpCounter(slot.calls);
          bumpCounter(slot.compiled_calls);
          bumpCounter(slot.region_calls);
          ++stats_.op_calls;
          ++stats_.compiled_calls;
          if (profile) {
            const std::uint64_t elapsed = nowTicks() - region_start;
            bumpCounter(slot.ticks, elapsed);
            bumpCounter(slot.region_ticks, elapsed);
          }
          if (trace_ops) traceOpEvent(fn, in->a, pc, trace_start_us, &entry);
          pc = entry.resume_pc;
          ran = true;
          break;
        }
        if (entry.region != nullptr) ++stats_.region_declines;
      }
      if (ran) SVM_NEXT();
      bumpCounter(slot.region_declines);
      if (trace::kHooksCompiledIn && trace::enabled()) traceFallback(fn, in->a, pc, "region declined");
    }
    const std::size_t count = site.inputs.size();
    const Value** inputs_ptr = input_buffer;
    if (count > kInlineInputs) {
      input_overflow.resize(count);
      inputs_ptr = input_overflow.data();
    }
    for (std::size_t i = 0; i < count; ++i) {
      std::int32_t r = site.inputs[i];
      inputs_ptr[i] = r < 0 ? nullptr : &R(r);
    }
    std::span<const Value* const> inputs(inputs_ptr, count);
    std::vector<Value>& outs = rt.scratch[static_cast<std::size_t>(in->a)];
    const std::uint64_t start = profile ? nowTicks() : 0;
    const std::uint64_t call_number = slot.calls.load(std::memory_order_relaxed) + 1;
    slot.calls.store(call_number, std::memory_order_relaxed);
    ++stats_.op_calls;
    if (profile) rt.profiles[static_cast<std::size_t>(in->a)].record(inputs, call_number);

    // Hand each output register's previous tensor to the kernel (compiled or reference) for
    // reuse, unless an input reads that register (then it must stay put until the kernel is done).
    for (std::size_t o = 0; o < site.outputs.size(); ++o) {
      const std::int32_t reg = site.outputs[o];
      bool read = false;
      for (std::int32_t r : site.inputs) read = read || r == reg;
      if (!read) outs[o] = std::move(R(reg));
    }
    bool done = false;
    if (table != nullptr) {
      for (const CompiledEntry& entry : table->entries) {
        if (entry.fn != nullptr && entry.guard.passes(inputs) && entry.fn(entry.state, inputs, outs)) {
          done = true;
          bumpCounter(slot.compiled_calls);
          ++stats_.compiled_calls;
          break;
        }
      }
      if (!done) {
        bumpCounter(slot.guard_misses);
        ++stats_.guard_misses;
        if (trace::kHooksCompiledIn && trace::enabled()) traceFallback(fn, in->a, pc, "guard miss", inputs);
      }
    }
    const std::int64_t allocations_before = count_allocations ? CachingAllocator::global().stats().requests : 0;
    if (!done) {
      const OpSchema& schema = *schemas_[static_cast<std::size_t>(site.op)];
      const std::uint64_t key = signatureKey(inputs);
      if (key != slot.ic_key || key == ~std::uint64_t{0}) {
        Status check = checkInputs(schema, inputs);
        if (!check.isOk()) SVM_FAIL(check.withContext(fmt::format("{}({})", schema.name, describeInputs(inputs))));
        slot.ic_entry = &registry.resolve(site.op, inputs);
        slot.ic_key = key;
        ++slot.ic_misses;
        ++stats_.ic_misses;
      }
      OpContext ctx{&schema, inputs, site.attrs, outs};
      SVM_TRY(invokeKernel(*slot.ic_entry, ctx));
    }
    if (check_tokens) {
      SVM_TRY(checkOutputs(*schemas_[static_cast<std::size_t>(site.op)], rt.output_checks[static_cast<std::size_t>(in->a)], outs));
    }
    for (std::size_t i = 0; i < site.outputs.size(); ++i) R(site.outputs[i]) = std::move(outs[i]);
    if (profile) bumpCounter(slot.ticks, nowTicks() - start);
    if (count_allocations) {
      bumpCounter(slot.allocations,
                  static_cast<std::uint64_t>(CachingAllocator::global().stats().requests - allocations_before));
    }
    if (trace_ops) traceOpEvent(fn, in->a, pc, trace_start_us, nullptr, done);
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(Call) {
    SVM_BRANCH_BUDGET();
    {
      const CallSite& call = fn.call_sites[static_cast<std::size_t>(in->a)];
      std::vector<Value> call_args;
      call_args.reserve(call.args.size());
      for (std::int32_t r : call.args) call_args.push_back(R(r));
      std::vector<Value> call_results;
      stats_.instructions += executed;
      executed = 0;
      Status inner = execute(call.callee, call_args, call_results, depth + 1);
      if (!inner.isOk()) {
        // A deep recursion's traceback keeps the innermost frame and the outermost kTracebackFrames.
        if (depth >= kTracebackFrames && inner.message().starts_with(kFrameContext)) {
          ++elided_frames_;
          return inner;
        }
        if (elided_frames_ > 0) {
          inner.withContext(fmt::format("... {} more calls ...", elided_frames_));
          elided_frames_ = 0;
        }
        SVM_FAIL(std::move(inner));
      }
      for (std::size_t i = 0; i < call.results.size(); ++i) R(call.results[i]) = std::move(call_results[i]);
    }
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(StoreTensor) {
    outputs[static_cast<std::size_t>(in->b)] = R(in->a);
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(Return) {
    stats_.instructions += executed;
    if (trace::kHooksCompiledIn && debug != nullptr) debug_top_ = debug_frame.caller;
    return Status::ok();
  }
  SVM_CASE(Jump) {
    SVM_BRANCH_BUDGET();
    pc = in->a;
    SVM_NEXT();
  }
  SVM_CASE(BranchIf) {
    SVM_BRANCH_BUDGET();
    const Value& cond = R(in->a);
    bool truth;
    if (cond.isBool()) {
      truth = cond.asBool();
    } else {
      auto t = truthValue(cond);
      if (!t) SVM_FAIL(std::move(t).status().withContext("BranchIf condition"));
      truth = *t;
    }
    pc = truth ? in->b : in->c;
    SVM_NEXT();
  }
  SVM_CASE(LoopStart) {
    if (profile) loop_start[static_cast<std::size_t>(in->a)] = nowTicks();
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(LoopEnd) {
    LoopCounters& loop = rt.loops[static_cast<std::size_t>(in->a)];
    bumpCounter(loop.iterations);
    if (profile) bumpCounter(loop.ticks, nowTicks() - loop_start[static_cast<std::size_t>(in->a)]);
    // Mid-run hotness: a long loop may become hot inside one run.
    if (observer != nullptr && loop.iterations.load(std::memory_order_relaxed) % kLoopPollInterval == 0) {
      observer->onLoopPoll(*this, function, in->a);
    }
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(Assert) {
    {
      auto truth = truthValue(R(in->a));
      if (!truth) SVM_FAIL(std::move(truth).status().withContext("assert condition"));
      if (!*truth) {
        SVM_FAIL(makeError(ErrorCode::AssertionFailed, "assertion failed: {}",
                           module_->constants[static_cast<std::size_t>(in->b)].text));
      }
    }
    ++pc;
    SVM_NEXT();
  }
#define SVM_SCALAR_BINARY(name)                                   \
  SVM_CASE(name) {                                                \
    const Value& lhs = R(in->b);                                  \
    const Value& rhs = R(in->c);                                  \
    if (lhs.isInt() && rhs.isInt()) {                             \
      if constexpr (Opcode::name == Opcode::Add) {                \
        std::int64_t out;                                         \
        if (!__builtin_add_overflow(lhs.asInt(), rhs.asInt(), &out)) { \
          R(in->a) = Value::fromInt(out);                         \
          ++pc;                                                   \
          SVM_NEXT();                                             \
        }                                                         \
      }                                                           \
    }                                                             \
    {                                                             \
      auto value = scalarBinary(Opcode::name, lhs, rhs);          \
      if (!value) SVM_FAIL(std::move(value).status());            \
      R(in->a) = std::move(*value);                               \
    }                                                             \
    ++pc;                                                         \
    SVM_NEXT();                                                   \
  }
  SVM_SCALAR_BINARY(Add)
  SVM_SCALAR_BINARY(Sub)
  SVM_SCALAR_BINARY(Mul)
  SVM_SCALAR_BINARY(Div)
  SVM_SCALAR_BINARY(FloorDiv)
  SVM_SCALAR_BINARY(Mod)
  SVM_SCALAR_BINARY(Pow)
  SVM_SCALAR_BINARY(Min)
  SVM_SCALAR_BINARY(Max)
  SVM_SCALAR_BINARY(Lt)
  SVM_SCALAR_BINARY(Le)
  SVM_SCALAR_BINARY(Gt)
  SVM_SCALAR_BINARY(Ge)
  SVM_SCALAR_BINARY(Eq)
  SVM_SCALAR_BINARY(Ne)
  SVM_SCALAR_BINARY(And)
  SVM_SCALAR_BINARY(Or)
#undef SVM_SCALAR_BINARY
#define SVM_SCALAR_UNARY(name)                            \
  SVM_CASE(name) {                                        \
    {                                                     \
      auto value = scalarUnary(Opcode::name, R(in->b));   \
      if (!value) SVM_FAIL(std::move(value).status());    \
      R(in->a) = std::move(*value);                       \
    }                                                     \
    ++pc;                                                 \
    SVM_NEXT();                                           \
  }
  SVM_SCALAR_UNARY(Neg)
  SVM_SCALAR_UNARY(Not)
  SVM_SCALAR_UNARY(Abs)
  SVM_SCALAR_UNARY(ToInt)
  SVM_SCALAR_UNARY(ToFloat)
  SVM_SCALAR_UNARY(ToBool)
#undef SVM_SCALAR_UNARY
  SVM_CASE(ShapeOf) {
    const Value& v = R(in->b);
    if (!v.isTensor()) SVM_FAIL(makeError(ErrorCode::KindMismatch, "ShapeOf needs a tensor, got {}", v.describe()));
    R(in->a) = Value::fromInts(v.tensor().shape().span());
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(DimOf) {
    const Value& v = R(in->b);
    if (!v.isTensor()) SVM_FAIL(makeError(ErrorCode::KindMismatch, "DimOf needs a tensor, got {}", v.describe()));
    const int rank = v.tensor().rank();
    std::int64_t axis = in->c < 0 ? in->c + rank : in->c;
    if (axis < 0 || axis >= rank) {
      SVM_FAIL(makeError(ErrorCode::IndexOutOfRange, "shape index {} is out of range for {} (rank {})", in->c,
                         v.tensor().describe(), rank));
    }
    R(in->a) = Value::fromInt(v.tensor().dim(static_cast<int>(axis)));
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(RankOf) {
    const Value& v = R(in->b);
    if (!v.isTensor()) SVM_FAIL(makeError(ErrorCode::KindMismatch, "RankOf needs a tensor, got {}", v.describe()));
    R(in->a) = Value::fromInt(v.tensor().rank());
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(TuplePack) {
    {
      std::vector<Value> items;
      items.reserve(static_cast<std::size_t>(in->c));
      for (std::int32_t i = 0; i < in->c; ++i) items.push_back(R(fn.operand_pool[static_cast<std::size_t>(in->b + i)]));
      R(in->a) = Value::fromTuple(std::move(items));
    }
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(TupleUnpack) {
    {
      Value tuple = R(in->a);  // copy: a target register may be the tuple's own
      if (!tuple.isTuple()) SVM_FAIL(makeError(ErrorCode::KindMismatch, "TupleUnpack needs a tuple, got {}", tuple.describe()));
      if (tuple.tuple().size() != static_cast<std::size_t>(in->c)) {
        SVM_FAIL(makeError(ErrorCode::InvalidArgument, "cannot unpack {} ({} items) into {} registers", tuple.describe(),
                           tuple.tuple().size(), in->c));
      }
      for (std::int32_t i = 0; i < in->c; ++i) R(fn.operand_pool[static_cast<std::size_t>(in->b + i)]) = tuple.tuple()[static_cast<std::size_t>(i)];
    }
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(TupleGet) {
    const Value& tuple = R(in->b);
    if (!tuple.isTuple()) SVM_FAIL(makeError(ErrorCode::KindMismatch, "TupleGet needs a tuple, got {}", tuple.describe()));
    {
      auto index = R(in->c).toInt("tuple index");
      if (!index) SVM_FAIL(std::move(index).status());
      const auto size = static_cast<std::int64_t>(tuple.tuple().size());
      std::int64_t i = *index < 0 ? *index + size : *index;
      if (i < 0 || i >= size) {
        SVM_FAIL(makeError(ErrorCode::IndexOutOfRange, "tuple index {} is out of range for {} ({} items)", *index,
                           tuple.describe(), size));
      }
      Value item = tuple.tuple()[static_cast<std::size_t>(i)];
      R(in->a) = std::move(item);
    }
    ++pc;
    SVM_NEXT();
  }
  SVM_CASE(TupleLen) {
    const Value& tuple = R(in->b);
    if (!tuple.isTuple()) SVM_FAIL(makeError(ErrorCode::KindMismatch, "TupleLen needs a tuple, got {}", tuple.describe()));
    R(in->a) = Value::fromInt(static_cast<std::int64_t>(tuple.tuple().size()));
    ++pc;
    SVM_NEXT();
  }
#if !SVM_COMPUTED_GOTO
    case Opcode::kCount: break;
  }
  SVM_FAIL(makeError(ErrorCode::Internal, "invalid opcode {}", static_cast<int>(in->op)));
#endif

fail:
  stats_.instructions += executed;
status = where(std::move(status), function, pc);
if (trace::kHooksCompiledIn && debug != nullptr && !debug_error_reported_) {  // the innermost frame, before it unwinds
  debug_error_reported_ = true;
  debug_frame.pc = pc;
  debug->onError(debug_frame, status);
}
return status;

#undef SVM_FAIL
#undef SVM_TRY
#undef SVM_TRACE
#undef SVM_BRANCH_BUDGET
#undef SVM_CASE
#undef SVM_NEXT
#undef R
}

}  // namespace shapevm
