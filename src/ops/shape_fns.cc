// SPDX-License-Identifier: Apache-2.0
// The output-shape functions ops.def names, on symbolic dims (op_schema.h): rank and static dims
// where they follow from the inputs and constant attributes, dynamic dim ids carried through
// where an output dim is an input dim. Invariant: a result may be less precise than the truth but
// never wrong; unknown extents are anonymous dynamic dims, an unknown rank is SymShape::any().
#include <algorithm>
#include <set>

#include "ops/conv_geometry.h"
#include "ops/op_schema.h"

namespace shapevm {
namespace {

SymDim anon() {
  return SymDim::dynamic(-1);
}

bool isOne(const SymDim& d) {
  return d.is_static && d.size == 1;
}

// An input as a tensor shape: a scalar acts as a 0-d tensor; anything else has an unknown shape.
SymShape tensorOf(const SymInput& in) {
  switch (in.kind) {
    case SymInput::Kind::Tensor: return in.shape;
    case SymInput::Kind::IntScalar:
    case SymInput::Kind::Scalar: return SymShape{};
    case SymInput::Kind::Ints:
    case SymInput::Kind::None:
    case SymInput::Kind::Other: return SymShape::any();
  }
  return SymShape::any();
}

std::optional<std::int64_t> normAxis(std::int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

// The `axis` attribute (0 when the op has none) normalized for `rank`; nullopt when out of range.
std::optional<std::int64_t> axisAttr(const ShapeArgs& args, int rank) {
  const AttrValue* axis = args.attr("axis");
  return normAxis(axis ? axis->i : 0, rank);
}

// A shape operand as output dims; nullopt when its length is unknown or a value is invalid.
std::optional<std::vector<SymDim>> shapeDims(const SymInput& shape, bool allow_minus_one, bool* has_minus_one) {
  if (shape.kind != SymInput::Kind::Ints || !shape.shape.rank_known) return std::nullopt;
  std::vector<SymDim> dims;
  for (const SymDim& item : shape.shape.dims) {
    if (!item.is_static) {
      dims.push_back(item);
    } else if (item.size == -1 && allow_minus_one) {
      *has_minus_one = true;
      dims.push_back(anon());
    } else if (item.size >= 0) {
      dims.push_back(item);
    } else {
      return std::nullopt;
    }
  }
  return dims;
}

// x must be a tensor (or scalar) of known rank for most shape functions.
std::optional<SymShape> knownInput(const ShapeArgs& args, std::size_t index = 0) {
  if (args.inputs.size() <= index) return std::nullopt;
  SymShape x = tensorOf(args.inputs[index]);
  if (!x.rank_known) return std::nullopt;
  return x;
}

// The dims of a and b where they agree, anonymous where they do not; any when the ranks differ.
SymShape join(const SymShape& a, const SymShape& b) {
  if (a == b) return a;
  if (!a.rank_known || !b.rank_known || a.rank() != b.rank()) return SymShape::any();
  SymShape out;
  for (int k = 0; k < a.rank(); ++k) {
    const SymDim& x = a.dims[static_cast<std::size_t>(k)];
    const SymDim& y = b.dims[static_cast<std::size_t>(k)];
    out.dims.push_back(x == y ? x : anon());
  }
  return out;
}

}  // namespace

std::optional<SymShape> broadcastShapes(const SymShape& a, const SymShape& b) {
  if (!a.rank_known || !b.rank_known) return std::nullopt;
  const int rank = std::max(a.rank(), b.rank());
  SymShape out;
  for (int k = 0; k < rank; ++k) {
    const int ia = a.rank() - rank + k, ib = b.rank() - rank + k;
    if (ia < 0) {
      out.dims.push_back(b.dims[static_cast<std::size_t>(ib)]);
      continue;
    }
    if (ib < 0) {
      out.dims.push_back(a.dims[static_cast<std::size_t>(ia)]);
      continue;
    }
    const SymDim x = a.dims[static_cast<std::size_t>(ia)], y = b.dims[static_cast<std::size_t>(ib)];
    if (isOne(x)) {
      out.dims.push_back(y);
      continue;
    }
    if (isOne(y)) {
      out.dims.push_back(x);
      continue;
    }
    if (x.is_static && y.is_static) {
      if (x.size != y.size) return std::nullopt;  // an error at run time; leave it to the kernel
      out.dims.push_back(x);
      continue;
    }
    if (x.is_static) {
      out.dims.push_back(x);
      continue;
    }
    if (y.is_static) {
      out.dims.push_back(y);
      continue;
    }
    out.dims.push_back(x.id >= 0 && x.id == y.id ? x : anon());
  }
  return out;
}

SymShape shapeUnknown(const ShapeArgs&) {
  return SymShape::any();
}

SymShape shapeSame(const ShapeArgs& args) {
  return knownInput(args).value_or(SymShape::any());
}

SymShape shapeBroadcast(const ShapeArgs& args) {
  std::optional<SymShape> acc = tensorOf(args.inputs[0]);
  for (std::size_t k = 1; k < args.inputs.size() && acc; ++k) acc = broadcastShapes(*acc, tensorOf(args.inputs[k]));
  return acc ? *acc : SymShape::any();
}

SymShape shapeMatmul(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x || args.inputs.size() < 2) return SymShape::any();
  const int rank = x->rank();
  const SymShape b = tensorOf(args.inputs[1]);
  if (!b.rank_known || rank == 0 || b.rank() == 0) return SymShape::any();
  SymShape a2 = *x, b2 = b;
  if (rank == 1) a2.dims.insert(a2.dims.begin(), SymDim::fixed(1));
  if (b.rank() == 1) b2.dims.push_back(SymDim::fixed(1));
  SymShape batch_a, batch_b;
  batch_a.dims.assign(a2.dims.begin(), a2.dims.end() - 2);
  batch_b.dims.assign(b2.dims.begin(), b2.dims.end() - 2);
  auto batch = broadcastShapes(batch_a, batch_b);
  if (!batch) return SymShape::any();
  SymShape out = *batch;
  if (rank != 1) out.dims.push_back(a2.dims[a2.dims.size() - 2]);
  if (b.rank() != 1) out.dims.push_back(b2.dims.back());
  return out;
}

namespace {

SymShape reshapeLike(const ShapeArgs& args, bool allow_minus_one) {
  auto x = knownInput(args);
  if (!x || args.inputs.size() < 2) return SymShape::any();
  bool minus_one = false;
  auto dims = shapeDims(args.inputs[1], allow_minus_one, &minus_one);
  if (!dims) return SymShape::any();
  SymShape out;
  out.dims = *dims;
  if (minus_one) {  // -1 is static when everything else is
    std::int64_t total = 1, known = 1;
    const bool all_static = std::all_of(x->dims.begin(), x->dims.end(), [](const SymDim& d) { return d.is_static; });
    for (const SymDim& d : x->dims) total *= d.is_static ? d.size : 1;
    int minus_index = -1, nonstatic = 0;
    const std::vector<SymDim>& items = args.inputs[1].shape.dims;
    for (std::size_t k = 0; k < items.size(); ++k) {
      if (items[k].is_static && items[k].size == -1) minus_index = static_cast<int>(k);
      else if (out.dims[k].is_static) known *= out.dims[k].size;
      else ++nonstatic;
    }
    if (all_static && nonstatic == 0 && known > 0 && total % known == 0 && minus_index >= 0) {
      out.dims[static_cast<std::size_t>(minus_index)] = SymDim::fixed(total / known);
    }
  }
  return out;
}

}  // namespace

SymShape shapeReshape(const ShapeArgs& args) {
  return reshapeLike(args, true);
}

SymShape shapeBroadcastTo(const ShapeArgs& args) {
  return reshapeLike(args, false);
}

SymShape shapeTranspose(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x) return SymShape::any();
  const int rank = x->rank();
  const AttrValue* perm = args.attr("perm");
  SymShape out = *x;
  if (perm == nullptr || perm->ints.empty()) {
    std::reverse(out.dims.begin(), out.dims.end());
    return out;
  }
  if (static_cast<int>(perm->ints.size()) != rank) return SymShape::any();
  for (int k = 0; k < rank; ++k) {
    auto a = normAxis(perm->ints[static_cast<std::size_t>(k)], rank);
    if (!a) return SymShape::any();
    out.dims[static_cast<std::size_t>(k)] = x->dims[static_cast<std::size_t>(*a)];
  }
  return out;
}

