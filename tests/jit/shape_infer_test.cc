// SPDX-License-Identifier: Apache-2.0
// ShapeInferEngine policy (specialize / range with power-of-two buckets / symbolic after the
// recompile cap), grouping by dtype and layout, guards built from specs, guard coverage and
// miss explanations, token rewriting; and the HotPathDetector's regions on the reference
// workload's two variants.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "bytecode/module_io.h"
#include "bytecode/text_format.h"
#include "jit/hot_path.h"
#include "jit/shape_infer.h"
#include "support/tunables.h"

namespace shapevm::jit {
namespace {

OperandProfile tensorProfile(DType dtype, Shape shape, bool contiguous = true) {
  OperandProfile p;
  p.is_tensor = true;
  p.dtype = dtype;
  p.shape = shape;
  p.strides = contiguousStrides(shape);
  if (!contiguous && shape.rank() == 2) p.strides = Shape{1, shape[0]};
  return p;
}

ProfileRecord record(std::vector<OperandProfile> inputs, std::uint64_t last_seen) {
  return ProfileRecord{std::move(inputs), 1, last_seen};
}

class ShapeInferTest : public ::testing::Test {
 protected:
  void SetUp() override { Tunables::resetToDefaults(); }
  void TearDown() override { Tunables::resetToDefaults(); }
  std::vector<AttrValue> noAttrs() { return {}; }
};

TEST_F(ShapeInferTest, ASingleSignatureIsSpecialized) {
  std::vector<ProfileRecord> records = {
      record({tensorProfile(DType::Float32, {320, 128}), tensorProfile(DType::Float32, {128, 1024})}, 5)};
  auto inferred = inferSpec(OpId::MatMul, noAttrs(), records, 0);
  ASSERT_TRUE(inferred.hasValue());
  EXPECT_EQ(inferred->policy, "specialized");
  EXPECT_EQ(inferred->spec.signature(), "MatMul:(320,128)x(128,1024)");
  EXPECT_TRUE(inferred->spec.inputs[0].contiguous);
  EXPECT_EQ(inferred->observed[0], (Shape{320, 128}));
}

TEST_F(ShapeInferTest, AVaryingDimBecomesABucketedRange) {
  std::vector<ProfileRecord> records;
  std::uint64_t seen = 1;
  for (std::int64_t rows : {320, 640, 960}) {
    records.push_back(record({tensorProfile(DType::Float32, {rows, 128}), tensorProfile(DType::Float32, {128, 1024})}, seen++));
  }
  auto inferred = inferSpec(OpId::MatMul, noAttrs(), records, 1);
  ASSERT_TRUE(inferred.hasValue());
  EXPECT_EQ(inferred->policy, "range");
  EXPECT_EQ(inferred->spec.signature(), "MatMul:(256..1024,128)x(128,1024)");
  EXPECT_EQ(inferred->observed[0], (Shape{960, 128})) << "the newest record is the target";
  EXPECT_EQ(inferred->divisibility, 64) << "320, 640, 960 are all multiples of 64";
  ASSERT_TRUE(Tunables::set(Tunable::RangeBuckets, 0).isOk());
  inferred = inferSpec(OpId::MatMul, noAttrs(), records, 1);
  EXPECT_EQ(inferred->spec.signature(), "MatMul:(320..960,128)x(128,1024)");
}

TEST_F(ShapeInferTest, TheRecompileCapMakesEveryDimSymbolic) {
  ASSERT_TRUE(Tunables::set(Tunable::MaxRecompiles, 3).isOk());
  std::vector<ProfileRecord> records = {record({tensorProfile(DType::Float16, {7, 9})}, 1)};
  auto inferred = inferSpec(OpId::Tanh, noAttrs(), records, 3);
  ASSERT_TRUE(inferred.hasValue());
  EXPECT_EQ(inferred->spec.signature(), "Tanh:(?,?)");
  EXPECT_NE(inferred->policy.find("recompile cap 3"), std::string::npos);
}

TEST_F(ShapeInferTest, OnlyRecordsOfTheTargetsDtypeAndLayoutFormTheRange) {
  std::vector<ProfileRecord> records = {
      record({tensorProfile(DType::Float32, {4, 8})}, 1),
      record({tensorProfile(DType::Float32, {100, 8})}, 2),
      record({tensorProfile(DType::Float16, {6, 8})}, 3),
      record({tensorProfile(DType::Float16, {6, 8}, false)}, 2),
  };
  auto inferred = inferSpec(OpId::Neg, noAttrs(), records, 0);
  ASSERT_TRUE(inferred.hasValue());
  EXPECT_EQ(inferred->spec.inputs[0].dtype, DType::Float16);
  EXPECT_EQ(inferred->spec.signature(), "Neg:(6,8)") << "f32 and strided records are other groups";
  EXPECT_TRUE(inferred->spec.inputs[0].contiguous);
  records[3].last_seen = 9;
  inferred = inferSpec(OpId::Neg, noAttrs(), records, 0);
  EXPECT_FALSE(inferred->spec.inputs[0].contiguous);
  EXPECT_FALSE(inferSpec(OpId::Neg, noAttrs(), {}, 0).hasValue());
}

TEST_F(ShapeInferTest, GuardsAdmitExactlyTheSpec) {
  std::vector<ProfileRecord> records = {record({tensorProfile(DType::Float32, {20, 24})}, 1),
                                        record({tensorProfile(DType::Float32, {40, 24})}, 2)};
  auto inferred = inferSpec(OpId::Tanh, noAttrs(), records, 1);
  ASSERT_TRUE(inferred.hasValue());
  Guard guard = guardFor(inferred->spec);
  JitReason reason{};
  EXPECT_EQ(guardMissReason(guard, record({tensorProfile(DType::Float32, {64, 24})}, 0), &reason), "");
  EXPECT_EQ(guardMissReason(guard, record({tensorProfile(DType::Float32, {65, 24})}, 0), &reason),
            "dim 0 of input 0 [65,24] is 65, compiled for 16..64");
  EXPECT_EQ(reason, JitReason::GuardRange);
  EXPECT_EQ(guardMissReason(guard, record({tensorProfile(DType::Float32, {20, 25})}, 0), &reason),
            "dim 1 of input 0 [20,25] is 25, compiled for 24");
  EXPECT_EQ(guardMissReason(guard, record({tensorProfile(DType::BFloat16, {20, 24})}, 0), &reason),
            "input 0 is bfloat16, compiled for float32");
  EXPECT_EQ(reason, JitReason::GuardDtype);
  EXPECT_NE(guardMissReason(guard, record({tensorProfile(DType::Float32, {20, 24}, false)}, 0), &reason), "");
  EXPECT_EQ(reason, JitReason::GuardContiguity);
  EXPECT_NE(guardMissReason(guard, record({tensorProfile(DType::Float32, {20})}, 0), &reason), "");
  EXPECT_EQ(reason, JitReason::GuardRank);

  // Coverage: the range guard covers the specialized one, not the other way round.
  std::vector<ProfileRecord> first = {records[0]};
  Guard specialized = guardFor(inferSpec(OpId::Tanh, noAttrs(), first, 0)->spec);
  EXPECT_TRUE(guardCovers(guard, specialized));
  EXPECT_FALSE(guardCovers(specialized, guard));
}

TEST_F(ShapeInferTest, TokensShowTheCompiledRanges) {
  TensorDescriptor token;
  token.dtype = DType::Float32;
  token.dims = {DimToken::dynamic(0), DimToken::fixed(128)};
  OperandSpec spec;
  spec.rank = 2;
  spec.dims[0].lo = 256;
  spec.dims[0].hi = 1024;
  spec.dims[1].size = 128;
  EXPECT_EQ(rewriteToken(token, spec).toString(), "f32[?0:256..1024,128]");
  spec.dims[0] = DimSpec{};
  spec.dims[0].size = 320;
  EXPECT_EQ(rewriteToken(token, spec).toString(), "f32[?0:320..320,128]");
}

std::shared_ptr<Module> loadExample(const std::string& name) {
  auto module = loadModuleFile(std::string(SHAPEVM_SOURCE_DIR) + "/examples/" + name);
  EXPECT_TRUE(module.hasValue()) << module.status().toString();
  return std::make_shared<Module>(std::move(*module));
}

TEST(HotPathDetector, TheLoopedWorkloadsHotRegionIsItsLoopBody) {
  auto module = loadExample("lstm_loop.svasm");
  const Function& fn = module->functions[0];
  std::vector<Region> regions = findRegions(fn);
  int loops = 0;
  std::size_t sites = 0;
  for (const Region& region : regions) {
    sites += region.sites.size();
    if (region.kind != Region::Kind::Loop) continue;
    ++loops;
    EXPECT_EQ(fn.code[static_cast<std::size_t>(region.start_pc)].op, Opcode::LoopStart);
    EXPECT_EQ(fn.code[static_cast<std::size_t>(region.end_pc - 1)].op, Opcode::LoopEnd);
    for (int pc : region.pcs) {
      EXPECT_GT(pc, region.start_pc);
      EXPECT_LT(pc, region.end_pc);
    }
  }
  EXPECT_EQ(loops, 1);
  EXPECT_EQ(sites, fn.op_sites.size()) << "every site belongs to exactly one region";
}

TEST(HotPathDetector, TheFlatWorkloadIsOneStraightLineBlock) {
  auto module = loadExample("lstm_cell.svasm");
  std::vector<Region> regions = findRegions(module->functions[0]);
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_EQ(regions[0].kind, Region::Kind::Block);
  EXPECT_EQ(regions[0].sites.size(), module->functions[0].op_sites.size());
}

// Ticks <-> ns is calibrated against the clock over the process's life so far (ticksToNanos): in
// a process a few ms old, two conversions can differ by 15% under load. The tests below convert in
// both directions, so they first let the calibration span 50 ms (then it agrees within ~0.1%).
void settleTickCalibration() {
  static const bool settled = [] {
    (void)ticksToNanos(1);  // starts the calibration's span
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return true;
  }();
  (void)settled;
}

// A runtime whose sites each ran `calls` times for `nanos` in all (the interpreter's counters).
std::unique_ptr<FunctionRuntime> timedSites(std::size_t sites, std::uint64_t calls, const std::vector<double>& nanos) {
  settleTickCalibration();  // the tests convert these ticks back to ns
  auto runtime = std::make_unique<FunctionRuntime>();
  runtime->slots = std::make_unique<DispatchSlot[]>(sites);
  const double ticks_per_ns = 1e9 / ticksToNanos(1'000'000'000);
  for (std::size_t s = 0; s < sites; ++s) {
    runtime->slots[s].calls.store(calls);
    runtime->slots[s].ticks.store(static_cast<std::uint64_t>(nanos[s] * ticks_per_ns));
  }
  return runtime;
}

TEST(HotPathDetector, SitesCheaperInterpretedThanALaunchStayInterpretedAtO2) {
  Tunables::resetToDefaults();
  // 1000 calls: 300 us in all is 300 ns per call (a 1-element op), 5 ms is 5 us.
  const auto tiny_owned = timedSites(2, 1000, {300e3, 200e3});
  const FunctionRuntime& tiny = *tiny_owned;
  EXPECT_NEAR(sitesMeanNanos({0}, tiny), 300.0, 3.0);
  EXPECT_NEAR(sitesMeanNanos({0, 1}, tiny), 500.0, 5.0) << "a range: its sites' time per execution";
  InterpretedCost cost;
  EXPECT_TRUE(cheaperInterpreted(cost, {0}, tiny, 2));
  EXPECT_TRUE(cheaperInterpreted(cost, {0, 1}, tiny, 2));
  EXPECT_FALSE(cheaperInterpreted(cost, {0}, tiny, 1)) << "O1 compiles every hot op";
  EXPECT_FALSE(cheaperInterpreted(cost, {0}, *timedSites(1, 0, {0.0}), 2)) << "never run: no evidence";
  EXPECT_FALSE(cheaperInterpreted(cost, {0}, *timedSites(1, 1000, {0.0}), 2)) << "not timed (profiling off)";
  ASSERT_TRUE(Tunables::set(Tunable::HotMs, 0).isOk());
  EXPECT_FALSE(cheaperInterpreted(cost, {0}, tiny, 2)) << "hot_ms = 0 compiles whatever is hot";
  Tunables::resetToDefaults();
}

// Adds `calls` executions of `ns` each to site 0 of `runtime`.
void addCalls(FunctionRuntime& runtime, std::uint64_t calls, double ns) {
  const double ticks_per_ns = 1e9 / ticksToNanos(1'000'000'000);
  runtime.slots[0].calls.fetch_add(calls);
  runtime.slots[0].ticks.fetch_add(static_cast<std::uint64_t>(static_cast<double>(calls) * ns * ticks_per_ns));
}

TEST(HotPathDetector, AnExpensiveSiteCompilesOnceItsIntervalsAgree) {
  settleTickCalibration();
  Tunables::resetToDefaults();
  auto owned = timedSites(1, 1000, {3e6});  // 3 us per call: over the launch, not 10x over
  FunctionRuntime& runtime = *owned;
  InterpretedCost cost;
  EXPECT_TRUE(cheaperInterpreted(cost, {0}, runtime, 2)) << "the first look starts an interval";
  for (int interval = 1; interval < InterpretedCost::kIntervals; ++interval) {
    addCalls(runtime, InterpretedCost::kMinInterval, 3000.0);
    EXPECT_TRUE(cheaperInterpreted(cost, {0}, runtime, 2)) << "interval " << interval;
  }
  addCalls(runtime, InterpretedCost::kMinInterval, 3000.0);
  EXPECT_FALSE(cheaperInterpreted(cost, {0}, runtime, 2));
  EXPECT_NEAR(cost.best_ns, 3000.0, 30.0);
  // 10x over the launch: compiled after one interval.
  auto big = timedSites(1, 1000, {20e6});
  InterpretedCost big_cost;
  EXPECT_TRUE(cheaperInterpreted(big_cost, {0}, *big, 2));
  addCalls(*big, InterpretedCost::kMinInterval, 20000.0);
  EXPECT_FALSE(cheaperInterpreted(big_cost, {0}, *big, 2));
  Tunables::resetToDefaults();
}

TEST(HotPathDetector, APreemptedCallDoesNotMakeATinySiteCompile) {
  settleTickCalibration();
  Tunables::resetToDefaults();
  // 1000 calls of 300 ns, one of which was preempted for 10 ms: the cumulative mean is 10.3 us.
  auto owned = timedSites(1, 1000, {300e3 + 10e6});
  FunctionRuntime& runtime = *owned;
  InterpretedCost cost;
  EXPECT_TRUE(cheaperInterpreted(cost, {0}, runtime, 2));
  addCalls(runtime, InterpretedCost::kMinInterval, 5000.0);  // a slow interval (another preemption)
  EXPECT_TRUE(cheaperInterpreted(cost, {0}, runtime, 2)) << "one slow interval is not enough";
  for (int interval = 0; interval < 2 * InterpretedCost::kIntervals; ++interval) {  // clean: 300 ns per call
    addCalls(runtime, 4, 300.0);
    EXPECT_TRUE(cheaperInterpreted(cost, {0}, runtime, 2)) << "interval " << interval;
  }
  EXPECT_NEAR(cost.best_ns, 300.0, 10.0) << "the clean intervals' mean";
  Tunables::resetToDefaults();
}

}  // namespace
}  // namespace shapevm::jit
