// SPDX-License-Identifier: Apache-2.0
// OpRegistry construction from the op schema table, attribute resolution, input checks and the error
// context every kernel failure gets (op name + all input shapes).
#include "ops/registry.h"

#include <charconv>
#include <cstdlib>

namespace shapevm {
namespace {

bool isIntLike(const Value& v) {
  return v.isInt() || v.isBool() || (v.isTensor() && v.tensor().numel() == 1 && !isFloating(v.tensor().dtype()));
}

}  // namespace

bool KernelPattern::matches(std::span<const Value* const> inputs) const {
  const Shape* first_shape = nullptr;
  for (const Value* input : inputs) {
    if (input == nullptr || !input->isTensor()) continue;
    const Tensor& t = input->tensor();
    if (dtype && t.dtype() != *dtype) return false;
    if (rank >= 0 && t.rank() != rank) return false;
    if (contiguous && !t.isContiguous()) return false;
    if (same_shape) {
      if (first_shape && t.shape() != *first_shape) return false;
      first_shape = &t.shape();
    }
  }
  if (same_shape) {
    // A scalar operand breaks "same shape".
    for (const Value* input : inputs) {
      if (input != nullptr && !input->isTensor()) return false;
    }
  }
  return true;
}

int KernelPattern::specificity() const {
  return (dtype ? 1 : 0) + (rank >= 0 ? 1 : 0) + (contiguous ? 1 : 0) + (same_shape ? 1 : 0);
}

OpRegistry::OpRegistry() {
  schemas_ = opSchemaTable();
  entries_.resize(schemas_.size());
}

const OpRegistry& OpRegistry::global() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    registerElementwiseKernels(*r);
    registerMatmulKernels(*r);
    registerShapeKernels(*r);
    registerReduceKernels(*r);
    registerCreationKernels(*r);
    registerConvKernels(*r);
    registerVisionKernels(*r);
    return r;
  }();
  return *registry;
}

const OpSchema* OpRegistry::find(std::string_view name) const {
  for (const OpSchema& schema : schemas_) {
    if (schema.name == name) return &schema;
  }
  return nullptr;
}

void OpRegistry::registerKernel(OpId id, KernelPattern pattern, KernelFn fn, std::string name) {
  auto& list = entries_[static_cast<std::size_t>(id)];
  KernelEntry entry{std::move(name), pattern, fn};
  // Generic (specificity 0) first; otherwise most specific first after it.
  auto pos = list.begin();
  if (pattern.specificity() == 0) {
    list.insert(list.begin(), std::move(entry));
    return;
  }
  if (pos != list.end() && pos->pattern.specificity() == 0) ++pos;
  while (pos != list.end() && pos->pattern.specificity() >= pattern.specificity()) ++pos;
  list.insert(pos, std::move(entry));
}

const KernelEntry& OpRegistry::resolve(OpId id, std::span<const Value* const> inputs) const {
  const auto& list = entries_[static_cast<std::size_t>(id)];
  for (std::size_t i = 1; i < list.size(); ++i) {
    if (list[i].pattern.matches(inputs)) return list[i];
  }
  return list.front();
}

Expected<std::vector<AttrValue>> resolveAttrs(const OpSchema& schema,
                                              std::span<const std::pair<std::string, AttrValue>> named) {
  std::vector<std::optional<AttrValue>> slots(schema.attrs.size());
  for (const auto& [name, value] : named) {
    int index = schema.attrIndex(name);
    if (index < 0) {
      std::string known;
      for (const AttrSpec& spec : schema.attrs) known += (known.empty() ? "" : ", ") + spec.name;
      return makeError(ErrorCode::InvalidArgument, "op '{}' has no attribute '{}' (attributes: {})", schema.name, name,
                       known.empty() ? "none" : known);
    }
    const AttrSpec& spec = schema.attrs[static_cast<std::size_t>(index)];
    AttrValue converted = value;
    if (spec.kind == AttrKind::Float && value.kind == AttrKind::Int) converted = AttrValue::ofFloat(static_cast<double>(value.i));
    if (spec.kind == AttrKind::Ints && value.kind == AttrKind::Int) converted = AttrValue::ofInts({value.i});
    if (spec.kind == AttrKind::Bool && value.kind == AttrKind::Int && (value.i == 0 || value.i == 1)) converted = AttrValue::ofBool(value.i != 0);
    if (converted.kind != spec.kind) {
      return makeError(ErrorCode::InvalidArgument, "op '{}' attribute '{}' must be {}, got {} {}", schema.name, name,
                       attrKindName(spec.kind), attrKindName(value.kind), value.toString());
    }
    if (slots[static_cast<std::size_t>(index)]) {
      return makeError(ErrorCode::InvalidArgument, "op '{}' attribute '{}' given twice", schema.name, name);
    }
    slots[static_cast<std::size_t>(index)] = std::move(converted);
  }
  std::vector<AttrValue> out;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i]) {
      out.push_back(std::move(*slots[i]));
    } else if (schema.attrs[i].default_value) {
      out.push_back(*schema.attrs[i].default_value);
    } else {
      return makeError(ErrorCode::InvalidArgument, "op '{}' requires attribute '{}' ({})", schema.name,
                       schema.attrs[i].name, attrKindName(schema.attrs[i].kind));
    }
  }
  return out;
}

