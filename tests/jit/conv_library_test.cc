// SPDX-License-Identifier: Apache-2.0
// oneDNN's convolution primitive as the conv family's library candidate
// (jit/llvm_cpu/library_onednn_conv.h, KernelParams::library = 1, "impl=onednn"): against the
// reference conv on random data across odd sizes, strides, asymmetric padding, dilations, groups
// (depthwise and grouped), 1-D and 3-D, with and without a bias; one kernel over several batch
// and spatial extents (a primitive per shape, reused); fused epilogues as post-ops (bias, ReLU,
// a residual add, ReLU6's one-element bounds, SiLU; a residual add as the sum post-op
// into the blocked output); epilogues post-ops cannot express refused and never offered; the LibraryCandidates tunable;
// a reordered weight packed once per tensor (never one in external memory); a primitive that cannot be created for a
// new shape runs the generated kernel; an execution oneDNN refuses computed by the fallback loop;
// weight-bound convs timing their plain-layout primitive against the blocked one on their first calls, stems
// timing the primitive on their input as it is.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "conv_test_util.h"
#include "jit/conv_family.h"
#include "jit/llvm_cpu/library_onednn_conv.h"
#include "jit_test_util.h"
#include "support/cpu_cores.h"
#include "support/tunables.h"

namespace shapevm::jit {
namespace {

using namespace testing;  // jit_test_util.h

const KernelParams kLibrary{.library = 1};

AttrValue ints(std::vector<std::int64_t> v) {
  return AttrValue::ofInts(std::move(v));
}

// x [N, C, spatial...], w [cout, C / groups, kernel...], and a bias when `bias`.
std::vector<Value> convInputs(const Shape& x, std::int64_t cout, std::int64_t groups, std::int64_t kernel, bool bias,
                              std::mt19937& rng, DType dtype = DType::Float32) {
  Shape w{cout, x[1] / groups};
  for (int d = 2; d < x.rank(); ++d) w.push_back(kernel);
  std::vector<Value> inputs{operand(dtype, x, rng), operand(dtype, w, rng)};
  if (bias) inputs.push_back(operand(dtype, Shape{cout}, rng));
  return inputs;
}

KernelSpec librarySpec(const std::vector<Value>& inputs, const Attrs& attrs, bool dynamic) {
  KernelSpec spec = specFor("conv", inputs, attrs);
  for (int d = 0; d < spec.inputs[0].rank && dynamic; ++d) {
    if (d != 1) spec.inputs[0].dims[d] = DimSpec{};
  }
  spec.params = kLibrary;
  return spec;
}

// A conv of the library tests: x, the weight's cout, groups and kernel side, the window attributes.
struct LibraryCase {
  Shape x;
  std::int64_t cout, groups, kernel;
  Attrs attrs;
};

// Each case in `dtype` (a bias on two of three, every other one with dynamic N and spatial dims)
// through the library candidate against the reference.
void expectLibraryMatches(const std::vector<LibraryCase>& cases, DType dtype, std::mt19937& rng) {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const LibraryCase& c = cases[i];
    Attrs attrs = c.attrs;
    attrs.push_back({"groups", AttrValue::ofInt(c.groups)});
    const std::vector<Value> inputs = convInputs(c.x, c.cout, c.groups, c.kernel, i % 3 != 2, rng, dtype);
    const KernelSpec spec = librarySpec(inputs, attrs, i % 2 == 1);
    ASSERT_TRUE(familyFor(OpId::Conv)->supports(spec).isOk())
        << "case " << i << ": " << familyFor(OpId::Conv)->supports(spec).toString();
    EXPECT_TRUE(matchesReference(spec, inputs)) << dtypeName(dtype) << " case " << i << " " << c.x.toString();
    EXPECT_NE(familyFor(OpId::Conv)->symbolStem(spec).find("_onednn"), std::string::npos);
  }
}

// A 3x3 conv with an epilogue: x, the weight's cout, the window attributes, the epilogue, and
// whether it is weight-bound (WeightBoundConvsTimeThePlainLayoutsToo).
struct EpilogueCase {
  Shape x;
  std::int64_t cout;
  Attrs attrs;
  std::vector<EpilogueStep> steps;
  bool weight_bound = false;
};

TEST(ConvLibrary, CandidatesMatchTheReference) {
  std::mt19937 rng(41);
  const std::vector<LibraryCase> cases = {
      {Shape{1, 3, 9, 11}, 5, 1, 3, {{"pads", ints({1, 1, 1, 1})}}},
      {Shape{2, 6, 13, 10}, 9, 1, 3, {{"pads", ints({2, 1, 0, 2})}, {"strides", ints({1, 2})}}},
      {Shape{1, 3, 23, 21}, 8, 1, 7, {{"strides", ints({2, 2})}, {"pads", ints({3, 3, 3, 3})}}},
      {Shape{1, 4, 12, 14}, 6, 1, 3, {{"dilations", ints({2, 3})}, {"pads", ints({2, 1, 1, 2})}}},
      {Shape{2, 16, 9, 7}, 16, 16, 3, {{"pads", ints({1, 1, 1, 1})}}},                            // depthwise
      {Shape{1, 8, 10, 9}, 12, 4, 3, {{"strides", ints({2, 1})}, {"pads", ints({1, 0, 1, 1})}}},  // grouped
      {Shape{2, 5, 17}, 7, 1, 5, {{"pads", ints({2, 1})}, {"strides", ints({2})}}},               // 1-D
      {Shape{1, 3, 5, 6, 7}, 4, 1, 3, {{"pads", ints({1, 1, 1, 1, 1, 1})}}},                      // 3-D
      {Shape{2, 12, 6, 5}, 20, 1, 1, {}},                                                         // pointwise
      {Shape{1, 64, 56, 56}, 128, 1, 1, {{"strides", ints({2, 2})}}},  // resnet's down-projection
      {Shape{8, 64, 56, 56}, 128, 1, 1, {{"strides", ints({2, 2})}}},
      {Shape{1, 5, 8, 8}, 6, 1, 3, {{"auto_pad", AttrValue::ofInt(1)}, {"strides", ints({2, 2})}}}};
  expectLibraryMatches(cases, DType::Float32, rng);
}

// One kernel over several batches and image sizes: a primitive per shape, made once and reused.
TEST(ConvLibrary, OneKernelOverSeveralSizes) {
  std::mt19937 rng(42);
  const Attrs attrs = {{"pads", ints({1, 1, 1, 1})}, {"strides", ints({2, 2})}};
  const std::vector<Value> params = convInputs(Shape{1, 8, 5, 5}, 12, 1, 3, true, rng);
  std::vector<std::vector<Value>> sets;
  for (const Shape& shape : {Shape{1, 8, 9, 11}, Shape{3, 8, 4, 4}, Shape{1, 8, 1, 1}, Shape{2, 8, 16, 7}}) {
    sets.push_back({operand(DType::Float32, shape, rng), params[1], params[2]});
  }
  const onednn_conv::ConvLibraryStats before = onednn_conv::stats();
  EXPECT_TRUE(sameKernelMatches(librarySpec(sets[0], attrs, true), sets));
  EXPECT_TRUE(sameKernelMatches(librarySpec(sets[0], attrs, true), {sets[1], sets[3]}));
  const onednn_conv::ConvLibraryStats after = onednn_conv::stats();
  EXPECT_EQ(after.primitives, before.primitives + 4) << "one per shape, the second kernel reuses them";
  EXPECT_EQ(after.calls, before.calls + 6 + 2) << "six convs, and each kernel packs its weight once";
}

TEST(ConvLibrary, EpiloguesArePostOps) {
  std::mt19937 rng(43);
  const EpilogueStep relu{OpId::Relu, -1, false}, residual{OpId::Add, 3, false};
  const Attrs pads = {{"pads", ints({1, 2, 2, 1})}};
  EXPECT_TRUE(
      epilogueMatches(convInputs(Shape{1, 5, 9, 11}, 7, 1, 3, true, rng), pads, {relu}, rng, false, {}, kLibrary));
  EXPECT_TRUE(epilogueMatches(convInputs(Shape{2, 6, 13, 10}, 9, 1, 3, true, rng),
                              {{"strides", ints({1, 2})}, {"pads", ints({1, 1, 1, 1})}}, {residual, relu}, rng, true,
                              {}, kLibrary));
  EXPECT_TRUE(epilogueMatches(convInputs(Shape{2, 7, 8, 9}, 11, 1, 1, true, rng), {}, {{OpId::Silu, -1, false}}, rng,
                              false, {}, kLibrary));
  // ReLU6 as the importer writes Clip: maximum and minimum against one-element bounds.
  const Value zero = Value::fromTensor(Tensor::zeros(DType::Float32, Shape{}).value());
  Tensor six_tensor = Tensor::zeros(DType::Float32, Shape{1, 1, 1, 1}).value();
  six_tensor.data<float>()[0] = 0.5f;
  const Value six = Value::fromTensor(six_tensor);
  EXPECT_TRUE(epilogueMatches(convInputs(Shape{1, 8, 6, 6}, 8, 1, 3, true, rng), pads,
                              {{OpId::Maximum, 3, false}, {OpId::Minimum, 4, false}}, rng, false, {zero, six},
                              kLibrary));
}

// A residual add on a conv oneDNN runs on its blocked layouts (a spatial kernel) is its sum
// post-op: the operand reordered into the blocked output, which the conv adds to (not the conv
// made on the plain layouts, oneDNN's slow im2col path): random data, odd sizes, pads at every
// border, strides, static and dynamic extents, the add before and after the activation, with the
// conv on either side; behind a multiply by a whole tensor it stays a binary post-op.
TEST(ConvLibrary, ResidualAddsAreTheSumPostOp) {
  std::mt19937 rng(51);
  const EpilogueStep relu{OpId::Relu, -1, false};
  const std::vector<EpilogueCase> cases = {
      {Shape{1, 64, 13, 11}, 64, {{"pads", ints({1, 1, 1, 1})}}, {{OpId::Add, 3, false}, relu}},
      {Shape{2, 32, 15, 9}, 48, {{"pads", ints({2, 0, 1, 2})}}, {{OpId::Add, 3, true}, relu}},
      {Shape{1, 64, 17, 14},
       128,
       {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}},
       {relu, {OpId::Add, 3, false}}},
      // 256 channels and more: input and output in channel blocks of 16 (another oneDNN kernel).
      {Shape{2, 256, 6, 9}, 256, {{"pads", ints({1, 2, 0, 1})}}, {{OpId::Add, 3, false}, relu}},
      {Shape{1, 256, 11, 8}, 512, {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}, {{OpId::Add, 3, true}}},
      {Shape{3, 16, 7, 10}, 16, {{"pads", ints({0, 2, 2, 1})}}, {{OpId::Mul, 3, false}, {OpId::Add, 4, false}}},
  };
  const std::uint64_t before = onednn_conv::stats().operand_reorders;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const EpilogueCase& c = cases[i];
    Attrs attrs = c.attrs;
    attrs.push_back({"groups", AttrValue::ofInt(1)});
    EXPECT_TRUE(
        epilogueMatches(convInputs(c.x, c.cout, 1, 3, true, rng), attrs, c.steps, rng, i % 2 == 1, {}, kLibrary))
        << "case " << i << " " << c.x.toString();
  }
  // Not the last case: oneDNN's fast kernels have no whole-tensor multiply; its add stays a binary
  // post-op. At most one more (a CPU without AVX-512: oneDNN's AVX2 kernel takes no sum behind an
  // activation, case 2) runs on the plain layouts.
  EXPECT_GE(onednn_conv::stats().operand_reorders, before + cases.size() - 2) << "residuals added by the sum post-op";
}

