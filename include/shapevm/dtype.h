// SPDX-License-Identifier: Apache-2.0
// Element types. float16 and bfloat16 are stored as 16-bit patterns and computed in float32;
// conversions round to nearest even and keep NaN/Inf.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace shapevm {

// X-macro: name, C++ storage type, full name, short (token) name, item size.
#define SVM_DTYPES(X)                           \
  X(Float32, float, "float32", "f32", 4)        \
  X(Float16, std::uint16_t, "float16", "f16", 2) \
  X(BFloat16, std::uint16_t, "bfloat16", "bf16", 2) \
  X(Float64, double, "float64", "f64", 8)       \
  X(Int32, std::int32_t, "int32", "i32", 4)     \
  X(Int64, std::int64_t, "int64", "i64", 8)     \
  X(Bool, bool, "bool", "bool", 1)

enum class DType : std::uint8_t {
#define SVM_DTYPE_ENUM(name, ctype, full, short_name, size) name,
  SVM_DTYPES(SVM_DTYPE_ENUM)
#undef SVM_DTYPE_ENUM
};
inline constexpr int kNumDTypes = 7;

inline std::size_t dtypeSize(DType dtype) {
  constexpr std::size_t kSizes[] = {
#define SVM_DTYPE_SIZE(name, ctype, full, short_name, size) size,
      SVM_DTYPES(SVM_DTYPE_SIZE)
#undef SVM_DTYPE_SIZE
  };
  return kSizes[static_cast<std::size_t>(dtype)];
}
std::string_view dtypeName(DType dtype);       // "float32"
std::string_view dtypeShortName(DType dtype);  // "f32"
// Accepts full and short names ("float32", "f32", "half", "bf16", ...).
std::optional<DType> parseDType(std::string_view text);
inline bool isFloating(DType d) {
  return d == DType::Float32 || d == DType::Float16 || d == DType::BFloat16 || d == DType::Float64;
}
inline bool isInteger(DType d) { return d == DType::Int32 || d == DType::Int64; }

inline float bitsToFloat(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline std::uint32_t floatToBits(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float bf16ToFloat(std::uint16_t h) { return bitsToFloat(static_cast<std::uint32_t>(h) << 16); }
inline std::uint16_t floatToBf16(float f) {
  std::uint32_t bits = floatToBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(bits >> 16);
}

float halfToFloat(std::uint16_t h);
std::uint16_t floatToHalf(float f);

// Reads element `index` (in elements from `base`) of any dtype as double / writes one.
double loadAsDouble(const void* base, DType dtype, std::int64_t index);
void storeFromDouble(void* base, DType dtype, std::int64_t index, double value);

}  // namespace shapevm
