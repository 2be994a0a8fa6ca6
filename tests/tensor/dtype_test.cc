// SPDX-License-Identifier: Apache-2.0
// dtypes: names, short names, parsing and sizes; float16 conversions checked exhaustively and
// bit-exactly against numpy (Debian's /usr/bin/python3) as an independent oracle; bfloat16
// round-to-nearest-even against a rule derived here (and torch when importable); and
// loadAsDouble/storeFromDouble for every dtype. The oracle tests skip when numpy is missing.
#include "shapevm/dtype.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace shapevm {
namespace {

namespace fs = std::filesystem;

constexpr DType kAllDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                                DType::Int32,   DType::Int64,   DType::Bool};

// ---- Names and sizes ----

TEST(DTypeTest, NamesShortNamesAndSizes) {
  struct Row {
    DType dtype;
    const char* name;
    const char* short_name;
    std::size_t size;
  };
  const Row rows[] = {
      {DType::Float32, "float32", "f32", 4}, {DType::Float16, "float16", "f16", 2},
      {DType::BFloat16, "bfloat16", "bf16", 2}, {DType::Float64, "float64", "f64", 8},
      {DType::Int32, "int32", "i32", 4},     {DType::Int64, "int64", "i64", 8},
      {DType::Bool, "bool", "bool", 1},
  };
  static_assert(sizeof(rows) / sizeof(rows[0]) == kNumDTypes);
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    EXPECT_EQ(dtypeName(row.dtype), row.name);
    EXPECT_EQ(dtypeShortName(row.dtype), row.short_name);
    EXPECT_EQ(dtypeSize(row.dtype), row.size);
  }
}

TEST(DTypeTest, SizesMatchTheStorageTypes) {
#define SVM_CHECK_SIZE(name, ctype, full, short_name, size) \
  EXPECT_EQ(dtypeSize(DType::name), sizeof(ctype)) << full; \
  EXPECT_EQ(dtypeSize(DType::name), static_cast<std::size_t>(size)) << full;
  SVM_DTYPES(SVM_CHECK_SIZE)
#undef SVM_CHECK_SIZE
}

TEST(DTypeTest, ParseAcceptsFullShortAndAliasNames) {
  for (DType dtype : kAllDTypes) {
    EXPECT_EQ(parseDType(dtypeName(dtype)), dtype) << dtypeName(dtype);
    EXPECT_EQ(parseDType(dtypeShortName(dtype)), dtype) << dtypeShortName(dtype);
  }
  EXPECT_EQ(parseDType("half"), DType::Float16);
  EXPECT_EQ(parseDType("float"), DType::Float32);
  EXPECT_EQ(parseDType("double"), DType::Float64);
  EXPECT_EQ(parseDType("int"), DType::Int64);
}

