// SPDX-License-Identifier: Apache-2.0
// The matmul family (O1): batched C = A @ B for float32/float16/bfloat16 operands (any mix; the
// result dtype is promoteTypes(a, b), computed in float32), ranks 1..4 with numpy broadcasting of
// the batch dims, any strides. prepare() rewrites both operands as canonical 4-D views
// [batch0, batch1, rows, cols] (broadcast batch dims get stride 0, 1-D operands a stride-0 row or
// column) in spare KernelArgs slots, so one kernel body covers every rank.
//
// Kernel: for each batch matrix, for each NR-wide column panel of B and each KC-deep block of K,
// the panel block is packed (converted to float32, zero-padded to NR columns) into a 64-byte
// aligned stack buffer, so transposed or 16-bit B costs the same in the inner loop as row-major
// float32. Then an MR x NR register tile of <16 x float> accumulators walks the block: per k
// step, NR/16 vector loads of the packed panel, MR broadcast elements of A, MR*NR/16
// llvm.fmuladd. With AVX-512 the tile is 8 x 32 (16 zmm accumulators), else 4 x 16. The M tail
// runs one more full tile whose extra rows re-read a valid row and store nothing; N tails go
// through a stack tile. Static M/K/N and unit strides of contiguous operands are baked in.
// When A's rows and B's columns are both contiguous along K and M < MR or N < 16 (x @ W.T for a
// few rows, matrix @ vector), a dot-product path runs instead: packing would dominate there.
// Loops carry no-unroll / no-vectorize metadata (vectorized by hand; keeps compiles ~30 ms).
// Invariant: the first K block initializes C (so K = 0 writes zeros), later blocks add to it.
#include <algorithm>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/TargetParser/Host.h>

#include "jit/codegen_util.h"
#include "jit/kernel_abi.h"
#include "ops/kernel_util.h"

namespace shapevm::jit {
namespace {

using ir::Builder;

constexpr unsigned kLanes = 16;        // <16 x float>
constexpr std::int64_t kBlockK = 256;  // KC: a KC x NR packed panel is 32 KiB (fits L1)
constexpr int kSlotA = 3;              // canonical 4-D views written by prepare()
constexpr int kSlotB = 4;
constexpr int kMaxBatchRank = 2;
// Every loop is left as emitted: vectorized by hand, or a short tail / strided walk where extra
// copies only cost compile time.
constexpr ir::LoopHints kAsEmitted = ir::LoopHints::asEmitted();

bool isComputeFloat(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16;
}

bool hostHasAvx512() {
  static const bool avx512 = [] {
    const auto features = llvm::sys::getHostCPUFeatures();
    auto it = features.find("avx512f");
    return it != features.end() && it->second;
  }();
  return avx512;
}

// Register tile: kRows x (vectors * 16).
struct TileShape {
  int rows;
  int vectors;
  std::int64_t cols() const { return static_cast<std::int64_t>(vectors) * kLanes; }
};
TileShape tileShape() {
  return hostHasAvx512() ? TileShape{8, 2} : TileShape{4, 1};
}

// What the spec fixes about the matrices: -1 = known only at run time.
struct MatmulDims {
  std::int64_t m = -1, k = -1, n = -1;
};

MatmulDims staticDims(const KernelSpec& spec) {
  const OperandSpec& a = spec.inputs[0];
  const OperandSpec& b = spec.inputs[1];
  MatmulDims dims;
  auto size = [](const OperandSpec& op, int axis) { return op.dims[axis].isStatic() ? op.dims[axis].size : -1; };
  dims.m = a.rank == 1 ? 1 : size(a, a.rank - 2);
  dims.k = size(a, a.rank - 1);
  if (dims.k < 0) dims.k = b.rank == 1 ? size(b, 0) : size(b, b.rank - 2);
  dims.n = b.rank == 1 ? 1 : size(b, b.rank - 1);
  return dims;
}

// The row/col view of one operand for prepare(): 1-D a is a row [1, K], 1-D b a column [K, 1].
struct MatrixView {
  std::int64_t rows, cols, row_stride, col_stride;
  Shape batch;
  Shape batch_strides;
};

MatrixView viewOf(const Tensor& t, bool is_left) {
  MatrixView view{};
  const int r = t.rank();
  if (r == 1) {
    if (is_left) {
      view = {1, t.dim(0), 0, t.stride(0), Shape{}, Shape{}};
    } else {
      view = {t.dim(0), 1, t.stride(0), 0, Shape{}, Shape{}};
    }
    return view;
  }
  view.rows = t.dim(r - 2);
  view.cols = t.dim(r - 1);
  view.row_stride = t.stride(r - 2);
  view.col_stride = t.stride(r - 1);
  for (int d = 0; d < r - 2; ++d) {
    view.batch.push_back(t.dim(d));
    view.batch_strides.push_back(t.stride(d));
  }
  return view;
}

Status checkFits(const OperandSpec& spec, const Tensor& x, const char* which) {
  bool fits = x.dtype() == spec.dtype && x.rank() == spec.rank && (!spec.contiguous || x.isContiguous());
  for (int d = 0; fits && d < x.rank(); ++d) fits = !spec.dims[d].isStatic() || spec.dims[d].size == x.dim(d);
  if (!fits) {
    return makeError(ErrorCode::Unsupported, "matmul: operand {} {} does not fit the kernel's spec {}", which,
                     x.describe(), spec.toString());
  }
  return Status::ok();
}

// ---- IR ----

class MatmulEmitter {
 public:
  MatmulEmitter(Builder& b, const KernelSpec& spec, DType out_dtype)
      : b_(b),
        a_spec_(spec.inputs[0]),
        b_spec_(spec.inputs[1]),
        out_dtype_(out_dtype),
        dims_(staticDims(spec)),
        tile_(tileShape()) {}

