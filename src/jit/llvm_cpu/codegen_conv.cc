// SPDX-License-Identifier: Apache-2.0
// The conv family: convolutions compiled as the matmul family's kernel.
// Pointwise (1x1) convs: an NCHW
// (or NCW / NCDHW) conv with a 1x1 kernel, stride 1, no padding and one group is, per image,
// out[n] = W[Cout, Cin] @ X[n][Cin, H*W]: the kernel is the matmul family's code for A = the
// weight viewed [Cout, Cin], B = the input viewed [N, Cin, S] (S = the spatial extents' product)
// and, when the conv has a bias, an `add` epilogue of the bias viewed [Cout, 1]. Invariant: the
// conv's own operand slots are re-pointed in prepare() (A in slot 0, B in slot 1, then the bias
// if any, then the output) before the matmul family's prepare() lays out its canonical views, so the generated
// code is exactly a matmul kernel and every tuned matmul knob applies (searchSpace delegates).
// Dense float32 1-D/2-D convs (any kernel, stride, dilation, padding; one group): an implicit
// GEMM in column tiles. The kernel is the matmul of A = the weight [Cout, Cin*kh*kw] and B = a
// tile of im2col columns [Cin*kh*kw, cols] (cols output pixels, see tileColumns); its task
// runner (scalars[0], replaced) fills each tile in a per-thread buffer and runs the generated part
// on it, which writes the [Cout, cols] product with the epilogue applied straight into the
// output's columns of that tile (its C rows are a run-time stride apart: the image's pixels). No
// buffer ever holds more than one tile of the im2col matrix. Small images under a large weight go
// several to a tile (imagesPerTile), their product staged in the tile buffer and copied out.
// Epilogues (dense and pointwise): after the bias, the region planner's elementwise consumers
// (activations, a residual add, ReLU6's maximum/minimum against scalar bounds) run in the matmul's
// store; an operand of the output's shape follows the bias (inputs 3..) and is viewed as the
// output is (per tile for a dense conv); a one-element operand is read with stride 0.
// Depthwise float32 1-D/2-D convs (groups == Cin == Cout): a direct loop of their own (the kernel
// size, strides and dilations are baked in, every tap unrolled). An inner output row (all of its
// kh input rows inside the input) accumulates all kh * kw taps of each output column in a
// register and stores it once: the columns whose every tap is inside the row run unchecked (a
// loop the vectorizer widens), the few border columns test each tap. A border row (top and
// bottom padding) starts as the bias and adds each tap whose input row is inside over the columns
// it reads inside the row, so padding costs nothing. At stride 1 with the output as wide as the
// input (3x3 pad 1) the inner rows run as one flat loop over the plane, in full vectors whatever
// the row width, and their border columns are then computed again, checked. The call's pads
// (auto_pad SAME depends on the input) are scalars[0..1].
// max_pool and avg_pool (float32, 1-D and 2-D): the depthwise conv's window loop (emitWindowLoop)
// in the reference's tap order: max_pool starts at -inf and takes a tap when it is greater or NaN;
// avg_pool sums from 0, then divides each output by its window's count (the reference's bits).
// The oneDNN candidate (KernelParams::library = 1, library_onednn_conv.h): a stub entry that calls
// the primitive's runner, timed against the generated candidates by the AutoTuner. A float16 or
// bfloat16 conv the generated kernels do not compute (all but pointwise ones) runs on it at the
// default parameters too (libraryByDefault), untuned.
// Static Cin/Cout/kernel sizes are baked in; N and the spatial extents are guarded as the conv
// spec's dims (ranges); pads (and a dense conv's strides and dilations) are resolved per call.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>

#include "jit/conv_family.h"
#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/library_onednn_conv.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"
#include "jit/llvm_cpu/matmul_plan.h"
#include "ops/conv_geometry.h"
#include "support/cpu_cores.h"
#include "support/thread_pool.h"