SymShape shapeUnsqueeze(const ShapeArgs& args) {
  auto x = knownInput(args);
  const AttrValue* axes = args.attr("axes");
  if (!x || axes == nullptr) return SymShape::any();
  const int out_rank = x->rank() + static_cast<int>(axes->ints.size());
  std::vector<bool> inserted(static_cast<std::size_t>(out_rank), false);
  for (std::int64_t a : axes->ints) {
    auto n = normAxis(a, out_rank);
    if (!n || inserted[static_cast<std::size_t>(*n)]) return SymShape::any();
    inserted[static_cast<std::size_t>(*n)] = true;
  }
  SymShape out;
  std::size_t next = 0;
  for (int k = 0; k < out_rank; ++k)
    out.dims.push_back(inserted[static_cast<std::size_t>(k)] ? SymDim::fixed(1) : x->dims[next++]);
  return out;
}

SymShape shapeSqueeze(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x) return SymShape::any();
  const int rank = x->rank();
  const AttrValue* axes = args.attr("axes");
  SymShape out;
  if (axes == nullptr || axes->ints.empty()) {
    for (const SymDim& d : x->dims) {
      if (!d.is_static) return SymShape::any();
      if (d.size != 1) out.dims.push_back(d);
    }
    return out;
  }
  std::set<std::int64_t> drop;
  for (std::int64_t a : axes->ints) {
    auto n = normAxis(a, rank);
    if (!n) return SymShape::any();
    drop.insert(*n);
  }
  for (int k = 0; k < rank; ++k) {
    if (!drop.count(k)) out.dims.push_back(x->dims[static_cast<std::size_t>(k)]);
  }
  return out;
}