  void emit(llvm::Value* args_ptr) {
    ir::ArgsView args(b_, args_ptr);
    a_ = args.data(0);
    b_ptr_ = args.data(1);
    c_ = args.data(2);
    auto known = [&](std::int64_t value, int slot, int axis) {
      return value >= 0 ? b_.getInt64(static_cast<std::uint64_t>(value)) : args.dim(slot, axis);
    };
    m_ = known(dims_.m, kSlotA, 2);
    k_ = known(dims_.k, kSlotA, 3);
    n_ = known(dims_.n, kSlotB, 3);
    llvm::Value* batch0 = args.dim(kSlotA, 0);
    llvm::Value* batch1 = args.dim(kSlotA, 1);
    llvm::Value* a_batch0 = args.stride(kSlotA, 0);
    llvm::Value* a_batch1 = args.stride(kSlotA, 1);
    llvm::Value* b_batch0 = args.stride(kSlotB, 0);
    llvm::Value* b_batch1 = args.stride(kSlotB, 1);
    std::tie(a_row_, a_col_) = matrixStrides(args, a_spec_, kSlotA, k_, /*is_left=*/true);
    std::tie(b_row_, b_col_) = matrixStrides(args, b_spec_, kSlotB, n_, /*is_left=*/false);
    llvm::Type* fvec = vecType();
    pack_ = ir::entryAlloca(
        b_, llvm::ArrayType::get(b_.getFloatTy(), static_cast<std::uint64_t>(kBlockK * tile_.cols())), "bpack", 64);
    edge_ = ir::entryAlloca(
        b_, llvm::ArrayType::get(b_.getFloatTy(), static_cast<std::uint64_t>(tile_.rows * tile_.cols())), "edge", 64);
    for (int r = 0; r < tile_.rows; ++r) {
      for (int v = 0; v < tile_.vectors; ++v) acc_.push_back(ir::entryAlloca(b_, fvec, "acc", 64));
    }
    for (int c = 0; c < 4; ++c) dot_sum_.push_back(ir::entryAlloca(b_, b_.getFloatTy(), "dot", 4));

    // K = 0 still runs one (empty) K block so C is written with zeros.
    llvm::Value* k_loop_end = b_.CreateSelect(b_.CreateICmpEQ(k_, b_.getInt64(0)), b_.getInt64(1), k_);
    llvm::Value* matrix_size = b_.CreateMul(m_, n_);
    llvm::Value* batches = b_.CreateMul(batch0, batch1);
    llvm::Value* nr = b_.getInt64(static_cast<std::uint64_t>(tile_.cols()));
    llvm::Value* mr = b_.getInt64(static_cast<std::uint64_t>(tile_.rows));
    llvm::Value* m_full = b_.CreateSub(m_, b_.CreateURem(m_, mr));
    // Small M (or N) with both operands contiguous along K (x @ W.T with few rows, matrix @
    // vector): dot products along K instead of packed tiles, which would mostly pack or idle.
    llvm::Value* dot_layout = b_.CreateAnd(b_.CreateICmpEQ(a_col_, i64(1)), b_.CreateICmpEQ(b_row_, i64(1)));
    llvm::Value* use_dot =
        b_.CreateAnd(dot_layout, b_.CreateOr(b_.CreateICmpSLT(m_, mr), b_.CreateICmpSLT(n_, i64(kLanes))));
    auto* never_dot = llvm::dyn_cast<llvm::ConstantInt>(use_dot);
    ir::emitLoop(
        b_, b_.getInt64(0), batches, 1,
        [&](llvm::Value* batch) {
          llvm::Value* i0 = b_.CreateUDiv(batch, batch1);
          llvm::Value* i1 = b_.CreateURem(batch, batch1);
          llvm::Value* a_base = b_.CreateAdd(b_.CreateMul(i0, a_batch0), b_.CreateMul(i1, a_batch1));
          llvm::Value* b_base = b_.CreateAdd(b_.CreateMul(i0, b_batch0), b_.CreateMul(i1, b_batch1));
          llvm::Value* c_base = b_.CreateMul(batch, matrix_size);
          auto tiled = [&] {
            ir::emitLoop(
                b_, b_.getInt64(0), n_, tile_.cols(),
                [&](llvm::Value* jt) {
                  llvm::Value* cols = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, nr, b_.CreateSub(n_, jt));
                  ir::emitLoop(
                      b_, b_.getInt64(0), k_loop_end, kBlockK,
                      [&](llvm::Value* pc) {
                        llvm::Value* kc =
                            b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.getInt64(kBlockK), b_.CreateSub(k_, pc));
                        llvm::Value* first = b_.CreateICmpEQ(pc, b_.getInt64(0));
                        emitPack(b_.CreateAdd(b_base, b_.CreateAdd(b_.CreateMul(pc, b_row_), b_.CreateMul(jt, b_col_))),
                                 kc, cols);
                        llvm::Value* a_block = b_.CreateAdd(a_base, b_.CreateMul(pc, a_col_));
                        llvm::Value* c_block = b_.CreateAdd(c_base, jt);
                        ir::emitLoop(
                            b_, b_.getInt64(0), m_full, tile_.rows,
                            [&](llvm::Value* it) { emitTile(it, a_block, c_block, kc, cols, first, nullptr); }, "it",
                            kAsEmitted);
                        ir::emitIfElse(
                            b_, b_.CreateICmpSLT(m_full, m_),
                            [&] { emitTile(m_full, a_block, c_block, kc, cols, first, b_.CreateSub(m_, m_full)); },
                            [] {});
                      },
                      "pc", kAsEmitted);
                },
                "jt", kAsEmitted);
          };
          if (never_dot != nullptr && never_dot->isZero()) {
            tiled();
          } else {
            ir::emitIfElse(
                b_, use_dot, [&] { emitDot(a_base, b_base, c_base); }, tiled);
          }
        },
        "batch", kAsEmitted);
    b_.CreateRetVoid();
  }

