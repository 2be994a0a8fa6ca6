// SPDX-License-Identifier: Apache-2.0
// The .svm format and module files: exact round trips, every header failure named with its
// offset, corrupted and truncated inputs rejected (never a crash or a huge allocation — this
// runs under ASan+UBSan in CI), and loadModuleFile/saveModuleFile by extension.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>

#include "bytecode/binary_format.h"
#include "bytecode/module_io.h"
#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "test_util.h"

namespace shapevm {
namespace {

using testing::assembleOk;
using testing::readText;
using testing::testDataDir;

Module goldenModule(const std::string& name) { return assembleOk(readText(testDataDir("golden") + "/" + name)); }

// Recomputes the header checksum so a corrupted payload reaches the section parser.
void fixChecksum(std::vector<std::uint8_t>& bytes) {
  if (bytes.size() < kSvmHeaderSize) return;
  auto value = static_cast<std::uint32_t>(crc32(0L, bytes.data() + kSvmHeaderSize, static_cast<uInt>(bytes.size() - kSvmHeaderSize)));
  std::memcpy(bytes.data() + 8, &value, 4);
}

std::string errorOf(const std::vector<std::uint8_t>& bytes) {
  auto module = deserializeModule(bytes, "m.svm");
  return module ? "" : module.status().toString();
}

// Offset of the first instruction's opcode byte in a one-function module built by `bytes`.
std::size_t findSequence(const std::vector<std::uint8_t>& bytes, const std::vector<std::uint8_t>& needle) {
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  return it == bytes.end() ? std::string::npos : static_cast<std::size_t>(it - bytes.begin());
}

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / ("svm_bc_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" + std::to_string(counter_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

TEST(BinaryFormat, GoldensRoundTripExactly) {
  for (const char* name : {"lstm_cell.svasm", "lstm_loop.svasm", "scalars.svasm", "calls.svasm"}) {
    SCOPED_TRACE(name);
    Module module = goldenModule(name);
    std::vector<std::uint8_t> bytes = serializeModule(module);
    auto loaded = deserializeModule(bytes, name);
    ASSERT_TRUE(loaded.hasValue()) << loaded.status().toString();
    EXPECT_EQ(serializeModule(*loaded), bytes);
    EXPECT_EQ(disassemble(*loaded), disassemble(module));
    EXPECT_EQ(loaded->functions[0].locs, module.functions[0].locs);
  }
}

TEST(BinaryFormat, HeaderStartsWithMagicAndVersion) {
  std::vector<std::uint8_t> bytes = serializeModule(goldenModule("calls.svasm"));
  ASSERT_GE(bytes.size(), kSvmHeaderSize);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 3), "SVM");
  EXPECT_EQ(bytes[3], 1);
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 4, 4);
  EXPECT_EQ(version, kSvmVersion);
}

// Version 1 had a JitEnter opcode (number 13, later opcodes one higher) and a num_regions field
// after num_loops. `bytes` (version 2, one function) rewritten as version 1 would have written it.
std::vector<std::uint8_t> asVersion1(std::vector<std::uint8_t> bytes, std::int32_t num_regions) {
  std::size_t at = kSvmHeaderSize;
  const auto u32At = [&](std::size_t offset) {
    std::uint32_t v = 0;
    std::memcpy(&v, bytes.data() + offset, 4);
    return v;
  };
  for (int section = 0; section < 2; ++section) {  // META, CNST
    std::uint64_t length = 0;
    std::memcpy(&length, bytes.data() + at + 4, 8);
    at += 12 + length;
  }
  const std::size_t func_length_at = at + 4;
  std::size_t fn = at + 12;
  EXPECT_EQ(u32At(fn), 1u) << "one function";
  fn += 4;
  const std::size_t loops_end = fn + 4 + u32At(fn) + 12;  // name, num_outputs, num_registers, num_loops
  // Opcodes from 13 up move one higher: every instruction of the function, found by its shape.
  const Module module = deserializeModule(bytes, "v2.svm").value();
  for (const Instruction& inst : module.functions[0].code) {
    if (static_cast<int>(inst.op) < 13) continue;
    std::vector<std::uint8_t> encoded(16, 0);
    std::memcpy(encoded.data(), &inst, 16);
    const std::size_t pos = findSequence(bytes, encoded);
    EXPECT_NE(pos, std::string::npos);
    if (pos != std::string::npos) bytes[pos] = static_cast<std::uint8_t>(bytes[pos] + 1);
  }
  std::uint8_t regions[4];
  std::memcpy(regions, &num_regions, 4);
  bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(loops_end), regions, regions + 4);
  std::uint64_t length = 0;
  std::memcpy(&length, bytes.data() + func_length_at, 8);
  length += 4;
  std::memcpy(bytes.data() + func_length_at, &length, 8);
  const std::uint64_t payload = bytes.size() - kSvmHeaderSize;
  std::memcpy(bytes.data() + 12, &payload, 8);
  const std::uint32_t version = 1;
  std::memcpy(bytes.data() + 4, &version, 4);
  fixChecksum(bytes);
  return bytes;
}

