// SPDX-License-Identifier: Apache-2.0
// Reference kernels of the elementwise family (binary and unary math, comparisons, logical ops,
// where, cast, add_n, identity, contiguous): numpy broadcasting over any strides, float16 and
// bfloat16 computed in float32. Integer arithmetic wraps (two's complement) and never reaches
// undefined behaviour; integer division by zero is an InvalidArgument error. Contiguous float32
// calls take specialized entries whose loops the compiler vectorizes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/fast_activation.h"
#include "ops/kernel_util.h"
#include "ops/registry.h"

namespace shapevm {
namespace {

// ---- element traits: storage type, compute type, load/store ----

struct Float32Traits {
  using Storage = float;
  using Compute = float;
  static Compute load(Storage v) { return v; }
  static Storage store(Compute v) { return v; }
};
struct Float16Traits {
  using Storage = std::uint16_t;
  using Compute = float;
  static Compute load(Storage v) { return halfToFloat(v); }
  static Storage store(Compute v) { return floatToHalf(v); }
};
struct BFloat16Traits {
  using Storage = std::uint16_t;
  using Compute = float;
  static Compute load(Storage v) { return bf16ToFloat(v); }
  static Storage store(Compute v) { return floatToBf16(v); }
};
struct Float64Traits {
  using Storage = double;
  using Compute = double;
  static Compute load(Storage v) { return v; }
  static Storage store(Compute v) { return v; }
};
struct Int32Traits {
  using Storage = std::int32_t;
  using Compute = std::int32_t;
  static Compute load(Storage v) { return v; }
  static Storage store(Compute v) { return v; }
};
struct Int64Traits {
  using Storage = std::int64_t;
  using Compute = std::int64_t;
  static Compute load(Storage v) { return v; }
  static Storage store(Compute v) { return v; }
};
struct BoolTraits {
  using Storage = bool;
  using Compute = bool;
  static Compute load(Storage v) { return v; }
  static Storage store(Compute v) { return v; }
};

// Calls f(Traits{}) for the traits of `dtype`.
template <typename F>
auto dispatchDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      return f(Float32Traits{});
    case DType::Float16:
      return f(Float16Traits{});
    case DType::BFloat16:
      return f(BFloat16Traits{});
    case DType::Float64:
      return f(Float64Traits{});
    case DType::Int32:
      return f(Int32Traits{});
    case DType::Int64:
      return f(Int64Traits{});
    case DType::Bool:
      return f(BoolTraits{});
  }
  return f(BoolTraits{});
}

// ---- strided loop nest: coalesced dims, innermost dim walked as a run ----

template <int N>
struct LoopNest {
  int rank = 0;
  std::int64_t extent[kMaxRank] = {};
  std::int64_t stride[N][kMaxRank] = {};
};

// Drops unit dims and merges adjacent dims that are contiguous with each other in every operand.
template <int N>
LoopNest<N> makeLoopNest(const Shape& shape, const Shape* const (&strides)[N]) {
  LoopNest<N> nest;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    if (nest.rank > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k) {
        if (nest.stride[k][nest.rank - 1] != (*strides[k])[d] * shape[d]) mergeable = false;
      }
      if (mergeable) {
        nest.extent[nest.rank - 1] *= shape[d];
        for (int k = 0; k < N; ++k) nest.stride[k][nest.rank - 1] = (*strides[k])[d];
        continue;
      }
    }
    nest.extent[nest.rank] = shape[d];
    for (int k = 0; k < N; ++k) nest.stride[k][nest.rank] = (*strides[k])[d];
    ++nest.rank;
  }
  return nest;
}

// Calls run(offsets, count, inner_strides) once per innermost run; offsets are in elements and
// start at `base`. The caller skips empty shapes.
template <int N, typename Run>
void walkLoopNest(const LoopNest<N>& nest, const std::int64_t (&base)[N], Run&& run) {
  std::int64_t offsets[N];
  std::int64_t inner_strides[N];
  for (int k = 0; k < N; ++k) offsets[k] = base[k];
  if (nest.rank == 0) {
    for (int k = 0; k < N; ++k) inner_strides[k] = 0;
    run(static_cast<const std::int64_t*>(offsets), std::int64_t{1}, static_cast<const std::int64_t*>(inner_strides));
    return;
  }
  const int inner = nest.rank - 1;
  for (int k = 0; k < N; ++k) inner_strides[k] = nest.stride[k][inner];
  std::int64_t index[kMaxRank] = {};
  while (true) {
    run(static_cast<const std::int64_t*>(offsets), nest.extent[inner], static_cast<const std::int64_t*>(inner_strides));
    int d = inner - 1;
    for (; d >= 0; --d) {
      if (++index[d] < nest.extent[d]) {
        for (int k = 0; k < N; ++k) offsets[k] += nest.stride[k][d];
        break;
      }
      index[d] = 0;
      for (int k = 0; k < N; ++k) offsets[k] -= nest.stride[k][d] * (nest.extent[d] - 1);
    }
    if (d < 0) return;
  }
}

