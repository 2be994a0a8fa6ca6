// SPDX-License-Identifier: Apache-2.0
// The .svasm format. Golden files in tests/golden are the documentation: each *.svasm is
// canonical (asm -> bin -> dis reproduces it byte for byte, after its leading comment lines),
// each *.in.svasm disassembles to its *.expected.svasm, each *.pseudocode is the pseudocode of
// the module of the same name. Parse errors name file:line:col and what was expected.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "bytecode/binary_format.h"
#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "test_util.h"

namespace shapevm {
namespace {

using testing::assembleOk;
using testing::dataFiles;
using testing::readText;
using testing::withoutHeader;

bool isCanonicalGolden(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  return name.find(".in.") == std::string::npos && name.find(".expected.") == std::string::npos;
}

TEST(TextFormatGolden, CanonicalFilesSurviveAsmBinDis) {
  int checked = 0;
  for (const auto& path : dataFiles("golden", ".svasm")) {
    if (!isCanonicalGolden(path)) continue;
    SCOPED_TRACE(path.filename().string());
    const std::string text = withoutHeader(readText(path));
    auto module = assemble(readText(path), path.string());
    ASSERT_TRUE(module.hasValue()) << module.status().toString();
    EXPECT_TRUE(verifyModule(*module).isOk()) << verifyModule(*module).toString();
    std::vector<std::uint8_t> bytes = serializeModule(*module);
    auto loaded = deserializeModule(bytes, path.string());
    ASSERT_TRUE(loaded.hasValue()) << loaded.status().toString();
    EXPECT_EQ(disassemble(*loaded), text);
    // dis -> asm -> bin gives identical bytes.
    auto again = assemble(disassemble(*loaded), "again.svasm");
    ASSERT_TRUE(again.hasValue()) << again.status().toString();
    EXPECT_EQ(serializeModule(*again), bytes);
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

TEST(TextFormatGolden, NonCanonicalInputsDisassembleToTheirExpectedText) {
  int checked = 0;
  for (const auto& path : dataFiles("golden", ".in.svasm")) {
    SCOPED_TRACE(path.filename().string());
    std::string expected_path = path.string();
    expected_path.replace(expected_path.size() - std::string(".in.svasm").size(), std::string::npos, ".expected.svasm");
    const std::string expected = withoutHeader(readText(expected_path));
    ASSERT_FALSE(expected.empty()) << "missing " << expected_path;
    Module module = assembleOk(readText(path));
    EXPECT_EQ(disassemble(module), expected);
    EXPECT_EQ(disassemble(assembleOk(expected)), expected);  // the expected text is canonical
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

TEST(TextFormatGolden, PseudocodeMatches) {
  int checked = 0;
  for (const auto& path : dataFiles("golden", ".pseudocode")) {
    SCOPED_TRACE(path.filename().string());
    std::string source = path.string();
    source.replace(source.size() - std::string(".pseudocode").size(), std::string::npos, ".svasm");
    Module module = assembleOk(readText(source));
    std::string text;
    for (int i = 0; i < static_cast<int>(module.functions.size()); ++i) text += pseudocode(module, i);
    EXPECT_EQ(text, readText(path));
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

TEST(TextFormatGolden, EveryOpcodeAppearsInSomeGolden) {
  std::set<Opcode> seen;
  for (const auto& path : dataFiles("golden", ".svasm")) {
    auto module = assemble(readText(path), path.string());
    ASSERT_TRUE(module.hasValue()) << module.status().toString();
    for (const Function& fn : module->functions) {
      for (const Instruction& inst : fn.code) seen.insert(inst.op);
    }
  }
  for (int op = 0; op < kNumOpcodes; ++op) {
    EXPECT_TRUE(seen.count(static_cast<Opcode>(op))) << "no golden uses " << opcodeName(static_cast<Opcode>(op));
  }
}

TEST(TextFormat, ParseErrorsNameFileLineColumnAndExpectation) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {".func f\n  Frob r0\n.end\n", "t.svasm:2:3: unknown opcode 'Frob'"},
      {".func f\n  Move r0, q1\n.end\n", "t.svasm:2:12: expected a register (rN), got 'q1'"},
      {".func f\n  Move r0, r1 r2\n.end\n", "t.svasm:2:15: expected end of line, got 'r2'"},
      {".func f\n  Jump 0x0003\n.end\n", "t.svasm:2:8: expected a jump target (@0xNNNN or @label), got '0x0003'"},
      {".func f\n  .param x : [4\n.end\n", "t.svasm:2:14: unterminated shape token (missing ']')"},
      {".func f\n  .param x : str\n.end\n", "t.svasm:2:14: expected a shape token ([dims], dtype[dims] or _), got 'str'"},
      {".const k0 = bool maybe\n", "t.svasm:1:18: expected true or false, got 'maybe'"},
      {".const k0 = string \"a\\q\"\n", "t.svasm:1:22: unknown escape '\\q' in string"},
      {"Return\n", "t.svasm:1:1: expected a directive (.module, .source, .const, .func), got 'Return'"},
      {".func f\n  Return\n.end\n.func f\n", "t.svasm:4:7: function 'f' defined twice"},
      {".func f\n  CallOp add r1 = r0, r0 {alpha=2}\n.end\n", "t.svasm:2:10: op 'add' has no attribute 'alpha' (attributes: none)"},
      {".func f\n  CallOp cast r1 = r0 {dtype=float99}\n.end\n", "expected an attribute value (int, float, bool, [ints] or dtype), got 'float99'"},
      {".func f\n  L:\n  L:\n.end\n", "t.svasm:3:3: label 'L' defined twice"},
      {".func f\n  DimOf r0, r1, 99999999999\n.end\n", "t.svasm:2:17: an integer 99999999999 is out of range"},
  };
  for (const Case& c : cases) {
    auto module = assemble(c.text, "t.svasm");
    ASSERT_FALSE(module.hasValue()) << c.text;
    EXPECT_EQ(module.status().code(), ErrorCode::ParseError);
    EXPECT_NE(module.status().message().find(c.message), std::string::npos) << "got: " << module.status().message();
  }
}

TEST(TextFormat, SemicolonsInsideStringsAreNotComments) {
  Module module = assembleOk(".module \"a;b\" ; comment\n.const k0 = string \"x ; y\"\n");
  EXPECT_EQ(module.name, "a;b");
  EXPECT_EQ(module.constants[0].text, "x ; y");
}

TEST(TextFormat, FloatConstantsUseShortestRoundTripText) {
  for (double value : {0.1, 1.0 / 3.0, 1e300, -0.0, 5e-324, 123456789.0}) {
    Constant c{ConstKind::Float, Value::fromFloat(value), ""};
    std::string text = constantText(c);
    Module module = assembleOk(".const k0 = " + text + "\n");
    std::uint64_t a = 0, b = 0;
    double parsed = module.constants[0].value.asFloat();
    std::memcpy(&a, &value, 8);
    std::memcpy(&b, &parsed, 8);
    EXPECT_EQ(a, b) << text;
  }
  EXPECT_EQ(constantText(Constant{ConstKind::Float, Value::fromFloat(2.0), ""}), "float 2.0");
}

TEST(TextFormat, DisassemblerShowsRewrittenTokens) {
  Module module = assembleOk(
      ".func f\n .param x : f32[?0,128]\n .outputs 1\n LoadTensor r0, x\n"
      " CallOp relu r1 = r0 : f32[?0,128] -> f32[?0,128]\n StoreTensor r1, o0\n Return\n.end\n");
  ASSERT_TRUE(module.rewriteSiteToken(0, 0, true, 0, *parseTensorDescriptor("f32[16..64,128]")).isOk());
  EXPECT_NE(disassembleFunction(module, 0).find("CallOp relu r1 = r0 : f32[?0,128] -> f32[16..64,128]"), std::string::npos)
      << disassembleFunction(module, 0);
  EXPECT_NE(pseudocode(module, 0).find("r1 = relu(r0)  # f32[?0,128] -> f32[16..64,128]"), std::string::npos);
}

TEST(TextFormat, PrintersSurviveBrokenModules) {
  Module module = assembleOk(".func f\n Return\n.end\n");
  Function& fn = module.functions[0];
  fn.code.push_back(Instruction{Opcode::CallOp, {0, 0, 0}, 7, 0, 0});
  fn.code.push_back(Instruction{Opcode::Call, {0, 0, 0}, 3, 0, 0});
  fn.code.push_back(Instruction{Opcode::TuplePack, {0, 0, 0}, 0, 5, 9});
  fn.code.push_back(Instruction{Opcode::LoadConst, {0, 0, 0}, 0, 42, 0});
  fn.code.push_back(Instruction{Opcode::LoadTensor, {0, 0, 0}, 0, -3, 0});
  fn.code.push_back(Instruction{static_cast<Opcode>(200), {0, 0, 0}, 0, 0, 0});
  std::string text = disassemble(module);
  EXPECT_NE(text.find("CallOp <bad site 7>"), std::string::npos);
  EXPECT_NE(text.find("<bad list 5+9>"), std::string::npos);
  EXPECT_NE(text.find("<bad opcode 200>"), std::string::npos);
  std::string pseudo = pseudocode(module, 0);
  EXPECT_NE(pseudo.find("<bad op site s7>"), std::string::npos);
  EXPECT_NE(pseudocode(module, 5).find("no function 5"), std::string::npos);
}

}  // namespace
}  // namespace shapevm
