// SPDX-License-Identifier: Apache-2.0
// Reference kernels for the shape and data-movement ops: reshape, transpose, squeeze, unsqueeze,
// split, concat, stack, slice, gather, broadcast_to, pad. Invariant: the view ops (reshape when
// the layout allows, transpose, squeeze, unsqueeze, split, slice, broadcast_to) return tensors
// made with Tensor::asStrided over the input's storage and never copy; the others write a fresh
// contiguous tensor and only read their inputs.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/kernel_util.h"
#include "ops/registry.h"

namespace shapevm {
namespace {

// ---- helpers ----

Tensor inputTensor(const OpContext& ctx, std::size_t index) { return tensorArg(*ctx.inputs[index]); }

bool isPresent(const OpContext& ctx, std::size_t index) {
  return index < ctx.inputs.size() && ctx.inputs[index] != nullptr && !ctx.inputs[index]->isNone();
}

std::string formatInts(std::span<const std::int64_t> values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ',';
    text += std::to_string(values[i]);
  }
  return text + "]";
}

// `describe()` names what has the rank; it is called only on the error path (reshape runs every
// iteration, and formatting its target shape cost more than the rest of the op).
template <typename Describe>
Status checkRank(std::size_t rank, const Describe& describe) {
  if (rank > static_cast<std::size_t>(kMaxRank)) {
    return makeError(ErrorCode::Unsupported, "{} has rank {}, above the maximum rank {}", describe(), rank, kMaxRank);
  }
  return Status::ok();
}

// Copies every element of `source` into `destination` (same shape and dtype, any strides).
// Elements move as byte blocks of the item size, so no value conversion happens.
template <std::size_t kItem>
void copyElementsSized(const Tensor& source, const Tensor& destination) {
  const Shape& shape = source.shape();
  const int rank = shape.rank();
  const char* in = static_cast<const char*>(source.rawData());
  char* out = static_cast<char*>(destination.rawData());
  if (rank == 0) {
    std::memcpy(out, in, kItem);
    return;
  }
  const std::int64_t inner = shape[rank - 1];
  const std::int64_t in_step = source.stride(rank - 1), out_step = destination.stride(rank - 1);
  const std::int64_t rows = shape.numel() / inner;
  const auto item = static_cast<std::int64_t>(kItem);
  std::int64_t index[kMaxRank] = {};
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int64_t in_position = 0, out_position = 0;
    for (int axis = 0; axis + 1 < rank; ++axis) {
      in_position += index[axis] * source.stride(axis);
      out_position += index[axis] * destination.stride(axis);
    }
    const char* in_row = in + in_position * item;
    char* out_row = out + out_position * item;
    if (in_step == 1 && out_step == 1) {
      std::memcpy(out_row, in_row, static_cast<std::size_t>(inner) * kItem);
    } else {
      for (std::int64_t j = 0; j < inner; ++j) std::memcpy(out_row + j * out_step * item, in_row + j * in_step * item, kItem);
    }
    for (int axis = rank - 2; axis >= 0; --axis) {
      if (++index[axis] < shape[axis]) break;
      index[axis] = 0;
    }
  }
}

void copyElements(const Tensor& source, const Tensor& destination) {
  if (source.numel() == 0) return;
  if (source.isContiguous() && destination.isContiguous()) {
    std::memcpy(destination.rawData(), source.rawData(), static_cast<std::size_t>(source.numel()) * source.itemSize());
    return;
  }
  switch (source.itemSize()) {
    case 1: copyElementsSized<1>(source, destination); break;
    case 2: copyElementsSized<2>(source, destination); break;
    case 4: copyElementsSized<4>(source, destination); break;
    default: copyElementsSized<8>(source, destination); break;
  }
}

// A view of `base` restricted to [start, start + length) along `axis`.
Expected<Tensor> narrowView(const Tensor& base, int axis, std::int64_t start, std::int64_t length) {
  Shape shape = base.shape();
  shape[axis] = length;
  const std::int64_t offset = base.offset() + (length > 0 ? start * base.stride(axis) : 0);
  return base.asStrided(shape, base.strides(), offset);
}

