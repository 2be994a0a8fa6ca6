// SPDX-License-Identifier: Apache-2.0
// .npy/.npz I/O: round trips of every dtype and of non-contiguous views, hand-made headers
// (versions, key order, byte order, Fortran order), rejection of every malformed input without
// a crash (truncation at every length, byte flips), and a cross-check against numpy itself
// (Debian's /usr/bin/python3) in both directions; the numpy tests skip when numpy is missing.
#include "shapevm/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

namespace shapevm {

// gtest prints Shapes as "[2,3]" rather than as bytes (ADL finds it next to Shape).
[[maybe_unused]] static void PrintTo(const Shape& shape, std::ostream* os) { *os << shape.toString(); }

namespace {

namespace fs = std::filesystem;

constexpr DType kNumpyDTypes[] = {DType::Float32, DType::Float16, DType::Float64, DType::Int32, DType::Int64, DType::Bool};

// Deterministic, dtype-appropriate values (exactly representable in every float dtype).
Tensor makeTensor(DType dtype, const Shape& shape, int seed = 1) {
  Tensor t = std::move(Tensor::empty(dtype, shape).value());
  std::mt19937 rng(static_cast<unsigned>(seed));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    double v = static_cast<double>(static_cast<int>(rng() % 2001) - 1000) / 8.0;
    if (dtype == DType::Bool) v = rng() % 2;
    if (isInteger(dtype)) v = static_cast<double>(static_cast<std::int64_t>(rng() % 200001) - 100000);
    storeFromDouble(t.rawData(), dtype, i, v);
  }
  return t;
}

void expectSameTensor(const Tensor& actual, const Tensor& expected, DType expected_dtype) {
  ASSERT_TRUE(actual.defined());
  EXPECT_EQ(actual.dtype(), expected_dtype);
  ASSERT_EQ(actual.shape(), expected.shape()) << actual.describe() << " vs " << expected.describe();
  if (actual.numel() > 0) {  // Tensor::isContiguous() says false for empty shapes like [2,0,3]
    EXPECT_TRUE(actual.isContiguous());
  }
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    ASSERT_EQ(actual.elementAsDouble(i), expected.elementAsDouble(i)) << "element " << i << " of " << expected.describe();
  }
}

std::vector<std::uint8_t> bytesOf(std::string_view text) { return {text.begin(), text.end()}; }

