// SPDX-License-Identifier: Apache-2.0
// The reduce family: sum / mean / max / min over any set of axes (keepdims either way) and
// softmax / log_softmax along one axis, for float32, float16 and bfloat16 inputs of any strides.
// Accumulation follows the reference (src/ops/reduce_ops.cc): float32 sums in double,
// float16/bfloat16 sums in float32, softmax's exp-sum in double, max/min in float32 with NaN
// propagating.
//
// Two loop shapes cover every axis set:
//  - row: the innermost loop walks a reduced axis (softmax: the axis). Each output element
//    reduces a run with 4 x <16 x acc> vector accumulators, a <16 x acc> step and a scalar tail
//    (gathered <16 x acc> steps when the run's stride is not 1), then combines the lanes.
//  - column: the innermost loop walks a kept axis. Blocks of 64 / 16 / 1 adjacent output
//    elements (the lanes) walk the reduced axes together; no horizontal step.
// A contiguous input fixes the choice at compile time: row when the last axis is reduced (the
// trailing reduced axes fused into one run), else column along the last axis. A non-contiguous
// input gets a strided kernel: prepare() orders the loops from the actual strides (innermost =
// smallest stride) and picks the style; the kernel has both styles, each with a unit-stride
// vector variant and a gathered (llvm.masked.gather / scatter) one, chosen at run time.
// Softmax runs three passes per row (or per column block): max, sum of exp(x - max) (float32
// softmax keeps exp in a contiguous output), then the scale (log_softmax: x - max - log(sum)).
// Loops carry no-unroll / no-vectorize metadata: they are vectorized by hand already.
// Invariant: every generated kernel writes each output element exactly once.
#include <algorithm>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>

#include "jit/kernel_abi.h"
#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/ir_math.h"
#include "jit/llvm_cpu/llvm_cpu_backend.h"
#include "ops/kernel_util.h"

namespace shapevm::jit {
namespace {

using ir::Builder;

enum class Kind { Sum, Mean, Max, Min, Softmax, LogSoftmax };

// The ops the family compiles.
constexpr std::pair<OpId, Kind> kKinds[] = {
    {OpId::Sum, Kind::Sum}, {OpId::Mean, Kind::Mean},       {OpId::Max, Kind::Max},
    {OpId::Min, Kind::Min}, {OpId::Softmax, Kind::Softmax}, {OpId::LogSoftmax, Kind::LogSoftmax},
};

bool kindFor(OpId op, Kind& kind) {
  for (const auto& [id, k] : kKinds) {
    if (id == op) {
      kind = k;
      return true;
    }
  }
  return false;
}

bool isReduction(Kind kind) {
  return kind != Kind::Softmax && kind != Kind::LogSoftmax;
}
bool isSum(Kind kind) {
  return kind == Kind::Sum || kind == Kind::Mean;
}

constexpr unsigned kLanes = 16;  // one zmm of float32
constexpr int kUnroll = 4;       // vector accumulators in the row loop / vectors per column block
// Every loop is left as emitted: vectorized by hand, or a short tail / strided walk where extra
// copies only cost compile time.
constexpr ir::LoopHints kAsEmitted = ir::LoopHints::asEmitted();

// The axes an op works along, normalized against the input's rank.
struct AxisPlan {
  int rank = 0;
  bool reduced[kMaxRank] = {};  // reductions: the reduced axes
  int axis = 0;                 // softmax: the axis (0 for a 0-d input)
  bool keepdims = false;
};

Expected<AxisPlan> planAxes(Kind kind, std::string_view name, const KernelSpec& spec, int rank) {
  AxisPlan plan;
  plan.rank = rank;
  if (isReduction(kind)) {
    if (spec.attrs.size() < 2) return makeError(ErrorCode::Internal, "{}: expected attributes axes and keepdims", name);
    const std::vector<std::int64_t>& axes = spec.attrs[0].ints;
    plan.keepdims = spec.attrs[1].i != 0;
    if (axes.empty()) {
      for (int d = 0; d < rank; ++d) plan.reduced[d] = true;
    }
    for (std::int64_t entry : axes) {
      SVM_ASSIGN_OR_RETURN(int axis, normalizeAxis(name, entry, rank));
      if (rank == 0) continue;
      if (plan.reduced[axis]) return makeError(ErrorCode::InvalidArgument, "{}: axes name axis {} twice", name, axis);
      plan.reduced[axis] = true;
    }
  } else {
    if (spec.attrs.empty()) return makeError(ErrorCode::Internal, "{}: expected attribute axis", name);
    SVM_ASSIGN_OR_RETURN(plan.axis, normalizeAxis(name, spec.attrs[0].i, rank));
  }
  return plan;
}

bool isComputeFloat(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16;
}

// ---- IR helpers ----

llvm::Value* withReassoc(llvm::Value* value) {
  if (auto* inst = llvm::dyn_cast<llvm::Instruction>(value)) inst->setHasAllowReassoc(true);
  return value;
}

llvm::Value* splat(Builder& b, unsigned lanes, llvm::Value* scalar) {
  return lanes == 1 ? scalar : b.CreateVectorSplat(lanes, scalar);
}

unsigned lanesOf(llvm::Value* value) {
  if (auto* vector = llvm::dyn_cast<llvm::FixedVectorType>(value->getType())) return vector->getNumElements();
  return 1;
}

// The identity of a max/min chain behind llvm.arithmetic.fence. Without it, InstCombine narrows
// maximum(fpext half a, fpext half b) to a <16 x half> maximum once a chain starts at a
// constant (static trip counts fully unrolled), which x86 without AVX512-FP16 scalarizes —
// slow to compile, slow to run, and it lost NaNs in testing. The fence emits no code.
llvm::Value* fence(Builder& b, llvm::Value* value) {
  return b.CreateUnaryIntrinsic(llvm::Intrinsic::arithmetic_fence, value);
}

// One loop of a nest: its extent and how far one step moves the input and the output.
struct LoopAxis {
  llvm::Value* extent;
  llvm::Value* in_stride;
  llvm::Value* out_stride;  // nullptr: the axis does not move the output
};

// Nested counted loops over `axes`; body gets the input and output offsets of the position
// (sum over the axes of index * stride).
void emitNest(Builder& b, const std::vector<LoopAxis>& axes, std::size_t level, llvm::Value* in_offset,
              llvm::Value* out_offset, const std::function<void(llvm::Value*, llvm::Value*)>& body) {
  if (level == axes.size()) {
    body(in_offset, out_offset);
    return;
  }
  const LoopAxis& axis = axes[level];
  ir::emitLoop(
      b, b.getInt64(0), axis.extent, 1,
      [&](llvm::Value* index) {
        llvm::Value* in_next = b.CreateAdd(in_offset, b.CreateMul(index, axis.in_stride));
        llvm::Value* out_next =
            axis.out_stride ? b.CreateAdd(out_offset, b.CreateMul(index, axis.out_stride)) : out_offset;
        emitNest(b, axes, level + 1, in_next, out_next, body);
      },
      "ax", kAsEmitted);
}

// ---- the generator ----

// Slots prepare() fills for a strided kernel (non-contiguous spec): the loops in the order the
// kernel runs them, picked from the actual strides so the innermost loop has the smallest stride.
constexpr int kOuterSlot = 2;     // shape: extents, strides: input strides of the outer (kept / other) axes
constexpr int kOuterOutSlot = 3;  // strides: output strides of the outer axes
constexpr int kInnerSlot = 4;     // shape/strides: the reduced axes (innermost last) or the softmax axis
constexpr int kInnerOutSlot = 5;  // strides: the softmax axis' output stride
constexpr int kStyleScalar = 0;   // scalars[0]: 1 = lanes along the last outer axis ("column" style)

class ReduceEmitter {
 public:
  ReduceEmitter(Builder& b, Kind kind, const KernelSpec& spec, const AxisPlan& plan)
      : b_(b), kind_(kind), in_spec_(spec.inputs[0]), dtype_(spec.inputs[0].dtype), plan_(plan) {}