// Epilogues oneDNN's post-ops cannot express: refused with the reason, never offered.
TEST(ConvLibrary, InexpressibleSpecsAreRefusedAndNeverOffered) {
  std::mt19937 rng(44);
  const KernelFamily* family = familyFor(OpId::Conv);
  const std::vector<Value> inputs = convInputs(Shape{1, 4, 6, 7}, 6, 1, 3, true, rng);
  KernelSpec spec = specFor("conv", inputs);
  spec.inputs.push_back(specFor("relu", {operand(DType::Float32, Shape{1, 6, 4, 5}, rng)}).inputs[0]);
  spec.epilogue = {{OpId::Sub, 3, true}};  // x - conv: the conv on the right
  spec = sharedBackend().targetSpec(spec);
  for (const KernelParams& params : family->searchSpace(spec)) EXPECT_EQ(params.library, 0) << params.toString();
  spec.params = kLibrary;
  const Status refused = family->supports(spec);
  EXPECT_NE(refused.message().find("no oneDNN conv"), std::string::npos) << refused.toString();
  spec.epilogue = {{OpId::Sub, 3, false}, {OpId::Exp, -1, false}};
  EXPECT_NE(family->supports(spec).message().find("is no post-op"), std::string::npos);
  // x and w of different dtypes.
  const std::vector<Value> mixed = {operand(DType::BFloat16, Shape{1, 4, 6, 7}, rng),
                                    operand(DType::Float32, Shape{6, 4, 1, 1}, rng)};
  KernelSpec mixed_spec = specFor("conv", mixed);
  mixed_spec.params = kLibrary;
  EXPECT_FALSE(family->supports(mixed_spec).isOk());
}