// A .npy file with the given header dict text, padded like numpy does.
std::vector<std::uint8_t> makeNpy(std::string dict, const std::vector<std::uint8_t>& data, int major = 1) {
  const std::size_t preamble = major == 1 ? 10 : 12;
  std::size_t total = preamble + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::vector<std::uint8_t> out = bytesOf("\x93NUMPY");
  out.push_back(static_cast<std::uint8_t>(major));
  out.push_back(0);
  const std::size_t length = dict.size();
  out.push_back(static_cast<std::uint8_t>(length));
  out.push_back(static_cast<std::uint8_t>(length >> 8));
  if (major > 1) {
    out.push_back(static_cast<std::uint8_t>(length >> 16));
    out.push_back(static_cast<std::uint8_t>(length >> 24));
  }
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <typename T>
std::vector<std::uint8_t> rawBytes(std::initializer_list<T> values, bool big_endian = false) {
  std::vector<std::uint8_t> out;
  for (T v : values) {
    std::uint8_t buffer[sizeof(T)];
    std::memcpy(buffer, &v, sizeof(T));
    if (big_endian) std::reverse(buffer, buffer + sizeof(T));
    out.insert(out.end(), buffer, buffer + sizeof(T));
  }
  return out;
}

class TempDir {
 public:
  TempDir() {
    std::random_device device;
    path_ = fs::temp_directory_path() / fmt::format("shapevm_npy_test_{}_{:08x}", ::getpid(), device());
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(std::string_view name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void writeBytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::error_code ignored;
  fs::remove(path, ignored);  // truncating a written file in place is slow on some filesystems
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::uint8_t> readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---- Round trips ----

TEST(NpyRoundTrip, EveryDTypeAndShape) {
  const Shape shapes[] = {Shape{}, Shape{0}, Shape{5}, Shape{2, 3}, Shape{2, 0, 3}, Shape{2, 3, 4}, Shape{1, 1, 1, 1, 1, 1, 1, 2}};
  for (DType dtype : kNumpyDTypes) {
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(fmt::format("{} {}", dtypeName(dtype), shape.toString()));
      Tensor t = makeTensor(dtype, shape);
      std::vector<std::uint8_t> bytes = serializeNpy(t);
      ASSERT_GE(bytes.size(), 10u);
      const std::size_t header_length = bytes[8] | (bytes[9] << 8);
      EXPECT_EQ((10 + header_length) % 64, 0u) << "data must start 64-byte aligned";
      EXPECT_EQ(bytes[10 + header_length - 1], '\n');
      EXPECT_EQ(bytes.size(), 10 + header_length + static_cast<std::size_t>(t.numel()) * t.itemSize());
      Expected<Tensor> back = parseNpy(bytes, "round trip");
      ASSERT_TRUE(back) << back.status().toString();
      expectSameTensor(*back, t, dtype);
    }
  }
}

TEST(NpyRoundTrip, HeaderTextMatchesNumpy) {
  std::vector<std::uint8_t> bytes = serializeNpy(makeTensor(DType::Float32, Shape{3}));
  std::string header(bytes.begin() + 10, bytes.begin() + 10 + (bytes[8] | (bytes[9] << 8)));
  EXPECT_EQ(header.substr(0, header.find('}') + 1), "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }");
  bytes = serializeNpy(makeTensor(DType::Bool, Shape{}));
  header.assign(bytes.begin() + 10, bytes.begin() + 10 + (bytes[8] | (bytes[9] << 8)));
  EXPECT_EQ(header.substr(0, header.find('}') + 1), "{'descr': '|b1', 'fortran_order': False, 'shape': (), }");
  bytes = serializeNpy(makeTensor(DType::Int64, Shape{2, 3}));
  header.assign(bytes.begin() + 10, bytes.begin() + 10 + (bytes[8] | (bytes[9] << 8)));
  EXPECT_EQ(header.substr(0, header.find('}') + 1), "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }");
}

TEST(NpyRoundTrip, BFloat16IsWrittenAsFloat32) {
  Tensor t = makeTensor(DType::BFloat16, Shape{3, 4});
  Expected<Tensor> back = parseNpy(serializeNpy(t), "bf16");
  ASSERT_TRUE(back) << back.status().toString();
  expectSameTensor(*back, t, DType::Float32);
  // A bfloat16 view is widened too.
  Tensor view = std::move(t.asStrided(Shape{4, 3}, Shape{1, 4}, 0).value());
  back = parseNpy(serializeNpy(view), "bf16 view");
  ASSERT_TRUE(back) << back.status().toString();
  expectSameTensor(*back, view, DType::Float32);
}

TEST(NpyRoundTrip, NonContiguousViews) {
  for (DType dtype : kNumpyDTypes) {
    SCOPED_TRACE(dtypeName(dtype));
    Tensor base = makeTensor(dtype, Shape{4, 6}, 7);
    std::vector<Tensor> views = {
        std::move(base.asStrided(Shape{6, 4}, Shape{1, 6}, 0).value()),   // transpose
        std::move(base.asStrided(Shape{2, 3}, Shape{12, 2}, 1).value()),  // every other row and column, offset
        std::move(base.asStrided(Shape{6}, Shape{-1}, 11).value()),       // a reversed row
        std::move(base.asStrided(Shape{3, 6}, Shape{0, 1}, 6).value()),   // broadcast row (stride 0)
        std::move(base.asStrided(Shape{0, 6}, Shape{6, 1}, 0).value()),   // empty view
    };
    for (const Tensor& view : views) {
      SCOPED_TRACE(view.describe());
      Expected<Tensor> back = parseNpy(serializeNpy(view), "view");
      ASSERT_TRUE(back) << back.status().toString();
      expectSameTensor(*back, view, dtype);
    }
  }
}

TEST(NpyFile, WriteThenRead) {
  TempDir dir;
  Tensor t = makeTensor(DType::Float64, Shape{3, 5});
  ASSERT_TRUE(writeNpy(dir.file("a.npy"), t));
  Expected<Tensor> back = readNpy(dir.file("a.npy"));
  ASSERT_TRUE(back) << back.status().toString();
  expectSameTensor(*back, t, DType::Float64);
  EXPECT_EQ(readBytes(dir.file("a.npy")), serializeNpy(t));
  Tensor view = std::move(t.asStrided(Shape{5, 3}, Shape{1, 5}, 0).value());
  ASSERT_TRUE(writeNpy(dir.file("b.npy"), view));
  EXPECT_EQ(readBytes(dir.file("b.npy")), serializeNpy(view));
}

TEST(NpyFile, IoErrorsNameTheFile) {
  TempDir dir;
  Expected<Tensor> missing = readNpy(dir.file("missing.npy"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), ErrorCode::IoError);
  EXPECT_NE(missing.status().message().find("missing.npy"), std::string::npos) << missing.status().toString();
  Expected<Tensor> directory = readNpy(dir.path().string());
  EXPECT_FALSE(directory);
  Status status = writeNpy(dir.file("no/such/dir/x.npy"), makeTensor(DType::Float32, Shape{2}));
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("x.npy"), std::string::npos) << status.toString();
  EXPECT_FALSE(writeNpy(dir.file("u.npy"), Tensor()));
}

// ---- Hand-made headers ----

TEST(NpyHeader, AcceptsEveryWayNumpyAndHumansWriteIt) {
  const auto data = rawBytes<float>({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f});
  const char* dicts[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
      "{'fortran_order':False,'shape':(2,3),'descr':'<f4'}",
      "{ \"descr\" : \"<f4\" ,\n 'fortran_order' : False ,\t'shape' : ( 2 , 3 , ) , }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",
      "{'descr': 'f4', 'fortran_order': False, 'shape': (2, 3)}",
      "{'descr': '=f4', 'fortran_order': False, 'shape': ((2), 3)}",
  };
  for (std::size_t i = 0; i < std::size(dicts); ++i) {
    SCOPED_TRACE(dicts[i]);
    Expected<Tensor> t = parseNpy(makeNpy(dicts[i], data), "hand.npy");
    ASSERT_TRUE(t) << t.status().toString();
    EXPECT_EQ(t->dtype(), DType::Float32);
    EXPECT_EQ(t->shape(), (Shape{2, 3}));
    EXPECT_EQ(t->elementAsDouble(5), 6.0);
  }
  for (int major : {1, 2, 3}) {
    Expected<Tensor> t = parseNpy(makeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", data, major), "v");
    ASSERT_TRUE(t) << "version " << major << ": " << t.status().toString();
    EXPECT_EQ(t->elementAsDouble(2), 3.0);
  }
}

TEST(NpyHeader, ZeroDimAndEmpty) {
  Expected<Tensor> scalar = parseNpy(makeNpy("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", rawBytes<double>({2.5})), "s");
  ASSERT_TRUE(scalar) << scalar.status().toString();
  EXPECT_EQ(scalar->rank(), 0);
  EXPECT_EQ(scalar->elementAsDouble(0), 2.5);
  Expected<Tensor> empty = parseNpy(makeNpy("{'descr': '<i8', 'fortran_order': True, 'shape': (0, 4), }", {}), "e");
  ASSERT_TRUE(empty) << empty.status().toString();
  EXPECT_EQ(empty->shape(), (Shape{0, 4}));
}

TEST(NpyHeader, BigEndianIsByteSwapped) {
  struct Case {
    const char* descr;
    std::vector<std::uint8_t> data;
    DType dtype;
  };
  const Case cases[] = {
      {">f4", rawBytes<float>({1.5f, -2.0f, 1e30f}, true), DType::Float32},
      {">f8", rawBytes<double>({1.5, -2.0, 1e300}, true), DType::Float64},
      {">i4", rawBytes<std::int32_t>({1, -2, 1 << 30}, true), DType::Int32},
      {">i8", rawBytes<std::int64_t>({1, -2, std::int64_t{1} << 40}, true), DType::Int64},
      {">f2", rawBytes<std::uint16_t>({floatToHalf(1.5f), floatToHalf(-2.0f), floatToHalf(1024.0f)}, true), DType::Float16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.descr);
    Expected<Tensor> t = parseNpy(makeNpy(fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (3,), }}", c.descr), c.data), "be");
    ASSERT_TRUE(t) << t.status().toString();
    EXPECT_EQ(t->dtype(), c.dtype);
    EXPECT_EQ(t->elementAsDouble(0), 1.5 - (isInteger(c.dtype) ? 0.5 : 0.0));
    EXPECT_EQ(t->elementAsDouble(1), -2.0);
    EXPECT_GT(t->elementAsDouble(2), 1000.0);
  }
  Expected<Tensor> b = parseNpy(makeNpy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", {0, 1, 7}), "b");
  ASSERT_TRUE(b) << b.status().toString();
  EXPECT_EQ(b->data<std::uint8_t>()[2], 1) << "nonzero bool bytes are normalized to 1";
}

TEST(NpyHeader, FortranOrderIsTransposedIntoCOrder) {
  // Column-major (2, 3): memory holds a[0,0] a[1,0] a[0,1] a[1,1] a[0,2] a[1,2].
  const auto data = rawBytes<std::int32_t>({0, 10, 1, 11, 2, 12});
  Expected<Tensor> t = parseNpy(makeNpy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", data), "f");
  ASSERT_TRUE(t) << t.status().toString();
  ASSERT_TRUE(t->isContiguous());
  const double expected[] = {0, 1, 2, 10, 11, 12};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t->elementAsDouble(i), expected[i]) << i;
  // Rank 3, Fortran: element (i, j, k) at i + 2j + 6k.
  std::vector<std::int64_t> values(24);
  for (int i = 0; i < 24; ++i) values[static_cast<std::size_t>(i)] = i;
  std::vector<std::uint8_t> raw(24 * 8);
  std::memcpy(raw.data(), values.data(), raw.size());
  t = parseNpy(makeNpy("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3, 4), }", raw), "f3");
  ASSERT_TRUE(t) << t.status().toString();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(t->elementAsDouble(i * 12 + j * 4 + k), i + 2 * j + 6 * k);
}

TEST(NpyHeader, RejectsUnsupportedDTypesByName) {
  const char* descrs[] = {"|u1", "|i1", "<u2", "<i2", "<u4", "<u8", "<c8", "<c16", "|O", "<U3", "|S4", "|V4", "<M8[ns]", "<f16", "bfloat16"};
  for (const char* descr : descrs) {
    SCOPED_TRACE(descr);
    Expected<Tensor> t = parseNpy(makeNpy(fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (1,), }}", descr), {0, 0, 0, 0, 0, 0, 0, 0}), "odd.npy");
    ASSERT_FALSE(t);
    EXPECT_EQ(t.status().code(), ErrorCode::Unsupported);
    EXPECT_NE(t.status().message().find("odd.npy"), std::string::npos) << t.status().toString();
    EXPECT_NE(t.status().message().find(descr), std::string::npos) << t.status().toString();
  }
  Expected<Tensor> structured = parseNpy(makeNpy("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (1,), }", {0, 0, 0, 0, 0, 0, 0, 0}), "rec.npy");
  ASSERT_FALSE(structured);
  EXPECT_NE(structured.status().message().find("rec.npy"), std::string::npos);
  EXPECT_NE(structured.status().message().find("('a', '<f4')"), std::string::npos) << structured.status().toString();
}

TEST(NpyHeader, RejectsMalformedHeadersWithReasons) {
  struct Case {
    std::string dict;
    std::vector<std::uint8_t> data;
    std::string expect;  // a substring of the message
  };
  const std::vector<std::uint8_t> four = {0, 0, 128, 63};
  const std::vector<Case> cases = {
      {"{'descr': '<f4', 'fortran_order': False}", four, "missing key 'shape'"},
      {"{'descr': '<f4', 'shape': (1,)}", four, "missing key 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", four, "unexpected key"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", four, "appears twice"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", four, "fortran_order"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", four, "shape must be a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", four, "non-negative"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': ('1',)}", four, "non-negative"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4)}", four, "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", four, "integer too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", four, "maximum rank"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", four, "data size mismatch"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': ()}", {0, 0, 128, 63, 0}, "data size mismatch"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", four, "missing '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", four, "unexpected text"},
      {"['descr', '<f4']", four, "expected a dict"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,) if True else ()}", four, "expected ','"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", four, "bad header"},
      {"{'descr': '<f4', 'fortran_order': Flase, 'shape': (1,)}", four, "unexpected name"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", four, "bad header"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': " + std::string(100, '(') + "1" + std::string(100, ')') + "}", four, "too deep"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dict);
    Expected<Tensor> t = parseNpy(makeNpy(c.dict, c.data), "bad.npy");
    ASSERT_FALSE(t);
    EXPECT_NE(t.status().message().find("bad.npy"), std::string::npos) << t.status().toString();
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << t.status().toString();
  }
}

TEST(NpyHeader, RejectsBadPreamble) {
  std::vector<std::uint8_t> good = makeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", {0, 0, 128, 63});
  ASSERT_TRUE(parseNpy(good, "good"));
  std::vector<std::uint8_t> bad_magic = good;
  bad_magic[1] = 'M';
  Expected<Tensor> t = parseNpy(bad_magic, "m.npy");
  ASSERT_FALSE(t);
  EXPECT_NE(t.status().message().find("bad magic"), std::string::npos) << t.status().toString();
  std::vector<std::uint8_t> version = good;
  version[6] = 4;
  t = parseNpy(version, "v.npy");
  ASSERT_FALSE(t);
  EXPECT_NE(t.status().message().find("version 4.0"), std::string::npos) << t.status().toString();
  std::vector<std::uint8_t> long_header = good;
  long_header[9] = 0x7f;
  t = parseNpy(long_header, "h.npy");
  ASSERT_FALSE(t);
  EXPECT_NE(t.status().message().find("truncated .npy header"), std::string::npos) << t.status().toString();
  t = parseNpy(bytesOf("PK\x03\x04 not numpy"), "z.npy");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.status().code(), ErrorCode::BadFormat);
}