  void emit(llvm::Value* args_ptr) {
    ir::ArgsView args(b_, args_ptr);
    in_ = args.data(0);
    out_ = args.data(1);
    if (in_spec_.contiguous || plan_.rank == 0) {
      emitContiguous(args);
    } else if (isReduction(kind_)) {
      emitStridedReduction(args);
    } else {
      emitStridedSoftmax(args);
    }
    b_.CreateRetVoid();
  }

 private:
  llvm::Value* i64(std::int64_t v) { return b_.getInt64(static_cast<std::uint64_t>(v)); }

  // ---- loop plans ----

  // A contiguous input (or a 0-d one, seen as one axis of extent 1): every stride is known from
  // the extents, so the loop order is fixed here and trailing reduced axes fuse into one run.
  void emitContiguous(ir::ArgsView& args) {
    const int rank = std::max(plan_.rank, 1);
    std::vector<llvm::Value*> extents, in_strides(static_cast<std::size_t>(rank)),
        out_strides(static_cast<std::size_t>(rank));
    std::vector<bool> reduced;
    for (int d = 0; d < rank; ++d) {
      extents.push_back(plan_.rank == 0 ? i64(1) : args.dim(in_spec_, 0, d));
      reduced.push_back(plan_.rank == 0 ? isReduction(kind_) : plan_.reduced[d]);
    }
    // Input strides (row-major); output strides: row-major over the kept axes (reductions) or
    // over all axes (softmax).
    llvm::Value* in_step = i64(1);
    llvm::Value* out_step = i64(1);
    for (int d = rank - 1; d >= 0; --d) {
      const auto i = static_cast<std::size_t>(d);
      in_strides[i] = in_step;
      in_step = b_.CreateMul(in_step, extents[i]);
      if (!isReduction(kind_) || !reduced[i]) {
        out_strides[i] = out_step;
        out_step = b_.CreateMul(out_step, extents[i]);
      }
    }
    const auto last = static_cast<std::size_t>(rank - 1);
    if (!isReduction(kind_)) {
      const auto axis = static_cast<std::size_t>(plan_.rank == 0 ? 0 : plan_.axis);
      std::vector<LoopAxis> outer;
      for (std::size_t i = 0; i <= last; ++i) {
        if (i != axis && (axis == last || i != last)) outer.push_back({extents[i], in_strides[i], out_strides[i]});
      }
      const LoopAxis along{extents[axis], in_strides[axis], out_strides[axis]};
      if (axis == last) {
        emitSoftmaxRows(outer, along, /*gathered=*/false);
      } else {
        emitSoftmaxColumns(outer, {extents[last], i64(1), i64(1)}, along, /*gathered=*/false);
      }
      return;
    }
    llvm::Value* count = i64(1);
    for (std::size_t i = 0; i <= last; ++i) {
      if (reduced[i]) count = b_.CreateMul(count, extents[i]);
    }
    // Axes [0, end): the kept ones (outer loops) and the reduced ones (walked per output element).
    std::vector<LoopAxis> kept, inner;
    auto split = [&](std::size_t end) {
      for (std::size_t i = 0; i < end; ++i) {
        if (reduced[i]) {
          inner.push_back({extents[i], in_strides[i], nullptr});
        } else {
          kept.push_back({extents[i], in_strides[i], out_strides[i]});
        }
      }
    };
    if (reduced[last]) {
      // The run: the trailing reduced axes, fused.
      std::size_t run_begin = last;
      while (run_begin > 0 && reduced[run_begin - 1]) --run_begin;
      llvm::Value* run_length = i64(1);
      for (std::size_t i = run_begin; i <= last; ++i) run_length = b_.CreateMul(run_length, extents[i]);
      split(run_begin);
      emitRows(kept, inner, {run_length, i64(1), nullptr}, count);
    } else {
      split(last);
      emitColumns(kept, inner, {extents[last], i64(1), i64(1)}, count, /*gathered=*/false);
    }
  }

  // The loops prepare() ordered: outer axes (the lane candidate last) and inner axes.
  static std::vector<LoopAxis> slotAxes(ir::ArgsView& args, int slot, int out_slot, int count) {
    std::vector<LoopAxis> axes;
    for (int i = 0; i < count; ++i) {
      axes.push_back({args.dim(slot, i), args.stride(slot, i), out_slot >= 0 ? args.stride(out_slot, i) : nullptr});
    }
    return axes;
  }

  llvm::Value* isOne(llvm::Value* v) { return b_.CreateICmpEQ(v, i64(1)); }

  void emitStridedReduction(ir::ArgsView& args) {
    int num_reduced = 0;
    for (int d = 0; d < plan_.rank; ++d) num_reduced += plan_.reduced[d] ? 1 : 0;
    const int num_kept = plan_.rank - num_reduced;
    std::vector<LoopAxis> outer = slotAxes(args, kOuterSlot, kOuterOutSlot, num_kept);
    std::vector<LoopAxis> inner = slotAxes(args, kInnerSlot, -1, num_reduced);
    llvm::Value* count = i64(1);
    for (const LoopAxis& axis : inner) count = b_.CreateMul(count, axis.extent);
    emitByStyle(
        args, outer,
        [&] {
          std::vector<LoopAxis> walk(inner.begin(), inner.end() - 1);
          emitRows(outer, walk, inner.back(), count);
        },
        [&](const std::vector<LoopAxis>& kept, const LoopAxis& lane, bool gathered) {
          emitColumns(kept, inner, lane, count, gathered);
        });
  }

