// SPDX-License-Identifier: Apache-2.0
// dtype names, sizes and the float16 conversions (IEEE binary16, round to nearest even).
#include "shapevm/dtype.h"

#include <array>
#include <cmath>

namespace shapevm {
namespace {
struct DTypeRow {
  std::string_view name;
  std::string_view short_name;
  std::size_t size;
};
constexpr std::array kRows = {
#define SVM_DTYPE_ROW(name, ctype, full, short_name, size) DTypeRow{full, short_name, size},
    SVM_DTYPES(SVM_DTYPE_ROW)
#undef SVM_DTYPE_ROW
};
static_assert(kRows.size() == kNumDTypes, "dtype table and kNumDTypes disagree");
}  // namespace

std::string_view dtypeName(DType d) { return kRows[static_cast<std::size_t>(d)].name; }
std::string_view dtypeShortName(DType d) { return kRows[static_cast<std::size_t>(d)].short_name; }

std::optional<DType> parseDType(std::string_view text) {
  for (std::size_t i = 0; i < kRows.size(); ++i) {
    if (text == kRows[i].name || text == kRows[i].short_name) return static_cast<DType>(i);
  }
  if (text == "half") return DType::Float16;
  if (text == "float" ) return DType::Float32;
  if (text == "double") return DType::Float64;
  if (text == "int") return DType::Int64;
  return std::nullopt;
}

float halfToFloat(std::uint16_t h) {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));  // Inf / NaN
  if (exponent == 0) {
    if (mantissa == 0) return bitsToFloat(sign);
    float value = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal
    return sign ? -value : value;
  }
  return bitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::uint16_t floatToHalf(float f) {
  std::uint32_t bits = floatToBits(f);
  std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (abs_bits >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> Inf
  if (abs_bits < 0x38800000u) {
    // Subnormal or zero: round abs value * 2^24 to nearest even integer.
    float scaled = bitsToFloat(abs_bits) * 16777216.0f;
    auto rounded = static_cast<std::uint32_t>(std::nearbyint(scaled));
    return static_cast<std::uint16_t>(sign | rounded);
  }
  std::uint32_t mantissa_odd = (abs_bits >> 13) & 1u;
  abs_bits += 0xc8000fffu + mantissa_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<std::uint16_t>(sign | (abs_bits >> 13));
}

double loadAsDouble(const void* base, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::Float32: return static_cast<const float*>(base)[i];
    case DType::Float16: return halfToFloat(static_cast<const std::uint16_t*>(base)[i]);
    case DType::BFloat16: return bf16ToFloat(static_cast<const std::uint16_t*>(base)[i]);
    case DType::Float64: return static_cast<const double*>(base)[i];
    case DType::Int32: return static_cast<const std::int32_t*>(base)[i];
    case DType::Int64: return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
    case DType::Bool: return static_cast<const bool*>(base)[i] ? 1.0 : 0.0;
  }
  return 0.0;
}

void storeFromDouble(void* base, DType dtype, std::int64_t i, double v) {
  switch (dtype) {
    case DType::Float32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::Float16: {
      // Round to odd into float32 first, so the float32 -> float16 rounding is the only one that counts.
      float f = static_cast<float>(v);
      if (std::isfinite(v) && static_cast<double>(f) != v && std::isfinite(f)) {
        if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
        f = bitsToFloat(floatToBits(f) | 1u);
      }
      static_cast<std::uint16_t*>(base)[i] = floatToHalf(f);
      break;
    }
    case DType::BFloat16: static_cast<std::uint16_t*>(base)[i] = floatToBf16(static_cast<float>(v)); break;
    case DType::Float64: static_cast<double*>(base)[i] = v; break;
    case DType::Int32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v); break;
    case DType::Int64: static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v); break;
    case DType::Bool: static_cast<bool*>(base)[i] = v != 0.0; break;
  }
}

}  // namespace shapevm