namespace shapevm::jit {
namespace {

using matmul::kScalarRunner;
using matmul::kScalarTasks;

constexpr std::size_t kX = 0, kW = 1, kBias = 2;
// A fused epilogue's operands (a residual) follow the bias: inputs kBias + 1 on, at most this many.
constexpr std::size_t kFirstExtra = kBias + 1, kMaxExtras = 3;
// Conv attributes in schema order (ops.def): strides, pads, dilations, groups, auto_pad.
constexpr std::size_t kStrides = 0, kPads = 1, kDilations = 2, kGroups = 3, kAutoPad = 4;
// A dense conv's spare KernelArgs slots (after the matmul's canonical views, which end before
// slot 8): the input, the output, and the window geometry of the call.
constexpr int kXSlot = 12, kOutSlot = 13, kGeometrySlot = 14, kCountsSlot = 15;

DimSpec staticDim(std::int64_t size) {
  DimSpec dim;
  static_cast<DimRange&>(dim) = DimRange::exactly(size);
  dim.size = size;
  return dim;
}

// The product of the spatial dims x.dims[2..rank): static when every one is, else dynamic with
// the product of their ranges (unbounded on overflow).
DimSpec spatialProduct(const OperandSpec& x) {
  std::int64_t size = 1, lo = 1, hi = 1;
  bool dynamic = false, unbounded = false;
  for (int d = 2; d < x.rank; ++d) {
    const DimSpec& dim = x.dims[d];
    if (dim.isStatic()) {
      size *= dim.size;
      lo *= dim.size;
      unbounded = unbounded || __builtin_mul_overflow(hi, dim.size, &hi);
      continue;
    }
    dynamic = true;
    lo *= dim.lo;
    unbounded = unbounded || dim.hi == DimRange::kUnbounded || __builtin_mul_overflow(hi, dim.hi, &hi);
  }
  if (!dynamic) return staticDim(size);
  DimSpec dim;
  dim.lo = lo;
  dim.hi = unbounded ? DimRange::kUnbounded : hi;
  return dim;
}

bool hasBias(const KernelSpec& spec) {
  return spec.inputs.size() > kBias && spec.inputs[kBias].is_tensor;
}

bool isFloatType(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16;
}

WindowAttrs windowAttrs(const KernelSpec& spec, std::vector<std::int64_t> kernel) {
  WindowAttrs window;
  window.kernel = std::move(kernel);
  window.strides = spec.attrs[kStrides].ints;
  window.pads = spec.attrs[kPads].ints;
  window.dilations = spec.attrs[kDilations].ints;
  window.auto_pad = spec.attrs[kAutoPad].i;
  return window;
}

// Pointwise: a 1x1 kernel whose windows need no stride, dilation or padding (every auto_pad
// mode pads a 1x1 stride-1 window by nothing).
bool isPointwise(const KernelSpec& spec) {
  const OperandSpec& w = spec.inputs[kW];
  for (int d = 2; d < w.rank; ++d) {
    if (w.dims[d].size != 1) return false;
  }
  for (std::int64_t s : spec.attrs[kStrides].ints) {
    if (s != 1) return false;
  }
  for (std::int64_t p : spec.attrs[kPads].ints) {
    if (p != 0) return false;
  }
  return true;
}

// Depthwise: one input and one output channel per group (the weight [C, 1, k...]).
bool isDepthwise(const KernelSpec& spec) {
  const OperandSpec& w = spec.inputs[kW];
  const std::int64_t groups = spec.attrs[kGroups].i;
  return groups > 1 && w.dims[0].size == groups && w.dims[1].size == 1 && spec.inputs[kX].dims[1].size == groups;
}

// An epilogue operand of one element (every dim statically 1, rank 0 included): a bound of
// ReLU6 / Clip (maximum(x, 0), minimum(x, 6)) or any scalar of a binary step, read with stride 0.
bool isScalarOperand(const OperandSpec& operand) {
  for (int d = 0; d < operand.rank; ++d) {
    if (!operand.dims[d].isStatic() || operand.dims[d].size != 1) return false;
  }
  return true;
}

// A fused epilogue (bias, folded batch norm, activations, a residual add: the region planner's
// elementwise consumers of the conv) runs in the matmul's store, so dense and pointwise convs take
// one; depthwise ones do not. A binary step's operand has the output's rank and channels (its
// shape is checked per call) and follows the bias, which it needs: without one, input 2 would be
// taken for it.
Status checkEpilogue(const KernelSpec& spec) {
  if (spec.epilogue.empty()) return Status::ok();
  if (isDepthwise(spec)) return makeError(ErrorCode::Unsupported, "depthwise conv kernels take no epilogue");
  const OperandSpec& x = spec.inputs[kX];
  for (const EpilogueStep& step : spec.epilogue) {
    if (step.operand < 0) {
      if (!matmul::isEpilogueUnary(step.op)) {
        return makeError(ErrorCode::Unsupported, "conv epilogue: {} is not a fusable unary op", opIdent(step.op));
      }
      continue;
    }
    const auto operand = static_cast<std::size_t>(step.operand);
    if (!matmul::isEpilogueBinary(step.op) || !hasBias(spec) || operand < kFirstExtra ||
        operand >= spec.inputs.size()) {
      return makeError(ErrorCode::Unsupported,
                       "conv epilogue: {} on input {} (binary steps read inputs {}.., after a bias)", opIdent(step.op),
                       step.operand, kFirstExtra);
    }
    const OperandSpec& extra = spec.inputs[operand];
    if (extra.is_tensor && extra.dtype == x.dtype && extra.rank <= x.rank && isScalarOperand(extra)) continue;
    if (!extra.is_tensor || extra.dtype != x.dtype || extra.rank != x.rank ||
        (extra.dims[1].isStatic() && extra.dims[1].size != spec.inputs[kW].dims[0].size)) {
      return makeError(ErrorCode::Unsupported,
                       "conv epilogue operand {} is not of the output's dtype, rank and channels, nor one element",
                       extra.toString());
    }
  }
  return Status::ok();
}

// A float16/bfloat16 conv the generated kernels do not compute (a spatial kernel or strides: only
// pointwise 16-bit convs have one) at the default parameters: oneDNN's primitive runs it where it
// can (LibraryCandidates=1, onednn_conv::expressible), else it stays interpreted.
bool libraryByDefault(const KernelSpec& spec) {
  if (!(spec.params == KernelParams{}) || spec.op != OpId::Conv || spec.inputs.size() < 2 ||
      spec.attrs.size() <= kAutoPad)
    return false;
  const OperandSpec& x = spec.inputs[kX];
  const OperandSpec& w = spec.inputs[kW];
  if (x.dtype == DType::Float32 || w.dtype != x.dtype || w.rank != x.rank || w.rank < 3) return false;
  return (isDepthwise(spec) || !isPointwise(spec)) && onednn_conv::available() && onednn_conv::expressible(spec).isOk();
}

// Whether `spec`'s kernel is oneDNN's primitive (the library candidate, or libraryByDefault).
bool onLibrary(const KernelSpec& spec) {
  return spec.params.library != 0 || libraryByDefault(spec);
}

// OK when `spec` is a conv this family compiles; else the reason.
Status checkConv(const KernelSpec& spec) {
  if (spec.op != OpId::Conv) return makeError(ErrorCode::Unsupported, "the conv family compiles conv only");
  if (spec.inputs.size() < 2 || spec.inputs.size() > kFirstExtra + kMaxExtras || spec.fused != nullptr ||
      spec.attrs.size() <= kAutoPad || (spec.epilogue.empty() && spec.inputs.size() > kFirstExtra)) {
    return makeError(ErrorCode::Unsupported,
                     "conv kernels take x, w, an optional bias and the operands of their epilogue (at most {})",
                     kMaxExtras);
  }
  const OperandSpec& x = spec.inputs[kX];
  const OperandSpec& w = spec.inputs[kW];
  if (!x.is_tensor || !w.is_tensor || x.rank < 3 || x.rank > 5 || w.rank != x.rank) {
    return makeError(ErrorCode::Unsupported, "conv kernels take a 1-D to 3-D conv's tensors, got {} and {}",
                     x.toString(), w.toString());
  }
  if (x.dtype != w.dtype || !isFloatType(x.dtype)) {
    return makeError(ErrorCode::Unsupported, "conv kernels take float32/float16/bfloat16 x and w of one dtype, got {}",
                     spec.signature());
  }
  for (int d = 0; d < w.rank; ++d) {
    if (!w.dims[d].isStatic()) {
      return makeError(ErrorCode::Unsupported, "conv kernels bake in the weight's shape; weight {}", w.toString());
    }
  }
  const bool depthwise = isDepthwise(spec);
  // oneDNN's primitive takes any groups and 3-D convs (onednn_conv::expressible checks them).
  const bool library = onLibrary(spec);
  if (!library && spec.attrs[kGroups].i != 1 && !depthwise) {
    return makeError(ErrorCode::Unsupported,
                     "conv kernels take one group or a depthwise conv (groups={} stays interpreted)",
                     spec.attrs[kGroups].i);
  }
  if (!x.dims[1].isStatic() || (!library && !depthwise && x.dims[1].size != w.dims[1].size)) {
    return makeError(ErrorCode::Unsupported, "conv kernels need the static {} input channels of the weight, got {}",
                     w.dims[1].size, x.toString());
  }
  std::vector<std::int64_t> kernel, unknown;
  for (int d = 2; d < w.rank; ++d) {
    kernel.push_back(w.dims[d].size);
    unknown.push_back(-1);
  }
  auto windows = forwardWindows("conv", unknown, windowAttrs(spec, kernel));
  if (!windows) return windows.status();
  if (!library && (depthwise || !isPointwise(spec)) && (x.rank > 4 || x.dtype != DType::Float32)) {
    return makeError(ErrorCode::Unsupported,
                     "dense and depthwise conv kernels take float32 1-D and 2-D convs; {} stays interpreted",
                     spec.signature());
  }
  if (hasBias(spec)) {
    const OperandSpec& b = spec.inputs[kBias];
    if (b.dtype != x.dtype || b.rank != 1 || !b.dims[0].isStatic() || b.dims[0].size != w.dims[0].size) {
      return makeError(ErrorCode::Unsupported, "conv kernels take a static bias of the {} output channels, got {}",
                       w.dims[0].size, b.toString());
    }
  }
  if (library) {
    if (!(spec.params == KernelParams{.library = 1}) && !libraryByDefault(spec)) {
      return makeError(ErrorCode::Unsupported, "a conv library kernel takes no other parameters ({})",
                       spec.params.toString());
    }
    if (!onednn_conv::available()) {
      return makeError(ErrorCode::Unsupported, "conv library kernels are off (LibraryCandidates=0)");
    }
    SVM_RETURN_IF_ERROR(onednn_conv::expressible(spec));
  }
  return checkEpilogue(spec);
}

// The matmul spec the conv's kernel is. Pointwise: A = W [Cout, Cin], B = X [N, Cin, S]. Dense:
// A = W [Cout, K], B = one im2col tile [K, cols] (cols dynamic). Then the bias [Cout, 1] with
// an add epilogue. Without a bias the matmul has two inputs, so its output is slot 2 (prepare()
// points it there even when the conv's omitted bias holds that slot).
KernelSpec matmulSpecOf(const KernelSpec& spec) {
  const OperandSpec& x = spec.inputs[kX];
  const OperandSpec& w = spec.inputs[kW];
  const bool pointwise = isPointwise(spec);
  std::int64_t k = 1;
  for (int d = 1; d < w.rank; ++d) k *= w.dims[d].size;
  KernelSpec mm;
  mm.op = OpId::MatMul;
  mm.params = spec.params;
  mm.target = spec.target;
  OperandSpec a;
  a.dtype = w.dtype;
  a.rank = 2;
  a.dims[0] = staticDim(w.dims[0].size);
  a.dims[1] = staticDim(k);
  OperandSpec b;
  b.dtype = x.dtype;
  if (pointwise) {
    b.rank = 3;
    b.dims[0] = x.dims[0];
    b.dims[1] = x.dims[1];
    b.dims[2] = spatialProduct(x);
  } else {
    b.rank = 2;
    b.dims[0] = staticDim(k);
  }
  mm.inputs = {a, b};
  if (hasBias(spec)) {
    OperandSpec c;
    c.dtype = x.dtype;
    c.rank = 2;
    c.dims[0] = a.dims[0];
    c.dims[1] = staticDim(1);
    mm.inputs.push_back(c);
    mm.epilogue = {EpilogueStep{OpId::Add, static_cast<int>(kBias), false}};
  }
  // The conv's epilogue after the bias, its operands at the same indices: pointwise as the output
  // viewed [N, Cout, S]; dense as one tile's columns of one image, [Cout, cols] (rows S apart).
  for (std::size_t e = kFirstExtra; e < spec.inputs.size(); ++e) {
    OperandSpec extra;
    extra.dtype = x.dtype;
    if (isScalarOperand(spec.inputs[e])) {  // one element: [1, 1] (pointwise [1, 1, 1]), read with stride 0
      extra.rank = pointwise ? 3 : 2;
      for (int d = 0; d < extra.rank; ++d) extra.dims[d] = staticDim(1);
    } else if (pointwise) {
      extra.rank = 3;
      extra.dims[0] = x.dims[0];
      extra.dims[1] = a.dims[0];
      extra.dims[2] = spatialProduct(x);
    } else {
      extra.rank = 2;
      extra.dims[0] = a.dims[0];
      extra.contiguous = false;
    }
    mm.inputs.push_back(extra);
  }
  mm.epilogue.insert(mm.epilogue.end(), spec.epilogue.begin(), spec.epilogue.end());
  return mm;
}

const KernelFamily& matmulKernels() {
  return *matmulFamily(OpId::MatMul);
}

// A dense conv's last columns of an image that do not fill a register panel of the matmul's tile
// (NR = 64 with AVX-512) would still run the whole panel's FMAs: at 4x4 pixels (resnet18's last
// stage at 116x116) 16 of 64 columns, 4x the work. When NR >= kMinWideNr, the kernel also holds
// a narrow matmul (kNarrowMr x kNarrowNr) and the last pixels % NR columns of each image, when
// at most kMaxNarrowColumns, go to it as a tile of their own. (Measured on 512->512 3x3 convs,
// one thread, Zen 5: 4x4 pixels 2.08 -> 1.14 ms with 8x16 tiles; at 7x7, 49 columns, 8x16 tiles
// were 1.5x slower than the 6x64 panel, so only up to 32 columns go narrow.)
constexpr int kNarrowMr = 8, kNarrowNr = 16, kNarrowKc = 256;
constexpr std::int64_t kMinWideNr = 48, kMaxNarrowColumns = 32;

KernelSpec narrowSpecOf(const KernelSpec& spec) {
  KernelSpec mm = matmulSpecOf(spec);
  mm.params.mr = kNarrowMr;
  mm.params.nr = kNarrowNr;
  mm.params.kc = kNarrowKc;
  return mm;
}

// Whether a dense conv whose wide tile is `nr` columns also has the narrow kernel: not when static
// spatial extents leave no narrow tile (pixels % nr is 0 or above kMaxNarrowColumns), which spares
// its compile.
bool hasNarrowTiles(const KernelSpec& spec, std::int64_t nr) {
  if (isDepthwise(spec) || isPointwise(spec) || nr < kMinWideNr) return false;
  const OperandSpec& x = spec.inputs[kX];
  const OperandSpec& w = spec.inputs[kW];
  std::vector<std::int64_t> in, kernel;
  for (int d = 2; d < x.rank; ++d) {
    in.push_back(x.dims[d].isStatic() ? x.dims[d].size : -1);
    kernel.push_back(w.dims[d].size);
  }
  auto windows = forwardWindows("conv", in, windowAttrs(spec, kernel));
  if (!windows) return true;
  std::int64_t pixels = 1;
  for (const AxisWindow& window : *windows) {
    if (window.out < 0) return true;  // a dynamic extent: any remainder
    pixels *= window.out;
  }
  const std::int64_t rest = pixels % nr;
  return rest > 0 && rest <= kMaxNarrowColumns;
}
bool hasNarrowTiles(const KernelSpec& spec, const KernelSpec& mm) {
  return hasNarrowTiles(spec, matmul::resolvePlan(mm).nr());
}

// The windows of one call (per spatial axis), from the input's extents.
Expected<std::vector<AxisWindow>> callWindows(const KernelSpec& spec, const Tensor& x, const Tensor& w) {
  std::vector<std::int64_t> in, kernel;
  for (int d = 2; d < x.rank(); ++d) {
    in.push_back(x.dim(d));
    kernel.push_back(w.dim(d));
  }
  return forwardWindows("conv", in, windowAttrs(spec, kernel));
}

// A window op's output: [N, channels, one extent per window], x's dtype.
Status windowOutput(const Tensor& x, std::int64_t channels, const std::vector<AxisWindow>& windows,
                    std::span<DType> dtypes, std::span<Shape> shapes) {
  Shape out{x.dim(0), channels};
  for (const AxisWindow& window : windows) out.push_back(window.out);
  dtypes[0] = x.dtype();
  shapes[0] = out;
  return Status::ok();
}

// ---- pointwise: the matmul family's prepare() on views of the conv's tensors ----

struct MatmulOperands {
  Value values[kFirstExtra + kMaxExtras];
  std::size_t count = 2;
};

// An epilogue operand must be the output's shape, dense (its views follow the output's layout),
// or one element where the spec says so.
Status checkExtra(const OperandSpec& spec, const Tensor& extra, const Shape& out) {
  if (isScalarOperand(spec) ? extra.numel() != 1 : extra.shape() != out || !extra.isContiguous()) {
    return makeError(ErrorCode::Unsupported, "conv epilogue operand {} is not a dense tensor of the output's shape {}",
                     extra.describe(), out.toString());
  }
  return Status::ok();
}

// Fills `ops` in place (returning the struct through Expected trips GCC 12's -Wmaybe-uninitialized
// on the Values' union).
Status pointwiseOperands(const KernelSpec& spec, std::span<const Value* const> inputs, MatmulOperands& ops) {
  const Tensor& x = inputs[kX]->tensor();
  const Tensor& w = inputs[kW]->tensor();
  std::int64_t spatial = 1;
  for (int d = 2; d < x.rank(); ++d) spatial *= x.dim(d);
  SVM_ASSIGN_OR_RETURN(Tensor a, w.reshapeView(Shape{w.dim(0), w.dim(1)}));
  SVM_ASSIGN_OR_RETURN(Tensor b, x.reshapeView(Shape{x.dim(0), x.dim(1), spatial}));
  ops.values[0] = Value::fromTensor(std::move(a));
  ops.values[1] = Value::fromTensor(std::move(b));
  if (hasBias(spec)) {
    ops.count = 3;
    SVM_ASSIGN_OR_RETURN(Tensor c, inputs[kBias]->tensor().reshapeView(Shape{w.dim(0), 1}));
    ops.values[2] = Value::fromTensor(std::move(c));
  }
  for (std::size_t e = kFirstExtra; e < spec.inputs.size(); ++e) {
    const Shape shape = isScalarOperand(spec.inputs[e]) ? Shape{1, 1, 1} : Shape{x.dim(0), w.dim(0), spatial};
    SVM_ASSIGN_OR_RETURN(Tensor view, inputs[e]->tensor().reshapeView(shape));
    ops.values[e] = Value::fromTensor(std::move(view));
    ops.count = e + 1;
  }
  return Status::ok();
}

Status preparePointwise(const KernelSpec& spec, std::span<const Value* const> inputs, const Tensor& out,
                        KernelArgs& args) {
  MatmulOperands ops;
  SVM_RETURN_IF_ERROR(pointwiseOperands(spec, inputs, ops));
  SVM_ASSIGN_OR_RETURN(Tensor c, out.reshapeView(Shape{out.dim(0), out.dim(1), ops.values[1].tensor().dim(2)}));
  const Value* pointers[kFirstExtra + kMaxExtras];
  for (std::size_t k = 0; k < ops.count; ++k) {
    const Tensor& t = ops.values[k].tensor();
    pointers[k] = &ops.values[k];
    args.data[k] = t.rawData();
    for (int d = 0; d < kMaxRank; ++d) {
      args.shape[k][d] = d < t.rank() ? t.dim(d) : 0;
      args.strides[k][d] = d < t.rank() ? t.stride(d) : 0;
    }
  }
  args.data[ops.count] = out.rawData();  // the matmul's output slot
  return matmulKernels().prepare(matmulSpecOf(spec), std::span<const Value* const>(pointers, ops.count),
                                 std::span<const Tensor>(&c, 1), args);
}

// ---- dense: im2col tiles through the generated part ----

using PartFn = void (*)(const KernelArgs* args, std::int64_t task, std::int64_t tasks, void* scratch);

// The geometry a dense call's runner reads (slot kGeometrySlot's shape and strides).
struct DenseGeometry {
  std::int64_t kh, kw, sh, sw, ph, pw, dh, dw;    // shape[0..7]
  std::int64_t h, w, ho, wo, cols, k, cout, cin;  // strides[0..7]
};

DenseGeometry geometryOf(const KernelArgs& args) {
  const std::int64_t* g = args.shape[kGeometrySlot];
  const std::int64_t* e = args.strides[kGeometrySlot];
  return {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]};
}

// The im2col runs are short in the deep layers (7 to 28 floats at 224x224, 1 to 3 of padding):
// fixed-size copies (inlined as vector moves), where a plain loop becomes a memmove/memset call
// (GCC's loop distribution) that costs more than the run.
[[gnu::always_inline]] inline void copyRun(float* __restrict dst, const float* __restrict src, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) std::memcpy(dst + i, src + i, 8 * sizeof(float));
  if (n - i >= 4) {
    std::memcpy(dst + i, src + i, 4 * sizeof(float));
    i += 4;
  }
  if (n - i >= 2) {
    std::memcpy(dst + i, src + i, 2 * sizeof(float));
    i += 2;
  }
  if (n - i >= 1) dst[i] = src[i];
}
[[gnu::always_inline]] inline void zeroRun(float* dst, std::int64_t n) {
  static constexpr float kZeros[8] = {};
  for (std::int64_t i = 0; i < n; i += 8) copyRun(dst + i, kZeros, std::min<std::int64_t>(n - i, 8));
}

