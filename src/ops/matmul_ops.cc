// SPDX-License-Identifier: Apache-2.0
// Reference matmul with numpy semantics (1-D operands promoted then the added dim removed; batch
// dims broadcast). Float inputs compute in float32 (float64 in float64), integer and bool inputs
// in wrapping 64-bit integers. Operands of any strides and dtypes are packed into panels (and
// converted) per cache block; an MR x NR register-blocked micro-kernel runs on them, with an
// AVX2 build picked at run time. Results do not depend on the ISA: no FMA contraction and the
// same summation order per element.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/kernel_util.h"
#include "ops/registry.h"

namespace shapevm {
namespace {

// Cache blocking: a KC x NC panel of B stays in L2/L3, an MC x KC panel of A in L2.
constexpr std::int64_t kBlockK = 256;
constexpr std::int64_t kBlockM = 96;
constexpr std::int64_t kBlockN = 1024;

template <typename C>
struct MicroShape {
  static constexpr int kLanes = 32 / static_cast<int>(sizeof(C));  // one 256-bit vector
  static constexpr int kRows = 6;                                  // MR
  static constexpr int kCols = 2 * kLanes;                         // NR
};

// tile[MR x NR] = sum over p < kc of a_panel[p][r] * b_panel[p][j], in groups of two vectors of
// kVecBytes across the NR columns so the accumulators stay in registers (16-byte SSE2 vectors
// take two groups, 32-byte AVX2 vectors one). Each element sums over p in the same order either way.
template <typename C, int kVecBytes>
[[gnu::always_inline]] inline void microKernelBody(std::int64_t kc, const C* a_panel, const C* b_panel, C* tile) {
  using Micro = MicroShape<C>;
  typedef C Vec __attribute__((vector_size(kVecBytes)));
  constexpr int kVecLanes = kVecBytes / static_cast<int>(sizeof(C));
  constexpr int kGroups = Micro::kCols / (2 * kVecLanes);
  for (int group = 0; group < kGroups; ++group) {
    const C* b_group = b_panel + group * 2 * kVecLanes;
    Vec acc[Micro::kRows][2] = {};
    for (std::int64_t p = 0; p < kc; ++p) {
      Vec b0, b1;
      std::memcpy(&b0, b_group + p * Micro::kCols, sizeof(Vec));
      std::memcpy(&b1, b_group + p * Micro::kCols + kVecLanes, sizeof(Vec));
      const C* a = a_panel + p * Micro::kRows;
#pragma GCC unroll 8
      for (int r = 0; r < Micro::kRows; ++r) {
        acc[r][0] += b0 * a[r];
        acc[r][1] += b1 * a[r];
      }
    }
    for (int r = 0; r < Micro::kRows; ++r) {
      std::memcpy(tile + r * Micro::kCols + group * 2 * kVecLanes, &acc[r][0], 2 * sizeof(Vec));
    }
  }
}

template <typename C>
void microKernelPortable(std::int64_t kc, const C* a_panel, const C* b_panel, C* tile) {
  microKernelBody<C, 16>(kc, a_panel, b_panel, tile);
}

template <typename C>
[[gnu::target("avx2")]] void microKernelAvx2(std::int64_t kc, const C* a_panel, const C* b_panel, C* tile) {
  microKernelBody<C, 32>(kc, a_panel, b_panel, tile);
}

template <typename C>
using MicroKernelFn = void (*)(std::int64_t, const C*, const C*, C*);

template <typename C>
MicroKernelFn<C> pickMicroKernel() {
  static const bool has_avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has_avx2 ? &microKernelAvx2<C> : &microKernelPortable<C>;
}

// Copies an operand block into panels of W along `u` (rows of A, columns of B):
// dst[(u / W) * kc * W + p * W + u % W] = X[u, p], zero-padded to a multiple of W.
template <typename C, int W, typename S, typename Load>
void packTyped(const S* base, std::int64_t u_stride, std::int64_t p_stride, std::int64_t u_count, std::int64_t kc,
               C* dst, Load load) {
  for (std::int64_t u0 = 0; u0 < u_count; u0 += W) {
    const std::int64_t width = std::min<std::int64_t>(W, u_count - u0);
    for (std::int64_t p = 0; p < kc; ++p) {
      const S* src = base + u0 * u_stride + p * p_stride;
      for (std::int64_t u = 0; u < width; ++u) dst[u] = load(src[u * u_stride]);
      for (std::int64_t u = width; u < W; ++u) dst[u] = C(0);
      dst += W;
    }
  }
}

template <typename C, int W>
void packPanels(DType dtype, const void* base, std::int64_t u_stride, std::int64_t p_stride, std::int64_t u_count,
                std::int64_t kc, C* dst) {
  switch (dtype) {
    case DType::Float32:
      packTyped<C, W>(static_cast<const float*>(base), u_stride, p_stride, u_count, kc, dst,
                      [](float v) { return static_cast<C>(v); });
      break;
    case DType::Float16:
      packTyped<C, W>(static_cast<const std::uint16_t*>(base), u_stride, p_stride, u_count, kc, dst,
                      [](std::uint16_t v) { return static_cast<C>(halfToFloat(v)); });
      break;
    case DType::BFloat16:
      packTyped<C, W>(static_cast<const std::uint16_t*>(base), u_stride, p_stride, u_count, kc, dst,
                      [](std::uint16_t v) { return static_cast<C>(bf16ToFloat(v)); });
      break;
    case DType::Float64:
      packTyped<C, W>(static_cast<const double*>(base), u_stride, p_stride, u_count, kc, dst,
                      [](double v) { return static_cast<C>(v); });
      break;
    case DType::Int32:
      packTyped<C, W>(static_cast<const std::int32_t*>(base), u_stride, p_stride, u_count, kc, dst,
                      [](std::int32_t v) { return static_cast<C>(v); });
      break;
    case DType::Int64:
      packTyped<C, W>(static_cast<const std::int64_t*>(base), u_stride, p_stride, u_count, kc, dst,
                      [](std::int64_t v) { return static_cast<C>(v); });
      break;
    case DType::Bool:
      packTyped<C, W>(static_cast<const bool*>(base), u_stride, p_stride, u_count, kc, dst,
                      [](bool v) { return static_cast<C>(v ? 1 : 0); });
      break;
  }
}

// One matrix of an operand: element (row, col) at base + row * row_stride + col * col_stride.
struct MatrixRef {
  DType dtype;
  const char* base;
  std::int64_t row_stride;
  std::int64_t col_stride;
};

const char* elementAddress(DType dtype, const char* base, std::int64_t offset) {
  return base + offset * static_cast<std::int64_t>(dtypeSize(dtype));
}

// out[M x N] (row-major, leading dim N) = A[M x K] * B[K x N].
template <typename C>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, const MatrixRef& a, const MatrixRef& b, C* out, C* a_buffer,
          C* b_buffer) {
  using Micro = MicroShape<C>;
  constexpr int kRows = Micro::kRows;
  constexpr int kCols = Micro::kCols;
  if (k == 0) {
    std::fill(out, out + m * n, C(0));
    return;
  }
  const MicroKernelFn<C> micro = pickMicroKernel<C>();
  alignas(64) C tile[kRows * kCols];
  for (std::int64_t jc = 0; jc < n; jc += kBlockN) {
    const std::int64_t nc = std::min(kBlockN, n - jc);
    for (std::int64_t pc = 0; pc < k; pc += kBlockK) {
      const std::int64_t kc = std::min(kBlockK, k - pc);
      packPanels<C, kCols>(b.dtype, elementAddress(b.dtype, b.base, pc * b.row_stride + jc * b.col_stride),
                           b.col_stride, b.row_stride, nc, kc, b_buffer);
      for (std::int64_t ic = 0; ic < m; ic += kBlockM) {
        const std::int64_t mc = std::min(kBlockM, m - ic);
        packPanels<C, kRows>(a.dtype, elementAddress(a.dtype, a.base, ic * a.row_stride + pc * a.col_stride),
                             a.row_stride, a.col_stride, mc, kc, a_buffer);
        for (std::int64_t jr = 0; jr < nc; jr += kCols) {
          const std::int64_t cols = std::min<std::int64_t>(kCols, nc - jr);
          for (std::int64_t ir = 0; ir < mc; ir += kRows) {
            const std::int64_t rows = std::min<std::int64_t>(kRows, mc - ir);
            micro(kc, a_buffer + ir * kc, b_buffer + jr * kc, tile);
            C* dst = out + (ic + ir) * n + jc + jr;
            for (std::int64_t r = 0; r < rows; ++r) {
              const C* src = tile + r * kCols;
              C* row = dst + r * n;
              if (pc == 0) {
                for (std::int64_t j = 0; j < cols; ++j) row[j] = src[j];
              } else {
                for (std::int64_t j = 0; j < cols; ++j) row[j] += src[j];
              }
            }
          }
        }
      }
    }
  }
}

// An operand seen as a batch of matrices: rank >= 2 after 1-D promotion.
struct Operand {
  const Tensor* tensor;
  std::int64_t rows, cols, row_stride, col_stride;
  Shape batch_shape;
  Shape batch_strides;
};

Operand describeOperand(const Tensor& t, bool is_left) {
  Operand op{&t, 0, 0, 0, 0, Shape{}, Shape{}};
  const int r = t.rank();
  if (r == 1) {
    // a: [K] -> [1, K]; b: [K] -> [K, 1].
    if (is_left) {
      op.rows = 1, op.cols = t.dim(0), op.row_stride = 0, op.col_stride = t.stride(0);
    } else {
      op.rows = t.dim(0), op.cols = 1, op.row_stride = t.stride(0), op.col_stride = 0;
    }
    return op;
  }
  op.rows = t.dim(r - 2), op.cols = t.dim(r - 1);
  op.row_stride = t.stride(r - 2), op.col_stride = t.stride(r - 1);
  for (int i = 0; i < r - 2; ++i) {
    op.batch_shape.push_back(t.dim(i));
    op.batch_strides.push_back(t.stride(i));
  }
  return op;
}

// Strides reading `op`'s batch dims as `batch` (right-aligned; 0 where broadcast).
Shape batchStrides(const Operand& op, const Shape& batch) {
  Shape strides;
  strides.resize(batch.rank());
  const int lead = batch.rank() - op.batch_shape.rank();
  for (int i = lead; i < batch.rank(); ++i) {
    strides[i] = op.batch_shape[i - lead] == 1 ? 0 : op.batch_strides[i - lead];
  }
  return strides;
}

// A packing buffer from the caching allocator rather than a std::vector: not zeroed (the packing
// writes every element it reads), and on a JIT thread (a validation's reference call) it comes from
// the allocator's scratch area, whose pages are already faulted in: a fresh B panel buffer (up to
// 1 MiB) faulted in on every call was most of validating a matmul kernel.
template <typename C>
class PackBuffer {
 public:
  ~PackBuffer() { CachingAllocator::global().free(data_, capacity_); }
  Status allocate(std::size_t elements) {
    SVM_ASSIGN_OR_RETURN(
        void* block, CachingAllocator::global().allocate(std::max<std::size_t>(1, elements) * sizeof(C), &capacity_));
    data_ = static_cast<C*>(block);
    return Status::ok();
  }
  C* data() const { return data_; }

