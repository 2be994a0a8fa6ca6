// SPDX-License-Identifier: Apache-2.0
// A compiled op kernel as the VM's dispatch slot sees it: the `state` behind a CompiledEntry.
// runCompiledKernel() is the CompiledKernelFn: it asks the family for the output shapes, takes
// output buffers (reusing the site's previous outputs when uniquely owned), fills KernelArgs and
// calls the generated code. It declines (returns false) instead of failing, so the slot runs the
// reference kernel — which then reports any real error with its usual message.
// A kernel whose family reads an input packed (matmul's B: the weight) keeps the packing of the
// last few such tensors (PackedOperandCache): the first call with a tensor packs it, later calls
// with the same tensor skip packing.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "jit/backend.h"
#include "jit/kernel_abi.h"

namespace shapevm::jit {

// The packed forms of one kernel's packable input (KernelFamily::packedOperand), least recently
// used replaced beyond the PackedWeightEntries tunable. Thread-safe (one mutex around lookups and
// inserts); a call holds its own reference to the packing, so eviction never frees it mid-call.
// Safety: an entry is reused only for the same bytes. It is keyed by the operand's storage,
// view offset, dtype, shape and strides, and it holds a reference to the operand: the storage
// stays alive (its address cannot be recycled for another tensor) and is never sole-owned, so the
// VM's in-place reuse (outputBuffer, region buffer pools; both require Tensor::isSoleOwner) can
// never write it. Adopted memory (Tensor::wrap: its owner may write it any time) is never cached.
class PackedOperandCache {
 public:
  struct Stats {
    std::uint64_t packs = 0;  // packings made (cache misses that packed)
    std::uint64_t hits = 0;   // calls that reused a cached packing
    std::size_t entries = 0;  // packings held now
    bool gave_up = false;     // PackedWeightMaxUnused unused packings in a row: no more caching
    std::uint64_t spare_reuses = 0;  // packings written into the spare buffer clear() kept
  };
  // True when `operand` may be packed once and cached: not adopted memory, at least
  // PackedWeightMinElements elements (unless `any_size`: PackedOperand::any_size), caching on
  // (PackedWeightEntries > 0), and this kernel has not given up (B changing every call).
  bool admits(const Tensor& operand, bool any_size = false) const;
  // The cached packing of exactly `operand` (counted as a hit), else an undefined Tensor.
  Tensor find(const Tensor& operand);
  // Caches `packed` for `operand` (counted as a pack), replacing the least recently used entry.
  void insert(const Tensor& operand, Tensor packed);
  // Drops every entry (and the references they hold: the operands are released); counters stay.
  // The largest packing's buffer is kept as a spare for takeSpare(): clear() follows validation on
  // the compile thread, whose packing faulted that memory in, so the program's first packing (the
  // first call of a newly installed kernel, on the program's thread) writes into memory already
  // touched instead of a fresh allocation that faults page by page (issue 23: a 70 ms call).
  void clear();
  // The spare buffer if it holds at least `bytes` and nothing else references it (counted as a
  // spare reuse), else an undefined Tensor; either way the spare is given up.
  Tensor takeSpare(std::int64_t bytes);
  Stats stats() const;

