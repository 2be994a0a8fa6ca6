// SPDX-License-Identifier: Apache-2.0
// Cheap output shape tokens for CallOp sites: rank and static dims where they follow from the
// input tokens and constant attributes (elementwise broadcasting, matmul, reshape with
// constants, transpose, (un)squeeze, split, gather, reductions); `[*]` when unsure. A token may
// be less precise than the truth but never wrong: unknown extents become anonymous `?`.
#include <algorithm>
#include <set>

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

const TensorDescriptor kAny = TensorDescriptor::anyTensor();

TensorDescriptor tokenOf(const Val& v) {
  if (v.kind == VKind::Tensor) return v.token;
  if (v.isScalarKind()) return TensorDescriptor{};  // a scalar acts as a 0-d tensor
  return kAny;
}

DimToken anon() { return DimToken::dynamic(-1); }

bool isOne(const DimToken& d) { return d.is_static && d.size == 1; }

std::optional<TensorDescriptor> broadcast(const TensorDescriptor& a, const TensorDescriptor& b) {
  if (a.any_rank || b.any_rank) return std::nullopt;
  const int rank = std::max(a.rank(), b.rank());
  TensorDescriptor out;
  for (int k = 0; k < rank; ++k) {
    const int ia = a.rank() - rank + k, ib = b.rank() - rank + k;
    if (ia < 0) { out.dims.push_back(b.dims[static_cast<std::size_t>(ib)]); continue; }
    if (ib < 0) { out.dims.push_back(a.dims[static_cast<std::size_t>(ia)]); continue; }
    DimToken x = a.dims[static_cast<std::size_t>(ia)], y = b.dims[static_cast<std::size_t>(ib)];
    x.lo = x.hi = y.lo = y.hi = -1;
    x.divisor = y.divisor = 1;
    if (isOne(x)) { out.dims.push_back(y); continue; }
    if (isOne(y)) { out.dims.push_back(x); continue; }
    if (x.is_static && y.is_static) {
      if (x.size != y.size) return std::nullopt;  // an error at run time; leave it to the kernel
      out.dims.push_back(x);
      continue;
    }
    if (x.is_static) { out.dims.push_back(x); continue; }
    if (y.is_static) { out.dims.push_back(y); continue; }
    out.dims.push_back(x.id >= 0 && x.id == y.id ? x : anon());
  }
  return out;
}

// A shape operand (static tuple) as dims; nullopt when the rank is unknown.
std::optional<std::vector<DimToken>> shapeDims(const Val& shape, bool allow_minus_one, bool* has_minus_one) {
  if (!shape.static_tuple) {
    if (shape.kind == VKind::Tuple && shape.tuple_len >= 0) return std::vector<DimToken>(static_cast<std::size_t>(shape.tuple_len), anon());
    return std::nullopt;
  }
  std::vector<DimToken> dims;
  for (const Val& item : shape.items) {
    if (item.is_const && item.kind == VKind::Int) {
      if (item.i == -1 && allow_minus_one) {
        *has_minus_one = true;
        dims.push_back(anon());
      } else if (item.i >= 0) {
        dims.push_back(DimToken::fixed(item.i));
      } else {
        return std::nullopt;
      }
    } else if (item.dim_id >= 0) {
      dims.push_back(DimToken::dynamic(item.dim_id));
    } else {
      dims.push_back(anon());
    }
  }
  return dims;
}

std::optional<std::int64_t> normAxis(std::int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

const AttrValue* findAttr(const NamedAttrs& attrs, std::string_view name) {
  for (const auto& [key, value] : attrs) {
    if (key == name) return &value;
  }
  return nullptr;
}

}  // namespace

