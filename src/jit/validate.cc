// SPDX-License-Identifier: Apache-2.0
// Kernel validation against the reference kernels (see validate.h).
#include "jit/validate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "jit/clip_period.h"
#include "jit/kernel_cache.h"
#include "support/cpu_cores.h"
#include "support/fast_random.h"
#include "support/tunables.h"

namespace shapevm::jit {

double toleranceFor(DType dtype) {
  switch (dtype) {
    case DType::Float32: return 1e-5;
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    case DType::Float64: return 1e-12;
    default: return 0.0;
  }
}

Comparison compareOutputs(std::span<const Value> expected, std::span<const Value> actual) {
  Comparison result;
  if (expected.size() != actual.size()) {
    result.ok = false;
    result.reason = fmt::format("{} outputs, expected {}", actual.size(), expected.size());
    return result;
  }
  for (std::size_t o = 0; o < expected.size(); ++o) {
    if (!expected[o].isTensor() || !actual[o].isTensor()) {
      result.ok = false;
      result.reason = fmt::format("output {}: {} where {} was expected", o, actual[o].describe(), expected[o].describe());
      return result;
    }
    const Tensor& want = expected[o].tensor();
    const Tensor& got = actual[o].tensor();
    if (want.dtype() != got.dtype() || want.shape() != got.shape()) {
      result.ok = false;
      result.reason = fmt::format("output {}: {} where {} was expected", o, got.describe(), want.describe());
      return result;
    }
    const std::int64_t n = want.numel();
    const double tolerance = toleranceFor(want.dtype());
    double diff2 = 0.0;
    double ref2 = 0.0;
    // Contiguous float32 (the common case) is read directly; everything else element by element.
    const bool direct = want.dtype() == DType::Float32 && want.isContiguous() && got.isContiguous();
    const float* want_f32 = direct ? want.data<float>() : nullptr;
    const float* got_f32 = direct ? got.data<float>() : nullptr;
    if (direct && tolerance > 0.0) {
      // Four independent sums (vectorized); a NaN or infinity anywhere makes a sum non-finite, and
      // then the element loop below finds it and says why.
      double d[4] = {}, r[4] = {};
      std::int64_t i = 0;
      for (; i + 4 <= n; i += 4) {
        for (int l = 0; l < 4; ++l) {
          const double w = want_f32[i + l], g = got_f32[i + l];
          d[l] += (g - w) * (g - w);
          r[l] += w * w;
        }
      }
      for (; i < n; ++i) {
        const double w = want_f32[i], g = got_f32[i];
        d[0] += (g - w) * (g - w);
        r[0] += w * w;
      }
      diff2 = (d[0] + d[1]) + (d[2] + d[3]);
      ref2 = (r[0] + r[1]) + (r[2] + r[3]);
    }
    const bool summed = direct && tolerance > 0.0 && std::isfinite(diff2) && std::isfinite(ref2);
    if (!summed) diff2 = ref2 = 0.0;
    for (std::int64_t i = 0; i < n && !summed; ++i) {
      const double w = direct ? static_cast<double>(want_f32[i]) : want.elementAsDouble(i);
      const double g = direct ? static_cast<double>(got_f32[i]) : got.elementAsDouble(i);
      if (std::isnan(g)) {
        result.ok = false;
        result.reason = fmt::format("output {}: NaN at element {} (expected {})", o, i, w);
        return result;
      }
      if (std::isnan(w)) {
        result.ok = false;
        result.reason = fmt::format("output {}: the reference produced NaN at element {}; cannot validate", o, i);
        return result;
      }
      if (tolerance == 0.0 && w != g) {
        result.ok = false;
        result.reason = fmt::format("output {}: element {} is {}, expected {} (exact match required)", o, i, g, w);
        return result;
      }
      if (std::isinf(w) || std::isinf(g)) {
        if (w != g) {
          result.ok = false;
          result.reason = fmt::format("output {}: element {} is {}, expected {}", o, i, g, w);
          return result;
        }
        continue;
      }
      diff2 += (g - w) * (g - w);
      ref2 += w * w;
    }
    const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    result.rel_l2 = std::max(result.rel_l2, rel);
    if (!(rel <= tolerance)) {
      result.ok = false;
      result.reason = fmt::format("output {}: relative L2 error {:.3g} > {:.3g} ({})", o, rel, tolerance,
                                  dtypeName(want.dtype()));
      return result;
    }
  }
  return result;
}

namespace {
enum class Domain { Normal, Positive, Bool };

// The input's value domain from ops.def (`@pos`: log, sqrt, rsqrt, pow's base, div's divisor —
// no division by ~0; `@bool`: where's condition, logical ops). A variadic input's spec covers
// every input from it on.
Domain domainFor(OpId op, std::size_t input) {
  const OpSchema& schema = OpRegistry::global().schema(op);
  if (schema.inputs.empty()) return Domain::Normal;
  switch (schema.inputs[std::min(input, schema.inputs.size() - 1)].domain) {
    case InputDomain::Any: return Domain::Normal;
    case InputDomain::Positive: return Domain::Positive;
    case InputDomain::Bool: return Domain::Bool;
  }
  return Domain::Normal;
}
}  // namespace

bool needsPositiveInput(OpId op, std::size_t input) { return domainFor(op, input) == Domain::Positive; }

std::int64_t clipPeriodOf(const KernelFamily& family, const KernelSpec& spec, std::size_t input, int axis) {
  const auto* periods = dynamic_cast<const ClipPeriods*>(&family);
  return periods != nullptr ? periods->clipPeriod(spec, input, axis) : kDefaultClipPeriod;
}

std::int64_t rowMajorClipPeriod(const KernelSpec& spec, std::size_t input, int axis) {
  if (input >= spec.inputs.size() || !spec.inputs[input].is_tensor) return kDefaultClipPeriod;
  int rank = 0;
  for (const OperandSpec& in : spec.inputs) rank = std::max(rank, in.is_tensor ? in.rank : 0);
  const int at = axis + rank - spec.inputs[input].rank;  // the output axis (inputs align at the last one)
  if (axis < 0 || axis >= spec.inputs[input].rank || at <= 0 || at >= rank - 1) return kDefaultClipPeriod;
  // The output's extent on every later axis: static in every input that has it (1 or the extent).
  std::int64_t later = 1;
  for (int a = at + 1; a < rank; ++a) {
    std::int64_t extent = 1;
    for (const OperandSpec& in : spec.inputs) {
      const int d = a - (rank - in.rank);
      if (!in.is_tensor || d < 0) continue;
      if (!in.dims[d].isStatic()) return kDefaultClipPeriod;
      extent = std::max(extent, in.dims[d].size);
    }
    later *= extent;
  }
  if (later <= 0) return kDefaultClipPeriod;
  const std::int64_t block =
      std::lcm(kFlatLoopBlock, std::int64_t{std::max(1, spec.params.vector_width)} * std::max(1, spec.params.unroll));
  return block / std::gcd(block, later);
}

namespace {
// Dynamic dims are validated at clipped sizes with the same residue modulo their family's clip
// period (clip_period.h; by default kDefaultClipPeriod, which every register tile and
// vector width times unroll up to 64 divides). A dim of a shorter period is clipped from above its
// low end, so the clipped set and the low end's set run two extents (code that took the low end
// for a static size still fails), and from at least 2 (an extent of 1 broadcasts).
constexpr std::int64_t kMinShortClip = 2;
// Large float32 inputs are filled from a pool of this many draws, kChunk elements at a time.
constexpr std::int64_t kPoolSize = 1 << 15;
constexpr std::int64_t kChunk = 509;  // prime: chunk borders never line up with rows
// Validation draws one pool per kernel; every normal float32 input above this many elements, in
// every shape set, is made of its chunks (other inputs are drawn as above).
constexpr std::int64_t kSharedPoolAbove = 4 * kChunk;

// `n` draws of random.normal() as float32: the values it would give, in its order, and `random`
// left where n calls would leave it. Draw k's splitmix64 state is the start plus (k + 1) times the
// increment, so no draw waits for the one before (a loop the compiler vectorizes).
void fillNormal(FastRandom& random, float* out, std::int64_t n) {
  constexpr std::uint64_t kIncrement = 0x9E3779B97F4A7C15ULL;
  const std::uint64_t start = random.state;
  for (std::int64_t k = 0; k < n; ++k) {
    std::uint64_t z = start + static_cast<std::uint64_t>(k + 1) * kIncrement;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    const double sum = static_cast<double>((z & 0xFFFF) + ((z >> 16) & 0xFFFF) + ((z >> 32) & 0xFFFF) + (z >> 48));
    out[k] = static_cast<float>((sum - 2.0 * 65535.0) * (1.7320508075688772 / 65536.0));
  }
  random.state = start + static_cast<std::uint64_t>(n) * kIncrement;
}

}  // namespace

namespace {
Expected<std::vector<Value>> drawInputs(const KernelSpec& spec, std::span<const Shape> shapes, std::uint64_t seed,
                                        std::span<const bool> positive, Tensor* shared_pool) {
  std::mt19937_64 generator(seed * 0x9E3779B97F4A7C15ULL + 1);
  std::vector<Value> values;
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    const OperandSpec& in = spec.inputs[i];
    if (!in.is_tensor) {
      // A scalar of the compiled kind: the observed example, or a fresh value of its domain.
      const bool use_example = generator() % 2 == 0 && in.scalar_example != 0.0;
      switch (in.scalar_kind) {
        case ValueKind::Int:
          values.push_back(Value::fromInt(use_example ? static_cast<std::int64_t>(in.scalar_example)
                                                      : static_cast<std::int64_t>(1 + generator() % 9)));
          break;
        case ValueKind::Float: {
          std::uniform_real_distribution<double> positive(0.1, 3.0);
          values.push_back(Value::fromFloat(use_example ? in.scalar_example : positive(generator)));
          break;
        }
        case ValueKind::Bool: values.push_back(Value::fromBool(generator() % 2 == 0)); break;
        case ValueKind::None: values.push_back(Value()); break;
        default: return makeError(ErrorCode::Unsupported, "cannot draw a random {} input", valueKindName(in.scalar_kind));
      }
      continue;
    }
    if (i >= shapes.size()) return makeError(ErrorCode::Internal, "no shape for input {}", i);
    SVM_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(in.dtype, shapes[i]));
    const Domain domain = in.dtype == DType::Bool                 ? Domain::Bool
                          : i < positive.size() && positive[i] ? Domain::Positive
                                                               : domainFor(spec.op, i);
    FastRandom random{generator()};
    const std::int64_t n = t.numel();
    const auto draw = [&]() -> double {
      if (domain == Domain::Bool || in.dtype == DType::Bool) return static_cast<double>(random.next() & 1);
      if (isInteger(in.dtype)) {
        return domain == Domain::Positive ? static_cast<double>(1 + random.next() % 9)
                                          : static_cast<double>(static_cast<int>(random.next() % 19) - 9);
      }
      return domain == Domain::Positive ? 0.1 + 2.9 * random.uniform() : random.normal();
    };
    bool any_nonzero = false;
    // Normal float32 draws in bulk (the values draw() gives, faster).
    const bool normal = in.dtype == DType::Float32 && domain == Domain::Normal;
    // Chunks of a pool of draws, each chunk from a random place in the pool (memcpy speed; no two
    // rows alike), so validating a big kernel stays cheap.
    const auto fromPool = [&](std::span<const float> pool) {
      float* data = t.data<float>();
      const auto places = static_cast<std::uint64_t>(pool.size()) - kChunk;
      for (std::int64_t k = 0; k < n; k += kChunk) {
        const std::size_t from = static_cast<std::size_t>(random.next() % places);
        std::memcpy(data + k, pool.data() + from, static_cast<std::size_t>(std::min<std::int64_t>(kChunk, n - k)) * 4);
      }
      for (std::int64_t k = 0; k < n && !any_nonzero; ++k) any_nonzero = data[k] != 0.0f;
      if (!any_nonzero) data[n - 1] = 1.0f;  // never all zeros
    };
    // Pools are tensors: from the allocator's scratch area on a compile thread (pages already faulted).
    if (normal && shared_pool != nullptr && n > kSharedPoolAbove) {
      if (!shared_pool->defined()) {  // drawn on first use
        SVM_ASSIGN_OR_RETURN(*shared_pool, Tensor::empty(DType::Float32, Shape{kPoolSize + kChunk}));
        FastRandom pool_random{generator()};
        fillNormal(pool_random, shared_pool->data<float>(), kPoolSize + kChunk);
      }
      fromPool(std::span<const float>(shared_pool->data<float>(), kPoolSize + kChunk));
    } else if (in.dtype == DType::Float32 && n > 2 * kPoolSize) {
      // A large input of its own domain: a fresh pool.
      SVM_ASSIGN_OR_RETURN(Tensor pool_tensor, Tensor::empty(DType::Float32, Shape{kPoolSize + kChunk}));
      const std::span<float> pool(pool_tensor.data<float>(), kPoolSize + kChunk);
      if (normal) {
        fillNormal(random, pool.data(), static_cast<std::int64_t>(pool.size()));
      } else {
        for (float& v : pool) v = static_cast<float>(draw());
      }
      fromPool(pool);
    } else if (in.dtype == DType::Float32) {
      float* data = t.data<float>();
      if (normal) fillNormal(random, data, n);
      for (std::int64_t k = 0; k < n; ++k) {
        if (!normal) data[k] = static_cast<float>(draw());
        any_nonzero = any_nonzero || data[k] != 0.0f;
      }
      if (n > 0 && !any_nonzero) data[n - 1] = 1.0f;  // never all zeros
    } else {
      for (std::int64_t k = 0; k < n; ++k) {
        double v = draw();
        if (k == n - 1 && !any_nonzero) v = 1.0;  // never all zeros
        any_nonzero = any_nonzero || v != 0.0;
        storeFromDouble(t.rawData(), in.dtype, k, v);
      }
    }
    values.push_back(Value::fromTensor(std::move(t)));
  }
  return values;
}
}  // namespace