// Columns [p0, p0 + count) of image n's im2col matrix into `tile` ([k, count], rows `ld` floats
// apart). Each tile row (ci, ky, kx) is a run per output row: zeros where the tap's input row or
// column is padding, else the input row's columns ox * sw + x_off.
void fillTile(const DenseGeometry& g, const float* image, std::int64_t x_channel_stride, std::int64_t p0,
              std::int64_t count, std::int64_t ld, float* __restrict tile) {
  const std::int64_t oy0 = p0 / g.wo, first_ox = p0 % g.wo;
  for (std::int64_t ci = 0; ci < g.cin; ++ci) {
    const float* plane = image + ci * x_channel_stride;
    for (std::int64_t ky = 0; ky < g.kh; ++ky) {
      for (std::int64_t kx = 0; kx < g.kw; ++kx) {
        float* __restrict dst = tile + ((ci * g.kh + ky) * g.kw + kx) * ld;
        const std::int64_t x_off = kx * g.dw - g.pw;
        // Output columns whose input column lies inside the row: [ox_lo, ox_hi).
        const std::int64_t ox_lo = x_off >= 0 ? 0 : std::min(g.wo, (-x_off + g.sw - 1) / g.sw);
        const std::int64_t ox_hi = g.w - x_off <= 0 ? 0 : std::min(g.wo, (g.w - x_off + g.sw - 1) / g.sw);
        std::int64_t oy = oy0, ox0 = first_ox, j = 0;
        while (j < count) {
          const std::int64_t run = std::min(count - j, g.wo - ox0), end = ox0 + run;
          const std::int64_t iy = oy * g.sh - g.ph + ky * g.dh;
          float* __restrict out = dst + j;  // output column ox at out[ox - ox0]
          if (iy < 0 || iy >= g.h) {
            zeroRun(out, run);
          } else {
            const std::int64_t lo = std::clamp(ox_lo, ox0, end), hi = std::clamp(ox_hi, lo, end);
            zeroRun(out, lo - ox0);
            if (hi > lo) {
              // The input column of output column lo, then sw apart.
              const float* __restrict src = plane + iy * g.w + lo * g.sw + x_off;
              float* __restrict inside = out + (lo - ox0);
              if (g.sw == 1) {
                copyRun(inside, src, hi - lo);
              } else if (g.sw == 2) {
                // A constant stride: vectorized (even lanes of two loads), where a run-time one is not.
                for (std::int64_t c = 0; c < hi - lo; ++c) inside[c] = src[2 * c];
              } else {
                for (std::int64_t c = 0; c < hi - lo; ++c) inside[c] = src[c * g.sw];
              }
            }
            zeroRun(out + (hi - ox0), end - hi);
          }
          j += run;
          ++oy;
          ox0 = 0;
        }
      }
    }
  }
}

// A per-thread buffer for one tile (im2col columns, the product) and the matmul's scratch
// (threadBuffer, in 4 KiB steps; its own, apart from the matmul runner's).
struct ConvTileTag {};
float* tileBuffer(std::int64_t floats) {
  return static_cast<float*>(ir::threadBuffer<ConvTileTag>(floats * static_cast<std::int64_t>(sizeof(float)), 4096));
}

// A grouped tile's rows (one [cout, pixels] image block `ld` floats apart in `tile` from `image`'s
// columns on) from or to the NCHW images: the product out, a residual operand in.
void copyImages(const float* from, std::int64_t from_image, std::int64_t from_row, float* to, std::int64_t to_image,
                std::int64_t to_row, std::int64_t images, std::int64_t rows, std::int64_t pixels) {
  for (std::int64_t i = 0; i < images; ++i) {
    for (std::int64_t r = 0; r < rows; ++r) {
      std::memcpy(to + i * to_image + r * to_row, from + i * from_image + r * from_row,
                  static_cast<std::size_t>(pixels) * sizeof(float));
    }
  }
}

// The task runner of a dense conv (scalars[kScalarRunner]): tiles split across `tasks` threads,
// each filled and multiplied by the generated part, which writes the product (epilogue applied)
// straight into the output. Tiles are (image, column block), or, when images are small
// (kCountsSlot's shape[3] = `group` > 1, see imagesPerTile), `group` whole images side by side:
// the weight is streamed once per group instead of once per image. Such a tile's product and its
// epilogue operands live in the tile buffer as [cout, width] and are copied out and in.
void runDenseConv(PartFn part, const KernelArgs* args, std::int64_t tasks, std::int64_t scratch_bytes) {
  const DenseGeometry g = geometryOf(*args);
  const std::int64_t batch = args->shape[kXSlot][0];
  const std::int64_t pixels = g.ho * g.wo;
  if (batch == 0 || pixels == 0 || g.cout == 0) return;
  // Columns [0, main) in tiles of g.cols for the wide kernel, then the last `narrow` ones as one
  // tile for the narrow kernel (see hasNarrowTiles; the part reads which from kCountsSlot).
  const std::int64_t narrow = args->shape[kCountsSlot][2];
  const std::int64_t group = std::max<std::int64_t>(1, args->shape[kCountsSlot][3]);
  const std::int64_t main = pixels - narrow;
  const std::int64_t blocks = (main + g.cols - 1) / g.cols;
  const std::int64_t per_image = blocks + (narrow > 0 ? 1 : 0);
  const std::int64_t tiles = group > 1 ? (batch + group - 1) / group : batch * per_image;
  const int inputs = static_cast<int>(args->shape[kCountsSlot][0]);
  const int slot_b = inputs + 2;
  const auto* x = static_cast<const float*>(args->data[kXSlot]);
  auto* out = static_cast<float*>(args->data[kOutSlot]);
  const std::int64_t image_out = g.cout * pixels;
  const std::int64_t scratch_floats = (scratch_bytes + 63) / 64 * 16;
  const std::int64_t width_most = group > 1 ? group * pixels : std::max(g.cols, narrow);
  std::int64_t staged = 0;  // a grouped tile's buffers: the product and each operand not of one element
  if (group > 1) {
    staged = 1;
    for (int e = static_cast<int>(kFirstExtra); e < inputs; ++e) staged += args->strides[e][3] != 0 ? 1 : 0;
  }
  auto work = [&](std::int64_t task, std::int64_t count) {
    float* buffer = tileBuffer(scratch_floats + (g.k + staged * g.cout) * width_most);
    if (buffer == nullptr) std::abort();  // like a failed `new`: nothing to return an error to
    float* scratch = buffer;
    float* columns = buffer + scratch_floats;
    KernelArgs tile = *args;
    for (std::int64_t t = task; t < tiles; t += count) {
      if (group > 1) {
        const std::int64_t n0 = t * group, images = std::min(group, batch - n0), width = images * pixels;
        for (std::int64_t i = 0; i < images; ++i) {
          fillTile(g, x + (n0 + i) * args->strides[kXSlot][0], args->strides[kXSlot][1], 0, pixels, width,
                   columns + i * pixels);
        }
        float* product = columns + g.k * width_most;
        float* next = product + g.cout * width_most;
        for (int e = static_cast<int>(kFirstExtra); e < inputs; ++e) {
          if (args->strides[e][3] == 0) continue;  // one element (see prepareDense)
          copyImages(static_cast<const float*>(args->data[e]) + n0 * image_out, image_out, pixels, next, pixels, width,
                     images, g.cout, pixels);
          tile.data[e] = next;
          tile.strides[e][2] = width;
          next += g.cout * width_most;
        }
        tile.data[1] = columns;
        tile.data[inputs] = product;
        tile.strides[inputs][2] = width;
        tile.shape[slot_b][3] = width;
        tile.strides[slot_b][2] = width;
        part(&tile, 0, 1, scratch);
        copyImages(product, pixels, width, out + n0 * image_out, image_out, pixels, images, g.cout, pixels);
        continue;
      }
      const std::int64_t n = t / per_image, block = t % per_image;
      const bool narrow_tile = block == blocks;
      const std::int64_t p0 = narrow_tile ? main : block * g.cols;
      const std::int64_t width = narrow_tile ? narrow : std::min(g.cols, main - p0);
      tile.shape[kCountsSlot][1] = narrow_tile ? 1 : 0;
      fillTile(g, x + n * args->strides[kXSlot][0], args->strides[kXSlot][1], p0, width, width, columns);
      tile.data[1] = columns;
      float* dst = out + n * image_out + p0;
      for (int e = static_cast<int>(kFirstExtra); e < inputs; ++e) {
        if (args->strides[e][3] == 0) continue;                           // one element (see prepareDense)
        tile.data[e] = static_cast<float*>(args->data[e]) + (dst - out);  // the same columns of the operand
      }
      tile.data[inputs] = dst;  // the product's rows are the output's channels (pixels apart)
      tile.shape[slot_b][3] = width;
      tile.strides[slot_b][2] = width;
      part(&tile, 0, 1, scratch);
    }
  };
  const std::int64_t threads = std::min(tasks, tiles);
  if (threads <= 1) {
    work(0, 1);
    return;
  }
  ThreadPool::global().run(static_cast<int>(threads), [&](int task) { work(task, threads); });
}

