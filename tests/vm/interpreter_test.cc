// SPDX-License-Identifier: Apache-2.0
// Interpreter semantics on small hand-written modules: Python scalar arithmetic, control flow
// on runtime values, loops and counters, user calls, dispatch slots (inline cache and patch
// table), profile buffers and runtime errors that name function, PC and source line.
#include <gtest/gtest.h>

#include <random>

#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "support/tunables.h"
#include "vm/vm.h"

namespace shapevm {
namespace {

std::shared_ptr<Module> load(const std::string& text) {
  auto module = assemble(text, "test.svasm");
  EXPECT_TRUE(module.hasValue()) << module.status().toString();
  if (!module) return nullptr;
  Status verified = verifyModule(*module);
  EXPECT_TRUE(verified.isOk()) << verified.toString();
  return std::make_shared<Module>(std::move(*module));
}

Tensor randomTensor(const Shape& shape, std::uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> dist;
  Tensor t = std::move(Tensor::empty(DType::Float32, shape).value());
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(engine);
  return t;
}

// r2 = a OP b for scalar ints/floats.
Expected<Value> scalar(const std::string& op, Value a, Value b) {
  std::string kind_a = a.isFloat() ? "float" : "int", kind_b = b.isFloat() ? "float" : "int";
  auto module = load(".module \"m\"\n.func f\n  .param a : " + kind_a + "\n  .param b : " + kind_b +
                     "\n  .outputs 1\n  LoadArg r0, a\n  LoadArg r1, b\n  " + op +
                     " r2, r0, r1\n  StoreTensor r2, o0\n  Return\n.end\n");
  if (!module) return makeError(ErrorCode::Internal, "no module");
  VirtualMachine vm(module);
  std::vector<Value> args{a, b};
  SVM_ASSIGN_OR_RETURN(std::vector<Value> out, vm.run(0, args));
  return out[0];
}

TEST(InterpreterScalar, FollowsPythonSemantics) {
  EXPECT_EQ(scalar("FloorDiv", Value::fromInt(-7), Value::fromInt(2))->asInt(), -4);
  EXPECT_EQ(scalar("Mod", Value::fromInt(-7), Value::fromInt(2))->asInt(), 1);
  EXPECT_EQ(scalar("Mod", Value::fromInt(7), Value::fromInt(-2))->asInt(), -1);
  EXPECT_DOUBLE_EQ(scalar("Div", Value::fromInt(7), Value::fromInt(2))->asFloat(), 3.5);
  EXPECT_DOUBLE_EQ(scalar("FloorDiv", Value::fromFloat(-7.5), Value::fromInt(2))->asFloat(), -4.0);
  EXPECT_DOUBLE_EQ(scalar("Mod", Value::fromFloat(-7.5), Value::fromInt(2))->asFloat(), 0.5);
  EXPECT_EQ(scalar("Pow", Value::fromInt(3), Value::fromInt(4))->asInt(), 81);
  EXPECT_DOUBLE_EQ(scalar("Pow", Value::fromInt(2), Value::fromInt(-1))->asFloat(), 0.5);
  EXPECT_TRUE(scalar("Lt", Value::fromInt(2), Value::fromFloat(2.5))->asBool());
  EXPECT_EQ(scalar("Max", Value::fromInt(2), Value::fromInt(9))->asInt(), 9);
  EXPECT_TRUE(scalar("Add", Value::fromInt(2), Value::fromFloat(0.5))->isFloat());
}

TEST(InterpreterScalar, ErrorsInsteadOfUndefinedBehaviour) {
  auto div0 = scalar("FloorDiv", Value::fromInt(1), Value::fromInt(0));
  ASSERT_FALSE(div0.hasValue());
  EXPECT_NE(div0.status().message().find("by zero"), std::string::npos);
  EXPECT_NE(div0.status().message().find("PC 0x0002"), std::string::npos) << div0.status().message();
  auto overflow = scalar("Mul", Value::fromInt(INT64_MAX), Value::fromInt(2));
  ASSERT_FALSE(overflow.hasValue());
  EXPECT_NE(overflow.status().message().find("overflow"), std::string::npos);
  EXPECT_FALSE(scalar("Div", Value::fromFloat(1.0), Value::fromFloat(0.0)).hasValue());
}

const char* kLoopModule = R"(.module "loop"
.const k0 = int 0
.const k1 = int 1
.func count
  .param x : f32[?0,4]
  .param n : int
  .outputs 2
  LoadTensor r0, x
  LoadArg r1, n
  LoadConst r2, k0
  LoadConst r3, k1
  Move r4, r0
head:
  Lt r5, r2, r1
  BranchIf r5, @body, @done
body:
  LoopStart l0
  CallOp add r4 = r4, r0 : f32[?0,4] x f32[?0,4] -> f32[?0,4]
  LoopEnd l0
  Add r2, r2, r3
  Jump @head
done:
  StoreTensor r4, o0
  StoreTensor r2, o1
  Return
.end
)";

TEST(InterpreterLoops, RunsCountsAndProfiles) {
  auto module = load(kLoopModule);
  ASSERT_TRUE(module);
  VirtualMachine vm(module);
  Tensor x = randomTensor(Shape{3, 4}, 1);
  std::vector<Value> args{Value::fromTensor(x), Value::fromInt(5)};
  auto out = vm.run("count", args);
  ASSERT_TRUE(out.hasValue()) << out.status().toString();
  const Tensor& y = (*out)[0].tensor();
  for (std::int64_t i = 0; i < 12; ++i) EXPECT_NEAR(y.data<float>()[i], 6.0f * x.data<float>()[i], 1e-5f);
  EXPECT_EQ((*out)[1].asInt(), 5);
  FunctionRuntime& rt = vm.runtime(0);
  EXPECT_EQ(rt.loops[0].iterations.load(), 5u);
  EXPECT_EQ(rt.slots[0].calls.load(), 5u);
  EXPECT_EQ(rt.pc_counts[5].load(), 6u);  // the loop head's Lt runs n + 1 times
  // Same signature every time: resolved once, then served by the inline cache.
  EXPECT_EQ(rt.slots[0].ic_misses, 1u);
  auto records = rt.profiles[0].snapshot();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].count, 5u);
  EXPECT_EQ(records[0].toString(), "f32(3,4) x f32(3,4)");

  // A new shape is a new profile record; same dtype/rank keeps the cached kernel.
  std::vector<Value> args2{Value::fromTensor(randomTensor(Shape{7, 4}, 2)), Value::fromInt(2)};
  ASSERT_TRUE(vm.run(0, args2).hasValue());
  EXPECT_EQ(rt.profiles[0].snapshot().size(), 2u);
  EXPECT_EQ(rt.slots[0].ic_misses, 1u);
  EXPECT_EQ(rt.calls.load(), 2u);
}