Expected<std::vector<Value>> randomInputs(const KernelSpec& spec, std::span<const Shape> shapes, std::uint64_t seed,
                                          std::span<const bool> positive) {
  return drawInputs(spec, shapes, seed, positive, nullptr);
}

namespace {
// The dynamic dims of `spec` whose observed extent is `extent` (one class: they move together).
struct ExtentClass {
  std::int64_t extent = 0;
  std::int64_t lo = 0, hi = INT64_MAX, divisor = 1;  // the tightest bounds over the class
  std::int64_t period = 1;                           // the lcm of its dims' clip periods
  std::vector<std::pair<std::size_t, int>> dims;     // (input, axis)
};

std::vector<ExtentClass> extentClasses(const KernelSpec& spec, std::span<const Shape> observed) {
  std::vector<ExtentClass> classes;
  // A fused region's or an unknown op's paths: the default period.
  const KernelFamily* family = spec.fused ? nullptr : familyFor(spec.op);
  for (std::size_t i = 0; i < spec.inputs.size() && i < observed.size(); ++i) {
    const OperandSpec& in = spec.inputs[i];
    for (int d = 0; d < in.rank && d < observed[i].rank(); ++d) {
      const DimSpec& dim = in.dims[d];
      if (dim.isStatic()) continue;
      const std::int64_t extent = observed[i][d];
      auto it = std::find_if(classes.begin(), classes.end(), [&](const ExtentClass& c) { return c.extent == extent; });
      if (it == classes.end()) {
        classes.push_back(ExtentClass{extent, 0, INT64_MAX, 1, 1, {}});
        it = classes.end() - 1;
      }
      it->lo = std::max(it->lo, dim.lo);
      it->hi = std::min(it->hi, dim.hi);
      if (dim.divisor > 1) it->divisor = std::lcm(it->divisor, dim.divisor);
      const std::int64_t period = family != nullptr ? clipPeriodOf(*family, spec, i, d) : kDefaultClipPeriod;
      it->period =
          std::min(kDefaultClipPeriod, std::lcm(it->period, std::clamp<std::int64_t>(period, 1, kDefaultClipPeriod)));
      it->dims.emplace_back(i, d);
    }
  }
  return classes;
}

// `extent` clipped to a small size that takes the same tiling and remainder paths: the smallest
// size >= max(lo, period) congruent to it modulo the period (the class's clip period times its
// divisor). A period shorter than kDefaultClipPeriod clips from max(period, kMinShortClip, lo + 1)
// instead. Never above `extent`, never below the class's low end, a multiple of its divisor.
std::int64_t clippedExtent(const ExtentClass& c, std::int64_t extent) {
  const std::int64_t period = std::lcm(c.period, std::max<std::int64_t>(1, c.divisor));
  std::int64_t floor = std::max(c.lo, period);
  if (c.period < kDefaultClipPeriod) {
    const std::int64_t divisor = std::max<std::int64_t>(1, c.divisor);
    floor = (std::max({period, kMinShortClip, c.lo + 1}) + divisor - 1) / divisor * divisor;
  }
  if (extent <= floor) return extent;
  return floor + (extent - floor) % period;
}

// `base` with every dim of class `c` set to `to`.
std::vector<Shape> moved(const std::vector<Shape>& base, const ExtentClass& c, std::int64_t to) {
  std::vector<Shape> shapes = base;
  for (const auto& [i, d] : c.dims) shapes[i][d] = to;
  return shapes;
}
}  // namespace