// bfloat16 convs (and float16 ones where this oneDNN has them; 2.6 has none on CPU, and then the
// candidate is refused with that reason) through the primitive (AMX on hosts that have it),
// against the reference within the dtype's tolerance: odd sizes, pads at every border, strides,
// dilations, groups, 1x1, 1-D and 3-D, one kernel over several sizes, activation post-ops, and
// the fallback loop that computes a refused execution in the 16-bit dtype. Such a conv runs on
// the primitive at the default parameters too.
TEST(ConvLibrary, SixteenBitConvsMatchTheReference) {
  std::mt19937 rng(50);
  const KernelFamily* family = familyFor(OpId::Conv);
  const std::vector<LibraryCase> cases = {
      {Shape{1, 16, 9, 11}, 32, 1, 3, {{"pads", ints({1, 0, 2, 1})}}},
      {Shape{2, 6, 13, 10}, 9, 1, 3, {{"pads", ints({2, 1, 0, 2})}, {"strides", ints({1, 2})}}},
      {Shape{1, 3, 23, 21}, 8, 1, 7, {{"strides", ints({2, 2})}, {"pads", ints({3, 3, 3, 3})}}},  // a stem
      {Shape{1, 4, 12, 14}, 6, 1, 3, {{"dilations", ints({2, 3})}, {"pads", ints({2, 1, 1, 2})}}},
      {Shape{1, 8, 10, 9}, 12, 4, 3, {{"strides", ints({2, 1})}, {"pads", ints({1, 0, 1, 1})}}},  // grouped
      {Shape{2, 32, 7, 5}, 48, 1, 1, {}},                                                         // pointwise
      {Shape{2, 5, 17}, 7, 1, 5, {{"pads", ints({2, 1})}, {"strides", ints({2})}}},               // 1-D
      {Shape{1, 3, 5, 6, 7}, 4, 1, 3, {{"pads", ints({1, 1, 1, 1, 1, 1})}}}};                     // 3-D
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    std::vector<Value> probe = convInputs(cases[0].x, cases[0].cout, 1, 3, true, rng, dtype);
    const Status offered = family->supports(librarySpec(probe, cases[0].attrs, false));
    if (dtype == DType::Float16 && !offered.isOk()) {
      EXPECT_NE(offered.message().find("no float16 conv"), std::string::npos) << offered.toString();
      continue;
    }
    ASSERT_TRUE(offered.isOk()) << offered.toString();
    expectLibraryMatches(cases, dtype, rng);
    // At the default parameters too (the generated kernels compute no 16-bit conv with a spatial
    // kernel), untuned: no candidates.
    KernelSpec plain = librarySpec(probe, cases[0].attrs, true);
    plain.params = {};
    EXPECT_NE(family->symbolStem(plain).find("_onednn"), std::string::npos);
    EXPECT_TRUE(family->searchSpace(plain).empty());
    EXPECT_TRUE(matchesReference(plain, probe)) << dtypeName(dtype);
    // One kernel over several sizes.
    const Attrs attrs = {{"pads", ints({1, 1, 1, 1})}, {"strides", ints({2, 2})}};
    const std::vector<Value> params = convInputs(Shape{1, 8, 5, 5}, 12, 1, 3, true, rng, dtype);
    std::vector<std::vector<Value>> sets;
    for (const Shape& shape : {Shape{1, 8, 9, 11}, Shape{3, 8, 4, 4}, Shape{2, 8, 16, 7}}) {
      sets.push_back({operand(dtype, shape, rng), params[1], params[2]});
    }
    EXPECT_TRUE(sameKernelMatches(librarySpec(sets[0], attrs, true), sets)) << dtypeName(dtype);
    // Activations as post-ops.
    EXPECT_TRUE(epilogueMatches(convInputs(Shape{1, 5, 9, 11}, 7, 1, 3, true, rng, dtype),
                                {{"pads", ints({1, 2, 2, 1})}}, {{OpId::Relu, -1, false}}, rng, false, {}, kLibrary))
        << dtypeName(dtype);
    EXPECT_TRUE(epilogueMatches(convInputs(Shape{2, 7, 8, 9}, 11, 1, 1, true, rng, dtype), {},
                                {{OpId::Silu, -1, false}}, rng, true, {}, kLibrary))
        << dtypeName(dtype);
    // An execution oneDNN refuses: the fallback loop reads and writes the 16-bit dtype.
    const std::vector<Value> refused = convInputs(Shape{2, 6, 11, 9}, 4, 2, 3, true, rng, dtype);
    const onednn_conv::ConvLibraryStats before = onednn_conv::stats();
    onednn_conv::failExecutionsForTesting(true);
    const ::testing::AssertionResult fallback = matchesReference(
        librarySpec(refused, {{"pads", ints({1, 0, 2, 1})}, {"groups", AttrValue::ofInt(2)}}, false), refused);
    onednn_conv::failExecutionsForTesting(false);
    EXPECT_TRUE(fallback) << dtypeName(dtype);
    EXPECT_EQ(onednn_conv::stats().run_failures, before.run_failures + 1);
  }
}

