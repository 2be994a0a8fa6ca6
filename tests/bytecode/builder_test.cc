// SPDX-License-Identifier: Apache-2.0
// ModuleBuilder / FunctionBuilder: constant dedup, labels patched in both directions, op sites
// validated against the schemas, calls resolved by name, counts computed, locations recorded.
#include <gtest/gtest.h>

#include "bytecode/builder.h"
#include "bytecode/text_format.h"
#include "bytecode/verifier.h"

namespace shapevm {
namespace {

TEST(Builder, ConstantsAreDeduplicated) {
  ModuleBuilder builder("m");
  EXPECT_EQ(builder.constInt(3), 0);
  EXPECT_EQ(builder.constFloat(3.0), 1);  // a float is not the int 3
  EXPECT_EQ(builder.constInt(3), 0);
  EXPECT_EQ(builder.constFloat(3.0), 1);
  EXPECT_EQ(builder.constFloat(-0.0), 2);  // compared by bits: -0.0 is not 0.0
  EXPECT_EQ(builder.constFloat(0.0), 3);
  EXPECT_EQ(builder.constString("msg"), 4);
  EXPECT_EQ(builder.constString("msg"), 4);
  EXPECT_EQ(builder.constBool(true), 5);
  EXPECT_EQ(builder.constBool(true), 5);
  EXPECT_EQ(builder.constInts({1, 2}), 6);
  EXPECT_EQ(builder.constInts({1, 2}), 6);
  EXPECT_EQ(builder.constInts({1, 2, 3}), 7);
  EXPECT_EQ(builder.constNone(), 8);
  EXPECT_EQ(builder.constNone(), 8);
  EXPECT_EQ(builder.addConstant(Constant{ConstKind::Int, Value::fromInt(3), ""}), 9);  // appended as is
  EXPECT_EQ(builder.numConstants(), 10);
}

TEST(Builder, LabelsArePatchedForwardAndBackward) {
  ModuleBuilder builder("m");
  FunctionBuilder& f = builder.addFunction("f");
  f.addParam("n", ValueKind::Int);
  Label top = f.newLabel("top");
  Label done = f.newLabel("done");
  f.emit(Opcode::LoadArg, 0, 0);
  ASSERT_TRUE(f.bind(top).isOk());
  f.emitBranchIf(0, done, top);  // forward and backward
  ASSERT_TRUE(f.bind(done).isOk());
  f.emit(Opcode::Return);
  EXPECT_FALSE(f.bind(done).isOk());  // bound twice
  auto module = builder.finish();
  ASSERT_TRUE(module.hasValue()) << module.status().toString();
  const Instruction& branch = module->functions[0].code[1];
  EXPECT_EQ(branch.b, 2);
  EXPECT_EQ(branch.c, 1);
}

TEST(Builder, UnboundLabelIsAnError) {
  ModuleBuilder builder("m");
  FunctionBuilder& f = builder.addFunction("f");
  f.emitJump(f.newLabel("nowhere"));
  auto module = builder.finish();
  ASSERT_FALSE(module.hasValue());
  EXPECT_NE(module.status().message().find("label 'nowhere' used at PC 0x0000 but never bound"), std::string::npos)
      << module.status().message();
}

TEST(Builder, CountsAreMaxIdPlusOneUnlessDeclared) {
  ModuleBuilder builder("m");
  FunctionBuilder& f = builder.addFunction("f");
  f.emit(Opcode::LoopStart, 2);
  f.emit(Opcode::LoopEnd, 2);
  const std::int32_t items[] = {7, 1};
  f.emitTuplePack(3, items);
  f.emit(Opcode::Return);
  FunctionBuilder& g = builder.addFunction("g");
  g.setRegisters(100);
  g.emit(Opcode::Return);
  auto module = builder.finish();
  ASSERT_TRUE(module.hasValue());
  EXPECT_EQ(module->functions[0].num_registers, 8);  // r7 from the register list
  EXPECT_EQ(module->functions[0].num_loops, 3);
  EXPECT_EQ(module->functions[1].num_registers, 100);
}

TEST(Builder, OpSitesAreValidatedAgainstTheSchema) {
  ModuleBuilder builder("m");
  FunctionBuilder& f = builder.addFunction("f");
  auto unknown = f.addOpSite("frobnicate", {0}, {1});
  EXPECT_EQ(unknown.status().code(), ErrorCode::UnknownName);
  auto attr = f.addOpSite("softmax", {0}, {1}, {{"dim", AttrValue::ofInt(1)}});
  EXPECT_NE(attr.status().message().find("op 'softmax' has no attribute 'dim'"), std::string::npos);
  auto kind = f.addOpSite("softmax", {0}, {1}, {{"axis", AttrValue::ofFloat(0.5)}});
  EXPECT_NE(kind.status().message().find("attribute 'axis' must be int"), std::string::npos);
  auto outputs = f.addOpSite("split", {0}, {1, 2}, {{"sections", AttrValue::ofInt(3)}});
  EXPECT_NE(outputs.status().message().find("produces 3 outputs here, got 2"), std::string::npos);
  auto inputs = f.addOpSite("matmul", {0}, {1});
  EXPECT_NE(inputs.status().message().find("takes 2 inputs, got 1"), std::string::npos);
  auto none = f.addOpSite("matmul", {0, -1}, {1});
  EXPECT_NE(none.status().message().find("is not optional"), std::string::npos);
  EXPECT_TRUE(f.function().op_sites.empty());
}

TEST(Builder, OpSiteRecordsGivenAttributesDefaultsAndTokens) {
  ModuleBuilder builder("m");
  FunctionBuilder& f = builder.addFunction("f");
  auto site = f.addOpSite(OpId::LayerNorm, {0, -1, 1}, {2}, {{"eps", AttrValue::ofInt(1)}});
  ASSERT_TRUE(site.hasValue()) << site.status().toString();
  const OpSite& s = f.function().op_sites[0];
  EXPECT_EQ(s.attrs_given, 2u);  // only eps (attribute 1)
  ASSERT_EQ(s.attrs.size(), 2u);
  EXPECT_EQ(s.attrs[0].i, -1);  // axis default
  EXPECT_EQ(s.attrs[1].kind, AttrKind::Float);  // the int 1 converted to the float the schema wants
  EXPECT_EQ(s.attrs[1].f, 1.0);
  ASSERT_EQ(s.input_tokens.size(), 3u);
  EXPECT_EQ(s.input_tokens[0].toString(), "[*]");
  EXPECT_EQ(s.input_tokens[1].toString(), "_");  // omitted optional input
  EXPECT_EQ(s.output_tokens[0].toString(), "[*]");
  auto reshape = f.addOpSite("reshape", {0, 3}, {4});
  ASSERT_TRUE(reshape.hasValue());
  EXPECT_EQ(f.function().op_sites[1].input_tokens[1].toString(), "_");  // ints operand: not a tensor token
}

TEST(Builder, CallsResolveByNameIncludingForwardAndRecursive) {
  ModuleBuilder builder("m");
  FunctionBuilder& main = builder.addFunction("main");
  main.addParam("x", ValueKind::Tensor);
  main.setOutputs(1);
  main.emit(Opcode::LoadTensor, 0, 0);
  main.emitCall("helper", {0}, {1});
  main.emit(Opcode::StoreTensor, 1, 0);
  main.emit(Opcode::Return);
  FunctionBuilder& helper = builder.addFunction("helper");
  helper.addParam("y", ValueKind::Tensor);
  helper.setOutputs(1);
  helper.emit(Opcode::LoadTensor, 0, 0);
  helper.emit(Opcode::StoreTensor, 0, 0);
  helper.emit(Opcode::Return);
  auto module = builder.finish();
  ASSERT_TRUE(module.hasValue()) << module.status().toString();
  EXPECT_EQ(module->functions[0].call_sites[0].callee, 1);
  EXPECT_TRUE(verifyModule(*module).isOk());

  ModuleBuilder bad("m");
  FunctionBuilder& f = bad.addFunction("f");
  f.emitCall("missing", {}, {});
  f.emit(Opcode::Return);
  auto failed = bad.finish();
  ASSERT_FALSE(failed.hasValue());
  EXPECT_EQ(failed.status().code(), ErrorCode::UnknownName);
  EXPECT_NE(failed.status().message().find("call to unknown function 'missing'"), std::string::npos);
}

TEST(Builder, RegisterListsFillThePoolInPcOrder) {
  ModuleBuilder builder("m");
  FunctionBuilder& f = builder.addFunction("f");
  const std::int32_t first[] = {1, 2};
  const std::int32_t second[] = {3};
  f.emitTuplePack(0, first);
  f.emitTupleUnpack(0, second);
  const Function& fn = f.function();
  EXPECT_EQ(fn.operand_pool, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(fn.code[0].b, 0);
  EXPECT_EQ(fn.code[0].c, 2);
  EXPECT_EQ(fn.code[1].b, 2);
  EXPECT_EQ(fn.code[1].c, 1);
}

TEST(Builder, SourceLocationsFollowSetLoc) {
  ModuleBuilder builder("m");
  builder.setSourceFile("prog.py");
  FunctionBuilder& f = builder.addFunction("f");
  f.emit(Opcode::Nop);
  f.setLoc({12, 5});
  f.emit(Opcode::Nop);
  f.emit(Opcode::Return);
  auto module = builder.finish();
  ASSERT_TRUE(module.hasValue());
  EXPECT_EQ(module->source_file, "prog.py");
  const auto& locs = module->functions[0].locs;
  ASSERT_EQ(locs.size(), 3u);
  EXPECT_EQ(locs[0], (SourceLoc{0, 0}));
  EXPECT_EQ(locs[1], (SourceLoc{12, 5}));
  EXPECT_EQ(locs[2], (SourceLoc{12, 5}));
}

// The reference workload's building blocks, built in code: shape arithmetic into a tuple for
// reshape, a four-way split and a loop with LoopStart/LoopEnd and BranchIf. It verifies and
// survives a text round trip.
TEST(Builder, ReferenceWorkloadPiecesVerifyAndRoundTrip) {
  ModuleBuilder builder("pieces");
  const int k128 = builder.constInt(128);
  const int k_one = builder.constInt(1);
  FunctionBuilder& f = builder.addFunction("cell");
  f.addParam("x", ValueKind::Tensor, *parseTensorDescriptor("f32[?0,?1,128]"));
  f.declareDim(0, "batch");
  f.declareDim(1, "seq");
  f.setOutputs(1);
  f.emit(Opcode::LoadTensor, 0, 0);
  f.emit(Opcode::DimOf, 1, 0, 0);
  f.emit(Opcode::DimOf, 2, 0, 1);
  f.emit(Opcode::Mul, 3, 1, 2);
  f.emit(Opcode::LoadConst, 4, k128);
  const std::int32_t shape[] = {3, 4};
  f.emitTuplePack(5, shape);
  ASSERT_TRUE(f.emitCallOp("reshape", {0, 5}, {6}).hasValue());
  ASSERT_TRUE(f.emitCallOp("split", {6}, {7, 8, 9, 10}, {{"axis", AttrValue::ofInt(1)}, {"sections", AttrValue::ofInt(4)}}).hasValue());
  f.emit(Opcode::LoadConst, 11, k_one);
  Label body = f.newLabel("body");
  Label exit = f.newLabel("exit");
  ASSERT_TRUE(f.bind(body).isOk());
  f.emit(Opcode::LoopStart, 0);
  ASSERT_TRUE(f.emitCallOp("tanh", {7}, {7}).hasValue());
  f.emit(Opcode::Sub, 2, 2, 11);
  f.emit(Opcode::LoopEnd, 0);
  f.emitBranchIf(2, body, exit);
  ASSERT_TRUE(f.bind(exit).isOk());
  f.emit(Opcode::StoreTensor, 7, 0);
  f.emit(Opcode::Return);
  auto module = builder.finish();
  ASSERT_TRUE(module.hasValue()) << module.status().toString();
  EXPECT_TRUE(verifyModule(*module).isOk()) << verifyModule(*module).toString();
  std::string text = disassemble(*module);
  auto again = assemble(text, "pieces.svasm");
  ASSERT_TRUE(again.hasValue()) << again.status().toString();
  EXPECT_EQ(disassemble(*again), text);
}

}  // namespace
}  // namespace shapevm