  void emitStridedSoftmax(ir::ArgsView& args) {
    std::vector<LoopAxis> outer = slotAxes(args, kOuterSlot, kOuterOutSlot, plan_.rank - 1);
    const LoopAxis along{args.dim(kInnerSlot, 0), args.stride(kInnerSlot, 0), args.stride(kInnerOutSlot, 0)};
    emitByStyle(
        args, outer,
        [&] {
          emitByStride(along, [&](const LoopAxis& axis, bool gathered) { emitSoftmaxRows(outer, axis, gathered); });
        },
        [&](const std::vector<LoopAxis>& others, const LoopAxis& lane, bool gathered) {
          emitSoftmaxColumns(others, lane, along, gathered);
        });
  }

  // A strided kernel's style, picked by prepare() (scalars[kStyleScalar]): `columns(others, lane,
  // gathered)` with the lanes along the last outer loop, else `rows()` (also when there is no
  // outer loop). The lane axis goes through emitByStride.
  void emitByStyle(ir::ArgsView& args, const std::vector<LoopAxis>& outer, const std::function<void()>& rows,
                   const std::function<void(const std::vector<LoopAxis>&, const LoopAxis&, bool)>& columns) {
    if (outer.empty()) {
      rows();
      return;
    }
    ir::emitIfElse(
        b_, b_.CreateICmpNE(args.scalar(kStyleScalar), i64(0)),
        [&] {
          std::vector<LoopAxis> others(outer.begin(), outer.end() - 1);
          emitByStride(outer.back(), [&](const LoopAxis& lane, bool gathered) { columns(others, lane, gathered); });
        },
        rows);
  }

  // `body(axis, gathered)`: the unit-stride vector variant when both of `axis`' strides are 1 at
  // run time, else the gathered one with its actual strides.
  void emitByStride(const LoopAxis& axis, const std::function<void(const LoopAxis&, bool gathered)>& body) {
    ir::emitIfElse(
        b_, b_.CreateAnd(isOne(axis.in_stride), isOne(axis.out_stride)),
        [&] {
          body({axis.extent, i64(1), i64(1)}, false);
        },
        [&] { body(axis, true); });
  }

  // ---- element access ----

  // `lanes` elements of `base` (input or output) from element offset `offset`: consecutive, or
  // `stride` apart (llvm.masked.gather / scatter) when `stride` is given.
  llvm::Value* lanePointers(llvm::Value* base, llvm::Value* offset, unsigned lanes, llvm::Value* stride) {
    std::vector<std::uint64_t> iota(lanes);
    for (unsigned l = 0; l < lanes; ++l) iota[l] = l;
    llvm::Value* index =
        b_.CreateAdd(splat(b_, lanes, offset),
                     b_.CreateMul(llvm::ConstantDataVector::get(b_.getContext(), iota), splat(b_, lanes, stride)));
    return b_.CreateInBoundsGEP(ir::elementType(b_.getContext(), dtype_), base, index);
  }
  llvm::Value* loadLanes(llvm::Value* base, llvm::Value* offset, unsigned lanes, llvm::Value* stride) {
    if (lanes == 1 || stride == nullptr)
      return ir::loadCompute(b_, dtype_, ir::elementPtr(b_, dtype_, base, offset), lanes);
    // bfloat16 moves as i16 bits and converts with integer ops (ir::bf16BitsToFloat /
    // floatToBf16Bits): a bfloat `fptrunc` needs AVX512_BF16 or a libcall that GCC 12's libgcc lacks.
    const bool bf16 = dtype_ == DType::BFloat16;
    llvm::Type* stored = ir::withLanes(bf16 ? b_.getInt16Ty() : ir::elementType(b_.getContext(), dtype_), lanes);
    llvm::Value* v =
        b_.CreateMaskedGather(stored, lanePointers(base, offset, lanes, stride), llvm::Align(dtypeSize(dtype_)));
    if (bf16) return ir::bf16BitsToFloat(b_, v);
    return dtype_ == DType::Float32 ? v : b_.CreateFPExt(v, ir::withLanes(b_.getFloatTy(), lanes));
  }
  void storeLanes(llvm::Value* value, llvm::Value* offset, llvm::Value* stride) {
    const unsigned lanes = lanesOf(value);
    if (lanes == 1 || stride == nullptr) {
      ir::storeCompute(b_, dtype_, value, ir::elementPtr(b_, dtype_, out_, offset));
      return;
    }
    if (dtype_ == DType::BFloat16) {
      value = ir::floatToBf16Bits(b_, value);  // the reference's rounding, denormals kept
    } else if (dtype_ != DType::Float32) {
      value = b_.CreateFPTrunc(value, ir::withLanes(ir::elementType(b_.getContext(), dtype_), lanes));
    }
    b_.CreateMaskedScatter(value, lanePointers(out_, offset, lanes, stride), llvm::Align(dtypeSize(dtype_)));
  }

  // ---- sum / mean / max / min ----

  // Type the reduction accumulates in.
  llvm::Type* accScalar() const {
    if (isSum(kind_) && dtype_ == DType::Float32) return b_.getDoubleTy();
    return b_.getFloatTy();
  }
  llvm::Type* accType(unsigned lanes) const { return ir::withLanes(accScalar(), lanes); }

  llvm::Value* identity(unsigned lanes) const {
    llvm::Type* scalar = accScalar();
    llvm::Constant* value = kind_ == Kind::Max   ? llvm::ConstantFP::getInfinity(scalar, true)
                            : kind_ == Kind::Min ? llvm::ConstantFP::getInfinity(scalar, false)
                                                 : llvm::ConstantFP::get(scalar, 0.0);
    llvm::Value* init = lanes == 1 ? static_cast<llvm::Value*>(value)
                                   : llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(lanes), value);
    return kind_ == Kind::Max || kind_ == Kind::Min ? fence(b_, init) : init;
  }

  // `lanes` input elements (see loadLanes) as accumulator values.
  llvm::Value* loadAcc(llvm::Value* offset, unsigned lanes, llvm::Value* stride = nullptr) {
    llvm::Value* v = loadLanes(in_, offset, lanes, stride);
    if (accScalar()->isDoubleTy()) v = b_.CreateFPExt(v, accType(lanes));
    return v;
  }

