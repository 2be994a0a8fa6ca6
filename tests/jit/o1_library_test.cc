// SPDX-License-Identifier: Apache-2.0
// The O1 policy for matmuls: an untuned matmul installs oneDNN's primitive (a stub kernel, cheap to
// compile) where the library candidates are on, and the generated kernel where they are off, with
// the reference's results either way.
#include <gtest/gtest.h>

#include <random>

#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "jit/jit.h"
#include "jit/llvm_cpu/library_onednn.h"
#include "support/tunables.h"
#include "vm/vm.h"

namespace shapevm::jit {
namespace {

constexpr const char* kMatmul = R"(.module "mm"
.func f
  .param a : f32[?0,32]
  .param b : f32[32,48]
  .outputs 1
  LoadTensor r0, a
  LoadTensor r1, b
  CallOp matmul r2 = r0, r1 : f32[?0,32] x f32[32,48] -> f32[?0,48]
  StoreTensor r2, o0
  Return
.end
)";

Tensor random(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<double> dist;
  Tensor t = std::move(Tensor::empty(DType::Float32, shape).value());
  for (std::int64_t i = 0; i < t.numel(); ++i) storeFromDouble(t.rawData(), DType::Float32, i, dist(rng));
  return t;
}

// Runs the matmul program at O1 with its compiles waited for; returns the oneDNN calls it made.
std::uint64_t runAtO1(std::int64_t library_candidates) {
  Tunables::resetToDefaults();
  EXPECT_TRUE(Tunables::set(Tunable::HotMs, 0).isOk());
  EXPECT_TRUE(Tunables::set(Tunable::JitLevel, 1).isOk());
  EXPECT_TRUE(Tunables::set(Tunable::WarmupRuns, 0).isOk());
  EXPECT_TRUE(Tunables::set(Tunable::HotCount, 1).isOk());
  EXPECT_TRUE(Tunables::set(Tunable::CacheCovering, 0).isOk());
  EXPECT_TRUE(Tunables::set(Tunable::LibraryCandidates, library_candidates).isOk());
  auto module = assemble(kMatmul, "mm.svasm");
  EXPECT_TRUE(module.hasValue()) << module.status().toString();
  if (!module) return 0;
  EXPECT_TRUE(verifyModule(*module).isOk());
  VirtualMachine vm(std::make_shared<Module>(std::move(*module)));
  JitOptions options;
  options.wait_for_compiles = true;
  options.first_sight = false;
  auto jit = Jit::attach(vm, options);
  EXPECT_TRUE(jit.hasValue()) << jit.status().toString();
  if (!jit) return 0;
  std::mt19937 rng(static_cast<std::uint32_t>(41 + library_candidates));
  const Tensor b = random(Shape{32, 48}, rng);
  const std::uint64_t calls_before = onednn::stats().calls;
  for (int run = 0; run < 6; ++run) {
    const std::vector<Value> in = {Value::fromTensor(random(Shape{5 + run, 32}, rng)), Value::fromTensor(b)};
    const Tensor want = callOp("matmul", {in[0], in[1]}).value()[0].tensor();
    auto out = vm.run(0, in);
    EXPECT_TRUE(out.hasValue()) << out.status().toString();
    if (!out) return 0;
    const Tensor& got = (*out)[0].tensor();
    EXPECT_EQ(got.shape(), want.shape());
    for (std::int64_t i = 0; i < want.numel(); ++i) {
      EXPECT_NEAR(got.elementAsDouble(i), want.elementAsDouble(i), 1e-4) << "run " << run << " element " << i;
    }
  }
  EXPECT_GE((*jit)->stats().compiles, 1u);
  EXPECT_EQ((*jit)->stats().validation_failures, 0u);
  const std::uint64_t calls = onednn::stats().calls - calls_before;
  (*jit).reset();
  Tunables::resetToDefaults();
  return calls;
}

TEST(O1Library, AnUntunedMatmulRunsOnOnednnAndOnGeneratedCodeWithoutLibraryCandidates) {
  EXPECT_GT(runAtO1(1), 0u) << "O1 installed the generated matmul although oneDNN's primitive was offered";
  EXPECT_EQ(runAtO1(0), 0u) << "LibraryCandidates=0 must keep O1 on generated code";
}

}  // namespace
}  // namespace shapevm::jit