// Im2col tile width. Every tile re-reads the whole weight A [Cout, K] for its cols columns, so a
// tile narrower than Cout spends more on A than on its own columns (at K = 4608, 256 KiB held
// 16 columns and each tile read 9 MiB of weights for them): the width is at least
// max(kMinTileColumns, Cout), else what fits kTileBytes, at most the image. An image that needs
// several tiles gets equal ones (multiples of `align` columns: the wide tile's NR when the image's
// last columns go to the narrow kernel, so that every wide tile is whole panels).
constexpr std::int64_t kTileBytes = 1024 * 1024;
constexpr std::int64_t kMinTileColumns = 64;
std::int64_t widestTile(std::int64_t k, std::int64_t cout) {
  const std::int64_t fits = kTileBytes / static_cast<std::int64_t>(sizeof(float)) / std::max<std::int64_t>(1, k);
  return std::max({fits, kMinTileColumns, cout});
}
std::int64_t tileColumns(std::int64_t k, std::int64_t cout, std::int64_t pixels, std::int64_t align) {
  const std::int64_t widest = widestTile(k, cout);
  if (pixels <= widest) return std::max<std::int64_t>(1, pixels);
  const std::int64_t blocks = (pixels + widest - 1) / widest;
  const std::int64_t cols = ((pixels + blocks - 1) / blocks + align - 1) / align * align;
  return std::min(cols, pixels);
}

// Images per tile. A weight of kGroupWeightBytes or more is streamed from beyond L2 by every tile,
// once per image when images are small (resnet18's last stage: 9.4 MiB for 49 columns, 8 times at
// batch 8), and a small image also ends in a partial register panel: images of at most half a tile
// go several to a tile, as evenly as the batch allows, with at least as many tiles as threads (or
// images). Measured on Zen 5, one thread, batch 8, the same kernel alternating: 512->512 3x3 at
// 7x7, 8 images a tile (392 columns), 0.87-0.91x the time of a tile per image; 256->256 at 14x14
// with 4 images a tile (784 columns, rows 3 KiB apart in the im2col tile) 1.08-1.10x, so tiles
// stay as wide as tileColumns makes them (256 columns there: one image).
constexpr std::int64_t kGroupWeightBytes = 256 * 1024;
std::int64_t imagesPerTile(std::int64_t batch, std::int64_t pixels, std::int64_t k, std::int64_t cout,
                           std::int64_t threads) {
  const std::int64_t budget = widestTile(k, cout);
  if (batch < 2 || pixels == 0 || 2 * pixels > budget ||
      cout * k * static_cast<std::int64_t>(sizeof(float)) < kGroupWeightBytes) {
    return 1;
  }
  const std::int64_t most = budget / pixels;
  const std::int64_t tiles = std::max((batch + most - 1) / most, std::min(threads, batch));
  return (batch + tiles - 1) / tiles;
}

Status prepareDense(const KernelSpec& spec, std::span<const Value* const> inputs, const Tensor& out, KernelArgs& args) {
  const Tensor& x = inputs[kX]->tensor();
  const Tensor& w = inputs[kW]->tensor();
  SVM_ASSIGN_OR_RETURN(std::vector<AxisWindow> windows, callWindows(spec, x, w));
  const bool two_d = windows.size() == 2;
  const AxisWindow none{1, 1, 1, 1, 1, 0, 0};
  const AxisWindow& wy = two_d ? windows[0] : none;
  const AxisWindow& wx = windows.back();
  const std::int64_t cout = w.dim(0), cin = w.dim(1), k = cin * wy.kernel * wx.kernel;
  const std::int64_t pixels = wy.out * wx.out;
  const KernelSpec mm = matmulSpecOf(spec);
  const std::int64_t nr = matmul::resolvePlan(mm).nr();
  const std::int64_t rest = hasNarrowTiles(spec, nr) ? pixels % nr : 0;
  const std::int64_t narrow = rest <= kMaxNarrowColumns ? rest : 0;
  const std::int64_t cols = tileColumns(k, cout, pixels - narrow, std::max<std::int64_t>(nr, 16));
  const DenseGeometry g{wy.kernel,   wx.kernel,   wy.stride, wx.stride, wy.pad_before, wx.pad_before,
                        wy.dilation, wx.dilation, wy.in,     wx.in,     wy.out,        wx.out,
                        cols,        k,           cout,      cin};
  const std::int64_t geometry[16] = {g.kh, g.kw, g.sh, g.sw, g.ph,   g.pw, g.dh,   g.dw,
                                     g.h,  g.w,  g.ho, g.wo, g.cols, g.k,  g.cout, g.cin};
  std::copy(geometry, geometry + 8, args.shape[kGeometrySlot]);
  std::copy(geometry + 8, geometry + 16, args.strides[kGeometrySlot]);
  const int inputs_count = static_cast<int>(mm.inputs.size());  // its output slot follows them
  args.shape[kCountsSlot][0] = inputs_count;
  args.shape[kCountsSlot][1] = 0;  // the runner's tile: 1 for the narrow kernel
  args.shape[kCountsSlot][2] = narrow;  // [3]: images per tile, below
  args.data[kXSlot] = const_cast<void*>(static_cast<const void*>(x.rawData()));
  args.shape[kXSlot][0] = x.dim(0);
  args.strides[kXSlot][0] = x.stride(0);
  args.strides[kXSlot][1] = x.stride(1);
  args.data[kOutSlot] = out.rawData();
  // The product [cout, cols] goes straight into the output at the tile's first pixel: its rows
  // (the output's channels) are `pixels` apart (the kernel is emitted with a strided C).
  args.strides[inputs_count][2] = pixels;
  // The matmul's operands: A = W [cout, k] in slot 0, B = a tile (the runner points slot 1 at
  // it), the bias [cout, 1] in slot 2; canonical views [1, 1, rows, cols] after the output.
  const int slot_a = inputs_count + 1, slot_b = inputs_count + 2;
  args.data[0] = const_cast<void*>(static_cast<const void*>(w.rawData()));
  args.data[1] = nullptr;
  const std::int64_t a_view[4] = {1, 1, cout, k}, a_strides[4] = {0, 0, k, 1};
  const std::int64_t b_view[4] = {1, 1, k, cols}, b_strides[4] = {0, 0, cols, 1};
  std::copy(a_view, a_view + 4, args.shape[slot_a]);
  std::copy(a_strides, a_strides + 4, args.strides[slot_a]);
  std::copy(b_view, b_view + 4, args.shape[slot_b]);
  std::copy(b_strides, b_strides + 4, args.strides[slot_b]);
  if (hasBias(spec)) {
    const std::int64_t bias_strides[4] = {0, 0, 1, 0};
    std::copy(bias_strides, bias_strides + 4, args.strides[kBias]);
  }
  // Epilogue operands: image 0's [Cout, pixels] here (the runner moves each to its tile's
  // columns); a one-element operand with strides 0 (the runner leaves it).
  for (std::size_t e = kFirstExtra; e < spec.inputs.size(); ++e) {
    const bool scalar = isScalarOperand(spec.inputs[e]);
    const std::int64_t extra_strides[4] = {0, 0, scalar ? 0 : pixels, scalar ? 0 : 1};
    args.data[e] = const_cast<void*>(static_cast<const void*>(inputs[e]->tensor().rawData()));
    std::copy(extra_strides, extra_strides + 4, args.strides[e]);
  }
  const std::int64_t work = x.dim(0) * pixels * cout * k;
  const std::int64_t threads = spec.params.threads > 0 ? spec.params.threads : kernelThreads();
  args.scalars[kScalarRunner] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&runDenseConv));
  args.scalars[kScalarTasks] = work >= matmul::kMinParallelWork ? std::max<std::int64_t>(1, threads) : 1;
  args.shape[kCountsSlot][3] = imagesPerTile(x.dim(0), pixels, k, cout, args.scalars[kScalarTasks]);
  return Status::ok();
}

// ---- depthwise convs and max_pool: a direct loop over each plane ----

constexpr int kScalarPadTop = 0, kScalarPadLeft = 1, kScalarPadBottom = 2, kScalarPadRight = 3;
// A 3-D pool's depth pads (before, after) in this operand slot's shape (its operands are x and the output).
constexpr int kPoolDepthSlot = 2;

// The call's pads (auto_pad SAME depends on the input): scalars[0..1] before, [2..3] after (only
// avg_pool's divisor reads those); a 3-D pool's depth pads in kPoolDepthSlot's shape.
void setWindowPads(const std::vector<AxisWindow>& windows, KernelArgs& args) {
  const std::size_t n = windows.size();
  args.scalars[kScalarPadTop] = n >= 2 ? windows[n - 2].pad_before : 0;
  args.scalars[kScalarPadLeft] = windows.back().pad_before;
  args.scalars[kScalarPadBottom] = n >= 2 ? windows[n - 2].pad_after : 0;
  args.scalars[kScalarPadRight] = windows.back().pad_after;
  if (n == 3) {
    args.shape[kPoolDepthSlot][0] = windows[0].pad_before;
    args.shape[kPoolDepthSlot][1] = windows[0].pad_after;
  }
}

Status prepareDepthwise(const KernelSpec& spec, std::span<const Value* const> inputs, KernelArgs& args) {
  SVM_ASSIGN_OR_RETURN(std::vector<AxisWindow> windows, callWindows(spec, inputs[kX]->tensor(), inputs[kW]->tensor()));
  setWindowPads(windows, args);
  return Status::ok();
}

// The window attribute list `values` (one per spatial axis, [] = all `fallback`) at axis d of n.
std::int64_t attrAt(const std::vector<std::int64_t>& values, int d, int n, std::int64_t fallback) {
  return values.empty() ? fallback
                        : values[static_cast<std::size_t>(values.size() == static_cast<std::size_t>(n) ? d : 0)];
}

// A direct window loop's baked-in geometry (1-D: kh = sh = dh = 1) and what it computes: per plane
// of the input (index `plane` of N * C, i64), `plane(plane, not_output)` loads what the plane's
// outputs need (not_output tags a load as apart from the output); each output then starts as
// start() and takes its taps in (ky, kx) order: acc = combine(acc, x, ky * kw + kx).
struct WindowLoop {
  int spatial = 2;
  DType dtype = DType::Float32;  // of x and the output (float16/bfloat16 computed in float32)
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  std::int64_t kd = 1, sd = 1, dd = 1;  // 3-D (pools): the depth axis
  std::function<void(llvm::Value* plane, const std::function<llvm::Value*(llvm::Instruction*)>& not_output)> plane;
  std::function<llvm::Value*()> start;
  std::function<llvm::Value*(llvm::Value* acc, llvm::Value* x, std::int64_t tap)> combine;
  // When set: called once a plane's outputs are all stored, with the plane's output base pointer
  // and its output depth (3-D; else 0).
  std::function<void(llvm::Value* out_plane, llvm::Value* od)> finish;
  // When set: each output is result(acc, od, oy, ox) of its taps, every output kept in a register
  // until stored (the border rows too, which otherwise accumulate in the output).
  std::function<llvm::Value*(llvm::Value* acc, llvm::Value* od, llvm::Value* oy, llvm::Value* ox)> result;
};

// The window's geometry from a conv's or pool's kernel (one extent per spatial axis) and attribute lists.
void setWindowShape(WindowLoop& loop, const std::vector<std::int64_t>& kernel, const std::vector<std::int64_t>& strides,
                    const std::vector<std::int64_t>& dilations) {
  const int spatial = static_cast<int>(kernel.size());
  loop.spatial = spatial;
  auto axis = [&](int d, std::int64_t& k, std::int64_t& s, std::int64_t& dilation) {
    k = kernel[static_cast<std::size_t>(d)];
    s = attrAt(strides, d, spatial, 1);
    dilation = attrAt(dilations, d, spatial, 1);
  };
  axis(spatial - 1, loop.kw, loop.sw, loop.dw);
  if (spatial >= 2) axis(spatial - 2, loop.kh, loop.sh, loop.dh);
  if (spatial == 3) axis(0, loop.kd, loop.sd, loop.dd);
}