TEST(InterpreterLoops, StepBudgetStopsRunawayLoops) {
  auto module = load(kLoopModule);
  ASSERT_TRUE(module);
  VirtualMachine vm(module);
  ASSERT_TRUE(Tunables::set(Tunable::MaxSteps, 1000).isOk());
  std::vector<Value> args{Value::fromTensor(randomTensor(Shape{1, 4}, 3)), Value::fromInt(1000000)};
  auto out = vm.run(0, args);
  Tunables::resetToDefaults();
  ASSERT_FALSE(out.hasValue());
  EXPECT_EQ(out.status().code(), ErrorCode::LimitExceeded);
}

// A compiled entry installed through the dispatch slot's patch table takes over when its guard
// passes; a guard miss falls back to the reference kernel and is counted.
bool fakeCompiledAdd(const void* state, std::span<const Value* const> inputs, std::span<Value> outputs) {
  const auto* calls = static_cast<const int*>(state);
  (void)calls;
  auto result = Tensor::empty(DType::Float32, inputs[0]->tensor().shape());
  if (!result) return false;
  Tensor out = std::move(*result);
  const float* a = inputs[0]->tensor().data<float>();
  const float* b = inputs[1]->tensor().data<float>();
  for (std::int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = a[i] + b[i];
  outputs[0] = Value::fromTensor(std::move(out));
  return true;
}

TEST(InterpreterDispatch, PatchTableEntryRunsBehindItsGuard) {
  auto module = load(kLoopModule);
  ASSERT_TRUE(module);
  VirtualMachine vm(module);
  int state = 0;
  PatchTable table;
  CompiledEntry entry;
  InputGuard guard;
  guard.rank = 2;
  guard.dims[0] = DimRange::between(1, 4);
  guard.dims[1] = DimRange::exactly(4);
  entry.guard.inputs = {guard, guard};
  entry.fn = fakeCompiledAdd;
  entry.state = &state;
  table.entries.push_back(entry);
  vm.runtime(0).slots[0].patched.store(&table, std::memory_order_release);

  Tensor small = randomTensor(Shape{2, 4}, 4);
  std::vector<Value> args{Value::fromTensor(small), Value::fromInt(3)};
  auto out = vm.run(0, args);
  ASSERT_TRUE(out.hasValue());
  EXPECT_EQ(vm.runtime(0).slots[0].compiled_calls.load(), 3u);
  EXPECT_EQ(vm.stats().compiled_calls, 3u);
  for (std::int64_t i = 0; i < 8; ++i) EXPECT_NEAR((*out)[0].tensor().data<float>()[i], 4 * small.data<float>()[i], 1e-5f);

  Tensor big = randomTensor(Shape{9, 4}, 5);  // dim 0 = 9 is outside the guard's 1..4
  std::vector<Value> args2{Value::fromTensor(big), Value::fromInt(2)};
  auto out2 = vm.run(0, args2);
  ASSERT_TRUE(out2.hasValue());
  EXPECT_EQ(vm.runtime(0).slots[0].guard_misses.load(), 2u);
  for (std::int64_t i = 0; i < 36; ++i) EXPECT_NEAR((*out2)[0].tensor().data<float>()[i], 3 * big.data<float>()[i], 1e-5f);
  vm.runtime(0).slots[0].patched.store(nullptr, std::memory_order_release);
}

TEST(InterpreterCalls, UserFunctionsAndMultipleResults) {
  auto module = load(R"(.module "calls"
.func main
  .param x : f32[?0,?1]
  .outputs 2
  LoadTensor r0, x
  Call swap r1, r2 = r0
  StoreTensor r1, o0
  StoreTensor r2, o1
  Return
.end
.func swap
  .param a : f32[?0,?1]
  .outputs 2
  LoadTensor r0, a
  CallOp neg r1 = r0
  CallOp transpose r2 = r0
  StoreTensor r2, o0
  StoreTensor r1, o1
  Return
.end
)");
  ASSERT_TRUE(module);
  VirtualMachine vm(module);
  Tensor x = randomTensor(Shape{2, 3}, 6);
  std::vector<Value> args{Value::fromTensor(x)};
  auto out = vm.run("main", args);
  ASSERT_TRUE(out.hasValue()) << out.status().toString();
  EXPECT_EQ((*out)[0].tensor().shape(), (Shape{3, 2}));
  EXPECT_EQ((*out)[1].tensor().elementAsDouble(4), -x.elementAsDouble(4));
  EXPECT_EQ(vm.stats().function_calls, 2u);
}

TEST(InterpreterCalls, RecursionDepthIsLimited) {
  auto module = load(R"(.module "rec"
.func forever
  .param n : int
  .outputs 1
  LoadArg r0, n
  Call forever r1 = r0
  StoreTensor r1, o0
  Return
.end
)");
  ASSERT_TRUE(module);
  VirtualMachine vm(module);
  std::vector<Value> args{Value::fromInt(1)};
  auto out = vm.run(0, args);
  ASSERT_FALSE(out.hasValue());
  EXPECT_EQ(out.status().code(), ErrorCode::LimitExceeded);
}

TEST(InterpreterErrors, ShapeErrorsNameFunctionPcLineAndShapes) {
  auto module = load(R"(.module "bad"
.source "model.py"
.func f
  .param a : f32[?0,3]
  .param b : f32[?1,4]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
.loc 7 9
  CallOp add r2 = r0, r1
  StoreTensor r2, o0
  Return
.end
)");
  ASSERT_TRUE(module);
  VirtualMachine vm(module);
  std::vector<Value> args{Value::fromTensor(randomTensor(Shape{2, 3}, 7)), Value::fromTensor(randomTensor(Shape{2, 4}, 8))};
  auto out = vm.run(0, args);
  ASSERT_FALSE(out.hasValue());
  const std::string& message = out.status().message();
  EXPECT_EQ(out.status().code(), ErrorCode::ShapeMismatch);
  EXPECT_NE(message.find("function 'f' at PC 0x0002"), std::string::npos) << message;
  EXPECT_NE(message.find("model.py line 7:9"), std::string::npos) << message;
  EXPECT_NE(message.find("add(f32[2,3], f32[2,4])"), std::string::npos) << message;
}

// A tensor tagged with another device reaches the reference kernels only to be refused, on the
// first call and on a later one after the same site ran a host tensor (the inline cache must not
// let it through), naming the op, the input and the device.
TEST(InterpreterErrors, TensorsOffTheCpuAreRefusedByTheReferenceKernels) {
  auto module = load(R"(.module "dev"
.source "model.py"
.func f
  .param a : f32[?0,3]
  .param b : f32[?0,3]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
.loc 4 5
  CallOp add r2 = r0, r1
  StoreTensor r2, o0
  Return
.end
)");
  ASSERT_TRUE(module);
  VirtualMachine vm(module);
  alignas(64) float device_bytes[6] = {1, 2, 3, 4, 5, 6};
  Tensor on_gpu = Tensor::wrap(device_bytes, DType::Float32, Shape{2, 3}, Shape{3, 1}, sizeof(device_bytes), nullptr,
                               nullptr, Device{DeviceKind::Cuda, 0});
  Value host = Value::fromTensor(randomTensor(Shape{2, 3}, 21));
  for (int round = 0; round < 2; ++round) {
    std::vector<Value> host_args{host, host};
    ASSERT_TRUE(vm.run(0, host_args).hasValue()) << "round " << round;
    std::vector<Value> args{host, Value::fromTensor(on_gpu)};
    auto out = vm.run(0, args);
    ASSERT_FALSE(out.hasValue()) << "round " << round;
    const std::string& message = out.status().message();
    EXPECT_EQ(out.status().code(), ErrorCode::Unsupported);
    EXPECT_NE(message.find("op 'add' input 1"), std::string::npos) << message;
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
    EXPECT_NE(message.find("model.py line 4:5"), std::string::npos) << message;
  }
}

TEST(InterpreterErrors, ParameterTokensAndSharedDimsAreChecked) {
  auto module = load(R"(.module "dims"
.func f
  .param x : f32[?0,?1,8]
  .param h : f32[?0,16]
  .dim ?0 batch
  .outputs 1
  LoadTensor r0, x
  LoadTensor r1, h
  StoreTensor r1, o0
  Return
.end
)");
  ASSERT_TRUE(module);
  VirtualMachine vm(module);
  std::vector<Value> wrong_static{Value::fromTensor(randomTensor(Shape{2, 3, 9}, 9)), Value::fromTensor(randomTensor(Shape{2, 16}, 10))};
  auto a = vm.run(0, wrong_static);
  ASSERT_FALSE(a.hasValue());
  EXPECT_NE(a.status().message().find("parameter 'x'"), std::string::npos) << a.status().message();
  std::vector<Value> wrong_batch{Value::fromTensor(randomTensor(Shape{2, 3, 8}, 11)), Value::fromTensor(randomTensor(Shape{5, 16}, 12))};
  auto b = vm.run(0, wrong_batch);
  ASSERT_FALSE(b.hasValue());
  EXPECT_NE(b.status().message().find("(batch) is 2"), std::string::npos) << b.status().message();
  std::vector<Value> one_arg{Value::fromTensor(randomTensor(Shape{2, 3, 8}, 13))};
  EXPECT_EQ(vm.run(0, one_arg).status().code(), ErrorCode::InvalidArgument);
}

TEST(InterpreterErrors, OutputTokenMismatchIsReported) {
  auto module = load(R"(.module "tok"
.func f
  .param x : f32[?0,4]
  .outputs 1
  LoadTensor r0, x
  CallOp transpose r1 = r0 : f32[?0,4] -> f32[?0,4]
  StoreTensor r1, o0
  Return
.end
)");
  ASSERT_TRUE(module);
  VirtualMachine vm(module);
  std::vector<Value> args{Value::fromTensor(randomTensor(Shape{3, 4}, 14))};
  auto out = vm.run(0, args);
  ASSERT_FALSE(out.hasValue());
  EXPECT_NE(out.status().message().find("shape token"), std::string::npos) << out.status().message();
}

TEST(InterpreterControl, BranchOnTensorValuesAndAsserts) {
  auto module = load(R"(.module "ctl"
.const k0 = string "x must be positive"
.const k1 = float 0
.func f
  .param x : f32[?0]
  .outputs 1
  LoadTensor r0, x
  CallOp sum r1 = r0
  LoadConst r2, k1
  CallOp greater r3 = r1, r2
  Assert r3, k0
  CallOp neg r4 = r0
  StoreTensor r4, o0
  Return
.end
)");
  ASSERT_TRUE(module);
  VirtualMachine vm(module);
  Tensor positive = std::move(Tensor::empty(DType::Float32, Shape{3}).value());
  for (int i = 0; i < 3; ++i) positive.data<float>()[i] = 1.5f + static_cast<float>(i);
  std::vector<Value> ok_args{Value::fromTensor(positive)};
  ASSERT_TRUE(vm.run(0, ok_args).hasValue());
  Tensor negative = std::move(Tensor::empty(DType::Float32, Shape{3}).value());
  for (int i = 0; i < 3; ++i) negative.data<float>()[i] = -1.0f - static_cast<float>(i);
  std::vector<Value> bad_args{Value::fromTensor(negative)};
  auto out = vm.run(0, bad_args);
  ASSERT_FALSE(out.hasValue());
  EXPECT_EQ(out.status().code(), ErrorCode::AssertionFailed);
  EXPECT_NE(out.status().message().find("x must be positive"), std::string::npos);
}

TEST(ProfileBuffer, KeepsDistinctSignaturesAndEvictsTheOldest) {
  ProfileBuffer buffer(2);
  Value a = Value::fromTensor(randomTensor(Shape{2, 2}, 15));
  Value b = Value::fromTensor(randomTensor(Shape{3, 2}, 16));
  Value c = Value::fromTensor(randomTensor(Shape{4, 2}, 17));
  const Value* in_a[] = {&a};
  const Value* in_b[] = {&b};
  const Value* in_c[] = {&c};
  buffer.record(in_a, 1);
  buffer.record(in_a, 2);
  buffer.record(in_b, 3);
  buffer.record(in_c, 4);  // evicts a (least recently seen)
  auto records = buffer.snapshot();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(buffer.evictions(), 1u);
  for (const ProfileRecord& r : records) EXPECT_NE(r.inputs[0].shape[0], 2);
}

TEST(DispatchKey, DistinguishesWhatPatternsTest) {
  Value a = Value::fromTensor(randomTensor(Shape{2, 3}, 18));
  Value b = Value::fromTensor(randomTensor(Shape{2, 3}, 19));
  auto transposed = a.tensor().asStrided(Shape{3, 2}, Shape{1, 3}, 0);
  ASSERT_TRUE(transposed.hasValue());
  Value t = Value::fromTensor(*transposed);
  Value s = Value::fromFloat(2.0);
  const Value* same[] = {&a, &b};
  const Value* strided[] = {&t, &b};
  const Value* with_scalar[] = {&a, &s};
  EXPECT_NE(signatureKey(same), signatureKey(strided));
  EXPECT_NE(signatureKey(same), signatureKey(with_scalar));
  Value c = Value::fromTensor(randomTensor(Shape{5, 3}, 20));
  const Value* other_shape[] = {&a, &c};
  EXPECT_NE(signatureKey(same), signatureKey(other_shape));  // "same shape" bit differs
}

}  // namespace
}  // namespace shapevm