 private:
  llvm::Type* vecType() const { return ir::withLanes(b_.getFloatTy(), kLanes); }
  llvm::Value* i64(std::int64_t v) { return b_.getInt64(static_cast<std::uint64_t>(v)); }

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
  llvm::Value* packPtr(llvm::Value* index) { return b_.CreateInBoundsGEP(b_.getFloatTy(), pack_, index); }

  // C[i, j] = dot(A[i, :], B[:, j]) with A's rows and B's columns contiguous: <16 x float>
  // chunks of K for 4 columns at a time (one A load shared by 4 FMAs), horizontal sums, scalar
  // K tail.
  void emitDot(llvm::Value* a_base, llvm::Value* b_base, llvm::Value* c_base) {
    constexpr int kColumns = 4;
    llvm::Type* fvec = vecType();
    llvm::Value* k_vec = b_.CreateAnd(k_, i64(-static_cast<std::int64_t>(kLanes)));
    llvm::Value* n_group = b_.CreateAnd(n_, i64(-kColumns));
    const DType a_dtype = a_spec_.dtype;
    const DType b_dtype = b_spec_.dtype;
    ir::emitLoop(
        b_, i64(0), m_, 1,
        [&](llvm::Value* i) {
          llvm::Value* a_row = b_.CreateAdd(a_base, b_.CreateMul(i, a_row_));
          llvm::Value* c_row = b_.CreateAdd(c_base, b_.CreateMul(i, n_));
          auto columns = [&](llvm::Value* j, int count) {
            std::vector<llvm::Value*> b_col;
            for (int c = 0; c < count; ++c)
              b_col.push_back(b_.CreateAdd(b_base, b_.CreateMul(b_.CreateAdd(j, i64(c)), b_col_)));
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
              ir::storeCompute(b_, out_dtype_, b_.CreateLoad(b_.getFloatTy(), scalar),
                               cPtr(b_.CreateAdd(c_row, b_.CreateAdd(j, i64(c)))));
            }
          };
          ir::emitLoop(
              b_, i64(0), n_group, kColumns, [&](llvm::Value* j) { columns(j, kColumns); }, "dj", kAsEmitted);
          ir::emitLoop(
              b_, n_group, n_, 1, [&](llvm::Value* j) { columns(j, 1); }, "dj1", kAsEmitted);
        },
        "di", kAsEmitted);
  }

  // pack[p * NR + j] = B[p, j] (float32) for p < kc, j < cols; 0 for cols <= j < NR.
  void emitPack(llvm::Value* src, llvm::Value* kc, llvm::Value* cols) {
    const std::int64_t nr = tile_.cols();
    const DType dtype = b_spec_.dtype;
    llvm::Value* full_rows = b_.CreateAnd(b_.CreateICmpEQ(cols, i64(nr)), b_.CreateICmpEQ(b_col_, i64(1)));
    ir::emitIfElse(
        b_, full_rows,
        [&] {
          // Row-major panel: NR/16 vector loads per k.
          ir::emitLoop(
              b_, i64(0), kc, 1,
              [&](llvm::Value* p) {
                llvm::Value* row = b_.CreateAdd(src, b_.CreateMul(p, b_row_));
                for (int v = 0; v < tile_.vectors; ++v) {
                  llvm::Value* x = ir::loadCompute(
                      b_, dtype, ir::elementPtr(b_, dtype, b_ptr_, b_.CreateAdd(row, i64(v * kLanes))), kLanes);
                  llvm::StoreInst* store =
                      b_.CreateStore(x, packPtr(b_.CreateAdd(b_.CreateMul(p, i64(nr)), i64(v * kLanes))));
                  store->setAlignment(llvm::Align(64));
                }
              },
              "pk", kAsEmitted);
        },
        [&] {
          // Any layout: column by column (a transposed B reads each column contiguously).
          ir::emitLoop(
              b_, i64(0), cols, 1,
              [&](llvm::Value* j) {
                llvm::Value* column = b_.CreateAdd(src, b_.CreateMul(j, b_col_));
                ir::emitLoop(
                    b_, i64(0), kc, 1,
                    [&](llvm::Value* p) {
                      llvm::Value* x = ir::loadCompute(
                          b_, dtype, ir::elementPtr(b_, dtype, b_ptr_, b_.CreateAdd(column, b_.CreateMul(p, b_row_))));
                      b_.CreateStore(x, packPtr(b_.CreateAdd(b_.CreateMul(p, i64(nr)), j)));
                    },
                    "pp", kAsEmitted);
              },
              "pj", kAsEmitted);
          ir::emitLoop(
              b_, cols, i64(nr), 1,
              [&](llvm::Value* j) {
                ir::emitLoop(
                    b_, i64(0), kc, 1,
                    [&](llvm::Value* p) {
                      b_.CreateStore(llvm::ConstantFP::get(b_.getFloatTy(), 0.0),
                                     packPtr(b_.CreateAdd(b_.CreateMul(p, i64(nr)), j)));
                    },
                    "pz", kAsEmitted);
              },
              "pzj", kAsEmitted);
        });
  }

  llvm::Value* cPtr(llvm::Value* offset) { return ir::elementPtr(b_, out_dtype_, c_, offset); }

  // C[it .. it+MR, jt .. jt+cols] (+)= A[it.., block] @ pack. With `valid_rows` (the M tail),
  // rows from valid_rows on read row `it` again (in bounds; results dropped) and store nothing.
  void emitTile(llvm::Value* it, llvm::Value* a_block, llvm::Value* c_block, llvm::Value* kc, llvm::Value* cols,
                llvm::Value* first, llvm::Value* valid_rows) {
    const int rows = tile_.rows;
    const int vectors = tile_.vectors;
    const std::int64_t nr = tile_.cols();
    llvm::Type* fvec = vecType();
    auto acc = [&](int r, int v) { return acc_[static_cast<std::size_t>(r * vectors + v)]; };
    // C row r of the tile starts at c_row[r].
    std::vector<llvm::Value*> c_row, a_row;
    auto valid = [&](int r) -> llvm::Value* {
      return valid_rows == nullptr || r == 0 ? nullptr : b_.CreateICmpSLT(i64(r), valid_rows);
    };
    for (int r = 0; r < rows; ++r) {
      llvm::Value* row = b_.CreateAdd(it, i64(r));
      if (llvm::Value* ok = valid(r)) row = b_.CreateSelect(ok, row, it);
      c_row.push_back(b_.CreateAdd(c_block, b_.CreateMul(row, n_)));
      a_row.push_back(b_.CreateAdd(a_block, b_.CreateMul(row, a_row_)));
    }
    // Stores of row r: unconditional, or only when the row is in the matrix.
    auto guarded = [&](int r, const std::function<void()>& body) {
      if (llvm::Value* ok = valid(r)) {
        ir::emitIfElse(b_, ok, body, [] {});
      } else {
        body();
      }
    };
    llvm::Value* full = b_.CreateICmpEQ(cols, i64(nr));
    auto edgePtr = [&](int r, llvm::Value* j) {
      return b_.CreateInBoundsGEP(b_.getFloatTy(), edge_, b_.CreateAdd(i64(r * nr), j));
    };
    // Accumulators: zero on the first K block, else C.
    ir::emitIfElse(
        b_, first,
        [&] {
          for (int r = 0; r < rows; ++r) {
            for (int v = 0; v < vectors; ++v) b_.CreateStore(llvm::Constant::getNullValue(fvec), acc(r, v));
          }
        },
        [&] {
          ir::emitIfElse(
              b_, full,
              [&] {
                for (int r = 0; r < rows; ++r) {
                  for (int v = 0; v < vectors; ++v) {
                    b_.CreateStore(ir::loadCompute(
                                       b_, out_dtype_,
                                       cPtr(b_.CreateAdd(c_row[static_cast<std::size_t>(r)], i64(v * kLanes))), kLanes),
                                   acc(r, v));
                  }
                }
              },
              [&] {
                for (int r = 0; r < rows; ++r) {
                  ir::emitLoop(
                      b_, i64(0), cols, 1,
                      [&](llvm::Value* j) {
                        b_.CreateStore(
                            ir::loadCompute(b_, out_dtype_, cPtr(b_.CreateAdd(c_row[static_cast<std::size_t>(r)], j))),
                            edgePtr(r, j));
                      },
                      "el", kAsEmitted);
                  for (int v = 0; v < vectors; ++v) {
                    llvm::LoadInst* x = b_.CreateLoad(fvec, edgePtr(r, i64(v * kLanes)));
                    x->setAlignment(llvm::Align(64));
                    b_.CreateStore(x, acc(r, v));
                  }
                }
              });
        });
    // The K loop.
    const DType a_dtype = a_spec_.dtype;
    ir::emitLoop(
        b_, i64(0), kc, 1,
        [&](llvm::Value* p) {
          std::vector<llvm::Value*> bv;
          for (int v = 0; v < vectors; ++v) {
            llvm::LoadInst* x = b_.CreateLoad(fvec, packPtr(b_.CreateAdd(b_.CreateMul(p, i64(nr)), i64(v * kLanes))));
            x->setAlignment(llvm::Align(64));
            bv.push_back(x);
          }
          llvm::Value* a_step = b_.CreateMul(p, a_col_);
          for (int r = 0; r < rows; ++r) {
            llvm::Value* a = ir::loadCompute(
                b_, a_dtype, ir::elementPtr(b_, a_dtype, a_, b_.CreateAdd(a_row[static_cast<std::size_t>(r)], a_step)));
            llvm::Value* a_splat = b_.CreateVectorSplat(kLanes, a);
            for (int v = 0; v < vectors; ++v) {
              llvm::Value* sum =
                  b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {fvec},
                                     {a_splat, bv[static_cast<std::size_t>(v)], b_.CreateLoad(fvec, acc(r, v))});
              b_.CreateStore(sum, acc(r, v));
            }
          }
        },
        "k", kAsEmitted);
    // Store.
    ir::emitIfElse(
        b_, full,
        [&] {
          for (int r = 0; r < rows; ++r) {
            std::vector<llvm::Value*> values;
            for (int v = 0; v < vectors; ++v) values.push_back(b_.CreateLoad(fvec, acc(r, v)));
            guarded(r, [&] {
              for (int v = 0; v < vectors; ++v) {
                ir::storeCompute(b_, out_dtype_, values[static_cast<std::size_t>(v)],
                                 cPtr(b_.CreateAdd(c_row[static_cast<std::size_t>(r)], i64(v * kLanes))));
              }
            });
          }
        },
        [&] {
          for (int r = 0; r < rows; ++r) {
            for (int v = 0; v < vectors; ++v) {
              llvm::StoreInst* store = b_.CreateStore(b_.CreateLoad(fvec, acc(r, v)), edgePtr(r, i64(v * kLanes)));
              store->setAlignment(llvm::Align(64));
            }
            guarded(r, [&] {
              ir::emitLoop(
                  b_, i64(0), cols, 1,
                  [&](llvm::Value* j) {
                    llvm::Value* x = b_.CreateLoad(b_.getFloatTy(), edgePtr(r, j));
                    ir::storeCompute(b_, out_dtype_, x, cPtr(b_.CreateAdd(c_row[static_cast<std::size_t>(r)], j)));
                  },
                  "es", kAsEmitted);
            });
          }
        });
  }

  Builder& b_;
  const OperandSpec& a_spec_;
  const OperandSpec& b_spec_;
  DType out_dtype_;
  MatmulDims dims_;
  TileShape tile_;
  llvm::Value* a_ = nullptr;
  llvm::Value* b_ptr_ = nullptr;
  llvm::Value* c_ = nullptr;
  llvm::Value* m_ = nullptr;
  llvm::Value* k_ = nullptr;
  llvm::Value* n_ = nullptr;
  llvm::Value* a_row_ = nullptr;
  llvm::Value* a_col_ = nullptr;
  llvm::Value* b_row_ = nullptr;
  llvm::Value* b_col_ = nullptr;
  llvm::AllocaInst* pack_ = nullptr;
  llvm::AllocaInst* edge_ = nullptr;
  std::vector<llvm::AllocaInst*> acc_;      // tile accumulators (the dot path uses the first 4)
  std::vector<llvm::AllocaInst*> dot_sum_;  // dot path: scalar sums
};

