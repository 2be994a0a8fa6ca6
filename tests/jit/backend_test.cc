// SPDX-License-Identifier: Apache-2.0
// The KernelBackend seam and the LLVM CPU backend: capabilities and cost hints from the target
// CPU (host, a named one, an unknown or foreign one), specs stamped with the target, search spaces
// that fit the target's registers (AVX2 vs AVX-512), a differential set for every family compiled
// for haswell (AVX2 only) in this process, every family compiled (not run) for an AVX-512 CPU,
// and operands on another device refused with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>

#include "jit/fusion.h"
#include "jit_test_util.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

bool hostHasAvx512() {
  Expected<CpuTarget> host = resolveCpuTarget("host");
  return host && host->has("avx512f");
}

std::unique_ptr<LlvmCpuBackend> backendFor(const std::string& cpu, bool allow_foreign = false) {
  EngineOptions options;
  options.cpu = cpu;
  options.allow_foreign_cpu = allow_foreign;
  options.debugger_support = false;
  auto created = LlvmCpuBackend::create(options);
  EXPECT_TRUE(created.hasValue()) << cpu << ": " << created.status().toString();
  return created ? std::move(*created) : nullptr;
}

// ---- capabilities ----

TEST(LlvmCpuBackend, CapabilitiesComeFromTheTargetCpu) {
  const BackendCapabilities& shared = sharedBackend().capabilities();
  EXPECT_EQ(shared.backend, "llvm-cpu");
  EXPECT_EQ(shared.device, kCpuDevice);
  EXPECT_FALSE(shared.target.empty());
  EXPECT_TRUE(shared.isa.known());
  EXPECT_EQ(shared.isa.vector_bits == 512, shared.hasFeature("avx512f")) << shared.toString();
  EXPECT_EQ(shared.isa, defaultKernelTarget()) << "unstamped specs mean the backend's default CPU";
  EXPECT_TRUE(shared.computesNatively(DType::Float32));
  const CostHints& hints = sharedBackend().costHints();
  EXPECT_GE(hints.cores, 1);
  EXPECT_DOUBLE_EQ(hints.peak_gflops, shared.isa.floatLanes() * 2.0 * 2 * 3.0);
  // The caches (sysfs, else sysconf, else constants) are always known, and the target carries them.
  EXPECT_GT(hints.l1_bytes, 0) << hints.toString();
  EXPECT_LT(hints.l1_bytes, hints.l2_bytes) << hints.toString();
  EXPECT_GE(hints.l3_sharing, 1);
  EXPECT_EQ(shared.isa.l1d_bytes, hints.l1_bytes);
  EXPECT_EQ(shared.isa.l2_bytes, hints.l2_bytes);
  EXPECT_EQ(shared.isa.l3_bytes, hints.l3_bytes / hints.l3_sharing);

  std::unique_ptr<LlvmCpuBackend> haswell = backendFor("haswell");
  ASSERT_NE(haswell, nullptr);
  const BackendCapabilities& avx2 = haswell->capabilities();
  EXPECT_EQ(avx2.target, "haswell");
  EXPECT_TRUE(avx2.hasFeature("avx2"));
  EXPECT_TRUE(avx2.hasFeature("fma"));
  EXPECT_FALSE(avx2.hasFeature("avx512f")) << avx2.features;
  EXPECT_TRUE(avx2.hasFeature("avx"));
  EXPECT_FALSE(avx2.hasFeature("avx51")) << "whole words only";
}