// The candidate is offered last, after the generated ones, only with LibraryCandidates=1; a
// depthwise conv keeps its generated kernel (no candidates: not tuned).
TEST(ConvLibrary, OfferedWithLibraryCandidates) {
  std::mt19937 rng(45);
  const KernelFamily* family = familyFor(OpId::Conv);
  const std::vector<Value> dense = convInputs(Shape{1, 8, 9, 9}, 16, 1, 3, true, rng);
  const std::vector<Value> depthwise = convInputs(Shape{1, 8, 9, 9}, 8, 8, 3, true, rng);
  const KernelSpec dense_spec = sharedBackend().targetSpec(specFor("conv", dense, {{"pads", ints({1, 1, 1, 1})}}));
  const KernelSpec depthwise_spec =
      sharedBackend().targetSpec(specFor("conv", depthwise, {{"groups", AttrValue::ofInt(8)}}));
  const std::int64_t saved = Tunables::get(Tunable::LibraryCandidates);
  ASSERT_TRUE(Tunables::set(Tunable::LibraryCandidates, 1).isOk());
  const std::vector<KernelParams> space = family->searchSpace(dense_spec);
  ASSERT_GE(space.size(), 2u);
  EXPECT_EQ(space.front(), KernelParams{});
  EXPECT_EQ(space.back(), kLibrary);
  EXPECT_EQ(std::count(space.begin(), space.end(), kLibrary), 1);
  EXPECT_TRUE(family->searchSpace(depthwise_spec).empty());
  ASSERT_TRUE(Tunables::set(Tunable::LibraryCandidates, 0).isOk());
  for (const KernelParams& params : family->searchSpace(dense_spec)) EXPECT_EQ(params.library, 0);
  EXPECT_TRUE(family->searchSpace(depthwise_spec).empty());
  KernelSpec off = dense_spec;
  off.params = kLibrary;
  EXPECT_NE(family->supports(off).message().find("LibraryCandidates=0"), std::string::npos);
  ASSERT_TRUE(Tunables::set(Tunable::LibraryCandidates, saved).isOk());
}

