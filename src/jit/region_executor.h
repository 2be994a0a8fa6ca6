// SPDX-License-Identifier: Apache-2.0
// O2 region fusion, the runtime: RegionExecutor runs a planned range's steps (fused kernels,
// matmuls with epilogues, reductions, opaque ops) on one execution's values; referenceRun runs
// the range op by op with the reference kernels (the planning run and validation's oracle).
// Internal to the region files. Invariant: a declined execution writes no register.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jit/compiled_kernel.h"
#include "jit/region_plan.h"

namespace shapevm::jit {

// One execution's values: real tensors, and zero-stride stand-ins ("phantoms") that carry only
// the shape of a value no step materializes.
class RegionExecutor {
 public:
  RegionExecutor(const RegionPlan& plan, bool poison) : plan_(plan), poison_(poison) {
    real_.resize(plan.values.size());
    phantom_.resize(plan.values.size());
  }

  void setReal(int v, Value value) { real_[static_cast<std::size_t>(v)] = std::move(value); }
  bool hasReal(int v) const { return !real_[static_cast<std::size_t>(v)].isNone(); }
  // After planning added values (statistics) to the plan.
  void grow();
  const Value& realValue(int v) const { return real_[static_cast<std::size_t>(v)]; }
  // Drops every real value but those of `kept` (phantoms stay): their buffers go back to the
  // allocator unless another holder keeps them (a kept value viewing one, the caller's inputs).
  void keepOnly(std::span<const int> kept);

  // The op's inputs as real values (nullptr for an omitted input).
  Expected<std::vector<const Value*>> realInputs(const ROp& op);

  // A view op's inputs with `input` as its tensor (a reshape's target shape is a real external).
  Expected<std::vector<const Value*>> viewInputs(const ROp& op, const Value* input);

  // The value as a real tensor: given, produced by a step already run, or a view of one.
  Expected<const Value*> real(int v);

  bool realizable(int v) const;

  // A tensor with v's runtime shape: the real value when there is one, else a phantom.
  Expected<const Value*> shaped(int v);

  // The leaf's view of its base, broadcast to `iteration`.
  Expected<Value> leaf(const Leaf& leaf, const Shape& iteration);

  // Output buffers for a step: a pooled buffer nobody else holds, else a fresh one (NaN-poisoned
  // in validation runs so an element the kernel skips shows).
  void takeBuffers(const Step& step, std::span<Value> outs, bool pooled);
  static void keepBuffers(const Step& step, std::span<const Value> outs, bool pooled);

  Status poisonOutputs(const CompiledKernel& kernel, std::span<const Value* const> inputs, std::span<Value> outs);

  // The kernel inputs of a Fused, Reduce or MatMul step: the leaves' views (a matmul: A, B and its
  // epilogue operands as they are). `remember` (an execution that owns the step's pools): the views
  // are remade from the step's ViewMemo when the region's externals and the views' bases repeat its
  // layouts, else made by the view ops and remembered.
  Expected<std::vector<Value>> stepInputs(const Step& step, bool remember = false);

  static std::vector<const Value*> pointersTo(const std::vector<Value>& values);

  // A step's output buffers, ready for its kernel: pooled ones when free, NaN-poisoned when
  // validating; in-place outputs are their leaves.
  Status outputsFor(const Step& step, std::span<const Value* const> inputs, const std::vector<Value>& leaves,
                    std::span<Value> outs, bool pooled);

  void publish(const Step& step, std::span<const Value> outs, bool pooled);

  Status runStep(const Step& step, bool pooled);

  int rowBlockedBlocks() const { return row_blocked_; }
  // Opaque steps whose own kernel's guard missed this run (the reference kernel ran them), and the
  // first such step's op and input shapes ("" when none).
  int opaqueFallbacks() const { return opaque_fallbacks_; }
  const std::string& firstOpaqueFallback() const { return first_opaque_fallback_; }

  // Every step of the plan, block by block.
  Status runAll(bool pooled);

  // A block: the hoisted steps, then the members' calls prepared in order (each member's output
  // buffers are real before the next one's views are taken) and run row block by row block when
  // their layouts allow it (rowBlocking), else one after the other.
  Status runBlock(const StepBlock& block, bool pooled);

 private:
  struct Member {
    const Step* step = nullptr;
    std::vector<Value> leaves;  // the call's inputs (its args point into them)
    std::vector<Value> outs;
    PreparedCall call;
  };

  // How a block's members split into row blocks: `units` common units, member m computing
  // rows_per_unit[m] rows per unit, per_block units at a time (0: run each member whole).
  struct RowBlocking {
    std::int64_t units = 0;
    std::int64_t per_block = 0;
    std::vector<std::int64_t> rows_per_unit;
  };

  // Row blocks pay when a member's output is read again by a later member while still in cache.
  // They are correct when every member computes a range of its rows alone (callRows), all row
  // counts are multiples of the smallest, and each later member reads an earlier member's output
  // only inside the rows that member computes in the same unit: its view steps by exactly that
  // many rows per unit and reaches no further. Kernel threads split rows their own way: then none.
  RowBlocking rowBlocking(const std::vector<Member>& members) const;

  // The leaves remade from the step's ViewMemo; nullopt when it has none or a layout differs.
  std::optional<std::vector<Value>> rememberedInputs(const Step& step);
  // Keeps the leaves' layouts as the step's ViewMemo (drops it when a view is not a pure function of
  // layouts: a copy, or a view op with an input some step computes).
  void rememberInputs(const Step& step, const std::vector<Value>& leaves);

  // True when `view` (a consumer's input, `rows` of its axis 0 per unit) reads the contiguous
  // `out` only within unit u's `span` elements while on unit u's rows.
  static bool readsWithinRows(const Tensor& view, const Tensor& out, std::int64_t rows, std::int64_t span);

  const RegionPlan& plan_;
  bool poison_ = false;
  int row_blocked_ = 0;  // blocks run in row blocks so far
  int opaque_fallbacks_ = 0;
  std::string first_opaque_fallback_;
  std::vector<Value> real_;
  std::vector<Value> phantom_;
};

// The op's name as the schema spells it.
std::string opName(OpId op);

// Runs the range with the reference kernels, op by op (the interpreter's semantics): the
// planning run that observes every value and the oracle of validation.
// `known`, when given (one entry per op): an op with outputs there takes them instead of running
// (a kept planning run, install_record.h: ReferenceRunStore).
Status referenceRun(const RegionPlan& plan, RegionExecutor& eval, std::span<const std::vector<Value>> known = {});

}  // namespace shapevm::jit