// ---- the family ----

class MatmulFamily final : public KernelFamily {
 public:
  std::string_view name() const override { return "matmul"; }

  Status supports(const KernelSpec& spec) const override {
    if (spec.op != OpId::MatMul) return makeError(ErrorCode::Unsupported, "the matmul family compiles matmul only");
    if (spec.inputs.size() != 2 || !spec.inputs[0].is_tensor || !spec.inputs[1].is_tensor) {
      return makeError(ErrorCode::Unsupported, "matmul kernels take two tensor operands");
    }
    const OperandSpec& a = spec.inputs[0];
    const OperandSpec& b = spec.inputs[1];
    if (!isComputeFloat(a.dtype) || !isComputeFloat(b.dtype)) {
      return makeError(
          ErrorCode::Unsupported,
          "matmul kernels are compiled for float32/float16/bfloat16 operands only; {} x {} stays interpreted",
          dtypeName(a.dtype), dtypeName(b.dtype));
    }
    if (a.rank < 1 || b.rank < 1 || a.rank > kMaxBatchRank + 2 || b.rank > kMaxBatchRank + 2) {
      return makeError(ErrorCode::Unsupported, "matmul kernels take operands of rank 1..{}, got {} and {}",
                       kMaxBatchRank + 2, a.rank, b.rank);
    }
    const std::int64_t ka = a.dims[a.rank - 1].size;
    const DimSpec& kb_dim = b.dims[b.rank == 1 ? 0 : b.rank - 2];
    if (ka >= 0 && kb_dim.isStatic() && ka != kb_dim.size) {
      return makeError(ErrorCode::ShapeMismatch, "matmul contracting dims differ: {} vs {}", ka, kb_dim.size);
    }
    return Status::ok();
  }