// A weight the primitive reorders into oneDNN's layout is packed once per kernel and read from the
// packing while the same tensor comes back, over several image sizes; another weight tensor gets
// its own packing; a weight in external memory (e.g. a numpy array, which its owner may change in
// place) is reordered on every call, so a change between calls is seen.
// A conv weight is packed whatever its size: the matmul's PackedWeightMinElements floor (set above
// every weight here) does not apply (the stem's 9,408-element weight was reordered per call).
TEST(ConvLibrary, AReorderedWeightIsPackedOnceAndReused) {
  const std::int64_t min_elements = Tunables::get(Tunable::PackedWeightMinElements);
  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightMinElements, std::int64_t{1} << 40).isOk());
  std::mt19937 rng(48);
  const Attrs attrs = {{"pads", ints({1, 0, 2, 1})}, {"groups", AttrValue::ofInt(1)}};
  const std::vector<Value> params = convInputs(Shape{1, 32, 5, 5}, 64, 1, 3, true, rng);
  const std::vector<Value> other = convInputs(Shape{1, 32, 5, 5}, 64, 1, 3, true, rng);
  std::vector<std::vector<Value>> sets;
  for (const Shape& shape : {Shape{1, 32, 9, 11}, Shape{2, 32, 13, 7}, Shape{1, 32, 9, 11}, Shape{1, 32, 17, 16}}) {
    sets.push_back({operand(DType::Float32, shape, rng), params[1], params[2]});
  }
  sets.push_back({sets[0][0], other[1], other[2]});
  sets.push_back({sets[1][0], params[1], params[2]});
  const onednn_conv::ConvLibraryStats before = onednn_conv::stats();
  EXPECT_TRUE(sameKernelMatches(librarySpec(sets[0], attrs, true), sets));
  const onednn_conv::ConvLibraryStats packed = onednn_conv::stats();
  EXPECT_EQ(packed.calls, before.calls + sets.size() + 2) << "each weight tensor packed once by the kernel";
  EXPECT_LT(packed.weight_reorders, before.weight_reorders + sets.size()) << "calls read the packed weight";

  // The same weight's bytes in external memory, changed between two calls.
  const Tensor& w = params[1].tensor();
  std::vector<float> bytes(w.data<float>(), w.data<float>() + w.numel());
  Tensor wrapped = Tensor::wrap(bytes.data(), DType::Float32, w.shape(), w.strides(), bytes.size() * sizeof(float),
                                nullptr, nullptr);
  const std::vector<Value> external = {sets[0][0], Value::fromTensor(wrapped), params[2]};
  const KernelSpec spec = librarySpec(external, attrs, true);
  auto kernel = compileKernel(sharedBackend(), *familyFor(OpId::Conv), spec);
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  for (int round = 0; round < 2; ++round) {
    auto expected = referenceOutputs(spec, external);
    ASSERT_TRUE(expected.hasValue());
    std::vector<Value> actual(1);
    ASSERT_TRUE(invokeCompiled(**kernel, pointersTo(external), actual).isOk());
    const Comparison comparison = compareOutputs(*expected, actual);
    EXPECT_TRUE(comparison.ok) << "round " << round << ": " << comparison.reason;
    for (float& v : bytes) v = -2.f * v + 0.25f;  // the owner changes the weight in place
  }
  EXPECT_EQ((*kernel)->packed.stats().packs, 0u) << "external memory is never packed";
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::PackedWeightMinElements, min_elements).isOk());
}

