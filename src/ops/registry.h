// SPDX-License-Identifier: Apache-2.0
// OpRegistry: the op schemas generated from ops.def (op_schema.h) and their kernels, keyed by
// (op, shape signature). Every op has a generic reference kernel that handles any shape,
// broadcasting, strides and dtype; more specific entries (e.g. contiguous float32 of a
// given rank) may be registered beside it and win when their pattern matches.
// Invariant: resolution happens once per call-site signature (the VM's inline cache), never by
// string per execution; kernels never write outputs until they are done reading inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/op_schema.h"
#include "shapevm/status.h"
#include "shapevm/value.h"

namespace shapevm {

// What a kernel sees. `inputs` may contain nullptr for an omitted optional input. On entry
// `outputs[i]` may hold the tensor this site produced last time (the VM hands it back when no
// input reads that register); outputBuffer() reuses it when nothing else can observe it.
struct OpContext {
  const OpSchema* schema = nullptr;
  std::span<const Value* const> inputs;
  std::span<const AttrValue> attrs;  // all attributes, schema order, defaults filled in
  std::span<Value> outputs;          // kernel assigns each (sized by numOutputs)
};
using KernelFn = Status (*)(OpContext& ctx);

// A pattern over input signatures; std::nullopt / -1 fields match anything.
struct KernelPattern {
  std::optional<DType> dtype;        // all tensor inputs have this dtype
  int rank = -1;                     // all tensor inputs have this rank
  bool contiguous = false;           // all tensor inputs contiguous
  bool same_shape = false;           // all tensor inputs have the same shape
  bool matches(std::span<const Value* const> inputs) const;
  int specificity() const;
};

struct KernelEntry {
  std::string name;  // "add.generic", "add.f32.contiguous_same_shape"
  KernelPattern pattern;
  KernelFn fn = nullptr;
};

class OpRegistry {
 public:
  // Built on first use: schemas from ops.def plus every op family's kernels.
  static const OpRegistry& global();

  const OpSchema* find(std::string_view name) const;
  const OpSchema& schema(OpId id) const { return schemas_[static_cast<std::size_t>(id)]; }
  std::span<const OpSchema> schemas() const { return schemas_; }
  // All entries of an op, generic first.
  std::span<const KernelEntry> entries(OpId id) const { return entries_[static_cast<std::size_t>(id)]; }
  // The most specific entry matching these inputs (the generic entry always matches).
  const KernelEntry& resolve(OpId id, std::span<const Value* const> inputs) const;
  bool hasSpecializations(OpId id) const { return entries(id).size() > 1; }

  // Registration (used while building the global registry, and by tests on a local registry).
  void registerKernel(OpId id, KernelPattern pattern, KernelFn fn, std::string name);
  OpRegistry();

 private:
  std::vector<OpSchema> schemas_;
  std::vector<std::vector<KernelEntry>> entries_;
};

// Validates named attributes against the schema and returns all of them in schema order with
// defaults filled in. Errors name the op and the attribute (unknown, wrong kind, missing).
Expected<std::vector<AttrValue>> resolveAttrs(const OpSchema& schema,
                                              std::span<const std::pair<std::string, AttrValue>> named);
// Number of outputs for these attributes (split: sections or len(sizes)); error if undecidable.
Expected<int> numOutputs(const OpSchema& schema, std::span<const AttrValue> attrs);
// Checks input count and kinds (tensor vs scalar vs ints) against the schema.
Status checkInputs(const OpSchema& schema, std::span<const Value* const> inputs);

// A contiguous tensor for output `index`: the previous output's tensor when this context is its
// sole owner (impl and storage unshared, not adopted memory) with the same dtype and shape —
// so steady-state interpretation allocates nothing — or, for another shape, a view from the start
// of its storage when the new shape fits in it and needs at least 1/kMaxReuseSlack of it (calls
// whose shapes vary reuse one buffer); else a fresh Tensor::empty.
inline constexpr std::size_t kMaxReuseSlack = 16;
Expected<Tensor> outputBuffer(OpContext& ctx, int index, DType dtype, const Shape& shape);

// Runs the kernel `entry` and, on failure, prefixes the op name and every input's shape:
// "add(f32[2,3], f32[4]): cannot broadcast ...".
Status invokeKernel(const KernelEntry& entry, OpContext& ctx);
// "f32[2,3], f32[4]" for error messages.
std::string describeInputs(std::span<const Value* const> inputs);

// Convenience for tests and tools: resolve + check + run by name.
Expected<std::vector<Value>> callOp(std::string_view name, std::vector<Value> inputs,
                                    std::vector<std::pair<std::string, AttrValue>> attrs = {});

// Per-family registration functions (one file per family under src/ops/).
void registerElementwiseKernels(OpRegistry& registry);
void registerMatmulKernels(OpRegistry& registry);
void registerShapeKernels(OpRegistry& registry);
void registerReduceKernels(OpRegistry& registry);
void registerCreationKernels(OpRegistry& registry);
void registerConvKernels(OpRegistry& registry);    // conv_ops.cc
void registerVisionKernels(OpRegistry& registry);  // vision_ops.cc

}  // namespace shapevm
