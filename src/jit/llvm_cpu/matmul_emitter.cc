// SPDX-License-Identifier: Apache-2.0
// The matmul family's IR (see codegen_matmul.cc for the loop nest, the packed layouts and the
// invariants): the part function's tiles, packers, dot-product path and epilogues, and the
// exported entry that runs it on the task runner.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>

#include "jit/fusion.h"
#include "jit/llvm_cpu/codegen_math.h"
#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/engine.h"
#include "jit/llvm_cpu/library_onednn.h"
#include "jit/llvm_cpu/matmul_plan.h"
#include "ops/kernel_util.h"

namespace shapevm::jit::matmul {
namespace {

// Every loop is left as emitted: vectorized by hand, or a short tail / strided walk where extra
// copies only cost compile time.
constexpr ir::LoopHints kAsEmitted = ir::LoopHints::asEmitted();

// ---- IR ----

class MatmulEmitter {
 public:
  MatmulEmitter(Builder& b, const KernelSpec& spec, DType out_dtype, bool strided_c)
      : b_(b),
        spec_(spec),
        a_spec_(spec.inputs[0]),
        b_spec_(spec.inputs[1]),
        out_dtype_(out_dtype),
        dims_(staticDims(spec)),
        plan_(resolvePlan(spec)),
        packable_(packableB(spec, plan_)),
        gate_(gateEpilogue(spec)),
        // Every task's share, N block and panel is whole NR columns / MR rows when the static N /
        // M is a multiple of NR / MR (shares and blocks are whole panels and tiles, see emitPart).
        cols_whole_(dims_.n >= 0 && dims_.n % plan_.nr() == 0),
        rows_whole_(dims_.m >= 0 && dims_.m % plan_.mr == 0),
        one_k_block_(dims_.k >= 0 && dims_.k <= plan_.kc),
        strided_c_(strided_c) {}

  // `part` is void(ptr args, i64 task, i64 tasks, ptr scratch).
  void emitPart(llvm::Function* part) {
    llvm::Value* args_ptr = part->getArg(0);
    llvm::Value* task = part->getArg(1);
    llvm::Value* tasks = part->getArg(2);
    llvm::Value* scratch = part->getArg(3);
    ir::ArgsView args(b_, args_ptr);
    const int sa = slotA(spec_), sb = slotB(spec_);
    a_ = args.data(0);
    b_ptr_ = args.data(1);
    pack_b_panel_fn_ = args.data(sb);
    c_ = args.data(static_cast<int>(spec_.inputs.size()));
    auto known = [&](std::int64_t value, int slot, int axis) { return value >= 0 ? i64(value) : args.dim(slot, axis); };
    m_ = known(dims_.m, sa, 2);
    k_ = known(dims_.k, sa, 3);
    n_ = known(dims_.n, sb, 3);
    c_ld_ = strided_c_ ? args.stride(static_cast<int>(spec_.inputs.size()), 2) : n_;
    llvm::Value* batch0 = args.dim(sa, 0);
    llvm::Value* batch1 = args.dim(sa, 1);
    llvm::Value* a_batch0 = args.stride(sa, 0);
    llvm::Value* a_batch1 = args.stride(sa, 1);
    llvm::Value* b_batch0 = args.stride(sb, 0);
    llvm::Value* b_batch1 = args.stride(sb, 1);
    std::tie(a_row_, a_col_) = matrixStrides(args, a_spec_, sa, k_, /*is_left=*/true);
    std::tie(b_row_, b_col_) = matrixStrides(args, b_spec_, sb, n_, /*is_left=*/false);
    for (const EpilogueStep& step : spec_.epilogue) {
      if (step.operand < 0) continue;
      Extra extra;
      extra.dtype = spec_.inputs[static_cast<std::size_t>(step.operand)].dtype;
      extra.data = args.data(step.operand);
      for (int d = 0; d < 3; ++d) extra.strides[d] = args.stride(step.operand, d);
      extra.along_n = extraAlongN(spec_, spec_.inputs[static_cast<std::size_t>(step.operand)]);
      extra.n_stride = extra.along_n == AlongN::Broadcast    ? i64(0)
                       : extra.along_n == AlongN::Contiguous ? i64(1)
                                                             : args.stride(step.operand, 3);
      extras_.emplace(step.operand, extra);
    }
    if (gate_) {
      hidden_ = dims_.n / plan_.vectors;
      args_ptr_ = args_ptr;
    }
    bpack_ = scratch;
    apack_ = b_.CreateInBoundsGEP(b_.getFloatTy(), scratch, i64(bPackFloats(plan_)));
    partials_ = b_.CreateInBoundsGEP(b_.getFloatTy(), apack_, i64(static_cast<std::int64_t>(plan_.mc) * plan_.kc));
    llvm::Type* fvec = vecType();
    for (int r = 0; r < plan_.mr; ++r) {
      for (int v = 0; v < plan_.vectors; ++v) acc_.push_back(ir::entryAlloca(b_, fvec, "acc", 64));
    }
    while (acc_.size() < 4) acc_.push_back(ir::entryAlloca(b_, fvec, "acc", 64));
    for (int c = 0; c < 4; ++c) dot_sum_.push_back(ir::entryAlloca(b_, b_.getFloatTy(), "dot", 4));
    if (packable_) {
      llvm::Value* packed = args.scalar(kScalarPackedB);
      packed_b_ = b_.CreateIntToPtr(packed, llvm::PointerType::getUnqual(b_.getContext()));
      n_pad_ = b_.CreateMul(ceilDiv(n_, i64(plan_.nr())), i64(plan_.nr()));
      pack_only_ = b_.CreateICmpNE(args.scalar(kScalarPackOnly), i64(0));
      read_packed_ = b_.CreateAnd(b_.CreateICmpNE(packed, i64(0)), b_.CreateNot(pack_only_));
    }

    // This task's share of the output: whole column panels, or whole row tiles when there are
    // fewer panels than tasks.
    llvm::Value* nr = i64(plan_.nr());
    llvm::Value* mr = i64(plan_.mr);
    llvm::Value* panels = ceilDiv(n_, nr);
    llvm::Value* by_columns = b_.CreateICmpSGE(panels, tasks);
    // A gate epilogue's tiles need every column block: by rows.
    if (gate_) by_columns = b_.getFalse();
    // Only packing B: always by column panels (no two tasks pack the same one).
    if (packable_) by_columns = b_.CreateOr(by_columns, pack_only_);
    llvm::Value* col_share = b_.CreateMul(ceilDiv(panels, tasks), nr);
    llvm::Value* row_share = b_.CreateMul(ceilDiv(ceilDiv(m_, mr), tasks), mr);
    llvm::Value* share = b_.CreateSelect(by_columns, col_share, row_share);
    llvm::Value* extent = b_.CreateSelect(by_columns, n_, m_);
    llvm::Value* lo = smin(b_.CreateMul(task, share), extent);
    llvm::Value* hi = smin(b_.CreateAdd(lo, share), extent);
    n_lo_ = b_.CreateSelect(by_columns, lo, i64(0));
    n_hi_ = b_.CreateSelect(by_columns, hi, n_);
    m_lo_ = b_.CreateSelect(by_columns, i64(0), lo);
    m_hi_ = b_.CreateSelect(by_columns, m_, hi);

    // K = 0 still runs one (empty) K block so C is written with zeros.
    k_loop_end_ = b_.CreateSelect(b_.CreateICmpEQ(k_, i64(0)), i64(1), k_);
    llvm::Value* matrix_size = b_.CreateMul(m_, c_ld_);
    llvm::Value* batches = b_.CreateMul(batch0, batch1);
    if (packable_) batches = b_.CreateSelect(pack_only_, i64(1), batches);  // only packing a 2-D B: once
    // Small M (or N) with both operands contiguous along K (x @ W.T with few rows, matrix @
    // vector): dot products along K instead of packed tiles, which would mostly pack or idle.
    llvm::Value* dot_layout = b_.CreateAnd(b_.CreateICmpEQ(a_col_, i64(1)), b_.CreateICmpEQ(b_row_, i64(1)));
    llvm::Value* use_dot =
        b_.CreateAnd(dot_layout, b_.CreateOr(b_.CreateICmpSLT(m_, mr), b_.CreateICmpSLT(n_, i64(kLanes))));
    // A range whose low ends have MR rows and 16 columns never takes it (the range matmul of the
    // reference cell, M in 256..1024): not emitted.
    auto least = [](const OperandSpec& operand, int axis) {
      if (axis < 0) return std::int64_t{1};  // a vector's missing M or N
      const DimSpec& dim = operand.dims[axis];
      return dim.isStatic() ? dim.size : dim.lo;
    };
    if (least(a_spec_, a_spec_.rank >= 2 ? a_spec_.rank - 2 : -1) >= plan_.mr &&
        least(b_spec_, b_spec_.rank >= 2 ? b_spec_.rank - 1 : -1) >= std::int64_t{kLanes}) {
      use_dot = b_.getFalse();
    }
    if (gate_) use_dot = b_.getFalse();  // the gate epilogue runs on whole tiles only
    auto* never_dot = llvm::dyn_cast<llvm::ConstantInt>(use_dot);
    if (packable_ && (never_dot == nullptr || !never_dot->isZero())) {
      use_dot = b_.CreateAnd(use_dot, b_.CreateNot(pack_only_));  // only packing: the tiled path's loops
    }
    ir::emitLoop(
        b_, i64(0), batches, 1,
        [&](llvm::Value* batch) {
          i0_ = b_.CreateUDiv(batch, batch1);
          i1_ = b_.CreateURem(batch, batch1);
          a_base_ = b_.CreateAdd(b_.CreateMul(i0_, a_batch0), b_.CreateMul(i1_, a_batch1));
          b_base_ = b_.CreateAdd(b_.CreateMul(i0_, b_batch0), b_.CreateMul(i1_, b_batch1));
          c_base_ = b_.CreateMul(batch, matrix_size);
          for (auto& [operand, extra] : extras_) {
            extra.base = b_.CreateAdd(b_.CreateMul(i0_, extra.strides[0]), b_.CreateMul(i1_, extra.strides[1]));
          }
          if (never_dot != nullptr && never_dot->isZero()) {
            emitTiled();
          } else {
            ifElse(
                use_dot, [&] { emitDot(); }, [&] { emitTiled(); });
          }
        },
        "batch", kAsEmitted);
    b_.CreateRetVoid();
  }

 private:
  // An epilogue operand: base pointer, strides along batch0, batch1, M and N (0 or 1).
  struct Extra {
    DType dtype = DType::Float32;
    llvm::Value* data = nullptr;
    llvm::Value* strides[3] = {};
    llvm::Value* n_stride = nullptr;
    llvm::Value* base = nullptr;  // this batch matrix's offset
    AlongN along_n = AlongN::Contiguous;
  };