// A call whose primitive oneDNN cannot create (a new shape after install) runs on the generated
// kernel the library kernel holds (dense and pointwise convs), not the reference kernel; a
// grouped conv, which has no generated kernel, declines the call.
TEST(ConvLibrary, APrimitiveThatCannotBeCreatedFallsBackToTheGeneratedKernel) {
  std::mt19937 rng(49);
  struct Case {
    std::int64_t cout, groups, kernel;
    Attrs attrs;
    bool generated;
  };
  const std::vector<Case> cases = {
      {12, 1, 3, {{"pads", ints({1, 0, 2, 1})}, {"strides", ints({2, 1})}}, true},  // dense
      {7, 1, 1, {}, true},                                                          // pointwise
      {12, 4, 3, {{"pads", ints({1, 1, 1, 1})}}, false}};                           // grouped
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Attrs attrs = c.attrs;
    attrs.push_back({"groups", AttrValue::ofInt(c.groups)});
    const std::vector<Value> first = convInputs(Shape{1, 8, 9, 11}, c.cout, c.groups, c.kernel, true, rng);
    const std::vector<Value> later = {operand(DType::Float32, Shape{2, 8, 13, 6}, rng), first[1], first[2]};
    const KernelSpec spec = librarySpec(first, attrs, true);
    auto kernel = compileKernel(sharedBackend(), *familyFor(OpId::Conv), spec);
    ASSERT_TRUE(kernel.hasValue()) << "case " << i << ": " << kernel.status().toString();
    const onednn_conv::ConvLibraryStats before = onednn_conv::stats();
    for (int call = 0; call < 2; ++call) {
      const std::vector<Value>& inputs = call == 0 ? first : later;
      onednn_conv::failCreationsForTesting(call == 1);
      std::vector<Value> actual(1);
      const Status run = invokeCompiled(**kernel, pointersTo(inputs), actual);
      onednn_conv::failCreationsForTesting(false);
      if (call == 1 && !c.generated) {
        EXPECT_FALSE(run.isOk()) << "case " << i << ": no generated kernel, the call declines";
        continue;
      }
      ASSERT_TRUE(run.isOk()) << "case " << i << " call " << call << ": " << run.toString();
      auto expected = referenceOutputs(spec, inputs);
      ASSERT_TRUE(expected.hasValue());
      const Comparison comparison = compareOutputs(*expected, actual);
      EXPECT_TRUE(comparison.ok) << "case " << i << " call " << call << ": " << comparison.reason;
    }
    EXPECT_EQ(onednn_conv::stats().calls, before.calls + 1 + (*kernel)->packed.stats().packs)
        << "case " << i << ": only the first call ran oneDNN (and the packing of its weight)";
    EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  }
}

TEST(ConvLibrary, AnExecutionOneDnnRefusesIsComputedByTheFallback) {
  std::mt19937 rng(46);
  const Attrs attrs = {{"pads", ints({1, 0, 2, 1})},
                       {"strides", ints({2, 1})},
                       {"dilations", ints({1, 2})},
                       {"groups", AttrValue::ofInt(2)}};
  const std::vector<Value> inputs = convInputs(Shape{2, 6, 11, 9}, 4, 2, 3, true, rng);
  const onednn_conv::ConvLibraryStats before = onednn_conv::stats();
  onednn_conv::failExecutionsForTesting(true);
  const ::testing::AssertionResult result = matchesReference(librarySpec(inputs, attrs, false), inputs);
  std::mt19937 epilogue_rng(47);
  const ::testing::AssertionResult with_epilogue =
      epilogueMatches(convInputs(Shape{1, 5, 7, 6}, 3, 1, 3, true, epilogue_rng), {{"pads", ints({1, 1, 1, 1})}},
                      {{OpId::Add, 3, false}, {OpId::Relu, -1, false}}, epilogue_rng, false, {}, kLibrary);
  onednn_conv::failExecutionsForTesting(false);
  EXPECT_TRUE(result);
  EXPECT_TRUE(with_epilogue);
  const onednn_conv::ConvLibraryStats after = onednn_conv::stats();
  EXPECT_EQ(after.run_failures, before.run_failures + 2);
  // The residual conv runs on the blocked layouts (the add is the sum post-op): its weight is packed once.
  EXPECT_EQ(after.calls, before.calls + 3);
}