TEST(DTypeTest, ParseRejectsUnknownNames) {
  for (const char* bad : {"", "Float32", "f8", "int8", "uint8", "float32 ", "complex64", "i"}) {
    EXPECT_FALSE(parseDType(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(DTypeTest, FloatingAndIntegerClassification) {
  EXPECT_TRUE(isFloating(DType::Float32));
  EXPECT_TRUE(isFloating(DType::Float16));
  EXPECT_TRUE(isFloating(DType::BFloat16));
  EXPECT_TRUE(isFloating(DType::Float64));
  EXPECT_FALSE(isFloating(DType::Int32));
  EXPECT_FALSE(isFloating(DType::Bool));
  EXPECT_TRUE(isInteger(DType::Int32));
  EXPECT_TRUE(isInteger(DType::Int64));
  EXPECT_FALSE(isInteger(DType::Bool));
  EXPECT_FALSE(isInteger(DType::Float64));
}

// ---- float16: hand-checked anchors (independent of numpy) ----

TEST(Float16Test, KnownValues) {
  struct Pair {
    std::uint16_t bits;
    float value;
  };
  const Pair pairs[] = {
      {0x0000, 0.0f},        {0x3c00, 1.0f},         {0xbc00, -1.0f},          {0x4000, 2.0f},
      {0x3800, 0.5f},        {0x3555, 0.333251953125f}, {0x7bff, 65504.0f},    {0xfbff, -65504.0f},
      {0x0400, 6.103515625e-05f} /* 2^-14, smallest normal */, {0x0001, 5.960464477539063e-08f} /* 2^-24 */,
      {0x03ff, 6.097555160522461e-05f} /* largest subnormal */, {0x7c00, INFINITY}, {0xfc00, -INFINITY},
  };
  for (const Pair& pair : pairs) {
    SCOPED_TRACE(pair.bits);
    EXPECT_EQ(halfToFloat(pair.bits), pair.value);
    EXPECT_EQ(floatToHalf(pair.value), pair.bits);
  }
  EXPECT_EQ(floatToBits(halfToFloat(0x8000)), 0x80000000u) << "-0 keeps its sign";
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
}

TEST(Float16Test, RoundsToNearestEvenAtTheEdges) {
  EXPECT_EQ(floatToHalf(65519.996f), 0x7bff) << "just below the overflow midpoint stays finite";
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00) << "the midpoint above 65504 rounds (to even) to inf";
  EXPECT_EQ(floatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::max()), 0xfc00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000) << "half of 2^-24 ties to even (zero)";
  EXPECT_EQ(floatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002) << "1.5 * 2^-24 ties to even (2)";
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(floatToHalf(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00) << "tie to even mantissa";
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02) << "tie to even mantissa (up)";
  EXPECT_EQ(floatToHalf(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  EXPECT_EQ(floatToHalf(std::ldexp(2047.0f, -25)), 0x0400) << "rounding a subnormal up reaches the smallest normal";
}

TEST(Float16Test, NanStaysNanAndInfStaysInf) {
  EXPECT_TRUE(std::isnan(halfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(halfToFloat(0x7c01)));
  EXPECT_TRUE(std::isnan(halfToFloat(0xffff)));
  std::uint16_t nan_bits = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan_bits & 0x7c00, 0x7c00);
  EXPECT_NE(nan_bits & 0x03ff, 0);
  std::uint16_t signalling = floatToHalf(bitsToFloat(0x7f800001u));  // payload below half's mantissa
  EXPECT_TRUE(std::isnan(halfToFloat(signalling))) << "a small NaN payload must not turn into inf";
  EXPECT_EQ(floatToHalf(bitsToFloat(0xffc00000u)) & 0x8000, 0x8000) << "NaN keeps its sign";
  EXPECT_EQ(floatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(floatToHalf(-INFINITY), 0xfc00);
}

TEST(Float16Test, EveryFiniteHalfRoundTripsThroughFloat) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    auto h = static_cast<std::uint16_t>(bits);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0) continue;  // NaN payloads are not preserved
    ASSERT_EQ(floatToHalf(halfToFloat(h)), h) << "bits 0x" << std::hex << bits;
  }
}

TEST(Float16Test, HalfToFloatIsMonotonicOverPositivePatterns) {
  for (std::uint16_t h = 0; h < 0x7c00; ++h) {
    ASSERT_LT(halfToFloat(h), halfToFloat(static_cast<std::uint16_t>(h + 1))) << h;
    ASSERT_EQ(halfToFloat(static_cast<std::uint16_t>(h | 0x8000)), -halfToFloat(h));
  }
}

// ---- float16 vs numpy ----

bool numpyAvailable() {
  static const bool available = [] {
    if (access("/usr/bin/python3", X_OK) != 0) return false;
    return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  }();
  return available;
}

bool torchAvailable() {
  static const bool available = [] {
    if (access("/usr/bin/python3", X_OK) != 0) return false;
    return std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") == 0;
  }();
  return available;
}

fs::path scratchDir(const std::string& name) {
  fs::path dir = fs::path(testing::TempDir()) / ("svm_dtype_" + name + "_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir;
}

template <typename T>
void writeRaw(const fs::path& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  ASSERT_TRUE(out.good()) << path;
}

template <typename T>
std::vector<T> readRaw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  auto size = static_cast<std::size_t>(in.tellg());
  std::vector<T> values(size / sizeof(T));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  return values;
}

// Runs `code` under /usr/bin/python3 with sys.argv[1] = dir; returns the exit status.
int runPython(const fs::path& dir, const std::string& code) {
  fs::path script = dir / "oracle.py";
  {
    std::ofstream out(script);
    out << code;
  }
  std::string command = "/usr/bin/python3 '" + script.string() + "' '" + dir.string() + "'";
  return std::system(command.c_str());
}

TEST(Float16NumpyTest, HalfToFloatMatchesNumpyForAll65536Patterns) {
  if (!numpyAvailable()) GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
  fs::path dir = scratchDir("h2f");
  ASSERT_EQ(runPython(dir,
                      "import sys, numpy as np\n"
                      "v = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)\n"
                      "v.tofile(sys.argv[1] + '/h2f.bin')\n"),
            0);
  std::vector<std::uint32_t> expected = readRaw<std::uint32_t>(dir / "h2f.bin");
  ASSERT_EQ(expected.size(), 65536u);
  int mismatches = 0;
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    float ours = halfToFloat(static_cast<std::uint16_t>(bits));
    float theirs = bitsToFloat(expected[bits]);
    bool same = std::isnan(theirs) ? std::isnan(ours) : floatToBits(ours) == expected[bits];
    if (!same && ++mismatches <= 10) {
      ADD_FAILURE() << "half 0x" << std::hex << bits << ": ours 0x" << floatToBits(ours) << " numpy 0x"
                    << expected[bits];
    }
  }
  EXPECT_EQ(mismatches, 0);
  fs::remove_all(dir);
}

// Float32 inputs that stress float->half rounding: every midpoint between adjacent halves and
// its float neighbours, values in and around the half range, raw random bit patterns, specials.
std::vector<float> float16Probes() {
  std::vector<float> probes;
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {
    double low = halfToFloat(static_cast<std::uint16_t>(h));
    double high = h + 1 == 0x7c00 ? 65536.0 : halfToFloat(static_cast<std::uint16_t>(h + 1));
    auto mid = static_cast<float>((low + high) / 2);  // exact: needs 12 significant bits
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      probes.push_back(v);
      probes.push_back(-v);
    }
  }
  std::mt19937 rng(20240601);
  for (int i = 0; i < 40000; ++i) probes.push_back(bitsToFloat(static_cast<std::uint32_t>(rng())));
  std::uniform_int_distribution<std::uint32_t> exponent(90, 145);  // subnormal-half .. overflow
  for (int i = 0; i < 40000; ++i) {
    std::uint32_t bits = (rng() & 0x80000000u) | (exponent(rng) << 23) | (rng() & 0x7fffffu);
    probes.push_back(bitsToFloat(bits));
  }
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(),
                            bitsToFloat(0x7f800001u), bitsToFloat(0xffc00001u), bitsToFloat(0x7fffffffu),
                            std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(), 65504.0f, 65519.0f, 65520.0f, 65536.0f,
                            std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(1.0f, -26),
                            std::ldexp(1.0f, -14), std::ldexp(1023.5f, -24), 1e-8f, 1e8f, 0.1f, 1.0f / 3.0f};
  for (float v : specials) {
    probes.push_back(v);
    probes.push_back(-v);
  }
  return probes;
}