// ---- Fuzz-ish: every truncation fails, no byte flip crashes ----

TEST(NpyFuzz, EveryTruncationIsAnError) {
  for (DType dtype : kNumpyDTypes) {
    std::vector<std::uint8_t> bytes = serializeNpy(makeTensor(dtype, Shape{2, 3}));
    for (std::size_t length = 0; length < bytes.size(); ++length) {
      Expected<Tensor> t = parseNpy(std::span(bytes.data(), length), "cut.npy");
      ASSERT_FALSE(t) << "length " << length;
      EXPECT_NE(t.status().message().find("cut.npy"), std::string::npos) << t.status().toString();
    }
  }
}

TEST(NpyFuzz, ByteFlipsNeverCrash) {
  const Tensor tensors[] = {makeTensor(DType::Float32, Shape{2, 3}), makeTensor(DType::Int64, Shape{}),
                            makeTensor(DType::Bool, Shape{0, 4})};
  int accepted = 0, rejected = 0;
  for (const Tensor& original : tensors) {
    const std::vector<std::uint8_t> bytes = serializeNpy(original);
    const std::size_t header_end = 10 + (bytes[8] | (bytes[9] << 8));
    for (std::size_t position = 0; position < header_end; ++position) {
      for (std::uint8_t mask : {0x01, 0x02, 0x08, 0x20, 0x40, 0x80, 0xff}) {
        std::vector<std::uint8_t> mutated = bytes;
        mutated[position] ^= mask;
        Expected<Tensor> t = parseNpy(mutated, "flip.npy");
        if (t) {
          ++accepted;
          // Whatever was accepted is a consistent tensor.
          EXPECT_EQ(static_cast<std::size_t>(t->numel()) * t->itemSize() + header_end, mutated.size());
        } else {
          ++rejected;
          EXPECT_NE(t.status().message().find("flip.npy"), std::string::npos) << t.status().toString();
        }
      }
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(accepted, 0);  // flips inside the padding are harmless
  // Random multi-byte damage anywhere in the file, with header-ish characters as replacements.
  std::mt19937 rng(42);
  const std::string alphabet = "0123456789(),:'\" {}[]-LTrueFalsf<>|=\n\x00\xff";
  const std::vector<std::uint8_t> bytes = serializeNpy(tensors[0]);
  for (int round = 0; round < 4000; ++round) {
    std::vector<std::uint8_t> mutated = bytes;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      mutated[rng() % mutated.size()] = static_cast<std::uint8_t>(alphabet[rng() % alphabet.size()]);
    }
    Expected<Tensor> t = parseNpy(mutated, "random.npy");
    if (t) {
      EXPECT_LE(static_cast<std::size_t>(t->numel()) * t->itemSize(), mutated.size());
    }
  }
}

// ---- .npz ----

std::vector<std::pair<std::string, Tensor>> sampleArrays() {
  Tensor base = makeTensor(DType::Float32, Shape{3, 4}, 3);
  return {
      {"weights", base},
      {"transposed", std::move(base.asStrided(Shape{4, 3}, Shape{1, 4}, 0).value())},
      {"ids", makeTensor(DType::Int64, Shape{5}, 4)},
      {"mask", makeTensor(DType::Bool, Shape{2, 2}, 5)},
      {"scalar", makeTensor(DType::Float64, Shape{}, 6)},
      {"empty", makeTensor(DType::Int32, Shape{0, 3}, 7)},
      {"half", makeTensor(DType::Float16, Shape{7}, 8)},
      {"a_name.with.dots", makeTensor(DType::BFloat16, Shape{2}, 9)},
  };
}

TEST(Npz, RoundTripStoredAndDeflatedInOrder) {
  TempDir dir;
  const auto arrays = sampleArrays();
  for (NpzCompression compression : {NpzCompression::Stored, NpzCompression::Deflated}) {
    const std::string path = dir.file(compression == NpzCompression::Stored ? "s.npz" : "d.npz");
    Status status = writeNpz(path, arrays, compression);
    ASSERT_TRUE(status) << status.toString();
    auto back = readNpz(path);
    ASSERT_TRUE(back) << back.status().toString();
    ASSERT_EQ(back->size(), arrays.size());
    for (std::size_t i = 0; i < arrays.size(); ++i) {
      SCOPED_TRACE(arrays[i].first);
      EXPECT_EQ((*back)[i].first, arrays[i].first);
      const DType expected = arrays[i].second.dtype() == DType::BFloat16 ? DType::Float32 : arrays[i].second.dtype();
      expectSameTensor((*back)[i].second, arrays[i].second, expected);
    }
  }
  EXPECT_LT(fs::file_size(dir.file("d.npz")) + 0, fs::file_size(dir.file("s.npz")) + 200);
  // An empty archive round-trips too.
  ASSERT_TRUE(writeNpz(dir.file("none.npz"), {}));
  auto none = readNpz(dir.file("none.npz"));
  ASSERT_TRUE(none) << none.status().toString();
  EXPECT_TRUE(none->empty());
}

TEST(Npz, ErrorsNameTheFile) {
  TempDir dir;
  auto missing = readNpz(dir.file("missing.npz"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), ErrorCode::IoError) << missing.status().toString();
  EXPECT_NE(missing.status().message().find("missing.npz"), std::string::npos);

  writeBytes(dir.file("text.npz"), bytesOf("this is not a zip archive at all, just some text\n"));
  auto text = readNpz(dir.file("text.npz"));
  ASSERT_FALSE(text);
  EXPECT_EQ(text.status().code(), ErrorCode::BadFormat) << text.status().toString();
  EXPECT_NE(text.status().message().find("text.npz"), std::string::npos);

  writeBytes(dir.file("plain.npz"), serializeNpy(makeTensor(DType::Float32, Shape{2})));
  EXPECT_FALSE(readNpz(dir.file("plain.npz")));

  EXPECT_FALSE(writeNpz(dir.file("dup.npz"), {{"a", Tensor::scalar(1, DType::Float32)}, {"a", Tensor::scalar(2, DType::Float32)}}));
  EXPECT_FALSE(writeNpz(dir.file("anon.npz"), {{"", Tensor::scalar(1, DType::Float32)}}));
  Status status = writeNpz(dir.file("no/dir/x.npz"), {{"a", Tensor::scalar(1, DType::Float32)}});
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("x.npz"), std::string::npos) << status.toString();
}