std::vector<std::vector<Shape>> validationShapes(const KernelSpec& spec, std::span<const Shape> observed) {
  std::vector<std::vector<Shape>> sets;
  const std::vector<ExtentClass> classes = extentClasses(spec, observed);
  // The observed shapes, clipped (a class keeps its extent when clipping would make it equal to
  // another class's: the range-end moves below must not move two classes at once).
  // Nor does a class whose extent a static dim also has (likely the same quantity, e.g. a dynamic
  // K against a static one: the clipped shapes would not fit together).
  std::vector<Shape> clipped(observed.begin(), observed.end());
  std::vector<std::int64_t> taken;
  for (const ExtentClass& c : classes) taken.push_back(c.extent);
  for (std::size_t i = 0; i < spec.inputs.size() && i < observed.size(); ++i) {
    for (int d = 0; d < spec.inputs[i].rank && d < observed[i].rank(); ++d) {
      if (spec.inputs[i].dims[d].isStatic()) taken.push_back(observed[i][d]);
    }
  }
  for (std::size_t k = 0; k < classes.size(); ++k) {
    if (std::count(taken.begin(), taken.end(), classes[k].extent) > 1) continue;  // tied to a static dim
    const std::int64_t to = clippedExtent(classes[k], classes[k].extent);
    if (to == classes[k].extent || std::find(taken.begin(), taken.end(), to) != taken.end()) continue;
    taken[k] = to;
    clipped = moved(clipped, classes[k], to);
  }
  sets.push_back(clipped);
  // The range ends of every bounded class: the low end exactly, the high end clipped.
  for (const ExtentClass& c : classes) {
    if (c.hi == INT64_MAX) continue;
    std::int64_t ends[2] = {c.lo, c.hi};
    if (c.divisor > 1) {
      ends[0] = (c.lo + c.divisor - 1) / c.divisor * c.divisor;
      ends[1] = c.hi / c.divisor * c.divisor;
    }
    ends[1] = clippedExtent(c, ends[1]);
    for (std::int64_t to : ends) {
      if (to < 0 || to < c.lo || to > c.hi) continue;
      std::vector<Shape> shapes = moved(clipped, c, to);
      if (std::find(sets.begin(), sets.end(), shapes) == sets.end()) sets.push_back(std::move(shapes));
    }
  }
  return sets;
}