TEST(LlvmCpuBackend, TargetCpuIsCheckedWhenTheBackendIsCreated) {
  EngineOptions options;
  options.cpu = "pentium-pro-9000";
  auto unknown = LlvmCpuBackend::create(options);
  ASSERT_FALSE(unknown.hasValue());
  EXPECT_EQ(unknown.status().code(), ErrorCode::InvalidArgument);
  EXPECT_NE(unknown.status().message().find("pentium-pro-9000"), std::string::npos) << unknown.status().message();

  // An AVX-512 CPU: refused on a host without AVX-512 (its kernels could not run), allowed for
  // compiling only.
  options.cpu = "sapphirerapids";
  auto foreign = LlvmCpuBackend::create(options);
  if (!hostHasAvx512()) {
    ASSERT_FALSE(foreign.hasValue());
    EXPECT_EQ(foreign.status().code(), ErrorCode::Unsupported);
    EXPECT_NE(foreign.status().message().find("avx512f"), std::string::npos) << foreign.status().message();
  }
  std::unique_ptr<LlvmCpuBackend> spr = backendFor("sapphirerapids", /*allow_foreign=*/true);
  ASSERT_NE(spr, nullptr);
  const KernelTarget& isa = spr->capabilities().isa;
  EXPECT_EQ((KernelTarget{isa.vector_bits, isa.vector_registers, isa.bf16_dot}), (KernelTarget{512, 32, true}));
  EXPECT_EQ(isa.l2_bytes, spr->costHints().l2_bytes) << "the caches are the host's, whatever the target";
  EXPECT_TRUE(spr->capabilities().computesNatively(DType::BFloat16));
  EXPECT_TRUE(spr->capabilities().computesNatively(DType::Float16)) << "sapphirerapids has avx512fp16";
}

// ---- search spaces follow the target ----

std::vector<Value> matmulInputs(DType dtype, std::int64_t m, std::int64_t k, std::int64_t n, std::mt19937& rng) {
  return {operand(dtype, Shape{m, k}, rng), operand(dtype, Shape{k, n}, rng)};
}

TEST(LlvmCpuBackend, MatmulSearchSpaceFitsTheTargetsRegisters) {
  std::unique_ptr<LlvmCpuBackend> haswell = backendFor("haswell");
  std::unique_ptr<LlvmCpuBackend> spr = backendFor("sapphirerapids", /*allow_foreign=*/true);
  ASSERT_TRUE(haswell && spr);
  const KernelFamily* family = matmulFamily(OpId::MatMul);
  std::mt19937 rng(3);
  for (auto [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{256, 256, 256}, {8, 512, 1024}}) {
    const KernelSpec base = specFor("matmul", matmulInputs(DType::Float32, m, k, n, rng));
    for (LlvmCpuBackend* backend : {haswell.get(), spr.get()}) {
      const KernelTarget& isa = backend->capabilities().isa;
      const std::vector<KernelParams> space = family->searchSpace(backend->targetSpec(base));
      ASSERT_GT(space.size(), 1u) << backend->capabilities().toString();
      EXPECT_TRUE(space[0].isDefault());
      for (std::size_t c = 1; c < space.size(); ++c) {
        const KernelParams& p = space[c];
        if (p.library != 0) continue;  // a oneDNN primitive: no tile of ours
        // Accumulator registers: <16 x float> vectors, each one zmm or two ymm.
        const int registers = p.mr * p.nr / isa.floatLanes();
        EXPECT_LE(registers, isa.vector_registers - 4) << p.toString() << " on " << backend->capabilities().target;
        EXPECT_GE(registers, isa.vector_registers / 2) << p.toString() << " on " << backend->capabilities().target;
      }
      const bool has_6x64 =
          std::any_of(space.begin(), space.end(), [](const KernelParams& p) { return p.mr == 6 && p.nr == 64; });
      const bool has_6x16 =
          std::any_of(space.begin(), space.end(), [](const KernelParams& p) { return p.mr == 6 && p.nr == 16; });
      EXPECT_EQ(has_6x64, isa.vector_bits == 512) << "6x64 (24 zmm) is an AVX-512 tile";
      EXPECT_EQ(has_6x16, isa.vector_bits == 256) << "6x16 (12 ymm) is an AVX2 tile";
    }
  }
  // bfloat16 pairs (vdpbf16ps) only where the target has AVX512_BF16.
  const KernelSpec bf16 = specFor("matmul", matmulInputs(DType::BFloat16, 16, 64, 64, rng));
  for (LlvmCpuBackend* backend : {haswell.get(), spr.get()}) {
    const bool pairs = backend->capabilities().isa.bf16_dot;
    const KernelSpec stamped = backend->targetSpec(bf16);
    EXPECT_EQ(family->symbolStem(stamped).find("bf16pairs") != std::string::npos, pairs);
    const std::vector<KernelParams> space = family->searchSpace(stamped);
    EXPECT_EQ(std::find(space.begin(), space.end(), KernelParams{.bf16_dot = -1}) != space.end(), pairs);
    KernelSpec forced = stamped;
    forced.params.bf16_dot = 1;
    EXPECT_EQ(family->supports(forced).isOk(), pairs) << backend->capabilities().target;
  }
}