TEST(NpzFuzz, TruncationAndByteFlipsNeverCrash) {
  TempDir dir;
  const std::vector<std::pair<std::string, Tensor>> arrays = {{"x", makeTensor(DType::Float32, Shape{2, 3})},
                                                               {"y", makeTensor(DType::Int32, Shape{4})}};
  for (NpzCompression compression : {NpzCompression::Stored, NpzCompression::Deflated}) {
    const std::string good = dir.file("good.npz");
    ASSERT_TRUE(writeNpz(good, arrays, compression));
    const std::vector<std::uint8_t> bytes = readBytes(good);
    const std::string path = dir.file("bad.npz");
    for (std::size_t length = 0; length < bytes.size(); ++length) {
      writeBytes(path, std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(length)));
      auto result = readNpz(path);
      ASSERT_FALSE(result) << "length " << length;
      EXPECT_NE(result.status().message().find("bad.npz"), std::string::npos) << result.status().toString();
    }
    int rejected = 0;
    for (std::size_t position = 0; position < bytes.size(); ++position) {
      std::vector<std::uint8_t> mutated = bytes;
      mutated[position] ^= 0x5a;
      writeBytes(path, mutated);
      auto result = readNpz(path);
      if (!result) {
        ++rejected;
        EXPECT_NE(result.status().message().find("bad.npz"), std::string::npos) << result.status().toString();
      }
    }
    EXPECT_GT(rejected, static_cast<int>(bytes.size() / 4));
  }
}