Expected<Tensor> poisonedTensor(DType dtype, const Shape& shape) {
  SVM_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(dtype, shape));
  const std::int64_t n = t.numel();
  if (dtype == DType::Float32) {
    std::fill_n(t.data<float>(), n, std::numeric_limits<float>::quiet_NaN());
  } else if (isFloating(dtype)) {
    // All-ones bits are a NaN in every other floating dtype too (exponent all ones, payload
    // nonzero): one memset instead of a conversion per element.
    std::memset(t.rawData(), 0xFF, static_cast<std::size_t>(n) * t.itemSize());
  } else {
    std::memset(t.rawData(), 0x5A, static_cast<std::size_t>(n) * t.itemSize());
    if (dtype == DType::Bool) std::memset(t.rawData(), 2, static_cast<std::size_t>(n));  // neither false nor true
  }
  return t;
}

std::int64_t firstPoisoned(const Tensor& t) {
  const std::int64_t n = t.numel();
  if (t.dtype() == DType::Float32 && t.isContiguous()) {
    // Blocks without an early exit, then the element in the first block that has one. The test is
    // on the bits (exponent all ones, mantissa nonzero): an integer compare and OR the compiler
    // vectorizes (a float self-compare into a bool it did not: ~3x slower, a fifth of validating a
    // large elementwise kernel).
    constexpr std::int64_t kBlock = 1024;
    const float* data = t.data<float>();
    for (std::int64_t k = 0; k < n; k += kBlock) {
      const std::int64_t end = std::min(n, k + kBlock);
      std::uint32_t any = 0;
      for (std::int64_t j = k; j < end; ++j) {
        std::uint32_t bits;
        std::memcpy(&bits, data + j, sizeof(bits));
        any |= static_cast<std::uint32_t>((bits & 0x7FFFFFFFu) > 0x7F800000u);
      }
      if (any == 0) continue;
      for (std::int64_t j = k; j < end; ++j) {
        if (std::isnan(data[j])) return j;
      }
    }
    return -1;
  }
  if (isFloating(t.dtype())) {
    for (std::int64_t k = 0; k < n; ++k) {
      if (std::isnan(t.elementAsDouble(k))) return k;
    }
  }
  if (t.dtype() == DType::Bool && t.isContiguous()) {
    const auto* data = static_cast<const unsigned char*>(t.rawData());
    for (std::int64_t k = 0; k < n; ++k) {
      if (data[k] > 1) return k;
    }
  }
  return -1;  // integer poison bytes may be valid values: compared on the sampled rows only
}

namespace {

// Outputs with more rows than this are validated on sampled rows (the reference computes those
// rows only); the kernel always computes every row and every element it wrote is checked. A 2-D
// matmul's every row is also checked through a random projection (projectedProduct), so any
// wrong row is caught; an elementwise output is sampled only above kSampleElementwiseAbove
// elements (below, every element is compared; the reference kernels cost ~20-50 ns an element).
constexpr std::int64_t kSampleAboveRows = 8;
constexpr std::int64_t kSampleElementwiseAbove = std::int64_t{1} << 14;
// Sampled rows besides the first and the last: this many on a stride with a random offset.
constexpr int kStridedRows = 2;
// An elementwise output of rank >= 3 is sampled by lines (see sampleLines): about this many
// elements of lines on a rotated diagonal, between kMinLines and kMaxLines of them.
constexpr std::int64_t kLineSampleElements = std::int64_t{1} << 13;
constexpr std::int64_t kMinLines = 4;
constexpr std::int64_t kMaxLines = 32;

// The sampled part of an output: the slices at some indices of its first `lead` axes, each
// taken whole over the remaining axes. Rows (`lead` 1) for a matmul and outputs of rank <= 2;
// lines along the last axis (`lead` rank - 1) for an elementwise output of rank >= 3, whose
// axis-0 rows can be large ([32, 32, 1024]: 32 rows of 32K elements each).
struct Sample {
  int lead = 1;
  std::vector<std::vector<std::int64_t>> at;  // per slice: its index on each of the first `lead` axes
  bool empty() const { return at.empty(); }
  void clear() { at.clear(); }
  std::string describe() const {
    std::vector<std::string> items;
    for (const auto& index : at)
      items.push_back(lead == 1 ? fmt::format("{}", index[0]) : fmt::format("({})", fmt::join(index, ",")));
    return fmt::format("{} {}", lead == 1 ? "rows" : "lines", fmt::join(items, ","));
  }
};

// How the inputs of a call relate to the output's axis 0, when the op computes output row r from
// row r of some inputs and the whole of the others: row_indexed[i] is true for the former. False
// when the op mixes rows (reductions, normalizations over axis 0, movement ...), has no rows, or
// the family adds more than the op (epilogues, fused programs).
bool rowsSampleable(const KernelSpec& spec, std::span<const Value* const> inputs, const Shape& out,
                    std::vector<bool>& row_indexed) {
  if (out.rank() == 0 || spec.fused || !spec.epilogue.empty()) return false;
  row_indexed.assign(inputs.size(), false);
  const OpClass cls = OpRegistry::global().schema(spec.op).cls;
  if (cls == OpClass::Contraction) {
    // A 2-D product: row r of the output is row r of A times the whole of B.
    if (inputs.size() != 2 || inputs[0] == nullptr || inputs[1] == nullptr || !inputs[0]->isTensor() ||
        !inputs[1]->isTensor() || inputs[0]->tensor().rank() != 2 || inputs[1]->tensor().rank() != 2 ||
        out.rank() != 2) {
      return false;
    }
    row_indexed[0] = true;
    return true;
  }
  const bool elementwise = cls == OpClass::Binary || cls == OpClass::Compare || cls == OpClass::Unary ||
                           cls == OpClass::Select || cls == OpClass::Cast || cls == OpClass::Nary;
  if (!elementwise) return false;
  // Numpy broadcasting: an input of the output's rank with its axis-0 extent is indexed by row;
  // one of lower rank or extent 1 is broadcast along axis 0 (read whole by every row).
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr || !inputs[i]->isTensor()) continue;
    const Tensor& t = inputs[i]->tensor();
    if (t.rank() == out.rank() && t.dim(0) == out[0]) {
      row_indexed[i] = true;
    } else if (!(t.rank() < out.rank() || (t.rank() == out.rank() && t.dim(0) == 1))) {
      return false;
    }
  }
  return true;
}

