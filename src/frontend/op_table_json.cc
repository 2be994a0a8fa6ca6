// SPDX-License-Identifier: Apache-2.0
// `shapevm ops --json`: the op table (ops.def through OpRegistry) with each op's Python binding,
// for tools and for the test that holds the numpy oracle (python/shapevm/ops.py) to the table.
// Invariant: one object per ops.def row, in table order.
#include <fmt/format.h>

#include "frontend/frontend.h"
#include "ops/registry.h"
#include "support/json_text.h"

namespace shapevm::frontend {
namespace {

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
                      inputs.empty() ? "" : ", ", jsonString(in.name), inputKindName(in.kind), in.optional, in.variadic,
                      domainName(in.domain));
    }
    for (const AttrSpec& a : schema.attrs) {
      attrs += fmt::format("{}{{\"name\": {}, \"kind\": \"{}\", \"default\": {}}}", attrs.empty() ? "" : ", ",
                           jsonString(a.name), attrKindName(a.kind),
                           a.default_value ? jsonString(a.default_value->toString()) : std::string("null"));
    }
    const auto python = opPythonParams(schema.name);
    if (python) {
      for (const PyParam& p : *python) {
        params += fmt::format("{}{{\"name\": {}, \"default\": {}}}", params.empty() ? "" : ", ", jsonString(p.name),
                              p.default_text ? jsonString(*p.default_text) : std::string("null"));
      }
    }
    out += fmt::format(
        "{}  {{\"name\": {}, \"ident\": {}, \"class\": \"{}\", \"inputs\": [{}], \"attrs\": [{}], \"outputs\": {}, "
        "\"dtype_rule\": \"{}\", \"shape_fn\": {}, \"jit\": {}, \"python\": {}, \"meaning\": {}}}",
        first ? "" : ",\n", jsonString(schema.name), jsonString(schema.ident), opClassName(schema.cls), inputs, attrs,
        schema.num_outputs, dtypeRuleName(schema.dtype_rule), jsonString(schema.shape_fn_name),
        jsonString(schema.jit.toString()), python ? "[" + params + "]" : std::string("null"),
        jsonString(schema.meaning));
    first = false;
  }
  return out + "\n]\n";
}

}  // namespace shapevm::frontend