TEST(BinaryFormat, Version1FilesWithoutJitEnterStillLoad) {
  const Module module = assembleOk(R"(.module "old"
.const k0 = int 3
.func f
  .param n : int
  .outputs 1
  LoadArg r0, p0
  LoadConst r1, k0
  FloorDiv r2, r0, r1
  Neg r3, r2
  Max r4, r3, r2
  StoreTensor r4, o0
  Return
.end
)");
  const std::vector<std::uint8_t> v2 = serializeModule(module);
  auto loaded = deserializeModule(asVersion1(v2, 0), "old.svm");
  ASSERT_TRUE(loaded.hasValue()) << loaded.status().toString();
  EXPECT_EQ(disassemble(*loaded), disassemble(module));
  EXPECT_EQ(serializeModule(*loaded), v2);  // written back as version 2
  // What version 1 had and version 2 cannot express is an error naming it.
  EXPECT_NE(errorOf(asVersion1(v2, 1)).find("num_regions: JIT region tables were removed in version 2"),
            std::string::npos)
      << errorOf(asVersion1(v2, 1));
  std::vector<std::uint8_t> jit_enter = asVersion1(v2, 0);
  std::vector<std::uint8_t> encoded(16);
  std::memcpy(encoded.data(), &module.functions[0].code[0], 16);
  const std::size_t pos = findSequence(jit_enter, encoded);
  ASSERT_NE(pos, std::string::npos);
  jit_enter[pos] = 13;
  fixChecksum(jit_enter);
  EXPECT_NE(errorOf(jit_enter).find("JitEnter was removed in version 2"), std::string::npos) << errorOf(jit_enter);
}

TEST(BinaryFormat, HeaderFailuresNameOffsetAndField) {
  const std::vector<std::uint8_t> good = serializeModule(goldenModule("calls.svasm"));
  EXPECT_NE(errorOf({}).find("BadFormat: m.svm: offset 0: magic: truncated"), std::string::npos) << errorOf({});
  auto magic = good;
  magic[0] = 'X';
  EXPECT_NE(errorOf(magic).find("offset 0: magic: not a ShapeVM module"), std::string::npos) << errorOf(magic);
  auto version = good;
  version[4] = 9;
  EXPECT_NE(errorOf(version).find("version: unsupported version 9"), std::string::npos) << errorOf(version);
  auto checksum = good;
  checksum.back() ^= 0x40;
  EXPECT_NE(errorOf(checksum).find("offset 20: checksum: CRC32 mismatch"), std::string::npos) << errorOf(checksum);
  auto longer = good;
  longer.push_back(0);
  EXPECT_NE(errorOf(longer).find("payload size: header says"), std::string::npos) << errorOf(longer);
}