// Fills a contiguous tensor with `value` converted to its dtype.
void fillContiguous(const Tensor& out, double value) {
  const std::int64_t count = out.numel();
  if (count == 0) return;
  storeFromDouble(out.rawData(), out.dtype(), 0, value);
  const std::size_t item = out.itemSize();
  char* base = static_cast<char*>(out.rawData());
  // Doubling copies: the filled prefix grows 1, 2, 4, ... elements.
  std::int64_t filled = 1;
  while (filled < count) {
    const std::int64_t chunk = std::min(filled, count - filled);
    std::memcpy(base + filled * static_cast<std::int64_t>(item), base, static_cast<std::size_t>(chunk) * item);
    filled += chunk;
  }
}

// ---- reshape ----

Status reshapeKernel(OpContext& ctx) {
  const Tensor x = inputTensor(ctx, 0);
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> dims, ctx.inputs[1]->toInts("shape"));
  SVM_RETURN_IF_ERROR(checkRank(dims.size(), [&] { return "target shape " + formatInts(dims); }));
  int inferred = -1;
  std::int64_t known = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (inferred >= 0) {
        return makeError(ErrorCode::InvalidArgument, "target shape {} has more than one -1", formatInts(dims));
      }
      inferred = static_cast<int>(i);
    } else if (dims[i] < 0) {
      return makeError(ErrorCode::InvalidArgument, "target shape {} has negative extent {}", formatInts(dims), dims[i]);
    } else {
      overflow = overflow || __builtin_mul_overflow(known, dims[i], &known);
    }
  }
  const std::int64_t count = x.numel();
  if (inferred >= 0) {
    if (!overflow && known == 0 && count == 0) {
      return makeError(ErrorCode::InvalidArgument, "cannot infer the -1 in {} for {} (0 elements): any extent fits",
                       formatInts(dims), x.shape().toString());
    }
    if (overflow || known == 0 || count % known != 0) {
      return makeError(ErrorCode::ShapeMismatch, "cannot reshape {} ({} elements) to {}", x.shape().toString(), count,
                       formatInts(dims));
    }
    dims[static_cast<std::size_t>(inferred)] = count / known;
  } else if (overflow || known != count) {
    return makeError(ErrorCode::ShapeMismatch, "cannot reshape {} ({} elements) to {}", x.shape().toString(), count,
                     formatInts(dims));
  }
  const Shape target(dims);
  if (count == 0) {
    // Nothing to lay out: an empty view of the same storage.
    SVM_ASSIGN_OR_RETURN(Tensor out, x.asStrided(target, contiguousStrides(target), x.offset()));
    ctx.outputs[0] = Value::fromTensor(std::move(out));
    return Status::ok();
  }
  Expected<Tensor> view = x.reshapeView(target);
  if (view) {
    ctx.outputs[0] = Value::fromTensor(std::move(view).value());
    return Status::ok();
  }
  SVM_ASSIGN_OR_RETURN(Tensor copy, x.clone());
  SVM_ASSIGN_OR_RETURN(Tensor out, copy.reshapeView(target));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- transpose ----