// ---- Cross-check with numpy ----

constexpr const char* kPython = "/usr/bin/python3";

bool haveNumpy() {
  static const bool available =
      std::system(fmt::format("{} -c 'import numpy' >/dev/null 2>&1", kPython).c_str()) == 0;
  return available;
}

int runPython(const TempDir& dir, std::string_view name, std::string_view script) {
  const std::string path = dir.file(name);
  std::ofstream(path) << script;
  return std::system(fmt::format("{} '{}' '{}'", kPython, path, dir.path().string()).c_str());
}

// Writes numpy files in every layout plus a manifest of "name dtype shape sum" lines.
constexpr const char* kNumpyWriter = R"PY(
import sys, os
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(1234)
arrays = {
    "f32": rng.standard_normal((3, 4)).astype(np.float32),
    "f64": rng.standard_normal((2, 3, 4)),
    "f16": rng.standard_normal((5, 6)).astype(np.float16),
    "i32": rng.integers(-1000, 1000, (4, 3)).astype(np.int32),
    "i64": rng.integers(-2**40, 2**40, (2, 2, 3)).astype(np.int64),
    "b1": rng.integers(0, 2, (3, 5)).astype(np.bool_),
    "scalar": np.array(3.25),
    "empty": np.zeros((0, 3), np.float32),
    "big": rng.standard_normal((17, 33)).astype(np.float32),
    "vec": rng.standard_normal(7).astype(np.float64),
}
with open(os.path.join(d, "manifest.txt"), "w") as m:
    for name, a in arrays.items():
        np.save(os.path.join(d, name + ".npy"), a)
        np.save(os.path.join(d, name + "_f.npy"), np.asfortranarray(a) if a.ndim else a)  # asfortranarray makes 0-d 1-d
        np.save(os.path.join(d, name + "_be.npy"), a.astype(a.dtype.newbyteorder(">")))
        with open(os.path.join(d, name + "_v2.npy"), "wb") as f:
            np.lib.format.write_array(f, a, version=(2, 0))
        with open(os.path.join(d, name + "_v3.npy"), "wb") as f:
            np.lib.format.write_array(f, a, version=(3, 0))
        m.write("%s %s %s %r\n" % (name, a.dtype.str, ",".join(map(str, a.shape)) or "-", float(a.astype(np.float64).sum())))