// The loop nest of a kernel begun with ir::beginKernel (builder `b`, `function`, its `args`; the
// caller returns): input slot 0 [N, C, (H,) W] dense, the output in `out_slot`, the pads in
// scalars. An inner output row (all of its kh input rows inside the input) accumulates every tap
// of each output column in a register and stores it once: the columns whose every tap is inside
// the row run unchecked (a loop the vectorizer widens), the few border columns test each tap. A
// border row (top and bottom padding) starts as start() and takes each tap whose input row is
// inside over the columns it reads inside the row, so padding costs nothing.
void emitWindowLoop(ir::Builder& b, llvm::Function* function, ir::ArgsView& args, int out_slot,
                    const WindowLoop& loop) {
  llvm::LLVMContext& context = b.getContext();
  const bool two_d = loop.spatial >= 2;  // an H axis
  const bool three_d = loop.spatial == 3;
  const int rank = loop.spatial + 2;
  const std::int64_t kh = loop.kh, kw = loop.kw, sh = loop.sh, sw = loop.sw, dh = loop.dh, dw = loop.dw;
  const std::int64_t kd = loop.kd, sd = loop.sd, dd = loop.dd;
  const std::int64_t tap_rows = kd * kh;  // 3-D: row (kd, ky) is tap row kd * kh + ky
  llvm::Type* f32 = b.getFloatTy();
  llvm::Type* elem = ir::elementType(context, loop.dtype);  // x's and the output's
  const bool narrow = loop.dtype != DType::Float32;
  auto i64 = [&](std::int64_t v) { return ir::constI64(b, v); };
  llvm::Value* x = args.data(0);
  llvm::Value* out = args.data(out_slot);
  llvm::Value* depth = three_d ? args.dim(0, 2) : i64(1);
  llvm::Value* depth_out = three_d ? args.dim(out_slot, 2) : i64(1);
  // One plane per output depth slice of each [N, C] volume.
  llvm::Value* planes = b.CreateMul(b.CreateMul(args.dim(0, 0), args.dim(0, 1)), depth_out);
  llvm::Value* h = two_d ? args.dim(0, rank - 2) : i64(1);
  llvm::Value* wdt = args.dim(0, rank - 1);
  llvm::Value* ho = two_d ? args.dim(out_slot, rank - 2) : i64(1);
  llvm::Value* wo = args.dim(out_slot, rank - 1);
  llvm::Value* ph = args.scalar(kScalarPadTop);
  llvm::Value* pw = args.scalar(kScalarPadLeft);
  llvm::Value* in_plane = b.CreateMul(h, wdt);
  llvm::Value* out_plane = b.CreateMul(ho, wo);
  // Per kx tap: the input column offset and the output columns [lo, hi) it reads inside the row;
  // [lo_all, hi_all): the columns every tap reads inside the row (the rest are border columns).
  std::vector<llvm::Value*> x_off(static_cast<std::size_t>(kw)), lo(static_cast<std::size_t>(kw)),
      hi(static_cast<std::size_t>(kw));
  auto ceilDiv = [&](llvm::Value* a, std::int64_t d) { return b.CreateSDiv(b.CreateAdd(a, i64(d - 1)), i64(d)); };
  auto clamp = [&](llvm::Value* v, llvm::Value* low, llvm::Value* high) {
    llvm::Value* up = b.CreateSelect(b.CreateICmpSLT(v, low), low, v);
    return b.CreateSelect(b.CreateICmpSGT(up, high), high, up);
  };
  llvm::Value* lo_all = i64(0);
  llvm::Value* hi_all = wo;
  for (std::int64_t kx = 0; kx < kw; ++kx) {
    const std::size_t k = static_cast<std::size_t>(kx);
    x_off[k] = b.CreateSub(i64(kx * dw), pw);
    lo[k] = clamp(ceilDiv(b.CreateNeg(x_off[k]), sw), i64(0), wo);
    hi[k] = clamp(ceilDiv(b.CreateSub(wdt, x_off[k]), sw), lo[k], wo);
    lo_all = b.CreateSelect(b.CreateICmpSGT(lo[k], lo_all), lo[k], lo_all);
    hi_all = b.CreateSelect(b.CreateICmpSLT(hi[k], hi_all), hi[k], hi_all);
  }
  hi_all = b.CreateSelect(b.CreateICmpSLT(hi_all, lo_all), lo_all, hi_all);
  // The output rows whose every ky tap row is inside the input: [oy_lo, oy_hi).
  llvm::Value* oy_lo = clamp(ceilDiv(ph, sh), i64(0), ho);
  llvm::Value* oy_hi = clamp(ceilDiv(b.CreateSub(b.CreateAdd(h, ph), i64((kh - 1) * dh)), sh), oy_lo, ho);
  // The output rows are apart from the inputs (the runtime gives each its own buffer): input
  // loads carry noalias against the output's scope, so the column loops vectorize without
  // run-time overlap checks.
  llvm::MDBuilder md(context);
  llvm::MDNode* domain = md.createAnonymousAliasScopeDomain("svm.window");
  llvm::MDNode* output_scope = llvm::MDNode::get(context, {md.createAnonymousAliasScope(domain, "output")});
  auto inOutput = [&](llvm::Instruction* access) {
    access->setMetadata(llvm::LLVMContext::MD_alias_scope, output_scope);
    return access;
  };
  const std::function<llvm::Value*(llvm::Instruction*)> notOutput = [&](llvm::Instruction* access) {
    access->setMetadata(llvm::LLVMContext::MD_noalias, output_scope);
    return access;
  };
  // Element access in float32: float16/bfloat16 widened on load and rounded on store (exact for
  // max_pool, whose outputs are input values), without the scope metadata.
  auto loadX = [&](llvm::Value* at) {
    return narrow ? ir::loadCompute(b, loop.dtype, at) : notOutput(b.CreateLoad(f32, at));
  };
  auto loadOut = [&](llvm::Value* at) {
    return narrow ? ir::loadCompute(b, loop.dtype, at) : inOutput(b.CreateLoad(f32, at));
  };
  auto store = [&](llvm::Value* value, llvm::Value* at) {
    if (narrow) ir::storeCompute(b, loop.dtype, value, at);
    else inOutput(b.CreateStore(value, at));
  };
  const ir::LoopHints outer = ir::LoopHints::asEmitted();
  ir::LoopHints columns;  // vectorized, not interleaved: the border rows' loops (few rows)
  columns.no_unroll_after_vectorize = true;
  columns.interleave_count = 1;
  ir::LoopHints inner;  // the inner rows' column loop: vectorized and interleaved as the vectorizer sees fit
  inner.no_unroll_after_vectorize = true;
  ir::emitLoop(
      b, i64(0), planes, 1,
      [&](llvm::Value* plane) {
        llvm::Value* op = b.CreateInBoundsGEP(elem, out, b.CreateMul(plane, out_plane));
        // The input slice of each kd tap (2-D: the plane) and whether it is inside the input.
        llvm::Value* od = i64(0);
        std::vector<llvm::Value*> slices, depth_inside;
        llvm::Value* all_depth = b.getTrue();
        if (three_d) {
          od = b.CreateURem(plane, depth_out);
          llvm::Value* volume =
              b.CreateInBoundsGEP(elem, x, b.CreateMul(b.CreateUDiv(plane, depth_out), b.CreateMul(depth, in_plane)));
          for (std::int64_t z = 0; z < kd; ++z) {
            llvm::Value* id =
                b.CreateAdd(b.CreateSub(b.CreateMul(od, i64(sd)), args.dim(kPoolDepthSlot, 0)), i64(z * dd));
            slices.push_back(b.CreateGEP(elem, volume, b.CreateMul(id, in_plane)));
            depth_inside.push_back(b.CreateAnd(b.CreateICmpSGE(id, i64(0)), b.CreateICmpSLT(id, depth)));
            all_depth = b.CreateAnd(all_depth, depth_inside.back());
          }
        } else {
          slices.push_back(b.CreateInBoundsGEP(elem, x, b.CreateMul(plane, in_plane)));
          depth_inside.push_back(b.getTrue());
        }
        loop.plane(plane, notOutput);
        // A border row (some ky tap row outside the input): the row starts as start(), then each
        // tap inside takes its columns [lo, hi).
        std::function<void(llvm::Value*)> borderRow = [&](llvm::Value* oy) {
          llvm::Value* orow = b.CreateInBoundsGEP(elem, op, b.CreateMul(oy, wo));
          ir::emitLoop(
              b, i64(0), wo, 1, [&](llvm::Value* ox) { store(loop.start(), b.CreateInBoundsGEP(elem, orow, ox)); },
              "init", columns);
          for (std::int64_t t = 0; t < tap_rows; ++t) {
            const std::int64_t ky = t % kh;
            const auto z = static_cast<std::size_t>(t / kh);
            llvm::Value* iy = b.CreateAdd(b.CreateSub(b.CreateMul(oy, i64(sh)), ph), i64(ky * dh));
            llvm::Value* inside =
                b.CreateAnd(depth_inside[z], b.CreateAnd(b.CreateICmpSGE(iy, i64(0)), b.CreateICmpSLT(iy, h)));
            ir::emitIfElse(
                b, inside,
                [&] {
                  llvm::Value* xrow = b.CreateGEP(elem, slices[z], b.CreateMul(iy, wdt));
                  for (std::int64_t kx = 0; kx < kw; ++kx) {
                    const std::size_t k = static_cast<std::size_t>(kx);
                    ir::emitLoop(
                        b, lo[k], hi[k], 1,
                        [&](llvm::Value* ox) {
                          llvm::Value* at = b.CreateInBoundsGEP(elem, orow, ox);
                          llvm::Value* column = b.CreateAdd(b.CreateMul(ox, i64(sw)), x_off[k]);
                          llvm::Value* xv = loadX(b.CreateGEP(elem, xrow, column));
                          store(loop.combine(loadOut(at), xv, t * kw + kx), at);
                        },
                        "tap", columns);
                  }
                },
                [] {});
          }
        };
        // The rows of output row oy's ky taps (pointers; a row outside the input is never read)
        // and, with `checked`, whether each is inside.
        auto tapRows = [&](llvm::Value* oy, std::vector<llvm::Value*>& xrows, std::vector<llvm::Value*>* inside) {
          for (std::int64_t t = 0; t < tap_rows; ++t) {
            const auto z = static_cast<std::size_t>(t / kh);
            llvm::Value* iy = b.CreateAdd(b.CreateSub(b.CreateMul(oy, i64(sh)), ph), i64(t % kh * dh));
            xrows.push_back(b.CreateGEP(elem, slices[z], b.CreateMul(iy, wdt)));
            if (inside != nullptr) {
              inside->push_back(
                  b.CreateAnd(depth_inside[z], b.CreateAnd(b.CreateICmpSGE(iy, i64(0)), b.CreateICmpSLT(iy, h))));
            }
          }
        };
        // Output columns [from, to) of row oy (at orow), each taking its taps in a register and
        // stored once: a tap is read when its column (and, given `rows_inside`, its row) is
        // inside the input.
        auto checkedColumns = [&](llvm::Value* oy, llvm::Value* orow, const std::vector<llvm::Value*>& xrows,
                                  const std::vector<llvm::Value*>& rows_inside, llvm::Value* from, llvm::Value* to) {
          ir::emitLoop(
              b, from, to, 1,
              [&](llvm::Value* ox) {
                std::vector<llvm::Value*> column, inside;
                for (std::int64_t kx = 0; kx < kw; ++kx) {
                  column.push_back(b.CreateAdd(b.CreateMul(ox, i64(sw)), x_off[static_cast<std::size_t>(kx)]));
                  inside.push_back(
                      b.CreateAnd(b.CreateICmpSGE(column.back(), i64(0)), b.CreateICmpSLT(column.back(), wdt)));
                }
                llvm::Value* acc = loop.start();
                for (std::int64_t t = 0; t < tap_rows; ++t) {
                  for (std::int64_t kx = 0; kx < kw; ++kx) {
                    const std::size_t k = static_cast<std::size_t>(kx);
                    llvm::Value* taps = rows_inside.empty()
                                            ? inside[k]
                                            : b.CreateAnd(rows_inside[static_cast<std::size_t>(t)], inside[k]);
                    llvm::BasicBlock* before = b.GetInsertBlock();
                    llvm::BasicBlock* load = llvm::BasicBlock::Create(context, "win.col", function);
                    llvm::BasicBlock* join = llvm::BasicBlock::Create(context, "win.col.join", function);
                    b.CreateCondBr(taps, load, join);
                    b.SetInsertPoint(load);
                    llvm::Value* xv = loadX(b.CreateGEP(elem, xrows[static_cast<std::size_t>(t)], column[k]));
                    llvm::Value* taken = loop.combine(acc, xv, t * kw + kx);
                    llvm::BasicBlock* loaded = b.GetInsertBlock();
                    b.CreateBr(join);
                    b.SetInsertPoint(join);
                    llvm::PHINode* merged = b.CreatePHI(f32, 2);
                    merged->addIncoming(acc, before);
                    merged->addIncoming(taken, loaded);
                    acc = merged;
                  }
                }
                store(loop.result ? loop.result(acc, od, oy, ox) : acc, b.CreateInBoundsGEP(elem, orow, ox));
              },
              "edge", outer);
        };
        if (loop.result) {
          // Every output in a register (none accumulated in the output), then result().
          borderRow = [&](llvm::Value* oy) {
            std::vector<llvm::Value*> xrows, inside;
            tapRows(oy, xrows, &inside);
            checkedColumns(oy, b.CreateInBoundsGEP(elem, op, b.CreateMul(oy, wo)), xrows, inside, i64(0), wo);
          };
        }
        // An inner row (every ky tap row inside): each output column takes all kh * kw taps in a
        // register and is stored once; the border columns [0, lo_all) and [hi_all, wo) test each
        // tap's column, the columns between read every tap unchecked.
        auto innerRow = [&](llvm::Value* oy) {
          llvm::Value* orow = b.CreateInBoundsGEP(elem, op, b.CreateMul(oy, wo));
          std::vector<llvm::Value*> xrows;
          tapRows(oy, xrows, nullptr);
          auto borderColumns = [&](llvm::Value* from, llvm::Value* to) {
            checkedColumns(oy, orow, xrows, {}, from, to);
          };
          borderColumns(i64(0), lo_all);
          ir::emitLoop(
              b, lo_all, hi_all, 1,
              [&](llvm::Value* ox) {
                llvm::Value* acc = loop.start();
                for (std::int64_t t = 0; t < tap_rows; ++t) {
                  for (std::int64_t kx = 0; kx < kw; ++kx) {
                    llvm::Value* column = b.CreateAdd(b.CreateMul(ox, i64(sw)), x_off[static_cast<std::size_t>(kx)]);
                    llvm::Value* xv = loadX(b.CreateGEP(elem, xrows[static_cast<std::size_t>(t)], column));
                    acc = loop.combine(acc, xv, t * kw + kx);
                  }
                }
                store(loop.result ? loop.result(acc, od, oy, ox) : acc, b.CreateInBoundsGEP(elem, orow, ox));
              },
              "taps", inner);
          borderColumns(hi_all, wo);
        };
        // The border rows in one loop (one copy of their code): [0, oy_lo), then [oy_hi, ho); a
        // 3-D slice with a kd tap outside the input has border rows only.
        llvm::Value* row_lo = three_d ? b.CreateSelect(all_depth, oy_lo, ho) : oy_lo;
        llvm::Value* row_hi = three_d ? b.CreateSelect(all_depth, oy_hi, ho) : oy_hi;
        ir::emitLoop(
            b, i64(0), b.CreateAdd(row_lo, b.CreateSub(ho, row_hi)), 1,
            [&](llvm::Value* r) {
              borderRow(b.CreateSelect(b.CreateICmpSLT(r, row_lo), r, b.CreateAdd(row_hi, b.CreateSub(r, row_lo))));
            },
            "border", outer);
        // Stride 1 with the output as wide as the input (a "same" conv, e.g. 3x3 pad 1): an output's
        // taps are its flat index plus a fixed offset per tap, so the inner rows run as one flat
        // loop over the plane, [oy_lo * wo + lo_all, (oy_hi - 1) * wo + hi_all) (whose first and
        // last outputs read inside the plane, hence all between do), in full vectors whatever
        // the row width (a 28-wide row is one 16-lane vector and a remainder). Its border
        // columns read the neighbouring rows' ends; each inner row's border columns are then
        // computed again, checked, over them.
        const bool flat_rows = two_d && !three_d && sh == 1 && sw == 1 && !loop.result;
        auto rowByRow = [&] { ir::emitLoop(b, row_lo, row_hi, 1, innerRow, "oy", outer); };
        if (!flat_rows) {
          rowByRow();
        } else {
          llvm::Value* flat = b.CreateAnd(
              b.CreateICmpEQ(wo, wdt), b.CreateAnd(b.CreateICmpSGT(hi_all, lo_all), b.CreateICmpSGT(row_hi, row_lo)));
          ir::emitIfElse(
              b, flat,
              [&] {
                std::vector<llvm::Value*> tap_offsets;  // per (ky, kx): the input's flat offset from the output's
                for (std::int64_t t = 0; t < kh; ++t) {
                  llvm::Value* row = b.CreateMul(b.CreateSub(i64(t * dh), ph), wdt);
                  for (std::int64_t kx = 0; kx < kw; ++kx) {
                    tap_offsets.push_back(b.CreateAdd(row, x_off[static_cast<std::size_t>(kx)]));
                  }
                }
                llvm::Value* first = b.CreateAdd(b.CreateMul(row_lo, wo), lo_all);
                llvm::Value* last = b.CreateAdd(b.CreateMul(b.CreateSub(row_hi, i64(1)), wo), hi_all);
                ir::emitLoop(
                    b, first, last, 1,
                    [&](llvm::Value* at) {
                      llvm::Value* acc = loop.start();
                      for (std::int64_t t = 0; t < kh * kw; ++t) {
                        llvm::Value* xv = loadX(
                            b.CreateGEP(elem, slices[0], b.CreateAdd(at, tap_offsets[static_cast<std::size_t>(t)])));
                        acc = loop.combine(acc, xv, t);
                      }
                      store(acc, b.CreateInBoundsGEP(elem, op, at));
                    },
                    "flat", inner);
                ir::emitLoop(
                    b, row_lo, row_hi, 1,
                    [&](llvm::Value* oy) {
                      llvm::Value* orow = b.CreateInBoundsGEP(elem, op, b.CreateMul(oy, wo));
                      std::vector<llvm::Value*> xrows;
                      tapRows(oy, xrows, nullptr);
                      checkedColumns(oy, orow, xrows, {}, i64(0), lo_all);
                      checkedColumns(oy, orow, xrows, {}, hi_all, wo);
                    },
                    "flat.edges", outer);
              },
              rowByRow);
        }
        if (loop.finish) loop.finish(op, od);
      },
      "plane", outer);
}