template <typename T>
const T* storageBase(const Tensor& t) {
  return static_cast<const T*>(t.storage()->data());
}

// ---- scalar element functions ----

enum class BinaryKind {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Maximum,
  Minimum,
  Equal,
  NotEqual,
  Less,
  LessEqual,
  Greater,
  GreaterEqual,
  LogicalAnd,
  LogicalOr,
};

constexpr bool isComparison(BinaryKind k) {
  return k >= BinaryKind::Equal && k <= BinaryKind::GreaterEqual;
}
constexpr bool isLogical(BinaryKind k) {
  return k == BinaryKind::LogicalAnd || k == BinaryKind::LogicalOr;
}
constexpr bool allowsBoolOperands(BinaryKind k) {
  return k != BinaryKind::Sub && k != BinaryKind::Div && k != BinaryKind::Pow;
}

template <typename T>
constexpr bool kIsWrappingInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <typename T>
inline T wrapAdd(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else if constexpr (kIsWrappingInt<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename T>
inline T wrapSub(T a, T b) {
  if constexpr (kIsWrappingInt<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return static_cast<T>(a - b);
  }
}
template <typename T>
inline T wrapMul(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a && b;
  } else if constexpr (kIsWrappingInt<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}
template <typename T>
inline T wrapNeg(T a) {
  if constexpr (kIsWrappingInt<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(U{0} - static_cast<U>(a));
  } else {
    return static_cast<T>(-a);
  }
}

// Integer division truncating toward zero; MIN / -1 wraps to MIN. Zero divisors are rejected
// before the loop runs (the 0 here only keeps the function total).
template <typename T>
inline T integerDivide(T a, T b) {
  if (b == 0) return 0;
  if (b == -1) return wrapNeg(a);
  return static_cast<T>(a / b);
}

// a ** b for integers by squaring, wrapping on overflow; negative exponents are rejected earlier.
template <typename T>
inline T integerPower(T base, T exponent) {
  if (exponent < 0) return 0;
  T result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = wrapMul(result, base);
    base = wrapMul(base, base);
    exponent = static_cast<T>(exponent >> 1);
  }
  return result;
}

template <BinaryKind K, typename T>
inline auto applyBinary(T a, T b) {
  if constexpr (K == BinaryKind::Add) {
    return wrapAdd(a, b);
  } else if constexpr (K == BinaryKind::Sub) {
    return wrapSub(a, b);
  } else if constexpr (K == BinaryKind::Mul) {
    return wrapMul(a, b);
  } else if constexpr (K == BinaryKind::Div) {
    if constexpr (kIsWrappingInt<T>)
      return integerDivide(a, b);
    else
      return static_cast<T>(a / b);
  } else if constexpr (K == BinaryKind::Pow) {
    if constexpr (kIsWrappingInt<T>)
      return integerPower(a, b);
    else
      return static_cast<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
  } else if constexpr (K == BinaryKind::Maximum) {
    return (a != a || a > b) ? a : b;  // a NaN `a` wins; a NaN `b` fails `a > b`
  } else if constexpr (K == BinaryKind::Minimum) {
    return (a != a || a < b) ? a : b;
  } else if constexpr (K == BinaryKind::Equal) {
    return a == b;
  } else if constexpr (K == BinaryKind::NotEqual) {
    return a != b;
  } else if constexpr (K == BinaryKind::Less) {
    return a < b;
  } else if constexpr (K == BinaryKind::LessEqual) {
    return a <= b;
  } else if constexpr (K == BinaryKind::Greater) {
    return a > b;
  } else if constexpr (K == BinaryKind::GreaterEqual) {
    return a >= b;
  } else if constexpr (K == BinaryKind::LogicalAnd) {
    return static_cast<bool>(a) && static_cast<bool>(b);
  } else {
    return static_cast<bool>(a) || static_cast<bool>(b);
  }
}

enum class UnaryKind { Neg, Abs, Relu, Exp, Log, Sqrt, Rsqrt, Sigmoid, Tanh, Gelu, Erf, Silu, LogicalNot };

// Transcendental ops produce a float result; integer and bool inputs are cast to float32 first.
constexpr bool isFloatMath(UnaryKind k) {
  return k >= UnaryKind::Exp && k <= UnaryKind::Silu;
}

template <UnaryKind K, typename T>
inline T applyUnary(T x) {
  if constexpr (K == UnaryKind::Neg) {
    return wrapNeg(x);
  } else if constexpr (K == UnaryKind::Abs) {
    if constexpr (std::is_floating_point_v<T>)
      return std::fabs(x);
    else if constexpr (kIsWrappingInt<T>)
      return x < 0 ? wrapNeg(x) : x;
    else
      return x;
  } else if constexpr (K == UnaryKind::Relu) {
    return x < T(0) ? T(0) : x;  // keeps NaN
  } else if constexpr (K == UnaryKind::LogicalNot) {
    return static_cast<T>(!static_cast<bool>(x));
  } else {
    // float32 computes through double and rounds once, so results are correctly rounded in
    // practice and agree across libms.
    const double v = static_cast<double>(x);
    double r = 0.0;
    if constexpr (K == UnaryKind::Exp)
      r = std::exp(v);
    else if constexpr (K == UnaryKind::Log)
      r = std::log(v);
    else if constexpr (K == UnaryKind::Sqrt)
      r = std::sqrt(v);
    else if constexpr (K == UnaryKind::Rsqrt)
      r = 1.0 / std::sqrt(v);
    else if constexpr (K == UnaryKind::Sigmoid)
      r = 1.0 / (1.0 + std::exp(-v));
    else if constexpr (K == UnaryKind::Tanh)
      r = std::tanh(v);
    else if constexpr (K == UnaryKind::Gelu)
      r = 0.5 * v * std::erfc(-v * 0.70710678118654752440);
    else if constexpr (K == UnaryKind::Erf)
      r = std::erf(v);
    else
      r = v / (1.0 + std::exp(-v));  // Silu
    return static_cast<T>(r);
  }
}

// ---- inner runs: contiguous (chunks of 8 the vectorizer takes at -O2), broadcast scalar, strided ----

constexpr std::int64_t kChunk = 8;

template <BinaryKind K, typename In, typename Out>
inline void binaryRun(const typename In::Storage* __restrict a, std::int64_t sa,
                      const typename In::Storage* __restrict b, std::int64_t sb, typename Out::Storage* __restrict out,
                      std::int64_t so, std::int64_t n) {
  auto f = [](typename In::Storage x, typename In::Storage y) {
    return Out::store(applyBinary<K>(In::load(x), In::load(y)));
  };
  std::int64_t i = 0;
  if (so == 1 && sa == 1 && sb == 1) {
    for (; i + kChunk <= n; i += kChunk) {
      for (std::int64_t k = 0; k < kChunk; ++k) out[i + k] = f(a[i + k], b[i + k]);
    }
    for (; i < n; ++i) out[i] = f(a[i], b[i]);
  } else if (so == 1 && sa == 1 && sb == 0) {
    const typename In::Storage y = *b;
    for (; i + kChunk <= n; i += kChunk) {
      for (std::int64_t k = 0; k < kChunk; ++k) out[i + k] = f(a[i + k], y);
    }
    for (; i < n; ++i) out[i] = f(a[i], y);
  } else if (so == 1 && sa == 0 && sb == 1) {
    const typename In::Storage x = *a;
    for (; i + kChunk <= n; i += kChunk) {
      for (std::int64_t k = 0; k < kChunk; ++k) out[i + k] = f(x, b[i + k]);
    }
    for (; i < n; ++i) out[i] = f(x, b[i]);
  } else {
    for (; i < n; ++i) out[i * so] = f(a[i * sa], b[i * sb]);
  }
}

template <UnaryKind K, typename In, typename Out>
inline void unaryRun(const typename In::Storage* __restrict x, std::int64_t sx, typename Out::Storage* __restrict out,
                     std::int64_t so, std::int64_t n) {
  auto f = [](typename In::Storage v) { return Out::store(applyUnary<K>(In::load(v))); };
  if constexpr (K == UnaryKind::Tanh && std::is_same_v<In, Float32Traits> && std::is_same_v<Out, Float32Traits>) {
    // Float32 tanh: the vectorized form (fast_activation.h), which gives the scalar path's float
    // wherever it marks it certain (all but about 1 in 60,000 finite inputs); the rest, scalar.
    float in[fastmath::kBlock], result[fastmath::kBlock];
    unsigned char exact[fastmath::kBlock];
    for (std::int64_t i = 0; i < n; i += fastmath::kBlock) {
      const int m = static_cast<int>(std::min<std::int64_t>(fastmath::kBlock, n - i));
      for (int k = 0; k < m; ++k) in[k] = x[(i + k) * sx];
      for (int k = m; k % 4 != 0; ++k) in[k] = 0.0f;  // read in fours
      fastmath::tanhBlock(in, result, exact, m);
      for (int k = 0; k < m; ++k) out[(i + k) * so] = exact[k] != 0 ? result[k] : f(in[k]);
    }
    return;
  }
  std::int64_t i = 0;
  if (so == 1 && sx == 1) {
    for (; i + kChunk <= n; i += kChunk) {
      for (std::int64_t k = 0; k < kChunk; ++k) out[i + k] = f(x[i + k]);
    }
    for (; i < n; ++i) out[i] = f(x[i]);
  } else {
    for (; i < n; ++i) out[i * so] = f(x[i * sx]);
  }
}

// ---- cast ----

// float -> integer: truncate toward zero, NaN -> 0, out of range saturates (checked before the
// conversion, which would otherwise be undefined).
template <typename I, typename F>
inline I saturatingCast(F v) {
  if (v != v) return 0;
  constexpr F kLow = static_cast<F>(std::numeric_limits<I>::min());  // -2^(bits-1), exact
  if (v <= kLow) return std::numeric_limits<I>::min();
  if (v >= -kLow) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

template <typename In, typename Out>
inline typename Out::Storage convertElement(typename In::Storage v) {
  using From = typename In::Compute;
  using To = typename Out::Compute;
  const From x = In::load(v);
  if constexpr (std::is_same_v<To, bool>) {
    return Out::store(x != From(0));  // NaN -> true, as in numpy
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return Out::store(saturatingCast<To>(x));
  } else {
    return Out::store(static_cast<To>(x));  // int -> narrower int wraps (two's complement)
  }
}

Expected<Tensor> castTensor(const Tensor& src, DType dtype) {
  if (src.dtype() == dtype) return src;
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(dtype, src.shape()));
  if (src.numel() == 0) return out;
  const Shape& out_strides = out.strides();
  const Shape* strides[2] = {&src.strides(), &out_strides};
  const LoopNest<2> nest = makeLoopNest<2>(src.shape(), strides);
  const std::int64_t base[2] = {src.offset(), 0};
  dispatchDType(src.dtype(), [&](auto in_traits) {
    using In = decltype(in_traits);
    dispatchDType(dtype, [&](auto out_traits) {
      using Out = decltype(out_traits);
      const auto* from = storageBase<typename In::Storage>(src);
      auto* to = out.data<typename Out::Storage>();
      walkLoopNest(nest, base, [&](const std::int64_t* offsets, std::int64_t n, const std::int64_t* st) {
        const auto* x = from + offsets[0];
        auto* y = to + offsets[1];
        for (std::int64_t i = 0; i < n; ++i) y[i * st[1]] = convertElement<In, Out>(x[i * st[0]]);
      });
      return 0;
    });
    return 0;
  });
  return out;
}

// ---- binary ----

// True when any element of an integer tensor satisfies `pred` (walks its own layout, no broadcast).
template <typename Pred>
bool anyElement(const Tensor& t, Pred pred) {
  if (t.numel() == 0) return false;
  const Shape* strides[1] = {&t.strides()};
  const LoopNest<1> nest = makeLoopNest<1>(t.shape(), strides);
  const std::int64_t base[1] = {t.offset()};
  bool found = false;
  dispatchDType(t.dtype(), [&](auto traits) {
    using T = decltype(traits);
    if constexpr (kIsWrappingInt<typename T::Storage>) {
      const auto* data = storageBase<typename T::Storage>(t);
      walkLoopNest(nest, base, [&](const std::int64_t* offsets, std::int64_t n, const std::int64_t* st) {
        for (std::int64_t i = 0; i < n && !found; ++i)
          found = pred(static_cast<std::int64_t>(data[offsets[0] + i * st[0]]));
      });
    }
    return 0;
  });
  return found;
}

template <BinaryKind K>
Expected<Tensor> binaryCompute(std::string_view op, Tensor a, Tensor b) {
  if constexpr (isLogical(K)) {
    if (a.dtype() != DType::Bool || b.dtype() != DType::Bool) {
      return makeError(ErrorCode::DTypeMismatch,
                       "{} needs bool operands, got {} and {} (compare with not_equal(x, 0) first)", op,
                       dtypeName(a.dtype()), dtypeName(b.dtype()));
    }
  }
  const DType common = promoteTypes(a.dtype(), b.dtype());
  if (common == DType::Bool && !allowsBoolOperands(K)) {
    return makeError(ErrorCode::DTypeMismatch, "{} is not defined on bool operands; cast them to a numeric dtype first",
                     op);
  }
  SVM_ASSIGN_OR_RETURN(Shape shape, broadcastShapes(a.shape(), b.shape()));
  if (a.dtype() != common) {
    SVM_ASSIGN_OR_RETURN(a, castTensor(a, common));
  }
  if (b.dtype() != common) {
    SVM_ASSIGN_OR_RETURN(b, castTensor(b, common));
  }
  const DType out_dtype = isComparison(K) || isLogical(K) ? DType::Bool : common;
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(out_dtype, shape));
  if (shape.numel() == 0) return out;
  if constexpr (K == BinaryKind::Div) {
    if (isInteger(common) && anyElement(b, [](std::int64_t v) { return v == 0; })) {
      return makeError(ErrorCode::InvalidArgument, "{}: integer division by zero (the divisor {} has a zero element)",
                       op, b.describe());
    }
  }
  if constexpr (K == BinaryKind::Pow) {
    if (isInteger(common) && anyElement(b, [](std::int64_t v) { return v < 0; })) {
      return makeError(ErrorCode::InvalidArgument,
                       "{}: integers to negative integer powers are not allowed (cast the base to a float dtype)", op);
    }
  }
  const Shape sa = broadcastStrides(a, shape);
  const Shape sb = broadcastStrides(b, shape);
  const Shape& so = out.strides();
  const Shape* strides[3] = {&sa, &sb, &so};
  const LoopNest<3> nest = makeLoopNest<3>(shape, strides);
  const std::int64_t base[3] = {a.offset(), b.offset(), 0};
  dispatchDType(common, [&](auto traits) {
    using In = decltype(traits);
    using Out = std::conditional_t<isComparison(K) || isLogical(K), BoolTraits, In>;
    if constexpr (std::is_same_v<typename In::Storage, bool> && !allowsBoolOperands(K)) {
      return 0;  // rejected above
    } else {
      const auto* pa = storageBase<typename In::Storage>(a);
      const auto* pb = storageBase<typename In::Storage>(b);
      auto* po = out.data<typename Out::Storage>();
      walkLoopNest(nest, base, [&](const std::int64_t* offsets, std::int64_t n, const std::int64_t* st) {
        binaryRun<K, In, Out>(pa + offsets[0], st[0], pb + offsets[1], st[1], po + offsets[2], st[2], n);
      });
      return 0;
    }
  });
  return out;
}