 private:
  C* data_ = nullptr;
  std::size_t capacity_ = 0;
};

template <typename C>
Status runMatmul(const Operand& a, const Operand& b, const Shape& batch, Tensor& out) {
  const std::int64_t m = a.rows, n = b.cols, k = a.cols;
  const std::int64_t batch_count = batch.numel();
  if (batch_count == 0 || m == 0 || n == 0) return Status::ok();
  const Shape a_strides = batchStrides(a, batch);
  const Shape b_strides = batchStrides(b, batch);
  const DType out_dtype = out.dtype();
  // float32/float64 results are written in place; other dtypes go through a compute buffer.
  const bool direct = (std::is_same_v<C, float> && out_dtype == DType::Float32) ||
                      (std::is_same_v<C, double> && out_dtype == DType::Float64);
  std::vector<C> staging(direct ? 0 : static_cast<std::size_t>(m * n));
  PackBuffer<C> a_buffer, b_buffer;
  SVM_RETURN_IF_ERROR(
      a_buffer.allocate(static_cast<std::size_t>((std::min(kBlockM, m) + MicroShape<C>::kRows - 1) /
                                                 MicroShape<C>::kRows * MicroShape<C>::kRows * std::min(kBlockK, k))));
  SVM_RETURN_IF_ERROR(
      b_buffer.allocate(static_cast<std::size_t>((std::min(kBlockN, n) + MicroShape<C>::kCols - 1) /
                                                 MicroShape<C>::kCols * MicroShape<C>::kCols * std::min(kBlockK, k))));
  const char* a_storage = static_cast<const char*>(a.tensor->storage()->data());
  const char* b_storage = static_cast<const char*>(b.tensor->storage()->data());
  std::int64_t index[kMaxRank] = {};
  for (std::int64_t batch_index = 0; batch_index < batch_count; ++batch_index) {
    std::int64_t a_offset = a.tensor->offset(), b_offset = b.tensor->offset();
    for (int d = 0; d < batch.rank(); ++d) {
      a_offset += index[d] * a_strides[d];
      b_offset += index[d] * b_strides[d];
    }
    const MatrixRef a_ref{a.tensor->dtype(), elementAddress(a.tensor->dtype(), a_storage, a_offset), a.row_stride,
                          a.col_stride};
    const MatrixRef b_ref{b.tensor->dtype(), elementAddress(b.tensor->dtype(), b_storage, b_offset), b.row_stride,
                          b.col_stride};
    if (direct) {
      C* dst = static_cast<C*>(out.rawData()) + batch_index * m * n;
      gemm<C>(m, n, k, a_ref, b_ref, dst, a_buffer.data(), b_buffer.data());
    } else {
      gemm<C>(m, n, k, a_ref, b_ref, staging.data(), a_buffer.data(), b_buffer.data());
      const std::int64_t base = batch_index * m * n;
      for (std::int64_t i = 0; i < m * n; ++i) {
        const C v = staging[static_cast<std::size_t>(i)];
        switch (out_dtype) {
          case DType::Float32:
            out.data<float>()[base + i] = static_cast<float>(v);
            break;
          case DType::Float64:
            out.data<double>()[base + i] = static_cast<double>(v);
            break;
          case DType::Float16:
            out.data<std::uint16_t>()[base + i] = floatToHalf(static_cast<float>(v));
            break;
          case DType::BFloat16:
            out.data<std::uint16_t>()[base + i] = floatToBf16(static_cast<float>(v));
            break;
          case DType::Int32:
            out.data<std::int32_t>()[base + i] = static_cast<std::int32_t>(v);
            break;  // wraps
          case DType::Int64:
            out.data<std::int64_t>()[base + i] = static_cast<std::int64_t>(v);
            break;
          case DType::Bool:
            out.data<bool>()[base + i] = v != C(0);
            break;
        }
      }
    }
    for (int d = batch.rank() - 1; d >= 0; --d) {
      if (++index[d] < batch[d]) break;
      index[d] = 0;
    }
  }
  return Status::ok();
}

Status matmulKernel(OpContext& ctx) {
  const Tensor a = tensorArg(*ctx.inputs[0]);
  const Tensor b = tensorArg(*ctx.inputs[1]);
  if (a.rank() == 0 || b.rank() == 0) {
    return makeError(ErrorCode::ShapeMismatch, "matmul needs operands of rank >= 1, got shapes {} and {}",
                     a.shape().toString(), b.shape().toString());
  }
  const Operand left = describeOperand(a, true);
  const Operand right = describeOperand(b, false);
  if (left.cols != right.rows) {
    return makeError(ErrorCode::ShapeMismatch,
                     "matmul contracting dims differ: a {} has {} on axis -1 but b {} has {} on axis {}",
                     a.shape().toString(), left.cols, b.shape().toString(), right.rows, b.rank() == 1 ? -1 : -2);
  }
  auto batch = broadcastShapes(left.batch_shape, right.batch_shape);
  if (!batch) {
    return makeError(ErrorCode::ShapeMismatch, "matmul batch dims of {} and {} cannot be broadcast: {}",
                     a.shape().toString(), b.shape().toString(), batch.status().message());
  }
  Shape out_shape = *batch;
  if (a.rank() >= 2) out_shape.push_back(left.rows);
  if (b.rank() >= 2) out_shape.push_back(right.cols);
  const DType out_dtype = promoteTypes(a.dtype(), b.dtype());
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(out_dtype, out_shape));
  Status status;
  switch (out_dtype) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
      status = runMatmul<float>(left, right, *batch, out);
      break;
    case DType::Float64:
      status = runMatmul<double>(left, right, *batch, out);
      break;
    case DType::Int32:
    case DType::Int64:
    case DType::Bool:
      status = runMatmul<std::uint64_t>(left, right, *batch, out);
      break;
  }
  SVM_RETURN_IF_ERROR(std::move(status));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

}  // namespace

void registerMatmulKernels(OpRegistry& registry) {
  registry.registerKernel(OpId::MatMul, KernelPattern{}, &matmulKernel, "matmul.generic");
}

}  // namespace shapevm