// A weight-bound conv (its weight at least its input and output: resnet18's last stages at small
// images) also makes its primitive on the plain layouts; its first calls alternate between the two
// and the faster runs the rest. Every call matches the reference whichever ran it (epilogues as
// post-ops on either side, the weight packed for the blocked side or not). A residual add the
// blocked side takes as the sum post-op does not race (the plain layouts' binary add is slow), nor
// does a conv that is not weight-bound.
TEST(ConvLibrary, WeightBoundConvsTimeThePlainLayoutsToo) {
  std::mt19937 rng(52);
  const EpilogueStep relu{OpId::Relu, -1, false};
  const std::vector<EpilogueCase> cases = {
      {Shape{1, 64, 3, 5}, 96, {{"pads", ints({1, 2, 0, 1})}}, {}, true},
      // Channel blocks of 16 (256 channels and more).
      {Shape{1, 256, 3, 4}, 256, {{"pads", ints({1, 1, 1, 1})}}, {relu}, true},
      // Behind a whole-tensor multiply the add stays a binary post-op on both sides.
      {Shape{1, 32, 4, 6}, 48, {{"pads", ints({0, 1, 2, 1})}}, {{OpId::Mul, 3, false}, {OpId::Add, 4, true}}, true},
      // A residual add: the sum post-op on the blocked side (AVX-512), so no race there.
      {Shape{1, 256, 5, 7},
       272,
       {{"strides", ints({2, 2})}, {"pads", ints({0, 1, 1, 2})}},
       {relu, {OpId::Add, 3, true}},
       true},
      {Shape{1, 8, 17, 15}, 8, {{"pads", ints({1, 1, 1, 1})}}, {{OpId::Add, 3, false}}, false},
  };
  constexpr int kCalls = 7;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const EpilogueCase& c = cases[i];
    Attrs attrs = c.attrs;
    attrs.push_back({"groups", AttrValue::ofInt(1)});
    const std::vector<Value> params = convInputs(c.x, c.cout, 1, 3, true, rng);
    KernelSpec spec = librarySpec(params, attrs, i % 2 == 1);
    spec.epilogue = c.steps;
    const onednn_conv::ConvLibraryStats before = onednn_conv::stats();
    std::unique_ptr<CompiledKernel> kernel;
    for (int call = 0; call < kCalls; ++call) {
      std::vector<Value> inputs = {operand(DType::Float32, c.x, rng), params[1], params[2]};
      auto expected = referenceOutputs(specFor("conv", inputs, attrs), inputs);
      ASSERT_TRUE(expected.hasValue()) << expected.status().toString();
      for (const EpilogueStep& step : c.steps) {
        const std::string_view op = OpRegistry::global().schema(step.op).name;
        if (step.operand >= 0) {
          inputs.push_back(operand(DType::Float32, (*expected)[0].tensor().shape(), rng));
          if (call == 0) {
            OperandSpec residual = specFor("relu", {inputs.back()}).inputs[0];
            for (int d = 0; d < residual.rank && i % 2 == 1; ++d) {
              if (d != 1) residual.dims[d] = DimSpec{};
            }
            spec.inputs.push_back(residual);
          }
          expected = callOp(op,
                            step.swapped ? std::vector<Value>{inputs.back(), (*expected)[0]}
                                         : std::vector<Value>{(*expected)[0], inputs.back()},
                            {});
        } else {
          expected = callOp(op, {(*expected)[0]}, {});
        }
        ASSERT_TRUE(expected.hasValue()) << expected.status().toString();
      }
      if (call == 0) {
        auto compiled = compileKernel(sharedBackend(), *familyFor(OpId::Conv), spec);
        ASSERT_TRUE(compiled.hasValue()) << "case " << i << ": " << compiled.status().toString();
        kernel = std::move(*compiled);
      }
      std::vector<Value> actual(1);
      const Status run = invokeCompiled(*kernel, pointersTo(inputs), actual);
      ASSERT_TRUE(run.isOk()) << "case " << i << " call " << call << ": " << run.toString();
      const Comparison comparison = compareOutputs(*expected, actual);
      EXPECT_TRUE(comparison.ok) << "case " << i << " call " << call << ": " << comparison.reason;
    }
    const onednn_conv::ConvLibraryStats after = onednn_conv::stats();
    const bool summed = after.operand_reorders > before.operand_reorders;
    EXPECT_EQ(after.races, before.races + (c.weight_bound && !summed ? 1 : 0))
        << "case " << i << " " << c.x.toString() << (summed ? " (sum post-op)" : "");
    if (i < 3) {
      EXPECT_FALSE(summed) << "case " << i;
    }
    EXPECT_EQ(after.run_failures, before.run_failures) << "case " << i;
    EXPECT_TRUE(sharedBackend().free(kernel->handle).isOk());
  }
}