  llvm::Value* combine(llvm::Value* acc, llvm::Value* value) {
    switch (kind_) {
      case Kind::Max:
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, acc, value);
      case Kind::Min:
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, acc, value);
      default:
        return withReassoc(b_.CreateFAdd(acc, value));
    }
  }

  // Lanes of `vector` combined into one scalar.
  llvm::Value* horizontal(llvm::Value* vector) {
    switch (kind_) {
      case Kind::Max:
        return b_.CreateFPMaximumReduce(vector);
      case Kind::Min:
        return b_.CreateFPMinimumReduce(vector);
      default:
        return withReassoc(b_.CreateFAddReduce(llvm::ConstantFP::get(accScalar(), -0.0), vector));
    }
  }

  // The reduced value as stored: mean divides by the count; float32 rounds the double sum.
  void storeResult(llvm::Value* acc, llvm::Value* count, llvm::Value* out_offset, llvm::Value* stride = nullptr) {
    const unsigned lanes = lanesOf(acc);
    if (kind_ == Kind::Mean) {
      llvm::Value* divisor = splat(b_, lanes, b_.CreateSIToFP(count, accScalar()));
      acc = b_.CreateFDiv(acc, divisor);
    }
    if (acc->getType()->getScalarType()->isDoubleTy())
      acc = b_.CreateFPTrunc(acc, ir::withLanes(b_.getFloatTy(), lanes));
    storeLanes(acc, out_offset, stride);
  }

  // One output element per position of `kept`; each reduces the `inner` loops around a `run`
  // (extent, stride): 4 x <16 x acc> + <16 x acc> + scalar accumulators when the run's stride is
  // 1, gathered <16 x acc> + scalar otherwise; then the lanes are combined.
  void emitRows(const std::vector<LoopAxis>& kept, const std::vector<LoopAxis>& inner, const LoopAxis& run,
                llvm::Value* count) {
    vector_acc_.clear();
    for (int u = 0; u < kUnroll; ++u) vector_acc_.push_back(ir::entryAlloca(b_, accType(kLanes), "vacc"));
    scalar_acc_ = ir::entryAlloca(b_, accScalar(), "sacc");
    auto* unit = llvm::dyn_cast<llvm::ConstantInt>(run.in_stride);
    emitNest(b_, kept, 0, i64(0), i64(0), [&](llvm::Value* in_offset, llvm::Value* out_offset) {
      for (llvm::AllocaInst* acc : vector_acc_) b_.CreateStore(identity(kLanes), acc);
      b_.CreateStore(identity(1), scalar_acc_);
      emitNest(b_, inner, 0, in_offset, i64(0), [&](llvm::Value* run_offset, llvm::Value*) {
        if (unit != nullptr && unit->isOne()) {
          emitUnitRun(run_offset, run.extent);
        } else {
          ir::emitIfElse(
              b_, isOne(run.in_stride), [&] { emitUnitRun(run_offset, run.extent); },
              [&] { emitStridedRun(run_offset, run.extent, run.in_stride); });
        }
      });
      llvm::Value* vector = b_.CreateLoad(accType(kLanes), vector_acc_[0]);
      for (int u = 1; u < kUnroll; ++u)
        vector = combine(vector, b_.CreateLoad(accType(kLanes), vector_acc_[static_cast<std::size_t>(u)]));
      llvm::Value* total = combine(horizontal(vector), b_.CreateLoad(accScalar(), scalar_acc_));
      storeResult(total, count, out_offset);
    });
  }

  // Combines run[0..length) (stride 1 from element offset `base`) into the accumulators.
  void emitUnitRun(llvm::Value* base, llvm::Value* length) {
    constexpr std::int64_t kBlock = kUnroll * kLanes;
    llvm::Value* end_block = b_.CreateAnd(length, i64(-kBlock));
    llvm::Value* end_vector = b_.CreateAnd(length, i64(-static_cast<std::int64_t>(kLanes)));
    ir::emitLoop(
        b_, i64(0), end_block, kBlock,
        [&](llvm::Value* j) {
          for (int u = 0; u < kUnroll; ++u) {
            llvm::AllocaInst* acc = vector_acc_[static_cast<std::size_t>(u)];
            llvm::Value* offset = b_.CreateAdd(base, b_.CreateAdd(j, i64(u * static_cast<std::int64_t>(kLanes))));
            b_.CreateStore(combine(b_.CreateLoad(accType(kLanes), acc), loadAcc(offset, kLanes)), acc);
          }
        },
        "j64", kAsEmitted);
    ir::emitLoop(
        b_, end_block, end_vector, kLanes,
        [&](llvm::Value* j) {
          llvm::AllocaInst* acc = vector_acc_[0];
          b_.CreateStore(combine(b_.CreateLoad(accType(kLanes), acc), loadAcc(b_.CreateAdd(base, j), kLanes)), acc);
        },
        "j16", kAsEmitted);
    ir::emitLoop(
        b_, end_vector, length, 1,
        [&](llvm::Value* j) {
          b_.CreateStore(combine(b_.CreateLoad(accScalar(), scalar_acc_), loadAcc(b_.CreateAdd(base, j), 1)),
                         scalar_acc_);
        },
        "j1", kAsEmitted);
  }

  // The same for a run of any stride: gathered 16-lane steps and a scalar tail.
  void emitStridedRun(llvm::Value* base, llvm::Value* length, llvm::Value* stride) {
    llvm::Value* end_vector = b_.CreateAnd(length, i64(-static_cast<std::int64_t>(kLanes)));
    ir::emitLoop(
        b_, i64(0), end_vector, kLanes,
        [&](llvm::Value* j) {
          llvm::AllocaInst* acc = vector_acc_[0];
          llvm::Value* offset = b_.CreateAdd(base, b_.CreateMul(j, stride));
          b_.CreateStore(combine(b_.CreateLoad(accType(kLanes), acc), loadAcc(offset, kLanes, stride)), acc);
        },
        "js16", kAsEmitted);
    ir::emitLoop(
        b_, end_vector, length, 1,
        [&](llvm::Value* j) {
          llvm::Value* offset = b_.CreateAdd(base, b_.CreateMul(j, stride));
          b_.CreateStore(combine(b_.CreateLoad(accScalar(), scalar_acc_), loadAcc(offset, 1)), scalar_acc_);
        },
        "js1", kAsEmitted);
  }

  // Blocks of adjacent lanes along `lane`: body(j, vectors, lanes) for 4 x 16, 16 and 1 lanes
  // (contiguous), or 16 and 1 (gathered).
  void emitLaneBlocks(llvm::Value* extent, bool gathered,
                      const std::function<void(llvm::Value* j, int vectors, unsigned lanes)>& body) {
    llvm::Value* end_vector = b_.CreateAnd(extent, i64(-static_cast<std::int64_t>(kLanes)));
    llvm::Value* begin_vector = i64(0);
    if (!gathered) {
      constexpr std::int64_t kBlock = kUnroll * kLanes;
      begin_vector = b_.CreateAnd(extent, i64(-kBlock));
      ir::emitLoop(
          b_, i64(0), begin_vector, kBlock, [&](llvm::Value* j) { body(j, kUnroll, kLanes); }, "c64", kAsEmitted);
    }
    ir::emitLoop(
        b_, begin_vector, end_vector, kLanes, [&](llvm::Value* j) { body(j, 1, kLanes); }, "c16", kAsEmitted);
    ir::emitLoop(
        b_, end_vector, extent, 1, [&](llvm::Value* j) { body(j, 1, 1); }, "c1", kAsEmitted);
  }

  // Output elements along `lane` reduced together, lane-parallel: for each position of `kept`,
  // blocks of lanes walk all `inner` loops; no horizontal step.
  void emitColumns(const std::vector<LoopAxis>& kept, const std::vector<LoopAxis>& inner, const LoopAxis& lane,
                   llvm::Value* count, bool gathered) {
    std::vector<llvm::AllocaInst*> vector_acc, scalar_acc;
    for (int u = 0; u < kUnroll; ++u) vector_acc.push_back(ir::entryAlloca(b_, accType(kLanes), "cacc"));
    scalar_acc.push_back(ir::entryAlloca(b_, accScalar(), "csacc"));
    llvm::Value* in_gather = gathered ? lane.in_stride : nullptr;
    llvm::Value* out_scatter = gathered ? lane.out_stride : nullptr;
    emitNest(b_, kept, 0, i64(0), i64(0), [&](llvm::Value* in_offset, llvm::Value* out_offset) {
      emitLaneBlocks(lane.extent, gathered, [&](llvm::Value* j, int vectors, unsigned lanes) {
        const std::vector<llvm::AllocaInst*>& accs = lanes == 1 ? scalar_acc : vector_acc;
        auto lane_offset = [&](llvm::Value* base, llvm::Value* stride, int u) {
          return b_.CreateAdd(base, b_.CreateMul(b_.CreateAdd(j, i64(u * static_cast<std::int64_t>(lanes))), stride));
        };
        for (int u = 0; u < vectors; ++u) b_.CreateStore(identity(lanes), accs[static_cast<std::size_t>(u)]);
        emitNest(b_, inner, 0, in_offset, i64(0), [&](llvm::Value* offset, llvm::Value*) {
          for (int u = 0; u < vectors; ++u) {
            llvm::AllocaInst* acc = accs[static_cast<std::size_t>(u)];
            llvm::Value* at = lane_offset(offset, lane.in_stride, u);
            b_.CreateStore(combine(b_.CreateLoad(accType(lanes), acc), loadAcc(at, lanes, in_gather)), acc);
          }
        });
        for (int u = 0; u < vectors; ++u) {
          storeResult(b_.CreateLoad(accType(lanes), accs[static_cast<std::size_t>(u)]), count,
                      lane_offset(out_offset, lane.out_stride, u), out_scatter);
        }
      });
    });
  }

  // ---- softmax / log_softmax ----

  // float32 softmax keeps exp(x - max) in the output between passes 2 and 3 (like the
  // reference's buffer) when the output is written contiguously; otherwise (16-bit outputs
  // would round it, scattered ones cost more than exp) it is recomputed.
  bool keepsExp(bool gathered) const { return kind_ == Kind::Softmax && dtype_ == DType::Float32 && !gathered; }

  llvm::Value* maximum(llvm::Value* a, llvm::Value* v) {
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a, v);
  }
  llvm::Value* sumAdd(llvm::Value* a, llvm::Value* v) { return withReassoc(b_.CreateFAdd(a, v)); }
  llvm::Value* toDouble(llvm::Value* v) { return b_.CreateFPExt(v, ir::withLanes(b_.getDoubleTy(), lanesOf(v))); }
  llvm::Value* toFloat(llvm::Value* v) { return b_.CreateFPTrunc(v, ir::withLanes(b_.getFloatTy(), lanesOf(v))); }

  // Pass 3 for one element group: y = e * scale (softmax) or x - shift (log_softmax), in double.
  llvm::Value* finalValue(llvm::Value* x, llvm::Value* out_offset, bool keeps, llvm::Value* max, llvm::Value* factor) {
    if (kind_ == Kind::LogSoftmax) return toFloat(b_.CreateFSub(toDouble(x), factor));
    llvm::Value* e = keeps ? loadLanes(out_, out_offset, lanesOf(x), nullptr) : ir::expF(b_, b_.CreateFSub(x, max));
    return toFloat(b_.CreateFMul(toDouble(e), factor));
  }

  // scale = 1 / sum (softmax) or shift = max + log(sum) (log_softmax), in double.
  llvm::Value* factorOf(llvm::Value* max, llvm::Value* sum) {
    const unsigned lanes = lanesOf(sum);
    if (kind_ == Kind::Softmax)
      return b_.CreateFDiv(splat(b_, lanes, llvm::ConstantFP::get(b_.getDoubleTy(), 1.0)), sum);
    llvm::Value* log_sum = b_.CreateUnaryIntrinsic(llvm::Intrinsic::log, sum);
    return b_.CreateFAdd(toDouble(max), log_sum);
  }

  // One row per position of `outer`, along `along` (extent, input step, output step): max
  // pass, exp-sum pass, final pass, each with <16 x float> steps (2 x 16 for the first two when
  // contiguous, loads gathered and stores scattered when `gathered`) and a scalar tail.
  void emitSoftmaxRows(const std::vector<LoopAxis>& outer, const LoopAxis& along, bool gathered) {
    llvm::Type* fvec = ir::withLanes(b_.getFloatTy(), kLanes);
    llvm::Type* dvec = ir::withLanes(b_.getDoubleTy(), kLanes);
    llvm::AllocaInst* vmax[2] = {ir::entryAlloca(b_, fvec, "vmax0"), ir::entryAlloca(b_, fvec, "vmax1")};
    llvm::AllocaInst* smax = ir::entryAlloca(b_, b_.getFloatTy(), "smax");
    llvm::AllocaInst* vsum[2] = {ir::entryAlloca(b_, dvec, "vsum0"), ir::entryAlloca(b_, dvec, "vsum1")};
    llvm::AllocaInst* ssum = ir::entryAlloca(b_, b_.getDoubleTy(), "ssum");
    llvm::Constant* neg_inf = llvm::ConstantFP::getInfinity(b_.getFloatTy(), true);
    llvm::Constant* zero = llvm::ConstantFP::get(b_.getDoubleTy(), 0.0);
    llvm::Value* n = along.extent;
    llvm::Value* in_gather = gathered ? along.in_stride : nullptr;
    llvm::Value* out_scatter = gathered ? along.out_stride : nullptr;
    const bool keeps = keepsExp(gathered);
    emitNest(b_, outer, 0, i64(0), i64(0), [&](llvm::Value* in_base, llvm::Value* out_base) {
      auto in_at = [&](llvm::Value* j) { return b_.CreateAdd(in_base, b_.CreateMul(j, along.in_stride)); };
      auto out_at = [&](llvm::Value* j) { return b_.CreateAdd(out_base, b_.CreateMul(j, along.out_stride)); };
      auto load = [&](llvm::Value* j, unsigned lanes) { return loadLanes(in_, in_at(j), lanes, in_gather); };
      llvm::Value* end_2v = gathered ? i64(0) : b_.CreateAnd(n, i64(-2 * static_cast<std::int64_t>(kLanes)));
      llvm::Value* end_v = b_.CreateAnd(n, i64(-static_cast<std::int64_t>(kLanes)));
      // Pass 1: max.
      b_.CreateStore(fence(b_, splat(b_, kLanes, neg_inf)), vmax[0]);
      b_.CreateStore(fence(b_, splat(b_, kLanes, neg_inf)), vmax[1]);
      b_.CreateStore(fence(b_, neg_inf), smax);
      if (!gathered) {
        ir::emitLoop(
            b_, i64(0), end_2v, 2 * kLanes,
            [&](llvm::Value* j) {
              for (int u = 0; u < 2; ++u) {
                llvm::Value* jj = b_.CreateAdd(j, i64(u * static_cast<std::int64_t>(kLanes)));
                b_.CreateStore(maximum(b_.CreateLoad(fvec, vmax[u]), load(jj, kLanes)), vmax[u]);
              }
            },
            "m32", kAsEmitted);
      }
      ir::emitLoop(
          b_, end_2v, end_v, kLanes,
          [&](llvm::Value* j) { b_.CreateStore(maximum(b_.CreateLoad(fvec, vmax[0]), load(j, kLanes)), vmax[0]); },
          "m16", kAsEmitted);
      ir::emitLoop(
          b_, end_v, n, 1,
          [&](llvm::Value* j) { b_.CreateStore(maximum(b_.CreateLoad(b_.getFloatTy(), smax), load(j, 1)), smax); },
          "m1", kAsEmitted);
      llvm::Value* max =
          maximum(b_.CreateFPMaximumReduce(maximum(b_.CreateLoad(fvec, vmax[0]), b_.CreateLoad(fvec, vmax[1]))),
                  b_.CreateLoad(b_.getFloatTy(), smax));
      // Pass 2: sum of exp(x - max).
      llvm::Value* max_v = splat(b_, kLanes, max);
      b_.CreateStore(splat(b_, kLanes, zero), vsum[0]);
      b_.CreateStore(splat(b_, kLanes, zero), vsum[1]);
      b_.CreateStore(zero, ssum);
      auto exp_step = [&](llvm::Value* j, unsigned lanes, llvm::AllocaInst* acc) {
        llvm::Value* e = ir::expF(b_, b_.CreateFSub(load(j, lanes), lanes == 1 ? max : max_v));
        if (keeps) storeLanes(e, out_at(j), nullptr);
        b_.CreateStore(sumAdd(b_.CreateLoad(ir::withLanes(b_.getDoubleTy(), lanes), acc), toDouble(e)), acc);
      };
      // One <16 x float> exp per step: iterations are independent but for the sum, so they
      // overlap anyway (unrolling by 2 measured no faster, and doubles the exp code).
      ir::emitLoop(
          b_, i64(0), end_v, kLanes, [&](llvm::Value* j) { exp_step(j, kLanes, vsum[0]); }, "e16", kAsEmitted);
      ir::emitLoop(
          b_, end_v, n, 1, [&](llvm::Value* j) { exp_step(j, 1, ssum); }, "e1", kAsEmitted);
      llvm::Value* sum =
          sumAdd(withReassoc(b_.CreateFAddReduce(llvm::ConstantFP::get(b_.getDoubleTy(), -0.0),
                                                 sumAdd(b_.CreateLoad(dvec, vsum[0]), b_.CreateLoad(dvec, vsum[1])))),
                 b_.CreateLoad(b_.getDoubleTy(), ssum));
      // Pass 3: scale or shift.
      llvm::Value* factor = factorOf(max, sum);
      llvm::Value* factor_v = splat(b_, kLanes, factor);
      ir::emitLoop(
          b_, i64(0), end_v, kLanes,
          [&](llvm::Value* j) {
            storeLanes(finalValue(load(j, kLanes), out_at(j), keeps, max_v, factor_v), out_at(j), out_scatter);
          },
          "s16", kAsEmitted);
      ir::emitLoop(
          b_, end_v, n, 1,
          [&](llvm::Value* j) {
            storeLanes(finalValue(load(j, 1), out_at(j), keeps, max, factor), out_at(j), nullptr);
          },
          "s1", kAsEmitted);
    });
  }

  // Softmax along `along` for blocks of adjacent lanes along `lane` at once (one per position of
  // `outer`): the three passes walk the axis with per-lane max and sum (all vectors of a 4 x 16
  // block in the same pass); no horizontal step.
  void emitSoftmaxColumns(const std::vector<LoopAxis>& outer, const LoopAxis& lane, const LoopAxis& along,
                          bool gathered) {
    llvm::Value* in_gather = gathered ? lane.in_stride : nullptr;
    llvm::Value* out_scatter = gathered ? lane.out_stride : nullptr;
    const bool keeps = keepsExp(gathered);
    // Accumulators: kUnroll of 16 lanes, and one of 1 lane.
    std::vector<llvm::AllocaInst*> max_acc, sum_acc;
    for (int u = 0; u <= kUnroll; ++u) {
      const unsigned lanes = u == kUnroll ? 1 : kLanes;
      max_acc.push_back(ir::entryAlloca(b_, ir::withLanes(b_.getFloatTy(), lanes), "cmax"));
      sum_acc.push_back(ir::entryAlloca(b_, ir::withLanes(b_.getDoubleTy(), lanes), "csum"));
    }
    emitNest(b_, outer, 0, i64(0), i64(0), [&](llvm::Value* in_offset, llvm::Value* out_offset) {
      emitLaneBlocks(lane.extent, gathered, [&](llvm::Value* j, int vectors, unsigned lanes) {
        llvm::Type* ftype = ir::withLanes(b_.getFloatTy(), lanes);
        llvm::Type* dtype = ir::withLanes(b_.getDoubleTy(), lanes);
        std::vector<llvm::Value*> in_base, out_base;
        std::vector<llvm::AllocaInst*> max_slot, sum_slot;
        for (int u = 0; u < vectors; ++u) {
          llvm::Value* first_lane = b_.CreateAdd(j, i64(u * static_cast<std::int64_t>(lanes)));
          in_base.push_back(b_.CreateAdd(in_offset, b_.CreateMul(first_lane, lane.in_stride)));
          out_base.push_back(b_.CreateAdd(out_offset, b_.CreateMul(first_lane, lane.out_stride)));
          const auto slot = static_cast<std::size_t>(lanes == 1 ? kUnroll : u);
          max_slot.push_back(max_acc[slot]);
          sum_slot.push_back(sum_acc[slot]);
        }
        auto in_at = [&](int u, llvm::Value* t) {
          return b_.CreateAdd(in_base[static_cast<std::size_t>(u)], b_.CreateMul(t, along.in_stride));
        };
        auto out_at = [&](int u, llvm::Value* t) {
          return b_.CreateAdd(out_base[static_cast<std::size_t>(u)], b_.CreateMul(t, along.out_stride));
        };
        auto load = [&](int u, llvm::Value* t) { return loadLanes(in_, in_at(u, t), lanes, in_gather); };
        for (int u = 0; u < vectors; ++u) {
          b_.CreateStore(fence(b_, splat(b_, lanes, llvm::ConstantFP::getInfinity(b_.getFloatTy(), true))),
                         max_slot[static_cast<std::size_t>(u)]);
          b_.CreateStore(splat(b_, lanes, llvm::ConstantFP::get(b_.getDoubleTy(), 0.0)),
                         sum_slot[static_cast<std::size_t>(u)]);
        }
        ir::emitLoop(
            b_, i64(0), along.extent, 1,
            [&](llvm::Value* t) {
              for (int u = 0; u < vectors; ++u) {
                llvm::AllocaInst* slot = max_slot[static_cast<std::size_t>(u)];
                b_.CreateStore(maximum(b_.CreateLoad(ftype, slot), load(u, t)), slot);
              }
            },
            "cm", kAsEmitted);
        std::vector<llvm::Value*> max;
        for (int u = 0; u < vectors; ++u) max.push_back(b_.CreateLoad(ftype, max_slot[static_cast<std::size_t>(u)]));
        ir::emitLoop(
            b_, i64(0), along.extent, 1,
            [&](llvm::Value* t) {
              for (int u = 0; u < vectors; ++u) {
                llvm::Value* e = ir::expF(b_, b_.CreateFSub(load(u, t), max[static_cast<std::size_t>(u)]));
                if (keeps) storeLanes(e, out_at(u, t), nullptr);
                llvm::AllocaInst* slot = sum_slot[static_cast<std::size_t>(u)];
                b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(dtype, slot), toDouble(e)), slot);
              }
            },
            "ce", kAsEmitted);
        std::vector<llvm::Value*> factor;
        for (int u = 0; u < vectors; ++u) {
          factor.push_back(
              factorOf(max[static_cast<std::size_t>(u)], b_.CreateLoad(dtype, sum_slot[static_cast<std::size_t>(u)])));
        }
        ir::emitLoop(
            b_, i64(0), along.extent, 1,
            [&](llvm::Value* t) {
              for (int u = 0; u < vectors; ++u) {
                const auto i = static_cast<std::size_t>(u);
                storeLanes(finalValue(load(u, t), out_at(u, t), keeps, max[i], factor[i]), out_at(u, t), out_scatter);
              }
            },
            "cs", kAsEmitted);
      });
    });
  }

  Builder& b_;
  Kind kind_;
  const OperandSpec& in_spec_;
  DType dtype_;
  AxisPlan plan_;
  llvm::Value* in_ = nullptr;
  llvm::Value* out_ = nullptr;
  std::vector<llvm::AllocaInst*> vector_acc_;
  llvm::AllocaInst* scalar_acc_ = nullptr;
};