// An elementwise op (numpy broadcasting, every input of at most the output's rank) with an output
// of rank >= 3, sampled by lines: indexed[i] is true for an input with an extent > 1 on one of
// the output's leading axes (its lines are gathered), false for one read whole by every line.
bool linesSampleable(const KernelSpec& spec, std::span<const Value* const> inputs, const Shape& out,
                     std::vector<bool>& indexed) {
  if (out.rank() < 3 || spec.fused || !spec.epilogue.empty()) return false;
  const OpClass cls = OpRegistry::global().schema(spec.op).cls;
  if (!(cls == OpClass::Binary || cls == OpClass::Compare || cls == OpClass::Unary || cls == OpClass::Select ||
        cls == OpClass::Cast || cls == OpClass::Nary)) {
    return false;
  }
  indexed.assign(inputs.size(), false);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr || !inputs[i]->isTensor()) continue;
    const Tensor& t = inputs[i]->tensor();
    const int shift = out.rank() - t.rank();
    if (shift < 0) return false;
    for (int a = 0; a < t.rank(); ++a) {
      if (t.dim(a) != 1 && t.dim(a) != out[a + shift]) return false;
      indexed[i] = indexed[i] || (a + shift < out.rank() - 1 && t.dim(a) != 1);
    }
  }
  return true;
}

// The slices of `t` (an input broadcast against an output of shape `out`, aligned at the last
// axis, or an output itself) at the sample's indices, gathered into a fresh contiguous tensor of
// the output's rank: [slices, 1, ..., 1, t's extents on the axes after the sample's leading ones].
Expected<Tensor> gatherSample(const Tensor& t, const Shape& out, const Sample& sample) {
  const int rank = out.rank();
  const int shift = rank - t.rank();
  Shape shape;
  shape.resize(rank);
  Shape slice_shape, slice_strides;
  std::int64_t slice_elements = 1;
  for (int a = 0; a < rank; ++a) {
    const int axis = a - shift;  // t's axis, or < 0 where t has none
    if (a < sample.lead) {
      shape[a] = a == 0 ? static_cast<std::int64_t>(sample.at.size()) : 1;
    } else {
      shape[a] = axis >= 0 ? t.dim(axis) : 1;
      if (axis >= 0) {
        slice_shape.push_back(t.dim(axis));
        slice_strides.push_back(t.stride(axis));
        slice_elements *= t.dim(axis);
      }
    }
  }
  SVM_ASSIGN_OR_RETURN(Tensor gathered, Tensor::empty(t.dtype(), shape));
  const std::size_t slice_bytes = static_cast<std::size_t>(slice_elements) * t.itemSize();
  for (std::size_t k = 0; k < sample.at.size(); ++k) {
    std::int64_t offset = t.offset();
    for (int a = std::max(0, shift); a < sample.lead; ++a) {
      const int axis = a - shift;
      if (t.dim(axis) != 1) offset += sample.at[k][static_cast<std::size_t>(a)] * t.stride(axis);
    }
    SVM_ASSIGN_OR_RETURN(Tensor slice, t.asStrided(slice_shape, slice_strides, offset));
    SVM_ASSIGN_OR_RETURN(Tensor dense, slice.contiguous());
    std::memcpy(static_cast<char*>(gathered.rawData()) + k * slice_bytes, dense.rawData(), slice_bytes);
  }
  return gathered;
}

// The rows the reference computes for a set of `rows` output rows: the first and last (range
// ends, last tiles), kStridedRows on a stride from a random offset (a fault every few rows, or
// in one task's chunk) and `middle` more drawn from `seed`.
Sample sampleRows(std::int64_t rows, int middle, std::uint64_t seed) {
  std::vector<std::int64_t> picked = {0};
  FastRandom random{seed ^ 0x5A4D504C45ULL};
  const std::int64_t stride = std::max<std::int64_t>(1, rows / kStridedRows);
  for (std::int64_t r = static_cast<std::int64_t>(random.next() % static_cast<std::uint64_t>(stride)); r < rows;
       r += stride)
    picked.push_back(r);
  for (int k = 0; k < middle; ++k)
    picked.push_back(1 + static_cast<std::int64_t>(random.next() % static_cast<std::uint64_t>(rows - 2)));
  picked.push_back(rows - 1);
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  Sample sample;
  for (std::int64_t r : picked) sample.at.push_back({r});
  return sample;
}

// The lines (one index on every axis but the last) the reference computes for an output of shape
// `out`: the first and the last line of the first and of the last axis-0 row (range ends, last
// tiles, the first and the last task's rows), `count` lines on a diagonal rotated at random per
// axis (every index of an axis of at most `count` extent at least once, so a wrong broadcast or
// stride along any axis shows; longer axes are stratified), and `middle` more drawn at random.
Sample sampleLines(const Shape& out, int middle, std::uint64_t seed) {
  Sample sample;
  sample.lead = out.rank() - 1;
  const auto lead = static_cast<std::size_t>(sample.lead);
  const std::int64_t count =
      std::clamp<std::int64_t>(kLineSampleElements / std::max<std::int64_t>(1, out[sample.lead]), kMinLines, kMaxLines);
  FastRandom random{seed ^ 0x4C494E4553ULL};
  for (const bool last_row : {false, true}) {
    for (const bool last_line : {false, true}) {
      std::vector<std::int64_t> index(lead);
      for (std::size_t a = 0; a < lead; ++a) {
        const bool last = a == 0 ? last_row : last_line;
        index[a] = last ? out[static_cast<int>(a)] - 1 : 0;
      }
      sample.at.push_back(std::move(index));
    }
  }
  std::vector<std::int64_t> rotation(lead);
  for (std::int64_t& r : rotation) r = static_cast<std::int64_t>(random.next() % static_cast<std::uint64_t>(count));
  for (std::int64_t k = 0; k < count; ++k) {
    std::vector<std::int64_t> index(lead);
    for (std::size_t a = 0; a < lead; ++a) {
      const std::int64_t extent = out[static_cast<int>(a)];
      const std::int64_t bucket = extent / count;  // > 0: the axis is longer than the diagonal
      index[a] = (k + rotation[a]) % count * extent / count +
                 (bucket > 0 ? static_cast<std::int64_t>(random.next() % static_cast<std::uint64_t>(bucket)) : 0);
    }
    sample.at.push_back(std::move(index));
  }
  for (int m = 0; m < middle; ++m) {
    std::vector<std::int64_t> index(lead);
    for (std::size_t a = 0; a < lead; ++a) {
      index[a] = static_cast<std::int64_t>(random.next() % static_cast<std::uint64_t>(out[static_cast<int>(a)]));
    }
    sample.at.push_back(std::move(index));
  }
  std::sort(sample.at.begin(), sample.at.end());
  sample.at.erase(std::unique(sample.at.begin(), sample.at.end()), sample.at.end());
  return sample;
}