SymShape shapeSplit(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x) return SymShape::any();
  auto axis = axisAttr(args, x->rank());
  if (!axis) return SymShape::any();
  SymShape out = *x;
  SymDim& d = out.dims[static_cast<std::size_t>(*axis)];
  const AttrValue* sizes = args.attr("sizes");
  if (sizes != nullptr && !sizes->ints.empty()) {
    d = args.output_index >= 0 && static_cast<std::size_t>(args.output_index) < sizes->ints.size()
            ? SymDim::fixed(sizes->ints[static_cast<std::size_t>(args.output_index)])
            : anon();
  } else if (d.is_static && args.num_outputs > 0 && d.size % args.num_outputs == 0) {
    d = SymDim::fixed(d.size / args.num_outputs);
  } else {
    d = anon();
  }
  return out;
}

SymShape shapeGather(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x || args.inputs.size() < 2) return SymShape::any();
  auto axis = axisAttr(args, x->rank());
  if (!axis) return SymShape::any();
  SymShape out = *x;
  const SymInput& index = args.inputs[1];
  if (index.kind == SymInput::Kind::IntScalar) {
    out.dims.erase(out.dims.begin() + *axis);
    return out;
  }
  if (index.kind != SymInput::Kind::Tensor || !index.shape.rank_known) return SymShape::any();
  out.dims.erase(out.dims.begin() + *axis);
  out.dims.insert(out.dims.begin() + *axis, index.shape.dims.begin(), index.shape.dims.end());
  return out;
}

namespace {

SymShape reduced(const SymShape& x, const std::set<std::int64_t>& axes, bool keepdims) {
  SymShape out;
  for (int k = 0; k < x.rank(); ++k) {
    if (!axes.count(k)) out.dims.push_back(x.dims[static_cast<std::size_t>(k)]);
    else if (keepdims) out.dims.push_back(SymDim::fixed(1));
  }
  return out;
}

bool keepDims(const ShapeArgs& args) {
  const AttrValue* keep = args.attr("keepdims");
  return keep != nullptr && keep->i != 0;
}

}  // namespace

SymShape shapeReduce(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x) return SymShape::any();
  const int rank = x->rank();
  std::set<std::int64_t> axes_set;
  const AttrValue* axes = args.attr("axes");
  if (axes == nullptr || axes->ints.empty()) {
    for (int k = 0; k < rank; ++k) axes_set.insert(k);
  } else {
    for (std::int64_t a : axes->ints) {
      auto n = normAxis(a, rank);
      if (!n) return SymShape::any();
      axes_set.insert(*n);
    }
  }
  return reduced(*x, axes_set, keepDims(args));
}

SymShape shapeArgMax(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x) return SymShape::any();
  auto a = axisAttr(args, x->rank());
  if (!a) return SymShape::any();
  return reduced(*x, {*a}, keepDims(args));
}

