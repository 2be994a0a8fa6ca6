// SPDX-License-Identifier: Apache-2.0
// Kernel validation at clipped shapes with sampled references (validate.h): the shape sets stay
// inside the guard and keep the remainders of the observed size and the range's high end, and
// every class of injected fault (first row, last row/tile, one middle row, every row) is caught
// on every seed. Outputs are poisoned afresh on every validation, so a kernel that leaves elements
// unwritten is caught even where the memory held right values from an earlier, correct run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "jit/clip_period.h"
#include "jit/validate.h"
#include "jit_test_util.h"
#include "support/thread_pool.h"
#include "support/tunables.h"

namespace shapevm::jit {
namespace {

using testing::operand;
using testing::sharedBackend;
using testing::specFor;

constexpr std::int64_t kPeriod = 192;  // validate.cc's clip period (matmul tiles 4/6/8 divide it)

// A [m_lo..m_hi, k] x [k, n] matmul spec: rows dynamic, K and N static.
KernelSpec rowRangedMatmul(std::int64_t m, std::int64_t k, std::int64_t n, std::int64_t m_lo, std::int64_t m_hi) {
  std::mt19937 rng(3);
  KernelSpec spec =
      specFor("matmul", {operand(DType::Float32, Shape{m, k}, rng), operand(DType::Float32, Shape{k, n}, rng)});
  DimSpec& rows = spec.inputs[0].dims[0];
  rows.size = -1;
  rows.lo = m_lo;
  rows.hi = m_hi;
  return spec;
}

TEST(ValidationShapes, LargeRowRangesRunClippedWithTheirRemainders) {
  // The LSTM's flattened input projection: rows 256..1024, observed 960.
  const KernelSpec spec = rowRangedMatmul(960, 128, 1024, 256, 1024);
  const std::vector<Shape> observed = {Shape{960, 128}, Shape{128, 1024}};
  const auto sets = validationShapes(spec, observed);
  ASSERT_FALSE(sets.empty());
  bool low_end = false, high_residue = false;
  for (const auto& shapes : sets) {
    ASSERT_EQ(shapes.size(), 2u);
    const std::int64_t m = shapes[0][0];
    EXPECT_GE(m, 256) << "inside the guard";
    EXPECT_LT(m, 256 + kPeriod) << "clipped";
    EXPECT_EQ(shapes[0][1], 128);
    EXPECT_EQ(shapes[1], (Shape{128, 1024})) << "static dims never move";
    low_end = low_end || m == 256;
    high_residue = high_residue || m % kPeriod == 1024 % kPeriod;
  }
  EXPECT_EQ(sets[0][0][0] % kPeriod, 960 % kPeriod) << "the observed size's remainder";
  EXPECT_TRUE(low_end);
  EXPECT_TRUE(high_residue) << "the high end's remainder";
}

TEST(ValidationShapes, SmallSizesDivisorsAndUnboundedDims) {
  // Below the clip floor nothing moves: the observed size and both range ends, exactly.
  KernelSpec small = rowRangedMatmul(100, 32, 48, 16, 150);
  auto sets = validationShapes(small, std::vector<Shape>{Shape{100, 32}, Shape{32, 48}});
  std::vector<std::int64_t> rows;
  for (const auto& shapes : sets) rows.push_back(shapes[0][0]);
  EXPECT_EQ(rows, (std::vector<std::int64_t>{100, 16, 150}));

  // A divisor: every size a multiple of it, the period a multiple of it too.
  KernelSpec divided = rowRangedMatmul(4000, 32, 48, 0, 8000);
  divided.inputs[0].dims[0].divisor = 5;
  sets = validationShapes(divided, std::vector<Shape>{Shape{4000, 32}, Shape{32, 48}});
  for (const auto& shapes : sets) {
    EXPECT_EQ(shapes[0][0] % 5, 0) << shapes[0].toString();
    EXPECT_LE(shapes[0][0], 960 + 960) << shapes[0].toString();
  }
  EXPECT_EQ(sets[0][0][0] % 960, 4000 % 960);

  // A dynamic K whose extent B's static K also has is the same quantity: it is not clipped.
  KernelSpec tied = rowRangedMatmul(64, 600, 48, 16, 150);
  tied.inputs[0].dims[1] = DimSpec{{1, 4096, 1}, -1};
  sets = validationShapes(tied, std::vector<Shape>{Shape{64, 600}, Shape{600, 48}});
  ASSERT_FALSE(sets.empty());
  EXPECT_EQ(sets[0][0], (Shape{64, 600}));

  // Unbounded: clipped, no range ends.
  KernelSpec open = rowRangedMatmul(1000, 32, 48, 1, DimRange::kUnbounded);
  sets = validationShapes(open, std::vector<Shape>{Shape{1000, 32}, Shape{32, 48}});
  ASSERT_EQ(sets.size(), 1u);
  EXPECT_EQ(sets[0][0][0], 1000 - 4 * kPeriod);
}

TEST(ValidationShapes, ClippingNeverMergesTwoDynamicDims) {
  // M 320 and N 512 both dynamic: N's 512 would clip to 320, M's extent; it keeps its own, and
  // each range-end move moves one dim only.
  std::mt19937 rng(4);
  KernelSpec spec =
      specFor("matmul", {operand(DType::Float32, Shape{320, 64}, rng), operand(DType::Float32, Shape{64, 512}, rng)});
  spec.inputs[0].dims[0] = DimSpec{{256, 400, 1}, -1};
  spec.inputs[1].dims[1] = DimSpec{{1, 600, 1}, -1};
  const auto sets = validationShapes(spec, std::vector<Shape>{Shape{320, 64}, Shape{64, 512}});
  ASSERT_FALSE(sets.empty());
  EXPECT_EQ(sets[0][1][1], 512);
  for (const auto& shapes : sets) {
    EXPECT_GE(shapes[0][0], 256);
    EXPECT_LE(shapes[0][0], 400);
    EXPECT_LE(shapes[1][1], 600);
    EXPECT_TRUE(shapes[0][0] == 320 || shapes[1][1] == 512) << "one dim moved at a time";
  }
}

TEST(ValidationShapes, ElementwiseMiddleAxesClipToTheirFamilysPeriod) {
  // The LSTM's Add:(32,8..32,1024)x(32,1,1024): seq is a middle axis with 1024 static elements
  // after it, so every extent takes the same paths (period 1). The observed 20 and the high end 32
  // run at 9 (above the low end: two extents), the low end at 8 exactly.
  std::mt19937 rng(8);
  std::vector<Value> inputs = {operand(DType::Float32, Shape{32, 20, 1024}, rng),
                               operand(DType::Float32, Shape{32, 1, 1024}, rng)};
  KernelSpec add = specFor("add", inputs);
  add.inputs[0].dims[1] = DimSpec{{8, 32, 1}, -1};
  EXPECT_EQ(clipPeriodOf(*familyFor(add.op), add, 0, 1), 1);
  EXPECT_EQ(clipPeriodOf(*familyFor(add.op), add, 0, 0), kDefaultClipPeriod) << "static, but axis 0 keeps the default";
  auto sets = validationShapes(add, std::vector<Shape>{Shape{32, 20, 1024}, Shape{32, 1, 1024}});
  ASSERT_EQ(sets.size(), 2u);
  EXPECT_EQ(sets[0][0], (Shape{32, 9, 1024}));
  EXPECT_EQ(sets[1][0], (Shape{32, 8, 1024}));
  for (const auto& shapes : sets) EXPECT_EQ(shapes[1], (Shape{32, 1, 1024})) << "static dims never move";

  // 100 elements after the axis: the flat loop's remainder modulo 256 repeats every 64 rows.
  inputs = {operand(DType::Float32, Shape{4, 250, 100}, rng)};
  KernelSpec tanh = specFor("tanh", inputs);
  tanh.inputs[0].dims[1] = DimSpec{{2, 300, 1}, -1};
  EXPECT_EQ(clipPeriodOf(*familyFor(tanh.op), tanh, 0, 1), 64);
  sets = validationShapes(tanh, std::vector<Shape>{Shape{4, 250, 100}});
  std::vector<std::int64_t> extents;
  for (const auto& shapes : sets) extents.push_back(shapes[0][1]);
  EXPECT_EQ(extents, (std::vector<std::int64_t>{64 + (250 - 64) % 64, 2, 64 + (300 - 64) % 64}));

  // A dynamic axis after it, or the dim on axis 0 (the rows split across tasks) or the last axis
  // (the vectorized one): the default period.
  tanh.inputs[0].dims[2] = DimSpec{{1, 4096, 1}, -1};
  EXPECT_EQ(clipPeriodOf(*familyFor(tanh.op), tanh, 0, 1), kDefaultClipPeriod);
  EXPECT_EQ(clipPeriodOf(*familyFor(tanh.op), tanh, 0, 2), kDefaultClipPeriod);
  EXPECT_EQ(clipPeriodOf(*familyFor(tanh.op), tanh, 0, 0), kDefaultClipPeriod);
  // Other families keep the default.
  const KernelSpec mm = rowRangedMatmul(960, 128, 1024, 256, 1024);
  EXPECT_EQ(clipPeriodOf(*familyFor(mm.op), mm, 0, 0), kDefaultClipPeriod);
}

// `kernel` corrupted at output row `row` is rejected on every seed; returns how many rejections
// named the random projection (the only check that sees every row of a sampled matmul).
int rejectedOnEverySeed(CompiledKernel& kernel, const KernelSpec& spec, const std::vector<Shape>& observed,
                        std::int64_t row) {
  kernel.corrupt_outputs = true;
  kernel.corrupt_row = row;
  int by_projection = 0;
  for (std::uint64_t seed = 0; seed < 10; ++seed) {
    const Status verdict = validateKernel(kernel, validationShapes(spec, observed), seed);
    EXPECT_FALSE(verdict.isOk()) << "row " << row << " seed " << seed;
    by_projection += verdict.message().find("projection") != std::string::npos ? 1 : 0;
  }
  kernel.corrupt_outputs = false;
  return by_projection;
}

TEST(ValidationFaults, EveryFaultClassIsCaughtOnClippedShapes) {
  // A matmul whose clipped output (216 x 512) is sampled: rows first, last, one in the middle
  // that a sample of 10 rows rarely holds.
  const KernelSpec mm = rowRangedMatmul(600, 64, 512, 16, 2048);
  const std::vector<Shape> mm_observed = {Shape{600, 64}, Shape{64, 512}};
  auto kernel = compileKernel(sharedBackend(), *familyFor(mm.op), mm);
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  ASSERT_TRUE(validateKernel(**kernel, validationShapes(mm, mm_observed), 1).isOk());
  rejectedOnEverySeed(**kernel, mm, mm_observed, 0);
  rejectedOnEverySeed(**kernel, mm, mm_observed, -1);  // the last row: the last register tile
  EXPECT_GT(rejectedOnEverySeed(**kernel, mm, mm_observed, 100), 0) << "a sampled-out row needs the projection";
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());