TensorDescriptor Lowerer::inferOutput(const std::string& op, const std::vector<Val>& inputs, const NamedAttrs& attrs,
                                      int output_index, int num_outputs) const {
  static const std::set<std::string> kBinary = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "equal",
                                                "not_equal", "less", "less_equal", "greater", "greater_equal",
                                                "logical_and", "logical_or", "where", "add_n"};
  static const std::set<std::string> kSame = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu",
                                              "gelu", "erf", "silu", "logical_not", "identity", "contiguous", "cast",
                                              "softmax", "log_softmax", "layer_norm"};
  if (inputs.empty()) return kAny;
  const TensorDescriptor x = tokenOf(inputs[0]);
  auto strip = [](TensorDescriptor t) {
    t.dtype.reset();
    for (DimToken& d : t.dims) { d.lo = d.hi = -1; d.divisor = 1; }
    return t;
  };
  if (kBinary.count(op)) {
    std::optional<TensorDescriptor> acc = x;
    for (std::size_t k = 1; k < inputs.size() && acc; ++k) acc = broadcast(*acc, tokenOf(inputs[k]));
    if (!acc || (inputs[0].kind != VKind::Tensor && op != "add_n" && !(inputs.size() > 1 && inputs[1].kind == VKind::Tensor))) {
      if (!acc) return kAny;
    }
    return acc ? strip(*acc) : kAny;
  }
  if (x.any_rank || !x.is_tensor) return kAny;
  if (kSame.count(op)) return strip(x);
  const int rank = x.rank();
  if (op == "matmul") {
    TensorDescriptor b = tokenOf(inputs[1]);
    if (b.any_rank || rank == 0 || b.rank() == 0) return kAny;
    TensorDescriptor a2 = x, b2 = b;
    if (rank == 1) a2.dims.insert(a2.dims.begin(), DimToken::fixed(1));
    if (b.rank() == 1) b2.dims.push_back(DimToken::fixed(1));
    TensorDescriptor batch_a, batch_b;
    batch_a.dims.assign(a2.dims.begin(), a2.dims.end() - 2);
    batch_b.dims.assign(b2.dims.begin(), b2.dims.end() - 2);
    auto batch = broadcast(batch_a, batch_b);
    if (!batch) return kAny;
    TensorDescriptor out = *batch;
    if (rank != 1) out.dims.push_back(a2.dims[a2.dims.size() - 2]);
    if (b.rank() != 1) out.dims.push_back(b2.dims.back());
    return strip(out);
  }
  if (op == "reshape" || op == "broadcast_to") {
    bool minus_one = false;
    auto dims = shapeDims(inputs[1], op == "reshape", &minus_one);
    if (!dims) return kAny;
    TensorDescriptor out;
    out.dims = *dims;
    if (minus_one) {  // -1 is static when everything else is
      std::int64_t total = 1, known = 1;
      bool all_static = std::all_of(x.dims.begin(), x.dims.end(), [](const DimToken& d) { return d.is_static; });
      for (const DimToken& d : x.dims) total *= d.is_static ? d.size : 1;
      int minus_index = -1, nonstatic = 0;
      for (std::size_t k = 0; k < inputs[1].items.size(); ++k) {
        const Val& item = inputs[1].items[k];
        if (item.is_const && item.i == -1) minus_index = static_cast<int>(k);
        else if (out.dims[k].is_static) known *= out.dims[k].size;
        else ++nonstatic;
      }
      if (all_static && nonstatic == 0 && known > 0 && total % known == 0 && minus_index >= 0) {
        out.dims[static_cast<std::size_t>(minus_index)] = DimToken::fixed(total / known);
      }
    }
    return out;
  }
  if (op == "transpose") {
    const AttrValue* perm = findAttr(attrs, "perm");
    TensorDescriptor out = strip(x);
    if (perm == nullptr || perm->ints.empty()) {
      std::reverse(out.dims.begin(), out.dims.end());
      return out;
    }
    if (static_cast<int>(perm->ints.size()) != rank) return kAny;
    for (int k = 0; k < rank; ++k) {
      auto a = normAxis(perm->ints[static_cast<std::size_t>(k)], rank);
      if (!a) return kAny;
      out.dims[static_cast<std::size_t>(k)] = strip(x).dims[static_cast<std::size_t>(*a)];
    }
    return out;
  }
  if (op == "unsqueeze") {
    const AttrValue* axes = findAttr(attrs, "axes");
    if (axes == nullptr) return kAny;
    const int out_rank = rank + static_cast<int>(axes->ints.size());
    std::vector<bool> inserted(static_cast<std::size_t>(out_rank), false);
    for (std::int64_t a : axes->ints) {
      auto n = normAxis(a, out_rank);
      if (!n || inserted[static_cast<std::size_t>(*n)]) return kAny;
      inserted[static_cast<std::size_t>(*n)] = true;
    }
    TensorDescriptor out;
    std::size_t next = 0;
    TensorDescriptor s = strip(x);
    for (int k = 0; k < out_rank; ++k) out.dims.push_back(inserted[static_cast<std::size_t>(k)] ? DimToken::fixed(1) : s.dims[next++]);
    return out;
  }
  if (op == "squeeze") {
    const AttrValue* axes = findAttr(attrs, "axes");
    TensorDescriptor out;
    TensorDescriptor s = strip(x);
    if (axes == nullptr || axes->ints.empty()) {
      for (const DimToken& d : s.dims) {
        if (!d.is_static) return kAny;
        if (d.size != 1) out.dims.push_back(d);
      }
      return out;
    }
    std::set<std::int64_t> drop;
    for (std::int64_t a : axes->ints) {
      auto n = normAxis(a, rank);
      if (!n) return kAny;
      drop.insert(*n);
    }
    for (int k = 0; k < rank; ++k) {
      if (!drop.count(k)) out.dims.push_back(s.dims[static_cast<std::size_t>(k)]);
    }
    return out;
  }
  if (op == "split") {
    const AttrValue* axis_attr = findAttr(attrs, "axis");
    auto axis = normAxis(axis_attr ? axis_attr->i : 0, rank);
    if (!axis) return kAny;
    TensorDescriptor out = strip(x);
    DimToken& d = out.dims[static_cast<std::size_t>(*axis)];
    if (const AttrValue* sizes = findAttr(attrs, "sizes")) {
      d = DimToken::fixed(sizes->ints[static_cast<std::size_t>(output_index)]);
    } else if (d.is_static && num_outputs > 0 && d.size % num_outputs == 0) {
      d = DimToken::fixed(d.size / num_outputs);
    } else {
      d = anon();
    }
    return out;
  }
  if (op == "gather") {
    const AttrValue* axis_attr = findAttr(attrs, "axis");
    auto axis = normAxis(axis_attr ? axis_attr->i : 0, rank);
    if (!axis) return kAny;
    TensorDescriptor out = strip(x);
    const Val& index = inputs[1];
    if (index.kind == VKind::Int || index.kind == VKind::Bool) {
      out.dims.erase(out.dims.begin() + *axis);
      return out;
    }
    if (index.kind != VKind::Tensor || index.token.any_rank) return kAny;
    TensorDescriptor idx = strip(index.token);
    out.dims.erase(out.dims.begin() + *axis);
    out.dims.insert(out.dims.begin() + *axis, idx.dims.begin(), idx.dims.end());
    return out;
  }
  if (op == "sum" || op == "mean" || op == "max" || op == "min" || op == "argmax") {
    const AttrValue* keep = findAttr(attrs, "keepdims");
    const bool keepdims = keep != nullptr && keep->i != 0;
    std::set<std::int64_t> reduced;
    if (op == "argmax") {
      const AttrValue* axis_attr = findAttr(attrs, "axis");
      auto a = normAxis(axis_attr ? axis_attr->i : 0, rank);
      if (!a) return kAny;
      reduced.insert(*a);
    } else {
      const AttrValue* axes = findAttr(attrs, "axes");
      if (axes == nullptr || axes->ints.empty()) {
        for (int k = 0; k < rank; ++k) reduced.insert(k);
      } else {
        for (std::int64_t a : axes->ints) {
          auto n = normAxis(a, rank);
          if (!n) return kAny;
          reduced.insert(*n);
        }
      }
    }
    TensorDescriptor out;
    TensorDescriptor s = strip(x);
    for (int k = 0; k < rank; ++k) {
      if (!reduced.count(k)) out.dims.push_back(s.dims[static_cast<std::size_t>(k)]);
      else if (keepdims) out.dims.push_back(DimToken::fixed(1));
    }
    return out;
  }
  if (op == "concat" || op == "stack") {
    const AttrValue* axis_attr = findAttr(attrs, "axis");
    const std::int64_t raw = axis_attr ? axis_attr->i : 0;
    for (const Val& v : inputs) {
      if (v.kind != VKind::Tensor || v.token.any_rank || v.token.rank() != rank) return kAny;
    }
    TensorDescriptor out = strip(x);
    for (std::size_t k = 1; k < inputs.size(); ++k) out = joinTokens(out, strip(inputs[k].token));
    if (op == "stack") {
      auto a = normAxis(raw, rank + 1);
      if (!a) return kAny;
      out.dims.insert(out.dims.begin() + *a, DimToken::fixed(static_cast<std::int64_t>(inputs.size())));
      return out;
    }
    auto a = normAxis(raw, rank);
    if (!a) return kAny;
    std::int64_t total = 0;
    bool all_static = true;
    for (const Val& v : inputs) {
      const DimToken& d = v.token.dims[static_cast<std::size_t>(*a)];
      all_static = all_static && d.is_static;
      total += d.size;
    }
    out.dims[static_cast<std::size_t>(*a)] = all_static ? DimToken::fixed(total) : anon();
    return out;
  }
  return kAny;
}

}  // namespace shapevm::frontend