Status transposeKernel(OpContext& ctx) {
  const Tensor x = inputTensor(ctx, 0);
  const int rank = x.rank();
  std::vector<std::int64_t> perm = ctx.attrs[0].ints;
  if (perm.empty()) {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (perm.size() != static_cast<std::size_t>(rank)) {
    return makeError(ErrorCode::InvalidArgument, "perm {} has {} entries but the tensor has rank {}", formatInts(perm),
                     perm.size(), rank);
  }
  Shape shape, strides;
  bool seen[kMaxRank] = {};
  for (std::int64_t entry : perm) {
    if (entry < -rank || entry >= rank) {
      return makeError(ErrorCode::IndexOutOfRange, "perm {} has axis {} out of range for rank {}", formatInts(perm),
                       entry, rank);
    }
    const int axis = static_cast<int>(entry < 0 ? entry + rank : entry);
    if (seen[axis]) {
      return makeError(ErrorCode::InvalidArgument, "perm {} is not a permutation: axis {} repeats", formatInts(perm), axis);
    }
    seen[axis] = true;
    shape.push_back(x.dim(axis));
    strides.push_back(x.stride(axis));
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, x.asStrided(shape, strides, x.offset()));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- squeeze / unsqueeze ----

Status squeezeKernel(OpContext& ctx) {
  const Tensor x = inputTensor(ctx, 0);
  const int rank = x.rank();
  const std::vector<std::int64_t>& axes = ctx.attrs[0].ints;
  bool drop[kMaxRank] = {};
  if (axes.empty()) {
    for (int i = 0; i < rank; ++i) drop[i] = x.dim(i) == 1;
  }
  for (std::int64_t entry : axes) {
    if (rank == 0 || entry < -rank || entry >= rank) {
      return makeError(ErrorCode::IndexOutOfRange, "squeeze axis {} is out of range for rank {}", entry, rank);
    }
    const int axis = static_cast<int>(entry < 0 ? entry + rank : entry);
    if (drop[axis]) return makeError(ErrorCode::InvalidArgument, "axes {} name axis {} twice", formatInts(axes), axis);
    if (x.dim(axis) != 1) {
      return makeError(ErrorCode::ShapeMismatch, "cannot squeeze axis {} of shape {}: its extent is {}, not 1", axis,
                       x.shape().toString(), x.dim(axis));
    }
    drop[axis] = true;
  }
  Shape shape, strides;
  for (int i = 0; i < rank; ++i) {
    if (drop[i]) continue;
    shape.push_back(x.dim(i));
    strides.push_back(x.stride(i));
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, x.asStrided(shape, strides, x.offset()));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

Status unsqueezeKernel(OpContext& ctx) {
  const Tensor x = inputTensor(ctx, 0);
  const std::vector<std::int64_t>& axes = ctx.attrs[0].ints;
  const std::size_t out_rank_size = static_cast<std::size_t>(x.rank()) + axes.size();
  SVM_RETURN_IF_ERROR(checkRank(out_rank_size, [&] {
    return fmt::format("unsqueeze of {} at axes {}", x.shape().toString(), formatInts(axes));
  }));
  const int out_rank = static_cast<int>(out_rank_size);
  bool inserted[kMaxRank] = {};
  for (std::int64_t entry : axes) {
    if (entry < -out_rank || entry >= out_rank) {
      return makeError(ErrorCode::IndexOutOfRange, "unsqueeze axis {} is out of range for output rank {}", entry, out_rank);
    }
    const int axis = static_cast<int>(entry < 0 ? entry + out_rank : entry);
    if (inserted[axis]) return makeError(ErrorCode::InvalidArgument, "axes {} name output axis {} twice", formatInts(axes), axis);
    inserted[axis] = true;
  }
  Shape shape, strides;
  shape.resize(out_rank);
  strides.resize(out_rank);
  int source = x.rank() - 1;
  std::int64_t next_stride = 1;  // a size-1 axis may take any stride; use the row-major one
  for (int axis = out_rank - 1; axis >= 0; --axis) {
    if (inserted[axis]) {
      shape[axis] = 1;
      strides[axis] = next_stride;
    } else {
      shape[axis] = x.dim(source);
      strides[axis] = x.stride(source);
      next_stride = x.stride(source) * std::max<std::int64_t>(x.dim(source), 1);
      --source;
    }
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, x.asStrided(shape, strides, x.offset()));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- split ----

Status splitKernel(OpContext& ctx) {
  const Tensor x = inputTensor(ctx, 0);
  if (x.rank() == 0) return makeError(ErrorCode::InvalidArgument, "cannot split a 0-d tensor");
  SVM_ASSIGN_OR_RETURN(int axis, normalizeAxis("split", ctx.attrs[0].i, x.rank()));
  const std::int64_t sections = ctx.attrs[1].i;
  const std::vector<std::int64_t>& given_sizes = ctx.attrs[2].ints;
  const std::int64_t extent = x.dim(axis);
  std::vector<std::int64_t> sizes;
  if (sections > 0) {
    if (extent % sections != 0) {
      return makeError(ErrorCode::ShapeMismatch, "axis {} of extent {} does not split into {} equal sections", axis,
                       extent, sections);
    }
    sizes.assign(static_cast<std::size_t>(sections), extent / sections);
  } else {
    std::int64_t total = 0;
    for (std::int64_t size : given_sizes) {
      if (size < 0) return makeError(ErrorCode::InvalidArgument, "sizes {} has negative size {}", formatInts(given_sizes), size);
      total += size;
    }
    if (total != extent) {
      return makeError(ErrorCode::ShapeMismatch, "sizes {} sum to {} but axis {} has extent {}", formatInts(given_sizes),
                       total, axis, extent);
    }
    sizes = given_sizes;
  }
  if (sizes.size() != ctx.outputs.size()) {
    return makeError(ErrorCode::Internal, "split makes {} parts but {} outputs were allocated", sizes.size(),
                     ctx.outputs.size());
  }
  std::int64_t start = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    SVM_ASSIGN_OR_RETURN(Tensor part, narrowView(x, axis, start, sizes[i]));
    ctx.outputs[i] = Value::fromTensor(std::move(part));
    start += sizes[i];
  }
  return Status::ok();
}

// ---- concat / stack ----

Status collectTensors(const OpContext& ctx, std::vector<Tensor>& tensors) {
  for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (ctx.inputs[i] == nullptr || ctx.inputs[i]->isNone()) {
      return makeError(ErrorCode::KindMismatch, "input {} is None", i);
    }
    tensors.push_back(inputTensor(ctx, i));
  }
  if (tensors.empty()) return makeError(ErrorCode::InvalidArgument, "needs at least one input");
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].dtype() != tensors[0].dtype()) {
      return makeError(ErrorCode::DTypeMismatch, "input {} has dtype {} but input 0 has dtype {}", i,
                       dtypeName(tensors[i].dtype()), dtypeName(tensors[0].dtype()));
    }
    if (tensors[i].rank() != tensors[0].rank()) {
      return makeError(ErrorCode::ShapeMismatch, "input {} has rank {} ({}) but input 0 has rank {} ({})", i,
                       tensors[i].rank(), tensors[i].shape().toString(), tensors[0].rank(), tensors[0].shape().toString());
    }
  }
  return Status::ok();
}