// A fused elementwise program: out = tanh(x * y) over [n, 64].
KernelSpec fusedSpec() {
  auto program = std::make_shared<FusedProgram>();
  program->rank = 2;
  program->leaf_inner = {1, 1};
  program->leaf_dtype = {DType::Float32, DType::Float32};
  program->static_dims = {-1, 64};
  program->divisors = {1, 1};
  program->nodes.push_back(FusedProgram::Node{OpId::Mul, FusedProgram::leafRef(0), FusedProgram::leafRef(1)});
  program->nodes.push_back(FusedProgram::Node{OpId::Tanh, 0, -1});
  program->outputs = {1};
  KernelSpec spec;
  spec.fused = program;
  for (int k = 0; k < 2; ++k) {
    OperandSpec input;
    input.rank = 2;
    input.dims[1].size = 64;
    spec.inputs.push_back(input);
  }
  return spec;
}

TEST(LlvmCpuBackend, FusedVectorWidthsFollowTheTarget) {
  std::unique_ptr<LlvmCpuBackend> haswell = backendFor("haswell");
  std::unique_ptr<LlvmCpuBackend> spr = backendFor("sapphirerapids", /*allow_foreign=*/true);
  ASSERT_TRUE(haswell && spr);
  for (LlvmCpuBackend* backend : {haswell.get(), spr.get()}) {
    const int lanes = backend->capabilities().isa.floatLanes();
    std::vector<int> widths;
    for (const KernelParams& p : fusedFamily()->searchSpace(backend->targetSpec(fusedSpec()))) {
      if (p.vector_width != 0) widths.push_back(p.vector_width);
    }
    ASSERT_FALSE(widths.empty());
    EXPECT_EQ(*std::max_element(widths.begin(), widths.end()), lanes) << backend->capabilities().target;
    EXPECT_EQ(*std::min_element(widths.begin(), widths.end()), lanes / 2) << backend->capabilities().target;
  }
}

// ---- every family on haswell (AVX2), differential, in this process ----

// Compiles `spec` on `backend`, runs it and the reference on `inputs`, compares.
::testing::AssertionResult matchesOn(KernelBackend& backend, const KernelFamily& family, const KernelSpec& spec,
                                     const std::vector<Value>& inputs) {
  auto kernel = compileKernel(backend, family, spec);
  if (!kernel) return ::testing::AssertionFailure() << spec.signature() << ": " << kernel.status().toString();
  if ((*kernel)->spec.target != backend.capabilities().isa) return ::testing::AssertionFailure() << "spec not stamped";
  std::vector<const Value*> pointers = pointersTo(inputs);
  std::vector<Value> expected(static_cast<std::size_t>((*kernel)->num_outputs));
  Status reference = family.reference((*kernel)->spec, pointers, expected);
  std::vector<Value> actual(static_cast<std::size_t>((*kernel)->num_outputs));
  Status run = invokeCompiled(**kernel, pointers, actual);
  const Status freed = backend.free((*kernel)->handle);
  if (!reference.isOk()) return ::testing::AssertionFailure() << "reference: " << reference.toString();
  if (!run.isOk()) return ::testing::AssertionFailure() << spec.signature() << ": " << run.toString();
  if (!freed.isOk()) return ::testing::AssertionFailure() << freed.toString();
  Comparison comparison = compareOutputs(expected, actual);
  if (!comparison.ok) return ::testing::AssertionFailure() << spec.signature() << ": " << comparison.reason;
  return ::testing::AssertionSuccess();
}