  // Elementwise (broadcast add, tanh), rows 16..4096 observed at 700 (clipped to 316): sampled
  // rows always hold the first and the last row. A single wrong middle row is caught for sure
  // where the output is compared whole (2^14 elements or fewer); above, only when sampled.
  for (const char* op : {"add", "tanh"}) {
    std::mt19937 rng(5);
    std::vector<Value> inputs = {operand(DType::Float32, Shape{700, 96}, rng)};
    if (std::string_view(op) == "add") inputs.push_back(operand(DType::Float32, Shape{96}, rng));
    KernelSpec spec = specFor(op, inputs, {}, testing::Dims::Symbolic);
    spec.inputs[0].dims[0].lo = 16;
    spec.inputs[0].dims[0].hi = 4096;
    auto ew = compileKernel(sharedBackend(), *familyFor(spec.op), spec);
    ASSERT_TRUE(ew.hasValue()) << ew.status().toString();
    std::vector<Shape> observed;
    for (const Value& v : inputs) observed.push_back(v.tensor().shape());
    ASSERT_TRUE(validateKernel(**ew, validationShapes(spec, observed), 1).isOk()) << op;
    for (std::int64_t row : {std::int64_t{0}, std::int64_t{-1}}) rejectedOnEverySeed(**ew, spec, observed, row);
    std::vector<Shape> narrow = observed;
    narrow[0] = Shape{150, 96};  // 150 x 96 = 14400 elements: compared whole
    rejectedOnEverySeed(**ew, spec, narrow, 101);
    EXPECT_TRUE(sharedBackend().free((*ew)->handle).isOk());
  }
}

TEST(ValidationPoison, EveryFloatingDtypeIsPoisonedAndEveryNaNIsFound) {
  // Outputs start as NaN in every element (one memset of all-ones bits); the scan for an element
  // the kernel left unwritten finds any NaN, at any place (block borders, the last element), and
  // never an infinity or a finite value.
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    auto poisoned = poisonedTensor(dtype, Shape{3, 517});
    ASSERT_TRUE(poisoned.hasValue());
    for (std::int64_t k = 0; k < poisoned->numel(); ++k) ASSERT_TRUE(std::isnan(poisoned->elementAsDouble(k))) << k;
    EXPECT_EQ(firstPoisoned(*poisoned), 0) << dtypeName(dtype);
  }
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  const std::int64_t n = 5000;
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
    auto t = Tensor::empty(dtype, Shape{n});
    ASSERT_TRUE(t.hasValue());
    for (std::int64_t k = 0; k < n; ++k) storeFromDouble(t->rawData(), dtype, k, normal(rng));
    storeFromDouble(t->rawData(), dtype, 7, std::numeric_limits<double>::infinity());
    storeFromDouble(t->rawData(), dtype, 2047, -std::numeric_limits<double>::infinity());
    EXPECT_EQ(firstPoisoned(*t), -1) << dtypeName(dtype);
    for (std::int64_t at : {std::int64_t{0}, std::int64_t{1023}, std::int64_t{1024}, std::int64_t{3333}, n - 1}) {
      const double before = t->elementAsDouble(at);
      storeFromDouble(t->rawData(), dtype, at, std::numeric_limits<double>::quiet_NaN());
      EXPECT_EQ(firstPoisoned(*t), at) << dtypeName(dtype);
      storeFromDouble(t->rawData(), dtype, at, before);
    }
  }
  // float32 NaNs of every sign, quiet or signaling, any payload; the first of two is found.
  auto t = Tensor::empty(DType::Float32, Shape{n});
  ASSERT_TRUE(t.hasValue());
  for (std::int64_t k = 0; k < n; ++k) t->data<float>()[k] = static_cast<float>(normal(rng));
  for (std::uint32_t bits : {0x7FC00000u, 0xFFFFFFFFu, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const std::int64_t at = static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(n - 1));
    float nan;
    std::memcpy(&nan, &bits, sizeof(nan));
    const float before = t->data<float>()[at], after = t->data<float>()[at + 1];
    t->data<float>()[at] = nan;
    t->data<float>()[at + 1] = nan;
    EXPECT_EQ(firstPoisoned(*t), at) << std::hex << bits;
    t->data<float>()[at] = before;
    EXPECT_EQ(firstPoisoned(*t), at + 1) << std::hex << bits;
    t->data<float>()[at + 1] = after;
  }
  EXPECT_EQ(firstPoisoned(*t), -1);
}