Status concatKernel(OpContext& ctx) {
  std::vector<Tensor> tensors;
  SVM_RETURN_IF_ERROR(collectTensors(ctx, tensors));
  const Tensor& first = tensors[0];
  if (first.rank() == 0) return makeError(ErrorCode::InvalidArgument, "cannot concatenate 0-d tensors");
  SVM_ASSIGN_OR_RETURN(int axis, normalizeAxis("concat", ctx.attrs[0].i, first.rank()));
  Shape shape = first.shape();
  shape[axis] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    for (int d = 0; d < first.rank(); ++d) {
      if (d != axis && tensors[i].dim(d) != first.dim(d)) {
        return makeError(ErrorCode::ShapeMismatch, "input {} has shape {} but input 0 has shape {} (they may differ only on axis {})",
                         i, tensors[i].shape().toString(), first.shape().toString(), axis);
      }
    }
    shape[axis] += tensors[i].dim(axis);
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(first.dtype(), shape));
  std::int64_t start = 0;
  for (const Tensor& t : tensors) {
    SVM_ASSIGN_OR_RETURN(Tensor window, narrowView(out, axis, start, t.dim(axis)));
    copyElements(t, window);
    start += t.dim(axis);
  }
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

Status stackKernel(OpContext& ctx) {
  std::vector<Tensor> tensors;
  SVM_RETURN_IF_ERROR(collectTensors(ctx, tensors));
  const Tensor& first = tensors[0];
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].shape() != first.shape()) {
      return makeError(ErrorCode::ShapeMismatch, "input {} has shape {} but input 0 has shape {} (stack needs equal shapes)",
                       i, tensors[i].shape().toString(), first.shape().toString());
    }
  }
  SVM_RETURN_IF_ERROR(checkRank(static_cast<std::size_t>(first.rank()) + 1, [] { return "stacked result"; }));
  SVM_ASSIGN_OR_RETURN(int axis, normalizeAxis("stack", ctx.attrs[0].i, first.rank() + 1));
  Shape shape;
  for (int d = 0; d < first.rank() + 1; ++d) {
    shape.push_back(d < axis ? first.dim(d) : d == axis ? static_cast<std::int64_t>(tensors.size()) : first.dim(d - 1));
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(first.dtype(), shape));
  // Each input lands in out[..., i, ...]: drop `axis` from the output's shape and strides.
  Shape part_shape, part_strides;
  for (int d = 0; d < shape.rank(); ++d) {
    if (d == axis) continue;
    part_shape.push_back(shape[d]);
    part_strides.push_back(out.stride(d));
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    SVM_ASSIGN_OR_RETURN(Tensor window, out.asStrided(part_shape, part_strides,
                                                      out.offset() + static_cast<std::int64_t>(i) * out.stride(axis)));
    copyElements(tensors[i], window);
  }
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- slice ----

