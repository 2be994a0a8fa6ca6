// SPDX-License-Identifier: Apache-2.0
// Cheap output shape tokens for CallOp sites, from the op schema's shape functions on the input
// tokens and constant attributes; `[*]` when unsure. A token may be less precise than the truth
// but never wrong: unknown extents become anonymous `?`. Also the joins of tokens at merges.

#include "frontend/lowering.h"

namespace shapevm::frontend {

TensorDescriptor joinTokens(const TensorDescriptor& a, const TensorDescriptor& b) {
  if (a == b) return a;
  if (!a.is_tensor || !b.is_tensor || a.any_rank || b.any_rank || a.rank() != b.rank()) return TensorDescriptor::anyTensor();
  TensorDescriptor out;
  if (a.dtype == b.dtype) out.dtype = a.dtype;
  for (int k = 0; k < a.rank(); ++k) {
    const DimToken& x = a.dims[static_cast<std::size_t>(k)];
    const DimToken& y = b.dims[static_cast<std::size_t>(k)];
    out.dims.push_back(x == y ? x : DimToken::dynamic(-1));
  }
  return out;
}

TensorDescriptor stripDimIds(const TensorDescriptor& t) {
  TensorDescriptor out = t;
  for (DimToken& d : out.dims) {
    if (!d.is_static) d = DimToken::dynamic(-1);
  }
  return out;
}

namespace {

// A Val as the op schema's shape functions see it.
SymInput symInput(const Val& v) {
  switch (v.kind) {
    case VKind::Tensor: {
      if (!v.token.is_tensor || v.token.any_rank) return SymInput::of(SymInput::Kind::Other);
      SymShape shape;
      for (const DimToken& d : v.token.dims)
        shape.dims.push_back(d.is_static ? SymDim::fixed(d.size) : SymDim::dynamic(d.id));
      return SymInput::tensor(shape);
    }
    case VKind::Int:
    case VKind::Bool: return SymInput::of(SymInput::Kind::IntScalar);
    case VKind::Float: return SymInput::of(SymInput::Kind::Scalar);
    case VKind::None: return SymInput::of(SymInput::Kind::None);
    case VKind::Tuple: {
      SymShape elements;
      if (v.static_tuple) {
        for (const Val& item : v.items) {
          if (item.is_const && item.kind == VKind::Int) elements.dims.push_back(SymDim::fixed(item.i));
          else elements.dims.push_back(SymDim::dynamic(item.dim_id >= 0 ? item.dim_id : -1));
        }
      } else if (v.tuple_len >= 0) {
        elements.dims.assign(static_cast<std::size_t>(v.tuple_len), SymDim::dynamic(-1));
      } else {
        elements = SymShape::any();
      }
      return SymInput::ints(elements);
    }
    default: return SymInput::of(SymInput::Kind::Other);
  }
}

TensorDescriptor tokenOf(const SymShape& shape) {
  if (!shape.rank_known) return TensorDescriptor::anyTensor();
  TensorDescriptor out;
  for (const SymDim& d : shape.dims)
    out.dims.push_back(d.is_static ? DimToken::fixed(d.size) : DimToken::dynamic(d.id));
  return out;
}

}  // namespace

// Output tokens come from the op's shape function in the schema (src/ops/shape_fns.cc); tokens
// carry no dtype and no ranges here.
TensorDescriptor Lowerer::inferOutput(const std::string& op, const std::vector<Val>& inputs, const NamedAttrs& attrs,
                                      int output_index, int num_outputs) const {
  const OpSchema* schema = OpRegistry::global().find(op);
  if (schema == nullptr) return TensorDescriptor::anyTensor();
  auto resolved = resolveAttrs(*schema, attrs);
  if (!resolved) return TensorDescriptor::anyTensor();
  std::vector<SymInput> sym;
  sym.reserve(inputs.size());
  for (const Val& v : inputs) sym.push_back(symInput(v));
  return tokenOf(inferShape(*schema, sym, *resolved, output_index, num_outputs));
}

}  // namespace shapevm::frontend