  llvm::Type* vecType() const { return ir::withLanes(b_.getFloatTy(), kLanes); }
  // ir::emitIfElse, but a constant condition emits only the side it takes: the plan and the
  // static sizes fold many conditions (whole tiles, full panels, a known layout), and code that
  // can never run still costs IR passes and machine code.
  void ifElse(llvm::Value* condition, const std::function<void()>& then_body, const std::function<void()>& else_body) {
    if (auto* known = llvm::dyn_cast<llvm::ConstantInt>(condition)) {
      known->isZero() ? else_body() : then_body();
      return;
    }
    ir::emitIfElse(b_, condition, then_body, else_body);
  }
  // The columns of the panel from `jr` to `end` (<= NR): NR when every panel is whole (a static N
  // that is a multiple of NR; see cols_whole_), so the partial-panel code is not emitted.
  llvm::Value* panelCols(llvm::Value* end, llvm::Value* jr) {
    return cols_whole_ ? i64(plan_.nr()) : smin(i64(plan_.nr()), b_.CreateSub(end, jr));
  }
  llvm::Value* i64(std::int64_t v) { return b_.getInt64(static_cast<std::uint64_t>(v)); }
  llvm::Value* smin(llvm::Value* x, llvm::Value* y) { return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, x, y); }
  llvm::Value* ceilDiv(llvm::Value* x, llvm::Value* y) {
    return b_.CreateUDiv(b_.CreateAdd(x, b_.CreateSub(y, i64(1))), y);
  }
  llvm::Value* floatAt(llvm::Value* base, llvm::Value* index) {
    return b_.CreateInBoundsGEP(b_.getFloatTy(), base, index);
  }
  llvm::Value* cPtr(llvm::Value* offset) { return ir::elementPtr(b_, out_dtype_, c_, offset); }

  // Row and column strides of an operand's matrix: baked in for a contiguous one (rows of
  // `row_length` elements), else read from its canonical view in `slot`. A 1-D operand is a row
  // (left) or a column (right) as in viewOf: the other stride is 0.
  std::pair<llvm::Value*, llvm::Value*> matrixStrides(ir::ArgsView& args, const OperandSpec& spec, int slot,
                                                      llvm::Value* row_length, bool is_left) {
    if (spec.rank == 1) {
      llvm::Value* step = spec.contiguous ? i64(1) : args.stride(slot, is_left ? 3 : 2);
      return is_left ? std::pair{i64(0), step} : std::pair{step, i64(0)};
    }
    if (spec.contiguous) return {row_length, i64(1)};
    return {args.stride(slot, 2), args.stride(slot, 3)};
  }

  // ---- masked access of `lanes` (<= 16) leading lanes ----

  llvm::Constant* iotaI64() {
    std::vector<llvm::Constant*> iota;
    for (unsigned l = 0; l < kLanes; ++l) iota.push_back(b_.getInt64(l));
    return llvm::ConstantVector::get(iota);
  }
  llvm::Value* laneMask(llvm::Value* count) { return b_.CreateICmpSLT(iotaI64(), b_.CreateVectorSplat(kLanes, count)); }
  void maskedStore(DType dtype, llvm::Value* value, llvm::Value* ptr, llvm::Value* mask) {
    if (dtype == DType::BFloat16) {
      value = ir::floatToBf16Bits(b_, value);
    } else if (dtype == DType::Float16) {
      value = b_.CreateFPTrunc(value, ir::withLanes(b_.getHalfTy(), kLanes));
    }
    b_.CreateMaskedStore(value, ptr, llvm::Align(dtypeSize(dtype)), mask);
  }

  // ---- epilogue ----

  // The fused steps on `value` (<16 x float> or float) = C[row, col .. col + lanes), rounded to
  // the output dtype after the matmul and after every step, as the op-by-op reference does.
  // `mask`: the valid lanes of a partial vector (nullptr: all).
  llvm::Value* applyEpilogue(llvm::Value* value, llvm::Value* row, llvm::Value* col, llvm::Value* mask) {
    if (spec_.epilogue.empty()) return value;
    const bool vector = value->getType()->isVectorTy();
    value = ir::roundTo(b_, value, out_dtype_);
    for (const EpilogueStep& step : spec_.epilogue) {
      if (step.operand < 0) {
        value = ir::unaryOp(b_, step.op, out_dtype_, value);
      } else {
        const Extra& extra = extras_.at(step.operand);
        llvm::Value* offset = b_.CreateAdd(extra.base, b_.CreateMul(row, extra.strides[2]));
        llvm::Value* other = nullptr;
        if (!vector) {
          other = ir::loadCompute(
              b_, extra.dtype,
              ir::elementPtr(b_, extra.dtype, extra.data, b_.CreateAdd(offset, b_.CreateMul(col, extra.n_stride))));
        } else if (extra.along_n == AlongN::Broadcast) {
          other = b_.CreateVectorSplat(
              kLanes, ir::loadCompute(b_, extra.dtype, ir::elementPtr(b_, extra.dtype, extra.data, offset)));
        } else {
          llvm::Value* ptr = ir::elementPtr(b_, extra.dtype, extra.data, b_.CreateAdd(offset, col));
          if (extra.along_n == AlongN::Contiguous) {
            other = mask != nullptr ? ir::maskedLoadCompute(b_, extra.dtype, ptr, mask)
                                    : ir::loadCompute(b_, extra.dtype, ptr, kLanes);
          } else {
            // Stride 1: the lanes (no lane past the operand's row is touched); stride 0: one value.
            llvm::Value* contiguous = b_.CreateICmpEQ(extra.n_stride, i64(1));
            llvm::Value* lanes = b_.CreateVectorSplat(kLanes, contiguous);
            if (mask != nullptr) lanes = b_.CreateAnd(lanes, mask);
            llvm::Value* scalar = ir::loadCompute(b_, extra.dtype, ir::elementPtr(b_, extra.dtype, extra.data, offset));
            other = b_.CreateSelect(contiguous, ir::maskedLoadCompute(b_, extra.dtype, ptr, lanes),
                                    b_.CreateVectorSplat(kLanes, scalar));
          }
        }
        value = step.swapped ? ir::binaryOp(b_, step.op, out_dtype_, other, value)
                             : ir::binaryOp(b_, step.op, out_dtype_, value, other);
      }
      value = ir::roundTo(b_, value, out_dtype_);
    }
    return value;
  }

  // ---- the dot-product path ----