// Python slice bounds for one axis; returns the element count and rewrites start.
std::int64_t sliceAxis(std::int64_t extent, std::int64_t& start, std::int64_t stop, std::int64_t step) {
  auto wrap = [extent](std::int64_t value) { return value < 0 ? value + extent : value; };  // no overflow: extent >= 0
  if (step > 0) {
    start = std::clamp<std::int64_t>(wrap(start), 0, extent);
    stop = std::clamp<std::int64_t>(wrap(stop), 0, extent);
    return stop > start ? (stop - start - 1) / step + 1 : 0;
  }
  start = std::clamp<std::int64_t>(wrap(start), -1, extent - 1);
  stop = std::clamp<std::int64_t>(wrap(stop), -1, extent - 1);
  // -step cannot overflow: the caller rejects INT64_MIN.
  return start > stop ? (start - stop - 1) / -step + 1 : 0;
}

Status sliceKernel(OpContext& ctx) {
  const Tensor x = inputTensor(ctx, 0);
  const int rank = x.rank();
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> starts, ctx.inputs[1]->toInts("starts"));
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> stops, ctx.inputs[2]->toInts("stops"));
  std::vector<std::int64_t> steps(starts.size(), 1);
  if (isPresent(ctx, 3)) {
    SVM_ASSIGN_OR_RETURN(steps, ctx.inputs[3]->toInts("steps"));
  }
  std::vector<std::int64_t> axes = ctx.attrs[0].ints;
  if (axes.empty()) {
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
  }
  if (stops.size() != starts.size() || steps.size() != starts.size() || axes.size() != starts.size()) {
    return makeError(ErrorCode::InvalidArgument, "starts {}, stops {}, steps {} and axes {} must have the same length",
                     formatInts(starts), formatInts(stops), formatInts(steps), formatInts(axes));
  }
  if (starts.size() > static_cast<std::size_t>(rank)) {
    return makeError(ErrorCode::InvalidArgument, "{} sliced axes for a tensor of rank {}", starts.size(), rank);
  }
  Shape shape = x.shape(), strides = x.strides();
  std::int64_t offset = x.offset();
  bool seen[kMaxRank] = {};
  bool empty_result = false;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < -rank || axes[i] >= rank) {
      return makeError(ErrorCode::IndexOutOfRange, "slice axis {} is out of range for rank {}", axes[i], rank);
    }
    const int axis = static_cast<int>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    if (seen[axis]) return makeError(ErrorCode::InvalidArgument, "axes {} name axis {} twice", formatInts(axes), axis);
    seen[axis] = true;
    if (steps[i] == 0) return makeError(ErrorCode::InvalidArgument, "slice step is 0 on axis {} (steps {})", axis, formatInts(steps));
    if (steps[i] == std::numeric_limits<std::int64_t>::min()) {
      return makeError(ErrorCode::InvalidArgument, "slice step {} on axis {} is out of range", steps[i], axis);
    }
    std::int64_t start = starts[i];
    const std::int64_t count = sliceAxis(x.dim(axis), start, stops[i], steps[i]);
    shape[axis] = count;
    if (count == 0) {
      empty_result = true;
      continue;
    }
    offset += start * x.stride(axis);
    if (count > 1) strides[axis] = x.stride(axis) * steps[i];  // count > 1 bounds |step| by the extent
  }
  if (empty_result) offset = x.offset();
  SVM_ASSIGN_OR_RETURN(Tensor out, x.asStrided(shape, strides, offset));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- gather ----