TEST(ValidationFaults, RankThreeElementwiseIsSampledByLinesAndStillCaught) {
  // The LSTM's Add:(32,8..32,1024)x(32,1,1024): 32 axis-0 rows of up to 32K elements each, so it
  // is sampled by lines along the last axis. The first and the last row are caught on every seed
  // at the observed size and at the range's ends; a correct kernel passes.
  std::mt19937 rng(7);
  const std::vector<Value> inputs = {operand(DType::Float32, Shape{32, 20, 1024}, rng),
                                     operand(DType::Float32, Shape{32, 1, 1024}, rng)};
  KernelSpec spec = specFor("add", inputs);
  DimSpec& seq = spec.inputs[0].dims[1];
  seq.size = -1;
  seq.lo = 8;
  seq.hi = 32;
  auto kernel = compileKernel(sharedBackend(), *familyFor(spec.op), spec);
  ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
  const std::vector<Shape> observed = {Shape{32, 20, 1024}, Shape{32, 1, 1024}};
  ASSERT_GE(validationShapes(spec, observed).size(), 2u) << "the low end and one more extent";
  ASSERT_TRUE(validateKernel(**kernel, validationShapes(spec, observed), 1).isOk());
  for (std::int64_t row : {std::int64_t{0}, std::int64_t{-1}}) rejectedOnEverySeed(**kernel, spec, observed, row);
  (*kernel)->corrupt_outputs = true;
  (*kernel)->corrupt_row = -1;
  const Status verdict = validateKernel(**kernel, validationShapes(spec, observed), 3);
  EXPECT_NE(verdict.message().find("sampled lines"), std::string::npos) << verdict.message();
  (*kernel)->corrupt_outputs = false;
  EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
}