// ---- the family ----

class ReduceFamily final : public KernelFamily, public LlvmKernelEmitter {
 public:
  std::string_view name() const override { return "reduce"; }

  Status supports(const KernelSpec& spec) const override {
    Kind kind = Kind::Sum;
    const std::string_view op = OpRegistry::global().schema(spec.op).name;
    if (!kindFor(spec.op, kind)) return makeError(ErrorCode::Unsupported, "the reduce family does not compile {}", op);
    if (spec.inputs.size() != 1 || !spec.inputs[0].is_tensor) {
      return makeError(ErrorCode::Unsupported, "{} kernels take one tensor input", op);
    }
    const OperandSpec& in = spec.inputs[0];
    if (!isComputeFloat(in.dtype)) {
      return makeError(ErrorCode::Unsupported,
                       "{} kernels are compiled for float32/float16/bfloat16 only; {} stays interpreted", op,
                       dtypeName(in.dtype));
    }
    if (in.rank < 0 || in.rank > kMaxRank)
      return makeError(ErrorCode::Unsupported, "{}: rank {} is out of range", op, in.rank);
    auto plan = planAxes(kind, op, spec, in.rank);
    if (!plan) return plan.status();
    return Status::ok();
  }

  Status outputs(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                 std::span<Shape> shapes) const override {
    Kind kind = Kind::Sum;
    const std::string_view op = OpRegistry::global().schema(spec.op).name;
    if (!kindFor(spec.op, kind) || inputs.size() != 1 || inputs[0] == nullptr || !inputs[0]->isTensor() ||
        dtypes.size() != 1) {
      return makeError(ErrorCode::Unsupported, "{}: inputs do not fit the kernel", op);
    }
    const Tensor& x = inputs[0]->tensor();
    SVM_RETURN_IF_ERROR(checkFits(spec.inputs[0], x, op));
    SVM_ASSIGN_OR_RETURN(AxisPlan plan, planAxes(kind, op, spec, x.rank()));
    dtypes[0] = x.dtype();
    if (!isReduction(kind)) {
      shapes[0] = x.shape();
      return Status::ok();
    }
    Shape out;
    std::int64_t count = 1;
    for (int d = 0; d < x.rank(); ++d) {
      if (!plan.reduced[d]) {
        out.push_back(x.dim(d));
      } else {
        count *= x.dim(d);
        if (plan.keepdims) out.push_back(1);
      }
    }
    if ((kind == Kind::Max || kind == Kind::Min) && count == 0 && out.numel() > 0) {
      // The reference reports this error; the kernel declines.
      return makeError(ErrorCode::InvalidArgument, "{} over an empty extent", op);
    }
    shapes[0] = out;
    return Status::ok();
  }

