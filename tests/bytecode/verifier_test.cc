// SPDX-License-Identifier: Apache-2.0
// The verifier. tests/must_fail holds programs that must be rejected, each starting with
// `; expect: <message substring>` (rule name and PC included); this runs them all through
// loadModuleFile. Rules the assembler cannot express (it validates op sites itself) are broken
// here by editing a good module in memory.
#include <gtest/gtest.h>

#include <functional>

#include "bytecode/module_io.h"
#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "test_util.h"

namespace shapevm {
namespace {

using testing::assembleOk;
using testing::dataFiles;
using testing::readText;

TEST(VerifierMustFail, EveryFileFailsWithItsExpectedMessage) {
  const auto files = dataFiles("must_fail", ".svasm");
  EXPECT_GE(files.size(), 30u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    const std::string text = readText(path);
    const std::string prefix = "; expect: ";
    ASSERT_EQ(text.rfind(prefix, 0), 0u) << "first line must be '; expect: <message>'";
    const std::string expect = text.substr(prefix.size(), text.find('\n') - prefix.size());
    auto module = loadModuleFile(path.string());
    ASSERT_FALSE(module.hasValue()) << "loaded without error";
    EXPECT_NE(module.status().message().find(expect), std::string::npos)
        << "expected: " << expect << "\n     got: " << module.status().message();
    EXPECT_NE(module.status().message().find(path.filename().string()), std::string::npos) << "message must name the file";
  }
}

TEST(Verifier, GoldensVerify) {
  for (const auto& path : dataFiles("golden", ".svasm")) {
    auto module = loadModuleFile(path.string());
    EXPECT_TRUE(module.hasValue()) << module.status().toString();
  }
}

TEST(Verifier, MessagesFollowTheDocumentedFormat) {
  Module module = assembleOk(".func f\n .param x : [*]\n .outputs 0\n LoadTensor r0, x\n Add r1, r0, r0\n Return\n.end\n");
  Status status = verifyModule(module);
  EXPECT_EQ(status.code(), ErrorCode::VerifyError);
  EXPECT_EQ(status.message(), "verify: function 'f', PC 0x0001: rule kind: Add operand r0 holds tensor but needs int or float or bool");
}

// ---- accepted programs: the dataflow is path-sensitive only through joins ----

TEST(Verifier, DefinitionsOnBothPathsAndLoopsAreAccepted) {
  Module module = assembleOk(R"(
.func f
  .param n : int
  .outputs 1
  LoadArg r0, n
  BranchIf r0, @a, @b
a:
  LoadConst r1, k0
  Jump @join
b:
  Move r1, r0
join:
  LoopStart l0
  Sub r0, r0, r1
  LoopEnd l0
  BranchIf r0, @join, @out
out:
  StoreTensor r1, o0
  Return
.end
.const k0 = int 1
)");
  EXPECT_TRUE(verifyModule(module).isOk()) << verifyModule(module).toString();
}

TEST(Verifier, UnknownKindsFromCallsAreAccepted) {
  Module module = assembleOk(R"(
.func f
  .param x : [*]
  .outputs 1
  LoadTensor r0, x
  Call f r1 = r0
  ShapeOf r2, r1
  TupleLen r3, r2
  StoreTensor r3, o0
  Return
.end
)");
  EXPECT_TRUE(verifyModule(module).isOk()) << verifyModule(module).toString();
}

TEST(Verifier, UnreachableCodeIsNotAnalyzed) {
  Module module = assembleOk(".func f\n .outputs 0\n Return\n Move r0, r1\n Return\n.end\n");
  EXPECT_TRUE(verifyModule(module).isOk()) << verifyModule(module).toString();
}

// ---- rules broken in memory ----

const char* const kGood = R"(
.func f
  .param x : f32[?0,8]
  .outputs 1
  LoadTensor r0, x
  ShapeOf r1, r0
  TuplePack r2, [r1]
  CallOp layer_norm r3 = r0, none {eps=0.5} : [?0,8] x _ -> [?0,8]
  Call g r4 = r3
  StoreTensor r4, o0
  Return
.end
.func g
  .param y : [*]
  .outputs 1
  LoadTensor r0, y
  StoreTensor r0, o0
  Return
.end
)";

struct Breakage {
  const char* name;
  std::function<void(Module&)> edit;
  const char* expect;
};

TEST(Verifier, RulesBrokenInMemory) {
  const Breakage cases[] = {
      {"opcode", [](Module& m) { m.functions[0].code[1].op = static_cast<Opcode>(250); }, "PC 0x0001: rule opcode: unknown opcode 250"},
      {"unused field", [](Module& m) { m.functions[0].code[6].a = 3; }, "PC 0x0006: rule unused-field: Return field A is unused but holds 3"},
      {"reserved bytes", [](Module& m) { m.functions[0].code[0].reserved[1] = 1; }, "PC 0x0000: rule unused-field: reserved bytes are not zero"},
      {"list range", [](Module& m) { m.functions[0].code[2].c = 5; }, "PC 0x0002: rule operand-list-range: register list 0+5 is outside the operand pool (size 1)"},
      {"op site range", [](Module& m) { m.functions[0].code[3].a = 4; }, "PC 0x0003: rule op-site-range: CallOp op site 4 is outside 0..0"},
      {"call site range", [](Module& m) { m.functions[0].code[4].a = 1; }, "PC 0x0004: rule call-site-range: Call call site 1 is outside 0..0"},
      {"op site shared", [](Module& m) { m.functions[0].op_sites.push_back(m.functions[0].op_sites[0]); },
       "function 'f': rule op-site-use: op site s1 is not used by any CallOp"},
      {"op site order",
       [](Module& m) {
         auto& fn = m.functions[0];
         fn.op_sites.push_back(fn.op_sites[0]);
         fn.code.insert(fn.code.begin() + 3, Instruction{Opcode::CallOp, {0, 0, 0}, 1, 0, 0});
         fn.locs.push_back({});
       },
       "PC 0x0003: rule op-site-use: CallOp uses op site s1 but the next unused site is s0"},
      {"call site unused", [](Module& m) { m.functions[0].call_sites.push_back(m.functions[0].call_sites[0]); },
       "function 'f': rule call-site-use: call site c1 is not used by any Call"},
      {"op arity", [](Module& m) { m.functions[0].op_sites[0].inputs.resize(4, 0); }, "PC 0x0003: rule op-arity: op 'layer_norm' takes 1 to 3 inputs, got 4"},
      {"optional none", [](Module& m) { m.functions[0].op_sites[0].inputs[0] = -1; }, "rule op-arity: op 'layer_norm' input 0 ('x') is none but not optional"},
      {"op id", [](Module& m) { m.functions[0].op_sites[0].op = static_cast<OpId>(999); }, "rule op-arity: unknown op id 999"},
      {"output count", [](Module& m) { m.functions[0].op_sites[0].outputs.push_back(5); }, "rule op-arity: op 'layer_norm' produces 1 outputs here, the site lists 2"},
      {"attr count", [](Module& m) { m.functions[0].op_sites[0].attrs.pop_back(); }, "rule op-attrs: op 'layer_norm' has 2 attributes, the site holds 1"},
      {"attr kind", [](Module& m) { m.functions[0].op_sites[0].attrs[1] = AttrValue::ofInt(1); }, "rule op-attrs: op 'layer_norm' attribute 'eps' must be float, got int"},
      {"attr default", [](Module& m) { m.functions[0].op_sites[0].attrs[0] = AttrValue::ofInt(0); },
       "rule op-attrs: op 'layer_norm' attribute 'axis' is not marked as given but differs from its default -1"},
      {"attrs given", [](Module& m) { m.functions[0].op_sites[0].attrs_given |= 8; }, "rule op-attrs: op 'layer_norm': attrs_given marks attributes beyond its 2"},
      {"token count", [](Module& m) { m.functions[0].op_sites[0].input_tokens.pop_back(); }, "rule op-tokens: op 'layer_norm' has 2 inputs / 1 outputs but 1 / 1 shape tokens"},
      {"token none", [](Module& m) { m.functions[0].op_sites[0].input_tokens[1] = TensorDescriptor::anyTensor(); },
       "rule op-tokens: op 'layer_norm' input 1 is none but its token is [*] (expected _)"},
      {"token output", [](Module& m) { m.functions[0].op_sites[0].output_tokens[0] = TensorDescriptor::notTensor(); },
       "rule op-tokens: op 'layer_norm' output 0 has the non-tensor token _"},
      {"callee", [](Module& m) { m.functions[0].call_sites[0].callee = 7; }, "PC 0x0004: rule call-callee: callee 7 is not a function of the module (2 functions)"},
      {"call results", [](Module& m) { m.functions[0].call_sites[0].results.push_back(1); }, "rule call-arity: 'g' takes 1 arguments and returns 1 outputs; the call passes 1 and expects 2"},
      {"line table", [](Module& m) { m.functions[0].locs.pop_back(); }, "function 'f': rule line-table: 6 source locations for 7 instructions"},
      {"param name", [](Module& m) { m.functions[0].params[0].name = "two words"; }, "function 'f': rule param: parameter p0 has a bad name \"two words\""},
      {"param twice", [](Module& m) { m.functions[0].params.push_back(m.functions[0].params[0]); }, "rule param: parameter name 'x' is used twice"},
      {"param kind", [](Module& m) { m.functions[0].params[0].kind = ValueKind::Tuple; }, "rule param: parameter 'x' has kind 5"},
      {"param token", [](Module& m) { m.functions[0].params[0].token = TensorDescriptor::notTensor(); }, "rule param: tensor parameter 'x' has the non-tensor token _"},
      {"dim name", [](Module& m) { m.functions[0].dim_names = {"a-b"}; }, "function 'f': rule dim-name: dim ?0 has a bad name \"a-b\""},
      {"outputs", [](Module& m) { m.functions[1].num_outputs = -1; }, "function 'g': rule limits: num_outputs -1 is outside 0..65535"},
      {"function name", [](Module& m) { m.functions[1].name = "f"; }, "verify: function 'f': rule function-name: defined twice"},
      {"constant", [](Module& m) { m.constants.push_back(Constant{ConstKind::Int, Value::fromFloat(1.5), ""}); },
       "verify: constant k0: rule constant: kind 1 does not match its value"},
  };
  for (const Breakage& c : cases) {
    SCOPED_TRACE(c.name);
    Module module = assembleOk(kGood);
    ASSERT_TRUE(verifyModule(module).isOk()) << verifyModule(module).toString();
    c.edit(module);
    Status status = verifyModule(module);
    ASSERT_FALSE(status.isOk());
    EXPECT_EQ(status.code(), ErrorCode::VerifyError);
    EXPECT_NE(status.message().find(c.expect), std::string::npos) << "expected: " << c.expect << "\n     got: " << status.message();
  }
}

TEST(Verifier, HugeFunctionsAreRejectedNotExhausted) {
  Module module = assembleOk(".func f\n .outputs 0\n Return\n.end\n");
  Function& fn = module.functions[0];
  fn.num_registers = kMaxRegisters;
  fn.num_outputs = kMaxOutputs;
  // Many blocks x many registers would need gigabytes of dataflow state.
  fn.code.assign(2000, Instruction{Opcode::Jump, {0, 0, 0}, 0, 0, 0});
  for (int pc = 0; pc < 2000; ++pc) fn.code[static_cast<std::size_t>(pc)].a = pc + 1 < 2000 ? pc + 1 : 0;
  fn.locs.assign(fn.code.size(), SourceLoc{});
  Status status = verifyModule(module);
  EXPECT_NE(status.message().find("rule limits"), std::string::npos) << status.message();
}

TEST(Verifier, VerifyFunctionChecksOneFunction) {
  Module module = assembleOk(kGood);
  module.functions[1].code.back().op = Opcode::Nop;
  EXPECT_TRUE(verifyFunction(module, 0).isOk());
  EXPECT_NE(verifyFunction(module, 1).message().find("rule falls-off-end"), std::string::npos);
  EXPECT_FALSE(verifyFunction(module, 2).isOk());
}

}  // namespace
}  // namespace shapevm