  Status outputs(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                 std::span<Shape> shapes) const override {
    SVM_ASSIGN_OR_RETURN(Geometry g, geometry(spec, inputs));
    dtypes[0] = promoteTypes(g.a->dtype(), g.b->dtype());
    Shape out = g.batch;
    if (g.a->rank() >= 2) out.push_back(g.left.rows);
    if (g.b->rank() >= 2) out.push_back(g.right.cols);
    shapes[0] = out;
    return Status::ok();
  }

  Status prepare(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<const Tensor>,
                 KernelArgs& args) const override {
    SVM_ASSIGN_OR_RETURN(Geometry g, geometry(spec, inputs));
    // Canonical [batch0, batch1, rows, cols] views; batch dims right-aligned, stride 0 where broadcast.
    const int nb = g.batch.rank();
    const MatrixView* views[2] = {&g.left, &g.right};
    const int slots[2] = {kSlotA, kSlotB};
    for (int o = 0; o < 2; ++o) {
      const MatrixView& view = *views[o];
      std::int64_t* shape = args.shape[slots[o]];
      std::int64_t* strides = args.strides[slots[o]];
      const int lead = nb - view.batch.rank();
      for (int d = 0; d < kMaxBatchRank; ++d) {
        const int out_axis = d - (kMaxBatchRank - nb);  // axis in the broadcast batch shape
        shape[d] = out_axis >= 0 ? g.batch[out_axis] : 1;
        const int own = out_axis - lead;  // axis in this operand's batch shape
        strides[d] = own >= 0 && view.batch[own] != 1 ? view.batch_strides[own] : 0;
      }
      shape[2] = view.rows;
      shape[3] = view.cols;
      strides[2] = view.row_stride;
      strides[3] = view.col_stride;
    }
    return Status::ok();
  }