// The reference's outputs on the sampled slices of an output of shape `out` (each as
// gatherSample gives them): one reference call on the indexed inputs' slices gathered and the
// other inputs whole (broadcast along the sampled axes, so they broadcast over the gathered
// slices alike). False (not a validation case) when the reference rejects the inputs or does not
// give the gathered shape.
Expected<bool> sampledReference(const CompiledKernel& kernel, std::span<const Value* const> inputs,
                                const std::vector<bool>& indexed, const Shape& out, const Sample& sample,
                                std::vector<Value>& expected) {
  std::vector<Value> gathered(inputs.size());
  std::vector<const Value*> pointers(inputs.begin(), inputs.end());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!indexed[i]) continue;
    SVM_ASSIGN_OR_RETURN(Tensor picked, gatherSample(inputs[i]->tensor(), out, sample));
    gathered[i] = Value::fromTensor(std::move(picked));
    pointers[i] = &gathered[i];
  }
  expected.assign(static_cast<std::size_t>(kernel.num_outputs), Value());
  if (!kernel.family->reference(kernel.spec, pointers, expected).isOk()) return false;
  const auto slices = static_cast<std::int64_t>(sample.at.size());
  for (const Value& value : expected) {
    if (!value.isTensor() || value.tensor().rank() != out.rank() || value.tensor().dim(0) != slices) {
      return false;  // not one slice per gathered slice: compare whole
    }
    for (int a = 1; a < sample.lead; ++a) {
      if (value.tensor().dim(a) != 1) return false;
    }
  }
  return true;
}

// Element (i, j) of a 2-D tensor as a double; float32 read through its strides.
struct Elements {
  const Tensor& t;
  const float* f32 = t.dtype() == DType::Float32 ? t.data<float>() : nullptr;
  std::int64_t row_stride = t.stride(0), col_stride = t.stride(1), cols = t.dim(1);
  double operator()(std::int64_t i, std::int64_t j) const {
    return f32 != nullptr ? static_cast<double>(f32[i * row_stride + j * col_stride]) : t.elementAsDouble(i * cols + j);
  }
  // Row i times w (w.size() == cols), four partial sums (no one long chain of dependent adds).
  double rowDot(std::int64_t i, std::span<const double> w) const {
    if (f32 != nullptr && col_stride == 1) return dense(f32 + i * row_stride, w);
    double sums[4] = {0, 0, 0, 0};
    const std::int64_t n = static_cast<std::int64_t>(w.size());
    std::int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      for (int u = 0; u < 4; ++u) sums[u] += (*this)(i, j + u) * w[static_cast<std::size_t>(j + u)];
    }
    for (; j < n; ++j) sums[0] += (*this)(i, j) * w[static_cast<std::size_t>(j)];
    return (sums[0] + sums[1]) + (sums[2] + sums[3]);
  }
  // The same sums over contiguous float32 values (no index arithmetic per element: the sampled
  // matmul's projection reads every element of A, B and C once per pass).
  static double dense(const float* x, std::span<const double> w) {
    double sums[4] = {0, 0, 0, 0};
    const std::size_t n = w.size();
    std::size_t j = 0;
    for (; j + 4 <= n; j += 4) {
      for (std::size_t u = 0; u < 4; ++u) sums[u] += static_cast<double>(x[j + u]) * w[j + u];
    }
    for (; j < n; ++j) sums[0] += static_cast<double>(x[j]) * w[j];
    return (sums[0] + sums[1]) + (sums[2] + sums[3]);
  }
};

// Every row of a 2-D matmul's output C = A x B checked at once (Freivalds): C v against A (B v)
// for a random v with |v_j| in [1, 2] and random signs, in double, compared like an output (rel
// L2, twice the dtype's tolerance: the projection sums N rounding errors). A wrong element c_ij
// moves (C v)_i by its error times |v_j| >= 1, so no row of the output goes unchecked.
Comparison projectedProduct(const Tensor& a, const Tensor& b, const Tensor& c, std::uint64_t seed) {
  const std::int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  const Elements a_at{a}, b_at{b}, c_at{c};
  FastRandom random{seed ^ 0x46524549ULL};
  std::vector<double> v(static_cast<std::size_t>(n)), bv(static_cast<std::size_t>(k), 0.0);
  for (double& x : v) x = (1.0 + random.uniform()) * ((random.next() & 1) != 0 ? 1.0 : -1.0);
  // B v in B's memory order (a transposed B, the usual weight, is read down its columns).
  if (std::abs(b_at.col_stride) <= std::abs(b_at.row_stride)) {
    for (std::int64_t p = 0; p < k; ++p) bv[static_cast<std::size_t>(p)] = b_at.rowDot(p, v);
  } else {
    for (std::int64_t j = 0; j < n; ++j) {
      const double vj = v[static_cast<std::size_t>(j)];
      if (b_at.f32 != nullptr && b_at.row_stride == 1) {  // a column of W.T: a row of W
        const float* column = b_at.f32 + j * b_at.col_stride;
        for (std::int64_t p = 0; p < k; ++p) bv[static_cast<std::size_t>(p)] += static_cast<double>(column[p]) * vj;
        continue;
      }
      for (std::int64_t p = 0; p < k; ++p) bv[static_cast<std::size_t>(p)] += b_at(p, j) * vj;
    }
  }
  double diff2 = 0, ref2 = 0;
  Comparison result;
  for (std::int64_t i = 0; i < m; ++i) {
    const double want = a_at.rowDot(i, bv), got = c_at.rowDot(i, v);
    if (!std::isfinite(got) && std::isfinite(want)) {
      result.ok = false;
      result.reason =
          fmt::format("output 0: row {} projects to {}, expected {} (random projection of every row)", i, got, want);
      return result;
    }
    diff2 += (got - want) * (got - want);
    ref2 += want * want;
  }
  const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  const double tolerance = 2 * toleranceFor(c.dtype());
  result.rel_l2 = rel;
  if (!(rel <= tolerance)) {
    result.ok = false;
    result.reason =
        fmt::format("output 0: relative L2 error {:.3g} > {:.3g} of the random projection of every row ({})", rel,
                    tolerance, dtypeName(c.dtype()));
  }
  return result;
}

// True when every output of `a` is a contiguous tensor with the dtype, shape and bytes of `b`'s.
bool sameBits(std::span<const Value> a, std::span<const Value> b) {
  if (a.size() != b.size()) return false;
  for (std::size_t o = 0; o < a.size(); ++o) {
    if (!a[o].isTensor() || !b[o].isTensor()) return false;
    const Tensor& x = a[o].tensor();
    const Tensor& y = b[o].tensor();
    if (x.dtype() != y.dtype() || x.shape() != y.shape() || !x.isContiguous() || !y.isContiguous()) return false;
    if (std::memcmp(x.rawData(), y.rawData(), static_cast<std::size_t>(x.numel()) * x.itemSize()) != 0) return false;
  }
  return true;
}