// A depthwise conv: each plane's channel c = plane % C reads its kh * kw weights and its bias
// once; a tap is acc + w[c, t] * x (fused multiply-add).
Status emitDepthwise(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) {
  const OperandSpec& ws = spec.inputs[kW];
  const std::int64_t channels = ws.dims[0].size;
  WindowLoop loop;
  std::vector<std::int64_t> kernel;
  for (int d = 2; d < ws.rank; ++d) kernel.push_back(ws.dims[d].size);
  setWindowShape(loop, kernel, spec.attrs[kStrides].ints, spec.attrs[kDilations].ints);
  const std::int64_t taps_count = loop.kh * loop.kw;
  ir::Builder b(module.getContext());
  llvm::Function* function = ir::beginKernel(module, symbol, b);
  ir::ArgsView args(b, function->getArg(0));
  llvm::Type* f32 = b.getFloatTy();
  llvm::Value* w = args.data(static_cast<int>(kW));
  llvm::Value* bias = hasBias(spec) ? args.data(static_cast<int>(kBias)) : nullptr;
  llvm::Value* start = nullptr;
  std::vector<llvm::Value*> taps;
  loop.plane = [&](llvm::Value* plane, const std::function<llvm::Value*(llvm::Instruction*)>& not_output) {
    llvm::Value* c = b.CreateURem(plane, ir::constI64(b, channels));
    start = llvm::ConstantFP::get(f32, 0.0);
    if (bias != nullptr) start = not_output(b.CreateLoad(f32, b.CreateInBoundsGEP(f32, bias, c)));
    taps.clear();
    for (std::int64_t t = 0; t < taps_count; ++t) {
      llvm::Value* index = b.CreateAdd(b.CreateMul(c, ir::constI64(b, taps_count)), ir::constI64(b, t));
      taps.push_back(not_output(b.CreateLoad(f32, b.CreateInBoundsGEP(f32, w, index))));
    }
  };
  loop.start = [&] { return start; };
  loop.combine = [&](llvm::Value* acc, llvm::Value* x, std::int64_t t) {
    return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {f32}, {taps[static_cast<std::size_t>(t)], x, acc});
  };
  emitWindowLoop(b, function, args, static_cast<int>(spec.inputs.size()), loop);
  b.CreateRetVoid();
  return Status::ok();
}

// The exported entry `symbol` of a kernel run by its task runner: calls scalars[kScalarRunner]
// with `part` (nullptr for a library kernel's), the args, scalars[kScalarTasks] and `scratch`.
void emitRunnerEntry(llvm::Module& module, const std::string& symbol, llvm::Function* part, std::int64_t scratch) {
  llvm::LLVMContext& context = module.getContext();
  ir::Builder b(context);
  llvm::Function* function = ir::beginKernel(module, symbol, b);
  ir::ArgsView args(b, function->getArg(0));
  llvm::Type* ptr = llvm::PointerType::getUnqual(context);
  llvm::Value* runner = b.CreateIntToPtr(args.scalar(kScalarRunner), ptr);
  auto* runner_type = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, b.getInt64Ty(), b.getInt64Ty()}, false);
  llvm::Value* part_value = part != nullptr ? static_cast<llvm::Value*>(part)
                                            : llvm::ConstantPointerNull::get(llvm::PointerType::getUnqual(context));
  b.CreateCall(
      runner_type, runner,
      {part_value, function->getArg(0), args.scalar(kScalarTasks), b.getInt64(static_cast<std::uint64_t>(scratch))});
  b.CreateRetVoid();
}

// A dense conv with the narrow kernel: both matmul parts (strided C), and the exported entry
// calling the runner with a part that runs the narrow one on the tiles the runner marks
// (kCountsSlot's shape[1]) and the wide one on the rest, with the larger of their scratches.
Status emitDenseWithNarrow(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) {
  const KernelSpec wide = matmulSpecOf(spec), narrow = narrowSpecOf(spec);
  SVM_RETURN_IF_ERROR(matmul::emitMatmulKernel(wide, module, symbol + "_wide", /*strided_c=*/true));
  SVM_RETURN_IF_ERROR(matmul::emitMatmulKernel(narrow, module, symbol + "_narrow", /*strided_c=*/true));
  llvm::Function* wide_part = module.getFunction(symbol + "_wide_part");
  llvm::Function* narrow_part = module.getFunction(symbol + "_narrow_part");
  if (wide_part == nullptr || narrow_part == nullptr) {
    return makeError(ErrorCode::Internal, "conv {}: the matmul parts were not emitted", symbol);
  }
  // Their own entries are not called.
  for (const char* entry : {"_wide", "_narrow"}) module.getFunction(symbol + entry)->eraseFromParent();
  llvm::LLVMContext& context = module.getContext();
  llvm::Function* tiles =
      llvm::Function::Create(wide_part->getFunctionType(), llvm::Function::InternalLinkage, symbol + "_tiles", module);
  tiles->addFnAttr(llvm::Attribute::NoUnwind);
  {
    ir::Builder b(context);
    b.SetInsertPoint(llvm::BasicBlock::Create(context, "entry", tiles));
    ir::ArgsView args(b, tiles->getArg(0));
    std::vector<llvm::Value*> operands;
    for (llvm::Argument& arg : tiles->args()) operands.push_back(&arg);
    llvm::Value* is_narrow = b.CreateICmpNE(args.dim(kCountsSlot, 1), b.getInt64(0));
    ir::emitIfElse(
        b, is_narrow, [&] { b.CreateCall(narrow_part, operands); }, [&] { b.CreateCall(wide_part, operands); });
    b.CreateRetVoid();
  }
  emitRunnerEntry(
      module, symbol, tiles,
      std::max(matmul::scratchBytes(matmul::resolvePlan(wide)), matmul::scratchBytes(matmul::resolvePlan(narrow))));
  return Status::ok();
}