  // Strided kernels (non-contiguous spec): the loop order from the actual strides (see the
  // k*Slot constants), so the innermost loop walks the smallest stride.
  Status prepare(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<const Tensor>,
                 KernelArgs& args) const override {
    const OperandSpec& in = spec.inputs[0];
    if (in.contiguous || in.rank == 0) return Status::ok();
    Kind kind = Kind::Sum;
    kindFor(spec.op, kind);
    const std::string_view op = OpRegistry::global().schema(spec.op).name;
    SVM_ASSIGN_OR_RETURN(AxisPlan plan, planAxes(kind, op, spec, in.rank));
    const Tensor& x = inputs[0]->tensor();
    struct Walk {
      std::int64_t extent, in_stride, out_stride;
    };
    Walk outer[kMaxRank], inner[kMaxRank];  // no allocation per call
    std::size_t num_outer = 0, num_inner = 0;
    std::int64_t out_strides[kMaxRank] = {};
    std::int64_t step = 1;
    for (int d = x.rank() - 1; d >= 0; --d) {
      const bool is_inner = isReduction(kind) ? plan.reduced[d] : d == plan.axis;
      if (isReduction(kind) && is_inner) continue;
      out_strides[d] = step;
      step *= std::max<std::int64_t>(x.dim(d), 1);
    }
    for (int d = 0; d < x.rank(); ++d) {
      const bool is_inner = isReduction(kind) ? plan.reduced[d] : d == plan.axis;
      const Walk walk{x.dim(d), x.stride(d), out_strides[d]};
      if (is_inner) {
        inner[num_inner++] = walk;
      } else {
        outer[num_outer++] = walk;
      }
    }
    if (num_inner == 0) return makeError(ErrorCode::Internal, "{}: nothing to reduce", op);
    // Innermost (last) = smallest stride; extent-1 axes never move, so they go outermost.
    auto key = [](const Walk& w) { return w.extent <= 1 ? INT64_MAX : std::abs(w.in_stride); };
    auto sort = [&](Walk* walks, std::size_t count) {  // stable insertion sort, largest key first
      for (std::size_t i = 1; i < count; ++i) {
        for (std::size_t j = i; j > 0 && key(walks[j - 1]) < key(walks[j]); --j) std::swap(walks[j - 1], walks[j]);
      }
    };
    sort(outer, num_outer);
    sort(inner, num_inner);
    const bool columns = num_outer > 0 && key(outer[num_outer - 1]) < key(inner[num_inner - 1]);
    for (std::size_t i = 0; i < num_outer; ++i) {
      args.shape[kOuterSlot][i] = outer[i].extent;
      args.strides[kOuterSlot][i] = outer[i].in_stride;
      args.strides[kOuterOutSlot][i] = outer[i].out_stride;
    }
    for (std::size_t i = 0; i < num_inner; ++i) {
      args.shape[kInnerSlot][i] = inner[i].extent;
      args.strides[kInnerSlot][i] = inner[i].in_stride;
      args.strides[kInnerOutSlot][i] = inner[i].out_stride;
    }
    args.scalars[kStyleScalar] = columns ? 1 : 0;
    return Status::ok();
  }