// One validation case: a shape set's inputs, what the reference computed for them (every output,
// or sampled rows), and the output buffers' dtypes and shapes.
struct Case {
  std::vector<Value> inputs;
  std::vector<const Value*> pointers;
  std::string described;
  std::vector<DType> dtypes;
  std::vector<Shape> out_shapes;
  std::vector<Value> expected;
  Sample rows;
  std::uint64_t seed = 0;  // the projection check's
  std::int64_t elements = 0;
};

// Builds the case for `inputs`; nullopt when the op itself rejects them (no validation case).
Expected<std::optional<Case>> makeCase(const CompiledKernel& kernel, std::vector<Value> inputs, bool observed_set,
                                       std::uint64_t seed) {
  Case c;
  c.inputs = std::move(inputs);
  c.seed = seed;
  for (const Value& v : c.inputs) {
    c.pointers.push_back(v.isNone() ? nullptr : &v);  // None = an omitted input
    if (v.isTensor()) c.elements += v.tensor().numel();
  }
  c.described = describeInputs(c.pointers);
  // The output shapes the kernel will produce; a call the family rejects is no validation case.
  const std::size_t num_outputs = static_cast<std::size_t>(kernel.num_outputs);
  c.dtypes.resize(num_outputs);
  c.out_shapes.resize(num_outputs);
  const bool shaped = kernel.family->outputs(kernel.spec, c.pointers, c.dtypes, c.out_shapes).isOk();
  // Many rows: the reference computes sampled rows only (the observed shapes three, each range
  // end two); an elementwise output of rank >= 3, sampled lines. Otherwise, or when the op mixes
  // rows, it computes everything.
  std::vector<bool> row_indexed;
  if (shaped && linesSampleable(kernel.spec, c.pointers, c.out_shapes[0], row_indexed) &&
      c.out_shapes[0].numel() > kSampleElementwiseAbove) {
    c.rows = sampleLines(c.out_shapes[0], observed_set ? 1 : 0, seed);
    for (const Shape& shape : c.out_shapes) {
      if (shape != c.out_shapes[0]) c.rows.clear();
    }
  } else if (shaped && rowsSampleable(kernel.spec, c.pointers, c.out_shapes[0], row_indexed) &&
             c.out_shapes[0][0] > kSampleAboveRows &&
             (kernel.spec.op == OpId::MatMul || c.out_shapes[0].numel() > kSampleElementwiseAbove)) {
    c.rows = sampleRows(c.out_shapes[0][0], observed_set ? 1 : 0, seed);
    for (const Shape& shape : c.out_shapes) {
      if (shape.rank() == 0 || shape[0] != c.out_shapes[0][0]) c.rows.clear();
    }
  }
  // Reference first: an input combination the op itself rejects is not a validation case.
  c.expected.resize(num_outputs);
  if (!c.rows.empty()) {
    SVM_ASSIGN_OR_RETURN(bool sampled,
                         sampledReference(kernel, c.pointers, row_indexed, c.out_shapes[0], c.rows, c.expected));
    if (!sampled) c.rows.clear();
  }
  if (c.rows.empty()) {
    c.expected.assign(num_outputs, Value());
    if (!kernel.family->reference(kernel.spec, c.pointers, c.expected).isOk()) return std::optional<Case>();
    for (std::size_t o = 0; o < num_outputs; ++o) {
      if (!c.expected[o].isTensor()) continue;
      c.dtypes[o] = c.expected[o].tensor().dtype();
      c.out_shapes[o] = c.expected[o].tensor().shape();
    }
  }
  return std::optional<Case>(std::move(c));
}

// Runs the kernel on the case into poisoned output buffers of the reference's shapes (handed to the
// kernel for in-place use).
Expected<std::vector<Value>> runCase(const CompiledKernel& kernel, const Case& c) {
  std::vector<Value> actual(c.dtypes.size());
  for (std::size_t o = 0; o < actual.size(); ++o) {
    SVM_ASSIGN_OR_RETURN(Tensor buffer, poisonedTensor(c.dtypes[o], c.out_shapes[o]));
    actual[o] = Value::fromTensor(std::move(buffer));
  }
  Status run = invokeCompiled(kernel, c.pointers, actual);
  if (!run.isOk()) return run.withContext(fmt::format("validation run on {}", c.described));
  return actual;
}

// The kernel's outputs for the case against the reference: in full, or every element written (no
// poison left) and then the sampled rows (for a matmul also a random projection of every row).
Expected<Comparison> checkCase(const CompiledKernel& kernel, const Case& c, const std::vector<Value>& actual,
                               std::uint64_t projection_seed) {
  if (c.rows.empty()) return compareOutputs(c.expected, actual);
  Comparison comparison;
  std::vector<Value> sampled(actual.size());
  for (std::size_t o = 0; o < actual.size(); ++o) {
    if (!actual[o].isTensor()) return compareOutputs(c.expected, actual);
    if (const std::int64_t at = firstPoisoned(actual[o].tensor()); at >= 0) {
      comparison.ok = false;
      comparison.reason = fmt::format("output {}: element {} was never written (still the poison)", o, at);
      return comparison;
    }
    SVM_ASSIGN_OR_RETURN(Tensor gathered, gatherSample(actual[o].tensor(), c.out_shapes[o], c.rows));
    sampled[o] = Value::fromTensor(std::move(gathered));
  }
  comparison = compareOutputs(c.expected, sampled);
  if (!comparison.ok) comparison.reason += fmt::format(" (sampled {})", c.rows.describe());
  if (comparison.ok && kernel.spec.op == OpId::MatMul && actual.size() == 1) {
    comparison =
        projectedProduct(c.pointers[0]->tensor(), c.pointers[1]->tensor(), actual[0].tensor(), projection_seed);
  }
  return comparison;
}