TEST(Float16NumpyTest, FloatToHalfMatchesNumpyBitExactly) {
  if (!numpyAvailable()) GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
  fs::path dir = scratchDir("f2h");
  std::vector<float> probes = float16Probes();
  ASSERT_GT(probes.size(), 200000u);
  writeRaw(dir / "in.bin", probes);
  ASSERT_EQ(runPython(dir,
                      "import sys, numpy as np\n"
                      "d = sys.argv[1]\n"
                      "v = np.fromfile(d + '/in.bin', dtype=np.float32)\n"
                      "with np.errstate(all='ignore'):\n"
                      "    v.astype(np.float16).view(np.uint16).tofile(d + '/out.bin')\n"),
            0);
  std::vector<std::uint16_t> expected = readRaw<std::uint16_t>(dir / "out.bin");
  ASSERT_EQ(expected.size(), probes.size());
  int mismatches = 0;
  for (std::size_t i = 0; i < probes.size(); ++i) {
    std::uint16_t ours = floatToHalf(probes[i]);
    bool numpy_nan = (expected[i] & 0x7c00) == 0x7c00 && (expected[i] & 0x03ff) != 0;
    bool same = numpy_nan ? std::isnan(halfToFloat(ours)) : ours == expected[i];
    if (!same && ++mismatches <= 10) {
      ADD_FAILURE() << "float 0x" << std::hex << floatToBits(probes[i]) << " (" << std::dec << probes[i]
                    << "): ours 0x" << std::hex << ours << " numpy 0x" << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
  fs::remove_all(dir);
}

// ---- bfloat16 ----

// Magnitude of a non-negative bf16 pattern as double; the pattern past the largest finite value
// (0x7f80) counts as 2^128 so that the overflow midpoint is a tie like any other.
double bf16Magnitude(std::uint32_t pattern) {
  if (pattern >= 0x7f80u) return std::ldexp(1.0, 128);
  return static_cast<double>(bf16ToFloat(static_cast<std::uint16_t>(pattern)));
}

// Round-to-nearest-even derived from the definition: pick the nearer of the two bf16 values that
// bracket |f|; on a tie pick the one with an even last bit; 2^128 means inf.
std::uint16_t referenceBf16(float f) {
  std::uint32_t bits = floatToBits(f);
  std::uint32_t sign = (bits >> 16) & 0x8000u;
  std::uint32_t magnitude_bits = bits & 0x7fffffffu;
  if (magnitude_bits == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7f80u);
  std::uint32_t below = magnitude_bits >> 16;
  double value = std::fabs(static_cast<double>(f));
  double low = bf16Magnitude(below), high = bf16Magnitude(below + 1);
  if (value == low) return static_cast<std::uint16_t>(sign | below);
  double to_low = value - low, to_high = high - value;
  std::uint32_t chosen = to_low < to_high ? below : to_high < to_low ? below + 1 : ((below & 1u) ? below + 1 : below);
  return static_cast<std::uint16_t>(sign | chosen);
}

std::vector<float> bf16Probes() {
  std::vector<float> probes;
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) probes.push_back(bitsToFloat(static_cast<std::uint32_t>(rng())));
  for (int i = 0; i < 20000; ++i) {
    // Exact ties (low half 0x8000) and their neighbours, with both parities of the kept bit.
    std::uint32_t high = rng() & 0xffff0000u;
    for (std::uint32_t low : {0x8000u, 0x7fffu, 0x8001u, 0x0000u, 0xffffu}) probes.push_back(bitsToFloat(high | low));
  }
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), bitsToFloat(0x7f7f8000u), bitsToFloat(0x7f7f7fffu)}) {
    probes.push_back(v);
  }
  return probes;
}