np.savez(os.path.join(d, "all.npz"), **arrays)
np.savez_compressed(os.path.join(d, "all_c.npz"), **arrays)
hdr = open(os.path.join(d, "f32_f.npy"), "rb").read(128)
assert b"'fortran_order': True" in hdr, hdr
np.save(os.path.join(d, "u8.npy"), np.arange(4, dtype=np.uint8))
np.save(os.path.join(d, "c64.npy"), np.zeros(2, np.complex64))
np.save(os.path.join(d, "rec.npy"), np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
np.save(os.path.join(d, "obj.npy"), np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
import zipfile
with zipfile.ZipFile(os.path.join(d, "notnpy.npz"), "w") as z:
    z.writestr("readme.txt", "hello")
)PY";

// Compares what ShapeVM wrote (theirs: *_out*) with numpy's own copies.
constexpr const char* kNumpyChecker = R"PY(
import sys, os
import numpy as np
d = sys.argv[1]
failures = []
def check(label, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want, equal_nan=True):
        failures.append("%s: got %s%s, want %s%s" % (label, got.dtype, got.shape, want.dtype, want.shape))
def bf16(a):
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32)
names = [l.split()[0] for l in open(os.path.join(d, "manifest.txt"))]
for name in names:
    want = np.load(os.path.join(d, name + ".npy"))
    check(name + "_out", np.load(os.path.join(d, name + "_out.npy")), want)
    if want.ndim >= 2:
        check(name + "_outT", np.load(os.path.join(d, name + "_outT.npy")), want.T)
    if want.dtype == np.float32:
        check(name + "_outbf16", np.load(os.path.join(d, name + "_outbf16.npy")), bf16(want))