TEST(BinaryFormat, UnknownOpcodeAndOpIdAreErrors) {
  // A function whose only instruction is Return (opcode byte 8) and a relu op site.
  Module module = assembleOk(".func f\n .param x : [*]\n .outputs 1\n LoadTensor r0, x\n CallOp relu r1 = r0\n StoreTensor r1, o0\n Return\n.end\n");
  std::vector<std::uint8_t> bytes = serializeModule(module);
  // StoreTensor r1, o0 followed by Return: the last two 16-byte instructions.
  const std::vector<std::uint8_t> tail = {static_cast<std::uint8_t>(Opcode::StoreTensor), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          static_cast<std::uint8_t>(Opcode::Return)};
  std::size_t at = findSequence(bytes, tail);
  ASSERT_NE(at, std::string::npos);
  at += 16;
  auto opcode = bytes;
  opcode[at] = 0xEE;
  fixChecksum(opcode);
  EXPECT_NE(errorOf(opcode).find("function 'f' PC 0x0003: unknown opcode 238"), std::string::npos) << errorOf(opcode);

  const auto relu = static_cast<std::uint16_t>(OpId::Relu);
  const std::vector<std::uint8_t> site_start = {static_cast<std::uint8_t>(relu & 0xff), static_cast<std::uint8_t>(relu >> 8), 1, 0, 0, 0};
  std::size_t site = findSequence(bytes, site_start);
  ASSERT_NE(site, std::string::npos);
  auto op_id = bytes;
  op_id[site] = 0xff;
  op_id[site + 1] = 0x7f;
  fixChecksum(op_id);
  EXPECT_NE(errorOf(op_id).find("op site s0: unknown op id 32767"), std::string::npos) << errorOf(op_id);
}

TEST(BinaryFormat, BogusCountsAreCheckedAgainstTheBytesLeft) {
  Module module = assembleOk(".const k0 = string \"abc\"\n");
  std::vector<std::uint8_t> bytes = serializeModule(module);
  const std::vector<std::uint8_t> string_len = {3, 0, 0, 0, 'a', 'b', 'c'};
  std::size_t at = findSequence(bytes, string_len);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 3] = 0x7f;  // length ~2 GiB
  fixChecksum(bytes);
  std::string error = errorOf(bytes);
  EXPECT_NE(error.find("constant k0: count 2130706435 needs at least 2130706435 bytes, 3 left"), std::string::npos) << error;
}

// Truncating a real module at every length must fail cleanly.
TEST(BinaryFormatFuzz, EveryTruncationIsRejected) {
  const std::vector<std::uint8_t> bytes = serializeModule(goldenModule("calls.svasm"));
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(length));
    auto module = deserializeModule(cut, "cut.svm");
    EXPECT_FALSE(module.hasValue()) << length;
    fixChecksum(cut);  // also past the checksum, into the section parser
    auto fixed = deserializeModule(cut, "cut.svm");
    EXPECT_FALSE(fixed.hasValue()) << length;
  }
}

// Corrupting each byte (with the checksum fixed up) gives an error or a module that the verifier
// and printers handle — never a crash.
TEST(BinaryFormatFuzz, EveryByteFlipIsHandled) {
  for (const char* name : {"calls.svasm", "scalars.svasm", "lstm_loop.svasm"}) {
    const std::vector<std::uint8_t> bytes = serializeModule(goldenModule(name));
    int rejected = 0, loaded = 0;
    for (std::size_t i = kSvmHeaderSize; i < bytes.size(); ++i) {
      for (std::uint8_t mask : {std::uint8_t{0xff}, std::uint8_t{0x01}, std::uint8_t{0x80}}) {
        std::vector<std::uint8_t> bad = bytes;
        bad[i] ^= mask;
        fixChecksum(bad);
        auto module = deserializeModule(bad, "flip.svm");
        if (!module) {
          ++rejected;
          continue;
        }
        ++loaded;
        Status status = verifyModule(*module);
        EXPECT_TRUE(status.isOk() || status.code() == ErrorCode::VerifyError) << status.toString();
        std::string text = disassemble(*module);
        for (int f = 0; f < static_cast<int>(module->functions.size()); ++f) text += pseudocode(*module, f);
        EXPECT_FALSE(text.empty());
      }
    }
    EXPECT_GT(rejected, 0) << name;
    EXPECT_GT(loaded, 0) << name;
  }
}

