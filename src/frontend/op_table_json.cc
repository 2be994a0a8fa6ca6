// SPDX-License-Identifier: Apache-2.0
// `shapevm ops --json`: the op table (ops.def through OpRegistry) with each op's Python binding,
// for tools and for the test that holds the numpy oracle (python/shapevm/ops.py) to the table.
// Invariant: one object per ops.def row, in table order.
#include <fmt/format.h>

#include "frontend/frontend.h"
#include "ops/registry.h"

namespace shapevm::frontend {
namespace {

std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string_view inputKindName(InputKind kind) {
  switch (kind) {
    case InputKind::Tensor: return "T";
    case InputKind::Ints: return "ints";
    case InputKind::Int: return "int";
    case InputKind::Num: return "num";
  }
  return "?";
}

std::string_view domainName(InputDomain domain) {
  switch (domain) {
    case InputDomain::Any: return "any";
    case InputDomain::Positive: return "pos";
    case InputDomain::Bool: return "bool";
  }
  return "?";
}

}  // namespace

std::string opTableJson() {
  std::string out = "[\n";
  bool first = true;
  for (const OpSchema& schema : OpRegistry::global().schemas()) {
    std::string inputs, attrs, params;
    for (const InputSpec& in : schema.inputs) {
      inputs +=
          fmt::format("{}{{\"name\": {}, \"kind\": \"{}\", \"optional\": {}, \"variadic\": {}, \"domain\": \"{}\"}}",
                      inputs.empty() ? "" : ", ", quoted(in.name), inputKindName(in.kind), in.optional, in.variadic,
                      domainName(in.domain));
    }
    for (const AttrSpec& a : schema.attrs) {
      attrs += fmt::format("{}{{\"name\": {}, \"kind\": \"{}\", \"default\": {}}}", attrs.empty() ? "" : ", ",
                           quoted(a.name), attrKindName(a.kind),
                           a.default_value ? quoted(a.default_value->toString()) : std::string("null"));
    }
    const auto python = opPythonParams(schema.name);
    if (python) {
      for (const PyParam& p : *python) {
        params += fmt::format("{}{{\"name\": {}, \"default\": {}}}", params.empty() ? "" : ", ", quoted(p.name),
                              p.default_text ? quoted(*p.default_text) : std::string("null"));
      }
    }
    out += fmt::format(
        "{}  {{\"name\": {}, \"ident\": {}, \"class\": \"{}\", \"inputs\": [{}], \"attrs\": [{}], \"outputs\": {}, "
        "\"dtype_rule\": \"{}\", \"shape_fn\": {}, \"jit\": {}, \"python\": {}, \"meaning\": {}}}",
        first ? "" : ",\n", quoted(schema.name), quoted(schema.ident), opClassName(schema.cls), inputs, attrs,
        schema.num_outputs, dtypeRuleName(schema.dtype_rule), quoted(schema.shape_fn_name),
        quoted(schema.jit.toString()), python ? "[" + params + "]" : std::string("null"), quoted(schema.meaning));
    first = false;
  }
  return out + "\n]\n";
}

}  // namespace shapevm::frontend