// A family that runs `inner`'s kernel on every row but the last (as if its loop bound were one
// short): the last row of every output is never written.
class SkipsLastRowFamily final : public KernelFamily {
 public:
  explicit SkipsLastRowFamily(const KernelFamily& inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }
  Status supports(const KernelSpec& spec) const override { return inner_.supports(spec); }
  Status outputs(const KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                 std::span<Shape> shapes) const override {
    return inner_.outputs(spec, inputs, dtypes, shapes);
  }
  std::unique_ptr<const LaunchPlan> launchPlan(const KernelSpec& spec) const override {
    return inner_.launchPlan(spec);
  }
  Status plannedOutputs(const KernelSpec& spec, const LaunchPlan* plan, std::span<const Value* const> inputs,
                        std::span<DType> dtypes, std::span<Shape> shapes) const override {
    return inner_.plannedOutputs(spec, plan, inputs, dtypes, shapes);
  }
  Status plannedPrepare(const KernelSpec& spec, const LaunchPlan* plan, std::span<const Value* const> inputs,
                        std::span<const Tensor> outputs, KernelArgs& args) const override {
    // The inner family prepares the call for every operand one row short (views of the first
    // rows), so its kernel computes and stores all but the last row.
    if (outputs.empty() || outputs[0].rank() == 0 || outputs[0].dim(0) < 2)
      return makeError(ErrorCode::Internal, "the test needs an output of two rows or more");
    const std::int64_t rows = outputs[0].dim(0);
    std::vector<Value> short_inputs(inputs.size());
    std::vector<const Value*> short_pointers(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      short_pointers[i] = inputs[i];
      if (inputs[i] == nullptr || !inputs[i]->isTensor() || inputs[i]->tensor().rank() == 0 ||
          inputs[i]->tensor().dim(0) != rows)
        continue;
      SVM_ASSIGN_OR_RETURN(Tensor view, oneRowShort(inputs[i]->tensor()));
      short_inputs[i] = Value::fromTensor(std::move(view));
      short_pointers[i] = &short_inputs[i];
    }
    std::vector<Tensor> short_outputs;
    for (const Tensor& out : outputs) {
      SVM_ASSIGN_OR_RETURN(Tensor view, oneRowShort(out));
      short_outputs.push_back(std::move(view));
    }
    SVM_RETURN_IF_ERROR(inner_.plannedPrepare(spec, plan, short_pointers, short_outputs, args));
    const std::size_t item[kMaxKernelOperands] = {};  // begin 0: no data pointer moves
    inner_.KernelFamily::narrowRows(spec, args, item, inputs.size(), outputs.size(), 0, rows - 1);
    return Status::ok();
  }
  Status reference(const KernelSpec& spec, std::span<const Value* const> inputs,
                   std::span<Value> outputs) const override {
    return inner_.reference(spec, inputs, outputs);
  }
  bool splitsAlongAxis0() const override { return inner_.splitsAlongAxis0(); }
  std::int64_t rowCount(const KernelSpec& spec, const KernelArgs& args, std::size_t inputs,
                        std::size_t outputs) const override {
    return inner_.rowCount(spec, args, inputs, outputs);
  }
  void narrowRows(const KernelSpec& spec, KernelArgs& args, const std::size_t* item, std::size_t inputs,
                  std::size_t outputs, std::int64_t begin, std::int64_t end) const override {
    inner_.narrowRows(spec, args, item, inputs, outputs, begin, end);
  }

