// SPDX-License-Identifier: Apache-2.0
// Kernel specs as text (for logs, symbols and tokens) and the op -> family table.
#include "jit/kernel_abi.h"

#include "jit/conv_family.h"
#include "jit/fusion.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace shapevm::jit {

namespace {
constexpr std::string_view kOpIdents[] = {
#define SVM_OP(ident, ...) #ident,
#include "ops/ops.def"
#undef SVM_OP
};
static_assert(sizeof(kOpIdents) / sizeof(kOpIdents[0]) == kNumOps, "one ident per op");

std::string dimText(const DimSpec& d) {
  if (d.isStatic()) return std::to_string(d.size);
  if (d.bounded()) return d.toString();  // "lo..hi", "lo..hi%d"
  return d.divisor > 1 ? fmt::format("?%{}", d.divisor) : "?";
}
}  // namespace

std::string_view opIdent(OpId op) { return kOpIdents[static_cast<std::size_t>(op)]; }

std::string OperandSpec::toString() const {
  if (!is_tensor) return "scalar";
  std::string text = fmt::format("{}[", dtypeShortName(dtype));
  for (int d = 0; d < rank; ++d) text += (d ? "," : "") + dimText(dims[d]);
  return text + "]" + (contiguous ? "" : " strided");
}

std::string KernelSpec::signature() const {
  if (fused && op != OpId::MatMul) return fmt::format("Fused:{}", fused->describe());
  std::string text = fmt::format("{}:", opIdent(op));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i > 0) text += "x";
    const OperandSpec& in = inputs[i];
    if (!in.is_tensor) {
      text += "scalar";
      continue;
    }
    text += "(";
    for (int d = 0; d < in.rank; ++d) text += (d ? "," : "") + dimText(in.dims[d]);
    text += ")";
  }
  if (fused) text += fmt::format("+gates[{}]:{}", fmt::join(fused_leaf_source, ","), fused->describe());
  return text;
}

KernelSpec exactSpec(OpId op, std::vector<AttrValue> attrs, std::span<const Value* const> inputs) {
  KernelSpec spec;
  spec.op = op;
  spec.attrs = std::move(attrs);
  for (const Value* value : inputs) {
    OperandSpec operand;
    if (value == nullptr || !value->isTensor()) {
      operand.is_tensor = false;
      operand.scalar_kind = value == nullptr ? ValueKind::None : value->kind();
      if (value != nullptr && (value->isInt() || value->isFloat() || value->isBool())) operand.scalar_example = value->toDouble();
    } else {
      const Tensor& t = value->tensor();
      operand.dtype = t.dtype();
      operand.rank = t.rank();
      for (int d = 0; d < t.rank(); ++d) operand.dims[d].size = t.dim(d);
      operand.contiguous = t.isContiguous();
    }
    spec.inputs.push_back(operand);
  }
  return spec;
}

KernelSpec symbolicSpec(KernelSpec spec) {
  for (OperandSpec& operand : spec.inputs) {
    for (int d = 0; d < operand.rank; ++d) operand.dims[d] = DimSpec{};
  }
  return spec;
}

Status KernelFamily::prepare(const KernelSpec&, std::span<const Value* const>, std::span<const Tensor>, KernelArgs&) const {
  return Status::ok();
}

std::unique_ptr<const LaunchPlan> KernelFamily::launchPlan(const KernelSpec&) const {
  return nullptr;
}

Status KernelFamily::plannedOutputs(const KernelSpec& spec, const LaunchPlan*, std::span<const Value* const> inputs,
                                    std::span<DType> dtypes, std::span<Shape> shapes) const {
  return outputs(spec, inputs, dtypes, shapes);
}

Status KernelFamily::plannedPrepare(const KernelSpec& spec, const LaunchPlan*, std::span<const Value* const> inputs,
                                    std::span<const Tensor> outputs, KernelArgs& args) const {
  return prepare(spec, inputs, outputs, args);
}

PackedOperand KernelFamily::packedOperand(const KernelSpec&, const KernelArgs&) const { return {}; }

void KernelFamily::usePacked(const KernelSpec&, KernelArgs&, void*, PackMode) const {}

std::int64_t KernelFamily::rowCount(const KernelSpec&, const KernelArgs& args, std::size_t inputs,
                                    std::size_t outputs) const {
  if (!splitsAlongAxis0() || outputs == 0 || args.data[inputs] == nullptr) return -1;
  const std::int64_t rows = args.shape[inputs][0];
  for (std::size_t k = 0; k < inputs + outputs; ++k) {
    if (args.data[k] != nullptr && args.shape[k][0] != rows) return -1;  // e.g. a reduction over axis 0
  }
  return rows;
}

void KernelFamily::narrowRows(const KernelSpec&, KernelArgs& args, const std::size_t* item, std::size_t inputs,
                              std::size_t outputs, std::int64_t begin, std::int64_t end) const {
  for (std::size_t k = 0; k < inputs + outputs; ++k) {
    if (args.data[k] == nullptr) continue;
    args.data[k] = static_cast<char*>(args.data[k]) + begin * args.strides[k][0] * static_cast<std::int64_t>(item[k]);
    args.shape[k][0] = end - begin;
  }
}