  // C[i, j] = dot(A[i, :], B[:, j]) with A's rows and B's columns contiguous: <16 x float>
  // chunks of K for 4 columns at a time (one A load shared by 4 FMAs), horizontal sums, scalar
  // K tail.
  void emitDot() {
    constexpr int kColumns = 4;
    llvm::Type* fvec = vecType();
    llvm::Value* k_vec = b_.CreateAnd(k_, i64(-static_cast<std::int64_t>(kLanes)));
    llvm::Value* n_group = b_.CreateAdd(n_lo_, b_.CreateAnd(b_.CreateSub(n_hi_, n_lo_), i64(-kColumns)));
    const DType a_dtype = a_spec_.dtype;
    const DType b_dtype = b_spec_.dtype;
    ir::emitLoop(
        b_, m_lo_, m_hi_, 1,
        [&](llvm::Value* i) {
          llvm::Value* a_row = b_.CreateAdd(a_base_, b_.CreateMul(i, a_row_));
          llvm::Value* c_row = b_.CreateAdd(c_base_, b_.CreateMul(i, c_ld_));
          auto columns = [&](llvm::Value* j, int count) {
            std::vector<llvm::Value*> b_col;
            for (int c = 0; c < count; ++c)
              b_col.push_back(b_.CreateAdd(b_base_, b_.CreateMul(b_.CreateAdd(j, i64(c)), b_col_)));
            for (int c = 0; c < count; ++c)
              b_.CreateStore(llvm::Constant::getNullValue(fvec), acc_[static_cast<std::size_t>(c)]);
            ir::emitLoop(
                b_, i64(0), k_vec, kLanes,
                [&](llvm::Value* p) {
                  llvm::Value* a =
                      ir::loadCompute(b_, a_dtype, ir::elementPtr(b_, a_dtype, a_, b_.CreateAdd(a_row, p)), kLanes);
                  for (int c = 0; c < count; ++c) {
                    llvm::AllocaInst* acc = acc_[static_cast<std::size_t>(c)];
                    llvm::Value* x = ir::loadCompute(
                        b_, b_dtype,
                        ir::elementPtr(b_, b_dtype, b_ptr_, b_.CreateAdd(b_col[static_cast<std::size_t>(c)], p)),
                        kLanes);
                    b_.CreateStore(
                        b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {fvec}, {a, x, b_.CreateLoad(fvec, acc)}), acc);
                  }
                },
                "dk", kAsEmitted);
            for (int c = 0; c < count; ++c) {
              auto* sum = b_.CreateFAddReduce(llvm::ConstantFP::get(b_.getFloatTy(), -0.0),
                                              b_.CreateLoad(fvec, acc_[static_cast<std::size_t>(c)]));
              sum->setHasAllowReassoc(true);
              llvm::AllocaInst* scalar = dot_sum_[static_cast<std::size_t>(c)];
              b_.CreateStore(sum, scalar);
              ir::emitLoop(
                  b_, k_vec, k_, 1,
                  [&](llvm::Value* p) {
                    llvm::Value* a =
                        ir::loadCompute(b_, a_dtype, ir::elementPtr(b_, a_dtype, a_, b_.CreateAdd(a_row, p)));
                    llvm::Value* x = ir::loadCompute(
                        b_, b_dtype,
                        ir::elementPtr(b_, b_dtype, b_ptr_, b_.CreateAdd(b_col[static_cast<std::size_t>(c)], p)));
                    b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {b_.getFloatTy()},
                                                      {a, x, b_.CreateLoad(b_.getFloatTy(), scalar)}),
                                   scalar);
                  },
                  "dt", kAsEmitted);
              llvm::Value* col = b_.CreateAdd(j, i64(c));
              llvm::Value* value = applyEpilogue(b_.CreateLoad(b_.getFloatTy(), scalar), i, col, nullptr);
              ir::storeCompute(b_, out_dtype_, value, cPtr(b_.CreateAdd(c_row, col)));
            }
          };
          ir::emitLoop(
              b_, n_lo_, n_group, kColumns, [&](llvm::Value* j) { columns(j, kColumns); }, "dj", kAsEmitted);
          ir::emitLoop(
              b_, n_group, n_hi_, 1, [&](llvm::Value* j) { columns(j, 1); }, "dj1", kAsEmitted);
        },
        "di", kAsEmitted);
  }

  // ---- the tiled path ----

  void emitTiled() {
    const std::int64_t nr = plan_.nr();
    // Reading B in place needs no N blocks: one block spans the task's columns.
    const std::int64_t nc = plan_.direct_b ? std::int64_t{1} << 40 : plan_.nc;
    ir::emitLoop(
        b_, n_lo_, n_hi_, nc,
        [&](llvm::Value* jc) {
          llvm::Value* jc_end = smin(b_.CreateAdd(jc, i64(nc)), n_hi_);
          ir::emitLoop(
              b_, i64(0), k_loop_end_, plan_.kc,
              [&](llvm::Value* pc) {
                llvm::Value* kc = smin(i64(plan_.kc), b_.CreateSub(k_, pc));
                // A static K within one block: every block is the first and the last, so the
                // tiles carry neither C's reload nor a second store without the epilogue.
                llvm::Value* first = one_k_block_ ? b_.getTrue() : b_.CreateICmpEQ(pc, i64(0));
                llvm::Value* last = one_k_block_ ? b_.getTrue() : b_.CreateICmpSGE(b_.CreateAdd(pc, i64(plan_.kc)), k_);
                llvm::Value* b_block = b_.CreateAdd(b_base_, b_.CreateMul(pc, b_row_));
                llvm::Value* tail_panel = nullptr;
                llvm::Value* fly_block = nullptr;  // i1: full panels are packed by their first tile
                if (plan_.direct_b) {
                  // Only a partial last panel is packed (its columns end before NR).
                  llvm::Value* width = b_.CreateSub(jc_end, jc);
                  tail_panel = b_.CreateAdd(jc, b_.CreateSub(width, b_.CreateURem(width, i64(nr))));
                  ifElse(
                      b_.CreateICmpSLT(tail_panel, jc_end),
                      [&] {
                        emitPackBPanel(b_.CreateAdd(b_block, b_.CreateMul(tail_panel, b_col_)), kc,
                                       b_.CreateSub(jc_end, tail_panel), bpack_);
                      },
                      [] {});
                } else {
                  // Into the scratch, or (only packing) into the caller's buffer; nothing when B
                  // came packed. Full panels of a float32 B with contiguous rows are packed by
                  // the first tile that reads them instead (fly_block), when A is read in place
                  // and there is a whole tile: one pass over B's block instead of a copy pass
                  // before the tiles. Only for a B whose rows are known contiguous: a strided spec
                  // (x @ W.T's B) would carry a second copy of the micro-kernel for a layout it
                  // rarely has, ~1/3 of its code (BENCHMARKS.md, "Cold compile cost, round 4").
                  if (!plan_.direct_b && plan_.mc == 0 && b_spec_.dtype == DType::Float32 && !gate_ &&
                      llvm::isa<llvm::ConstantInt>(b_col_)) {
                    fly_block = b_.CreateAnd(b_.CreateICmpEQ(b_col_, i64(1)),
                                             b_.CreateICmpSGE(b_.CreateSub(m_hi_, m_lo_), i64(plan_.mr)));
                    if (packable_)
                      fly_block = b_.CreateAnd(fly_block, b_.CreateNot(b_.CreateOr(read_packed_, pack_only_)));
                  }
                  ir::emitLoop(
                      b_, jc, packable_ ? b_.CreateSelect(read_packed_, jc, jc_end) : jc_end, nr,
                      [&](llvm::Value* jr) {
                        llvm::Value* cols = panelCols(jc_end, jr);
                        llvm::Value* dst = panelPtr(bpack_, b_.CreateSub(jr, jc), kc, nr);
                        if (packable_) dst = b_.CreateSelect(pack_only_, packedPanel(pc, jr, kc), dst);
                        auto pack = [&] {
                          emitPackBPanel(b_.CreateAdd(b_block, b_.CreateMul(jr, b_col_)), kc, cols, dst);
                        };
                        if (fly_block == nullptr) {
                          pack();
                        } else {
                          ifElse(
                              b_.CreateAnd(fly_block, b_.CreateICmpEQ(cols, i64(nr))), [] {}, pack);
                        }
                      },
                      "pb", kAsEmitted);
                }
                // Packed B: the tiles prefetch the rows of the block packed next (the next K block
                // of these columns, else the first of the next columns), one row per k step, so
                // packing finds it in cache instead of waiting on memory row by row; B that came
                // packed: the rows of that block's first panel there (NR floats apart).
                llvm::Value* next_block = nullptr;
                llvm::Value* next_row = b_row_;
                if (!plan_.direct_b && plan_.prefetch > 0) {
                  llvm::Value* more_k = b_.CreateICmpSLT(b_.CreateAdd(pc, i64(plan_.kc)), k_);
                  llvm::Value* next = b_.CreateSelect(
                      more_k,
                      b_.CreateAdd(b_block,
                                   b_.CreateAdd(b_.CreateMul(i64(plan_.kc), b_row_), b_.CreateMul(jc, b_col_))),
                      b_.CreateAdd(b_base_, b_.CreateMul(jc_end, b_col_)));
                  next_block = b_.CreateGEP(b_.getFloatTy(), b_ptr_, next);
                  if (packable_) {
                    llvm::Value* next_pc = b_.CreateAdd(pc, i64(plan_.kc));
                    llvm::Value* next_packed = b_.CreateSelect(
                        more_k, packedOffset(next_pc, jc, smin(i64(plan_.kc), b_.CreateSub(k_, next_pc))),
                        packedOffset(i64(0), jc_end, smin(i64(plan_.kc), k_)));
                    next_block = b_.CreateSelect(read_packed_, b_.CreateGEP(b_.getFloatTy(), packed_b_, next_packed),
                                                 next_block);
                    next_row = b_.CreateSelect(read_packed_, i64(nr), b_row_);
                  }
                }
                // The packed block the tiles read: the scratch, or its place in the B that came
                // packed (its panels there are contiguous too, from column jc on).
                llvm::Value* b_packed_block = bpack_;
                if (packable_) b_packed_block = b_.CreateSelect(read_packed_, packedPanel(pc, jc, kc), bpack_);
                auto rowBlock = [&](llvm::Value* ic, llvm::Value* ic_end) {
                  if (plan_.mc > 0) {
                    ir::emitLoop(
                        b_, ic, ic_end, plan_.mr,
                        [&](llvm::Value* ir_) {
                          emitPackAPanel(pc, ir_, smin(i64(plan_.mr), b_.CreateSub(ic_end, ir_)), kc,
                                         panelPtr(apack_, b_.CreateSub(ir_, ic), kc, plan_.mr));
                        },
                        "pa", kAsEmitted);
                  }
                  // Gate epilogue: the tiles run over H (16 columns of each block per tile).
                  ir::emitLoop(
                      b_, gate_ ? i64(0) : jc, gate_ ? i64(hidden_) : jc_end, gate_ ? std::int64_t{kLanes} : nr,
                      [&](llvm::Value* jr) {
                        llvm::Value* cols = gate_ ? i64(nr) : panelCols(jc_end, jr);
                        // One tile of MR rows from ir_, or of one row.
                        auto tile = [&](bool direct, llvm::Value* ir_, llvm::Value* rows, bool one_row,
                                        bool fly = false) {
                          TileArgs t;
                          t.row = ir_;
                          t.col = jr;
                          t.block_col = jc;
                          t.rows = rows;
                          t.tile_rows = one_row ? 1 : plan_.mr;
                          t.cols = cols;
                          t.kc = kc;
                          t.pc = pc;
                          t.first = first;
                          t.last = last;
                          t.direct_b = direct || fly;
                          if (direct || fly) {
                            t.b_src = floatAt(b_ptr_, b_.CreateAdd(b_block, jr));
                            if (fly) t.pack_dst = panelPtr(bpack_, b_.CreateSub(jr, jc), kc, nr);
                          } else if (plan_.direct_b) {
                            t.b_src = bpack_;
                          } else if (gate_) {
                            // Column v * H + jr: in the panel holding it (one block spans every column).
                            for (int v = 0; v < plan_.vectors; ++v) {
                              llvm::Value* col = b_.CreateAdd(jr, i64(v * hidden_));
                              llvm::Value* within = b_.CreateURem(col, i64(nr));
                              t.b_vectors.push_back(
                                  floatAt(panelPtr(b_packed_block, b_.CreateSub(b_.CreateSub(col, within), jc), kc, nr),
                                          within));
                            }
                          } else {
                            t.b_src = panelPtr(b_packed_block, b_.CreateSub(jr, jc), kc, nr);
                          }
                          if (plan_.mc > 0) {
                            // The packed A panel holding row ir_ (p * MR + r), at ir_'s place in it.
                            llvm::Value* offset = b_.CreateSub(ir_, ic);
                            llvm::Value* within = b_.CreateURem(offset, i64(plan_.mr));
                            t.a_src = floatAt(panelPtr(apack_, b_.CreateSub(offset, within), kc, plan_.mr), within);
                          }
                          if ((!direct || fly) && !plan_.direct_b && plan_.prefetch > 0) {
                            t.pf_src = next_block;
                            t.pf_row = next_row;
                            llvm::Value* index = b_.CreateUDiv(b_.CreateSub(ir_, ic), i64(plan_.mr));
                            llvm::Value* tiles_here =
                                b_.CreateUDiv(b_.CreateAdd(b_.CreateSub(ic_end, ic), i64(plan_.mr - 1)), i64(plan_.mr));
                            // See prefetchNext in emitTile: a row every 2^shift steps from row first.
                            const int shift = plan_.vectors >= 4 ? 2 : plan_.vectors >= 2 ? 1 : 0;
                            llvm::Value* few = b_.CreateICmpULT(tiles_here, i64(plan_.vectors));
                            t.pf_shift = b_.CreateSelect(few, i64(0), i64(shift));
                            t.pf_first =
                                b_.CreateSelect(few, i64(0),
                                                b_.CreateMul(b_.CreateURem(index, i64(plan_.vectors)),
                                                             i64((plan_.kc + plan_.vectors - 1) / plan_.vectors)));
                          }
                          emitTile(t);
                        };
                        // Whole MR-row tiles (no row guards), then the rows left as 1-row tiles:
                        // an MR-row tile would spend MR rows of FMAs on them (M = 1 with 4 x 64
                        // tiles ran 4x the FMAs it needed). A third, partial MR-row variant would
                        // be faster for MR / 2 or more rows left, but cost 40% more codegen time.
                        auto tiles = [&](bool direct) {
                          llvm::Value* whole_end =
                              rows_whole_
                                  ? ic_end
                                  : b_.CreateSub(ic_end, b_.CreateURem(b_.CreateSub(ic_end, ic), i64(plan_.mr)));
                          llvm::Value* start = ic;
                          if (fly_block != nullptr && !direct) {
                            // The panel was not packed: the first tile packs it while it runs.
                            llvm::Value* fly = b_.CreateAnd(fly_block, b_.CreateICmpEQ(cols, i64(nr)));
                            ifElse(
                                fly, [&] { tile(false, ic, i64(plan_.mr), false, true); }, [] {});
                            start = b_.CreateSelect(fly, b_.CreateAdd(ic, i64(plan_.mr)), ic);
                          }
                          ir::emitLoop(
                              b_, start, whole_end, plan_.mr,
                              [&](llvm::Value* ir_) { tile(direct, ir_, i64(plan_.mr), false); }, "ir", kAsEmitted);
                          if (plan_.mr == 1 || rows_whole_) return;
                          ir::emitLoop(
                              b_, whole_end, ic_end, 1, [&](llvm::Value* ir_) { tile(direct, ir_, i64(1), true); },
                              "ir1", kAsEmitted);
                        };
                        if (plan_.direct_b) {
                          ifElse(
                              b_.CreateICmpSLT(jr, tail_panel), [&] { tiles(true); }, [&] { tiles(false); });
                        } else {
                          tiles(false);
                        }
                      },
                      "jr", kAsEmitted);
                };
                auto rowBlocks = [&] {
                  if (plan_.mc > 0) {
                    ir::emitLoop(
                        b_, m_lo_, m_hi_, plan_.mc,
                        [&](llvm::Value* ic) { rowBlock(ic, smin(b_.CreateAdd(ic, i64(plan_.mc)), m_hi_)); }, "ic",
                        kAsEmitted);
                  } else {
                    rowBlock(m_lo_, m_hi_);
                  }
                };
                if (packable_) {
                  ifElse(
                      pack_only_, [] {}, rowBlocks);  // only packing: no tiles
                } else {
                  rowBlocks();
                }
              },
              "pc", kAsEmitted);
        },
        "jc", kAsEmitted);
  }

  // Where the panel of the whole packed B at K block `pc` (kc rows) and column `jr` starts (in
  // floats): K blocks before it hold pc full rows of Npad floats, panels before it in its block
  // jr / NR * kc * NR floats.
  llvm::Value* packedOffset(llvm::Value* pc, llvm::Value* jr, llvm::Value* kc) {
    return b_.CreateAdd(b_.CreateMul(pc, n_pad_), b_.CreateMul(jr, kc));
  }
  llvm::Value* packedPanel(llvm::Value* pc, llvm::Value* jr, llvm::Value* kc) {
    return floatAt(packed_b_, packedOffset(pc, jr, kc));
  }

  // Start of panel `index / width` in a packed block whose panels hold kc x width floats.
  llvm::Value* panelPtr(llvm::Value* block, llvm::Value* offset, llvm::Value* kc, std::int64_t width) {
    // offset is a multiple of width: panel q starts at q * kc * width = offset * kc.
    (void)width;
    return floatAt(block, b_.CreateMul(offset, kc));
  }

  // dst[p * NR + j] = B[p, j] (float32) for p < kc, j < cols; 0 for cols <= j < NR. With bf16
  // pairs, slot (p, j) holds pairWord(B column j, p) instead, p < ceil(kc / 2).
  void emitPackBPanel(llvm::Value* src, llvm::Value* kc, llvm::Value* cols, llvm::Value* dst) {
    const bool pairs = plan_.bf16_pairs;
    auto rows = [&] { pairs ? emitPackBPairRows(src, kc, dst) : emitPackBRows(src, kc, dst); };
    auto scalar = [&] { pairs ? emitPackBPairScalar(src, kc, cols, dst) : emitPackBScalar(src, kc, cols, dst); };
    auto columns = [&] {
      const PackerArgs args{b_ptr_, src, kc, cols, dst, b_col_};
      if (pairs) {
        callPacker(&pack_b_pair_columns_, "_pack_b_pair_columns", args,
                   [&](const PackerArgs& a) { emitPackBPairColumns(a); });
      } else {
        callPacker(&pack_b_columns_, "_pack_b_columns", args, [&](const PackerArgs& a) { emitPackBColumns(a); });
      }
    };
    // A contiguous B (columns 1 apart) is K-contiguous only with one column: no code for that.
    auto* column_step = llvm::dyn_cast<llvm::ConstantInt>(b_col_);
    auto* row_step = llvm::dyn_cast<llvm::ConstantInt>(b_row_);
    const bool never_columns =
        (column_step != nullptr && column_step->isOne()) || (row_step != nullptr && !row_step->isOne());
    if (!pairs && b_spec_.dtype == DType::Float32 && !never_columns) {
      // A float32 B whose layout is known only at run time: the compiled packer (PackBPanelFn)
      // prepare() left in B's view slot, for every layout.
      llvm::Type* ptr = b_.getPtrTy();
      llvm::Type* index = b_.getInt64Ty();
      auto* type = llvm::FunctionType::get(b_.getVoidTy(), {ptr, index, index, index, ptr, index, index, index}, false);
      llvm::CallInst* call =
          b_.CreateCall(type, pack_b_panel_fn_, {b_ptr_, src, kc, cols, dst, b_row_, b_col_, i64(plan_.nr())});
      call->addFnAttr(llvm::Attribute::NoUnwind);
      return;
    }
    llvm::Value* full_rows = b_.CreateAnd(b_.CreateICmpEQ(cols, i64(plan_.nr())), b_.CreateICmpEQ(b_col_, i64(1)));
    llvm::Value* k_contiguous = b_.CreateICmpEQ(b_row_, i64(1));
    ifElse(full_rows, rows, [&] {
      if (never_columns) {
        scalar();
      } else {
        ifElse(k_contiguous, columns, scalar);
      }
    });
  }

  // Row-major panel of NR columns: NR/16 vector loads per k.
  void emitPackBRows(llvm::Value* src, llvm::Value* kc, llvm::Value* dst) {
    const std::int64_t nr = plan_.nr();
    const DType dtype = b_spec_.dtype;
    ir::emitLoop(
        b_, i64(0), kc, 1,
        [&](llvm::Value* p) {
          llvm::Value* row = b_.CreateAdd(src, b_.CreateMul(p, b_row_));
          for (int v = 0; v < plan_.vectors; ++v) {
            llvm::Value* x = ir::loadCompute(
                b_, dtype, ir::elementPtr(b_, dtype, b_ptr_, b_.CreateAdd(row, i64(v * kLanes))), kLanes);
            storeAligned(x, floatAt(dst, b_.CreateAdd(b_.CreateMul(p, i64(nr)), i64(v * kLanes))));
          }
        },
        "pk", kAsEmitted);
  }

  // What a packing routine reads and writes: `count` (<= the panel width) rows or columns from
  // element `src` of `data`, `stride` elements apart, each `kc` long and contiguous, into `dst`.
  struct PackerArgs {
    llvm::Value* data;
    llvm::Value* src;
    llvm::Value* kc;
    llvm::Value* count;
    llvm::Value* dst;
    llvm::Value* stride;
  };

  // Calls a packing routine emitted as a function of its own (internal, never inlined; `emit`
  // writes its body on first use into `*function`). Inline, a transpose's shuffle masks were
  // hoisted out of the packing loops and held registers through the tiles: a 6 x 64 tile has no
  // zmm register to spare and spilled (x @ W.T at 256^3: 0.55-0.9x, even with B packed once).
  void callPacker(llvm::Function** function, const char* suffix, const PackerArgs& args,
                  const std::function<void(const PackerArgs&)>& emit) {
    if (*function == nullptr) {
      llvm::Type* ptr = b_.getPtrTy();
      llvm::Type* index = b_.getInt64Ty();
      *function = internalFunction(suffix, {ptr, index, index, index, ptr, index}, [&](llvm::Function* f) {
        f->addParamAttr(0, llvm::Attribute::ReadOnly);
        f->addParamAttr(4, llvm::Attribute::NoAlias);
        emit(PackerArgs{f->getArg(0), f->getArg(1), f->getArg(2), f->getArg(3), f->getArg(4), f->getArg(5)});
      });
    }
    b_.CreateCall(*function, {args.data, args.src, args.kc, args.count, args.dst, args.stride});
  }

  // A `void(params)` function of the kernel's module, named after the kernel + `suffix`, internal
  // and never inlined; `body` writes its entry block (the builder's insert point is restored).
  llvm::Function* internalFunction(const char* suffix, llvm::ArrayRef<llvm::Type*> params,
                                   const std::function<void(llvm::Function*)>& body) {
    llvm::Function* part = b_.GetInsertBlock()->getParent();
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    llvm::Function* f =
        llvm::Function::Create(type, llvm::Function::InternalLinkage, part->getName() + suffix, part->getParent());
    f->addFnAttr(llvm::Attribute::NoUnwind);
    f->addFnAttr(llvm::Attribute::NoInline);
    llvm::IRBuilderBase::InsertPointGuard guard(b_);
    b_.SetInsertPoint(llvm::BasicBlock::Create(b_.getContext(), "entry", f));
    body(f);
    b_.CreateRetVoid();
    return f;
  }

  // The skeleton of the packers for B's columns contiguous along K (x @ W.T: W's rows), args.count
  // of them, per group of 16 columns: `block(group, k0, starts, keep)` for k0 = 0, k_step, ..
  // below k_full packs k_step elements of the 16 columns (loads down the columns and a register
  // transpose), then `tail(group, c, start, in_panel)` the rest of column c; `starts` and `start`
  // clamp columns past the count to the last one (in bounds), `keep`/`in_panel` say which are
  // real. A group wholly past the count gets `rows` zero rows.
  void emitColumnGroups(
      const PackerArgs& args, llvm::Value* k_full, std::int64_t k_step, llvm::Value* rows, llvm::Value* zero,
      const std::function<void(llvm::Value*, llvm::Value*, const std::vector<llvm::Value*>&, llvm::Value*)>& block,
      const std::function<void(llvm::Value*, llvm::Value*, llvm::Value*, llvm::Value*)>& tail) {
    llvm::Value* cols = args.count;
    const std::int64_t nr = plan_.nr();
    ir::emitLoop(
        b_, i64(0), i64(nr), kLanes,
        [&](llvm::Value* j0) {
          llvm::Value* valid = b_.CreateSub(cols, j0);
          llvm::Value* group = floatAt(args.dst, j0);
          ifElse(
              b_.CreateICmpSGT(valid, i64(0)),
              [&] {
                // Where each column starts, as one vector (16 scalar index computations took
                // ~8 ms more to compile).
                llvm::Value* last = b_.CreateSub(cols, i64(1));
                llvm::Value* js = b_.CreateAdd(iotaI64(), b_.CreateVectorSplat(kLanes, j0));
                js = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, js, b_.CreateVectorSplat(kLanes, last));
                llvm::Value* starts = b_.CreateAdd(b_.CreateVectorSplat(kLanes, args.src),
                                                   b_.CreateMul(js, b_.CreateVectorSplat(kLanes, args.stride)));
                std::vector<llvm::Value*> column;
                for (unsigned c = 0; c < kLanes; ++c) column.push_back(b_.CreateExtractElement(starts, c));
                llvm::Value* keep = laneMask(valid);
                ir::emitLoop(
                    b_, i64(0), k_full, k_step, [&](llvm::Value* k0) { block(group, k0, column, keep); }, "pt",
                    kAsEmitted);
                // The rest element by element: rare (a last K block) and cheap to compile (masked
                // loads and a second transpose took ~13 ms more per kernel).
                ir::emitLoop(
                    b_, i64(0), i64(kLanes), 1,
                    [&](llvm::Value* c) {
                      llvm::Value* j = b_.CreateAdd(j0, c);
                      llvm::Value* start = b_.CreateAdd(args.src, b_.CreateMul(smin(j, last), args.stride));
                      tail(group, c, start, b_.CreateICmpSLT(j, cols));
                    },
                    "ptc", kAsEmitted);
              },
              [&] {
                ir::emitLoop(
                    b_, i64(0), rows, 1,
                    [&](llvm::Value* p) { storeAligned(zero, floatAt(group, b_.CreateMul(p, i64(nr)))); }, "ptz",
                    kAsEmitted);
              });
        },
        "ptj", kAsEmitted);
  }

  // float32 panels: per 16 k, 16 vector loads down the columns and a register transpose into 16
  // packed rows, instead of one scalar load and store per element; the last kc % 16 rows element
  // by element.
  void emitPackBColumns(const PackerArgs& args) {
    llvm::Value* kc = args.kc;
    const std::int64_t nr = plan_.nr();
    const DType dtype = b_spec_.dtype;
    llvm::Value* zero = llvm::Constant::getNullValue(vecType());
    llvm::Value* kc_full = b_.CreateAnd(kc, i64(-static_cast<std::int64_t>(kLanes)));
    emitColumnGroups(
        args, kc_full, kLanes, kc, zero,
        [&](llvm::Value* group, llvm::Value* p0, const std::vector<llvm::Value*>& column, llvm::Value* keep) {
          std::vector<llvm::Value*> rows;
          for (llvm::Value* start : column) {
            rows.push_back(
                ir::loadCompute(b_, dtype, ir::elementPtr(b_, dtype, args.data, b_.CreateAdd(start, p0)), kLanes));
          }
          transpose16(rows);
          for (unsigned r = 0; r < kLanes; ++r) {
            storeAligned(b_.CreateSelect(keep, rows[r], zero),
                         floatAt(group, b_.CreateMul(b_.CreateAdd(p0, i64(r)), i64(nr))));
          }
        },
        [&](llvm::Value* group, llvm::Value* c, llvm::Value* start, llvm::Value* in_panel) {
          emitPackLane(group, kc, nr, c, maskedColumn(args.data, dtype, start, in_panel), kc_full);
        });
  }

  // ---- bfloat16 pairs (Plan::bf16_pairs) ----

  llvm::Type* pairVecType() const { return llvm::FixedVectorType::get(b_.getBFloatTy(), 2 * kLanes); }
  llvm::Value* pairsOf(llvm::Value* kc) { return b_.CreateLShr(b_.CreateAdd(kc, i64(1)), i64(1)); }

  // The 32-bit slot of K pair p of a bfloat16 column whose element k is data[base + k * step]:
  // element 2p in the low half, 2p + 1 in the high half (0 when 2p + 1 = kc; never read).
  llvm::Value* pairWord(llvm::Value* data, llvm::Value* base, llvm::Value* step, llvm::Value* p, llvm::Value* kc) {
    auto element = [&](llvm::Value* k) {
      llvm::Value* ptr = ir::elementPtr(b_, DType::BFloat16, data, b_.CreateAdd(base, b_.CreateMul(k, step)));
      return b_.CreateZExt(b_.CreateAlignedLoad(b_.getInt16Ty(), ptr, llvm::Align(2)), b_.getInt32Ty());
    };
    llvm::Value* k = b_.CreateShl(p, i64(1));
    llvm::Value* next = b_.CreateAdd(k, i64(1));
    llvm::Value* has_next = b_.CreateICmpSLT(next, kc);
    llvm::Value* high = b_.CreateSelect(has_next, element(b_.CreateSelect(has_next, next, k)), b_.getInt32(0));
    return b_.CreateOr(element(k), b_.CreateShl(high, 16));
  }

  // Any layout, pair by pair: dst[p * NR + j] = pairWord(B column j, p) for p < ceil(kc / 2),
  // j < cols; 0 for cols <= j < NR. (Full row-major panels: emitPackBPairRows; columns contiguous
  // along K: emitPackBPairColumns.)
  void emitPackBPairScalar(llvm::Value* src, llvm::Value* kc, llvm::Value* cols, llvm::Value* dst) {
    const std::int64_t nr = plan_.nr();
    llvm::Value* pairs = pairsOf(kc);
    ir::emitLoop(
        b_, i64(0), i64(nr), 1,
        [&](llvm::Value* j) {
          llvm::Value* in_panel = b_.CreateICmpSLT(j, cols);
          llvm::Value* column = b_.CreateAdd(src, b_.CreateMul(smin(j, b_.CreateSub(cols, i64(1))), b_col_));
          ir::emitLoop(
              b_, i64(0), pairs, 1,
              [&](llvm::Value* p) {
                llvm::Value* word = b_.CreateSelect(in_panel, pairWord(b_ptr_, column, b_row_, p, kc), b_.getInt32(0));
                b_.CreateAlignedStore(word, floatAt(dst, b_.CreateAdd(b_.CreateMul(p, i64(nr)), j)), llvm::Align(4));
              },
              "pqk", kAsEmitted);
        },
        "pqj", kAsEmitted);
  }

  // Full panel, rows contiguous: per pair, NR/16 vectors of row 2p and of row 2p + 1 (zero past
  // kc) interleaved lane by lane.
  void emitPackBPairRows(llvm::Value* src, llvm::Value* kc, llvm::Value* dst) {
    const std::int64_t nr = plan_.nr();
    llvm::Type* half = llvm::FixedVectorType::get(b_.getInt16Ty(), kLanes);
    std::vector<int> interleave;
    for (unsigned l = 0; l < kLanes; ++l) {
      interleave.push_back(static_cast<int>(l));
      interleave.push_back(static_cast<int>(kLanes + l));
    }
    auto pair = [&](llvm::Value* p, bool last) {
      llvm::Value* row = b_.CreateAdd(src, b_.CreateMul(b_.CreateShl(p, i64(1)), b_row_));
      for (int v = 0; v < plan_.vectors; ++v) {
        auto load = [&](llvm::Value* at) {
          return b_.CreateAlignedLoad(
              half, ir::elementPtr(b_, DType::BFloat16, b_ptr_, b_.CreateAdd(at, i64(v * kLanes))), llvm::Align(2));
        };
        llvm::Value* low = load(row);
        llvm::Value* high =
            last ? static_cast<llvm::Value*>(llvm::Constant::getNullValue(half)) : load(b_.CreateAdd(row, b_row_));
        storeAligned(b_.CreateShuffleVector(low, high, interleave),
                     floatAt(dst, b_.CreateAdd(b_.CreateMul(p, i64(nr)), i64(v * kLanes))));
      }
    };
    llvm::Value* whole = b_.CreateLShr(kc, i64(1));
    ir::emitLoop(
        b_, i64(0), whole, 1, [&](llvm::Value* p) { pair(p, false); }, "pq", kAsEmitted);
    ifElse(
        b_.CreateICmpNE(b_.CreateAnd(kc, i64(1)), i64(0)), [&] { pair(whole, true); }, [] {});
  }

  // Columns contiguous along K (see emitColumnGroups): per 16 columns and 16 pairs, 16 loads of 32
  // bfloat16 down the columns (16 pair slots each) and the 16 x 16 transpose of those slots,
  // which is the packed layout; the pairs past the last whole 16 one slot at a time.
  void emitPackBPairColumns(const PackerArgs& args) {
    const std::int64_t nr = plan_.nr();
    llvm::Value* kc = args.kc;
    llvm::Type* slots = llvm::FixedVectorType::get(b_.getInt32Ty(), kLanes);
    llvm::Value* zero = llvm::Constant::getNullValue(slots);
    llvm::Value* k_full = b_.CreateAnd(kc, i64(-2 * static_cast<std::int64_t>(kLanes)));
    emitColumnGroups(
        args, k_full, 2 * kLanes, pairsOf(kc), zero,
        [&](llvm::Value* group, llvm::Value* k0, const std::vector<llvm::Value*>& column, llvm::Value* keep) {
          std::vector<llvm::Value*> rows;
          for (llvm::Value* start : column) {
            rows.push_back(b_.CreateAlignedLoad(
                slots, ir::elementPtr(b_, DType::BFloat16, args.data, b_.CreateAdd(start, k0)), llvm::Align(2)));
          }
          transpose16(rows);
          llvm::Value* p0 = b_.CreateLShr(k0, i64(1));
          for (unsigned r = 0; r < kLanes; ++r) {
            storeAligned(b_.CreateSelect(keep, rows[r], zero),
                         floatAt(group, b_.CreateMul(b_.CreateAdd(p0, i64(r)), i64(nr))));
          }
        },
        [&](llvm::Value* group, llvm::Value* c, llvm::Value* start, llvm::Value* in_panel) {
          ir::emitLoop(
              b_, b_.CreateLShr(k_full, i64(1)), pairsOf(kc), 1,
              [&](llvm::Value* p) {
                llvm::Value* word =
                    b_.CreateSelect(in_panel, pairWord(args.data, start, i64(1), p, kc), b_.getInt32(0));
                b_.CreateAlignedStore(word, floatAt(group, b_.CreateAdd(b_.CreateMul(p, i64(nr)), c)), llvm::Align(4));
              },
              "pqtk", kAsEmitted);
        });
  }

  // Transposes the 16 x 16 block x[i][l] in place (x[i][l] <- x[l][i]): for h = 8, 4, 2, 1, rows
  // i and i + h (bit h of i clear) swap their off-diagonal h-blocks, which swaps bit h between the
  // row and the lane index; after all four bits every element has moved to (l, i). Each half
  // step is one two-source shufflevector with a constant mask.
  void transpose16(std::vector<llvm::Value*>& x) {
    for (unsigned h = kLanes / 2; h >= 1; h /= 2) {
      std::vector<int> low, high;  // lanes of the new x[i] and x[i + h]; b's lanes are 16 + l
      for (unsigned l = 0; l < kLanes; ++l) {
        const bool upper = (l & h) != 0;
        low.push_back(static_cast<int>(upper ? kLanes + l - h : l));
        high.push_back(static_cast<int>(upper ? kLanes + l : l + h));
      }
      for (unsigned i = 0; i < kLanes; ++i) {
        if ((i & h) != 0) continue;
        llvm::Value* a = x[i];
        llvm::Value* b = x[i + h];
        x[i] = b_.CreateShuffleVector(a, b, low);
        x[i + h] = b_.CreateShuffleVector(a, b, high);
      }
    }
  }

  void storeAligned(llvm::Value* vec, llvm::Value* ptr) {
    llvm::StoreInst* store = b_.CreateStore(vec, ptr);
    store->setAlignment(llvm::Align(64));
  }

  // Any layout: column by column, one element at a time.
  void emitPackBScalar(llvm::Value* src, llvm::Value* kc, llvm::Value* cols, llvm::Value* dst) {
    const std::int64_t nr = plan_.nr();
    const DType dtype = b_spec_.dtype;
    ir::emitLoop(
        b_, i64(0), cols, 1,
        [&](llvm::Value* j) {
          llvm::Value* column = b_.CreateAdd(src, b_.CreateMul(j, b_col_));
          emitPackLane(dst, kc, nr, j, [&](llvm::Value* p) {
            return ir::loadCompute(b_, dtype,
                                   ir::elementPtr(b_, dtype, b_ptr_, b_.CreateAdd(column, b_.CreateMul(p, b_row_))));
          });
        },
        "pj", kAsEmitted);
    ir::emitLoop(
        b_, cols, i64(nr), 1, [&](llvm::Value* j) { emitPackLane(dst, kc, nr, j, zero()); }, "pzj", kAsEmitted);
  }

  // dst[p * width + lane] = value(p) for from <= p < kc: (part of) one column (B) or row (A) of a
  // packed panel, element by element.
  void emitPackLane(llvm::Value* dst, llvm::Value* kc, std::int64_t width, llvm::Value* lane,
                    const std::function<llvm::Value*(llvm::Value*)>& value, llvm::Value* from = nullptr) {
    ir::emitLoop(
        b_, from != nullptr ? from : i64(0), kc, 1,
        [&](llvm::Value* p) {
          b_.CreateStore(value(p), floatAt(dst, b_.CreateAdd(b_.CreateMul(p, i64(width)), lane)));
        },
        "pl", kAsEmitted);
  }
  // p -> data[start + p] as float32 where `in_panel`, else 0 (a lane past the panel's count).
  std::function<llvm::Value*(llvm::Value*)> maskedColumn(llvm::Value* data, DType dtype, llvm::Value* start,
                                                         llvm::Value* in_panel) {
    return [this, data, dtype, start, in_panel](llvm::Value* p) {
      llvm::Value* x = ir::loadCompute(b_, dtype, ir::elementPtr(b_, dtype, data, b_.CreateAdd(start, p)));
      return b_.CreateSelect(in_panel, x, llvm::ConstantFP::get(b_.getFloatTy(), 0.0));
    };
  }
  std::function<llvm::Value*(llvm::Value*)> zero() {
    return [this](llvm::Value*) { return llvm::ConstantFP::get(b_.getFloatTy(), 0.0); };
  }

  // dst[p * MR + r] = A[row + r, pc + p] (float32) for r < rows; 0 for rows <= r < MR.
  void emitPackAPanel(llvm::Value* pc, llvm::Value* row, llvm::Value* rows, llvm::Value* kc, llvm::Value* dst) {
    llvm::Value* src = b_.CreateAdd(a_base_, b_.CreateAdd(b_.CreateMul(row, a_row_), b_.CreateMul(pc, a_col_)));
    auto rowsPacker = [&] {
      callPacker(&pack_a_rows_, "_pack_a_rows", {a_, src, kc, rows, dst, a_row_},
                 [&](const PackerArgs& args) { emitPackARows(args); });
    };
    // A contiguous A has rows contiguous along K: no scalar code to emit.
    llvm::Value* k_contiguous = b_.CreateICmpEQ(a_col_, i64(1));
    auto* always_rows = llvm::dyn_cast<llvm::ConstantInt>(k_contiguous);
    if (always_rows != nullptr && always_rows->isOne()) {
      rowsPacker();
    } else {
      ifElse(k_contiguous, rowsPacker, [&] { emitPackAScalar(src, rows, kc, dst); });
    }
  }

  // A's rows contiguous along K (row-major A), args.count of them: per 16 k, MR vector loads and
  // the 16 x 16 register transpose (rows past MR unused), then 16 stores of MR lanes, each the
  // next MR floats of dst. Rows past the count re-read the last one and are zeroed.
  void emitPackARows(const PackerArgs& args) {
    const unsigned mr = static_cast<unsigned>(plan_.mr);
    const DType dtype = a_spec_.dtype;
    llvm::Value* kc = args.kc;
    llvm::Value* kc_full = b_.CreateAnd(kc, i64(-static_cast<std::int64_t>(kLanes)));
    llvm::Value* last = b_.CreateSub(args.count, i64(1));
    std::vector<llvm::Value*> row_start;
    for (unsigned r = 0; r < mr; ++r) {
      row_start.push_back(b_.CreateAdd(args.src, b_.CreateMul(smin(i64(r), last), args.stride)));
    }
    llvm::Value* keep = laneMask(args.count);
    llvm::Value* tile_lanes = laneMask(i64(mr));
    llvm::Value* zero = llvm::Constant::getNullValue(vecType());
    ir::emitLoop(
        b_, i64(0), kc_full, kLanes,
        [&](llvm::Value* p0) {
          std::vector<llvm::Value*> columns(kLanes, llvm::PoisonValue::get(vecType()));
          for (unsigned r = 0; r < mr; ++r) {
            columns[r] = ir::loadCompute(b_, dtype,
                                         ir::elementPtr(b_, dtype, args.data, b_.CreateAdd(row_start[r], p0)), kLanes);
          }
          transpose16(columns);
          for (unsigned p = 0; p < kLanes; ++p) {
            llvm::Value* ptr = floatAt(args.dst, b_.CreateMul(b_.CreateAdd(p0, i64(p)), i64(mr)));
            b_.CreateMaskedStore(b_.CreateSelect(keep, columns[p], zero), ptr, llvm::Align(4), tile_lanes);
          }
        },
        "pat", kAsEmitted);
    // The last kc % 16 columns element by element (as for B).
    ir::emitLoop(
        b_, i64(0), i64(mr), 1,
        [&](llvm::Value* r) {
          llvm::Value* start = b_.CreateAdd(args.src, b_.CreateMul(smin(r, last), args.stride));
          llvm::Value* in_panel = b_.CreateICmpSLT(r, args.count);
          emitPackLane(args.dst, kc, mr, r, maskedColumn(args.data, dtype, start, in_panel), kc_full);
        },
        "pac", kAsEmitted);
  }

  // Any layout: row by row, one element at a time.
  void emitPackAScalar(llvm::Value* src, llvm::Value* rows, llvm::Value* kc, llvm::Value* dst) {
    const std::int64_t mr = plan_.mr;
    const DType dtype = a_spec_.dtype;
    ir::emitLoop(
        b_, i64(0), i64(mr), 1,
        [&](llvm::Value* r) {
          llvm::Value* valid = b_.CreateICmpSLT(r, rows);
          llvm::Value* row = b_.CreateAdd(src, b_.CreateMul(r, a_row_));
          ifElse(
              valid,
              [&] {
                emitPackLane(dst, kc, mr, r, [&](llvm::Value* p) {
                  return ir::loadCompute(b_, dtype,
                                         ir::elementPtr(b_, dtype, a_, b_.CreateAdd(row, b_.CreateMul(p, a_col_))));
                });
              },
              [&] { emitPackLane(dst, kc, mr, r, zero()); });
        },
        "par", kAsEmitted);
  }

  struct TileArgs {
    llvm::Value* row;                  // first row of the tile (absolute)
    llvm::Value* col;                  // first column (absolute)
    llvm::Value* block_col = nullptr;  // first column of the N block (widePartials' buffer)
    llvm::Value* rows;                 // valid rows (1 .. tile_rows)
    int tile_rows = 0;                 // rows of code: MR, or 1
    llvm::Value* cols;                 // valid columns (1 .. NR)
    llvm::Value* kc;
    llvm::Value* pc;     // K offset of the block
    llvm::Value* first;  // first K block: start from zero
    llvm::Value* last;   // last K block: apply the epilogue
    bool direct_b = false;
    llvm::Value* b_src = nullptr;         // packed panel, or &B[pc, col] when direct_b
    llvm::Value* a_src = nullptr;         // packed A panel, or nullptr (A read in place)
    llvm::Value* pf_src = nullptr;        // packed B: &B[row 0 of the next block to pack] (prefetched row by row)
    llvm::Value* pf_row = nullptr;        // elements from one prefetched row to the next
    llvm::Value* pf_shift = nullptr;      // a whole row every 2^pf_shift k steps...
    llvm::Value* pf_first = nullptr;      // ...from this row of the block on
    llvm::Value* pack_dst = nullptr;      // direct_b: also store B's rows here (the packed panel)
    std::vector<llvm::Value*> b_vectors;  // gate epilogue: vector v's packed column (16 apart per k: NR)
  };

  // The packed B vector v of k step p: NR floats per step in its panel.
  llvm::Value* bVector(const TileArgs& t, llvm::Value* p, int v) {
    const std::int64_t nr = plan_.nr();
    if (!t.b_vectors.empty()) return floatAt(t.b_vectors[static_cast<std::size_t>(v)], b_.CreateMul(p, i64(nr)));
    return floatAt(t.b_src, b_.CreateAdd(b_.CreateMul(p, i64(nr)), i64(v * kLanes)));
  }

  // C[row .. row+MR, col .. col+cols] (+)= A[rows, block] @ B[block, cols]. Rows from `rows` on
  // read row `row` again (in bounds; results dropped) and store nothing. Gate epilogue: the tile's
  // vector v is columns v * H + col of the product, and the last K block stores the program's outputs.
  void emitTile(const TileArgs& t) {
    const int mr = t.tile_rows;
    const int vectors = plan_.vectors;
    const std::int64_t nr = plan_.nr();
    llvm::Type* fvec = vecType();
    auto acc = [&](int r, int v) { return acc_[static_cast<std::size_t>(r * vectors + v)]; };
    std::vector<llvm::Value*> c_row, a_row, row_index;
    for (int r = 0; r < mr; ++r) {
      llvm::Value* row = b_.CreateAdd(t.row, i64(r));
      if (r > 0) row = b_.CreateSelect(b_.CreateICmpSLT(i64(r), t.rows), row, t.row);
      row_index.push_back(row);
      c_row.push_back(b_.CreateAdd(c_base_, b_.CreateAdd(b_.CreateMul(row, c_ld_), t.col)));
      if (t.a_src == nullptr) {
        a_row.push_back(b_.CreateAdd(a_base_, b_.CreateAdd(b_.CreateMul(row, a_row_), b_.CreateMul(t.pc, a_col_))));
      }
    }
    auto guarded = [&](int r, const std::function<void()>& body) {
      if (r == 0) {
        body();
      } else {
        ifElse(b_.CreateICmpSLT(i64(r), t.rows), body, [] {});
      }
    };
    llvm::Value* full = b_.CreateICmpEQ(t.cols, i64(nr));
    std::vector<llvm::Value*> masks;
    // widePartials (and every gate epilogue: it has no C): row r's float32 partial sums (whole
    // vectors: the buffer's rows are NC wide).
    const bool wide = widePartials(out_dtype_) || gate_;
    auto partial = [&](int r, int v) {
      llvm::Value* col = gate_ ? b_.CreateAdd(t.col, i64(v * hidden_)) : b_.CreateAdd(t.col, i64(v * kLanes));
      llvm::Value* offset =
          b_.CreateAdd(b_.CreateMul(b_.CreateSub(row_index[static_cast<std::size_t>(r)], m_lo_), i64(plan_.nc)),
                       b_.CreateSub(col, t.block_col));
      return floatAt(partials_, offset);
    };
    // Accumulators: zero on the first K block, else C (widePartials: the float32 partials).
    ifElse(
        t.first,
        [&] {
          for (int r = 0; r < mr; ++r) {
            for (int v = 0; v < vectors; ++v) b_.CreateStore(llvm::Constant::getNullValue(fvec), acc(r, v));
          }
        },
        [&] {
          if (wide) {
            for (int r = 0; r < mr; ++r) {
              for (int v = 0; v < vectors; ++v) {
                b_.CreateStore(b_.CreateAlignedLoad(fvec, partial(r, v), llvm::Align(4)), acc(r, v));
              }
            }
            return;
          }
          ifElse(
              full,
              [&] {
                for (int r = 0; r < mr; ++r) {
                  for (int v = 0; v < vectors; ++v) {
                    b_.CreateStore(ir::loadCompute(
                                       b_, out_dtype_,
                                       cPtr(b_.CreateAdd(c_row[static_cast<std::size_t>(r)], i64(v * kLanes))), kLanes),
                                   acc(r, v));
                  }
                }
              },
              [&] {
                for (int r = 0; r < mr; ++r) {
                  for (int v = 0; v < vectors; ++v) {
                    llvm::Value* mask = laneMask(b_.CreateSub(t.cols, i64(v * kLanes)));
                    b_.CreateStore(ir::maskedLoadCompute(
                                       b_, out_dtype_,
                                       cPtr(b_.CreateAdd(c_row[static_cast<std::size_t>(r)], i64(v * kLanes))), mask),
                                   acc(r, v));
                  }
                }
              });
        });
    // Packed B: part of the block packed next (see TileArgs::pf_src), for k step p.
    auto prefetchNext = [&](llvm::Value* p) {
      if (t.pf_src == nullptr) return;
      auto prefetch = [&](llvm::Value* offset) {
        llvm::Value* ptr = b_.CreateGEP(b_.getFloatTy(), t.pf_src, offset);
        b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {ptr->getType()},
                           {ptr, b_.getInt32(0), b_.getInt32(2), b_.getInt32(1)});
      };
      // Many tiles (at least `vectors`): tile i asks for the next block's rows from i % vectors
      // * KC / vectors on, a whole row (`vectors` lines, one page) every 2^shift k steps (shift
      // = log2 of vectors, rounded down), so its first `vectors` tiles request the whole block
      // well before it is packed. Fewer tiles (a few rows): row p, whole, every step. Per step
      // that is a mask test; a row's address is taken only when one is due. The former spread
      // (a line per step over the first half of the tiles) took a multiply, a division and a
      // clamp per step, which cost more than the prefetch saved with 4 x 64 tiles on an Intel
      // core (BENCHMARKS.md, issue 25).
      llvm::Value* mask = b_.CreateSub(b_.CreateShl(i64(1), t.pf_shift), i64(1));
      ifElse(
          b_.CreateICmpEQ(b_.CreateAnd(p, mask), i64(0)),
          [&] {
            llvm::Value* row = b_.CreateMul(b_.CreateAdd(t.pf_first, b_.CreateLShr(p, t.pf_shift)), t.pf_row);
            for (int v = 0; v < vectors; ++v) prefetch(b_.CreateAdd(row, i64(v * kLanes)));
          },
          [] {});
    };
    // The K loop, unrolled by k_unroll, then single steps.
    const DType a_dtype = a_spec_.dtype;
    // Pointer induction (see the K loop below): b_at/a_at point at step p's B row and A
    // column; a_offsets: row r's A element from a_at (A read in place).
    std::vector<llvm::Value*> a_offsets;
    auto step = [&](llvm::Value* p, llvm::Value* b_at = nullptr, llvm::Value* a_at = nullptr) {
      std::vector<llvm::Value*> bv;
      for (int v = 0; v < vectors; ++v) {
        llvm::LoadInst* x = nullptr;
        if (b_at != nullptr) {
          x = b_.CreateLoad(fvec, floatAt(b_at, i64(v * kLanes)));
          x->setAlignment(llvm::Align(t.direct_b ? 4 : 64));
        } else if (t.direct_b) {
          x = b_.CreateLoad(fvec, floatAt(t.b_src, b_.CreateAdd(b_.CreateMul(p, b_row_), i64(v * kLanes))));
          x->setAlignment(llvm::Align(4));
        } else {
          x = b_.CreateLoad(fvec, bVector(t, p, v));
          x->setAlignment(llvm::Align(64));
        }
        bv.push_back(x);
        if (t.pack_dst != nullptr) {
          llvm::StoreInst* kept =
              b_.CreateStore(x, floatAt(t.pack_dst, b_.CreateAdd(b_.CreateMul(p, i64(nr)), i64(v * kLanes))));
          kept->setAlignment(llvm::Align(64));
        }
      }
      if (t.direct_b && t.pack_dst == nullptr && plan_.prefetch > 0) {
        llvm::Value* ahead = b_.CreateMul(b_.CreateAdd(p, i64(plan_.prefetch)), b_row_);
        for (int v = 0; v < vectors; ++v) {
          llvm::Value* ptr = b_.CreateGEP(b_.getFloatTy(), t.b_src, b_.CreateAdd(ahead, i64(v * kLanes)));
          b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {ptr->getType()},
                             {ptr, b_.getInt32(0), b_.getInt32(3), b_.getInt32(1)});
        }
      }
      prefetchNext(p);
      llvm::Value* a_step = t.a_src == nullptr ? b_.CreateMul(p, a_col_) : b_.CreateMul(p, i64(plan_.mr));
      for (int r = 0; r < mr; ++r) {
        llvm::Value* a = nullptr;
        if (a_at != nullptr) {
          a = b_.CreateLoad(b_.getFloatTy(),
                            floatAt(a_at, t.a_src != nullptr ? i64(r) : a_offsets[static_cast<std::size_t>(r)]));
        } else if (t.a_src != nullptr) {
          a = b_.CreateLoad(b_.getFloatTy(), floatAt(t.a_src, b_.CreateAdd(a_step, i64(r))));
        } else {
          a = ir::loadCompute(
              b_, a_dtype, ir::elementPtr(b_, a_dtype, a_, b_.CreateAdd(a_row[static_cast<std::size_t>(r)], a_step)));
        }
        llvm::Value* a_splat = b_.CreateVectorSplat(kLanes, a);
        for (int v = 0; v < vectors; ++v) {
          llvm::Value* sum =
              b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {fvec},
                                 {a_splat, bv[static_cast<std::size_t>(v)], b_.CreateLoad(fvec, acc(r, v))});
          b_.CreateStore(sum, acc(r, v));
        }
      }
    };
    // bfloat16 pairs: step p is K rows 2p and 2p + 1 (the packed slot row p); A's two elements
    // are one 32-bit broadcast (a last odd row: one element, zero above it).
    llvm::Type* pair_vec = pairVecType();
    auto pairStep = [&](llvm::Value* p, bool odd_last) {
      std::vector<llvm::Value*> bv;
      for (int v = 0; v < vectors; ++v) {
        bv.push_back(b_.CreateAlignedLoad(pair_vec, bVector(t, p, v), llvm::Align(64)));
      }
      prefetchNext(p);
      for (int r = 0; r < mr; ++r) {
        llvm::Value* ptr = ir::elementPtr(b_, DType::BFloat16, a_,
                                          b_.CreateAdd(a_row[static_cast<std::size_t>(r)], b_.CreateShl(p, i64(1))));
        llvm::Value* word =
            odd_last ? b_.CreateZExt(b_.CreateAlignedLoad(b_.getInt16Ty(), ptr, llvm::Align(2)), b_.getInt32Ty())
                     : b_.CreateAlignedLoad(b_.getInt32Ty(), ptr, llvm::Align(2));
        llvm::Value* a_pairs = b_.CreateBitCast(b_.CreateVectorSplat(kLanes, word), pair_vec);
        for (int v = 0; v < vectors; ++v) {
          llvm::Value* sum =
              b_.CreateIntrinsic(llvm::Intrinsic::x86_avx512bf16_dpbf16ps_512, {},
                                 {b_.CreateLoad(fvec, acc(r, v)), a_pairs, bv[static_cast<std::size_t>(v)]});
          b_.CreateStore(sum, acc(r, v));
        }
      }
    };
    const int unroll = std::max(1, plan_.k_unroll);
    llvm::Value* steps = plan_.bf16_pairs ? b_.CreateLShr(t.kc, i64(1)) : t.kc;
    auto one = [&](llvm::Value* p) {
      if (plan_.bf16_pairs) {
        pairStep(p, false);
      } else {
        step(p);
      }
    };
    llvm::Value* k_main = i64(0);
    if (unroll > 1) {
      k_main = b_.CreateSub(steps, b_.CreateURem(steps, i64(unroll)));
      ir::emitLoop(
          b_, i64(0), k_main, unroll,
          [&](llvm::Value* p) {
            for (int u = 0; u < unroll; ++u) one(b_.CreateAdd(p, i64(u)));
          },
          "ku", kAsEmitted);
    }
    // One step at a time. Float32 operands (B packed or read in place; A packed, or float32 read
    // in place) walk pointers instead of scaling the step: per step one add per operand instead
    // of the mov, shift and two lea that recomputed both offsets from the step (LLVM's strength
    // reduction kept the step): 38 instructions per 24 FMAs of a 6 x 64 tile instead of 40, as
    // oneDNN's sgemm kernel (~37 per 24 with its 4x unrolled loop; BENCHMARKS.md, issue 25).
    const bool pointers = !plan_.bf16_pairs && t.b_vectors.empty() && t.pack_dst == nullptr &&
                          (t.a_src != nullptr || a_dtype == DType::Float32);
    if (!pointers) {
      ir::emitLoop(b_, k_main, steps, 1, one, "k", kAsEmitted);
    } else {
      llvm::Value* b_stride = t.direct_b ? b_row_ : i64(nr);
      llvm::Value* a_stride = t.a_src != nullptr ? i64(plan_.mr) : a_col_;
      llvm::Value* b_start = floatAt(t.b_src, b_.CreateMul(k_main, b_stride));
      llvm::Value* a_start = nullptr;
      if (t.a_src != nullptr) {
        a_start = floatAt(t.a_src, b_.CreateMul(k_main, a_stride));
      } else {
        a_start = floatAt(a_, b_.CreateAdd(a_row[0], b_.CreateMul(k_main, a_stride)));
        for (int r = 0; r < mr; ++r) a_offsets.push_back(b_.CreateSub(a_row[static_cast<std::size_t>(r)], a_row[0]));
      }
      // The step's pointers are phis of emitLoop's header next to its index.
      llvm::BasicBlock* pre = b_.GetInsertBlock();
      ir::emitLoop(
          b_, k_main, steps, 1,
          [&](llvm::Value* p) {
            llvm::BasicBlock* header = b_.GetInsertBlock()->getSinglePredecessor();
            llvm::PHINode* b_at = llvm::PHINode::Create(b_start->getType(), 2, "k.b", header->getFirstNonPHI());
            llvm::PHINode* a_at = llvm::PHINode::Create(a_start->getType(), 2, "k.a", header->getFirstNonPHI());
            b_at->addIncoming(b_start, pre);
            a_at->addIncoming(a_start, pre);
            step(p, b_at, a_at);
            llvm::BasicBlock* latch = b_.GetInsertBlock();
            b_at->addIncoming(floatAt(b_at, b_stride), latch);
            a_at->addIncoming(floatAt(a_at, a_stride), latch);
          },
          "k", kAsEmitted);
    }
    if (plan_.bf16_pairs) {
      ifElse(
          b_.CreateICmpNE(b_.CreateAnd(t.kc, i64(1)), i64(0)), [&] { pairStep(steps, true); }, [] {});
    }
    // Store (after the epilogue on the last K block).
    auto finish = [&](bool epilogue) {
      ifElse(
          full,
          [&] {
            for (int r = 0; r < mr; ++r) {
              std::vector<llvm::Value*> values;
              for (int v = 0; v < vectors; ++v) values.push_back(b_.CreateLoad(fvec, acc(r, v)));
              guarded(r, [&] {
                for (int v = 0; v < vectors; ++v) {
                  llvm::Value* value = values[static_cast<std::size_t>(v)];
                  if (epilogue) {
                    value = applyEpilogue(value, row_index[static_cast<std::size_t>(r)],
                                          b_.CreateAdd(t.col, i64(v * kLanes)), nullptr);
                  }
                  ir::storeCompute(b_, out_dtype_, value,
                                   cPtr(b_.CreateAdd(c_row[static_cast<std::size_t>(r)], i64(v * kLanes))));
                }
              });
            }
          },
          [&] {
            for (int r = 0; r < mr; ++r) {
              std::vector<llvm::Value*> values;
              for (int v = 0; v < vectors; ++v) values.push_back(b_.CreateLoad(fvec, acc(r, v)));
              guarded(r, [&] {
                for (int v = 0; v < vectors; ++v) {
                  llvm::Value* live = b_.CreateSub(t.cols, i64(v * kLanes));
                  ifElse(
                      b_.CreateICmpSGT(live, i64(0)),
                      [&] {
                        llvm::Value* mask = laneMask(live);
                        llvm::Value* value = values[static_cast<std::size_t>(v)];
                        if (epilogue) {
                          value = applyEpilogue(value, row_index[static_cast<std::size_t>(r)],
                                                b_.CreateAdd(t.col, i64(v * kLanes)), mask);
                        }
                        maskedStore(out_dtype_, value,
                                    cPtr(b_.CreateAdd(c_row[static_cast<std::size_t>(r)], i64(v * kLanes))), mask);
                      },
                      [] {});
                }
              });
            }
          });
    };
    if (wide) {
      // Not the last K block: the float32 partials (rows past `rows` re-read a valid one: skipped).
      auto keep = [&] {
        for (int r = 0; r < mr; ++r) {
          guarded(r, [&] {
            for (int v = 0; v < vectors; ++v) {
              b_.CreateAlignedStore(b_.CreateLoad(fvec, acc(r, v)), partial(r, v), llvm::Align(4));
            }
          });
        }
      };
      if (gate_) {
        ifElse(
            t.last, [&] { finishGates(t, row_index, guarded); }, keep);
      } else {
        ifElse(
            t.last, [&] { finish(!spec_.epilogue.empty()); }, keep);
      }
    } else if (spec_.epilogue.empty()) {
      finish(false);
    } else {
      ifElse(
          t.last, [&] { finish(true); }, [&] { finish(false); });
    }
  }

  // The gate epilogue on the last K block: the G accumulators of each valid row (columns g * H +
  // col, after spec.epilogue, rounded as the product) go to a small stack buffer, and the program
  // runs on it in a function of its own (emitGateRows), once per tile. Measured on the LSTM cell
  // (seq 10) its math costs ~1.6x the fused kernel's (inline in the tile, interleaving 2-4 rows,
  // or without divisions: the same), which is why RegionGateEpilogue is off by default.
  void finishGates(const TileArgs& t, const std::vector<llvm::Value*>& row_index,
                   const std::function<void(int, const std::function<void()>&)>& guarded) {
    llvm::Type* fvec = vecType();
    const int vectors = plan_.vectors;
    if (gate_tile_ == nullptr) {
      gate_tile_ =
          ir::entryAlloca(b_, llvm::ArrayType::get(fvec, static_cast<std::uint64_t>(plan_.mr * vectors)), "gates", 64);
    }
    for (int r = 0; r < t.tile_rows; ++r) {
      std::vector<llvm::Value*> values;
      for (int v = 0; v < vectors; ++v) {
        values.push_back(b_.CreateLoad(fvec, acc_[static_cast<std::size_t>(r * vectors + v)]));
      }
      guarded(r, [&] {
        llvm::Value* row = row_index[static_cast<std::size_t>(r)];
        for (int v = 0; v < vectors; ++v) {
          llvm::Value* value = ir::roundTo(b_, values[static_cast<std::size_t>(v)], out_dtype_);
          value = applyEpilogue(value, row, b_.CreateAdd(t.col, i64(v * hidden_)), nullptr);
          b_.CreateAlignedStore(
              value, b_.CreateConstInBoundsGEP1_64(fvec, gate_tile_, static_cast<std::uint64_t>(r * vectors + v)),
              llvm::Align(64));
        }
      });
    }
    if (gate_rows_ == nullptr) {
      llvm::Type* ptr = b_.getPtrTy();
      llvm::Type* index = b_.getInt64Ty();
      gate_rows_ = internalFunction("_gates", {ptr, ptr, index, index, index}, [&](llvm::Function* f) {
        emitGateRows(f->getArg(0), f->getArg(1), f->getArg(2), f->getArg(3), f->getArg(4));
      });
    }
    b_.CreateCall(gate_rows_, {args_ptr_, gate_tile_, t.row, t.tile_rows == 1 ? i64(1) : t.rows, t.col});
  }

  // The body of the gate function: `void(args, tile, row, rows, col)` computes the program for
  // rows row .. row + rows and columns col .. col + 16 of every block, reading the column-block
  // leaves from `tile` (rows x G vectors); the other leaves are read at the row's iteration index
  // (16 lanes, or one value broadcast), the nodes run on vectors as the fused family runs them on
  // scalars, and the outputs are stored.
  void emitGateRows(llvm::Value* args_ptr, llvm::Value* tile, llvm::Value* row0, llvm::Value* rows, llvm::Value* col) {
    llvm::Type* fvec = vecType();
    const int vectors = plan_.vectors;
    ir::ArgsView args(b_, args_ptr);
    const int out_slot = static_cast<int>(spec_.inputs.size());
    llvm::Value* inner_rows = spec_.fused->rank == 3 ? args.dim(out_slot, 1) : nullptr;
    const ir::GateViews views(args, spec_);
    // The first row's index over the iteration's leading axes; later rows step from it (rank 3:
    // axis 1 wraps at most once per tile row, so no division per row).
    llvm::Value* first_i0 = inner_rows != nullptr ? b_.CreateUDiv(row0, inner_rows) : nullptr;
    llvm::Value* first_i1 = inner_rows != nullptr ? b_.CreateURem(row0, inner_rows) : nullptr;
    ir::emitLoop(
        b_, i64(0), rows, 1,
        [&](llvm::Value* r) {
          std::vector<llvm::Value*> at = {b_.CreateAdd(row0, r)};
          if (inner_rows != nullptr) {
            llvm::Value* i1 = b_.CreateAdd(first_i1, r);
            llvm::Value* i0 = first_i0;
            for (int wrap = 0; wrap < plan_.mr; ++wrap) {
              llvm::Value* over = b_.CreateICmpSGE(i1, inner_rows);
              i1 = b_.CreateSelect(over, b_.CreateSub(i1, inner_rows), i1);
              i0 = b_.CreateSelect(over, b_.CreateAdd(i0, i64(1)), i0);
            }
            at = {i0, i1};
          }
          // Column block g of the product: the tile's vector g of row r.
          ir::emitGateColumns(b_, spec_, views, at, col, kLanes, [&](int block) -> llvm::Value* {
            llvm::Value* at_tile = b_.CreateAdd(b_.CreateMul(r, i64(vectors)), i64(block));
            return b_.CreateAlignedLoad(fvec, b_.CreateInBoundsGEP(fvec, tile, at_tile), llvm::Align(64));
          });
        },
        "gr", kAsEmitted);
  }

  Builder& b_;
  const KernelSpec& spec_;
  const OperandSpec& a_spec_;
  const OperandSpec& b_spec_;
  DType out_dtype_;
  MatmulDims dims_;
  Plan plan_;
  bool packable_;                          // packableB(): the whole B may be passed packed
  bool gate_;                              // gateEpilogue(): the tile rows end in the program
  bool cols_whole_;                        // every panel has NR columns: no partial-panel code
  bool rows_whole_;                        // every row block is whole MR-row tiles: no 1-row tiles
  bool one_k_block_;                       // a static K <= KC: one K block, the first and the last
  bool strided_c_;                         // C's rows are strides[2] of its slot apart (emitMatmulKernel)
  std::int64_t hidden_ = 0;                // gate epilogue: H, the columns per block
  llvm::Value* args_ptr_ = nullptr;        // ... the kernel's args (for its gate function)
  llvm::Function* gate_rows_ = nullptr;    // ... that function (emitGateRows)
  llvm::AllocaInst* gate_tile_ = nullptr;  // the tile's column-block values, MR x G vectors
  llvm::Value* packed_b_ = nullptr;        // packable_: the caller's packed B (scalars[2]) ...
  llvm::Value* read_packed_ = nullptr;     // ... to read the blocks from (i1)
  llvm::Value* pack_only_ = nullptr;       // ... to pack into, and nothing else (i1, scalars[3])
  llvm::Value* n_pad_ = nullptr;           // N rounded up to NR (the packed B's row length)
  llvm::Value* a_ = nullptr;
  llvm::Value* b_ptr_ = nullptr;
  llvm::Value* pack_b_panel_fn_ = nullptr;  // PackBPanelFn (matmul_plan.h), from B's view slot
  llvm::Value* c_ = nullptr;
  llvm::Value* m_ = nullptr;
  llvm::Value* k_ = nullptr;
  llvm::Value* n_ = nullptr;
  llvm::Value* c_ld_ = nullptr;  // C's row stride: N, or the output slot's strides[2] (strided_c)
  llvm::Value* a_row_ = nullptr;
  llvm::Value* a_col_ = nullptr;
  llvm::Value* b_row_ = nullptr;
  llvm::Value* b_col_ = nullptr;
  llvm::Value* m_lo_ = nullptr;
  llvm::Value* m_hi_ = nullptr;
  llvm::Value* n_lo_ = nullptr;
  llvm::Value* n_hi_ = nullptr;
  llvm::Value* k_loop_end_ = nullptr;
  llvm::Value* i0_ = nullptr;
  llvm::Value* i1_ = nullptr;
  llvm::Value* a_base_ = nullptr;
  llvm::Value* b_base_ = nullptr;
  llvm::Value* c_base_ = nullptr;
  llvm::Value* bpack_ = nullptr;
  llvm::Value* apack_ = nullptr;
  llvm::Value* partials_ = nullptr;           // widePartials: float32 C of the N block, rows from m_lo_
  std::map<int, Extra> extras_;               // epilogue operands by input index
  std::vector<llvm::AllocaInst*> acc_;        // tile accumulators (the dot path uses the first 4)
  std::vector<llvm::AllocaInst*> dot_sum_;    // dot path: scalar sums
  llvm::Function* pack_b_columns_ = nullptr;  // packing routines (see callPacker)
  llvm::Function* pack_b_pair_columns_ = nullptr;
  llvm::Function* pack_a_rows_ = nullptr;
};

}  // namespace