Status validateRuns(const CompiledKernel& kernel, std::span<const std::vector<Shape>> shape_sets, std::uint64_t seed) {
  // The packings of validation inputs are of no use afterwards (and hold the inputs alive).
  struct DropPackings {
    const CompiledKernel& kernel;
    ~DropPackings() { kernel.packed.clear(); }
  } drop{kernel};
  // A kernel that packs an operand for its cache (a weight B) must also be right when a later call
  // reads that packing. Later shape sets therefore pass the first packing call's tensors again where
  // their dtype and shape are the same (a static weight): such a call reads the cached packing and is
  // checked against the reference in full. Only if no set did, the smallest set that packed runs once
  // more at the end, reading its own packing: bit for bit its first outputs pass as they are, any
  // difference is checked in full.
  std::vector<Value> packed_inputs;
  std::optional<Case> packing_case;
  std::vector<Value> packing_outputs;
  bool reuse_checked = false;
  // One pool of draws for every set's large normal inputs (each set's chunks at other places).
  Tensor pool;
  std::uint64_t round = 0;
  int compared = 0;
  for (const std::vector<Shape>& shapes : shape_sets) {
    const bool observed_set = round == 0;
    SVM_ASSIGN_OR_RETURN(std::vector<Value> inputs, drawInputs(kernel.spec, shapes, seed + round, {}, &pool));
    ++round;
    for (std::size_t i = 0; i < inputs.size() && i < packed_inputs.size(); ++i) {
      const Value& again = packed_inputs[i];
      if (again.isTensor() && inputs[i].isTensor() && again.tensor().dtype() == inputs[i].tensor().dtype() &&
          again.tensor().shape() == inputs[i].tensor().shape()) {
        inputs[i] = again;
      }
    }
    SVM_ASSIGN_OR_RETURN(std::optional<Case> made, makeCase(kernel, std::move(inputs), observed_set, seed + round));
    if (!made) continue;
    Case& c = *made;
    ++compared;
    const PackedOperandCache::Stats before = kernel.packed.stats();
    SVM_ASSIGN_OR_RETURN(std::vector<Value> actual, runCase(kernel, c));
    const PackedOperandCache::Stats after = kernel.packed.stats();
    const bool read_cached = after.hits > before.hits;
    SVM_ASSIGN_OR_RETURN(Comparison comparison, checkCase(kernel, c, actual, seed + round));
    if (!comparison.ok) {
      return makeError(ErrorCode::JitError, "kernel {} disagrees with the reference on {}{}: {}", kernel.handle.symbol,
                       c.described, read_cached ? " (packed operand cached)" : "", comparison.reason);
    }
    reuse_checked = reuse_checked || read_cached;
    if (after.packs > before.packs) {
      if (packed_inputs.empty()) packed_inputs = c.inputs;
      if (!packing_case || c.elements < packing_case->elements) {
        packing_case = std::move(c);
        packing_outputs = std::move(actual);
      }
    }
  }
  if (compared == 0) {
    return makeError(ErrorCode::JitError, "no validation case for kernel {} could run (the reference rejected every input set)",
                     kernel.handle.symbol);
  }
  if (packing_case && !reuse_checked) {
    SVM_ASSIGN_OR_RETURN(std::vector<Value> again, runCase(kernel, *packing_case));
    if (sameBits(packing_outputs, again)) return Status::ok();
    SVM_ASSIGN_OR_RETURN(Comparison comparison, checkCase(kernel, *packing_case, again, packing_case->seed + 1));
    if (!comparison.ok) {
      return makeError(ErrorCode::JitError, "kernel {} disagrees with the reference on {} (packed operand cached): {}",
                       kernel.handle.symbol, packing_case->described, comparison.reason);
    }
  }
  return Status::ok();
}

}  // namespace

Status validateKernel(const CompiledKernel& kernel, std::span<const std::vector<Shape>> shape_sets,
                      std::uint64_t seed) {
  Status status = Status::ok();
  {
    const KernelThreadsOnThisThread one(1);
    status = validateRuns(kernel, shape_sets, seed);
  }
  // Cached code that computes wrong results must not be served again (test-injected corruption
  // is the kernel's wrapper, not its code).
  if (!status.isOk() && kernel.from_cache && !kernel.corrupt_outputs && kernel.backend != nullptr &&
      kernel.backend->kernelCache() != nullptr) {
    kernel.backend->kernelCache()->forget(kernel.cache_key, status.message());
  }
  return status;
}

namespace {
thread_local const ProgramCalls* t_program_calls = nullptr;
}  // namespace

void ProgramCalls::addMatmul(std::span<const ProfileRecord> records) {
  for (const ProfileRecord& record : records) {
    if (record.inputs.size() < 2 || !record.inputs[0].is_tensor || !record.inputs[1].is_tensor ||
        record.inputs[0].shape.rank() != 2 || record.inputs[1].shape.rank() != 2)
      continue;
    const std::int64_t m = record.inputs[0].shape[0], k = record.inputs[0].shape[1], n = record.inputs[1].shape[1];
    auto it = std::find_if(matmuls.begin(), matmuls.end(), [&](const Matmul& mm) { return mm.k == k && mm.n == n; });
    if (it == matmuls.end()) it = matmuls.insert(matmuls.end(), Matmul{k, n, {}});
    if (std::find(it->rows.begin(), it->rows.end(), m) == it->rows.end()) it->rows.push_back(m);
    const Shape& as = record.inputs[0].strides;
    const Shape& bs = record.inputs[1].strides;
    if (as.rank() != 2 || bs.rank() != 2 || m <= 1 || k <= 1 || n <= 1) continue;
    const Matmul::Layout layout{m, {as[0], as[1]}, {bs[0], bs[1]}};
    if (layout.a[0] <= 0 || layout.a[1] <= 0 || layout.b[0] <= 0 || layout.b[1] <= 0) continue;
    if (std::find(it->layouts.begin(), it->layouts.end(), layout) == it->layouts.end()) it->layouts.push_back(layout);
  }
}

bool ProgramCalls::defer(std::function<void()> work) const {
  if (!defer_creation) return false;
  deferred_.push_back(std::move(work));
  return true;
}

void ProgramCalls::createDeferred() {
  std::vector<std::function<void()>> work = std::move(deferred_);
  deferred_.clear();
  const ProgramCallsScope scope(*this);  // the work reads ProgramCalls::current()
  const bool saved = std::exchange(defer_creation, false);
  for (const std::function<void()>& w : work) w();
  defer_creation = saved;
}

const ProgramCalls* ProgramCalls::current() {
  return t_program_calls;
}

std::vector<int> ProgramCalls::programKernelThreads() {
  const std::int64_t fixed = Tunables::get(Tunable::KernelThreads);
  if (fixed > 0) return {static_cast<int>(fixed)};
  const int cores = availableCores();
  if (cores <= 1) return {1};
  return {cores, cores - 1};
}

ProgramCallsScope::ProgramCallsScope(const ProgramCalls& calls) : saved_(std::exchange(t_program_calls, &calls)) {}
ProgramCallsScope::~ProgramCallsScope() {
  t_program_calls = saved_;
}

}  // namespace shapevm::jit