Status KernelFamily::reference(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<Value> outputs) const {
  const OpRegistry& registry = OpRegistry::global();
  const OpSchema& schema = registry.schema(spec.op);
  const std::size_t own = spec.epilogue.empty() ? inputs.size() : std::min(inputs.size(), schema.inputs.size());
  const std::span<const Value* const> op_inputs = inputs.first(own);
  {
    OpContext ctx{&schema, op_inputs, spec.attrs, outputs};
    SVM_RETURN_IF_ERROR(invokeKernel(registry.resolve(spec.op, op_inputs), ctx));
  }
  for (const EpilogueStep& step : spec.epilogue) {
    const OpSchema& step_schema = registry.schema(step.op);
    std::vector<AttrValue> attrs;
    for (const AttrSpec& attr : step_schema.attrs) attrs.push_back(attr.default_value.value_or(AttrValue{}));
    const Value current = outputs[0];
    std::vector<const Value*> step_inputs{&current};
    if (step.operand >= 0) {
      const Value* extra = inputs[static_cast<std::size_t>(step.operand)];
      step_inputs = step.swapped ? std::vector<const Value*>{extra, &current} : std::vector<const Value*>{&current, extra};
    }
    Value result;
    OpContext ctx{&step_schema, step_inputs, attrs, std::span<Value>(&result, 1)};
    SVM_RETURN_IF_ERROR(invokeKernel(registry.resolve(step.op, step_inputs), ctx));
    outputs[0] = std::move(result);
  }
  return Status::ok();
}

std::vector<KernelParams> KernelFamily::searchSpace(const KernelSpec&) const { return {}; }

namespace {
// KernelParams' fields by name, in toString() order (one table for printing and parsing).
struct ParamField {
  std::string_view name;
  int KernelParams::* field;
};
constexpr ParamField kParamFields[] = {
    {"mr", &KernelParams::mr},         {"nr", &KernelParams::nr},
    {"mc", &KernelParams::mc},         {"kc", &KernelParams::kc},
    {"nc", &KernelParams::nc},         {"kunroll", &KernelParams::k_unroll},
    {"prefetch", &KernelParams::prefetch}, {"threads", &KernelParams::threads},
    {"vw", &KernelParams::vector_width}, {"unroll", &KernelParams::unroll},
    {"chunk", &KernelParams::chunk},   {"bf16dot", &KernelParams::bf16_dot},
};
// KernelParams::library is written by name: "impl=onednn", "impl=onednn+tail", "impl=sgemm",
// "impl=sgemm+tail" (and "impl=jit", the default, reads as 0); the index is the value.
constexpr std::string_view kLibraryNames[] = {"impl=jit", "impl=onednn", "impl=onednn+tail", "impl=sgemm",
                                              "impl=sgemm+tail"};
constexpr int kLibraryValues = static_cast<int>(std::size(kLibraryNames));
}  // namespace

std::string KernelParams::toString() const {
  std::string text;
  for (const ParamField& f : kParamFields) {
    if (this->*f.field != 0) text += fmt::format("{}{}={}", text.empty() ? "" : " ", f.name, this->*f.field);
  }
  if (library > 0 && library < kLibraryValues)
    text += fmt::format("{}{}", text.empty() ? "" : " ", kLibraryNames[library]);
  if (library < 0 || library >= kLibraryValues) text += fmt::format("{}impl={}", text.empty() ? "" : " ", library);
  return text.empty() ? "default" : text;
}

Expected<KernelParams> KernelParams::parse(std::string_view text) {
  KernelParams params;
  if (text == "default") return params;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    if (const auto* name = std::find(std::begin(kLibraryNames), std::end(kLibraryNames), item);
        name != std::end(kLibraryNames)) {
      params.library = static_cast<int>(name - std::begin(kLibraryNames));
      continue;
    }
    const std::size_t eq = item.find('=');
    const ParamField* found = nullptr;
    for (const ParamField& f : kParamFields) {
      if (eq != std::string_view::npos && item.substr(0, eq) == f.name) found = &f;
    }
    if (found == nullptr) return makeError(ErrorCode::InvalidArgument, "kernel parameter '{}' is not name=value with a known name", item);
    const std::string number(item.substr(eq + 1));
    char* rest = nullptr;
    const long value = std::strtol(number.c_str(), &rest, 10);
    if (number.empty() || *rest != '\0' || value < -1000000 || value > 1000000) {
      return makeError(ErrorCode::InvalidArgument, "kernel parameter '{}' has a bad value", item);
    }
    params.*(found->field) = static_cast<int>(value);
  }
  return params;
}

std::string KernelFamily::symbolStem(const KernelSpec& spec) const {
  std::string stem = fmt::format("{}", OpRegistry::global().schema(spec.op).name);
  for (const OperandSpec& in : spec.inputs) {
    if (!in.is_tensor) {
      stem += "_scalar";
      continue;
    }
    stem += fmt::format("_{}", dtypeShortName(in.dtype));
    for (int d = 0; d < in.rank; ++d) stem += in.dims[d].isStatic() ? fmt::format("x{}", in.dims[d].size) : "xdyn";
  }
  return stem;
}

const KernelFamily* familyFor(OpId op) {
  if (const KernelFamily* family = matmulFamily(op)) return family;
  if (const KernelFamily* family = convFamily(op)) return family;
  if (const KernelFamily* family = reduceFamily(op)) return family;
  return elementwiseFamily(op);
}

}  // namespace shapevm::jit