 private:
  struct Entry {
    Tensor operand;  // the packed tensor itself: keeps its storage alive and shared
    Tensor packed;   // float32, the layout the kernel reads
    std::uint64_t last_use = 0;
    std::uint64_t hits = 0;
  };
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  std::uint64_t clock_ = 0;
  std::uint64_t packs_ = 0, hits_ = 0;
  std::int64_t unused_in_a_row_ = 0;  // entries evicted without a single hit, since the last hit
  Tensor spare_;                      // clear()'s kept buffer (float32), until takeSpare()
  std::uint64_t spare_reuses_ = 0;
};

// The last launch's argument block of a kernel whose family derives it from the operands' layout
// alone (the elementwise family: dtypes, shapes, strides and scalar values; no pointers beyond the
// operands' own data). A launch whose inputs repeat that layout copies the block and sets only the
// data pointers and the output rows; anything else lays the block out afresh and keeps it. One
// launch at a time uses it (`busy`); a concurrent one lays out its own, as without the cache.
struct LaunchArgsCache {
  struct InputKey {
    ValueKind kind = ValueKind::None;  // None: omitted (a null input)
    DType dtype = DType::Float32;      // tensors
    std::uint64_t bits = 0;            // scalars: the value's bits
    Shape shape;                       // tensors
    Shape strides;
  };
  std::atomic<bool> busy{false};
  bool valid = false;
  std::size_t num_inputs = 0;
  InputKey inputs[kMaxKernelOperands];
  DType output_dtypes[kMaxKernelOperands] = {};
  Shape output_shapes[kMaxKernelOperands];
  KernelArgs args{};  // as prepareCall laid it out (its data pointers are stale)
  std::size_t item[kMaxKernelOperands] = {};
  std::uint64_t hits = 0;  // launches that reused the block
};

struct CompiledKernel {
  const KernelFamily* family = nullptr;
  KernelSpec spec;  // stamped with the backend's target; never changed after compileKernel
  // family->launchPlan(spec), made once by compileKernel (nullptr: the family keeps none). It is
  // derived from `spec` alone, which never changes, so no launch can meet a plan for another spec.
  std::shared_ptr<const LaunchPlan> launch_plan;
  const KernelBackend* backend = nullptr;  // launches `handle`; operands live on its device
  KernelHandle handle;
  int num_outputs = 1;
  // Test-only fault injection: when set, the first element of row `corrupt_row` of every output
  // (axis 0; negative counts from the end, -1 = the last row) is corrupted after every call, so
  // validation must catch it.
  bool corrupt_outputs = false;
  std::int64_t corrupt_row = 0;
  // Packings of the packable input (matmul's B) of recent calls; see PackedOperandCache.
  mutable PackedOperandCache packed;
  // Set by compileKernel for families whose prepared arguments depend on the operands' layout
  // only (see LaunchArgsCache); the cache then serves launches whose layout repeats.
  bool layout_only_args = false;
  mutable LaunchArgsCache args_cache;
  // Its key in the backend's kernel cache ("" without one), and whether its code came from there.
  std::string cache_key;
  bool from_cache = false;
};

// Runs `kernel` on `inputs`; `outputs` may hold previous outputs for reuse. Error when the family
// rejects the inputs (they do not fit its spec), an input lives on another device than the
// kernel's backend, or an allocation fails.
Status invokeCompiled(const CompiledKernel& kernel, std::span<const Value* const> inputs, std::span<Value> outputs);

// invokeCompiled in three parts, so a caller may run a call whole or a range of its rows at a time
// (a region runs a producer and its consumers row block by row block: CompiledRegion).
// prepareCall takes the output buffers, lays out the KernelArgs and finds or makes the packed
// operand; nothing is computed until runCall / runCallRows; finishCall hands the outputs over.
struct PreparedCall {
  const CompiledKernel* kernel = nullptr;
  KernelArgs args;  // zeroed, then laid out, by prepareCall (not zeroed twice per launch)
  Tensor outputs[kMaxKernelOperands];
  Tensor packed;  // the packed operand the args point at (kept alive until finishCall)
  std::size_t item[kMaxKernelOperands] = {};  // bytes per element of each operand slot (0: none)
  std::size_t num_inputs = 0;
  std::size_t num_outputs = 0;
};
Status prepareCall(const CompiledKernel& kernel, std::span<const Value* const> inputs, std::span<Value> outputs,
                   PreparedCall& call);
// The whole call, split across threads as KernelParams::threads / the KernelThreads tunable say.
void runCall(const PreparedCall& call);
// The rows the call computes (its output's axis 0), or -1 when the family cannot compute a range
// of them (KernelFamily::rowCount).
std::int64_t callRows(const PreparedCall& call);
// Rows [begin, end) only, on this thread (0 <= begin < end <= callRows()).
void runCallRows(const PreparedCall& call, std::int64_t begin, std::int64_t end);
void finishCall(PreparedCall& call, std::span<Value> outputs);

// The CompiledKernelFn installed in dispatch slots (state = const CompiledKernel*).
bool runCompiledKernel(const void* state, std::span<const Value* const> inputs, std::span<Value> outputs);

// Compiles `spec` with `family` on `backend` into a CompiledKernel (not yet validated or
// installed): the spec stamped with the backend's target, compiled (or taken from the backend's
// kernel cache: compileThroughCache) and loaded. The kernel's `spec` is what its code was compiled
// for: a kept kernel for wider ranges may stand in for `spec` (guard and validate with its spec).
Expected<std::unique_ptr<CompiledKernel>> compileKernel(KernelBackend& backend, const KernelFamily& family,
                                                        const KernelSpec& spec);

}  // namespace shapevm::jit
