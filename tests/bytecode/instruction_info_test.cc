// SPDX-License-Identifier: Apache-2.0
// instruction_info: every opcode's reads, writes and successors agree with its format string in
// opcodes.def (read letter by letter here, independently of operandRole), and the site and list
// forms (CallOp with an omitted input, Call, TuplePack/TupleUnpack) and branches by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bytecode/instruction_info.h"

namespace shapevm {
namespace {

// A function whose op site, call site and operand pool use registers no field uses.
Function sampleFunction() {
  Function fn;
  fn.num_registers = 64;
  OpSite site;
  site.inputs = {10, -1, 11};  // -1: an omitted optional input
  site.outputs = {12, 13};
  fn.op_sites.push_back(site);
  CallSite call;
  call.args = {20, 21};
  call.results = {22};
  fn.call_sites.push_back(call);
  fn.operand_pool = {30, 31, 32};
  return fn;
}

std::vector<int> readsOf(const Function& fn, const Instruction& inst) {
  std::vector<int> out;
  forEachRead(fn, inst, [&](int r) { out.push_back(r); });
  return out;
}

std::vector<int> writesOf(const Function& fn, const Instruction& inst) {
  std::vector<int> out;
  forEachWrite(fn, inst, [&](int r) { out.push_back(r); });
  return out;
}

std::vector<int> successorsOf(const Instruction& inst, int pc) {
  const Successors s = successors(inst, pc);
  return std::vector<int>(s.begin(), s.end());
}

TEST(InstructionInfo, EveryOpcodeReadsAndWritesWhatItsFormatSays) {
  const Function fn = sampleFunction();
  for (int index = 0; index < kNumOpcodes; ++index) {
    const auto op = static_cast<Opcode>(index);
    const std::string format(opcodeFormat(op));
    SCOPED_TRACE(std::string(opcodeName(op)) + " \"" + format + "\"");
    const bool list = format.size() == 2;
    ASSERT_TRUE(format.size() == 3 || (list && (format[1] == 'v' || format[1] == 'V')))
        << "format needs 3 roles or a list";
    Instruction inst;
    inst.op = op;
    const std::int32_t values[3] = {1, list ? 0 : 2, 3};  // a list: offset 0, count 3
    inst.a = values[0];
    inst.b = values[1];
    inst.c = values[2];
    std::vector<int> reads, writes;
    bool target = false;
    for (std::size_t k = 0; k < format.size(); ++k) {
      switch (format[k]) {
        case 'r': reads.push_back(values[k]); break;
        case 'D': writes.push_back(values[k]); break;
        case 's':
          inst.a = 0;
          reads.insert(reads.end(), {10, 11});
          writes.insert(writes.end(), {12, 13});
          break;
        case 'c':
          inst.a = 0;
          reads.insert(reads.end(), {20, 21});
          writes.insert(writes.end(), {22});
          break;
        case 'v': reads.insert(reads.end(), {30, 31, 32}); break;
        case 'V': writes.insert(writes.end(), {30, 31, 32}); break;
        case 't': target = true; break;
        case '_':
        case 'k':
        case 'p':
        case 'o':
        case 'l':
        case 'n': break;
        default: FAIL() << "role letter '" << format[k] << "' is not in the legend of opcodes.def";
      }
    }
    EXPECT_EQ(readsOf(fn, inst), reads);
    EXPECT_EQ(writesOf(fn, inst), writes);
    // Control: targets only when there are any, nothing after Return, else the next PC.
    std::vector<int> expected;
    for (std::size_t k = 0; k < format.size(); ++k) {
      if (format[k] == 't') expected.push_back(values[k]);
    }
    if (!target && op != Opcode::Return) expected.push_back(8);
    EXPECT_EQ(successorsOf(inst, 7), expected);
    EXPECT_EQ(endsBlock(op), target || op == Opcode::Return);
  }
}

TEST(InstructionInfo, SitesAndListsByHand) {
  const Function fn = sampleFunction();
  Instruction callop{Opcode::CallOp, {0, 0, 0}, 0, 0, 0};
  EXPECT_EQ(readsOf(fn, callop), (std::vector<int>{10, 11}));  // the omitted input is no read
  EXPECT_EQ(writesOf(fn, callop), (std::vector<int>{12, 13}));
  Instruction call{Opcode::Call, {0, 0, 0}, 0, 0, 0};
  EXPECT_EQ(readsOf(fn, call), (std::vector<int>{20, 21}));
  EXPECT_EQ(writesOf(fn, call), (std::vector<int>{22}));
  Instruction pack{Opcode::TuplePack, {0, 0, 0}, 5, 1, 2};  // r5 = (r31, r32)
  EXPECT_EQ(readsOf(fn, pack), (std::vector<int>{31, 32}));
  EXPECT_EQ(writesOf(fn, pack), (std::vector<int>{5}));
  Instruction unpack{Opcode::TupleUnpack, {0, 0, 0}, 6, 0, 1};  // (r30,) = r6
  EXPECT_EQ(readsOf(fn, unpack), (std::vector<int>{6}));
  EXPECT_EQ(writesOf(fn, unpack), (std::vector<int>{30}));
  Instruction add{Opcode::Add, {0, 0, 0}, 1, 2, 3};
  EXPECT_EQ(readsOf(fn, add), (std::vector<int>{2, 3}));
  EXPECT_EQ(writesOf(fn, add), (std::vector<int>{1}));
  Instruction store{Opcode::StoreTensor, {0, 0, 0}, 4, 0, 0};
  EXPECT_EQ(readsOf(fn, store), (std::vector<int>{4}));
  EXPECT_TRUE(writesOf(fn, store).empty());
}

TEST(InstructionInfo, BranchesAndFallThrough) {
  EXPECT_EQ(successorsOf(Instruction{Opcode::BranchIf, {0, 0, 0}, 0, 9, 4}, 3), (std::vector<int>{9, 4}));
  EXPECT_EQ(successorsOf(Instruction{Opcode::Jump, {0, 0, 0}, 1, 0, 0}, 3), (std::vector<int>{1}));
  EXPECT_TRUE(successorsOf(Instruction{Opcode::Return, {0, 0, 0}, 0, 0, 0}, 3).empty());
  EXPECT_EQ(successorsOf(Instruction{Opcode::CallOp, {0, 0, 0}, 0, 0, 0}, 3), (std::vector<int>{4}));
  EXPECT_EQ(successorsOf(Instruction{Opcode::LoopEnd, {0, 0, 0}, 0, 0, 0}, 3), (std::vector<int>{4}));
  EXPECT_TRUE(endsBlock(Opcode::BranchIf));
  EXPECT_TRUE(endsBlock(Opcode::Jump));
  EXPECT_TRUE(endsBlock(Opcode::Return));
  EXPECT_FALSE(endsBlock(Opcode::Assert));
  EXPECT_FALSE(endsBlock(Opcode::Call));
}

// The IR-style lists: rewriting through visitRegisters reaches every register (renumbering).
TEST(InstructionInfo, VisitRegistersCanRewriteInFieldOrder) {
  std::vector<std::int32_t> inputs = {4, -1, 5}, outputs = {6};
  RegisterLists<std::int32_t> lists{inputs, outputs, {}};
  std::int32_t a = 0, b = 0, c = 0;
  std::vector<std::pair<int, bool>> seen;
  visitRegisters<std::int32_t>(Opcode::CallOp, a, b, c, lists, [&](std::int32_t& r, bool write) {
    seen.emplace_back(r, write);
    r += 100;
  });
  EXPECT_EQ(seen, (std::vector<std::pair<int, bool>>{{4, false}, {5, false}, {6, true}}));
  EXPECT_EQ(inputs, (std::vector<std::int32_t>{104, -1, 105}));
  EXPECT_EQ(outputs, (std::vector<std::int32_t>{106}));
  std::int32_t d = 1, x = 2, y = 3;
  seen.clear();
  RegisterLists<std::int32_t> none;
  visitRegisters<std::int32_t>(Opcode::Sub, d, x, y, none,
                               [&](std::int32_t& r, bool write) { seen.emplace_back(r, write); });
  EXPECT_EQ(seen, (std::vector<std::pair<int, bool>>{{1, true}, {2, false}, {3, false}}));
}

}  // namespace
}  // namespace shapevm