bool bf16IsNan(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

TEST(BFloat16Test, KnownValues) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(bf16ToFloat(0x4049), 3.140625f);
  EXPECT_EQ(floatToBf16(3.14159265f), 0x4049);
  EXPECT_EQ(floatToBf16(bitsToFloat(0x3f808000u)), 0x3f80) << "tie rounds to even (down)";
  EXPECT_EQ(floatToBf16(bitsToFloat(0x3f818000u)), 0x3f82) << "tie rounds to even (up)";
  EXPECT_EQ(floatToBf16(bitsToFloat(0x3f808001u)), 0x3f81);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7f80) << "FLT_MAX rounds to inf";
  EXPECT_EQ(floatToBf16(bitsToFloat(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(floatToBf16(INFINITY), 0x7f80);
  EXPECT_EQ(floatToBf16(-INFINITY), 0xff80);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
}

TEST(BFloat16Test, NanStaysNanWithItsSign) {
  for (std::uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fffffffu}) {
    std::uint16_t b = floatToBf16(bitsToFloat(bits));
    EXPECT_TRUE(bf16IsNan(b)) << std::hex << bits << " -> " << b;
    EXPECT_EQ(b & 0x8000u, (bits >> 16) & 0x8000u);
    EXPECT_TRUE(std::isnan(bf16ToFloat(b)));
  }
}

TEST(BFloat16Test, EveryPatternRoundTrips) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    auto b = static_cast<std::uint16_t>(bits);
    if (bf16IsNan(b)) {
      ASSERT_TRUE(std::isnan(bf16ToFloat(b)));
      continue;
    }
    ASSERT_EQ(floatToBf16(bf16ToFloat(b)), b) << std::hex << bits;
  }
}