// A library kernel's generated counterpart: the same conv at the family's default parameters.
KernelSpec generatedSpecOf(const KernelSpec& spec) {
  KernelSpec generated = spec;
  generated.params = {};
  return generated;
}

class ConvFamily final : public KernelFamily, public LlvmKernelEmitter {
 public:
  std::string_view name() const override { return "conv"; }

  Status supports(const KernelSpec& spec) const override {
    SVM_RETURN_IF_ERROR(checkConv(spec));
    if (isDepthwise(spec) || onLibrary(spec)) return Status::ok();
    const KernelSpec mm = matmulSpecOf(spec);
    SVM_RETURN_IF_ERROR(matmulKernels().supports(mm));
    return hasNarrowTiles(spec, mm) ? matmulKernels().supports(narrowSpecOf(spec)) : Status::ok();
  }

  Status outputs(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                 std::span<Shape> shapes) const override {
    if (inputs.size() != spec.inputs.size() || inputs[kX] == nullptr || inputs[kW] == nullptr ||
        !inputs[kX]->isTensor() || !inputs[kW]->isTensor() ||
        (hasBias(spec) && (inputs[kBias] == nullptr || !inputs[kBias]->isTensor()))) {
      return makeError(ErrorCode::Unsupported, "conv kernel takes {} operands", spec.inputs.size());
    }
    const Tensor& x = inputs[kX]->tensor();
    const Tensor& w = inputs[kW]->tensor();
    if (x.rank() != w.rank() || x.dim(1) != w.dim(1) * spec.attrs[kGroups].i) {
      return makeError(ErrorCode::ShapeMismatch, "conv: input {} does not fit the weight {}", x.shape().toString(),
                       w.shape().toString());
    }
    SVM_ASSIGN_OR_RETURN(std::vector<AxisWindow> windows, callWindows(spec, x, w));
    return windowOutput(x, w.dim(0), windows, dtypes, shapes);
  }

  Status prepare(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<const Tensor> outputs,
                 KernelArgs& args) const override {
    // The spec does not guard layouts (a profile may not record a constant weight's): checked here,
    // a strided operand declines the call to the reference kernel.
    if (outputs.size() != 1 || !outputs[0].isContiguous() || !inputs[kX]->tensor().isContiguous() ||
        !inputs[kW]->tensor().isContiguous() || (hasBias(spec) && !inputs[kBias]->tensor().isContiguous())) {
      return makeError(ErrorCode::Unsupported, "conv kernel reads dense x, w and bias and writes one dense output");
    }
    for (std::size_t e = kFirstExtra; e < spec.inputs.size(); ++e) {
      SVM_RETURN_IF_ERROR(checkExtra(spec.inputs[e], inputs[e]->tensor(), outputs[0].shape()));
    }
    if (onLibrary(spec)) {
      Status library = onednn_conv::prepareCall(spec, inputs, outputs[0], args);
      // A primitive oneDNN cannot create for this call's shapes (logged by its cache): the
      // generated kernel the library kernel also holds runs it, else the reference kernel.
      if (library.isOk() || !holdsGenerated(spec)) return library;
      std::memset(args.scalars, 0, sizeof(args.scalars));
      return prepare(generatedSpecOf(spec), inputs, outputs, args);
    }
    if (isDepthwise(spec)) return prepareDepthwise(spec, inputs, args);
    return isPointwise(spec) ? preparePointwise(spec, inputs, outputs[0], args)
                             : prepareDense(spec, inputs, outputs[0], args);
  }

  // Whether a library kernel also holds the generated kernel (a dense or pointwise conv the
  // generated family computes: its entry calls the runner in the arguments as the library's does).
  bool holdsGenerated(const KernelSpec& spec) const {
    const KernelSpec generated = generatedSpecOf(spec);
    return !isDepthwise(generated) && !libraryByDefault(generated) && supports(generated).isOk();
  }

  // A library kernel's weight when its primitive reorders it (onednn_conv::packedWeight).
  PackedOperand packedOperand(const KernelSpec& spec, const KernelArgs& args) const override {
    return onLibrary(spec) ? onednn_conv::packedWeight(args) : PackedOperand{};
  }

  void usePacked(const KernelSpec& spec, KernelArgs& args, void* buffer, PackMode mode) const override {
    if (onLibrary(spec)) onednn_conv::usePackedWeight(args, buffer, mode);
  }

  std::string symbolStem(const KernelSpec& spec) const override {
    std::string kernel;
    for (int d = 2; d < spec.inputs[kW].rank; ++d) {
      kernel += fmt::format("{}{}", kernel.empty() ? "" : "x", spec.inputs[kW].dims[d].size);
    }
    // A library kernel's ends as the matmul's does (_onednn).
    if (isDepthwise(spec)) {
      return fmt::format("conv{}_depthwise_c{}_{}{}", kernel, spec.inputs[kW].dims[0].size,
                         dtypeName(spec.inputs[kX].dtype), onLibrary(spec) ? "_onednn" : "");
    }
    const std::int64_t groups = spec.attrs[kGroups].i;  // > 1: a library kernel's
    KernelSpec named = spec;
    if (libraryByDefault(spec)) named.params = {.library = 1};
    return fmt::format("conv{}{}_{}", kernel, groups > 1 ? fmt::format("_g{}", groups) : std::string(),
                       matmulKernels().symbolStem(matmulSpecOf(named)));
  }

  // The generated kernel's candidates (the matmul's tiles), then oneDNN's primitive
  // (LibraryCandidates=1) where it can compute the conv: timed against them by the AutoTuner,
  // which records the winner's impl. A depthwise conv has its generated kernel only: it beat the
  // primitive with its reorders (BENCHMARKS.md, issue 21), and the run-off, which keeps the
  // library unless the generated kernel wins by the noise margin, picked the slower one there. A
  // 16-bit conv on the library by default has nothing generated to time it against.
  std::vector<KernelParams> searchSpace(const KernelSpec& spec) const override {
    if (isDepthwise(spec) || libraryByDefault(spec)) return {};
    std::vector<KernelParams> candidates = matmulKernels().searchSpace(matmulSpecOf(spec));
    std::erase_if(candidates, [](const KernelParams& p) { return p.library != 0; });
    KernelSpec library = spec;
    library.params = {.library = 1};
    if (onednn_conv::available() && supports(library).isOk()) candidates.push_back(library.params);
    return candidates;
  }

  Status emit(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) const override {
    SVM_RETURN_IF_ERROR(checkConv(spec));
    if (onLibrary(spec)) {
      // The primitive of static shapes is created here: compile time, and one oneDNN cannot
      // create fails the compile (the generated kernel is used instead). The entry calls the
      // runner prepare() names: the library's, or for a call whose primitive oneDNN cannot create
      // the generated kernel's, emitted beside it where the generated family computes the conv.
      SVM_RETURN_IF_ERROR(onednn_conv::createFor(spec));
      if (holdsGenerated(spec)) return emit(generatedSpecOf(spec), module, symbol);
      emitRunnerEntry(module, symbol, nullptr, 0);
      return Status::ok();
    }
    if (isDepthwise(spec)) return emitDepthwise(spec, module, symbol);
    // A dense conv's tiles are written into the output in place: C's rows are the image's pixels apart.
    const KernelSpec mm = matmulSpecOf(spec);
    if (hasNarrowTiles(spec, mm)) return emitDenseWithNarrow(spec, module, symbol);
    return matmul::emitMatmulKernel(mm, module, symbol, /*strided_c=*/!isPointwise(spec));
  }
};

// ---- max_pool and avg_pool: the window loop taking the max or the sum ----

// Pool attributes in schema order (ops.def): max_pool: kernel, strides, pads, dilations,
// ceil_mode, auto_pad; avg_pool: kernel, strides, pads, ceil_mode, count_include_pad, auto_pad.
constexpr std::size_t kPoolKernel = 0, kPoolStrides = 1, kPoolPads = 2, kPoolAutoPad = 5;
constexpr std::size_t kMaxPoolDilations = 3, kMaxPoolCeilMode = 4, kAvgPoolCeilMode = 3, kAvgPoolIncludePad = 4;

std::string_view poolName(OpId op) {
  return op == OpId::MaxPool ? "max_pool" : "avg_pool";
}

WindowAttrs poolWindowAttrs(const KernelSpec& spec) {
  const bool max = spec.op == OpId::MaxPool;
  WindowAttrs window;
  window.kernel = spec.attrs[kPoolKernel].ints;
  window.strides = spec.attrs[kPoolStrides].ints;
  window.pads = spec.attrs[kPoolPads].ints;
  if (max) window.dilations = spec.attrs[kMaxPoolDilations].ints;
  window.ceil_mode = spec.attrs[max ? kMaxPoolCeilMode : kAvgPoolCeilMode].i != 0;
  window.auto_pad = spec.attrs[kPoolAutoPad].i;
  return window;
}

// OK when `spec` is a pool of `op` this family compiles (1-D to 3-D, dense; float32, float16 or
// bfloat16, computed in float32 and rounded once per output); else the reason.
Status checkPool(OpId op, const KernelSpec& spec) {
  const std::string_view name = poolName(op);
  if (spec.op != op || spec.inputs.size() != 1 || spec.fused != nullptr || !spec.epilogue.empty() ||
      spec.attrs.size() <= kPoolAutoPad) {
    return makeError(ErrorCode::Unsupported, "{} kernels take one input and no epilogue", name);
  }
  const OperandSpec& x = spec.inputs[0];
  const bool dtype_ok = x.dtype == DType::Float32 || x.dtype == DType::Float16 || x.dtype == DType::BFloat16;
  if (!x.is_tensor || !dtype_ok || x.rank < 3 || x.rank > 5 ||
      spec.attrs[kPoolKernel].ints.size() != static_cast<std::size_t>(x.rank - 2)) {
    return makeError(ErrorCode::Unsupported,
                     "{} kernels take 1-D to 3-D pools of float32, float16 or bfloat16; {} stays interpreted", name,
                     spec.signature());
  }
  const std::vector<std::int64_t> unknown(static_cast<std::size_t>(x.rank - 2), -1);
  auto windows = forwardWindows(name, unknown, poolWindowAttrs(spec));
  if (!windows) return windows.status();
  if (spec.params.library != 0) return makeError(ErrorCode::Unsupported, "{} kernels have no library candidates", name);
  return Status::ok();
}

Expected<std::vector<AxisWindow>> poolWindows(const KernelSpec& spec, const Tensor& x) {
  std::vector<std::int64_t> in;
  for (int d = 2; d < x.rank(); ++d) in.push_back(x.dim(d));
  return forwardWindows(poolName(spec.op), in, poolWindowAttrs(spec));
}