  Status emit(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) const override {
    SVM_RETURN_IF_ERROR(supports(spec));
    Kind kind = Kind::Sum;
    kindFor(spec.op, kind);
    const std::string_view op = OpRegistry::global().schema(spec.op).name;
    SVM_ASSIGN_OR_RETURN(AxisPlan plan, planAxes(kind, op, spec, spec.inputs[0].rank));
    Builder b(module.getContext());
    llvm::Function* function = ir::beginKernel(module, symbol, b);
    ReduceEmitter emitter(b, kind, spec, plan);
    emitter.emit(function->getArg(0));
    return Status::ok();
  }

  // e.g. "sum_f32_dynx7x17_ax12_keep", "softmax_bf16_dynx1000_ax1", "max_f16_5x5_all_strided".
  std::string symbolStem(const KernelSpec& spec) const override {
    Kind kind = Kind::Sum;
    if (!kindFor(spec.op, kind) || spec.inputs.size() != 1) return KernelFamily::symbolStem(spec);
    const std::string_view op = OpRegistry::global().schema(spec.op).name;
    const OperandSpec& in = spec.inputs[0];
    std::string stem = fmt::format("{}_{}_", op, dtypeShortName(in.dtype));
    if (in.rank == 0) stem += "scalar";
    for (int d = 0; d < in.rank; ++d) {
      stem += (d ? "x" : "") + (in.dims[d].isStatic() ? std::to_string(in.dims[d].size) : std::string("dyn"));
    }
    auto plan = planAxes(kind, op, spec, in.rank);
    if (plan) {
      if (isReduction(kind)) {
        bool all = true;
        std::string axes;
        for (int d = 0; d < in.rank; ++d) {
          all = all && plan->reduced[d];
          if (plan->reduced[d]) axes += std::to_string(d);
        }
        stem += all ? "_all" : "_ax" + axes;
        if (plan->keepdims) stem += "_keep";
      } else {
        stem += fmt::format("_ax{}", plan->axis);
      }
    }
    if (!in.contiguous) stem += "_strided";
    return stem;
  }

 private:
  // The actual input matches the spec (dtype, rank, static dims, contiguity).
  static Status checkFits(const OperandSpec& spec, const Tensor& x, std::string_view op) {
    bool fits = x.dtype() == spec.dtype && x.rank() == spec.rank && (!spec.contiguous || x.isContiguous());
    for (int d = 0; fits && d < x.rank(); ++d) {
      fits = !spec.dims[d].isStatic() || spec.dims[d].size == x.dim(d);
    }
    if (!fits)
      return makeError(ErrorCode::Unsupported, "{}: input {} does not fit the kernel's spec {}", op, x.describe(),
                       spec.toString());
    return Status::ok();
  }
};

}  // namespace

const KernelFamily* reduceFamily(OpId op) {
  static const ReduceFamily family;
  Kind kind = Kind::Sum;
  return kindFor(op, kind) ? &family : nullptr;
}

}  // namespace shapevm::jit