namespace {

SymShape joinInputs(const ShapeArgs& args) {
  SymShape out = args.inputs[0].shape;
  for (std::size_t k = 1; k < args.inputs.size(); ++k) out = join(out, args.inputs[k].shape);
  return out;
}

bool allTensorsOfRank(const ShapeArgs& args, int rank) {
  return std::all_of(args.inputs.begin(), args.inputs.end(), [&](const SymInput& v) {
    return v.kind == SymInput::Kind::Tensor && v.shape.rank_known && v.shape.rank() == rank;
  });
}

}  // namespace

SymShape shapeConcat(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x || !allTensorsOfRank(args, x->rank())) return SymShape::any();
  auto a = axisAttr(args, x->rank());
  if (!a) return SymShape::any();
  SymShape out = joinInputs(args);
  std::int64_t total = 0;
  bool all_static = true;
  for (const SymInput& v : args.inputs) {
    const SymDim& d = v.shape.dims[static_cast<std::size_t>(*a)];
    all_static = all_static && d.is_static;
    total += d.size;
  }
  out.dims[static_cast<std::size_t>(*a)] = all_static ? SymDim::fixed(total) : anon();
  return out;
}

SymShape shapeStack(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x || !allTensorsOfRank(args, x->rank())) return SymShape::any();
  auto a = axisAttr(args, x->rank() + 1);
  if (!a) return SymShape::any();
  SymShape out = joinInputs(args);
  out.dims.insert(out.dims.begin() + *a, SymDim::fixed(static_cast<std::int64_t>(args.inputs.size())));
  return out;
}

}  // namespace shapevm

// ---- the convolution family (window geometry shared with the kernels: conv_geometry.h) ----

namespace shapevm {
namespace {

const std::vector<std::int64_t>& intsAttr(const ShapeArgs& args, std::string_view name) {
  static const std::vector<std::int64_t> kEmpty;
  const AttrValue* a = args.attr(name);
  return a ? a->ints : kEmpty;
}

std::int64_t intAttr(const ShapeArgs& args, std::string_view name, std::int64_t fallback) {
  const AttrValue* a = args.attr(name);
  return a ? a->i : fallback;
}

// The spatial dims of x through `kernel` (nullopt entries: not static) with the op's window
// attributes: static where the input extent and kernel are, the input dim itself where the
// window maps each position to itself (1-wide, stride 1, no padding), else anonymous.
std::optional<SymShape> windowedShape(const SymShape& x, SymDim channels,
                                      std::vector<std::optional<std::int64_t>> kernel, const ShapeArgs& args,
                                      bool transpose, bool pool) {
  const std::size_t n = kernel.size();
  if (x.rank() != static_cast<int>(n) + 2) return std::nullopt;
  SymShape out;
  out.dims = {x.dims[0], channels};
  const bool kernel_static = std::all_of(kernel.begin(), kernel.end(), [](const auto& k) { return k.has_value(); });
  if (!kernel_static) {
    for (std::size_t d = 0; d < n; ++d) out.dims.push_back(anon());
    return out;
  }
  WindowAttrs attrs;
  for (const auto& k : kernel) attrs.kernel.push_back(*k);
  attrs.strides = intsAttr(args, "strides");
  attrs.pads = intsAttr(args, "pads");
  attrs.dilations = intsAttr(args, "dilations");
  attrs.auto_pad = intAttr(args, "auto_pad", 0);
  attrs.ceil_mode = pool && intAttr(args, "ceil_mode", 0) != 0;
  attrs.output_padding = intsAttr(args, "output_padding");
  attrs.output_shape = intsAttr(args, "output_shape");
  std::vector<std::int64_t> in;
  for (std::size_t d = 0; d < n; ++d) {
    const SymDim& dim = x.dims[d + 2];
    in.push_back(dim.is_static ? dim.size : -1);
  }
  auto windows = transpose ? transposeWindows("shape", in, attrs) : forwardWindows("shape", in, attrs);
  if (!windows) return std::nullopt;
  for (std::size_t d = 0; d < n; ++d) {
    const AxisWindow& w = (*windows)[d];
    const bool identity = !transpose && w.kernel == 1 && w.stride == 1 && w.pad_before == 0 && w.pad_after == 0;
    const bool same_stride1 = !transpose && w.stride == 1 &&
                              (attrs.auto_pad == static_cast<std::int64_t>(AutoPad::SameUpper) ||
                               attrs.auto_pad == static_cast<std::int64_t>(AutoPad::SameLower));
    if (identity || same_stride1) out.dims.push_back(x.dims[d + 2]);
    else out.dims.push_back(w.out >= 0 ? SymDim::fixed(w.out) : anon());
  }
  return out;
}

std::optional<std::int64_t> staticOf(const SymDim& d) {
  return d.is_static ? std::optional<std::int64_t>(d.size) : std::nullopt;
}

SymShape convLike(const ShapeArgs& args, bool transpose) {
  auto x = knownInput(args);
  auto w = knownInput(args, 1);
  if (!x || !w || w->rank() < 3 || w->rank() != x->rank()) return SymShape::any();
  std::vector<std::optional<std::int64_t>> kernel;
  for (int d = 2; d < w->rank(); ++d) kernel.push_back(staticOf(w->dims[static_cast<std::size_t>(d)]));
  SymDim channels = w->dims[0];
  if (transpose) {
    const SymDim& per_group = w->dims[1];
    channels = per_group.is_static ? SymDim::fixed(per_group.size * intAttr(args, "groups", 1)) : anon();
  }
  return windowedShape(*x, channels, kernel, args, transpose, false).value_or(SymShape::any());
}

}  // namespace

SymShape shapeConv(const ShapeArgs& args) {
  return convLike(args, false);
}

SymShape shapeConvTranspose(const ShapeArgs& args) {
  return convLike(args, true);
}

SymShape shapePool(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x || x->rank() < 3) return SymShape::any();
  std::vector<std::optional<std::int64_t>> kernel;
  for (std::int64_t k : intsAttr(args, "kernel")) kernel.emplace_back(k);
  return windowedShape(*x, x->dims[1], kernel, args, false, true).value_or(SymShape::any());
}