TEST(ModuleIo, SavesAndLoadsBothFormatsByExtension) {
  TempDir dir;
  Module module = goldenModule("lstm_cell.svasm");
  for (const char* file : {"m.svm", "m.svasm"}) {
    SCOPED_TRACE(file);
    ASSERT_TRUE(saveModuleFile(module, dir.file(file)).isOk());
    auto loaded = loadModuleFile(dir.file(file));
    ASSERT_TRUE(loaded.hasValue()) << loaded.status().toString();
    EXPECT_EQ(serializeModule(*loaded), serializeModule(module));
  }
  EXPECT_EQ(readText(dir.file("m.svasm")), disassemble(module));
}

TEST(ModuleIo, MissingFileAndUnknownExtension) {
  auto missing = loadModuleFile("/nonexistent/dir/model.svm");
  ASSERT_FALSE(missing.hasValue());
  EXPECT_EQ(missing.status().code(), ErrorCode::IoError);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/model.svm"), std::string::npos);
  auto extension = loadModuleFile("model.txt");
  EXPECT_EQ(extension.status().code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(saveModuleFile(Module(), "model.bin").code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(saveModuleFile(Module(), "/nonexistent/dir/model.svm").code(), ErrorCode::IoError);
}

// Binary must-fail cases: a good module corrupted on purpose, written to disk and loaded; the
// message names the file and the offset/field (or the verifier rule).
TEST(ModuleIo, CorruptedBinaryFilesFailWithTheirMessage) {
  TempDir dir;
  const Module module = goldenModule("calls.svasm");
  const std::vector<std::uint8_t> good = serializeModule(module);
  struct Case {
    const char* file;
    std::function<void(std::vector<std::uint8_t>&)> corrupt;
    const char* expect;
  };
  const Case cases[] = {
      {"truncated.svm", [](auto& b) { b.resize(b.size() / 2); }, "truncated.svm: offset 12: payload size: header says"},
      {"checksum.svm", [](auto& b) { b[b.size() - 5] ^= 1; }, "checksum.svm: offset 20: checksum: CRC32 mismatch"},
      {"magic.svm", [](auto& b) { b[1] = 'X'; }, "magic.svm: offset 0: magic: not a ShapeVM module"},
      {"section.svm",
       [](auto& b) {
         b[kSvmHeaderSize] = 'X';
         fixChecksum(b);
       },
       "section.svm: offset 20: section tag: expected section META"},
      {"trailing.svm",
       [](auto& b) {
         b.push_back(0);
         std::uint64_t n = b.size() - kSvmHeaderSize;
         std::memcpy(b.data() + 12, &n, 8);
         fixChecksum(b);
       },
       "trailing.svm: offset"},
      {"register.svm",
       [](auto& b) {
         // LoadTensor r0, p0 (opcode 3) -> LoadTensor r200, p0: beyond num_registers.
         const auto load_tensor = static_cast<std::uint8_t>(Opcode::LoadTensor);
         const std::vector<std::uint8_t> load = {load_tensor, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                 load_tensor, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
         std::size_t at = findSequence(b, load);
         b[at + 4] = 200;
         fixChecksum(b);
       },
       "register.svm: verify: function 'main', PC 0x0000: rule register-range: LoadTensor operand r200 is outside "
       "r0..r7"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    std::vector<std::uint8_t> bytes = good;
    c.corrupt(bytes);
    std::ofstream(dir.file(c.file), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    auto loaded = loadModuleFile(dir.file(c.file));
    ASSERT_FALSE(loaded.hasValue());
    EXPECT_NE(loaded.status().message().find(c.expect), std::string::npos) << loaded.status().message();
  }
}

}  // namespace
}  // namespace shapevm