Expected<int> numOutputs(const OpSchema& schema, std::span<const AttrValue> attrs) {
  if (schema.num_outputs >= 0) return schema.num_outputs;
  // split: attributes axis, sections, sizes
  std::int64_t sections = attrs[1].i;
  const auto& sizes = attrs[2].ints;
  if ((sections > 0) == !sizes.empty()) {
    return makeError(ErrorCode::InvalidArgument, "op '{}' needs exactly one of attributes 'sections' (> 0) or 'sizes'",
                     schema.name);
  }
  std::int64_t count = sections > 0 ? sections : static_cast<std::int64_t>(sizes.size());
  if (count > 4096) return makeError(ErrorCode::InvalidArgument, "op '{}' with {} outputs is too many", schema.name, count);
  return static_cast<int>(count);
}

Status checkInputs(const OpSchema& schema, std::span<const Value* const> inputs) {
  const int count = static_cast<int>(inputs.size());
  const int max_inputs = schema.maxInputs();
  if (count < schema.minInputs() || (max_inputs >= 0 && count > max_inputs)) {
    return makeError(ErrorCode::InvalidArgument, "op '{}' takes {}{} inputs, got {}", schema.name, schema.minInputs(),
                     max_inputs < 0 ? " or more" : max_inputs == schema.minInputs() ? "" : fmt::format(" to {}", max_inputs),
                     count);
  }
  for (int i = 0; i < count; ++i) {
    const InputSpec& spec = schema.inputs[std::min<std::size_t>(static_cast<std::size_t>(i), schema.inputs.size() - 1)];
    const Value* v = inputs[static_cast<std::size_t>(i)];
    if (v == nullptr || v->isNone()) {
      if (spec.optional) continue;
      return makeError(ErrorCode::KindMismatch, "op '{}' input {} ('{}') is missing", schema.name, i, spec.name);
    }
    if (v->isTensor())
      SVM_RETURN_IF_ERROR(requireCpu(v->tensor(), fmt::format("op '{}' input {} ('{}')", schema.name, i, spec.name)));
    bool ok = true;
    switch (spec.kind) {
      case InputKind::Tensor: ok = v->isTensor() || v->isScalar(); break;
      case InputKind::Int: ok = isIntLike(*v); break;
      case InputKind::Num: ok = v->isScalar() || (v->isTensor() && v->tensor().numel() == 1); break;
      case InputKind::Ints:
        ok = isIntLike(*v) || v->isTuple() || (v->isTensor() && v->tensor().rank() <= 1 && !isFloating(v->tensor().dtype()));
        break;
    }
    if (!ok) {
      static constexpr std::string_view kKindNames[] = {"a tensor", "ints (an int or a tuple of ints)", "an int", "a number"};
      return makeError(ErrorCode::KindMismatch, "op '{}' input {} ('{}') must be {}, got {}", schema.name, i, spec.name,
                       kKindNames[static_cast<int>(spec.kind)], v->describe());
    }
  }
  return Status::ok();
}

std::string describeInputs(std::span<const Value* const> inputs) {
  std::string text;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i) text += ", ";
    text += inputs[i] ? inputs[i]->describe() : "None";
  }
  return text;
}

Expected<Tensor> outputBuffer(OpContext& ctx, int index, DType dtype, const Shape& shape) {
  Value& previous = ctx.outputs[static_cast<std::size_t>(index)];
  if (previous.isTensor()) {
    const Tensor& t = previous.tensor();
    if (t.isSoleOwner() && t.dtype() == dtype && t.isContiguous()) {
      if (t.shape() == shape) return previous.takeTensor();
      // Another shape (dynamic shapes change from call to call): its storage, viewed at the new
      // shape from its start, when that fits and does not keep more than kMaxReuseSlack times the
      // bytes needed alive. No allocation, and no page faults on a block the allocator hands out
      // fresh. A negative or overflowing shape fails asStrided and gets Tensor::empty's error.
      const std::size_t have = t.storage()->nbytes();
      const std::int64_t elements = shape.numel();
      const std::size_t need = elements > 0 ? static_cast<std::size_t>(elements) * dtypeSize(dtype) : 0;
      if (need > 0 && need <= have && need * kMaxReuseSlack >= have && t.offset() == 0) {
        if (auto view = t.asStrided(shape, contiguousStrides(shape), 0)) {
          previous = Value();  // the view is now the storage's only holder
          return std::move(*view);
        }
      }
    }
  }
  return Tensor::empty(dtype, shape);
}

Status invokeKernel(const KernelEntry& entry, OpContext& ctx) {
  Status status = entry.fn(ctx);
  if (!status.isOk()) status.withContext(fmt::format("{}({})", ctx.schema->name, describeInputs(ctx.inputs)));
  return status;
}

Expected<std::vector<Value>> callOp(std::string_view name, std::vector<Value> inputs,
                                    std::vector<std::pair<std::string, AttrValue>> attrs) {
  const OpRegistry& registry = OpRegistry::global();
  const OpSchema* schema = registry.find(name);
  if (schema == nullptr) return makeError(ErrorCode::UnknownName, "unknown op '{}'", name);
  SVM_ASSIGN_OR_RETURN(std::vector<AttrValue> resolved, resolveAttrs(*schema, attrs));
  SVM_ASSIGN_OR_RETURN(int output_count, numOutputs(*schema, resolved));
  std::vector<const Value*> pointers;
  for (const Value& v : inputs) pointers.push_back(&v);
  SVM_RETURN_IF_ERROR(checkInputs(*schema, pointers));
  std::vector<Value> outputs(static_cast<std::size_t>(output_count));
  OpContext ctx{schema, pointers, resolved, outputs};
  SVM_RETURN_IF_ERROR(invokeKernel(registry.resolve(schema->id, pointers), ctx));
  return outputs;
}

}  // namespace shapevm