for npz in ("out.npz", "out_c.npz"):
    z = np.load(os.path.join(d, npz))
    if list(z.keys()) != names:
        failures.append("%s keys %s != %s" % (npz, list(z.keys()), names))
    for name in names:
        check(npz + ":" + name, z[name], np.load(os.path.join(d, name + ".npy")))
if failures:
    print("\n".join(failures))
    sys.exit(1)
print("numpy agrees with ShapeVM on", len(names), "arrays")
)PY";

class NumpyCrossCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!haveNumpy()) GTEST_SKIP() << kPython << " has no numpy; skipping the numpy cross-check";
    ASSERT_EQ(runPython(dir_, "writer.py", kNumpyWriter), 0) << "numpy writer script failed";
    std::ifstream manifest(dir_.file("manifest.txt"));
    std::string line;
    while (std::getline(manifest, line)) {
      std::istringstream fields(line);
      Entry entry;
      std::string shape_text, sum_text;
      fields >> entry.name >> entry.descr >> shape_text >> sum_text;
      if (shape_text != "-") {
        std::istringstream dims(shape_text);
        std::string dim;
        while (std::getline(dims, dim, ',')) entry.shape.push_back(std::stoll(dim));
      }
      entry.sum = std::strtod(sum_text.c_str(), nullptr);
      entries_.push_back(entry);
    }
    ASSERT_EQ(entries_.size(), 10u);
  }

  struct Entry {
    std::string name, descr;
    Shape shape;
    double sum = 0;
  };
  TempDir dir_;
  std::vector<Entry> entries_;
};