// A stem (few input channels, a small weight) also makes the primitive that reads its input as it
// is and writes 16-channel blocks (jit:avx512_core's first-conv kernel) beside oneDNN's pick
// (brgconv on channels last there), and its first calls take turns on the two: every call
// matches the reference whichever primitive ran it (the ReLU post-op on both), one race per
// problem on an AVX-512 host (where oneDNN has that kernel), and its winner is counted as such
// (input_as_is_picks) or not. A stem whose output channels are not a multiple of 16 does not race.
TEST(ConvLibrary, StemsTimeTheirInputAsIsToo) {
  std::mt19937 rng(53);
  const EpilogueStep relu{OpId::Relu, -1, false};
  struct StemCase {
    Shape x;
    std::int64_t cout, kernel;
    Attrs attrs;
    std::vector<EpilogueStep> steps;
    bool races;
  };
  const std::vector<StemCase> cases = {
      {Shape{1, 3, 37, 41}, 64, 7, {{"strides", ints({2, 2})}, {"pads", ints({3, 3, 3, 3})}}, {relu}, true},
      {Shape{2, 3, 23, 19}, 32, 7, {{"strides", ints({2, 2})}, {"pads", ints({3, 2, 1, 3})}}, {}, true},
      {Shape{1, 1, 17, 15}, 16, 3, {{"pads", ints({1, 1, 1, 1})}}, {relu}, true},
      {Shape{2, 4, 13, 12}, 48, 5, {{"dilations", ints({2, 1})}, {"pads", ints({2, 0, 3, 1})}}, {}, true},
      {Shape{1, 3, 19, 21}, 24, 3, {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}, {}, false},
  };
  constexpr int kCalls = 6;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const StemCase& c = cases[i];
    Attrs attrs = c.attrs;
    attrs.push_back({"groups", AttrValue::ofInt(1)});
    const std::vector<Value> params = convInputs(c.x, c.cout, 1, c.kernel, true, rng);
    KernelSpec spec = librarySpec(params, attrs, i % 2 == 1);
    spec.epilogue = c.steps;
    const onednn_conv::ConvLibraryStats before = onednn_conv::stats();
    auto compiled = compileKernel(sharedBackend(), *familyFor(OpId::Conv), spec);
    ASSERT_TRUE(compiled.hasValue()) << "case " << i << ": " << compiled.status().toString();
    for (int call = 0; call < kCalls; ++call) {
      const std::vector<Value> inputs = {operand(DType::Float32, c.x, rng), params[1], params[2]};
      auto expected = referenceOutputs(specFor("conv", inputs, attrs), inputs);
      ASSERT_TRUE(expected.hasValue()) << expected.status().toString();
      if (!c.steps.empty()) expected = callOp("relu", {(*expected)[0]}, {});
      ASSERT_TRUE(expected.hasValue()) << expected.status().toString();
      std::vector<Value> actual(1);
      const Status run = invokeCompiled(**compiled, pointersTo(inputs), actual);
      ASSERT_TRUE(run.isOk()) << "case " << i << " call " << call << ": " << run.toString();
      const Comparison comparison = compareOutputs(*expected, actual);
      EXPECT_TRUE(comparison.ok) << "case " << i << " call " << call << ": " << comparison.reason;
    }
    const onednn_conv::ConvLibraryStats after = onednn_conv::stats();
    const std::uint64_t races = after.races - before.races;
    const std::uint64_t picks = after.input_as_is_picks - before.input_as_is_picks;
    if (avx512) {
      EXPECT_EQ(races, c.races ? 1U : 0U) << "case " << i << " " << c.x.toString();
    }
    EXPECT_LE(picks, races) << "case " << i;
    EXPECT_EQ(after.plain_picks, before.plain_picks) << "case " << i;
    EXPECT_EQ(after.run_failures, before.run_failures) << "case " << i;
    std::printf("case %zu %s: %s\n", i, c.x.toString().c_str(),
                races == 0   ? "no race"
                : picks == 1 ? "the input as it is won"
                             : "oneDNN's pick won");
    EXPECT_TRUE(sharedBackend().free((*compiled)->handle).isOk());
  }
}

// A call on one task (validation's: KernelThreadsOnThisThread(1)) of a conv whose primitive
// reorders its tensors into blocked layouts runs the conv and those reorders on that task: they
// are made for the problem's task count, not for the OpenMP default, so the calling thread starts
// no OpenMP team (whose spinning barrier a busy host makes it wait on). Counted as the process's
// threads on a fresh thread (no team of its own yet) around the first calls (the weight's
// packing, the race of a weight-bound conv's two primitives, the winner); every output against
// the reference. (Made for two threads and run on one, this asymmetrically padded conv's outputs
// were wrong at a few border elements from its third call on, on both primitives.)
TEST(ConvLibrary, AOneTaskCallReordersWithoutStartingAnOpenMpTeam) {
  const auto omp_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  if (omp_threads == nullptr) GTEST_SKIP() << "no OpenMP in this process (no oneDNN)";
  if (omp_threads() < 2) GTEST_SKIP() << "OpenMP runs one thread here: no team to start";
  std::mt19937 rng(57);
  // Sizes no other test uses: the primitives and their reorders are new to the process-wide cache.
  const std::int64_t cin = 48 + 16 * static_cast<std::int64_t>(rng() % 2);
  const Attrs attrs = {{"pads", ints({1, 1, 0, 1})}, {"groups", AttrValue::ofInt(1)}};
  const std::vector<Value> inputs = convInputs(Shape{1, cin, 13, 15}, 80, 1, 3, true, rng);
  const KernelSpec spec = librarySpec(inputs, attrs, false);
  auto kernel = compileKernel(sharedBackend(), *familyFor(OpId::Conv), spec);
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  const auto process_threads = [] {
    std::size_t count = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) count += entry.exists() ? 1 : 0;
    return count;
  };
  const onednn_conv::ConvLibraryStats before = onednn_conv::stats();
  std::size_t threads_before = 0, threads_after = 0;
  std::thread caller([&] {
    const KernelThreadsOnThisThread one(1);
    threads_before = process_threads();
    for (int call = 0; call < 6; ++call) {
      auto expected = referenceOutputs(spec, inputs);
      ASSERT_TRUE(expected.hasValue());
      std::vector<Value> actual(1);
      ASSERT_TRUE(invokeCompiled(**kernel, pointersTo(inputs), actual).isOk());
      const Comparison comparison = compareOutputs(*expected, actual);
      EXPECT_TRUE(comparison.ok) << "call " << call << ": " << comparison.reason;
    }
    threads_after = process_threads();
  });
  caller.join();
  const onednn_conv::ConvLibraryStats after = onednn_conv::stats();
  EXPECT_GT(after.primitives, before.primitives) << "the call made its primitive";
  EXPECT_EQ(after.run_failures, before.run_failures);
  EXPECT_EQ(threads_after, threads_before) << "a one-task call started OpenMP threads";
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

}  // namespace
}  // namespace shapevm::jit