// avg_pool's count along one axis as the reference takes it, of the window starting at `start`
// (kernel k) over an input of `in` with `pad_after` after it: the taps inside the input, or with
// count_include_pad the window clipped to the padded input.
llvm::Value* avgAxisCount(ir::Builder& b, bool include_pad, llvm::Value* start, std::int64_t k, llvm::Value* in,
                          llvm::Value* pad_after) {
  auto smin = [&](llvm::Value* x, llvm::Value* y) { return b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, x, y); };
  auto smax = [&](llvm::Value* x, llvm::Value* y) { return b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, y); };
  llvm::Value* end = b.CreateAdd(start, ir::constI64(b, k));
  if (include_pad) return b.CreateSub(smin(end, b.CreateAdd(in, pad_after)), start);
  return smax(b.CreateSub(smin(end, in), smax(start, ir::constI64(b, 0))), ir::constI64(b, 0));
}

// `sum` divided by its window's count (a NaN where the count is not positive).
llvm::Value* avgOf(ir::Builder& b, llvm::Value* sum, llvm::Value* count) {
  llvm::Type* f32 = b.getFloatTy();
  llvm::Value* mean = b.CreateFDiv(sum, b.CreateSIToFP(count, f32));
  return b.CreateSelect(b.CreateICmpSGT(count, ir::constI64(b, 0)), mean, llvm::ConstantFP::getNaN(f32));
}

// A 3-D avg_pool's count along the depth axis for output depth `od` (else 1).
llvm::Value* avgDepthCount(ir::Builder& b, ir::ArgsView& args, const WindowLoop& loop, bool include_pad,
                           llvm::Value* od) {
  if (loop.spatial != 3) return ir::constI64(b, 1);
  llvm::Value* sz = b.CreateSub(b.CreateMul(od, ir::constI64(b, loop.sd)), args.dim(kPoolDepthSlot, 0));
  return avgAxisCount(b, include_pad, sz, loop.kd, args.dim(0, 2), args.dim(kPoolDepthSlot, 1));
}

// avg_pool's mean of output (od, oy, ox) from its sum (WindowLoop::result, float16/bfloat16: rounded
// once on store, as the reference rounds its float32 mean).
llvm::Value* emitAvgResult(ir::Builder& b, ir::ArgsView& args, const WindowLoop& loop, bool include_pad,
                           llvm::Value* sum, llvm::Value* od, llvm::Value* oy, llvm::Value* ox) {
  const int rank = loop.spatial + 2;
  llvm::Value* rows = avgDepthCount(b, args, loop, include_pad, od);
  if (loop.spatial >= 2) {
    llvm::Value* sy = b.CreateSub(b.CreateMul(oy, ir::constI64(b, loop.sh)), args.scalar(kScalarPadTop));
    rows = b.CreateMul(rows,
                       avgAxisCount(b, include_pad, sy, loop.kh, args.dim(0, rank - 2), args.scalar(kScalarPadBottom)));
  }
  llvm::Value* sx = b.CreateSub(b.CreateMul(ox, ir::constI64(b, loop.sw)), args.scalar(kScalarPadLeft));
  llvm::Value* columns = avgAxisCount(b, include_pad, sx, loop.kw, args.dim(0, rank - 1), args.scalar(kScalarPadRight));
  return avgOf(b, sum, b.CreateMul(rows, columns));
}

// avg_pool's divisor pass over one plane's sums (WindowLoop::finish, float32): each output
// divided by its window's count (avgAxisCount, avgOf).
void emitAvgDivisor(ir::Builder& b, ir::ArgsView& args, const WindowLoop& loop, bool include_pad,
                    llvm::Value* out_plane, llvm::Value* od) {
  llvm::Type* f32 = b.getFloatTy();
  auto i64 = [&](std::int64_t v) { return ir::constI64(b, v); };
  const bool two_d = loop.spatial >= 2;
  const int rank = loop.spatial + 2;
  llvm::Value* h = two_d ? args.dim(0, rank - 2) : i64(1);
  llvm::Value* wdt = args.dim(0, rank - 1);
  llvm::Value* ho = two_d ? args.dim(1, rank - 2) : i64(1);
  llvm::Value* depth_count = avgDepthCount(b, args, loop, include_pad, od);
  llvm::Value* wo = args.dim(1, rank - 1);
  auto axisCount = [&](llvm::Value* start, std::int64_t k, llvm::Value* in, llvm::Value* pad_after) {
    return avgAxisCount(b, include_pad, start, k, in, pad_after);
  };
  ir::LoopHints columns;
  columns.no_unroll_after_vectorize = true;
  ir::emitLoop(
      b, i64(0), ho, 1,
      [&](llvm::Value* oy) {
        llvm::Value* sy = b.CreateSub(b.CreateMul(oy, i64(loop.sh)), args.scalar(kScalarPadTop));
        llvm::Value* rows =
            b.CreateMul(depth_count, two_d ? axisCount(sy, loop.kh, h, args.scalar(kScalarPadBottom)) : i64(1));
        llvm::Value* orow = b.CreateInBoundsGEP(f32, out_plane, b.CreateMul(oy, wo));
        ir::emitLoop(
            b, i64(0), wo, 1,
            [&](llvm::Value* ox) {
              llvm::Value* sx = b.CreateSub(b.CreateMul(ox, i64(loop.sw)), args.scalar(kScalarPadLeft));
              llvm::Value* count = b.CreateMul(rows, axisCount(sx, loop.kw, wdt, args.scalar(kScalarPadRight)));
              llvm::Value* at = b.CreateInBoundsGEP(f32, orow, ox);
              b.CreateStore(avgOf(b, b.CreateLoad(f32, at), count), at);
            },
            "divide", columns);
      },
      "divide_rows", ir::LoopHints::asEmitted());
}

// max_pool or avg_pool over each plane of a dense [N, C, (H,) W] (float32, float16 or bfloat16,
// computed in float32): the depthwise conv's window loop (one kernel for any N, C, H and W; the
// pads are read per call), in the reference kernel's tap order. max_pool: each output starts at
// -inf and a tap takes x when x > acc or x is NaN, so NaN propagates and ties keep the first tap
// as there. avg_pool: each output starts at 0 and adds its taps (in float32, in that order, as
// the reference sums), then is divided by the window's count (float32: a divisor pass over the
// plane; float16/bfloat16: before its one rounding store): the reference's bits.
class PoolFamily final : public KernelFamily, public LlvmKernelEmitter {
 public:
  explicit PoolFamily(OpId op) : op_(op) {}

  std::string_view name() const override { return poolName(op_); }

  Status supports(const KernelSpec& spec) const override { return checkPool(op_, spec); }

  Status outputs(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                 std::span<Shape> shapes) const override {
    if (inputs.size() != 1 || inputs[0] == nullptr || !inputs[0]->isTensor() ||
        inputs[0]->tensor().rank() != spec.inputs[0].rank) {
      return makeError(ErrorCode::Unsupported, "{} kernel takes one tensor of rank {}", name(), spec.inputs[0].rank);
    }
    const Tensor& x = inputs[0]->tensor();
    SVM_ASSIGN_OR_RETURN(std::vector<AxisWindow> windows, poolWindows(spec, x));
    return windowOutput(x, x.dim(1), windows, dtypes, shapes);
  }

  Status prepare(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<const Tensor> outputs,
                 KernelArgs& args) const override {
    if (outputs.size() != 1 || !outputs[0].isContiguous() || !inputs[0]->tensor().isContiguous()) {
      return makeError(ErrorCode::Unsupported, "{} kernel reads a dense input and writes one dense output", name());
    }
    SVM_ASSIGN_OR_RETURN(std::vector<AxisWindow> windows, poolWindows(spec, inputs[0]->tensor()));
    setWindowPads(windows, args);
    return Status::ok();
  }

  std::string symbolStem(const KernelSpec& spec) const override {
    const std::string mode = op_ == OpId::MaxPool
                                 ? fmt::format("d{}", fmt::join(spec.attrs[kMaxPoolDilations].ints, "x"))
                                 : std::string(spec.attrs[kAvgPoolIncludePad].i != 0 ? "padded" : "inside");
    return fmt::format("{}_k{}_s{}_{}_{}", name(), fmt::join(spec.attrs[kPoolKernel].ints, "x"),
                       fmt::join(spec.attrs[kPoolStrides].ints, "x"), mode, KernelFamily::symbolStem(spec));
  }

  std::vector<KernelParams> searchSpace(const KernelSpec&) const override { return {}; }

  Status emit(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) const override {
    SVM_RETURN_IF_ERROR(checkPool(op_, spec));
    const bool max = op_ == OpId::MaxPool;
    WindowLoop loop;
    loop.dtype = spec.inputs[0].dtype;
    setWindowShape(loop, spec.attrs[kPoolKernel].ints, spec.attrs[kPoolStrides].ints,
                   max ? spec.attrs[kMaxPoolDilations].ints : std::vector<std::int64_t>{});
    ir::Builder b(module.getContext());
    llvm::Function* function = ir::beginKernel(module, symbol, b);
    ir::ArgsView args(b, function->getArg(0));
    llvm::Type* f32 = b.getFloatTy();
    loop.plane = [](llvm::Value*, const std::function<llvm::Value*(llvm::Instruction*)>&) {};
    if (max) {
      loop.start = [&] { return llvm::ConstantFP::getInfinity(f32, /*Negative=*/true); };
      loop.combine = [&](llvm::Value* acc, llvm::Value* x, std::int64_t) {
        llvm::Value* takes = b.CreateOr(b.CreateFCmpOGT(x, acc), b.CreateFCmpUNO(x, x));
        return b.CreateSelect(takes, x, acc);
      };
    } else {
      const bool include_pad = spec.attrs[kAvgPoolIncludePad].i != 0;
      loop.start = [&] { return llvm::ConstantFP::get(f32, 0.0); };
      loop.combine = [&](llvm::Value* acc, llvm::Value* x, std::int64_t) { return b.CreateFAdd(acc, x); };
      if (loop.dtype == DType::Float32) {
        loop.finish = [&, include_pad](llvm::Value* out_plane, llvm::Value* od) {
          emitAvgDivisor(b, args, loop, include_pad, out_plane, od);
        };
      } else {
        loop.result = [&, include_pad](llvm::Value* sum, llvm::Value* od, llvm::Value* oy, llvm::Value* ox) {
          return emitAvgResult(b, args, loop, include_pad, sum, od, oy, ox);
        };
      }
    }
    emitWindowLoop(b, function, args, 1, loop);
    b.CreateRetVoid();
    return Status::ok();
  }

 private:
  OpId op_;
};

}  // namespace

const KernelFamily* convFamily(OpId op) {
  static const ConvFamily conv;
  static const PoolFamily max_pool(OpId::MaxPool), avg_pool(OpId::AvgPool);
  if (op == OpId::MaxPool) return &max_pool;
  if (op == OpId::AvgPool) return &avg_pool;
  return op == OpId::Conv ? &conv : nullptr;
}

void openConvExtents(KernelSpec& spec) {
  if (spec.op != OpId::Conv || spec.inputs.empty()) return;
  OperandSpec& x = spec.inputs[kX];
  for (int d = 0; d < x.rank; ++d) {
    if (d != 1) x.dims[d] = DimSpec{};
  }
}

void openPoolExtents(KernelSpec& spec) {
  if ((spec.op != OpId::MaxPool && spec.op != OpId::AvgPool) || spec.inputs.size() != 1) return;
  OperandSpec& x = spec.inputs[0];
  for (int d = 0; d < x.rank; ++d) x.dims[d] = DimSpec{};
}

bool convStepSupported(const std::vector<AttrValue>& attrs, std::span<const ConvOperand> operands,
                       const std::vector<EpilogueStep>& epilogue) {
  KernelSpec spec;
  spec.op = OpId::Conv;
  spec.attrs = attrs;
  spec.epilogue = epilogue;
  for (const ConvOperand& operand : operands) {
    OperandSpec input;
    input.dtype = operand.dtype;
    input.rank = operand.shape.rank();
    if (input.rank > kMaxRank) return false;
    for (int d = 0; d < input.rank; ++d) input.dims[d] = staticDim(operand.shape[d]);
    spec.inputs.push_back(input);
  }
  return convFamily(OpId::Conv)->supports(spec).isOk();
}

}  // namespace shapevm::jit