TEST(LlvmCpuBackend, EveryFamilyIsCorrectOnHaswell) {
  std::unique_ptr<LlvmCpuBackend> haswell = backendFor("haswell");
  ASSERT_NE(haswell, nullptr);
  std::mt19937 rng(11);
  // Elementwise: unary, binary with broadcasting, a cast to bfloat16, symbolic and strided.
  {
    std::vector<Value> x = {operand(DType::Float32, Shape{37, 29}, rng)};
    EXPECT_TRUE(matchesOn(*haswell, *familyFor(OpId::Exp), specFor("exp", x), x));
    std::vector<Value> xy = {operand(DType::Float32, Shape{37, 29}, rng), operand(DType::Float32, Shape{29}, rng)};
    EXPECT_TRUE(matchesOn(*haswell, *familyFor(OpId::Add), specFor("add", xy, {}, Dims::Symbolic), xy));
    std::vector<Value> strided = {operand(DType::BFloat16, Shape{19, 33}, rng, Layout::Strided)};
    EXPECT_TRUE(matchesOn(*haswell, *familyFor(OpId::Tanh), specFor("tanh", strided), strided));
  }
  // Reductions and softmax.
  {
    std::vector<Value> x = {operand(DType::Float32, Shape{13, 70}, rng)};
    EXPECT_TRUE(matchesOn(*haswell, *familyFor(OpId::Sum),
                          specFor("sum", x, {{"axes", AttrValue::ofInts({1})}, {"keepdims", AttrValue::ofBool(false)}}),
                          x));
    EXPECT_TRUE(
        matchesOn(*haswell, *familyFor(OpId::Softmax), specFor("softmax", x, {{"axis", AttrValue::ofInt(-1)}}), x));
    std::vector<Value> h = {operand(DType::Float16, Shape{9, 40}, rng)};
    EXPECT_TRUE(matchesOn(*haswell, *familyFor(OpId::Max),
                          specFor("max", h, {{"axes", AttrValue::ofInts({0})}, {"keepdims", AttrValue::ofBool(true)}}),
                          h));
  }
  // Matmul: f32 with every candidate of the AVX2 space, f16 and bf16 (widening: no pairs).
  {
    const KernelFamily* family = matmulFamily(OpId::MatMul);
    std::vector<Value> f32 = matmulInputs(DType::Float32, 70, 300, 45, rng);
    const KernelSpec base = haswell->targetSpec(specFor("matmul", f32));
    const std::vector<KernelParams> space = family->searchSpace(base);
    EXPECT_GT(space.size(), 1u);
    for (const KernelParams& params : space) {
      KernelSpec spec = base;
      spec.params = params;
      EXPECT_TRUE(matchesOn(*haswell, *family, spec, f32)) << params.toString();
    }
    for (DType dtype : {DType::Float16, DType::BFloat16}) {
      std::vector<Value> half = matmulInputs(dtype, 33, 129, 65, rng);
      EXPECT_TRUE(matchesOn(*haswell, *family, specFor("matmul", half), half)) << dtypeName(dtype);
    }
  }
  // A fused region kernel, with each vector width of its search space.
  {
    std::vector<Value> leaves = {operand(DType::Float32, Shape{21, 64}, rng),
                                 operand(DType::Float32, Shape{21, 64}, rng)};
    const KernelSpec base = haswell->targetSpec(fusedSpec());
    for (const KernelParams& params : fusedFamily()->searchSpace(base)) {
      KernelSpec spec = base;
      spec.params = params;
      EXPECT_TRUE(matchesOn(*haswell, *fusedFamily(), spec, leaves)) << params.toString();
    }
  }
}