// Scalars take the other operand's dtype (numpy's weak scalars, see tensorArg).
template <BinaryKind K>
Status binaryGeneric(OpContext& ctx) {
  const Value& va = *ctx.inputs[0];
  const Value& vb = *ctx.inputs[1];
  Tensor a = tensorArg(va, vb.isTensor() ? &vb.tensor() : nullptr);
  Tensor b = tensorArg(vb, va.isTensor() ? &va.tensor() : nullptr);
  SVM_ASSIGN_OR_RETURN(Tensor out, binaryCompute<K>(ctx.schema->name, std::move(a), std::move(b)));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// Contiguous float32 with the same shape, or with a scalar / 0-d float32 other operand. Anything
// else (both scalars, broadcasting) goes to the generic kernel.
template <BinaryKind K>
Status binaryFloat32Contiguous(OpContext& ctx) {
  using Out = std::conditional_t<isComparison(K), BoolTraits, Float32Traits>;
  const Value& va = *ctx.inputs[0];
  const Value& vb = *ctx.inputs[1];
  const bool a_tensor = va.isTensor();
  const bool b_tensor = vb.isTensor();
  const Tensor* shape_source = nullptr;
  std::int64_t sa = 1, sb = 1;
  float a_scalar = 0.0f, b_scalar = 0.0f;
  const float* pa = nullptr;
  const float* pb = nullptr;
  if (a_tensor && b_tensor && va.tensor().shape() == vb.tensor().shape()) {
    shape_source = &va.tensor();
    pa = va.tensor().data<float>();
    pb = vb.tensor().data<float>();
  } else if (a_tensor && (vb.isScalar() || (b_tensor && vb.tensor().rank() == 0))) {
    shape_source = &va.tensor();
    pa = va.tensor().data<float>();
    b_scalar = b_tensor ? *vb.tensor().data<float>() : static_cast<float>(vb.toDouble());
    pb = &b_scalar;
    sb = 0;
  } else if (b_tensor && (va.isScalar() || (a_tensor && va.tensor().rank() == 0))) {
    shape_source = &vb.tensor();
    pb = vb.tensor().data<float>();
    a_scalar = a_tensor ? *va.tensor().data<float>() : static_cast<float>(va.toDouble());
    pa = &a_scalar;
    sa = 0;
  } else {
    return binaryGeneric<K>(ctx);
  }
  SVM_ASSIGN_OR_RETURN(Tensor out,
                       outputBuffer(ctx, 0, isComparison(K) ? DType::Bool : DType::Float32, shape_source->shape()));
  binaryRun<K, Float32Traits, Out>(pa, sa, pb, sb, out.data<typename Out::Storage>(), 1, out.numel());
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- unary ----

template <UnaryKind K>
Expected<Tensor> unaryCompute(std::string_view op, Tensor x) {
  if constexpr (K == UnaryKind::LogicalNot) {
    if (x.dtype() != DType::Bool) {
      return makeError(ErrorCode::DTypeMismatch, "{} needs a bool operand, got {}", op, dtypeName(x.dtype()));
    }
  }
  if constexpr (K == UnaryKind::Neg) {
    if (x.dtype() == DType::Bool) {
      return makeError(ErrorCode::DTypeMismatch, "{} is not defined on bool; use logical_not", op);
    }
  }
  if constexpr (isFloatMath(K)) {
    if (!isFloating(x.dtype())) {
      SVM_ASSIGN_OR_RETURN(x, castTensor(x, DType::Float32));
    }
  }
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(x.dtype(), x.shape()));
  if (x.numel() == 0) return out;
  const Shape& so = out.strides();
  const Shape* strides[2] = {&x.strides(), &so};
  const LoopNest<2> nest = makeLoopNest<2>(x.shape(), strides);
  const std::int64_t base[2] = {x.offset(), 0};
  dispatchDType(x.dtype(), [&](auto traits) {
    using T = decltype(traits);
    const auto* px = storageBase<typename T::Storage>(x);
    auto* po = out.data<typename T::Storage>();
    walkLoopNest(nest, base, [&](const std::int64_t* offsets, std::int64_t n, const std::int64_t* st) {
      unaryRun<K, T, T>(px + offsets[0], st[0], po + offsets[1], st[1], n);
    });
    return 0;
  });
  return out;
}

template <UnaryKind K>
Status unaryGeneric(OpContext& ctx) {
  SVM_ASSIGN_OR_RETURN(Tensor out, unaryCompute<K>(ctx.schema->name, tensorArg(*ctx.inputs[0])));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

template <UnaryKind K>
Status unaryFloat32Contiguous(OpContext& ctx) {
  const Value& v = *ctx.inputs[0];
  if (!v.isTensor()) return unaryGeneric<K>(ctx);
  const Tensor& x = v.tensor();
  SVM_ASSIGN_OR_RETURN(Tensor out, outputBuffer(ctx, 0, DType::Float32, x.shape()));
  unaryRun<K, Float32Traits, Float32Traits>(x.data<float>(), 1, out.data<float>(), 1, out.numel());
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- where, cast, add_n, identity, contiguous ----

template <typename T>
void whereLoop(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  const Shape& shape = out.shape();
  const Shape sc = broadcastStrides(cond, shape);
  const Shape sa = broadcastStrides(a, shape);
  const Shape sb = broadcastStrides(b, shape);
  const Shape& so = out.strides();
  const Shape* strides[4] = {&sc, &sa, &sb, &so};
  const LoopNest<4> nest = makeLoopNest<4>(shape, strides);
  const std::int64_t base[4] = {cond.offset(), a.offset(), b.offset(), 0};
  const bool* pc = storageBase<bool>(cond);
  const T* pa = storageBase<T>(a);
  const T* pb = storageBase<T>(b);
  T* po = out.data<T>();
  walkLoopNest(nest, base, [&](const std::int64_t* offsets, std::int64_t n, const std::int64_t* st) {
    const bool* c = pc + offsets[0];
    const T* x = pa + offsets[1];
    const T* y = pb + offsets[2];
    T* o = po + offsets[3];
    for (std::int64_t i = 0; i < n; ++i) o[i * st[3]] = c[i * st[0]] ? x[i * st[1]] : y[i * st[2]];
  });
}

// cond of any dtype counts nonzero as true (numpy); a and b promote like a binary op.
Status whereKernel(OpContext& ctx) {
  const Value& vc = *ctx.inputs[0];
  const Value& va = *ctx.inputs[1];
  const Value& vb = *ctx.inputs[2];
  Tensor cond = tensorArg(vc);
  if (cond.dtype() != DType::Bool) {
    SVM_ASSIGN_OR_RETURN(cond, castTensor(cond, DType::Bool));
  }
  Tensor a = tensorArg(va, vb.isTensor() ? &vb.tensor() : nullptr);
  Tensor b = tensorArg(vb, va.isTensor() ? &va.tensor() : nullptr);
  const DType common = promoteTypes(a.dtype(), b.dtype());
  const Shape shapes[3] = {cond.shape(), a.shape(), b.shape()};
  SVM_ASSIGN_OR_RETURN(Shape shape, broadcastShapes(shapes));
  SVM_ASSIGN_OR_RETURN(a, castTensor(a, common));
  SVM_ASSIGN_OR_RETURN(b, castTensor(b, common));
  SVM_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(common, shape));
  if (shape.numel() > 0) {
    // Only bits move, so the element size is all that matters.
    switch (dtypeSize(common)) {
      case 1:
        whereLoop<std::uint8_t>(cond, a, b, out);
        break;
      case 2:
        whereLoop<std::uint16_t>(cond, a, b, out);
        break;
      case 4:
        whereLoop<std::uint32_t>(cond, a, b, out);
        break;
      default:
        whereLoop<std::uint64_t>(cond, a, b, out);
        break;
    }
  }
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// A cast to the input's own dtype returns the input itself (tensors are immutable).
Status castKernel(OpContext& ctx) {
  SVM_ASSIGN_OR_RETURN(Tensor out, castTensor(tensorArg(*ctx.inputs[0]), ctx.attrs[0].dtype));
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// Folds left with add (so float16 sums round after each step); scalars take the dtype of the
// first tensor input.
Status addNKernel(OpContext& ctx) {
  const Tensor* like = nullptr;
  for (const Value* v : ctx.inputs) {
    if (v->isTensor()) {
      like = &v->tensor();
      break;
    }
  }
  std::vector<Shape> shapes;
  shapes.reserve(ctx.inputs.size());
  for (const Value* v : ctx.inputs) shapes.push_back(v->isTensor() ? v->tensor().shape() : Shape{});
  SVM_RETURN_IF_ERROR(broadcastShapes(shapes).takeStatus());
  Tensor sum = tensorArg(*ctx.inputs[0], like);
  for (std::size_t i = 1; i < ctx.inputs.size(); ++i) {
    SVM_ASSIGN_OR_RETURN(
        sum, binaryCompute<BinaryKind::Add>(ctx.schema->name, std::move(sum), tensorArg(*ctx.inputs[i], like)));
  }
  ctx.outputs[0] = Value::fromTensor(std::move(sum));
  return Status::ok();
}

Status identityKernel(OpContext& ctx) {
  const Value& v = *ctx.inputs[0];
  ctx.outputs[0] = v.isTensor() ? v : Value::fromTensor(tensorArg(v));
  return Status::ok();
}

Status contiguousKernel(OpContext& ctx) {
  SVM_ASSIGN_OR_RETURN(Tensor out, tensorArg(*ctx.inputs[0]).contiguous());
  ctx.outputs[0] = Value::fromTensor(std::move(out));
  return Status::ok();
}

// ---- registration ----

constexpr KernelPattern kFloat32SameShape{DType::Float32, -1, true, true};
constexpr KernelPattern kFloat32Contiguous{DType::Float32, -1, true, false};

template <BinaryKind K>
void registerBinary(OpRegistry& registry, OpId id, bool specialize) {
  const std::string name(registry.schema(id).name);
  registry.registerKernel(id, KernelPattern{}, &binaryGeneric<K>, name + ".generic");
  if (!specialize) return;
  registry.registerKernel(id, kFloat32SameShape, &binaryFloat32Contiguous<K>, name + ".f32.contiguous_same_shape");
  registry.registerKernel(id, kFloat32Contiguous, &binaryFloat32Contiguous<K>, name + ".f32.contiguous");
}

template <UnaryKind K>
void registerUnary(OpRegistry& registry, OpId id, bool specialize) {
  const std::string name(registry.schema(id).name);
  registry.registerKernel(id, KernelPattern{}, &unaryGeneric<K>, name + ".generic");
  if (!specialize) return;
  registry.registerKernel(id, kFloat32Contiguous, &unaryFloat32Contiguous<K>, name + ".f32.contiguous");
}

}  // namespace

void registerElementwiseKernels(OpRegistry& registry) {
  registerBinary<BinaryKind::Add>(registry, OpId::Add, true);
  registerBinary<BinaryKind::Sub>(registry, OpId::Sub, true);
  registerBinary<BinaryKind::Mul>(registry, OpId::Mul, true);
  registerBinary<BinaryKind::Div>(registry, OpId::Div, true);
  registerBinary<BinaryKind::Pow>(registry, OpId::Pow, false);
  registerBinary<BinaryKind::Maximum>(registry, OpId::Maximum, true);
  registerBinary<BinaryKind::Minimum>(registry, OpId::Minimum, true);
  registerBinary<BinaryKind::Equal>(registry, OpId::Equal, true);
  registerBinary<BinaryKind::NotEqual>(registry, OpId::NotEqual, true);
  registerBinary<BinaryKind::Less>(registry, OpId::Less, true);
  registerBinary<BinaryKind::LessEqual>(registry, OpId::LessEqual, true);
  registerBinary<BinaryKind::Greater>(registry, OpId::Greater, true);
  registerBinary<BinaryKind::GreaterEqual>(registry, OpId::GreaterEqual, true);
  registerBinary<BinaryKind::LogicalAnd>(registry, OpId::LogicalAnd, false);
  registerBinary<BinaryKind::LogicalOr>(registry, OpId::LogicalOr, false);
  registerUnary<UnaryKind::Neg>(registry, OpId::Neg, true);
  registerUnary<UnaryKind::Abs>(registry, OpId::Abs, true);
  registerUnary<UnaryKind::Exp>(registry, OpId::Exp, true);
  registerUnary<UnaryKind::Log>(registry, OpId::Log, true);
  registerUnary<UnaryKind::Sqrt>(registry, OpId::Sqrt, true);
  registerUnary<UnaryKind::Rsqrt>(registry, OpId::Rsqrt, true);
  registerUnary<UnaryKind::Sigmoid>(registry, OpId::Sigmoid, true);
  registerUnary<UnaryKind::Tanh>(registry, OpId::Tanh, true);
  registerUnary<UnaryKind::Relu>(registry, OpId::Relu, true);
  registerUnary<UnaryKind::Gelu>(registry, OpId::Gelu, true);
  registerUnary<UnaryKind::Erf>(registry, OpId::Erf, true);
  registerUnary<UnaryKind::Silu>(registry, OpId::Silu, true);
  registerUnary<UnaryKind::LogicalNot>(registry, OpId::LogicalNot, false);
  registry.registerKernel(OpId::Where, KernelPattern{}, &whereKernel, "where.generic");
  registry.registerKernel(OpId::Cast, KernelPattern{}, &castKernel, "cast.generic");
  registry.registerKernel(OpId::AddN, KernelPattern{}, &addNKernel, "add_n.generic");
  registry.registerKernel(OpId::Identity, KernelPattern{}, &identityKernel, "identity.generic");
  registry.registerKernel(OpId::Contiguous, KernelPattern{}, &contiguousKernel, "contiguous.generic");
}

}  // namespace shapevm