SymShape shapeGlobalPool(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x || x->rank() < 3) return SymShape::any();
  SymShape out = *x;
  for (int d = 2; d < out.rank(); ++d) out.dims[static_cast<std::size_t>(d)] = SymDim::fixed(1);
  return out;
}

SymShape shapeResize(const ShapeArgs& args) {
  auto x = knownInput(args);
  if (!x) return SymShape::any();
  SymShape out = *x;
  const int rank = x->rank();
  const SymInput* sizes = args.inputs.size() > 1 ? &args.inputs[1] : nullptr;
  if (sizes != nullptr && sizes->kind == SymInput::Kind::Ints && sizes->shape.rank_known) {
    const int given = sizes->shape.rank();
    const int lead = given == rank ? 0 : given == rank - 2 ? 2 : -1;
    if (lead < 0) return SymShape::any();
    for (int d = lead; d < rank; ++d)
      out.dims[static_cast<std::size_t>(d)] = sizes->shape.dims[static_cast<std::size_t>(d - lead)];
    return out;
  }
  // scales: N and C keep their extent only when the scales cover the spatial axes alone, which is
  // not known here; every axis is anonymous.
  for (SymDim& d : out.dims) d = anon();
  return out;
}

SymShape shapeDepthToSpace(const ShapeArgs& args) {
  auto x = knownInput(args);
  const std::int64_t b = intAttr(args, "blocksize", 1);
  if (!x || x->rank() != 4 || b < 1) return SymShape::any();
  SymShape out = *x;
  auto scaled = [](const SymDim& d, std::int64_t mul, std::int64_t div) {
    return d.is_static && d.size * mul % div == 0 ? SymDim::fixed(d.size * mul / div) : anon();
  };
  const bool to_space = args.schema != nullptr && args.schema->name == "depth_to_space";
  out.dims[1] = to_space ? scaled(x->dims[1], 1, b * b) : scaled(x->dims[1], b * b, 1);
  for (std::size_t d = 2; d < 4; ++d) out.dims[d] = to_space ? scaled(x->dims[d], b, 1) : scaled(x->dims[d], 1, b);
  if (b == 1) return *x;
  return out;
}

SymShape shapePad(const ShapeArgs& args) {
  auto x = knownInput(args);
  const AttrValue* pads = args.attr("pads");
  if (!x || pads == nullptr || pads->ints.size() != 2 * static_cast<std::size_t>(x->rank())) return SymShape::any();
  SymShape out = *x;
  for (int d = 0; d < x->rank(); ++d) {
    const std::int64_t grow =
        pads->ints[2 * static_cast<std::size_t>(d)] + pads->ints[2 * static_cast<std::size_t>(d) + 1];
    SymDim& dim = out.dims[static_cast<std::size_t>(d)];
    if (grow == 0) continue;
    dim = dim.is_static && dim.size + grow >= 0 ? SymDim::fixed(dim.size + grow) : anon();
  }
  return out;
}

}  // namespace shapevm
