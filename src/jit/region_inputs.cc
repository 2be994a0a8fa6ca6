// SPDX-License-Identifier: Apache-2.0
// O2 region fusion: the inputs of the planning run and of validation. Each region input gets the
// dtype, shape and strides of the chosen (newest or smallest) profile record of an op that reads it, and a fresh
// random tensor laid out like that (a reshape's target shape: the shape its output was observed
// with). Invariant: the same range, compile count and records give the same inputs.
#include "jit/region_inputs.h"

#include <map>

#include "jit/shape_infer.h"
#include "jit/validate.h"
#include "ops/kernel_util.h"

namespace shapevm::jit {

namespace {

// A random tensor of `value`'s dtype and shape laid out with `strides` (as observed: broadcast
// zeros, transposes, negative steps) over a fresh random buffer.
Expected<Value> stridedRandom(const RValue& value, const Shape& strides, bool positive, std::uint64_t seed) {
  std::int64_t lo = 0, hi = 0;
  bool empty = false;
  for (int d = 0; d < value.shape.rank(); ++d) {
    if (value.shape[d] == 0) empty = true;
    const std::int64_t reach = (value.shape[d] - 1) * (d < strides.rank() ? strides[d] : 0);
    (reach < 0 ? lo : hi) += reach;
  }
  if (empty) {
    SVM_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(value.dtype, value.shape));
    return Value::fromTensor(std::move(t));
  }
  const bool usable = strides.rank() == value.shape.rank();
  KernelSpec spec;
  OperandSpec operand;
  operand.dtype = value.dtype;
  operand.rank = 1;
  spec.inputs.push_back(operand);
  const std::int64_t span = usable ? hi - lo + 1 : std::max<std::int64_t>(value.shape.numel(), 1);
  const Shape backing_shape{span};
  const bool positives[1] = {positive};
  SVM_ASSIGN_OR_RETURN(std::vector<Value> backing,
                       randomInputs(spec, std::span<const Shape>(&backing_shape, 1), seed, positives));
  const Tensor& flat = backing[0].tensor();
  if (!usable) {
    SVM_ASSIGN_OR_RETURN(Tensor t, flat.reshapeView(value.shape));
    return Value::fromTensor(std::move(t));
  }
  SVM_ASSIGN_OR_RETURN(Tensor t, flat.asStrided(value.shape, strides, -lo));
  return Value::fromTensor(std::move(t));
}

// The elements of a record's tensor inputs, all together.
std::int64_t recordElements(const ProfileRecord& record) {
  std::int64_t n = 0;
  for (const OperandProfile& operand : record.inputs) {
    if (operand.is_tensor) n += operand.shape.numel();
  }
  return n;
}

}  // namespace

const ProfileRecord* planningRecord(std::span<const ProfileRecord> records, PlanningShapes which) {
  const ProfileRecord* newest = newestRecord(records);
  if (which == PlanningShapes::Newest || newest == nullptr) return newest;
  const ProfileRecord* best = newest;
  for (const ProfileRecord& record : records) {
    if (!sameGroup(record, *newest)) continue;  // outside the ranges the step kernels are compiled for
    const std::int64_t n = recordElements(record), fewest = recordElements(*best);
    if (n < fewest || (n == fewest && record.last_seen > best->last_seen)) best = &record;
  }
  return best;
}

Expected<std::vector<Value>> planningInputs(RegionPlan& p, const FusionRange& range,
                                            std::span<const std::vector<ProfileRecord>> records, int compiles,
                                            PlanningShapes which) {
  // Externals: dtype, shape and strides from the newest profile record of a site that reads them.
  std::vector<Shape> external_strides;
  std::map<int, Value> planned_shapes;  // reshape targets: the shape a later op observed for the reshape's output
  std::vector<const ProfileRecord*> newest;
  for (const auto& site_records : records) newest.push_back(planningRecord(site_records, which));
  // The observed shape of value `v` as some op of the range read it, if one did.
  auto observedShape = [&](int v) -> const OperandProfile* {
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      for (std::size_t k = 0; k < p.ops[i].in.size() && newest[i] != nullptr; ++k) {
        if (p.ops[i].in[k] == v && k < newest[i]->inputs.size() && newest[i]->inputs[k].is_tensor)
          return &newest[i]->inputs[k];
      }
    }
    return nullptr;
  };
  for (int v : p.externals) {
    RValue& value = p.values[static_cast<std::size_t>(v)];
    bool found = false;
    for (std::size_t i = 0; i < p.ops.size() && !found; ++i) {
      const ProfileRecord* record = newest[i];
      for (std::size_t k = 0; k < p.ops[i].in.size() && record != nullptr && !found; ++k) {
        if (p.ops[i].in[k] != v || k >= record->inputs.size()) continue;
        const OperandProfile& operand = record->inputs[k];
        found = true;
        external_strides.push_back(operand.strides);
        if (operand.is_tensor) {
          value.dtype = operand.dtype;
          value.shape = operand.shape;
          continue;
        }
        // A reshape's target shape: planned as the shape its output was observed with.
        const OperandProfile* reshaped =
            p.ops[i].op == OpId::Reshape && k == 1 ? observedShape(p.ops[i].out[0]) : nullptr;
        if (reshaped == nullptr)
          return makeError(ErrorCode::Unsupported, "a region input r{} is not a tensor", value.reg);
        std::vector<Value> dims;
        for (int d = 0; d < reshaped->shape.rank(); ++d) dims.push_back(Value::fromInt(reshaped->shape[d]));
        planned_shapes[v] = Value::fromTuple(std::move(dims));
        value.tensor = false;
      }
    }
    if (!found) return makeError(ErrorCode::JitError, "no profile for region input r{}", value.reg);
  }

  // The planning run: random inputs of the observed shapes and layouts (strides, broadcasts,
  // negative steps) through the reference kernels; inputs that some op needs positive (log,
  // sqrt, divisors) are drawn positive.
  const std::uint64_t seed =
      0x9e37 ^ (static_cast<std::uint64_t>(range.start_pc) << 16) ^ static_cast<std::uint64_t>(compiles);
  std::vector<Value> inputs;
  for (std::size_t e = 0; e < p.externals.size(); ++e) {
    const int v = p.externals[e];
    bool positive = false;
    for (const ROp& op : p.ops) {
      for (std::size_t k = 0; k < op.in.size(); ++k)
        positive = positive || (op.in[k] == v && needsPositiveInput(op.op, k));
    }
    if (auto planned = planned_shapes.find(v); planned != planned_shapes.end()) {
      inputs.push_back(planned->second);
      continue;
    }
    SVM_ASSIGN_OR_RETURN(Value input,
                         stridedRandom(p.values[static_cast<std::size_t>(v)], external_strides[e], positive, seed + e));
    inputs.push_back(std::move(input));
  }
  return inputs;
}

}  // namespace shapevm::jit