  Status emit(const KernelSpec& spec, llvm::Module& module, const std::string& symbol) const override {
    SVM_RETURN_IF_ERROR(supports(spec));
    Builder b(module.getContext());
    llvm::Function* function = ir::beginKernel(module, symbol, b);
    MatmulEmitter emitter(b, spec, promoteTypes(spec.inputs[0].dtype, spec.inputs[1].dtype));
    emitter.emit(function->getArg(0));
    return Status::ok();
  }

  // e.g. "matmul_f32_Mdyn_K128_N1024", "matmul_bf16_b2_M17_K9_N11_Bstrided", "matmul_f32f16_Mvec_K9_Ndyn".
  std::string symbolStem(const KernelSpec& spec) const override {
    if (spec.op != OpId::MatMul || spec.inputs.size() != 2) return KernelFamily::symbolStem(spec);
    const OperandSpec& a = spec.inputs[0];
    const OperandSpec& b = spec.inputs[1];
    std::string stem = fmt::format("matmul_{}", dtypeShortName(a.dtype));
    if (b.dtype != a.dtype) stem += dtypeShortName(b.dtype);
    const int batch_rank = std::max(a.rank, b.rank) - 2;
    if (batch_rank > 0) stem += fmt::format("_b{}", batch_rank);
    const MatmulDims dims = staticDims(spec);
    auto text = [](std::int64_t v) { return v >= 0 ? std::to_string(v) : std::string("dyn"); };
    stem += "_M" + (a.rank == 1 ? std::string("vec") : text(dims.m));
    stem += "_K" + text(dims.k);
    stem += "_N" + (b.rank == 1 ? std::string("vec") : text(dims.n));
    if (!a.contiguous) stem += "_Astrided";
    if (!b.contiguous) stem += "_Bstrided";
    return stem;
  }