Status gatherKernel(OpContext& ctx) {
  const Tensor x = inputTensor(ctx, 0);
  if (x.rank() == 0) return makeError(ErrorCode::InvalidArgument, "cannot gather from a 0-d tensor");
  SVM_ASSIGN_OR_RETURN(int axis, normalizeAxis("gather", ctx.attrs[0].i, x.rank()));
  const std::int64_t extent = x.dim(axis);
  const Value& index_value = *ctx.inputs[1];
  auto wrapIndex = [&](std::int64_t index, std::int64_t& wrapped) -> Status {
    wrapped = index < 0 ? index + extent : index;
    if (wrapped < 0 || wrapped >= extent) {
      return makeError(ErrorCode::IndexOutOfRange, "index {} is out of range for axis {} with extent {}", index, axis,
                       extent);
    }
    return Status::ok();
  };
  if (index_value.isScalar()) {
    if (!index_value.isInt()) {
      return makeError(ErrorCode::DTypeMismatch, "indices must be an int or an int tensor, got {}", index_value.describe());
    }
    // A single int selects one slice and drops the axis: a view, like numpy's x[..., i, ...].
    std::int64_t wrapped = 0;
    SVM_RETURN_IF_ERROR(wrapIndex(index_value.asInt(), wrapped));
    Shape shape, strides;
    for (int d = 0; d < x.rank(); ++d) {
      if (d == axis) continue;
      shape.push_back(x.dim(d));
      strides.push_back(x.stride(d));
    }
    SVM_ASSIGN_OR_RETURN(Tensor out, x.asStrided(shape, strides, x.offset() + wrapped * x.stride(axis)));
    ctx.outputs[0] = Value::fromTensor(std::move(out));
    return Status::ok();
  }
  const Tensor& indices = index_value.tensor();
  if (!isInteger(indices.dtype())) {
    return makeError(ErrorCode::DTypeMismatch, "indices must be int32 or int64, got {}", dtypeName(indices.dtype()));
  }
  SVM_RETURN_IF_ERROR(
      checkRank(static_cast<std::size_t>(x.rank() - 1 + indices.rank()), [] { return "gather result"; }));
  std::vector<std::int64_t> positions(static_cast<std::size_t>(indices.numel()));
  {
    SVM_ASSIGN_OR_RETURN(Tensor flat, indices.contiguous());
    for (std::size_t k = 0; k < positions.size(); ++k) {
      const auto k64 = static_cast<std::int64_t>(k);
      const std::int64_t raw = flat.dtype() == DType::Int64 ? flat.data<std::int64_t>()[k64] : flat.data<std::int32_t>()[k64];
      SVM_RETURN_IF_ERROR(wrapIndex(raw, positions[k]));
    }
  }
  Shape shape;
  for (int d = 0; d < axis; ++d) shape.push_back(x.dim(d));
  for (int d = 0; d < indices.rank(); ++d) shape.push_back(indices.dim(d));
  for (int d = axis + 1; d < x.rank(); ++d) shape.push_back(x.dim(d));
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(x.dtype(), shape));
  if (out.numel() == 0) {
    ctx.outputs[0] = Value::fromTensor(std::move(out));
    return Status::ok();
  }
  SVM_ASSIGN_OR_RETURN(Tensor source, x.contiguous());
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const std::size_t block = static_cast<std::size_t>(inner) * x.itemSize();
  const char* in = static_cast<const char*>(source.rawData());
  char* dst = static_cast<char*>(out.rawData());
  for (std::int64_t o = 0; o < outer; ++o) {
    const char* in_outer = in + static_cast<std::size_t>(o * extent) * block;
    for (std::int64_t position : positions) {
      std::memcpy(dst, in_outer + static_cast<std::size_t>(position) * block, block);
      dst += block;
    }
  }
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- broadcast_to ----

