// SPDX-License-Identifier: Apache-2.0
// The op schema table parsed from ops.def (columns checked at compile time where they can be),
// attribute values, and the dtype rules. Shape functions live in shape_fns.cc.
// Invariant: opSchemaTable()[i].id == OpId(i) for every row.
#include "ops/op_schema.h"

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "ops/kernel_util.h"

namespace shapevm {
namespace {

struct OpRow {
  OpId id;
  std::string_view ident, name;
  OpClass cls;
  std::string_view inputs, attrs;
  int outputs;
  DTypeRule dtype_rule;
  ShapeFn shape_fn;
  std::string_view shape_fn_name, jit, meaning;
};
constexpr OpRow kOpRows[] = {
#define SVM_OP(ident, name, cls, inputs, attrs, outputs, dtype_rule, shape_fn, jit, meaning) \
  {OpId::ident,           #ident,    name,      OpClass::cls, inputs, attrs, outputs,        \
   DTypeRule::dtype_rule, &shape_fn, #shape_fn, jit,          meaning},
#include "ops/ops.def"
#undef SVM_OP
};
static_assert(sizeof(kOpRows) / sizeof(kOpRows[0]) == kNumOps, "ops.def rows and OpId disagree");

// The jit column: space-separated words from kJitWords, or exactly "none".
constexpr std::string_view kJitWords[] = {"ew", "reduce", "matmul", "fuse", "view", "freduce", "norm", "conv"};

constexpr bool jitColumnValid(std::string_view text) {
  if (text == "none") return true;
  bool any = false;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    std::size_t start = i;
    while (i < text.size() && text[i] != ' ') ++i;
    if (i == start) break;
    bool known = false;
    for (std::string_view word : kJitWords) known = known || text.substr(start, i - start) == word;
    if (!known) return false;
    any = true;
  }
  return any;
}

constexpr bool allJitColumnsValid() {
  for (const OpRow& row : kOpRows) {
    if (!jitColumnValid(row.jit)) return false;
  }
  return true;
}
static_assert(allJitColumnsValid(),
              "ops.def: a jit column is empty or has an unknown word (use `none` for interpreted-only ops)");

constexpr bool identsAndOrderAgree() {
  for (int i = 0; i < kNumOps; ++i) {
    if (static_cast<int>(kOpRows[i].id) != i) return false;
  }
  return true;
}
static_assert(identsAndOrderAgree());

std::vector<std::string_view> splitSpaces(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    std::size_t start = i;
    while (i < text.size() && text[i] != ' ') ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

AttrValue parseDefault(AttrKind kind, std::string_view text) {
  switch (kind) {
    case AttrKind::Int: {
      std::int64_t v = 0;
      std::from_chars(text.data(), text.data() + text.size(), v);
      return AttrValue::ofInt(v);
    }
    case AttrKind::Float: return AttrValue::ofFloat(std::strtod(std::string(text).c_str(), nullptr));
    case AttrKind::Bool: return AttrValue::ofBool(text == "true");
    case AttrKind::DType: return AttrValue::ofDType(parseDType(text).value_or(DType::Float32));
    case AttrKind::Ints: {
      std::vector<std::int64_t> values;  // only "[]" defaults appear in ops.def
      return AttrValue::ofInts(values);
    }
  }
  return {};
}

OpSchema buildSchema(const OpRow& row) {
  OpSchema schema;
  schema.id = row.id;
  schema.ident = row.ident;
  schema.name = row.name;
  schema.meaning = row.meaning;
  schema.cls = row.cls;
  schema.num_outputs = row.outputs;
  schema.dtype_rule = row.dtype_rule;
  schema.shape_fn = row.shape_fn;
  schema.shape_fn_name = row.shape_fn_name;
  for (std::string_view word : splitSpaces(row.jit)) {
    schema.jit.elementwise = schema.jit.elementwise || word == "ew";
    schema.jit.reduce = schema.jit.reduce || word == "reduce";
    schema.jit.matmul = schema.jit.matmul || word == "matmul";
    schema.jit.fuse = schema.jit.fuse || word == "fuse";
    schema.jit.view = schema.jit.view || word == "view";
    schema.jit.fused_reduce = schema.jit.fused_reduce || word == "freduce";
    schema.jit.norm = schema.jit.norm || word == "norm";
    schema.jit.conv = schema.jit.conv || word == "conv";
  }
  for (std::string_view item : splitSpaces(row.inputs)) {
    InputSpec spec;
    auto colon = item.find(':');
    spec.name = std::string(item.substr(0, colon));
    std::string_view kind = item.substr(colon + 1);
    if (auto at = kind.find('@'); at != std::string_view::npos) {
      spec.domain = kind.substr(at + 1) == "pos" ? InputDomain::Positive : InputDomain::Bool;
      kind = kind.substr(0, at);
    }
    if (!kind.empty() && kind.back() == '?') {
      spec.optional = true;
      kind.remove_suffix(1);
    }
    if (!kind.empty() && kind.back() == '*') {
      spec.variadic = true;
      kind.remove_suffix(1);
    }
    spec.kind = kind == "T"      ? InputKind::Tensor
                : kind == "ints" ? InputKind::Ints
                : kind == "int"  ? InputKind::Int
                                 : InputKind::Num;
    schema.inputs.push_back(spec);
  }
  for (std::string_view item : splitSpaces(row.attrs)) {
    AttrSpec spec;
    auto colon = item.find(':');
    auto equals = item.find('=');
    spec.name = std::string(item.substr(0, colon));
    std::string_view kind =
        item.substr(colon + 1, equals == std::string_view::npos ? std::string_view::npos : equals - colon - 1);
    spec.kind = kind == "int"     ? AttrKind::Int
                : kind == "float" ? AttrKind::Float
                : kind == "bool"  ? AttrKind::Bool
                : kind == "ints"  ? AttrKind::Ints
                                  : AttrKind::DType;
    if (equals != std::string_view::npos) spec.default_value = parseDefault(spec.kind, item.substr(equals + 1));
    schema.attrs.push_back(spec);
  }
  return schema;
}

}  // namespace

std::string_view attrKindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::Int: return "int";
    case AttrKind::Float: return "float";
    case AttrKind::Bool: return "bool";
    case AttrKind::Ints: return "ints";
    case AttrKind::DType: return "dtype";
  }
  return "?";
}