 private:
  struct Geometry {
    const Tensor* a;
    const Tensor* b;
    MatrixView left, right;
    Shape batch;
  };

  static Expected<Geometry> geometry(const KernelSpec& spec, std::span<const Value* const> inputs) {
    if (spec.inputs.size() != 2 || inputs.size() != 2 || inputs[0] == nullptr || inputs[1] == nullptr ||
        !inputs[0]->isTensor() || !inputs[1]->isTensor()) {
      return makeError(ErrorCode::Unsupported, "matmul kernels take two tensor operands");
    }
    Geometry g{&inputs[0]->tensor(), &inputs[1]->tensor(), {}, {}, {}};
    SVM_RETURN_IF_ERROR(checkFits(spec.inputs[0], *g.a, "a"));
    SVM_RETURN_IF_ERROR(checkFits(spec.inputs[1], *g.b, "b"));
    g.left = viewOf(*g.a, true);
    g.right = viewOf(*g.b, false);
    if (g.left.cols != g.right.rows) {
      return makeError(ErrorCode::ShapeMismatch, "matmul contracting dims differ: {} vs {}", g.left.cols, g.right.rows);
    }
    SVM_ASSIGN_OR_RETURN(g.batch, broadcastShapes(g.left.batch, g.right.batch));
    if (g.batch.rank() > kMaxBatchRank) return makeError(ErrorCode::Unsupported, "matmul: too many batch dims");
    return g;
  }
};

}  // namespace

const KernelFamily* matmulFamily(OpId op) {
  static const MatmulFamily family;
  return op == OpId::MatMul ? &family : nullptr;
}

}  // namespace shapevm::jit
