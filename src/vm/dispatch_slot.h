// SPDX-License-Identifier: Apache-2.0
// A CallOp site's dispatch slot: the interpreter's inline cache (last resolved reference
// kernel per input signature key) and the JIT's patch table. The patch table pointer is the
// ONLY thing the JIT changes, and only through its RuntimePatchManager: it publishes a new
// immutable PatchTable with a release store; the interpreter reads it with one acquire load and
// never locks. Replaced tables are retired by the patch manager once no frame can be using them.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "ops/registry.h"
#include "shapevm/value.h"
#include "tensor/dim_range.h"

namespace shapevm {

// What a compiled entry requires of its inputs; checked at the slot before every compiled call.
struct InputGuard {
  bool is_tensor = true;
  ValueKind scalar_kind = ValueKind::None;  // !is_tensor: the kind the kernel was compiled for (None = omitted)
  DType dtype = DType::Float32;
  int rank = 0;
  bool require_contiguous = true;
  DimRange dims[kMaxRank];  // a static dim: DimRange::exactly(extent)
};
struct Guard {
  std::vector<InputGuard> inputs;
  bool passes(std::span<const Value* const> inputs) const;
};

// A compiled kernel: returns false (without writing outputs) to decline, which the slot treats
// like a guard miss and runs the reference kernel instead.
using CompiledKernelFn = bool (*)(const void* state, std::span<const Value* const> inputs, std::span<Value> outputs);

// A compiled region (O2 fusion), installed at the slot of the first CallOp of a fused PC range:
// it checks its own guards on the frame's registers, computes the whole range (every register the
// range writes and that is read later gets its final value) and the interpreter continues at the
// entry's resume_pc. Returns false to decline, before writing any register: the slot then runs
// its own op as usual and the interpreter goes on op by op.
using CompiledRegionFn = bool (*)(const void* state, std::span<Value> registers);

struct CompiledEntry {
  Guard guard;
  CompiledKernelFn fn = nullptr;
  const void* state = nullptr;  // owned by the JIT; lives at least as long as the table
  std::uint64_t id = 0;         // kernel version id (for logs and stats)
  CompiledRegionFn region = nullptr;  // set: a region entry (fn and guard unused)
  std::int32_t resume_pc = -1;        // region entries: the PC after the fused range
};

// Immutable once published; several entries = a polymorphic site (keyed by signature/range).
// Region entries come first and are tried before the op's own entries.
struct PatchTable {
  std::vector<CompiledEntry> entries;
  bool has_region = false;
};

struct DispatchSlot {
  // ---- JIT side (published by the patch manager) ----
  std::atomic<const PatchTable*> patched{nullptr};
  // ---- interpreter side (owned by the executing thread) ----
  std::uint64_t ic_key = ~std::uint64_t{0};     // signature key of the cached entry
  const KernelEntry* ic_entry = nullptr;        // cached reference kernel for ic_key
  std::uint64_t ic_misses = 0;                  // times the key changed (re-resolution)
  // ---- counters (relaxed atomics: read by the JIT's hot-path detector) ----
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> compiled_calls{0};
  std::atomic<std::uint64_t> guard_misses{0};
  std::atomic<std::uint64_t> ticks{0};          // cumulative time in timestamp ticks
  std::atomic<std::uint64_t> region_calls{0};   // ... of calls/ticks: a compiled region starting here
  std::atomic<std::uint64_t> region_ticks{0};
  std::atomic<std::uint64_t> region_declines{0};  // executions every region entry here declined
  std::atomic<std::uint64_t> allocations{0};      // tensors the op allocated (VmOptions::count_allocations)
};

// The inline-cache key: per input (first 7) dtype, rank, contiguity and tensor-ness, plus one
// bit for "all tensor inputs share one shape" — exactly what KernelPattern can test, so equal
// keys always resolve to the same entry. Returns ~0 (uncacheable) beyond 7 inputs.
std::uint64_t signatureKey(std::span<const Value* const> inputs);

}  // namespace shapevm