bool AttrValue::operator==(const AttrValue& other) const {
  if (kind != other.kind) return false;
  switch (kind) {
    case AttrKind::Int:
    case AttrKind::Bool: return i == other.i;
    case AttrKind::Float: return f == other.f || (f != f && other.f != other.f);
    case AttrKind::Ints: return ints == other.ints;
    case AttrKind::DType: return dtype == other.dtype;
  }
  return false;
}

std::string AttrValue::toString() const {
  switch (kind) {
    case AttrKind::Int: return std::to_string(i);
    case AttrKind::Bool: return i ? "true" : "false";
    case AttrKind::Float: {
      std::string text = fmt::format("{}", f);  // shortest round-trip form
      if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
      return text;
    }
    case AttrKind::DType: return std::string(dtypeName(dtype));
    case AttrKind::Ints: {
      std::string text = "[";
      for (std::size_t k = 0; k < ints.size(); ++k) {
        if (k > 0) text += ',';
        text += std::to_string(ints[k]);
      }
      return text + "]";
    }
  }
  return "?";
}

int OpSchema::minInputs() const {
  int count = 0;
  for (const InputSpec& spec : inputs) count += spec.optional ? 0 : 1;
  return count;
}

int OpSchema::maxInputs() const {
  for (const InputSpec& spec : inputs) {
    if (spec.variadic) return -1;
  }
  return static_cast<int>(inputs.size());
}

int OpSchema::attrIndex(std::string_view attr_name) const {
  for (std::size_t i = 0; i < attrs.size(); ++i) {
    if (attrs[i].name == attr_name) return static_cast<int>(i);
  }
  return -1;
}

std::string_view opClassName(OpClass cls) {
  switch (cls) {
    case OpClass::Contraction: return "contraction";
    case OpClass::Binary: return "binary";
    case OpClass::Compare: return "compare";
    case OpClass::Unary: return "unary";
    case OpClass::Select: return "select";
    case OpClass::Cast: return "cast";
    case OpClass::Nary: return "nary";
    case OpClass::View: return "view";
    case OpClass::Movement: return "movement";
    case OpClass::Reduction: return "reduction";
    case OpClass::Normalization: return "normalization";
    case OpClass::Copy: return "copy";
    case OpClass::Creation: return "creation";
  }
  return "?";
}