Status emitMatmulKernel(const KernelSpec& spec, llvm::Module& module, const std::string& symbol, bool strided_c) {
  llvm::LLVMContext& context = module.getContext();
  markHandVectorized(module);  // every loop below is vectorized by hand or left as emitted
  Builder b(context);
  llvm::Function* function = ir::beginKernel(module, symbol, b);
  // The body: void part(ptr args, i64 task, i64 tasks, ptr scratch).
  llvm::Type* ptr = llvm::PointerType::getUnqual(context);
  auto* part_type = llvm::FunctionType::get(b.getVoidTy(), {ptr, b.getInt64Ty(), b.getInt64Ty(), ptr}, false);
  llvm::Function* part = llvm::Function::Create(part_type, llvm::Function::InternalLinkage, symbol + "_part", module);
  part->addParamAttr(0, llvm::Attribute::NoAlias);
  part->addParamAttr(0, llvm::Attribute::ReadOnly);
  part->addParamAttr(3, llvm::Attribute::NoAlias);
  part->addFnAttr(llvm::Attribute::NoUnwind);
  // The exported entry: runMatmulTasks(part, args, tasks, scratch bytes).
  ir::ArgsView args(b, function->getArg(0));
  llvm::Value* runner = b.CreateIntToPtr(args.scalar(kScalarRunner), ptr);
  llvm::Value* tasks = args.scalar(kScalarTasks);
  auto* runner_type = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, b.getInt64Ty(), b.getInt64Ty()}, false);
  const Plan plan = resolvePlan(spec);
  const DType out_dtype = promoteTypes(spec.inputs[0].dtype, spec.inputs[1].dtype);
  llvm::Value* scratch_bytes = b.getInt64(static_cast<std::uint64_t>(scratchBytes(plan)));
  if (widePartials(out_dtype) || gateEpilogue(spec)) {
    // The float32 partial sums, when there is more than one K block.
    const MatmulDims dims = staticDims(spec);
    llvm::Value* m = dims.m >= 0 ? b.getInt64(static_cast<std::uint64_t>(dims.m)) : args.dim(slotA(spec), 2);
    llvm::Value* k = dims.k >= 0 ? b.getInt64(static_cast<std::uint64_t>(dims.k)) : args.dim(slotA(spec), 3);
    llvm::Value* partials = b.CreateMul(m, b.getInt64(static_cast<std::uint64_t>(plan.nc) * 4));
    partials =
        b.CreateSelect(b.CreateICmpSGT(k, b.getInt64(static_cast<std::uint64_t>(plan.kc))), partials, b.getInt64(0));
    scratch_bytes = b.CreateAdd(scratch_bytes, partials);
  }
  if (spec.params.library != 0) {
    // A library kernel: the runner prepare() chose (library_onednn.h) does the work; no part.
    b.CreateCall(runner_type, runner, {part, function->getArg(0), tasks, b.getInt64(0)});
    b.CreateRetVoid();
    b.SetInsertPoint(llvm::BasicBlock::Create(context, "entry", part));
    // With a generated tail (library = 2, 4) the runner calls part for the rest of the epilogue.
    if (onednn::hasTail(spec.params)) return onednn::emitTail(spec, part);
    b.CreateRetVoid();
    return Status::ok();
  }
  b.CreateCall(runner_type, runner, {part, function->getArg(0), tasks, scratch_bytes});
  b.CreateRetVoid();

  b.SetInsertPoint(llvm::BasicBlock::Create(context, "entry", part));
  MatmulEmitter emitter(b, spec, promoteTypes(spec.inputs[0].dtype, spec.inputs[1].dtype), strided_c);
  emitter.emitPart(part);
  return Status::ok();
}

}  // namespace shapevm::jit::matmul