// Every family compiles and links for an AVX-512 CPU with bf16 pairs, wherever this runs (the
// kernels are never called: the host may lack the instructions).
TEST(LlvmCpuBackend, EveryFamilyCompilesForAnAvx512Cpu) {
  std::unique_ptr<LlvmCpuBackend> spr = backendFor("sapphirerapids", /*allow_foreign=*/true);
  ASSERT_NE(spr, nullptr);
  std::mt19937 rng(12);
  std::vector<Value> x = {operand(DType::Float32, Shape{37, 29}, rng)};
  std::vector<Value> bf16 = matmulInputs(DType::BFloat16, 16, 64, 64, rng);
  const std::vector<std::pair<const KernelFamily*, KernelSpec>> cases = {
      {familyFor(OpId::Exp), specFor("exp", x)},
      {familyFor(OpId::Sum),
       specFor("sum", x, {{"axes", AttrValue::ofInts({1})}, {"keepdims", AttrValue::ofBool(false)}})},
      {matmulFamily(OpId::MatMul), specFor("matmul", matmulInputs(DType::Float32, 64, 64, 64, rng))},
      {matmulFamily(OpId::MatMul), specFor("matmul", bf16)},
      {fusedFamily(), fusedSpec()},
  };
  for (const auto& [family, spec] : cases) {
    auto kernel = compileKernel(*spr, *family, spec);
    ASSERT_TRUE(kernel.hasValue()) << spec.signature() << ": " << kernel.status().toString();
    EXPECT_EQ((*kernel)->spec.target, spr->capabilities().isa);
    EXPECT_TRUE(spr->free((*kernel)->handle).isOk());
  }
  EXPECT_NE(matmulFamily(OpId::MatMul)->symbolStem(spr->targetSpec(specFor("matmul", bf16))).find("bf16pairs"),
            std::string::npos);
  EXPECT_EQ(spr->liveKernels(), 0u);
}

// ---- devices and families ----

TEST(LlvmCpuBackend, OperandsOnAnotherDeviceAreRefused) {
  std::mt19937 rng(13);
  std::vector<Value> xy = {operand(DType::Float32, Shape{4, 8}, rng), operand(DType::Float32, Shape{4, 8}, rng)};
  auto kernel = compileKernel(sharedBackend(), *familyFor(OpId::Add), specFor("add", xy));
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  alignas(64) float device_bytes[32] = {};
  Value on_gpu = Value::fromTensor(Tensor::wrap(device_bytes, DType::Float32, Shape{4, 8}, Shape{8, 1},
                                                sizeof(device_bytes), nullptr, nullptr, Device{DeviceKind::Cuda, 0}));
  std::vector<const Value*> inputs = {&xy[0], &on_gpu};
  std::vector<Value> out(1);
  const Status refused = invokeCompiled(**kernel, inputs, out);
  EXPECT_EQ(refused.code(), ErrorCode::Unsupported);
  EXPECT_NE(refused.message().find("input 1 (f32[4,8]@cuda:0) lives on cuda:0, the kernel runs on cpu"),
            std::string::npos)
      << refused.message();
  EXPECT_FALSE(runCompiledKernel(kernel->get(), inputs, out)) << "the slot declines: the call stays interpreted";
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

// A family that has no LLVM code generator.
class NoEmitterFamily final : public KernelFamily {
 public:
  std::string_view name() const override { return "no_emitter"; }
  Status supports(const KernelSpec&) const override { return Status::ok(); }
  Status outputs(const KernelSpec&, std::span<const Value* const>, std::span<DType>, std::span<Shape>) const override {
    return Status::ok();
  }
};

TEST(LlvmCpuBackend, AFamilyWithoutACodeGeneratorIsAnError) {
  NoEmitterFamily family;
  const Status unsupported = sharedBackend().supportsFamily(family);
  EXPECT_EQ(unsupported.code(), ErrorCode::Unsupported);
  EXPECT_NE(unsupported.message().find("no_emitter"), std::string::npos) << unsupported.message();
  std::mt19937 rng(14);
  std::vector<Value> x = {operand(DType::Float32, Shape{4}, rng)};
  auto kernel = compileKernel(sharedBackend(), family, specFor("exp", x));
  ASSERT_FALSE(kernel.hasValue());
  EXPECT_EQ(kernel.status().code(), ErrorCode::Unsupported);
  EXPECT_TRUE(sharedBackend().supportsFamily(*matmulFamily(OpId::MatMul)).isOk());
}

}  // namespace
}  // namespace shapevm::jit