TEST_F(NumpyCrossCheck, ReadsEveryLayoutNumpyWrites) {
  auto npz = readNpz(dir_.file("all.npz"));
  ASSERT_TRUE(npz) << npz.status().toString();
  auto npz_compressed = readNpz(dir_.file("all_c.npz"));
  ASSERT_TRUE(npz_compressed) << npz_compressed.status().toString();
  ASSERT_EQ(npz->size(), entries_.size());
  ASSERT_EQ(npz_compressed->size(), entries_.size());
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = entries_[i];
    SCOPED_TRACE(entry.name + " " + entry.descr);
    Expected<Tensor> reference = readNpy(dir_.file(entry.name + ".npy"));
    ASSERT_TRUE(reference) << reference.status().toString();
    EXPECT_EQ(reference->shape(), entry.shape);
    double sum = 0;
    for (std::int64_t k = 0; k < reference->numel(); ++k) sum += reference->elementAsDouble(k);
    EXPECT_NEAR(sum, entry.sum, 1e-9 * (1 + std::abs(entry.sum)));
    for (const char* suffix : {"_f", "_be", "_v2", "_v3"}) {
      SCOPED_TRACE(suffix);
      Expected<Tensor> variant = readNpy(dir_.file(entry.name + suffix + ".npy"));
      ASSERT_TRUE(variant) << variant.status().toString();
      expectSameTensor(*variant, *reference, reference->dtype());
    }
    EXPECT_EQ((*npz)[i].first, entry.name);
    expectSameTensor((*npz)[i].second, *reference, reference->dtype());
    EXPECT_EQ((*npz_compressed)[i].first, entry.name);
    expectSameTensor((*npz_compressed)[i].second, *reference, reference->dtype());
  }
}

TEST_F(NumpyCrossCheck, RejectsNumpyDTypesShapeVmLacks) {
  const std::map<std::string, std::string> files = {
      {"u8.npy", "|u1"}, {"c64.npy", "<c8"}, {"rec.npy", "('a', '<f4')"}, {"obj.npy", "|O"}};
  for (const auto& [file, descr] : files) {
    Expected<Tensor> t = readNpy(dir_.file(file));
    ASSERT_FALSE(t) << file;
    EXPECT_EQ(t.status().code(), ErrorCode::Unsupported) << t.status().toString();
    EXPECT_NE(t.status().message().find(file), std::string::npos) << t.status().toString();
    EXPECT_NE(t.status().message().find(descr), std::string::npos) << t.status().toString();
  }
  auto not_npy = readNpz(dir_.file("notnpy.npz"));
  ASSERT_FALSE(not_npy);
  EXPECT_NE(not_npy.status().message().find("readme.txt"), std::string::npos) << not_npy.status().toString();
}

TEST_F(NumpyCrossCheck, NumpyReadsWhatShapeVmWrites) {
  std::vector<std::pair<std::string, Tensor>> all;
  for (const Entry& entry : entries_) {
    Expected<Tensor> t = readNpy(dir_.file(entry.name + "_f.npy"));  // Fortran on disk, C in memory
    ASSERT_TRUE(t) << t.status().toString();
    ASSERT_TRUE(writeNpy(dir_.file(entry.name + "_out.npy"), *t));
    if (t->rank() >= 2) {  // a non-contiguous transposed view
      Shape shape = t->shape(), strides = t->strides();
      std::reverse(shape.data(), shape.data() + shape.rank());
      std::reverse(strides.data(), strides.data() + strides.rank());
      Tensor view = std::move(t->asStrided(shape, strides, t->offset()).value());
      ASSERT_TRUE(writeNpy(dir_.file(entry.name + "_outT.npy"), view));
    }
    if (t->dtype() == DType::Float32) {
      Tensor bf16 = std::move(Tensor::empty(DType::BFloat16, t->shape()).value());
      for (std::int64_t k = 0; k < t->numel(); ++k) storeFromDouble(bf16.rawData(), DType::BFloat16, k, t->elementAsDouble(k));
      ASSERT_TRUE(writeNpy(dir_.file(entry.name + "_outbf16.npy"), bf16));
    }
    all.emplace_back(entry.name, *t);
  }
  ASSERT_TRUE(writeNpz(dir_.file("out.npz"), all));
  ASSERT_TRUE(writeNpz(dir_.file("out_c.npz"), all, NpzCompression::Deflated));
  EXPECT_EQ(runPython(dir_, "checker.py", kNumpyChecker), 0) << "numpy disagrees with ShapeVM's files (see output above)";
}

}  // namespace
}  // namespace shapevm