TEST(BFloat16Test, RoundingMatchesTheDefinitionOnRandomFloats) {
  std::vector<float> probes = bf16Probes();
  int mismatches = 0;
  for (float f : probes) {
    std::uint16_t ours = floatToBf16(f);
    bool same = std::isnan(f) ? bf16IsNan(ours) : ours == referenceBf16(f);
    if (!same && ++mismatches <= 10) {
      ADD_FAILURE() << "float 0x" << std::hex << floatToBits(f) << ": ours 0x" << ours << " reference 0x"
                    << referenceBf16(f);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(BFloat16Test, RoundingMatchesTorch) {
  if (!torchAvailable()) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
  fs::path dir = scratchDir("bf16");
  std::vector<float> probes = bf16Probes();
  writeRaw(dir / "in.bin", probes);
  ASSERT_EQ(runPython(dir,
                      "import sys, numpy as np, torch\n"
                      "d = sys.argv[1]\n"
                      "v = torch.from_numpy(np.fromfile(d + '/in.bin', dtype=np.float32))\n"
                      "v.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).tofile(d + '/out.bin')\n"),
            0);
  std::vector<std::uint16_t> expected = readRaw<std::uint16_t>(dir / "out.bin");
  ASSERT_EQ(expected.size(), probes.size());
  int mismatches = 0;
  for (std::size_t i = 0; i < probes.size(); ++i) {
    std::uint16_t ours = floatToBf16(probes[i]);
    bool same = bf16IsNan(expected[i]) ? bf16IsNan(ours) : ours == expected[i];
    if (!same && ++mismatches <= 10) {
      ADD_FAILURE() << "float 0x" << std::hex << floatToBits(probes[i]) << ": ours 0x" << ours << " torch 0x"
                    << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
  fs::remove_all(dir);
}

// ---- loadAsDouble / storeFromDouble ----

// Storage for up to 4 elements of any dtype, with guard elements either side checked untouched.
struct Slots {
  alignas(8) unsigned char bytes[8 * 6];
  Slots() { std::memset(bytes, 0xA5, sizeof(bytes)); }
  void* base(DType dtype) { return bytes + dtypeSize(dtype); }  // element -1 is a guard
};

TEST(LoadStoreTest, RoundTripsExactValuesInEveryDType) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(std::string(dtypeName(dtype)));
    Slots slots;
    std::vector<double> values = {0.0, 1.0, 0.0, 1.0};
    if (dtype != DType::Bool) values = {-3.0, 0.0, 2.0, 96.0};
    for (int i = 0; i < 4; ++i) storeFromDouble(slots.base(dtype), dtype, i, values[static_cast<std::size_t>(i)]);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(loadAsDouble(slots.base(dtype), dtype, i), values[static_cast<std::size_t>(i)]) << i;
    }
    // Guards before element 0 and after element 3 are untouched.
    std::size_t size = dtypeSize(dtype);
    for (std::size_t b = 0; b < size; ++b) EXPECT_EQ(slots.bytes[b], 0xA5);
    for (std::size_t b = size * 5; b < size * 6; ++b) EXPECT_EQ(slots.bytes[b], 0xA5);
  }
}

TEST(LoadStoreTest, StoresUseTheDTypesEncoding) {
  Slots slots;
  storeFromDouble(slots.base(DType::Float32), DType::Float32, 1, 0.1);
  EXPECT_EQ(static_cast<float*>(slots.base(DType::Float32))[1], 0.1f);

  storeFromDouble(slots.base(DType::Float16), DType::Float16, 2, 1.5);
  EXPECT_EQ(static_cast<std::uint16_t*>(slots.base(DType::Float16))[2], 0x3e00);
  storeFromDouble(slots.base(DType::Float16), DType::Float16, 0, 1e6);
  EXPECT_EQ(static_cast<std::uint16_t*>(slots.base(DType::Float16))[0], 0x7c00);
  EXPECT_EQ(loadAsDouble(slots.base(DType::Float16), DType::Float16, 0), INFINITY);

  storeFromDouble(slots.base(DType::BFloat16), DType::BFloat16, 3, -1.0);
  EXPECT_EQ(static_cast<std::uint16_t*>(slots.base(DType::BFloat16))[3], 0xbf80);

  storeFromDouble(slots.base(DType::Float64), DType::Float64, 1, 0.1);
  EXPECT_EQ(static_cast<double*>(slots.base(DType::Float64))[1], 0.1);

  storeFromDouble(slots.base(DType::Int64), DType::Int64, 0, 9007199254740992.0);
  EXPECT_EQ(static_cast<std::int64_t*>(slots.base(DType::Int64))[0], std::int64_t{1} << 53);
  static_cast<std::int64_t*>(slots.base(DType::Int64))[1] = -(std::int64_t{1} << 40);
  EXPECT_EQ(loadAsDouble(slots.base(DType::Int64), DType::Int64, 1), -1099511627776.0);

  static_cast<std::int32_t*>(slots.base(DType::Int32))[2] = std::numeric_limits<std::int32_t>::min();
  EXPECT_EQ(loadAsDouble(slots.base(DType::Int32), DType::Int32, 2), -2147483648.0);
}

TEST(LoadStoreTest, FloatToIntegerTruncatesTowardZero) {
  Slots slots;
  storeFromDouble(slots.base(DType::Int32), DType::Int32, 0, 2.9);
  storeFromDouble(slots.base(DType::Int32), DType::Int32, 1, -2.9);
  EXPECT_EQ(static_cast<std::int32_t*>(slots.base(DType::Int32))[0], 2);
  EXPECT_EQ(static_cast<std::int32_t*>(slots.base(DType::Int32))[1], -2);
  storeFromDouble(slots.base(DType::Int64), DType::Int64, 0, -7.5);
  EXPECT_EQ(static_cast<std::int64_t*>(slots.base(DType::Int64))[0], -7);
}

TEST(LoadStoreTest, BoolIsNonZero) {
  Slots slots;
  const double inputs[] = {0.0, -0.0, 0.5, -3.0};
  const double expected[] = {0.0, 0.0, 1.0, 1.0};
  for (int i = 0; i < 4; ++i) storeFromDouble(slots.base(DType::Bool), DType::Bool, i, inputs[i]);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(loadAsDouble(slots.base(DType::Bool), DType::Bool, i), expected[i]) << i;
  EXPECT_EQ(static_cast<bool*>(slots.base(DType::Bool))[2], true);
}

TEST(LoadStoreTest, HalfPrecisionLoadsAreExactWidenings) {
  Slots slots;
  auto* halves = static_cast<std::uint16_t*>(slots.base(DType::Float16));
  halves[0] = 0x0001;  // 2^-24
  halves[1] = 0x7bff;
  EXPECT_EQ(loadAsDouble(halves, DType::Float16, 0), std::ldexp(1.0, -24));
  EXPECT_EQ(loadAsDouble(halves, DType::Float16, 1), 65504.0);
  auto* brains = static_cast<std::uint16_t*>(slots.base(DType::BFloat16));
  brains[0] = 0x0001;
  EXPECT_EQ(loadAsDouble(brains, DType::BFloat16, 0), std::ldexp(1.0, -133));
}

// storeFromDouble rounds a double to float32 first and then to float16, so a double just above
// a float16 midpoint (but within half a float32 ulp of it) rounds twice and lands on the wrong
// side. numpy converts float64 -> float16 directly: np.float64(1 + 2**-11 + 2**-40) -> 0x3c01.
TEST(LoadStoreTest, Float16StoreRoundsTheDoubleOnlyOnce) {
  Slots slots;
  storeFromDouble(slots.base(DType::Float16), DType::Float16, 0, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));
  EXPECT_EQ(static_cast<std::uint16_t*>(slots.base(DType::Float16))[0], 0x3c01);
}

}  // namespace
}  // namespace shapevm