Status broadcastToKernel(OpContext& ctx) {
  const Tensor x = inputTensor(ctx, 0);
  SVM_ASSIGN_OR_RETURN(std::vector<std::int64_t> dims, ctx.inputs[1]->toInts("shape"));
  SVM_RETURN_IF_ERROR(checkRank(dims.size(), [&] { return "target shape " + formatInts(dims); }));
  const int out_rank = static_cast<int>(dims.size());
  if (out_rank < x.rank()) {
    return makeError(ErrorCode::ShapeMismatch, "cannot broadcast {} to {}: the target has lower rank",
                     x.shape().toString(), formatInts(dims));
  }
  const Shape target(dims);
  Shape strides;
  strides.resize(out_rank);
  const int lead = out_rank - x.rank();
  for (int d = 0; d < out_rank; ++d) {
    if (target[d] < 0) {
      return makeError(ErrorCode::InvalidArgument, "target shape {} has negative extent {}", formatInts(dims), target[d]);
    }
    if (d < lead) continue;  // new leading axes read the same data: stride 0
    const std::int64_t extent = x.dim(d - lead);
    if (extent == target[d]) {
      strides[d] = x.stride(d - lead);
    } else if (extent != 1) {
      return makeError(ErrorCode::ShapeMismatch, "cannot broadcast {} to {}: axis {} has extent {}, not 1 or {}",
                       x.shape().toString(), formatInts(dims), d - lead, extent, target[d]);
    }
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, x.asStrided(target, strides, x.offset()));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- pad ----

// reflect (mirror without repeating the border) or edge (repeat the border) padding; pads >= 0.
Status padBorderModes(const Tensor& x, const std::vector<std::int64_t>& pads, const Shape& shape, bool reflect,
                      OpContext& ctx) {
  const int rank = x.rank();
  for (int d = 0; d < rank; ++d) {
    const std::int64_t before = pads[2 * static_cast<std::size_t>(d)],
                       after = pads[2 * static_cast<std::size_t>(d) + 1];
    if (before < 0 || after < 0) {
      return makeError(ErrorCode::InvalidArgument, "{} pad: negative pads {}", reflect ? "reflect" : "edge",
                       formatInts(pads));
    }
    const bool padded = before > 0 || after > 0;
    if (reflect && padded && (before >= x.dim(d) || after >= x.dim(d))) {
      return makeError(ErrorCode::InvalidArgument, "reflect pad: pads {} on axis {} must be below its extent {}",
                       formatInts(pads), d, x.dim(d));
    }
    if (!reflect && padded && x.dim(d) == 0) {
      return makeError(ErrorCode::InvalidArgument, "edge pad: pads {} extend axis {}, which is empty", formatInts(pads),
                       d);
    }
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(x.dtype(), shape));
  const std::size_t item = x.itemSize();
  const char* in = static_cast<const char*>(x.storage()->data());
  char* dst = static_cast<char*>(out.rawData());
  forEachIndex(shape, [&](std::int64_t linear, const std::int64_t* index) {
    std::int64_t offset = x.offset();
    for (int d = 0; d < rank; ++d) {
      const std::int64_t n = x.dim(d);
      std::int64_t i = index[d] - pads[2 * static_cast<std::size_t>(d)];
      if (i < 0) i = reflect ? -i : 0;
      if (i >= n) i = reflect ? 2 * (n - 1) - i : n - 1;
      offset += i * x.stride(d);
    }
    std::memcpy(dst + linear * static_cast<std::int64_t>(item), in + offset * static_cast<std::int64_t>(item), item);
  });
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

Status padKernel(OpContext& ctx) {
  const Tensor x = inputTensor(ctx, 0);
  const std::vector<std::int64_t>& pads = ctx.attrs[0].ints;
  const double value = ctx.attrs[1].f;
  const int rank = x.rank();
  if (pads.size() != 2 * static_cast<std::size_t>(rank)) {
    return makeError(ErrorCode::InvalidArgument, "pads {} has {} entries; rank {} needs {} (before, after per axis)",
                     formatInts(pads), pads.size(), rank, 2 * rank);
  }
  if (isInteger(x.dtype())) {
    const double limit = x.dtype() == DType::Int32 ? 2147483648.0 : 9223372036854775808.0;
    if (!(value >= -limit && value < limit)) {
      return makeError(ErrorCode::InvalidArgument, "pad value {} does not fit {}", value, dtypeName(x.dtype()));
    }
  }
  Shape shape = x.shape();
  Shape source_start, source_extent, target_start;
  bool overlap = true;
  for (int d = 0; d < rank; ++d) {
    const std::int64_t before = pads[2 * static_cast<std::size_t>(d)], after = pads[2 * static_cast<std::size_t>(d) + 1];
    shape[d] = x.dim(d) + before + after;
    if (shape[d] < 0) {
      return makeError(ErrorCode::InvalidArgument, "pads {} crop axis {} of extent {} below zero", formatInts(pads), d,
                       x.dim(d));
    }
    // Negative pads crop the input; positive ones offset it in the output.
    const std::int64_t first = std::max<std::int64_t>(0, -before);
    const std::int64_t last = x.dim(d) - std::max<std::int64_t>(0, -after);
    source_start.push_back(first);
    source_extent.push_back(std::max<std::int64_t>(0, last - first));
    target_start.push_back(std::max<std::int64_t>(0, before));
    if (last <= first) overlap = false;
  }
  const std::int64_t mode = ctx.attrs[2].i;
  if (mode < 0 || mode > 2) {
    return makeError(ErrorCode::InvalidArgument, "unknown pad mode {} (0 = constant, 1 = reflect, 2 = edge)", mode);
  }
  if (mode != 0) return padBorderModes(x, pads, shape, mode == 1, ctx);
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(x.dtype(), shape));
  fillContiguous(out, value);
  if (overlap) {
    std::int64_t source_offset = x.offset(), target_offset = out.offset();
    for (int d = 0; d < rank; ++d) {
      source_offset += source_start[d] * x.stride(d);
      target_offset += target_start[d] * out.stride(d);
    }
    SVM_ASSIGN_OR_RETURN(Tensor source, x.asStrided(source_extent, x.strides(), source_offset));
    SVM_ASSIGN_OR_RETURN(Tensor target, out.asStrided(source_extent, out.strides(), target_offset));
    copyElements(source, target);
  }
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

}  // namespace

void registerShapeKernels(OpRegistry& registry) {
  registry.registerKernel(OpId::Reshape, KernelPattern{}, reshapeKernel, "reshape.generic");
  registry.registerKernel(OpId::Transpose, KernelPattern{}, transposeKernel, "transpose.generic");
  registry.registerKernel(OpId::Squeeze, KernelPattern{}, squeezeKernel, "squeeze.generic");
  registry.registerKernel(OpId::Unsqueeze, KernelPattern{}, unsqueezeKernel, "unsqueeze.generic");
  registry.registerKernel(OpId::Split, KernelPattern{}, splitKernel, "split.generic");
  registry.registerKernel(OpId::Concat, KernelPattern{}, concatKernel, "concat.generic");
  registry.registerKernel(OpId::Stack, KernelPattern{}, stackKernel, "stack.generic");
  registry.registerKernel(OpId::Slice, KernelPattern{}, sliceKernel, "slice.generic");
  registry.registerKernel(OpId::Gather, KernelPattern{}, gatherKernel, "gather.generic");
  registry.registerKernel(OpId::BroadcastTo, KernelPattern{}, broadcastToKernel, "broadcast_to.generic");
  registry.registerKernel(OpId::Pad, KernelPattern{}, padKernel, "pad.generic");
}

}  // namespace shapevm