 private:
  static Expected<Tensor> oneRowShort(const Tensor& t) {
    Shape shape = t.shape();
    shape[0] -= 1;
    return t.asStrided(shape, t.strides(), t.offset());
  }
  const KernelFamily& inner_;
};

TEST(ValidationFaults, AnUnwrittenRowIsCaughtAfterACorrectRunOnTheSameInputs) {
  // tanh over [40, 1000] (outputs sampled by rows above 2^14 elements) and over [12, 1000]
  // (compared whole), rows dynamic. A correct validation on a seed first computes the right values
  // for that seed's inputs (the allocator may hand the same memory out again); the same kernel then
  // leaving its last row unwritten, validated on the same seed (the same inputs), is rejected: the
  // poison written into every output tells the unwritten row from a right one. Run on the test's
  // thread and on a lowered (compile) thread, whose buffers come from the allocator's scratch area:
  // there the second validation's outputs reuse the first one's pages (no release in between).
  const auto check = [](std::int64_t rows) {
    std::mt19937 rng(23);
    const std::vector<Value> inputs = {operand(DType::Float32, Shape{rows, 1000}, rng)};
    KernelSpec spec = specFor("tanh", inputs);
    spec.inputs[0].dims[0] = DimSpec{{2, 4096, 1}, -1};  // rows dynamic, 1000 columns static
    auto kernel = compileKernel(sharedBackend(), *familyFor(spec.op), spec);
    ASSERT_TRUE(kernel.hasValue()) << kernel.status().toString();
    const std::vector<Shape> observed = {Shape{rows, 1000}};
    const KernelFamily* own = (*kernel)->family;
    const SkipsLastRowFamily skipping(*own);
    (*kernel)->layout_only_args = false;  // every call through prepare()
    for (std::uint64_t seed = 0; seed < 4; ++seed) {
      (*kernel)->family = own;
      (*kernel)->args_cache.valid = false;
      ASSERT_TRUE(validateKernel(**kernel, validationShapes(spec, observed), seed).isOk());
      (*kernel)->family = &skipping;
      (*kernel)->args_cache.valid = false;
      const Status verdict = validateKernel(**kernel, validationShapes(spec, observed), seed);
      EXPECT_FALSE(verdict.isOk()) << rows << " rows, seed " << seed;
      EXPECT_TRUE(verdict.message().find("never written") != std::string::npos ||
                  verdict.message().find("NaN") != std::string::npos)
          << verdict.message();
    }
    (*kernel)->family = own;
    EXPECT_TRUE(sharedBackend().free((*kernel)->handle).isOk());
  };
  for (const std::int64_t rows : {std::int64_t{40}, std::int64_t{12}}) {
    check(rows);
    std::thread([&] {
      ASSERT_TRUE(lowerThreadPriority(1));
      check(rows);
      EXPECT_GT(CachingAllocator::global().stats().scratch_bytes, 0) << "the outputs came from the scratch area";
    }).join();
  }
}

}  // namespace
}  // namespace shapevm::jit
