// SPDX-License-Identifier: Apache-2.0
// Shape inference for compile requests, guards and token rewriting (see shape_infer.h).
#include "jit/shape_infer.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "support/tunables.h"

namespace shapevm::jit {

namespace {
constexpr std::string_view kReasonNames[] = {
#define SVM_JIT_REASON(name, meaning) #name,
#include "jit/abort_reasons.def"
#undef SVM_JIT_REASON
};
constexpr std::string_view kReasonMeanings[] = {
#define SVM_JIT_REASON(name, meaning) meaning,
#include "jit/abort_reasons.def"
#undef SVM_JIT_REASON
};
static_assert(sizeof(kReasonNames) / sizeof(kReasonNames[0]) == kNumJitReasons);

bool isRowMajor(const OperandProfile& operand) {
  return operand.strides == contiguousStrides(operand.shape) || operand.shape.numel() <= 1;
}

std::int64_t floorPow2(std::int64_t v) {
  return v <= 0 ? 0 : std::int64_t{1} << (63 - std::countl_zero(static_cast<std::uint64_t>(v)));
}
std::int64_t ceilPow2(std::int64_t v) {
  return v <= 1 ? 1 : std::int64_t{1} << (64 - std::countl_zero(static_cast<std::uint64_t>(v - 1)));
}
}  // namespace

bool sameGroup(const ProfileRecord& a, const ProfileRecord& b) {
  if (a.inputs.size() != b.inputs.size()) return false;
  for (std::size_t i = 0; i < a.inputs.size(); ++i) {
    const OperandProfile& x = a.inputs[i];
    const OperandProfile& y = b.inputs[i];
    if (x.is_tensor != y.is_tensor) return false;
    if (!x.is_tensor) {
      if (x.kind != y.kind) return false;
      continue;
    }
    if (x.dtype != y.dtype || x.shape.rank() != y.shape.rank() || isRowMajor(x) != isRowMajor(y)) return false;
  }
  return true;
}

const ProfileRecord* newestRecord(std::span<const ProfileRecord> records) {
  const ProfileRecord* best = nullptr;
  for (const ProfileRecord& record : records) {
    if (best == nullptr || record.last_seen > best->last_seen) best = &record;
  }
  return best;
}

std::string_view jitReasonName(JitReason reason) { return kReasonNames[static_cast<std::size_t>(reason)]; }
std::string_view jitReasonMeaning(JitReason reason) { return kReasonMeanings[static_cast<std::size_t>(reason)]; }

Expected<ShapeInference> inferSpec(OpId op, std::span<const AttrValue> attrs, std::span<const ProfileRecord> records,
                                   int compiles) {
  const ProfileRecord* target = newestRecord(records);
  if (target == nullptr) return makeError(ErrorCode::JitError, "no profiled signature at this site");
  ShapeInference result;
  result.spec.op = op;
  result.spec.attrs.assign(attrs.begin(), attrs.end());
  const bool symbolic = compiles >= Tunables::get(Tunable::MaxRecompiles);
  const bool buckets = Tunables::get(Tunable::RangeBuckets) != 0;
  bool varying = false;
  std::uint64_t common_bits = ~std::uint64_t{0};
  for (std::size_t i = 0; i < target->inputs.size(); ++i) {
    const OperandProfile& operand = target->inputs[i];
    OperandSpec spec;
    spec.is_tensor = operand.is_tensor;
    spec.scalar_kind = operand.kind;
    spec.scalar_example = operand.scalar;
    result.observed.push_back(operand.shape);
    if (operand.is_tensor) {
      spec.dtype = operand.dtype;
      spec.rank = operand.shape.rank();
      spec.contiguous = isRowMajor(operand);
      for (int d = 0; d < spec.rank; ++d) {
        std::int64_t lo = operand.shape[d];
        std::int64_t hi = lo;
        for (const ProfileRecord& record : records) {
          if (!sameGroup(record, *target)) continue;
          lo = std::min(lo, record.inputs[i].shape[d]);
          hi = std::max(hi, record.inputs[i].shape[d]);
        }
        DimSpec& dim = spec.dims[d];
        if (symbolic) {
          dim = DimSpec{};
        } else if (lo == hi) {
          dim.size = lo;
        } else {
          varying = true;
          dim.lo = buckets ? floorPow2(lo) : lo;
          dim.hi = buckets ? ceilPow2(hi) : hi;
          for (const ProfileRecord& record : records) {
            if (sameGroup(record, *target)) common_bits &= static_cast<std::uint64_t>(record.inputs[i].shape[d]) | (1ULL << 6);
          }
        }
      }
    }
    result.spec.inputs.push_back(spec);
  }
  if (varying) result.divisibility = static_cast<std::int64_t>(1ULL << std::min(6, std::countr_zero(common_bits)));
  result.policy = symbolic ? fmt::format("symbolic (recompile cap {} reached)", Tunables::get(Tunable::MaxRecompiles))
                  : varying ? "range"
                            : "specialized";
  return result;
}

Guard guardFor(const KernelSpec& spec) {
  Guard guard;
  for (const OperandSpec& operand : spec.inputs) {
    InputGuard input;
    input.is_tensor = operand.is_tensor;
    input.scalar_kind = operand.scalar_kind;
    input.dtype = operand.dtype;
    input.rank = operand.rank;
    input.require_contiguous = operand.contiguous;
    for (int d = 0; d < operand.rank; ++d) {
      input.dims[d] = operand.dims[d].guarded();
    }
    guard.inputs.push_back(input);
  }
  return guard;
}

bool guardCovers(const Guard& outer, const Guard& inner) {
  if (outer.inputs.size() != inner.inputs.size()) return false;
  for (std::size_t i = 0; i < outer.inputs.size(); ++i) {
    const InputGuard& o = outer.inputs[i];
    const InputGuard& n = inner.inputs[i];
    if (o.is_tensor != n.is_tensor) return false;
    if (!o.is_tensor) {
      if (o.scalar_kind != n.scalar_kind) return false;
      continue;
    }
    if (o.dtype != n.dtype || o.rank != n.rank) return false;
    if (o.require_contiguous && !n.require_contiguous) return false;
    for (int d = 0; d < o.rank; ++d) {
      if (!o.dims[d].covers(n.dims[d])) return false;
    }
  }
  return true;
}

std::string guardMissReason(const Guard& guard, const ProfileRecord& record, JitReason* reason) {
  auto fail = [&](JitReason code, std::string text) {
    if (reason != nullptr) *reason = code;
    return text;
  };
  if (guard.inputs.size() != record.inputs.size()) return fail(JitReason::GuardKind, "input count differs");
  for (std::size_t i = 0; i < guard.inputs.size(); ++i) {
    const InputGuard& g = guard.inputs[i];
    const OperandProfile& operand = record.inputs[i];
    if (g.is_tensor != operand.is_tensor) {
      return fail(JitReason::GuardKind, fmt::format("input {} is {}", i, operand.is_tensor ? "a tensor" : "not a tensor"));
    }
    if (!g.is_tensor) {
      if (operand.kind != g.scalar_kind) {
        return fail(JitReason::GuardKind, fmt::format("input {} is a {} scalar, compiled for {}", i, valueKindName(operand.kind),
                                                      valueKindName(g.scalar_kind)));
      }
      continue;
    }
    if (operand.dtype != g.dtype) {
      return fail(JitReason::GuardDtype, fmt::format("input {} is {}, compiled for {}", i, dtypeName(operand.dtype), dtypeName(g.dtype)));
    }
    if (operand.shape.rank() != g.rank) {
      return fail(JitReason::GuardRank, fmt::format("input {} has rank {}, compiled for {}", i, operand.shape.rank(), g.rank));
    }
    if (g.require_contiguous && !isRowMajor(operand)) {
      return fail(JitReason::GuardContiguity, fmt::format("input {} {} is non-contiguous (strides {})", i,
                                                          operand.shape.toString(), operand.strides.toString()));
    }
    for (int d = 0; d < g.rank; ++d) {
      const std::int64_t extent = operand.shape[d];
      const DimRange& dim = g.dims[d];
      if (!dim.accepts(extent)) {
        std::string range = dim.single() ? std::to_string(dim.lo) : dim.toString();
        return fail(JitReason::GuardRange, fmt::format("dim {} of input {} {} is {}, compiled for {}", d, i,
                                                       operand.shape.toString(), extent, range));
      }
    }
  }
  return "";
}

TensorDescriptor rewriteToken(const TensorDescriptor& token, const OperandSpec& spec) {
  TensorDescriptor out = token;
  if (!token.is_tensor || token.any_rank || token.rank() != spec.rank) return out;
  for (int d = 0; d < spec.rank; ++d) {
    DimToken& dim = out.dims[static_cast<std::size_t>(d)];
    if (dim.is_static) continue;
    const DimSpec& s = spec.dims[d];
    // The token keeps its own divisor; its range becomes the spec's (none when fully symbolic).
    const DimRange range = s.isStatic()  ? DimRange::exactly(s.size)
                           : s.bounded() ? DimRange::between(s.lo, s.hi)
                                         : DimRange{};
    dim.lo = range.lo;
    dim.hi = range.hi;
  }
  return out;
}

}  // namespace shapevm::jit