std::string_view dtypeRuleName(DTypeRule rule) {
  switch (rule) {
    case DTypeRule::Same: return "same";
    case DTypeRule::Promote: return "promote";
    case DTypeRule::Bool: return "bool";
    case DTypeRule::Float: return "float";
    case DTypeRule::Select: return "select";
    case DTypeRule::Attr: return "attr";
    case DTypeRule::Int64: return "int64";
    case DTypeRule::Sum: return "sum";
    case DTypeRule::Mean: return "mean";
  }
  return "?";
}

std::string JitSupport::toString() const {
  std::string text;
  auto add = [&](bool on, const char* word) {
    if (on) text += (text.empty() ? "" : " ") + std::string(word);
  };
  add(elementwise, "ew");
  add(reduce, "reduce");
  add(matmul, "matmul");
  add(fuse, "fuse");
  add(view, "view");
  add(fused_reduce, "freduce");
  add(norm, "norm");
  add(conv, "conv");
  return text.empty() ? "none" : text;
}

const std::vector<OpSchema>& opSchemaTable() {
  static const std::vector<OpSchema> table = [] {
    std::vector<OpSchema> schemas;
    for (const OpRow& row : kOpRows) schemas.push_back(buildSchema(row));
    return schemas;
  }();
  return table;
}

const AttrValue* ShapeArgs::attr(std::string_view attr_name) const {
  const int index = schema == nullptr ? -1 : schema->attrIndex(attr_name);
  return index >= 0 && static_cast<std::size_t>(index) < attrs.size() ? &attrs[static_cast<std::size_t>(index)]
                                                                      : nullptr;
}

SymShape inferShape(const OpSchema& schema, std::span<const SymInput> inputs, std::span<const AttrValue> attrs,
                    int output_index, int num_outputs) {
  if (inputs.empty() || attrs.size() != schema.attrs.size() || static_cast<int>(inputs.size()) < schema.minInputs() ||
      (schema.maxInputs() >= 0 && static_cast<int>(inputs.size()) > schema.maxInputs())) {
    return SymShape::any();
  }
  ShapeArgs args;
  args.schema = &schema;
  args.inputs = inputs;
  args.attrs = attrs;
  args.output_index = output_index;
  args.num_outputs = num_outputs;
  return schema.shape_fn(args);
}

std::optional<DType> resultDType(const OpSchema& schema, std::span<const std::optional<DType>> inputs,
                                 std::span<const AttrValue> attrs) {
  std::optional<DType> first;
  std::optional<DType> promoted;
  for (const std::optional<DType>& d : inputs) {
    if (!d) continue;
    if (!first) first = d;
    promoted = promoted ? promoteTypes(*promoted, *d) : *d;
  }
  switch (schema.dtype_rule) {
    case DTypeRule::Same: return first;
    case DTypeRule::Promote: return promoted;
    case DTypeRule::Bool: return DType::Bool;
    case DTypeRule::Float:
      if (!first) return std::nullopt;
      return isFloating(*first) ? *first : DType::Float32;
    case DTypeRule::Select:
      if (inputs.size() < 3 || !inputs[1] || !inputs[2]) return std::nullopt;
      return promoteTypes(*inputs[1], *inputs[2]);
    case DTypeRule::Attr: {
      const int index = schema.attrIndex("dtype");
      if (index < 0 || static_cast<std::size_t>(index) >= attrs.size()) return std::nullopt;
      return attrs[static_cast<std::size_t>(index)].dtype;
    }
    case DTypeRule::Int64: return DType::Int64;
    case DTypeRule::Sum:
      if (!first) return std::nullopt;
      return isFloating(*first) ? *first : DType::Int64;
    case DTypeRule::Mean:
      if (!first) return std::nullopt;
      return isFloating(*first) ? *first : DType::Float32;
  }
  return std::nullopt;
}

std::string SymShape::toString() const {
  if (!rank_known) return "[*]";
  std::string text = "[";
  for (std::size_t k = 0; k < dims.size(); ++k) {
    if (k > 0) text += ',';
    const SymDim& d = dims[k];
    text += d.is_static ? std::to_string(d.size) : d.id >= 0 ? fmt::format("?{}", d.id) : std::string("?");
  }
  return text + "]";
}

}  // namespace shapevm
